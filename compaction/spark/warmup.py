"""Python-worker warm-up: imports and compiled kernels loaded before the first real task.

A Python worker's first task pays for importing pyarrow, numba and this package and for loading
every compiled kernel from numba's on-disk cache: seconds per worker (bench/startup.py prints
the warm-up), more under load, paid by the first partition of every worker. The job therefore starts its Spark
session and runs one tiny task per executor core (`warm_executors`) while the driver is still
discovering and planning; Spark keeps the warmed workers for the real stages
(`spark.python.worker.reuse`, on by default). The tiny task is a real round: it compacts a
two-segment partition written to a temporary directory through the same code as the job
(`compact_partition`), so every kernel is loaded with the argument types the job will use
(memory-mapped and decompressed buffers, uncompressed, gzip and lz4 batches, a tombstone, and v0/v1
messages ahead of them as in a log upgraded in place: plain ones and a gzip wrapper).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from compaction.format import batch as fb
from compaction.format import compression
from compaction.format.batch_build import build_batch
from compaction.format.legacy import build_legacy_message_set
from compaction.format.naming import segment_file_name
from compaction.kernels.cache import compiles
from compaction.runtime import faults, kernel_store
from compaction.runtime.exchange import Exchange
from compaction.runtime.storage import Storage
from compaction.runtime.worker import prepare_worker
from compaction.settings import WorkerSettings
from compaction.spark.stages import compact_partition
from compaction.steps.group import GroupSpec, SourceSegment
from compaction.steps.range_task import run_task
from compaction.steps.schedule import RangePlan

_NOW_MS = 1_700_000_000_000


def _segment(base: int, codec: int, n: int = 6) -> bytes:
    records = [
        fb.Record(base + i, _NOW_MS + i, b"warm-up-key-%08d" % (i % (n // 2)), None if i == 4 else b"v%d" % i)
        for i in range(n)
    ]
    return build_batch(records, base_offset=base, codec=codec)


def _legacy(n: int = 8) -> bytes:
    """Offsets 0..n-1: v0 messages (older records of keys, a kept one, a tombstone), then a v1 gzip wrapper."""
    records = [
        fb.Record(i, _NOW_MS + i, b"warm-up-legacy-%d" % (i % 6), None if i == 3 else b"v%d" % i)
        for i in range(n)
    ]
    half = n // 2
    return build_legacy_message_set(records[:half], 0) + build_legacy_message_set(
        records[half:], 1, compression.CODEC_GZIP
    )


def warm(worker: WorkerSettings = WorkerSettings()) -> float:
    """Compact a tiny partition in a temporary directory as a task of a round with `worker`
    settings would; returns the seconds it took."""
    started = time.monotonic()
    root = tempfile.mkdtemp(prefix="kafka-compaction-warmup-")
    # Test crash points (faults.py) count arrivals per process: the warm-up's own rewrite must
    # neither stop the worker nor use up an arrival meant for a real partition.
    crash_at = os.environ.pop(faults.ENV, None)
    try:
        part = os.path.join(root, "warmup-0")
        os.mkdir(part)
        # Enough distinct keys (2,500 of 20 bytes) that the offset map's table grows (ids, slots
        # and arena): its growth kernels are loaded here too.
        # The second segment holds only a gzip batch whose older records are superseded: the scan
        # packs its decompressed records (kernels/sidepack.py), which mixed segments skip.
        data = {
            0: _legacy(8)
            + _segment(8, compression.CODEC_NONE, 5000)
            + _segment(5008, compression.CODEC_GZIP)
            + _segment(5014, compression.CODEC_LZ4),
            5020: _segment(5020, compression.CODEC_GZIP),
            5026: _segment(5026, compression.CODEC_NONE),
        }
        for base, payload in data.items():
            with open(os.path.join(part, segment_file_name(base, ".log")), "wb") as fh:
                fh.write(payload)

        def seg(b):
            return SourceSegment(
                b, len(data[b]), os.stat(os.path.join(part, segment_file_name(b, ".log"))).st_mtime_ns
            )

        spec = GroupSpec(
            group_id=0,
            topic="warmup",
            partition=0,
            storage=Storage.local(),
            part_path=part,
            segments=(seg(0), seg(5020)),
            first_dirty_offset=0,
            upper_bound=5026,
            now_ms=_NOW_MS,
            delete_retention_ms=0,
            legacy_delete_horizon_ms=0,
            index_interval_bytes=4096,
            tail_segments=(seg(5026),),
        )
        rows = compact_partition([spec], worker.scan_reuse_max_bytes)
        if rows[0].get("error"):
            raise RuntimeError(rows[0]["error"])
        for f in os.listdir(part):
            if f.endswith(".cleaned"):
                os.unlink(os.path.join(part, f))
        _warm_ranges(spec)
    finally:
        if crash_at is not None:
            os.environ[faults.ENV] = crash_at
        shutil.rmtree(root, ignore_errors=True)
    return time.monotonic() - started


def _warm_ranges(spec) -> None:
    """The tiny partition as one range through a ranges task: its kernels loaded too."""
    root = os.path.join(os.path.dirname(spec.part_path), "exchange")
    os.mkdir(root)
    found = run_task(0, RangePlan.cut([[spec]], 1), Exchange(Storage.local(), root), 1 << 20)
    if getattr(found[0], "error", None):
        raise RuntimeError(found[0].error)


_warmed = False  # this process (or the daemon it was forked from) has run the tiny round


def warm_best_effort(worker: WorkerSettings) -> float:
    """`warm`, once per process: a worker forked from the package's daemon (compaction/spark/daemon.py)
    finds it done there. A failure only costs the time it was meant to save."""
    global _warmed
    if _warmed:
        return 0.0
    try:
        seconds = warm(worker)
    except Exception:
        return 0.0
    _warmed = True
    return seconds


def warm_executors(sc, worker: WorkerSettings = WorkerSettings()) -> tuple[float, int]:
    """One warm-up task per executor core (a best effort: a failure here only costs the time it
    was meant to save, the real tasks report real errors), in a plain RDD job: the kind of job
    both stages are, whose pool of Python workers they reuse, set up as theirs will be (`worker`:
    the compiled kernels fetched from the job's store). Each task then publishes its host's
    compiled kernels to the store where the store lacks them (`runtime/kernel_store.py`).
    Returns the seconds it took and how many kernels the executors' Python processes compiled
    (0: all loaded from a cache)."""

    def run(cores):
        prepare_worker(worker)
        for _ in cores:
            warm_best_effort(worker)
        counted = compiles()
        kernel_store.publish(worker.kernel_cache_dir, compiled=sum(counted.values()) > 0)
        yield counted

    started = time.monotonic()
    n = max(1, sc.defaultParallelism)
    sc.setJobGroup("warm-up", "load the Python workers' imports and compiled kernels")
    counted = sc.parallelize(range(n), n).mapPartitions(run).collect()
    return time.monotonic() - started, compiled_kernels(counted)


def compiled_kernels(counted: list[dict[str, int]]) -> int:
    """Compiles of the executors' processes, from each warm-up task's counts by process: a worker
    forked from the daemon holds the daemon's too, so each process is counted once."""
    per_process: dict[str, int] = {}
    for c in counted:
        for pid, n in c.items():
            per_process[pid] = max(per_process.get(pid, 0), n)
    return sum(per_process.values())
