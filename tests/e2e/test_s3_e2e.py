"""The job against a real S3 protocol server (moto's, started here on 127.0.0.1), the way a user
points it at MinIO or Ceph: endpoint in `AWS_ENDPOINT_URL`, credentials in the URI.

Two spark-submits over two buckets that hold the same generated log dir:

1. `s3://KEY:SECRET@crashed/logs` alone, SIGKILLed in the middle of its commit (the second
   partition's old files renamed to `.deleted`, its `.swap` files not yet renamed: copies and
   deletes on S3);
2. one round over `s3://KEY:SECRET@clean/logs` (uninterrupted) and the crashed bucket again.

Then both buckets hold exactly the records an uninterrupted run keeps (kafka-python decodes the
downloaded segments; indexes pass the broker's checks), the same object names, and no object of
ours: no directory marker, `.cleaned`, `.swap`, `.deleted`, `.tmp` or intent file. The secret key
is in no log line and not in the report, nor in the report's HTML page (`--report-html` to a third
bucket, written there through the same storage layer).

A fourth spark-submit erases listed keys (`--erase-keys --erase-only`) in a bucket of its own,
its key file read from the bucket.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from e2ekit import LOCAL_SUBMIT, REPO, decode_partition
from faultkit import assert_loads, expected_after, kill_session, parts, start_submit
from s3kit import KEY, REGION, SECRET, client, moto_server, objects, upload, versions

from compaction.tools.generator import generate_log_dir

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto")

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    with moto_server(str(tmp_path_factory.mktemp("moto") / "server.log")) as endpoint:
        yield endpoint


def _client(endpoint):
    return client(endpoint)


_upload, _objects = upload, objects


def _download(client, bucket: str, dest: str) -> None:
    """The plain download loop a user writes: every object to a file of its key."""
    for key in _objects(client, bucket):
        path = os.path.join(dest, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        client.download_file(bucket, key, path)


@pytest.fixture(scope="module")
def rounds(s3_endpoint, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("s3"))
    local = os.path.join(root, "input")
    generate_log_dir(
        local,
        topics=(("orders", 2),),
        records=1500,
        keys=60,
        codec="mixed",
        segment_bytes=8000,
        tombstone_ratio=0.05,
        seed=11,
    )
    expected = {p: expected_after(os.path.join(local, p)) for p in parts(local)}
    client = _client(s3_endpoint)
    for bucket in ("clean", "crashed"):
        _upload(client, bucket, local)
    env = {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}
    uri = {b: f"s3://{KEY}:{SECRET}@{b}/logs" for b in ("clean", "crashed")}

    # 1. crashed: SIGKILL in the second partition's commit (old files renamed to .deleted).
    mark = os.path.join(root, "crashed.mark")
    proc = start_submit(
        [uri["crashed"]],
        os.path.join(root, "crash-report.json"),
        "--now-ms",
        str(NOW),
        env={**env, "COMPACTION_CRASH_AT": "deleted:2", "COMPACTION_CRASH_MARK": mark},
    )
    deadline = time.monotonic() + 600
    while proc.poll() is None and not os.path.exists(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not os.path.exists(mark):
        kill_session(proc.pid)
        pytest.fail(f"no crash mark: {proc.stderr.read()[-4000:]}")
    kill_session(proc.pid)
    proc.wait(timeout=60)
    crash_err = proc.stderr.read()
    mid_crash = _objects(client, "crashed")

    # 2. one round: the clean bucket for the first time, the crashed one again.
    report_path = os.path.join(root, "report.json")
    client.create_bucket(Bucket="reports")
    # Every partition cut into ranges, whose tasks meet through an exchange directory on S3 too.
    cmd = [
        *LOCAL_SUBMIT,
        "--log-dir",
        uri["clean"],
        "--log-dir",
        uri["crashed"],
        "--now-ms",
        str(NOW),
        "--report",
        report_path,
        "--report-html",
        f"s3://{KEY}:{SECRET}@reports/round.html",
        "--conf",
        "spark.kafka.compaction.partitionTaskMaxBytes=0",
        "--conf",
        f"spark.kafka.compaction.exchangeDir=s3://{KEY}:{SECRET}@reports/exchange",
    ]
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, **env},
    )
    assert done.returncode == 0, done.stderr[-6000:]
    report = json.load(open(report_path))
    err = crash_err + done.stdout + done.stderr
    out = {}
    for bucket in ("clean", "crashed"):
        out[bucket] = os.path.join(root, "out", bucket)
        _download(client, bucket, out[bucket])
    page = client.get_object(Bucket="reports", Key="round.html")["Body"].read().decode()
    reports = sorted(o["Key"] for o in client.list_objects_v2(Bucket="reports").get("Contents", []))
    return {
        "client": client,
        "expected": expected,
        "report": report,
        "err": err,
        "out": out,
        "mid_crash": mid_crash,
        "root": root,
        "page": page,
        "reports": reports,
    }


def test_the_crash_happened_mid_commit(rounds):
    names = rounds["mid_crash"]
    assert any(k.endswith(".deleted") for k in names), sorted(names)
    assert any(k.endswith(".swap") for k in names), sorted(names)
    assert not any(k.endswith("/") for k in names), "directory markers written during the commit"


@pytest.mark.parametrize("bucket", ["clean", "crashed"])
def test_compacted_record_for_record(rounds, bucket):
    log_dir = os.path.join(rounds["out"][bucket], "logs")
    assert parts(log_dir) == sorted(rounds["expected"])
    for p in parts(log_dir):
        assert_loads(os.path.join(log_dir, p))
        assert decode_partition(os.path.join(log_dir, p)) == rounds["expected"][p], p
    by_dir = {(e["logDir"], e["topic"], e["partition"]): e["status"] for e in rounds["report"]["partitions"]}
    assert by_dir[(f"s3://***@{bucket}/logs", "orders", 0)] == "cleaned"


def test_interrupted_bucket_ends_like_the_uninterrupted_one(rounds):
    clean, crashed = (_objects(rounds["client"], b) for b in ("clean", "crashed"))
    assert sorted(clean) == sorted(crashed)
    for key in clean:
        if key.endswith((".log", ".index", ".timeindex")):
            a, b = (open(os.path.join(rounds["out"][x], key), "rb").read() for x in ("clean", "crashed"))
            assert a == b, key


@pytest.mark.parametrize("bucket", ["clean", "crashed"])
def test_no_object_of_ours_is_left(rounds, bucket):
    keys = _objects(rounds["client"], bucket)
    transient = ("/", ".cleaned", ".swap", ".deleted", ".tmp", "compaction-commit.json")
    ours = [k for k in keys if k.endswith(transient)]
    assert ours == []


def test_the_compiled_kernels_are_kept_beside_the_first_log_dir_in_its_bucket(rounds):
    """The one object a round leaves on purpose: its workers' compiled kernels, one checked archive
    of this host's key, for executors that start with an empty temp dir."""
    from compaction.kernels.cache import current_key, verify
    from compaction.settings import KERNEL_CACHE_NAME

    name = f"{KERNEL_CACHE_NAME}/{current_key().archive_name}"
    assert name in _objects(rounds["client"], "clean")
    body = rounds["client"].get_object(Bucket="clean", Key=name)["Body"].read()
    assert any(rel.startswith("kernels/") for rel in verify(body, current_key()))


def test_the_ranges_met_through_s3_and_left_nothing_there(rounds):
    assert rounds["report"]["timings"].get("rangesSeconds"), rounds["report"]["timings"]
    assert rounds["reports"] == ["round.html"]


def test_credentials_in_the_uri_reach_no_log_line_nor_the_report(rounds):
    report_text = json.dumps(rounds["report"])
    assert SECRET not in report_text and KEY not in report_text
    assert rounds["report"]["args"]["log_dirs"] == ["s3://***@clean/logs", "s3://***@crashed/logs"]
    assert "cleaned" in rounds["err"]  # the log lines are there, ...
    assert SECRET not in rounds["err"] and KEY not in rounds["err"]  # ... without the credentials


def test_the_html_page_is_on_s3_without_the_credentials(rounds):
    page = rounds["page"]
    assert page.startswith("<!DOCTYPE html>") and "s3://***@clean/logs" in page
    assert SECRET not in page and KEY not in page
    assert rounds["report"]["args"]["report_html"] == "s3://***@reports/round.html"
    assert sorted(_objects(rounds["client"], "reports")) == ["round.html"]  # no temp object left


def test_erase_keys_on_s3(s3_endpoint, tmp_path):
    """`--erase-keys --erase-only` on a bucket (every codec, transactions, tombstones), SIGKILLed
    in its second partition's commit, then run again: every record but the listed keys' stays,
    the active segment erased too, indexes valid, no object of ours left."""
    root = str(tmp_path)
    local = os.path.join(root, "input")
    generate_log_dir(
        local,
        topics=(("orders", 2),),
        records=1500,
        keys=60,
        codec="mixed",
        segment_bytes=8000,
        tombstone_ratio=0.05,
        transactions=0.3,
        abort_ratio=0.3,
        seed=13,
    )
    listed = {b"key-000004", b"key-000021", b"key-000042"}
    keys = os.path.join(root, "keys.txt")
    with open(keys, "w") as fh:
        fh.write("".join(f"orders\t{k.decode()}\n" for k in sorted(listed)))
    client = _client(s3_endpoint)
    _upload(client, "erase", local)
    client.upload_file(keys, "erase", "requests/keys.txt")  # read by the driver from the bucket
    env = {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}
    report_path = os.path.join(root, "report.json")
    erase = [
        "--now-ms",
        str(NOW),
        "--erase-keys",
        f"s3://{KEY}:{SECRET}@erase/requests/keys.txt",
        "--erase-only",
    ]
    mark = os.path.join(root, "crashed.mark")
    proc = start_submit(
        [f"s3://{KEY}:{SECRET}@erase/logs"],
        os.path.join(root, "crash-report.json"),
        *erase,
        env={**env, "COMPACTION_CRASH_AT": "deleted:2", "COMPACTION_CRASH_MARK": mark},
    )
    deadline = time.monotonic() + 600
    while proc.poll() is None and not os.path.exists(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_session(proc.pid)
    proc.wait(timeout=60)
    assert os.path.exists(mark), proc.stderr.read()[-4000:]
    assert [k for k in _objects(client, "erase") if k.endswith(".deleted")]  # killed mid-commit
    cmd = [
        *LOCAL_SUBMIT,
        "--log-dir",
        f"s3://{KEY}:{SECRET}@erase/logs",
        "--report",
        report_path,
        *erase,
    ]
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, **env},
    )
    assert done.returncode == 0, done.stderr[-6000:]
    out = os.path.join(root, "out")
    _download(client, "erase", out)
    for p in parts(local):
        part_dir = os.path.join(out, "logs", p)
        assert_loads(part_dir)
        assert decode_partition(part_dir) == [
            r for r in decode_partition(os.path.join(local, p)) if r.key not in listed
        ], p
    report = json.load(open(report_path))
    # The partition the crash left half-swapped is finished by recovery and erased again (nothing
    # left to erase there: skipped), the other erased now.
    assert {e["status"] for e in report["partitions"]} <= {"cleaned", "skipped"}, report["partitions"]
    transient = ("/", ".cleaned", ".swap", ".deleted", ".tmp", "compaction-commit.json")
    assert [k for k in _objects(client, "erase") if k.endswith(transient)] == []
    assert SECRET not in json.dumps(report) and SECRET not in done.stdout + done.stderr


def test_versioned_bucket_said_refused_for_erasing_then_purged(s3_endpoint, tmp_path):
    """A bucket with versioning on: a round says so at WARN and leaves the replaced segments as
    noncurrent versions; an erasing pass is refused (exit 2, nothing written) until
    `--purge-noncurrent-versions`, which then leaves no old version nor delete marker of the
    partitions' segment objects (so no erased record in any version), and every other object's
    versions as they were. The log dir is given as `s3a://`, Hadoop's name for the same bucket."""
    root = str(tmp_path)
    local = os.path.join(root, "input")
    generate_log_dir(
        local,
        topics=(("orders", 2), ("payments", 1)),
        records=1500,
        keys=60,
        codec="none",
        segment_bytes=8000,
        tombstone_ratio=0.05,
        seed=17,
    )
    listed = {b"key-000004", b"key-000021", b"key-000042"}
    keys = os.path.join(root, "keys.txt")
    with open(keys, "w") as fh:
        fh.write("".join(f"orders\t{k.decode()}\n" for k in sorted(listed)))
    c = client(s3_endpoint)
    c.create_bucket(Bucket="versioned")
    c.put_bucket_versioning(Bucket="versioned", VersioningConfiguration={"Status": "Enabled"})
    upload(c, "versioned", local, create=False)
    # 2 versions each
    upload(c, "versioned", os.path.join(local, "payments-0"), prefix="logs/payments-0/", create=False)
    c.put_object(Bucket="versioned", Key="notes/readme.txt", Body=b"one")
    c.put_object(Bucket="versioned", Key="notes/readme.txt", Body=b"two")
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    log_dir = f"s3a://{KEY}:{SECRET}@versioned/logs"
    base = [
        *LOCAL_SUBMIT,
        "--log-dir",
        log_dir,
        "--now-ms",
        str(NOW),
        "--topics",
        "orders",
    ]

    def others():
        vs, ms = versions(c, "versioned")
        return sorted((v["Key"], v["VersionId"]) for v in vs + ms if not v["Key"].startswith("logs/orders-"))

    def noncurrent_in_orders():
        vs, ms = versions(c, "versioned")
        return [v["Key"] for v in vs if not v["IsLatest"] and v["Key"].startswith("logs/orders-")] + [
            m["Key"] for m in ms if m["Key"].startswith("logs/orders-")
        ]

    # 1. a plain round: said at WARN, and the replaced segments stay as noncurrent versions
    done = subprocess.run(base, capture_output=True, text=True, cwd=REPO, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-6000:]
    assert (
        "WARN" in done.stdout + done.stderr
        and "bucket versioned is versioned (Enabled)" in done.stdout + done.stderr
    )
    assert noncurrent_in_orders(), "a round on a versioned bucket left no noncurrent version"
    untouched = others()
    assert any(key.startswith("logs/payments-0/") for key, _ in untouched)
    # 2. erasing without the purge: refused before Spark, nothing written
    erase = ["--erase-keys", keys, "--erase-only"]
    before = versions(c, "versioned")
    refused = subprocess.run(base + erase, capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "is versioned (Enabled)" in refused.stderr and "--purge-noncurrent-versions" in refused.stderr
    assert SECRET not in refused.stderr
    assert versions(c, "versioned") == before
    # 3. erasing with the purge
    report_path = os.path.join(root, "report.json")
    done = subprocess.run(
        base + erase + ["--purge-noncurrent-versions", "--report", report_path],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    assert {e["status"] for e in json.load(open(report_path))["partitions"]} == {"cleaned"}
    assert noncurrent_in_orders() == []
    assert others() == untouched  # the unselected topic's and the other objects' versions stay
    vs, _ = versions(c, "versioned")
    for v in vs:  # uncompressed batches: a listed key in any version would show as its bytes
        if v["Key"].startswith("logs/orders-"):
            body = c.get_object(Bucket="versioned", Key=v["Key"], VersionId=v["VersionId"])["Body"].read()
            assert not any(k in body for k in listed), v["Key"]
    out = os.path.join(root, "out")
    _download(c, "versioned", out)
    for p in ("orders-0", "orders-1"):
        assert_loads(os.path.join(out, "logs", p))
        got = {r.key for r in decode_partition(os.path.join(out, "logs", p))}
        assert got and not got & listed, p
