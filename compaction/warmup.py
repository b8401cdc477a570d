"""Python-worker warm-up: imports and compiled kernels loaded before the first real task.

A Python worker's first task pays for importing pyarrow, numba and this package and for loading
every compiled kernel from numba's on-disk cache: 1-3 s per worker on an idle 2-core box, far
more under load, paid by the first partition of every worker. The job therefore starts its Spark
session and runs one tiny task per executor core (`warm_executors`) while the driver is still
discovering and planning; Spark keeps the warmed workers for the real stages
(`spark.python.worker.reuse`, on by default). The tiny task is a real round: it compacts a
two-segment partition written to a temporary directory through the same code as the job
(`compact_partition`), so every kernel is loaded with the argument types the job will use
(memory-mapped and decompressed buffers, uncompressed and gzip batches, a tombstone).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from compaction import faults
from compaction.format import batch as fb
from compaction.format import compression
from compaction.format.naming import segment_file_name

_NOW_MS = 1_700_000_000_000


def _segment(base: int, codec: int, n: int = 6) -> bytes:
    records = [fb.Record(base + i, _NOW_MS + i, b"warm-up-key-%08d" % (i % (n // 2)), None if i == 4 else b"v%d" % i)
               for i in range(n)]  # fmt: skip
    return fb.build_batch(records, base_offset=base, codec=codec)


def warm() -> float:
    """Compact a tiny partition in a temporary directory; returns the seconds it took."""
    from compaction.rewrite import GroupSpec, SourceSegment
    from compaction.spark_stages import compact_partition
    from compaction.storage import Storage

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
        data = {0: _segment(0, compression.CODEC_NONE, 5000) + _segment(5000, compression.CODEC_GZIP),
                5006: _segment(5006, compression.CODEC_NONE)}  # fmt: skip
        for base, payload in data.items():
            with open(os.path.join(part, segment_file_name(base, ".log")), "wb") as fh:
                fh.write(payload)
        seg = lambda b: SourceSegment(b, len(data[b]), os.stat(os.path.join(part, segment_file_name(b, ".log"))).st_mtime_ns)  # noqa: E731
        spec = GroupSpec(
            group_id=0, topic="warmup", partition=0, storage=Storage.local(), part_path=part,
            segments=(seg(0),), first_dirty_offset=0, upper_bound=5006, now_ms=_NOW_MS,
            delete_retention_ms=0, legacy_delete_horizon_ms=0, index_interval_bytes=4096, tail_segments=(seg(5006),),
        )  # fmt: skip
        rows = compact_partition([spec])
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
    """The tiny partition as one range through the ranges steps: their kernels loaded too."""
    from compaction import ranges

    blocks = list(ranges.scan_range(spec, 0, 2))
    found = [f for b in range(2) for f in ranges.merge_bucket(
        [(x.range_id, x.data) for x in blocks if x.kind == ranges.SUMMARY and x.bucket == b])]  # fmt: skip
    rows = ranges.rewrite_ranges([spec], [b for b in blocks if b.kind in (ranges.IDS, ranges.LATEST)] + found)
    if rows[0].get("error"):
        raise RuntimeError(rows[0]["error"])


def _safe_warm() -> float:
    try:
        return warm()
    except Exception:  # noqa: BLE001 - a best effort: it only costs the time it was meant to save
        return 0.0


# Spark runs the Python functions of RDD jobs and of DataFrame (Arrow) jobs in two separate pools
# of Python workers: warming one leaves the other cold (~1-3 s a worker to import and load).
RDD_POOL, ARROW_POOL = "rdd", "arrow"


def warm_executors(spark, pools=(RDD_POOL,)) -> float:
    """One warm-up task per executor core in each of `pools` (a best effort: a failure here only
    costs the time it was meant to save, the real tasks report real errors). Returns the seconds
    it took."""
    import pyarrow as pa

    def run(cores):
        for _ in cores:
            yield _safe_warm()

    def run_arrow(batches):
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"s": [_safe_warm() for _ in range(batch.num_rows)]})

    started = time.monotonic()
    sc = spark.sparkContext
    n = max(1, sc.defaultParallelism)
    sc.setJobGroup("warm-up", "load the Python workers' imports and compiled kernels")
    if RDD_POOL in pools:  # the same kind of job as spark_stages.fused
        sc.parallelize(range(n), n).mapPartitions(run).collect()
    if ARROW_POOL in pools:  # the same kind as the ranges' stages
        from compaction.spark_stages import task_ids_frame

        task_ids_frame(spark, n).mapInArrow(run_arrow, "s double").collect()
    return time.monotonic() - started
