"""Progress of a real round on one big partition, as the operator watches it: one task holds the
whole partition for seconds (the I/O throttle makes them many), and the progress lines show the
bytes its executor has read and written so far, growing while the task runs, with the task counted
as running and an ETA; under a terminal, a live bar instead."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys

import pytest
from e2ekit import LOCAL_SUBMIT, REPO

from compaction.tools.generator import generate_log_dir

pytestmark = pytest.mark.slow
NOW = 1_800_000_000_000
MB = 1_048_576


@pytest.fixture()
def big_partition(tmp_path):
    """One partition of ~20 MB in 5 segments: compacted whole, in one task."""
    generate_log_dir(
        str(tmp_path / "logs"),
        topics=(("orders", 1),),
        records=24_000,
        keys=500,
        value_size=(1000, 1000),
        segment_bytes=4 * MB,
        seed=5,
    )
    return tmp_path


def _round(root, *args, **popen):
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "KAFKA_COMPACTION_PROGRESS_SECONDS": "0.3",
        "KAFKA_COMPACTION_IO_THROTTLE_FILE": str(root / "throttle"),
    }
    env.pop("KAFKA_COMPACTION_PROGRESS_TTY", None)
    cmd = [
        *LOCAL_SUBMIT,
        "--log-dir",
        str(root / "logs"),
        "--now-ms",
        str(NOW),
        "--io-max-bytes-per-second",
        "6m",
        *args,
    ]
    return cmd, env


def test_progress_lines_show_the_executors_bytes_growing_inside_one_task(big_partition):
    cmd, env = _round(big_partition, "--log-format", "json", "--report", str(big_partition / "r.json"))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [
        json.loads(line) for line in (proc.stdout + proc.stderr).splitlines() if line.startswith('{"time"')
    ]
    progress = [r for r in rows if r.get("event") == "progress"]
    assert progress, rows[-5:]
    # While the one task runs (none done yet), from inside it: bytes read growing, the task running.
    inside = [r for r in progress if r["tasksDone"] == 0 and r["bytesRead"] > 0]
    reads = [r["bytesRead"] for r in inside]
    assert len(set(reads)) >= 3, progress
    assert reads == sorted(reads)
    assert all(r["tasksRunning"] == 1 for r in inside), inside
    etas = [r["etaSeconds"] for r in inside if r["etaSeconds"] is not None]
    assert len(set(etas)) >= 2 and all(e >= 0 for e in etas)
    fractions = [r["fraction"] for r in inside]
    assert fractions == sorted(fractions) and any(0 < f < 1 for f in fractions)
    # The throttle held 6 MB/s on reads + writes: the rate says so, not the planned bytes per task.
    rates = [r["bytesPerSecond"] for r in inside[1:]]
    assert rates and max(rates) < 9 * MB
    last = progress[-1]
    assert last["tasksDone"] == last["tasksTotal"] == 1 and last["tasksRunning"] == 0
    assert last["workDone"] == last["workTotal"] > 2 * 15 * MB and last["fraction"] == 1
    assert last["bytesWritten"] > 0
    report = json.loads((big_partition / "r.json").read_text())
    assert report["partitions"][0]["status"] == "cleaned"
    assert last["bytesRead"] >= report["partitions"][0]["bytesRead"]


def test_a_live_bar_when_the_users_terminal_shows_the_output(big_partition):
    """spark-submit pipes the driver's output; the launcher sees the terminal and says so."""
    cmd, env = _round(big_partition)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env, cwd=REPO
    )
    os.close(follower)
    out = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 600)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: every process left
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=60) == 0, out[-3000:]
    text = out.decode(errors="replace")
    frames = [f for f in text.split("\r") if f.startswith("[") and "% " in f]
    assert len(frames) >= 3, text[-3000:]  # redrawn in place, several times
    assert any("1 running" in f and "MB read" in f for f in frames)
    assert "compaction.progress: progress: " not in text  # no log lines for progress on a terminal
