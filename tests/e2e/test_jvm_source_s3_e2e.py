"""`kafka_log_jvm` on an S3 protocol server (moto's, started here on 127.0.0.1) through Hadoop's
S3A connector, configured as a Spark user configures it (`spark.hadoop.fs.s3a.*`, hadoop-aws of
pyspark's Hadoop version on `spark.jars`): the same rows as `kafka_log` reading the same bucket,
for `s3a://` and for `s3://` (read as `s3a://`); the pushed-down count; a flipped byte failing the
read naming the object, byte and offset; a partition dir with a stranger's object refused by both
readers. In one SparkSession of its own.

Needs javac and the hadoop-aws jars (tests/helpers/hadoop_aws.py, which .ci/run installs): skipped
without them, failed under CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import envkit
import hadoop_aws
import pytest
from s3kit import KEY, REGION, SECRET, client, moto_server, upload

from compaction.tools.generator import generate_log_dir

pytest.importorskip("boto3")
pytest.importorskip("moto")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Runs in its own process: each case prints one JSON line {"case", "ok" | "error", ...}.
SCRIPT = r"""
import json, sys
from pyspark.sql import SparkSession
import compaction, compaction.jvm

endpoint, region, key, secret = sys.argv[1:5]
jars, cases = json.loads(sys.argv[5]), json.loads(sys.argv[6])
builder = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
           .config("spark.sql.shuffle.partitions", "2")
           .config("spark.jars", compaction.jvm.reader_jar())
           # local mode runs tasks in the driver: on its class path the 616 MB SDK bundle is not
           # copied into the session's userFiles, as spark.jars would copy it
           .config("spark.driver.extraClassPath", ":".join(jars)))
# What a user sets for an S3-compatible store (on AWS itself: the credentials alone, or none
# with an instance profile).
for k, v in {"endpoint": endpoint, "endpoint.region": region, "path.style.access": "true",
             "connection.ssl.enabled": "false", "access.key": key, "secret.key": secret}.items():
    builder = builder.config("spark.hadoop.fs.s3a." + k, v)
spark = builder.getOrCreate()
spark.dataSource.register(compaction.KafkaLogDataSource)

def read(fmt, root, opts):
    r = spark.read.format(fmt)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load(root)

def rows(df):
    return sorted(map(repr, df.collect()))

for case in cases:
    out = {"case": case["name"]}
    opts = case.get("options", {})
    for fmt, root in (("kafka_log_jvm", case["jvm"]), ("kafka_log", case.get("py"))):
        if root is None:
            continue
        try:
            df = read(fmt, root, opts)
            out[fmt] = rows(df)
            out[fmt + "_schema"] = df.schema.simpleString()
            if fmt == "kafka_log_jvm":
                out["count"] = df.count()  # answered from the batch headers, read through S3A
        except Exception as exc:
            out[fmt + "_error"] = str(exc)[:3000]
    print("CASE " + json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    envkit.need_javac()
    hadoop_aws.require()
    tmp = tmp_path_factory.mktemp("jvm-s3")
    mixed = tmp / "mixed"
    generate_log_dir(
        str(mixed),
        topics=(("orders", 2), ("users", 1)),
        records=800,
        keys=50,
        codec="mixed",
        segment_bytes=30_000,
        tombstone_ratio=0.1,
        transactions=0.3,
        abort_ratio=0.3,
        idempotent=0.2,
        headers=2,
        seed=11,
    )
    bad = tmp / "bad"
    generate_log_dir(str(bad), topics=(("orders", 1),), records=200, keys=20, codec="none", seed=12)
    bad_seg = sorted((bad / "orders-0").glob("*.log"))[0]
    data = bytearray(bad_seg.read_bytes())
    data[-3] ^= 0xFF
    bad_seg.write_bytes(bytes(data))
    stranger = tmp / "stranger"
    generate_log_dir(str(stranger), topics=(("orders", 1),), records=60, keys=10, seed=13)
    (stranger / "orders-0" / "notes.txt").write_bytes(b"x")
    with moto_server(str(tmp / "moto.log")) as endpoint:
        s3 = client(endpoint)
        upload(s3, "archive", str(mixed), prefix="kafka-logs/")
        upload(s3, "archive", str(bad), prefix="bad/", create=False)
        upload(s3, "archive", str(stranger), prefix="stranger/", create=False)
        cases = [
            {"name": "s3a", "jvm": "s3a://archive/kafka-logs", "py": "s3://archive/kafka-logs"},
            {"name": "s3", "jvm": "s3://archive/kafka-logs"},
            {
                "name": "s3a_headers",
                "jvm": "s3a://archive/kafka-logs",
                "py": "s3://archive/kafka-logs",
                "options": {"includeHeaders": "true", "subscribe": "orders"},
            },
            {"name": "bad", "jvm": "s3a://archive/bad", "py": "s3://archive/bad"},
            {"name": "stranger", "jvm": "s3a://archive/stranger", "py": "s3://archive/stranger"},
        ]
        # kafka_log reads the bucket through pyarrow, configured by the environment.
        env = dict(
            os.environ,
            PYSPARK_PYTHON=sys.executable,
            AWS_ACCESS_KEY_ID=KEY,
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_DEFAULT_REGION=REGION,
            AWS_ENDPOINT_URL=endpoint,
        )
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                SCRIPT,
                *(endpoint, REGION, KEY, SECRET),
                json.dumps(hadoop_aws.jars()),
                json.dumps(cases),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CASE "):
            case = json.loads(line[5:])
            out[case["case"]] = case
    assert len(out) == len(cases), (proc.returncode, proc.stdout[-3000:], proc.stderr[-5000:])
    out["_bad"] = bad_seg.relative_to(bad).as_posix()
    yield out
    shutil.rmtree(tmp, ignore_errors=True)


def _same(case: dict) -> None:
    assert "kafka_log_jvm_error" not in case, case["kafka_log_jvm_error"]
    assert "kafka_log_error" not in case, case["kafka_log_error"]
    assert case["kafka_log_jvm_schema"] == case["kafka_log_schema"]
    assert case["kafka_log_jvm"] == case["kafka_log"]
    assert case["count"] == len(case["kafka_log"]) > 0


@pytest.mark.parametrize("name", ["s3a", "s3a_headers"])
def test_a_log_dir_on_s3_reads_as_kafka_log_reads_it(results, name):
    _same(results[name])


def test_s3_is_read_as_s3a(results):
    case = results["s3"]
    assert "kafka_log_jvm_error" not in case, case["kafka_log_jvm_error"]
    assert case["kafka_log_jvm"] == results["s3a"]["kafka_log"]
    assert case["count"] == len(results["s3a"]["kafka_log"]) > 500


def test_a_bad_crc_on_s3_fails_naming_the_object_byte_and_offset(results):
    error = results["bad"].get("kafka_log_jvm_error", "")
    assert f"s3a://archive/bad/{results['_bad']}: byte " in error, error
    assert "checksum mismatch" in error and "(offset " in error, error
    assert "checksum mismatch" in results["bad"].get("kafka_log_error", ""), results["bad"]


def test_a_strangers_object_in_a_partition_dir_is_refused_by_both(results):
    for reader in ("kafka_log_jvm", "kafka_log"):
        error = results["stranger"].get(f"{reader}_error", "")
        assert (
            "unexpected file in partition dir: " in error
            and "orders-0/notes.txt: 'notes.txt' is not a segment" in error
        ), (
            reader,
            error,
        )
