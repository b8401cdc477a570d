"""The job on a real Spark standalone cluster (a master and two 1-core workers on 127.0.0.1).

Started from the pyspark package's own `bin/spark-class` on free ports, killed at the end whatever
happens (bench/cluster.py's StandaloneCluster). The executors run a Python that has the job's
dependencies but not this repo's editable install, so `compaction` can only come from the
`--py-files` zip that spark-submit.sh ships: the test fails if the job works in local mode only.
The output is decoded with kafka-python.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from e2ekit import REPO, decode_partition, latest_per_key

from compaction.format.checkpoint import parse_offset_checkpoint

_spec = importlib.util.spec_from_file_location("bench_cluster", os.path.join(REPO, "bench", "cluster.py"))
standalone = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(standalone)

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]

TOPIC, PARTITIONS = "orders", 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    log_dir = root / "kafka-logs"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "compaction",
            "generate",
            str(log_dir),
            "--topics",
            f"{TOPIC}:{PARTITIONS}",
            "--records",
            "3000",
            "--keys",
            "400",
            "--codec",
            "mixed",
            "--segment-bytes",
            "40000",
            "--seed",
            "7",
        ],
        check=True,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )
    before = {p: decode_partition(str(log_dir / f"{TOPIC}-{p}")) for p in range(PARTITIONS)}
    python = standalone.executor_python(root)
    report_path = root / "report.json"
    with standalone.StandaloneCluster(root / "spark", timeout=120) as cluster:
        cluster.add_worker(2)
        # every partition cut into ranges: the ranges stage's tasks, one per worker, meet
        # through an exchange directory beside the log dir (not local mode: no shared temp dir)
        code, _, stderr = standalone.submit(cluster, python, log_dir, report_path, "--conf",
                                            "spark.kafka.compaction.partitionTaskMaxBytes=0", timeout=400)  # fmt: skip
        zips = standalone.executor_zips(cluster)
        apps = cluster.state().get("completedapps", [])
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return {
        "code": code,
        "stderr": stderr,
        "report": report,
        "log_dir": log_dir,
        "before": before,
        "zips": zips,
        "apps": apps,
        "python": python,
    }


def test_the_exchange_directory_is_removed(run):
    assert run["report"]["timings"].get("rangesSeconds"), run["report"]["timings"]
    assert not [p.name for p in run["log_dir"].parent.iterdir() if p.name.startswith(".kafka-compaction-exchange")]


def test_job_exits_0_and_cleans_every_partition(run):
    assert run["code"] == 0, run["stderr"]
    parts = run["report"]["partitions"]
    assert sorted(p["partition"] for p in parts) == list(range(PARTITIONS))
    assert all(p["status"] == "cleaned" for p in parts), parts


def test_latest_record_of_each_key_below_the_bound_kafka_python(run):
    for p in run["report"]["partitions"]:
        bound = p["firstUncleanableOffset"]
        before = run["before"][p["partition"]]
        after = decode_partition(str(run["log_dir"] / f"{TOPIC}-{p['partition']}"))
        expected = latest_per_key(before, bound)
        below = [r for r in after if r.offset < bound]
        assert {r.key: r for r in below} == expected
        assert len(below) == len(expected)  # one record per key, nothing else
        assert [r for r in after if r.offset >= bound] == [r for r in before if r.offset >= bound]


def test_checkpoint_moved_to_the_bound(run):
    cp = parse_offset_checkpoint((run["log_dir"] / "cleaner-offset-checkpoint").read_bytes())
    for p in run["report"]["partitions"]:
        assert cp[(TOPIC, p["partition"])] == p["firstUncleanableOffset"] > 0


def test_executors_on_both_workers_imported_the_shipped_zip(run):
    # The executors' python cannot import compaction by itself ...
    probe = subprocess.run(
        [str(run["python"]), "-c", "import compaction"], capture_output=True, cwd=run["log_dir"]
    )
    assert probe.returncode != 0
    # ... so the job ran on the workers' executors with the zip they fetched (one per worker).
    workers = {z.parts[-4] for z in run["zips"]}
    assert workers == {"worker-1", "worker-2"}, run["zips"]
    assert [a["state"] for a in run["apps"]] == ["FINISHED"]
