"""The stages of the Spark offset-map path (compaction/spark_stages.py) on hand-made rows.

Few, fat Spark tests (the JVM start dominates); the pure pieces (kept-offsets decisions, unit
runs, scan splits) without Spark. The whole path is covered end to end by
tests/test_job_e2e.py::test_spark_offset_map_path_writes_the_same_bytes.

Hand-made partition t-0 (first dirty offset 4, groups 0 = offsets 0..5 and 1 = offsets 6..11,
units: 0 -> unit 10, 1 -> unit 11), records:

    offset  0  1  2  3  4  5  6  7  8     9  10  11
    key     a  b  b  c  a  d  d  -  a     e  d   b
    section clean------  dirty--------------------
                               keyless aborted  (8, 9: an aborted transaction's batch)

    map (max dirty offset per key, aborted and keyless left out): a -> 4, d -> 10, b -> 11
    kept:  a@4, d@10, b@11 (winners); c@3 (clean, absent from the map); a@8 (aborted, 8 >= 4);
           e@9 (aborted, absent); not b@1, b@2 (clean, b is in the map: 1, 2 < 11), not d@5, d@6.

The scan rows of t-0 (one chunk per group; map rows pre-aggregated per chunk):

    gid key dirty_offset offset
    0   a   4            .        group 0's dirty chunk: a@4, d@5
    0   d   5            .
    1   d   10           .        group 1: d@6 and d@10 -> 10, b@11
    1   b   11           .
    0   a   .            0        clean and aborted records: one row each
    0   b   .            1
    0   b   .            2
    0   c   .            3
    1   a   .            8
    1   e   .            9

plus partition t-1 (group 2, unit 12): the same key bytes "a" at 7 (dirty) -> its own entry; and
partition u-0 (group 3, no unit: not rewritten, e.g. replanned): its rows never reach `kept`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql import types as T

from compaction.rewrite import KEPT_NOT, KeptOffsets, KeyLookup, batch_ranges, keep_records
from compaction.spark_stages import (
    GROUPS_SCHEMA,
    KEPT_SCHEMA,
    SCAN_SCHEMA,
    ScanTask,
    _murmur3_int,
    _UnitRuns,
    kept_offsets,
    offset_map,
    scan_tasks,
    unit_slots,
)

# --- the hand-made partition t-0 -----------------------------------------------------------------

OFFSETS = list(range(12))
KEYS = [b"a", b"b", b"b", b"c", b"a", b"d", b"d", None, b"a", b"e", b"d", b"b"]
FIRST_DIRTY, ABORTED = 4, {8, 9}
MAP_T0 = {b"a": 4, b"d": 10, b"b": 11}
KEPT_T0 = [3, 4, 8, 9, 10, 11]

MAP_ROWS = [(0, b"a", 4), (0, b"d", 5), (1, b"d", 10), (1, b"b", 11), (2, b"a", 7), (3, b"z", 1)]
OTHER_ROWS = [(0, b"a", 0), (0, b"b", 1), (0, b"b", 2), (0, b"c", 3), (1, b"a", 8), (1, b"e", 9), (3, b"y", 0)]
GROUPS = [(0, "t", 0, 10), (1, "t", 0, 11), (2, "t", 1, 12), (3, "u", 0, None)]

MAP_SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("key", T.BinaryType()),
        T.StructField("latest_offset", T.LongType()),
        T.StructField("group_id", T.IntegerType()),
    ]
)
EXPECTED_MAP = [
    ("t", 0, b"a", 4, 0),
    ("t", 0, b"d", 10, 1),
    ("t", 0, b"b", 11, 1),
    ("t", 1, b"a", 7, 2),
    ("u", 0, b"z", 1, 3),
]
EXPECTED_KEPT = [(10, 3), (10, 4), (11, 8), (11, 9), (11, 10), (11, 11), (12, 7)]


def _scan_frame(spark):
    names = [f.name for f in SCAN_SCHEMA.fields]

    def row(**values):
        return tuple(values.get(n) for n in names)

    rows = [row(group_id=g, key=k, dirty_offset=d) for g, k, d in MAP_ROWS]
    rows += [row(group_id=g, key=k, offset=o) for g, k, o in OTHER_ROWS]
    rows.append(row(group_id=1, producer_id=42, producer_epoch=0, base_offset=8, last_offset=9,
                    attributes=0x10, records_count=2, max_timestamp=5))  # fmt: skip
    rows.append(row(group_id=2, error="CorruptRecordError: t-1/00000000000000000020.log: byte 0: bad"))
    return spark.createDataFrame(rows, SCAN_SCHEMA)


@pytest.mark.spark
def test_offset_map_and_kept_offsets(spark):
    scan_rows = _scan_frame(spark)
    groups = spark.createDataFrame(GROUPS, GROUPS_SCHEMA)

    om = offset_map(scan_rows, groups)
    assert om.columns == ["topic", "partition", "key", "latest_offset", "group_id"]
    assert_df_equality(om, spark.createDataFrame(EXPECTED_MAP, MAP_SCHEMA), ignore_row_order=True,
                       ignore_nullable=True)  # fmt: skip
    # A hash aggregate (max, max_by): no collect_set, so no fallback to sort-based aggregation.
    plan = om._jdf.queryExecution().executedPlan().toString()
    assert "HashAggregate" in plan and "SortAggregate" not in plan and "ObjectHashAggregate" not in plan

    kept = kept_offsets(scan_rows, om, groups)
    assert kept.columns == ["unit_id", "offset"]
    assert_df_equality(kept, spark.createDataFrame(EXPECTED_KEPT, KEPT_SCHEMA), ignore_row_order=True,
                       ignore_nullable=True)  # fmt: skip
    # Without the join of the other rows: the winners only (right when there are none).
    winners = [(u, o) for u, o in EXPECTED_KEPT if o in (4, 10, 11, 7)]
    assert_df_equality(kept_offsets(scan_rows, om, groups, others=False),
                       spark.createDataFrame(winners, KEPT_SCHEMA), ignore_row_order=True,
                       ignore_nullable=True)  # fmt: skip


@pytest.mark.spark
def test_offset_map_empty(spark):
    groups = spark.createDataFrame(GROUPS, GROUPS_SCHEMA)
    empty = spark.createDataFrame([], SCAN_SCHEMA)
    om = offset_map(empty, groups)
    assert_df_equality(om, spark.createDataFrame([], MAP_SCHEMA), ignore_nullable=True)
    assert_df_equality(kept_offsets(empty, om, groups), spark.createDataFrame([], KEPT_SCHEMA), ignore_nullable=True)


@pytest.mark.spark
def test_unit_slots_put_each_unit_in_its_own_partition(spark):
    values = list(range(-3, 50)) + [2**31 - 1, -(2**31)]
    hashed = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h")).collect()
    assert {r.v: r.h for r in hashed} == {v: _murmur3_int(v) for v in values}  # Spark's hash(int)

    units = [40, 7, 11, 25, 3]
    slots = unit_slots(units, len(units))
    frame = spark.createDataFrame(slots, "unit_id int, slot int")
    placed = frame.repartition(len(units), "slot").select("unit_id", F.spark_partition_id().alias("p")).collect()
    assert {r.unit_id: r.p for r in placed} == {u: i for i, u in enumerate(sorted(units))}
    # fewer partitions than units: round robin over the sorted units
    placed = spark.createDataFrame(unit_slots(units, 2), "unit_id int, slot int").repartition(2, "slot")
    got = {r.unit_id: r.p for r in placed.select("unit_id", F.spark_partition_id().alias("p")).collect()}
    assert got == {3: 0, 7: 1, 11: 0, 25: 1, 40: 0}


# --- pure pieces -----------------------------------------------------------------------------------


class _Records:
    def __init__(self, offsets):
        self.offset = np.asarray(offsets, dtype=np.int64)


class _FakeScan:
    """What `found` reads of a SegmentScan: records.offset and keys_arrow()."""

    def __init__(self, offsets, keys):
        self.records = _Records(offsets)
        self._keys = pa.array(keys, pa.binary())

    def keys_arrow(self):
        return self._keys


def _keep(found, offsets, keys, bound):
    n = len(offsets)
    key_len = np.array([-1 if k is None else len(k) for k in keys])
    keep, _ = keep_records(np.asarray(offsets), key_len, np.zeros(n, dtype=np.int64), found, bound, True)
    return keep


def test_kept_offsets_decide_like_the_key_lookup():
    """Same keep decision as KeyLookup on t-0, in two segments (0..5, 6..11), the kept set
    streamed in arrays that do not follow segment boundaries, with a sentinel -1."""
    lookup = KeyLookup(pa.array(list(MAP_T0), pa.binary()), np.array(list(MAP_T0.values())))
    kept = KeptOffsets(iter([np.array([-1, 3]), np.array([4, 8, 9]), np.array([10, 11])]))
    bound = 11  # upper bound 12
    for lo, hi in ((0, 6), (6, 12)):
        offs, keys = OFFSETS[lo:hi], KEYS[lo:hi]
        scan = _FakeScan(offs, keys)
        by_key = _keep(lookup.found(None, None, scan), offs, keys, bound)
        by_offset = _keep(kept.found(None, None, scan), offs, keys, bound)
        assert by_offset.tolist() == by_key.tolist()
    # the worked example: b@1 and b@2 (clean, b mapped) dropped, c@3 (clean, absent) kept, aborted
    # a@8 (>= map[a]) and e@9 (absent) kept; the keyless 7 dropped by keep_records either way
    assert [o for o, k in zip(OFFSETS, _keep(np.where(np.isin(OFFSETS, KEPT_T0), OFFSETS, KEPT_NOT),
                                             OFFSETS, KEYS, bound)) if k] == KEPT_T0  # fmt: skip


def test_kept_offsets_clean_key_absent_from_the_map_twice():
    """Kafka keeps every record of a clean key absent from the map: both of b@1 and b@2 stay
    when b has no dirty record (map: a -> 4 only)."""
    offs, keys = [0, 1, 2, 3, 4], [b"a", b"b", b"b", b"c", b"a"]
    lookup = KeyLookup(pa.array([b"a"], pa.binary()), np.array([4]))
    kept = KeptOffsets([np.array([1, 2, 3, 4])])  # what kept_offsets gives: a@4 + b@1, b@2, c@3
    scan = _FakeScan(offs, keys)
    a = _keep(lookup.found(None, None, scan), offs, keys, 10)
    b = _keep(kept.found(None, None, scan), offs, keys, 10)
    assert a.tolist() == b.tolist() == [False, True, True, True, True]


def test_kept_offsets_empty_segment_and_nothing_kept():
    kept = KeptOffsets(iter([np.array([-1])]))
    assert kept.found(None, None, _FakeScan([], [])).tolist() == []
    assert kept.found(None, None, _FakeScan([5, 6], [b"x", b"y"])).tolist() == [KEPT_NOT, KEPT_NOT]


def test_unit_runs_stream_one_unit_at_a_time():
    def batch(units, offsets):
        return pa.RecordBatch.from_arrays([pa.array(units, pa.int32()), pa.array(offsets, pa.int64())],
                                          names=["unit_id", "offset"])  # fmt: skip

    # unit 1 spans two batches, unit 2 has only its sentinel, unit 3 starts mid-batch
    batches = [batch([1, 1, 1], [-1, 5, 6]), batch([1, 2, 3, 3], [9, -1, -1, 20]), batch([3], [21])]
    runs = _UnitRuns(iter(batches))
    seen = {}
    for uid in runs.units():
        stream = runs.offsets(uid)
        if uid == 1:  # consume only the first array: the rest is skipped, not given to unit 2
            seen[uid] = next(stream).tolist()
        else:
            seen[uid] = [o for arr in stream for o in arr.tolist()]
    assert seen == {1: [-1, 5, 6], 2: [-1], 3: [-1, 20, 21]}


def test_batch_ranges_cut_at_batch_positions():
    positions = [0, 10, 20, 35, 50, 90]
    assert batch_ranges(positions, 0, 100, 30) == [(0, 35), (35, 90), (90, 100)]
    assert batch_ranges(positions, 0, 100, 1000) == [(0, 100)]
    assert batch_ranges(positions, 20, 60, 15) == [(20, 35), (35, 50), (50, 60)]
    assert batch_ranges([], 0, 0, 10) == [(0, 0)]


def test_scan_tasks_split_big_segments_at_index_positions():
    from compaction.rewrite import GroupSpec, SourceSegment

    spec = GroupSpec(group_id=5, topic="t", partition=0, storage=None, part_path="/x",
                     segments=(SourceSegment(0, 100, 0), SourceSegment(50, 30, 0)), first_dirty_offset=0,
                     upper_bound=80, now_ms=0, delete_retention_ms=0, legacy_delete_horizon_ms=0,
                     index_interval_bytes=4096, tail_segments=(SourceSegment(80, 10, 0),))  # fmt: skip
    positions = {0: np.array([40, 70]), 50: np.array([10])}
    tasks = scan_tasks([spec], 40, lambda s, seg: positions[seg.base_offset])
    assert tasks == [ScanTask(5, 0, 0, 40), ScanTask(5, 0, 40, -1), ScanTask(5, 50), ScanTask(5, 80, tail=True)]
    assert scan_tasks([spec], 0, lambda s, seg: positions[seg.base_offset])[:2] == [ScanTask(5, 0), ScanTask(5, 50)]


def test_sort_kept_orders_by_unit_then_offset():
    from compaction.spark_stages import sort_kept

    def batch(units, offsets):
        return pa.RecordBatch.from_arrays([pa.array(units, pa.int32()), pa.array(offsets, pa.int64())],
                                          names=["unit_id", "offset"])  # fmt: skip

    (one,) = list(sort_kept(iter([batch([3, 1, 3], [9, 5, -1]), batch([1], [2])])))
    assert one.column("unit_id").to_pylist() == [1, 1, 3, 3]
    assert one.column("offset").to_pylist() == [2, 5, -1, 9]
    (single,) = list(sort_kept(iter([batch([7, 7], [4, -1]), batch([7], [1])])))
    assert single.column("offset").to_pylist() == [-1, 1, 4]
    assert list(sort_kept(iter([]))) == []


def test_profiled_writes_one_pstats_per_partition_only_when_asked(tmp_path, monkeypatch):
    import pstats
    from types import SimpleNamespace

    from compaction.spark_stages import PROFILE_ENV, _profiled

    specs = [SimpleNamespace(topic="orders", partition=3)]
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    assert _profiled(lambda s: [len(s)], specs) == [1]
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "prof"))
    assert _profiled(lambda s: [sum(range(10_000))], specs) == [49_995_000]
    (out,) = (tmp_path / "prof").iterdir()
    assert out.name == "orders-3.pstats"
    assert pstats.Stats(str(out)).total_calls > 0
