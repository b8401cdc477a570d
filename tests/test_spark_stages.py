"""The DataFrame steps of partitions cut into ranges (compaction/spark_stages.py), with chispa.

Few, fat Spark tests (the JVM start dominates). Each step is checked on real blocks: a generated
partition cut into three ranges, its blocks computed in this process with compaction/ranges.py
(the reference), then each DataFrame step compared with the same function applied by hand. The
whole path is covered end to end by
tests/test_job_e2e.py::test_partitions_cut_into_ranges_write_the_same_bytes.
"""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from test_ranges import cleaned, generate, in_ranges, specs_for

from compaction import ranges
from compaction.rewrite import CLEANED
from compaction.spark_stages import (
    BLOCK_SCHEMA,
    _murmur3_int,
    deal_buckets,
    merge_buckets,
    rewrite_units,
    scan_ranges,
    side_blocks,
    task_ids_frame,
    unit_slots,
)

MERGES = 2  # merge tasks


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    part = generate(tmp_path_factory.mktemp("stages") / "logs", "--records", "3000", "--keys", "400",
                    "--codec", "mixed", "--tombstone-ratio", "0.1", "--segment-bytes", "30000")  # fmt: skip
    return part, specs_for(part, 3)


def _frame(spark, blocks):
    return spark.createDataFrame([tuple(b) for b in blocks], BLOCK_SCHEMA)


def _scan(spark, specs):
    table = spark.sparkContext.broadcast({i: (s, 0, i == 0) for i, s in enumerate(specs)})
    return scan_ranges(task_ids_frame(spark, len(specs)), table)


def test_scan_ranges_emits_each_ranges_blocks(spark, partition):
    _, specs = partition
    expected = [b for s in specs for b in ranges.scan_range(s, 0)]
    got = _scan(spark, specs).where(F.col("kind") != ranges.STATS)
    assert_df_equality(got, _frame(spark, expected), ignore_row_order=True)
    stats = _scan(spark, specs).where(F.col("kind") == ranges.STATS).select("range_id").collect()
    assert sorted(r.range_id for r in stats) == [s.group_id for s in specs]


def test_side_blocks_are_producers_stats_epochs_and_errors(spark, partition):
    _, specs = partition
    blocks = _frame(spark, [b for s in specs for b in ranges.scan_range(s, 0)]
                    + [ranges.Block(99, ranges.ERROR, -1, 0, b"boom"), ranges.stats_block(98, 1.0, 0.5)])  # fmt: skip
    kinds = {r.kind for r in side_blocks(blocks).collect()}
    side = {ranges.PRODUCERS, ranges.STATS, ranges.EPOCHS, ranges.ERROR}
    assert kinds <= side and {ranges.STATS, ranges.EPOCHS, ranges.ERROR} <= kinds


def test_scan_error_comes_back_as_a_block(spark, partition, tmp_path):
    _, specs = partition
    import dataclasses

    missing = dataclasses.replace(specs[0], part_path=str(tmp_path / "gone"))
    rows = _scan(spark, [missing]).where(F.col("kind") == ranges.ERROR).collect()
    assert len(rows) == 1 and rows[0].range_id == specs[0].group_id and bytes(rows[0].data)


def test_merge_buckets_gives_the_found_blocks_of_merge_bucket(spark, partition):
    _, specs = partition
    blocks = [b for s in specs for b in ranges.scan_range(s, 0)]
    expected = [f for k in range(MERGES)
                for f in ranges.merge_bucket([(b.range_id, b.data) for b in blocks
                                              if b.kind == ranges.SUMMARY and b.bucket % MERGES == k])]  # fmt: skip
    assert expected, "the ranges share keys: some must be superseded by a later range"
    got = merge_buckets(_frame(spark, blocks), _deal(spark))
    # FOUND blocks of one range from one merge task: compare their decoded entries, not block order
    assert _entries(got.collect()) == _entries(expected)


def _deal(spark):
    return spark.createDataFrame(deal_buckets(MERGES, 2), "bucket int, slot int")


def _entries(blocks) -> set:
    out = set()
    for b in blocks:
        f = ranges.from_block(bytes(b.data) if not isinstance(b, ranges.Block) else b.data)
        out |= {(b.range_id, i, v) for i, v in zip(f.column("id").to_pylist(), f.column("latest").to_pylist())}
    return out


def test_deal_buckets_spreads_fine_buckets_over_the_merge_tasks(spark):
    deal = deal_buckets(3, 3)
    assert [b for b, _ in deal] == list(range(ranges.FINE_BUCKETS))
    frame = spark.createDataFrame(deal, "bucket int, slot int").repartition(3, "slot")
    placed = frame.select("bucket", F.spark_partition_id().alias("p")).collect()
    assert {r.bucket: r.p for r in placed} == {b: b % 3 for b in range(ranges.FINE_BUCKETS)}


def test_rewrite_units_writes_what_the_ranges_write_in_process(spark, partition):
    part, specs = partition
    in_ranges(specs, ranges.FINE_BUCKETS, unit_per_group=True)
    reference = cleaned(part)
    blocks = _frame(spark, [b for s in specs for b in ranges.scan_range(s, 0)])
    units = {s.group_id: [s] for s in specs}
    slot_of = dict(unit_slots(sorted(units), 2))
    slots = spark.createDataFrame([(g, g, slot_of[g]) for g in units], "range_id int, unit_id int, slot int")
    rows = rewrite_units(merge_buckets(blocks, _deal(spark)), blocks, slots, spark.sparkContext.broadcast(units)).collect()
    assert sorted(r.group_id for r in rows) == sorted(units) and not any(r.error for r in rows)
    assert cleaned(part) == reference
    assert not list(part.glob("*" + CLEANED))


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
