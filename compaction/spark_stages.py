"""The Spark stages of one round.

- `fused`: partitions compacted whole, one task per bin of partitions (`compact_partition`).
- Partitions cut into ranges (compaction/ranges.py), as DataFrames of exchange blocks
  (`BLOCK_SCHEMA`: one row per Arrow block, never a row per key):
  `scan_ranges` (mapInArrow, one task per range) -> `merge_buckets` (groupBy bucket,
  applyInArrow: the partition-wide latest offset of each key) -> `rewrite_units` (groupBy unit,
  applyInArrow: each unit's ranges rewritten with the map of their keys).

Errors inside a task never fail the Spark job: they come back as rows (an ERROR block, or a
result row with `error`), so one damaged partition cannot stop the others.
"""

from __future__ import annotations

import time
import traceback
from typing import Iterator

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from compaction import ranges
from compaction.errors import CompactionError
from compaction.rewrite import GroupSpec, rewrite_unit

RESULT_FIELDS = (
    ("group_id", T.IntegerType()),
    ("error", T.StringType()),
    ("bytes_read", T.LongType()),
    ("bytes_written", T.LongType()),
    ("records_read", T.LongType()),
    ("records_written", T.LongType()),
    ("batches_read", T.LongType()),
    ("batches_written", T.LongType()),
    ("invalid_records", T.LongType()),
    ("seconds", T.DoubleType()),
    ("cpu_seconds", T.DoubleType()),  # CPU time of the task's work in this process (first row of a unit)
    ("erased_records", T.LongType()),  # --erase-keys (compaction/erase.py): records of listed keys removed
    ("erased_bytes", T.LongType()),
    ("erase_found", T.StringType()),  # which listed keys the unit met (a bitmap; first row of a unit)
    ("unchanged", T.IntegerType()),  # an erasing-only group that erased nothing: nothing written
)
RESULT_SCHEMA = T.StructType([T.StructField(n, t, True) for n, t in RESULT_FIELDS])
BLOCK_SCHEMA = T.StructType(
    [
        T.StructField("range_id", T.IntegerType(), False),
        T.StructField("kind", T.IntegerType(), False),
        T.StructField("bucket", T.IntegerType(), False),
        T.StructField("seq", T.LongType(), False),
        T.StructField("data", T.BinaryType(), False),
    ]
)
_BLOCK_ARROW = pa.schema([pa.field("range_id", pa.int32(), False), pa.field("kind", pa.int32(), False),
                          pa.field("bucket", pa.int32(), False), pa.field("seq", pa.int64(), False),
                          pa.field("data", pa.binary(), False)])  # fmt: skip


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, CompactionError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"


def task_ids_frame(spark: SparkSession, n: int) -> DataFrame:
    """Rows task_id 0..n-1, one Spark partition each, so every task is its own Spark task (a
    range in the JVM: no Python job to build it)."""
    return spark.range(0, n, 1, max(1, n)).select(F.col("id").cast("int").alias("task_id"))


def _block_batch(blocks: list[ranges.Block]) -> pa.RecordBatch:
    cols = list(zip(*blocks)) if blocks else [[]] * 5
    return pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(cols, _BLOCK_ARROW)], schema=_BLOCK_ARROW)


def _blocks_of(table: pa.Table) -> list[ranges.Block]:
    cols = [table.column(f.name).to_pylist() for f in _BLOCK_ARROW]
    return [ranges.Block(*row) for row in zip(*cols)]


# --- ranges: scan -> merge -> rewrite -----------------------------------------------------------


def scan_ranges(tasks: DataFrame, table) -> DataFrame:
    """Per range: its blocks (ranges.scan_range; SUMMARY blocks carry their fine bucket). `table`
    is a broadcast of {task_id: (GroupSpec, partition number, validate)}; `validate`: the
    partition's index checks run in this task (its first range's)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from compaction.buffers import keep_freed_heap
        from compaction.discover import validate_partition_path
        from compaction.pyworker import keep_zip_directories

        keep_freed_heap()
        keep_zip_directories()
        for batch in batches:
            for tid in batch.column("task_id").to_pylist():
                spec, part, validate = table.value[tid]
                started, cpu = time.monotonic(), time.process_time()
                try:
                    if validate:
                        validate_partition_path(spec.storage, spec.part_path)
                    pending, summary = [], 0
                    for b in ranges.scan_range(spec, part):
                        pending.append(b)
                        summary += len(b.data) if b.kind == ranges.SUMMARY else 0
                        if len(pending) >= 16:
                            yield _block_batch(pending)
                            pending = []
                    pending.append(ranges.stats_block(spec.group_id, time.monotonic() - started,
                                                      time.process_time() - cpu, summary))  # fmt: skip
                    yield _block_batch(pending)
                except Exception as exc:  # noqa: BLE001 - reported per partition, never fatal
                    yield _block_batch([ranges.Block(spec.group_id, ranges.ERROR, -1, 0, _error_text(exc).encode())])

    return tasks.mapInArrow(run, BLOCK_SCHEMA)


def side_blocks(blocks: DataFrame) -> DataFrame:
    """PRODUCERS, STATS, EPOCHS and ERROR blocks (a few per range), for the driver."""
    return blocks.where(F.col("kind").isin(ranges.PRODUCERS, ranges.STATS, ranges.EPOCHS, ranges.ERROR))


def _lookup(column: str, mapping: dict[int, int]):
    """`mapping[column]` as a literal map in the query: no DataFrame to build (which would run a
    Python job) and no join."""
    return F.create_map(*(F.lit(x) for kv in sorted(mapping.items()) for x in kv))[F.col(column)]


def merge_buckets(blocks: DataFrame, deal: dict[int, int]) -> DataFrame:
    """FOUND blocks: the SUMMARY blocks of each merge task merged (ranges.merge_bucket). `deal`
    {fine bucket: slot} deals the fine buckets to merge tasks, one `slot` per task (`deal_buckets`)."""

    def run(table: pa.Table) -> pa.Table:
        rows = [(b.range_id, b.data) for b in _blocks_of(table.drop_columns(["slot"]))]
        return pa.Table.from_batches([_block_batch(list(ranges.merge_bucket(rows)))])

    summaries = blocks.where(F.col("kind") == ranges.SUMMARY).withColumn("slot", _lookup("bucket", deal))
    return summaries.groupBy("slot").applyInArrow(run, BLOCK_SCHEMA)


def deal_buckets(tasks: int, partitions: int) -> dict[int, int]:
    """{fine bucket: slot}: the fine buckets dealt round robin to `tasks` merge tasks, each task's
    slot landing in its own one of `partitions` shuffle partitions."""
    slot = dict(unit_slots(list(range(tasks)), partitions))
    return {b: slot[b % tasks] for b in range(ranges.FINE_BUCKETS)}


def rewrite_units(found: DataFrame, blocks: DataFrame, unit_of: dict[int, int], slot_of: dict[int, int],
                  units) -> DataFrame:  # fmt: skip
    """Result rows of the rewrite of each unit (ranges.rewrite_ranges) from its ranges' IDS and
    LATEST blocks and the FOUND blocks of `found`. `unit_of` {range_id: unit_id} gives each range
    its unit (ranges without one are not rewritten), `slot_of` {unit_id: slot} each unit its own
    Spark partition (`unit_slots`); `units` is a broadcast of {unit_id: [GroupSpec, ...]} in log
    order."""
    schema = _result_arrow()

    def run(table: pa.Table) -> pa.Table:
        out = []  # a slot holds one unit, unless the shuffle has fewer partitions than units
        for uid in sorted(set(table.column("unit_id").to_pylist())):
            rows = table.filter(pa.compute.equal(table.column("unit_id"), uid))
            out.extend(_rewrite_unit(units.value[uid], _blocks_of(rows.drop_columns(["unit_id", "slot"]))))
        return pa.Table.from_pylist(out, schema=schema)

    shipped = blocks.where(F.col("kind").isin(ranges.IDS, ranges.LATEST)).unionByName(found)
    placed = shipped.withColumn("unit_id", _lookup("range_id", unit_of)).where(F.col("unit_id").isNotNull())
    placed = placed.withColumn("slot", _lookup("unit_id", slot_of))
    return placed.groupBy("slot").applyInArrow(run, RESULT_SCHEMA)


def _rewrite_unit(specs: list[GroupSpec], blocks: list[ranges.Block]) -> list[dict]:
    cpu = time.process_time()
    try:
        rows = ranges.rewrite_ranges(specs, blocks)
        rows[0]["cpu_seconds"] = time.process_time() - cpu
    except Exception as exc:  # noqa: BLE001 - reported per partition, never fatal
        rows = [{"group_id": s.group_id, "error": _error_text(exc)} for s in specs]
    return rows


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's `hash(int)` (Murmur3_x86_32.hashInt, seed 42), as a signed 32-bit int."""
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    k = (value & m) * 0xCC9E2D51 & m
    k = rotl(k, 15) * 0x1B873593 & m
    h = rotl(seed ^ k, 13)
    h = (h * 5 + 0xE6546B64) & m
    h ^= 4
    h ^= h >> 16
    h = h * 0x85EBCA6B & m
    h ^= h >> 13
    h = h * 0xC2B2AE35 & m
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


def unit_slots(unit_ids: list[int], partitions: int) -> list[tuple[int, int]]:
    """(unit_id, slot) per unit: grouping by `slot` over `partitions` shuffle partitions puts the
    i-th unit (sorted) in Spark partition i mod `partitions` (Spark: pmod(hash(slot), n)); slot is
    the smallest int with that hash residue. Units then spread evenly over the tasks instead of
    colliding."""
    n = max(1, partitions)
    want = {i % n for i in range(len(unit_ids))}
    first: dict[int, int] = {}
    v = 0
    while len(first) < len(want):
        r = _murmur3_int(v) % n
        if r in want and r not in first:
            first[r] = v
        v += 1
    return [(u, first[i % n]) for i, u in enumerate(sorted(unit_ids))]


def _result_arrow() -> pa.Schema:
    kinds = {T.IntegerType: pa.int32(), T.StringType: pa.string(), T.LongType: pa.int64(), T.DoubleType: pa.float64()}
    return pa.schema([pa.field(n, kinds[type(t)]) for n, t in RESULT_FIELDS])


# --- one task per partition ----------------------------------------------------------------
#
# A partition that is not cut into ranges is compacted whole in one task: scan its groups, build
# its offset map in the task (exact key bytes, `KeyTable`), derive producer state from its batch
# headers, then rewrite its groups in log order. It is the one-range case of compaction/ranges.py
# with nothing to exchange: no block leaves the task. Decisions are the same either way.

FUSED_FIELDS = (
    *RESULT_FIELDS,  # cpu_seconds: of the whole partition
    ("first_unstable", T.LongType()),
    ("scan_seconds", T.DoubleType()),  # per partition, on its first group's row
    ("map_seconds", T.DoubleType()),
)


def compact_partition(specs: list) -> list[dict]:
    """The round for one partition (`specs`: all its groups, log order) in this process.

    Returns one row per group: the rewrite's stats, or `error`, or `first_unstable` (an open
    transaction below the planned bound: nothing was written, the driver plans again)."""
    import dataclasses
    import os

    from compaction.buffers import keep_freed_heap
    from compaction.discover import validate_partition_path
    from compaction.pyworker import keep_zip_directories
    from compaction.rewrite import SCAN_REUSE_MAX_BYTES, ScanCache, check_partition_epochs, scan_partition

    keep_freed_heap()
    keep_zip_directories()
    started, cpu = time.monotonic(), time.process_time()
    try:  # the index checks the driver leaves to the task that reads the partition anyway
        validate_partition_path(specs[0].storage, specs[0].part_path)
    except CompactionError as exc:
        return [{"group_id": s.group_id, "error": str(exc)} for s in specs]
    # The scan's SegmentScans are kept for the rewrite (each segment read and decompressed once)
    # up to this many bytes of decompressed records + columns per task; the rest is read again.
    reuse = int(os.environ.get("KAFKA_COMPACTION_SCAN_REUSE_MAX_BYTES", SCAN_REUSE_MAX_BYTES))
    cache = ScanCache(reuse) if reuse > 0 else None
    epochs: list = []  # leader-epoch runs per segment: checked before anything is written
    pmap, producers = scan_partition(specs, cache, epochs=epochs)
    check_partition_epochs(specs, epochs)
    state = ranges.producer_state(producers)
    scanned = time.monotonic()
    if state.first_unstable is not None and state.first_unstable < specs[0].upper_bound:
        return [{"group_id": s.group_id, "first_unstable": state.first_unstable} for s in specs]
    specs = [dataclasses.replace(s, last_records=state.last_records) for s in specs]
    mapped = time.monotonic()
    rows = rewrite_unit(specs, pmap, cache)
    cpu = time.process_time() - cpu
    rows[0].update(scan_seconds=scanned - started, map_seconds=mapped - scanned, cpu_seconds=cpu)
    return rows


PROFILE_ENV = "KAFKA_COMPACTION_PROFILE_DIR"


def _profiled(task, specs: list):
    """`task(specs)`, under cProfile when $KAFKA_COMPACTION_PROFILE_DIR names a directory of the
    executor host: one `<topic>-<partition>.pstats` per partition, timed in CPU seconds of the
    task's thread (waits for I/O excluded), for `python -m pstats`."""
    import os

    where = os.environ.get(PROFILE_ENV)
    if not where:
        return task(specs)
    import cProfile

    prof = cProfile.Profile(time.thread_time)
    rows = prof.runcall(task, specs)
    os.makedirs(where, exist_ok=True)
    prof.dump_stats(os.path.join(where, f"{specs[0].topic}-{specs[0].partition}.pstats"))
    return rows


def fused(sc, bins: int, partitions):
    """One task per bin of partitions (see `compact_partition`), as an RDD of result rows (dicts
    with every `FUSED_FIELDS` name). `partitions` is a broadcast of {bin id: [[GroupSpec, ...],
    ...]} (the groups of each partition of the bin, in log order). A Python RDD rather than a
    DataFrame: its job starts ~0.2 s sooner, with no query to analyse and compile, and its few
    rows need no columnar transfer (BENCHMARKS.md, session 5)."""
    kinds = {n: _PY_KINDS[type(t)] for n, t in FUSED_FIELDS}

    def run(bin_ids: Iterator[int]) -> Iterator[dict]:
        table = partitions.value
        for bin_id in bin_ids:
            for specs in table[bin_id]:
                try:
                    rows = _profiled(compact_partition, specs)
                except Exception as exc:  # noqa: BLE001 - reported per partition, never fatal
                    rows = [{"group_id": s.group_id, "error": _error_text(exc)} for s in specs]
                for row in rows:  # plain Python values of the schema's types (not numpy's)
                    yield {n: None if row.get(n) is None else kind(row[n]) for n, kind in kinds.items()}

    return sc.parallelize(range(bins), max(1, bins)).mapPartitions(run)


def pack(sizes: list[int], bins: int) -> list[list[int]]:
    """Indexes of `sizes` in at most `bins` bins, biggest first into the least loaded bin (LPT);
    bins ordered by load, heaviest first, so the longest tasks start first."""
    load = [0] * max(1, min(bins, len(sizes)))
    out: list[list[int]] = [[] for _ in load]
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        j = load.index(min(load))
        out[j].append(i)
        load[j] += sizes[i]
    return [out[j] for j in sorted(range(len(out)), key=lambda j: -load[j]) if out[j]]


_PY_KINDS = {T.IntegerType: int, T.StringType: str, T.LongType: int, T.DoubleType: float}


__all__ = [
    "BLOCK_SCHEMA",
    "GroupSpec",
    "compact_partition",
    "fused",
    "merge_buckets",
    "pack",
    "rewrite_units",
    "scan_ranges",
    "side_blocks",
    "task_ids_frame",
    "unit_slots",
]
