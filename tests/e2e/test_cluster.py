"""The job on a real Spark standalone cluster (a master and two 1-core workers on 127.0.0.1).

Started from the pyspark package's own `bin/spark-class` on free ports, killed at the end whatever
happens (bench/cluster.py's StandaloneCluster). The executors run a Python that has the job's
dependencies but not this repo's editable install, so `compaction` can only come from the
`--py-files` zip that spark-submit.sh ships: the test fails if the job works in local mode only.
The output is decoded with kafka-python.

Each worker starts on a temp dir and Spark local dirs of its own, empty (a fresh host, as a
Kubernetes pod is), with the compiled kernels on the job's store only (`.kafka-compaction-kernels`
beside the log dir, put there by this test's own process, as the previous run's executors would):
every numba compile of the executors' processes is logged (`KAFKA_COMPACTION_COMPILE_LOG`), and
the round must make none.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import pytest
from e2ekit import REPO, decode_partition, latest_per_key
from genkit import run_generate

from compaction.format.checkpoint import parse_offset_checkpoint
from compaction.kernels.cache import COMPILE_LOG_ENV, current_key
from compaction.runtime import kernel_store
from compaction.settings import KERNEL_CACHE_NAME
from compaction.spark.warmup import warm

_spec = importlib.util.spec_from_file_location("bench_cluster", os.path.join(REPO, "bench", "cluster.py"))
standalone = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(standalone)

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]

TOPIC, PARTITIONS = "orders", 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    log_dir = root / "kafka-logs"
    run_generate(
        log_dir,
        f"--topics {TOPIC}:{PARTITIONS} --records 3000 --keys 400 --codec mixed --segment-bytes 40000 --seed 7",
    )
    before = {p: decode_partition(str(log_dir / f"{TOPIC}-{p}")) for p in range(PARTITIONS)}
    python = standalone.executor_python(root)
    report_path = root / "report.json"
    store = root / KERNEL_CACHE_NAME
    warm()  # this process's kernels, loaded (or compiled) for this host's CPU, onto the job's store
    assert kernel_store.publish(str(store), compiled=False) == "written"
    compile_log = root / "compiles.log"
    with standalone.StandaloneCluster(root / "spark", timeout=120, fresh_temp=True) as cluster:
        cluster.add_worker(2)
        # every partition cut into ranges: the ranges stage's tasks, one per worker, meet
        # through an exchange directory beside the log dir (not local mode: no shared temp dir)
        code, _, stderr = standalone.submit(
            cluster,
            python,
            log_dir,
            report_path,
            "--conf",
            "spark.kafka.compaction.partitionTaskMaxBytes=0",
            "--conf",
            f"spark.executorEnv.{COMPILE_LOG_ENV}={compile_log}",
            timeout=400,
        )
        zips = standalone.executor_zips(cluster)
        apps = cluster.state().get("completedapps", [])
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return {
        "compiles": compile_log.read_text().splitlines() if compile_log.exists() else [],
        "worker_caches": sorted(
            p.relative_to(root) for p in (root / "spark").glob("worker-*/tmp/*/kernels-*")
        ),
        "store": sorted(p.name for p in store.iterdir()),
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
    assert not [
        p.name for p in run["log_dir"].parent.iterdir() if p.name.startswith(".kafka-compaction-exchange")
    ]


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


def test_fresh_executors_load_every_kernel_from_the_store_and_compile_none(run):
    assert run["code"] == 0, run["stderr"]
    assert run["report"]["timings"]["workerWarmupSeconds"] > 0
    # numba's own compile events, in the executors' processes, warm-up and stages alike
    assert run["compiles"] == [], run["compiles"][:20]
    assert run["report"]["timings"]["workerKernelCompiles"] == 0
    # each worker's empty temp dir got the key's cache from the store, which was left as it was
    dirs = {(p.parts[1], p.name) for p in run["worker_caches"]}
    assert dirs == {("worker-1", current_key().dir_name), ("worker-2", current_key().dir_name)}, run[
        "worker_caches"
    ]
    assert run["store"] == [current_key().archive_name]
