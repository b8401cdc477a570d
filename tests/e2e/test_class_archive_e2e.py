"""The driver JVM's class-data archive through ./spark-submit.sh (compaction/cli/class_archive.py):
the first run writes it at its JVM's exit, keeping the round's exit code; the next promotes and
maps it; nothing of it reaches stdout."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading

import pytest
from e2ekit import LOCAL_SUBMIT, REPO, segment_logs

from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]


class MapWatch(threading.Thread):
    """Whether any process maps a file whose path starts with `prefix` while the watch runs."""

    def __init__(self, prefix: str):
        super().__init__(daemon=True)
        self.prefix, self.seen, self.done = prefix, set(), threading.Event()

    def run(self):
        while not self.done.wait(0.1):
            for maps in glob.glob("/proc/[0-9]*/maps"):
                try:
                    with open(maps) as fh:
                        self.seen.update(line.split()[-1] for line in fh if self.prefix in line)
                except OSError:  # the process ended
                    pass


def _round(tmp_path, name: str, cache: str, corrupt: bool = False):
    log_dir = str(tmp_path / name)
    generate_log_dir(log_dir, topics=(("t", 2),), records=3000, keys=200, segment_bytes=60_000, seed=3)
    if corrupt:  # a batch cut short in one partition's first segment: that partition fails, exit 1
        first = segment_logs(os.path.join(log_dir, "t-0"))[0]
        os.truncate(first, os.path.getsize(first) - 7)
    report = str(tmp_path / f"{name}.json")
    cmd = [
        *LOCAL_SUBMIT,
        "--log-dir",
        log_dir,
        "--report",
        report,
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "KAFKA_COMPACTION_CDS_DIR": cache}
    watch = MapWatch(cache)
    watch.start()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    finally:
        watch.done.set()
        watch.join()
    with open(report) as fh:
        statuses = sorted(p["status"] for p in json.load(fh)["partitions"])
    return proc, statuses, watch.seen


def test_the_first_run_writes_the_archive_the_next_maps_it(tmp_path):
    cache = str(tmp_path / "jvm")
    first, statuses, mapped = _round(tmp_path, "one", cache, corrupt=True)
    assert first.returncode == 1, first.stderr[-3000:]  # the round's own exit code, not the dump's
    assert statuses == ["cleaned", "failed"]
    (partial,) = os.listdir(cache)
    assert partial.endswith(".partial") and not mapped
    assert "[cds" not in first.stdout + first.stderr

    second, statuses, mapped = _round(tmp_path, "two", cache)
    assert second.returncode == 0, second.stderr[-3000:]
    assert statuses == ["cleaned", "cleaned"]
    (archive,) = os.listdir(cache)
    assert archive == partial.split(".")[0] + ".jsa"
    assert mapped == {os.path.join(cache, archive)}  # the driver JVM mapped it
    assert "[cds" not in second.stdout + second.stderr
