"""The Spark stages of one round: scan -> offset map -> lookup -> rewrite.

Each stage is DataFrame -> DataFrame with an explicit schema. Only (key, offset) rows travel
through Spark; record values stay in the files and are copied once, by the rewrite task.

Work units are described by `GroupSpec`s (one per output segment group) shipped to executors in
a broadcast; rows refer to them by `group_id`. Errors inside a task never fail the Spark job:
they come back as rows with an `error` text, so one damaged partition cannot stop the others.
"""

from __future__ import annotations

import traceback
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from compaction.errors import CompactionError
from compaction.retention import first_unstable_offset
from compaction.rewrite import GroupSpec, KeyLookup, rewrite_unit, scan_group

PRODUCER_FIELDS = (
    ("producer_id", T.LongType(), pa.int64()),
    ("producer_epoch", T.IntegerType(), pa.int32()),
    ("base_offset", T.LongType(), pa.int64()),
    ("last_offset", T.LongType(), pa.int64()),
    ("attributes", T.IntegerType(), pa.int32()),
    ("records_count", T.IntegerType(), pa.int32()),
    ("max_timestamp", T.LongType(), pa.int64()),
)
# Three kinds of rows share one schema: key rows (key set), producer batch rows (producer_id
# set) and error rows (error set).
SCAN_SCHEMA = T.StructType(
    [
        T.StructField("group_id", T.IntegerType(), False),
        T.StructField("key", T.BinaryType(), True),
        T.StructField("max_offset", T.LongType(), True),
        T.StructField("dirty_offset", T.LongType(), True),  # -1: the key has no dirty record here
        T.StructField("error", T.StringType(), True),
        *(T.StructField(n, t, True) for n, t, _ in PRODUCER_FIELDS),
    ]
)
LOOKUP_SCHEMA = T.StructType(
    [
        T.StructField("group_id", T.IntegerType(), False),
        T.StructField("key", T.BinaryType(), True),
        T.StructField("latest_offset", T.LongType(), True),
    ]
)
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
        pa.field("max_offset", pa.int64()),
        pa.field("dirty_offset", pa.int64()),
        pa.field("error", pa.string()),
        *(pa.field(n, a) for n, _, a in PRODUCER_FIELDS),
    ]
)


def _scan_rows(gid: int, n: int, columns: dict) -> pa.RecordBatch:
    arrays = [
        columns.get(f.name, pa.nulls(n, f.type)) if f.name != "group_id" else pa.array([gid] * n, pa.int32())
        for f in _SCAN_ARROW
    ]
    return pa.RecordBatch.from_arrays([a.cast(f.type) for a, f in zip(arrays, _SCAN_ARROW)], schema=_SCAN_ARROW)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, CompactionError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"


def group_ids_frame(spark: SparkSession, group_ids: list[int]) -> DataFrame:
    """One Spark partition per group id, so every group is its own task."""
    rdd = spark.sparkContext.parallelize([(g,) for g in group_ids], max(1, len(group_ids)))
    return spark.createDataFrame(rdd, "group_id int")


def scan(groups: DataFrame, specs) -> DataFrame:
    """Per group: one row per distinct key with its latest offset, and latest dirty offset.

    `specs` is a broadcast of {group_id: GroupSpec}. The pre-aggregation happens in the task
    (pyarrow hash aggregation), so Spark receives one row per distinct key per group.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = specs.value
        for batch in batches:
            for gid in batch.column("group_id").to_pylist():
                try:
                    keys, producers = scan_group(table[gid])
                except Exception as exc:  # noqa: BLE001 - reported per partition, never fatal
                    yield _scan_rows(gid, 1, {"error": pa.array([_error_text(exc)])})
                    continue
                yield _scan_rows(gid, keys.num_rows, {c: keys.column(c).combine_chunks() for c in keys.column_names})
                if producers is not None and producers.num_rows:
                    cols = {c: producers.column(c).combine_chunks() for c in producers.column_names}
                    yield _scan_rows(gid, producers.num_rows, cols)

    return groups.mapInArrow(run, SCAN_SCHEMA)


def scan_errors(scan_rows: DataFrame) -> DataFrame:
    return scan_rows.where(F.col("error").isNotNull()).select("group_id", "error")


def producer_rows(scan_rows: DataFrame) -> DataFrame:
    return scan_rows.where(F.col("producer_id").isNotNull()).select("group_id", *(n for n, _, _ in PRODUCER_FIELDS))


def offset_map(scan_rows: DataFrame, group_partition: DataFrame) -> DataFrame:
    """The key -> latest offset map of each partition's dirty section, exact keys, no bound.

    `group_partition` maps group_id -> (topic, partition). Output: topic, partition, key,
    latest_offset, groups (the groups the key occurs in, for the lookup step).
    """
    keyed = scan_rows.where(F.col("key").isNotNull()).join(F.broadcast(group_partition), "group_id", "inner")
    return (
        keyed.groupBy("topic", "partition", "key")
        .agg(
            F.max("dirty_offset").alias("latest_offset"),
            F.collect_set("group_id").alias("groups"),
        )
        .where(F.col("latest_offset") >= 0)
        .select("topic", "partition", "key", "latest_offset", "groups")
    )


def group_lookup(offset_map_df: DataFrame) -> DataFrame:
    """For each group, the map entries of the keys occurring in it (the anti-join of the clean
    tail falls out: a key absent here keeps its records)."""
    return offset_map_df.select(
        F.explode("groups").alias("group_id"), F.col("key"), F.col("latest_offset")
    ).select("group_id", "key", "latest_offset")


def rewrite(lookup: DataFrame, sentinels: DataFrame, group_units: DataFrame, units) -> DataFrame:
    """One task per unit (see rewrite.py): re-read its segments, keep what the map says, write
    `.cleaned` files. `units` is a broadcast of {unit_id: [GroupSpec, ...]} in log order."""

    def run(table: pa.Table) -> pa.Table:
        uid = table.column("unit_id")[0].as_py()
        specs = units.value[uid]
        keyed = table.filter(table.column("key").is_valid())
        keys = keyed.column("key").combine_chunks().cast(pa.binary())
        latest = keyed.column("latest_offset").combine_chunks().to_numpy(zero_copy_only=False)
        try:
            rows = rewrite_unit(specs, KeyLookup(keys, latest))
        except Exception as exc:  # noqa: BLE001 - reported per partition, never fatal
            rows = [{"group_id": s.group_id, "error": _error_text(exc)} for s in specs]
        return pa.Table.from_pylist(rows, schema=_result_arrow())

    with_units = lookup.unionByName(sentinels).join(F.broadcast(group_units), "group_id", "inner")
    return with_units.select("unit_id", "key", "latest_offset").groupBy("unit_id").applyInArrow(run, RESULT_SCHEMA)


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
FUSED_SCHEMA = T.StructType([T.StructField(n, t, True) for n, t in FUSED_FIELDS])


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

    from compaction.retention import last_records_of_active_producers
    from compaction.rewrite import SCAN_REUSE_MAX_BYTES, ScanCache

    import time

    # The scan's SegmentScans are kept for the rewrite (each segment read and decompressed once)
    # up to this many bytes of decompressed records + columns per task; the rest is read again.
    reuse = int(os.environ.get("KAFKA_COMPACTION_SCAN_REUSE_MAX_BYTES", SCAN_REUSE_MAX_BYTES))
    cache = ScanCache(reuse) if reuse > 0 else None
    started, cpu = time.monotonic(), time.process_time()
    keys, headers = [], []
    for spec in specs:
        k, prod = scan_group(spec, cache)
        keys.append(k.select(["key", "dirty_offset"]))
        if prod is not None and prod.num_rows:
            headers.append(prod)
    batches = _header_rows(headers)
    scanned = time.monotonic()
    unstable = first_unstable_offset(batches)
    if unstable is not None and unstable < specs[0].upper_bound:
        return [{"group_id": s.group_id, "first_unstable": unstable} for s in specs]
    last = last_records_of_active_producers(batches)
    specs = [dataclasses.replace(s, last_records=last) for s in specs]
    table = pa.concat_tables(keys) if len(keys) > 1 else keys[0]
    if len(keys) > 1:  # each group's rows are distinct already; across groups, take the max
        table = table.group_by("key").aggregate([("dirty_offset", "max")])
        table = table.rename_columns(["key", "dirty_offset"])
    table = table.filter(pc.greater_equal(table.column("dirty_offset"), 0))
    lookup_keys = table.column("key").combine_chunks()
    latest = table.column("dirty_offset").to_numpy()
    mapped = time.monotonic()
    rows = rewrite_unit(specs, KeyLookup(lookup_keys, latest), cache)
    cpu = time.process_time() - cpu
    rows[0].update(scan_seconds=scanned - started, map_seconds=mapped - scanned, cpu_seconds=cpu)
    return rows


def fused(parts: DataFrame, partitions) -> DataFrame:
    """One task per partition (see `compact_partition`). `parts` has one row per partition id,
    one Spark partition each; `partitions` is a broadcast of {part_id: [GroupSpec, ...]}."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = partitions.value
        schema = pa.schema([pa.field(n, _ARROW_KINDS[type(t)]) for n, t in FUSED_FIELDS])
        for batch in batches:
            for pid in batch.column("part_id").to_pylist():
                specs = table[pid]
                try:
                    rows = compact_partition(specs)
                except Exception as exc:  # noqa: BLE001 - reported per partition, never fatal
                    rows = [{"group_id": s.group_id, "error": _error_text(exc)} for s in specs]
                yield pa.RecordBatch.from_pylist(rows, schema=schema)

    return parts.mapInArrow(run, FUSED_SCHEMA)


def part_ids_frame(spark: SparkSession, bins: list[list[int]]) -> DataFrame:
    """One Spark partition (task) per bin of partition ids, in the given order."""
    rdd = spark.sparkContext.parallelize(bins, max(1, len(bins))).flatMap(lambda ids: [(p,) for p in ids])
    return spark.createDataFrame(rdd, "part_id int")


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


_ARROW_KINDS = {
    T.IntegerType: pa.int32(), T.StringType: pa.string(), T.LongType: pa.int64(), T.DoubleType: pa.float64()
}


def sentinel_rows(spark: SparkSession, group_ids: list[int]) -> DataFrame:
    """A null-key row per group so that a group with no mapped key still gets its rewrite task."""
    return spark.createDataFrame([(g, None, -1) for g in group_ids], LOOKUP_SCHEMA)


__all__ = [
    "GroupSpec",
    "compact_partition",
    "fused",
    "pack",
    "part_ids_frame",
    "group_ids_frame",
    "group_lookup",
    "offset_map",
    "producer_rows",
    "rewrite",
    "scan",
    "scan_errors",
    "sentinel_rows",
]
