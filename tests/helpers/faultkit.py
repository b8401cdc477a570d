"""Helpers for the bad-input and crash suites: hand-made partitions, session kills, dir checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import index_oracle
import numpy as np
from e2ekit import REPO, SUBMIT, decode_partition, latest_per_key, segment_logs

from compaction.format import batch as fb
from compaction.format.batch_build import build_batch
from compaction.format.index import sanity_check_offset_index, sanity_check_time_index
from compaction.format.naming import segment_file_name
from compaction.format.segment import iter_batches
from compaction.kernels.index_build import rebuild_indexes_from_log

T0 = 1_700_000_000_000
TRANSIENT = (".cleaned", ".swap", ".deleted", ".tmp")


def batch(offsets, value_bytes: int = 8) -> bytes:
    recs = [
        fb.Record(o, T0 + o, f"k{o % 5}".encode(), (f"v{o}-".encode() * value_bytes)[:value_bytes])
        for o in offsets
    ]
    return build_batch(recs)


def write_partition(part_dir: str, segments: list[list[bytes]], interval: int = 100) -> None:
    """Segments of whole batches -> .log/.index/.timeindex, base offset = first batch's."""
    os.makedirs(part_dir, exist_ok=True)
    for batches in segments:
        data = b"".join(batches)
        base = fb.BatchHeader.unpack_from(batches[0]).base_offset
        index, timeindex = rebuild_indexes_from_log(np.frombuffer(data, np.uint8), base, interval)
        for suffix, content in ((".log", data), (".index", index), (".timeindex", timeindex)):
            with open(os.path.join(part_dir, segment_file_name(base, suffix)), "wb") as fh:
                fh.write(content)


def small_partition(part_dir: str, big_at_2: int = 0) -> list[int]:
    """Segments 0 (offsets 0-9), 10 (10-19, five 2-record batches), active 20 (20-21).
    Returns the byte positions of the batches of segment 10. `big_at_2` gives its third batch
    values of that many bytes."""
    seg1 = [batch(range(o, o + 2), big_at_2 if (big_at_2 and o == 14) else 8) for o in range(10, 20, 2)]
    write_partition(part_dir, [[batch(range(o, o + 2)) for o in range(0, 10, 2)], seg1, [batch([20, 21])]])
    return list(np.cumsum([0] + [len(b) for b in seg1[:-1]]))


def submit_cmd(log_dirs, report, *args):
    cmd = [SUBMIT, "--master", "local[1]", "--conf", "spark.ui.enabled=false", "--report", report]
    for d in log_dirs:
        cmd += ["--log-dir", d]
    return cmd + list(args)


def start_submit(log_dirs, report, *args, env=None) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})}
    return subprocess.Popen(
        submit_cmd(log_dirs, report, *args),
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_driver_only(log_dir: str, *args: str) -> subprocess.CompletedProcess:
    """The job's Python driver without spark-submit: enough for everything that happens before
    Spark starts (locks, recovery, checkpoint parsing)."""
    cmd = [sys.executable, os.path.join(REPO, "jobs", "compact.py"), "--log-dir", log_dir, *args]
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


def kill_session(sid: int) -> int:
    """SIGKILL every process of session `sid` (spark-submit, the JVM, the Python driver and the
    PySpark daemon, which sits in a process group of its own). Returns how many were killed."""
    killed = 0
    for _ in range(3):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    stat = fh.read()
                if int(stat.rsplit(")", 1)[1].split()[3]) == sid:
                    os.kill(int(pid), signal.SIGKILL)
                    killed += 1
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(0.05)
    return killed


def lock_held_by_other(path: str) -> bool:
    """Is there a flock on `path` (per /proc/locks), without taking it ourselves."""
    try:
        ino = os.stat(path).st_ino
    except FileNotFoundError:
        return False
    with open("/proc/locks") as fh:
        return any(line.split()[5].endswith(f":{ino}") for line in fh if len(line.split()) > 5)


def parts(log_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(log_dir) if os.path.isdir(os.path.join(log_dir, n)))


def expected_after(part_dir: str):
    """(records kept below the active segment's base, records from it on), from kafka-python."""
    records = decode_partition(part_dir)
    bound = int(os.path.basename(segment_logs(part_dir)[-1])[:20])
    kept = sorted(latest_per_key(records, bound).values(), key=lambda r: r.offset)
    return kept + [r for r in records if r.offset >= bound]


def healthy_log_dir(log_dir: str) -> list[str]:
    """A log dir of two healthy partitions (`good-0`, `good-1`: mixed codecs, a few segments
    each, tombstones) for damaged ones to sit beside; returns their names."""
    from compaction.tools.generator import generate_log_dir

    generate_log_dir(
        log_dir,
        topics=(("good", 2),),
        records=1500,
        keys=60,
        codec="mixed",
        segment_bytes=20_000,
        tombstone_ratio=0.05,
        seed=11,
    )
    return ["good-0", "good-1"]


def assert_compacted(entry: dict, part_dir: str, expected) -> None:
    """A partition the run cleaned: its report entry, its records (kafka-python's decoding) as
    `expected_after` said, its files as a broker loads them."""
    assert entry["status"] == "cleaned", entry
    assert decode_partition(part_dir) == expected
    assert_loads(part_dir)


def assert_loads(part_dir: str) -> None:
    """No transient files; every segment decodes with CRCs and its indexes pass the broker's checks
    and equal the ones a broker writes (tests/helpers/index_oracle.py, not the job's builder)."""
    names = os.listdir(part_dir)
    assert not [n for n in names if n.endswith(TRANSIENT) or n == "compaction-commit.json"], names
    logs = segment_logs(part_dir)
    for i, log in enumerate(logs):
        data = open(log, "rb").read()
        list(iter_batches(data, log))
        base = int(os.path.basename(log)[:20])
        index, timeindex = (open(log[:-4] + s, "rb").read() for s in (".index", ".timeindex"))
        sanity_check_offset_index(index, base, log, strict=True)
        sanity_check_time_index(timeindex, base, log, strict=True)
        if i < len(logs) - 1:
            want = index_oracle.index_files(data, base, 4096)
            assert (index, timeindex) == want, (log, index_oracle.entries(data, base, 4096))
