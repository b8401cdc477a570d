"""The Spark stages of the offset-map path: scan -> offset map -> kept offsets -> rewrite.

For partitions too big for one task (see run.py). Each stage is DataFrame -> DataFrame with an
explicit schema; record values stay in the files and are copied once, by the rewrite task.

- scan: one task per byte range of a segment (a segment, or a split of a big one at batch
  positions from its sparse `.index`), walked in chunks of ~32 MiB; it streams bounded Arrow
  batches of map rows (a chunk's distinct dirty keys with their max offset), "other" rows (every
  other keyed record below the bound: clean section, aborted) and producer batch headers.
- offset map: max dirty offset per (topic, partition, key) and the group of that offset: a hash
  aggregate that Spark spills, no key set in one task.
- kept offsets: the map's winners, plus the other rows whose key is absent from the map (or whose
  offset >= its entry), with the rewrite unit of their group.
- rewrite: one task per unit receives the unit's kept offsets, sorts them (numpy, 12 B per
  kept record) and hands them to the rewrite one segment at a time (`rewrite.KeptOffsets`); it
  never holds a key.

Work units are described by `GroupSpec`s shipped in broadcasts; rows refer to them by
`group_id`/`unit_id`. Errors inside a task never fail the Spark job: they come back as rows with
an `error` text, so one damaged partition cannot stop the others.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from compaction.errors import CompactionError
from compaction.retention import first_unstable_offset
from compaction.rewrite import (
    GroupSpec,
    KeptOffsets,
    rewrite_unit,
    segment_map_rows,
    segment_producers,
)

PRODUCER_FIELDS = (
    ("producer_id", T.LongType(), pa.int64()),
    ("producer_epoch", T.IntegerType(), pa.int32()),
    ("base_offset", T.LongType(), pa.int64()),
    ("last_offset", T.LongType(), pa.int64()),
    ("attributes", T.IntegerType(), pa.int32()),
    ("records_count", T.IntegerType(), pa.int32()),
    ("max_timestamp", T.LongType(), pa.int64()),
)
# Four kinds of rows share one schema: map rows (key, dirty_offset: the max dirty offset of the
# key in one scan chunk), other rows (key, offset: one keyed record outside the map), producer
# batch rows (producer_id set) and error rows (error set).
SCAN_SCHEMA = T.StructType(
    [
        T.StructField("group_id", T.IntegerType(), False),
        T.StructField("key", T.BinaryType(), True),
        T.StructField("dirty_offset", T.LongType(), True),
        T.StructField("offset", T.LongType(), True),
        T.StructField("error", T.StringType(), True),
        *(T.StructField(n, t, True) for n, t, _ in PRODUCER_FIELDS),
    ]
)
GROUPS_SCHEMA = "group_id int, topic string, partition int, unit_id int"  # unit_id null: not rewritten
KEPT_SCHEMA = T.StructType([T.StructField("unit_id", T.IntegerType()), T.StructField("offset", T.LongType())])
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
)
RESULT_SCHEMA = T.StructType([T.StructField(n, t, True) for n, t in RESULT_FIELDS])
_SCAN_ARROW = pa.schema(
    [
        pa.field("group_id", pa.int32(), False),
        pa.field("key", pa.binary()),
        pa.field("dirty_offset", pa.int64()),
        pa.field("offset", pa.int64()),
        pa.field("error", pa.string()),
        *(pa.field(n, a) for n, _, a in PRODUCER_FIELDS),
    ]
)
# Rows per Arrow batch a scan task sends to the JVM (~5 MB with 32-byte keys): the batches are
# bounded whatever the number of keys of a segment.
SCAN_ROWS_PER_BATCH = 1 << 17
# A segment bigger than this is scanned by several tasks, split at positions of its sparse
# `.index` (env KAFKA_COMPACTION_SCAN_SPLIT_BYTES; 0: one task per segment).
SCAN_SPLIT_BYTES = 256 << 20


def _scan_rows(gid: int, n: int, columns: dict) -> pa.RecordBatch:
    arrays = [
        columns.get(f.name, pa.nulls(n, f.type)) if f.name != "group_id" else pa.array(np.full(n, gid, np.int32))
        for f in _SCAN_ARROW
    ]
    return pa.RecordBatch.from_arrays([a.cast(f.type) for a, f in zip(arrays, _SCAN_ARROW)], schema=_SCAN_ARROW)


def _scan_batches(gid: int, table: pa.Table) -> Iterator[pa.RecordBatch]:
    """`table`'s rows as scan rows, in batches of at most SCAN_ROWS_PER_BATCH rows."""
    for batch in table.to_batches(max_chunksize=SCAN_ROWS_PER_BATCH):
        if batch.num_rows:
            yield _scan_rows(gid, batch.num_rows, {c: batch.column(c) for c in batch.schema.names})


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, CompactionError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"


@dataclass(frozen=True)
class ScanTask:
    """Bytes [start, end) (end -1: to the file's end) of segment `base_offset` of group
    `group_id`; `tail`: an uncleanable segment, read for its producer batch headers only."""

    group_id: int
    base_offset: int
    start: int = 0
    end: int = -1
    tail: bool = False


def scan_tasks(specs: list[GroupSpec], split_bytes: int, batch_positions=None) -> list[ScanTask]:
    """The scan tasks of `specs`: one per segment, or per split of a segment bigger than
    `split_bytes` cut at the batch positions `batch_positions(spec, seg)` gives (ascending; e.g.
    from the sparse `.index`; None or empty: no split); one per tail segment."""
    from compaction.rewrite import batch_ranges

    out = []
    for spec in specs:
        for seg in spec.segments:
            positions = None
            if split_bytes > 0 and seg.size > split_bytes and batch_positions is not None:
                positions = batch_positions(spec, seg)
            if positions is None or not len(positions):
                out.append(ScanTask(spec.group_id, seg.base_offset))
                continue
            for a, b in batch_ranges(positions, 0, seg.size, split_bytes):
                out.append(ScanTask(spec.group_id, seg.base_offset, a, -1 if b == seg.size else b))
        out.extend(ScanTask(spec.group_id, seg.base_offset, tail=True) for seg in spec.tail_segments)
    return out


def index_positions(spec: GroupSpec, seg) -> np.ndarray:
    """Batch positions from the segment's sparse `.index` (every entry points at a batch start);
    empty when there is no usable index."""
    from compaction.format.index import read_offset_index

    try:
        data = spec.storage.read_bytes(spec.segment_path(seg.base_offset, ".index"))
    except (OSError, FileNotFoundError):
        return np.empty(0, dtype=np.int64)
    pos = read_offset_index(data, seg.base_offset)[:, 1]
    pos = pos[(pos > 0) & (pos < seg.size)]
    if len(pos) > 1 and not np.all(np.diff(pos) > 0):  # not trustworthy: no split
        return np.empty(0, dtype=np.int64)
    return pos


def task_ids_frame(spark: SparkSession, n: int) -> DataFrame:
    """Rows task_id 0..n-1, one Spark partition each, so every scan task is its own Spark task."""
    rdd = spark.sparkContext.parallelize([(i,) for i in range(n)], max(1, n))
    return spark.createDataFrame(rdd, "task_id int")


def scan(tasks: DataFrame, table, chunk_bytes: int | None = None) -> DataFrame:
    """Per scan task: map rows, other rows and producer rows, streamed in bounded Arrow batches.
    `table` is a broadcast of {task_id: (GroupSpec, ScanTask)}."""
    from compaction.rewrite import SCAN_CHUNK_BYTES

    chunk = chunk_bytes or SCAN_CHUNK_BYTES

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import os

        step = int(os.environ.get("KAFKA_COMPACTION_SCAN_CHUNK_BYTES", chunk))
        for batch in batches:
            for tid in batch.column("task_id").to_pylist():
                spec, task = table.value[tid]
                gid = spec.group_id
                try:
                    if task.tail:
                        yield from _scan_batches(gid, pa.table(segment_producers(spec, task.base_offset)))
                        continue
                    seg = next(s for s in spec.segments if s.base_offset == task.base_offset)
                    for dirty, others, producers in segment_map_rows(spec, seg, task.start, task.end, step):
                        yield from _scan_batches(gid, dirty)
                        yield from _scan_batches(gid, others)
                        yield from _scan_batches(gid, pa.table(producers))
                except Exception as exc:  # noqa: BLE001 - reported per partition, never fatal
                    yield _scan_rows(gid, 1, {"error": pa.array([_error_text(exc)])})

    return tasks.mapInArrow(run, SCAN_SCHEMA)


def side_rows(scan_rows: DataFrame) -> DataFrame:
    """Error and producer rows (few: one per producer batch), for the driver."""
    return scan_rows.where(F.col("key").isNull()).select("group_id", "error", *(n for n, _, _ in PRODUCER_FIELDS))


def scan_errors(scan_rows: DataFrame) -> DataFrame:
    return scan_rows.where(F.col("error").isNotNull()).select("group_id", "error")


def producer_rows(scan_rows: DataFrame) -> DataFrame:
    return scan_rows.where(F.col("producer_id").isNotNull()).select("group_id", *(n for n, _, _ in PRODUCER_FIELDS))


def offset_map(scan_rows: DataFrame, groups: DataFrame) -> DataFrame:
    """The key -> latest dirty offset map of each partition, exact keys, no bound: a hash
    aggregate (spills), no collect_set. `groups` (GROUPS_SCHEMA) maps group_id -> (topic,
    partition). Output: topic, partition, key, latest_offset, group_id (the group of that offset)."""
    dirty = scan_rows.where(F.col("dirty_offset").isNotNull()).join(
        F.broadcast(groups.select("group_id", "topic", "partition")), "group_id", "inner"
    )
    return (
        dirty.groupBy("topic", "partition", "key")
        .agg(F.max("dirty_offset").alias("latest_offset"), F.max_by("group_id", "dirty_offset").alias("group_id"))
        .select("topic", "partition", "key", "latest_offset", "group_id")
    )


def kept_offsets(scan_rows: DataFrame, map_df: DataFrame, groups: DataFrame, others: bool = True) -> DataFrame:
    """(unit_id, offset) of every keyed record below the bound that the rewrite keeps, for the
    groups with a unit: each map entry's offset, and each other row whose key is absent from its
    partition's map or whose offset >= the key's entry (Kafka: offset >= map.get(key), absent
    -1). `others=False` skips the join when no scanned group has other rows (no clean section, no
    aborted transaction): an empty side would still cost a shuffle of the map."""
    units = F.broadcast(groups.where(F.col("unit_id").isNotNull()).select("group_id", "topic", "partition", "unit_id"))
    winners = map_df.join(units.select("group_id", "unit_id"), "group_id", "inner").select(
        "unit_id", F.col("latest_offset").alias("offset")
    )
    if not others:
        return winners.select("unit_id", "offset")
    other = scan_rows.where(F.col("offset").isNotNull()).join(units, "group_id", "inner")
    entries = map_df.select("topic", "partition", "key", "latest_offset")
    survivors = (
        other.join(entries, ["topic", "partition", "key"], "left")
        .where(F.col("latest_offset").isNull() | (F.col("offset") >= F.col("latest_offset")))
        .select("unit_id", "offset")
    )
    return winners.unionByName(survivors).select("unit_id", "offset")


# --- the rewrite: one Spark partition per unit ------------------------------------------------


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
    """(unit_id, slot) per unit: `repartition(partitions, "slot")` puts the i-th unit (sorted) in
    Spark partition i mod `partitions` (Spark: pmod(hash(slot), n)); slot is the smallest int with
    that hash residue. Units then spread evenly over the tasks instead of colliding."""
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


class _UnitRuns:
    """Splits a task's input (Arrow batches of unit_id, offset sorted by both) into one stream
    of offset arrays per unit, without holding more than one input batch."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._it = iter(batches)
        self._head: tuple[np.ndarray, np.ndarray] | None = None

    def _fill(self) -> bool:
        while self._head is None:
            b = next(self._it, None)
            if b is None:
                return False
            if b.num_rows:
                self._head = (b.column("unit_id").to_numpy(zero_copy_only=False).astype(np.int64),
                              b.column("offset").to_numpy(zero_copy_only=False).astype(np.int64))  # fmt: skip
        return True

    def offsets(self, uid: int) -> Iterator[np.ndarray]:
        """The offsets of unit `uid` at the head of the input (consumed as they are yielded)."""
        while self._fill():
            units, offs = self._head
            end = int(np.searchsorted(units, uid, side="right"))
            if end == 0:
                return
            self._head = None if end == len(units) else (units[end:], offs[end:])
            yield offs[:end]
            if end < len(units):
                return

    def units(self) -> Iterator[int]:
        while self._fill():
            uid = int(self._head[0][0])
            yield uid
            for _ in self.offsets(uid):  # what the rewrite did not consume
                pass


def sort_kept(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's (unit_id, offset) rows sorted by unit, then offset, in numpy: 12 B per row of
    the task (one unit's kept records, usually), sorted in place when the task has one unit."""
    units, offsets = [], []
    for b in batches:
        if b.num_rows:
            units.append(b.column("unit_id").to_numpy(zero_copy_only=False).astype(np.int32))
            offsets.append(b.column("offset").to_numpy(zero_copy_only=False).astype(np.int64))
    if not units:
        return iter(())
    u, o = np.concatenate(units), np.concatenate(offsets)
    del units, offsets
    if u.min() == u.max():
        o.sort()
    else:
        order = np.lexsort((o, u))
        u, o = u[order], o[order]
    return iter([pa.RecordBatch.from_arrays([pa.array(u), pa.array(o)], names=["unit_id", "offset"])])


def rewrite(kept: DataFrame, slots: DataFrame, units, partitions: int, spark_sort: bool = False) -> DataFrame:
    """One Spark partition per unit (`slots`: unit_id, slot from `unit_slots`), its kept offsets
    sorted and streamed into `rewrite_unit` (see rewrite.py): re-read its segments, keep the
    offsets in the set, write `.cleaned` files. A sentinel offset -1 per unit gives a unit with
    nothing kept its task. `units` is a broadcast of {unit_id: [GroupSpec, ...]} in log order.

    The sort is done in the task (`sort_kept`: 12 B per kept record of its unit) unless
    `spark_sort`: Spark's sortWithinPartitions spills instead, but with a 512m heap a unit of
    ~20M kept offsets spilled into so many files that merging them ran the heap out (bench/keys.py
    60M keys, BENCHMARKS.md)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = _result_arrow()
        runs = _UnitRuns(batches if spark_sort else sort_kept(batches))
        for uid in runs.units():
            specs = units.value[uid]
            try:
                rows = rewrite_unit(specs, KeptOffsets(runs.offsets(uid)))
            except Exception as exc:  # noqa: BLE001 - reported per partition, never fatal
                rows = [{"group_id": s.group_id, "error": _error_text(exc)} for s in specs]
            yield pa.RecordBatch.from_pylist(rows, schema=schema)

    sentinels = slots.select("unit_id", F.lit(-1).cast("long").alias("offset"))
    rows = kept.select("unit_id", "offset").unionByName(sentinels).join(F.broadcast(slots), "unit_id", "inner")
    spread = rows.repartition(max(1, partitions), "slot")
    if spark_sort:
        spread = spread.sortWithinPartitions("unit_id", "offset")
    return spread.select("unit_id", "offset").mapInArrow(run, RESULT_SCHEMA)


def _result_arrow() -> pa.Schema:
    kinds = {T.IntegerType: pa.int32(), T.StringType: pa.string(), T.LongType: pa.int64(), T.DoubleType: pa.float64()}
    return pa.schema([pa.field(n, kinds[type(t)]) for n, t in RESULT_FIELDS])


# --- one task per partition ----------------------------------------------------------------
#
# For a partition of moderate size the whole round runs in one task: scan its groups, build its
# offset map in the task (exact key bytes, pyarrow hash aggregation), derive producer state from
# its batch headers, then rewrite its groups in log order. No key row crosses into Spark, so the
# shuffles of the offset map and of the lookup, the persisted scan rows and the Python worker
# start-up of three more stages all disappear. Large partitions keep the Spark offset map above
# (their map need not fit in one task). Decisions are the same either way.

FUSED_FIELDS = (
    *RESULT_FIELDS,
    ("first_unstable", T.LongType()),
    ("scan_seconds", T.DoubleType()),  # per partition, on its first group's row
    ("map_seconds", T.DoubleType()),
    ("cpu_seconds", T.DoubleType()),  # CPU time of the whole partition in this process
)


class _HeaderRow:
    """A producer batch header as `last_records_of_active_producers` reads it."""

    __slots__ = ("producer_id", "producer_epoch", "base_offset", "last_offset", "is_transactional",
                 "is_control", "records_count", "max_timestamp")  # fmt: skip

    def __init__(self, pid, epoch, base, last, attrs, count, max_ts) -> None:
        self.producer_id, self.producer_epoch, self.base_offset, self.last_offset = pid, epoch, base, last
        self.is_transactional, self.is_control = bool(attrs & 0x10), bool(attrs & 0x20)
        self.records_count, self.max_timestamp = count, max_ts


def _header_rows(tables: list[pa.Table]) -> list[_HeaderRow]:
    if not tables:
        return []
    t = pa.concat_tables(tables)
    cols = [t.column(n).to_pylist() for n, _, _ in PRODUCER_FIELDS]
    return sorted((_HeaderRow(*row) for row in zip(*cols)), key=lambda r: r.base_offset)


def compact_partition(specs: list) -> list[dict]:
    """The round for one partition (`specs`: all its groups, log order) in this process.

    Returns one row per group: the rewrite's stats, or `error`, or `first_unstable` (an open
    transaction below the planned bound: nothing was written, the driver plans again)."""
    import dataclasses
    import os

    from compaction.buffers import keep_freed_heap
    from compaction.discover import validate_partition_path
    from compaction.pyworker import keep_zip_directories
    from compaction.retention import last_records_of_active_producers
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
    pmap, producers = scan_partition(specs, cache, epochs)
    check_partition_epochs(specs, epochs)
    batches = _header_rows([pa.table(p) for p in producers if len(p["base_offset"])])
    scanned = time.monotonic()
    unstable = first_unstable_offset(batches)
    if unstable is not None and unstable < specs[0].upper_bound:
        return [{"group_id": s.group_id, "first_unstable": unstable} for s in specs]
    last = last_records_of_active_producers(batches)
    specs = [dataclasses.replace(s, last_records=last) for s in specs]
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
    "GroupSpec",
    "ScanTask",
    "compact_partition",
    "fused",
    "index_positions",
    "kept_offsets",
    "offset_map",
    "pack",
    "producer_rows",
    "rewrite",
    "scan",
    "scan_errors",
    "scan_tasks",
    "side_rows",
    "task_ids_frame",
    "unit_slots",
]
