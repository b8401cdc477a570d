"""Helpers for end-to-end tests: run the job the way a user does, decode with kafka-python."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from dataclasses import dataclass

import kafka_python_shims
from kafka.record.memory_records import MemoryRecords

kafka_python_shims.install()

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUBMIT = os.path.join(REPO, "spark-submit.sh")
# The launcher on a local master of two cores, without the Spark UI: how the tests run a round.
LOCAL_SUBMIT = (SUBMIT, "--master", "local[2]", "--conf", "spark.ui.enabled=false")
SHARED_FIXTURES = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "real-kafka")


@dataclass(frozen=True)
class KRecord:
    """A record as kafka-python (an independent implementation) decodes it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple


def run_job(
    log_dir: str, *args: str, report: str | None = None, env: dict | None = None
) -> tuple[int, dict, str]:
    """`./spark-submit.sh --log-dir DIR ...`; returns (exit code, JSON report, stderr tail)."""
    report = report or os.path.join(os.path.dirname(log_dir.rstrip("/")), "report.json")
    cmd = [
        *LOCAL_SUBMIT,
        "--log-dir",
        log_dir,
        "--report",
        report,
        *args,
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    data = json.load(open(report)) if os.path.exists(report) else {}
    return proc.returncode, data, proc.stderr[-6000:]


def corrupt_first_batch(part_dir) -> None:
    """Flip a byte inside the first batch of a partition's first segment: its CRC no longer matches."""
    first = sorted(n for n in os.listdir(part_dir) if n.endswith(".log"))[0]
    with open(os.path.join(part_dir, first), "r+b") as fh:
        fh.seek(70)
        byte = fh.read(1)
        fh.seek(70)
        fh.write(bytes([byte[0] ^ 0xFF]))


def segment_logs(part_dir: str) -> list[str]:
    return sorted(os.path.join(part_dir, n) for n in os.listdir(part_dir) if n.endswith(".log"))


def decode_log(path: str) -> list[KRecord]:
    with open(path, "rb") as fh:
        records = MemoryRecords(fh.read())
    out = []
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        if getattr(batch, "is_control_batch", False):
            continue
        for r in batch:
            headers = tuple((k, v) for k, v in (getattr(r, "headers", None) or ()))
            out.append(KRecord(r.offset, r.timestamp, r.key, r.value, headers))
    return out


def v2_batches(data: bytes) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of each v2 batch of a whole `.log`, from the two leading header fields
    only."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        out.append((base, data[pos : pos + 12 + length]))
        pos += 12 + length
    assert pos == len(data)
    return out


def decode_partition(part_dir: str) -> list[KRecord]:
    return [r for log in segment_logs(part_dir) for r in decode_log(log)]


def cleanable_bound(part_dir: str) -> int:
    """Kafka's first uncleanable offset of an input with no open transaction and no compaction lag:
    the active (newest) segment's base offset, read from the input's file names before a run, so
    that an e2e oracle does not take its bound from the job's own report."""
    bases = [int(n.split(".")[0]) for n in os.listdir(part_dir) if n.endswith(".log")]
    assert len(bases) > 1, f"{part_dir}: one segment, nothing is cleanable"
    return max(bases)


def decode_log_dir(root: str) -> list[tuple]:
    """(topic, partition, offset, key, value, timestamp or None, headers) of every data record of
    a log dir, sorted."""
    out = []
    for name in sorted(os.listdir(root)):
        if not os.path.isdir(os.path.join(root, name)):
            continue
        topic, partition = name.rsplit("-", 1)
        for log in segment_logs(os.path.join(root, name)):
            for r in decode_log(log):
                ts = None if r.timestamp in (None, -1) else r.timestamp
                out.append((topic, int(partition), r.offset, r.key, r.value, ts, tuple(r.headers)))
    return sorted(out)


def state_offsets_as_of(m, cut: int) -> dict[bytes, int]:
    """The compacted state of a generated partition (its manifest `m`) as a broker held it when its
    log ended at offset `cut`: whole batches whose last offset is below it, latest offset per key of
    what a read_committed consumer sees (no marker, no aborted record, no record of a transaction
    whose marker is not held), tombstoned keys left out."""
    last_of_batch = {}
    for o in range(m.log_end_offset):
        last_of_batch[int(m.batch[o])] = o
    held = [o for o in range(m.log_end_offset) if last_of_batch[int(m.batch[o])] < cut]
    markers = [o for o in held if m.is_control[o]]
    latest = {}
    for o in held:
        if m.is_control[o] or m.txn[o] == 2:  # generator_plan.TXN_ABORTED
            continue
        if m.txn[o] and not any(x > o and m.producer_id[x] == m.producer_id[o] for x in markers):
            continue  # open at the cut
        latest[m.key(o)] = o
    return {k: o for k, o in latest.items() if not m.is_tombstone[o]}


def latest_per_key(records: list[KRecord], below: int) -> dict[bytes, KRecord]:
    latest: dict[bytes, KRecord] = {}
    for r in records:
        if r.offset < below and r.key is not None:
            latest[r.key] = r
    return latest


def files_under(root: str):
    """(path, bytes) of every file under `root`."""
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                yield path, fh.read()


def tree_hashes(root: str) -> dict[str, str]:
    return {os.path.relpath(path, root): hashlib.sha256(data).hexdigest() for path, data in files_under(root)}
