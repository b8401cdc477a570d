"""`--output-dir` on S3 with a source the job's credentials can only read: moto's server with its
IAM enforcement on (`INITIAL_NO_AUTH_ACTION_COUNT`: the IAM set-up calls only go unauthenticated),
a `reader` user allowed `s3:GetObject` and `s3:ListBucket` on the backup bucket and nothing else,
a `writer` user for the output bucket. A snapshot as of a time is written from one bucket to the
other; a second run is SIGKILLed at a random moment and rerun. Both outputs hold what the round
model decides, are the same objects, and the backup bucket's objects are unchanged.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import urllib.parse

import pytest
from e2ekit import LOCAL_SUBMIT, REPO
from faultkit import kill_session, start_submit
from round_model import expected_archive, snapshot
from s3kit import moto_server, upload

from compaction.tools.generator import generate_log_dir

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto")

pytestmark = [pytest.mark.slow, pytest.mark.spark]

REGION = "us-east-1"
PARTS = ("ledger-0", "ledger-1")
READ_ONLY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": ["arn:aws:s3:::backup", "arn:aws:s3:::backup/*"],
        }
    ],
}
READ_WRITE = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
IAM_SET_UP_CALLS = 6  # create_user, put_user_policy, create_access_key for each of two users


@pytest.fixture(scope="module")
def iam_s3(tmp_path_factory):
    """moto's server with IAM enforced; yields (endpoint, {user: (key id, secret)})."""
    log = str(tmp_path_factory.mktemp("moto-iam") / "server.log")
    with moto_server(log, {"INITIAL_NO_AUTH_ACTION_COUNT": str(IAM_SET_UP_CALLS)}) as endpoint:
        yield endpoint, _users(endpoint)


def _users(endpoint: str) -> dict[str, tuple[str, str]]:
    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        aws_access_key_id="set-up",
        aws_secret_access_key="set-up",
        region_name=REGION,
    )
    keys = {}
    for user, policy in (("reader", READ_ONLY), ("writer", READ_WRITE)):
        iam.create_user(UserName=user)
        iam.put_user_policy(UserName=user, PolicyName=user, PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])
    return keys


def _client(endpoint, key):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
        region_name=REGION,
    )


def _user_info(key) -> str:
    """KEY:SECRET for a URI: moto's secrets hold '/' and '+', percent-encoded (pyarrow decodes them)."""
    return f"{key[0]}:{urllib.parse.quote(key[1], safe='')}"


def _objects(client, bucket: str, prefix: str = "") -> dict[str, str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def _download(client, bucket: str, prefix: str, dest: str) -> None:
    for key in _objects(client, bucket, prefix):
        path = os.path.join(dest, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        client.download_file(bucket, key, path)


@pytest.fixture(scope="module")
def runs(iam_s3, tmp_path_factory):
    endpoint, keys = iam_s3
    root = str(tmp_path_factory.mktemp("archive-s3"))
    local = os.path.join(root, "input")
    generate_log_dir(
        local,
        topics=(("ledger", 2),),
        records=1500,
        keys=100,
        codec="mixed",
        batch_records=(1, 10),
        segment_bytes=20_000,
        tombstone_ratio=0.15,
        transactions=0.45,
        idempotent=0.25,
        abort_ratio=0.35,
        txn_producers=3,
        txn_batches=3,
        seed=17,
    )
    writer, reader = _client(endpoint, keys["writer"]), _client(endpoint, keys["reader"])
    writer.create_bucket(Bucket="out")
    upload(writer, "backup", local)
    with pytest.raises(Exception, match="AccessDenied"):  # the job's source credentials cannot write
        reader.put_object(Bucket="backup", Key="logs/probe", Body=b"x")
    before = _objects(writer, "backup")
    stamps = [b.max_ts for p in PARTS for b in snapshot(os.path.join(local, p)).batches]
    time_ms = random.Random(17).randint(min(stamps), max(stamps))
    source = f"s3://{_user_info(keys['reader'])}@backup/logs"
    out = lambda prefix: f"s3://{_user_info(keys['writer'])}@out/{prefix}"  # noqa: E731
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}
    args = ("--as-of-time", str(time_ms))

    def run(prefix):
        cmd = [
            *LOCAL_SUBMIT,
            "--log-dir",
            source,
            "--output-dir",
            out(prefix),
            "--report",
            os.path.join(root, f"{prefix}.json"),
            *args,
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
        return json.load(open(os.path.join(root, f"{prefix}.json")))

    report = run("reference")
    proc = start_submit(
        [source], os.path.join(root, "killed.json"), "--output-dir", out("killed"), *args, env=env
    )
    time.sleep(random.Random(18).uniform(4.0, 14.0))
    interrupted = proc.poll() is None
    kill_session(proc.pid)
    proc.wait()
    rerun = run("killed")
    for prefix in ("reference", "killed"):
        _download(writer, "out", prefix, os.path.join(root, "download"))
    return {
        "root": root,
        "local": local,
        "time_ms": time_ms,
        "report": report,
        "rerun": rerun,
        "interrupted": interrupted,
        "before": before,
        "after": _objects(writer, "backup"),
        "writer": writer,
    }


def test_the_backup_bucket_is_unchanged(runs):
    assert runs["after"] == runs["before"]


def test_the_snapshot_holds_what_the_model_decides(runs):
    for prefix in ("reference", "killed"):
        out = os.path.join(runs["root"], "download", prefix)
        for part in PARTS:
            expected, entries, end, _ = expected_archive(
                snapshot(os.path.join(runs["local"], part)), runs["time_ms"], None, runs["time_ms"]
            )
            got = snapshot(os.path.join(out, part))
            assert got.batches == expected, (prefix, part)
            assert {e for _, _, es in got.segments for e in es} == entries
            assert got.active_base == end
        assert os.path.exists(os.path.join(out, "recovery-point-offset-checkpoint"))
    assert {p["status"] for p in runs["report"]["partitions"]} == {"cleaned"}


def test_a_killed_run_rerun_writes_the_same_objects(runs):
    assert runs["interrupted"], "the run finished before it was killed"
    ref = {k.split("/", 1)[1]: e for k, e in _objects(runs["writer"], "out", "reference/").items()}
    killed = {k.split("/", 1)[1]: e for k, e in _objects(runs["writer"], "out", "killed/").items()}
    data = lambda d: {k: e for k, e in d.items() if not k.startswith(".archived-")}  # noqa: E731
    assert data(killed) == data(ref)
    assert not [k for k in _objects(runs["writer"], "out") if STAGING in k]


STAGING = ".kafka-compaction-staging/"
