"""The Spark stages of a round (compaction/spark/stages.py): `ranged`, the stage of partitions
cut into ranges whose tasks meet through the exchange directory (and `resumed`, what it left
undone), and `fused`, whole
partitions packed into tasks; and the rows both give back (`typed`, `FUSED_FIELDS`).

Few, fat Spark tests (the JVM start dominates). Each stage is checked against its tasks run in this
process (`ranged`: on threads, tests/unit/test_ranges.py `in_ranges`; `fused`: `compact_partition`):
the same rows (compared as DataFrames with chispa) and the same bytes. The whole path is covered
end to end by tests/e2e/test_job_e2e.py::test_partitions_cut_into_ranges_write_the_same_bytes.
"""

from __future__ import annotations

import dataclasses

import pytest
from chispa import assert_df_equality
from test_ranges import cleaned, generate, in_ranges, specs_for

from compaction.runtime.exchange import Exchange
from compaction.runtime.storage import Storage
from compaction.spark.stages import FUSED_FIELDS, compact_partition, fused, ranged, resumed, task_slots
from compaction.steps.group import CLEANED
from compaction.steps.range_task import finish
from compaction.steps.results import MEASURED, STATS_ROW
from compaction.steps.schedule import RangePlan, pack


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    part = generate(
        tmp_path_factory.mktemp("stages") / "logs",
        "--records 3000 --keys 400 --codec mixed --tombstone-ratio 0.1 --segment-bytes 30000",
    )
    return part, specs_for(part, 3)


def _stage(spark, partitions, where, tasks=None, peer_wait=60.0) -> list[dict]:
    """The stage and what it left undone, as the driver runs them (spark/jobs.py `_run_ranges`)."""
    sc = spark.sparkContext
    plan = RangePlan.cut(partitions, tasks or task_slots(sc))
    where.mkdir(parents=True, exist_ok=True)
    ex, bplan = Exchange(Storage.local(), str(where), peer_wait=peer_wait), sc.broadcast(plan)
    rows = ranged(sc, bplan, ex).collect()
    rows = finish(
        plan, ex, rows, lambda kind, items: resumed(sc, bplan, ex, kind, items).collect() if items else []
    )
    return [r for r in rows if r["group_id"] != STATS_ROW]


def _frame(spark, rows):
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField(n, t, True) for n, t in FUSED_FIELDS if n not in MEASURED])
    return spark.createDataFrame([tuple(r.get(n) for n in schema.fieldNames()) for r in rows], schema)


def test_task_slots_are_the_local_cores(spark):
    assert task_slots(spark.sparkContext) == 2  # conftest: local[2]


def test_ranged_stage_writes_what_its_tasks_write_in_process(spark, partition, tmp_path):
    part, specs = partition
    reference_rows = in_ranges(specs, 2, tmp_path / "threads")
    reference = cleaned(part)
    rows = _stage(spark, [specs], tmp_path / "stage")
    assert_df_equality(_frame(spark, rows), _frame(spark, reference_rows), ignore_row_order=True)
    assert cleaned(part) == reference
    assert not list(part.glob("*" + CLEANED))


def test_more_tasks_than_slots_finish_through_the_follow_up_stages(spark, partition, tmp_path):
    """Four tasks on two slots (as under dynamic allocation before the executors come): the
    first two give up on the peers that cannot start, and the follow-up stages finish the round
    with the bytes of the tasks run together."""
    part, specs = partition
    in_ranges(specs, 4, tmp_path / "threads")
    reference = cleaned(part)
    rows = _stage(spark, [specs], tmp_path / "stage", tasks=4, peer_wait=1.0)
    assert not any(r.get("error") for r in rows), rows
    assert sorted(r["group_id"] for r in rows) == sorted(s.group_id for s in specs)
    assert cleaned(part) == reference
    assert any(p.name.startswith("gone-") for p in (tmp_path / "stage").iterdir())


def test_a_damaged_range_fails_its_partition_and_the_other_is_cleaned(spark, partition, tmp_path):
    part, specs = partition
    other = generate(tmp_path / "other", "--records 2000 --keys 300 --segment-bytes 30000")
    other_specs = [dataclasses.replace(s, group_id=s.group_id + 100) for s in specs_for(other, 2)]
    (part / "00000000000000000000.log").rename(part / "moved-away")
    try:
        rows = _stage(spark, [specs, other_specs], tmp_path / "stage")
    finally:
        (part / "moved-away").rename(part / "00000000000000000000.log")
    by_group = {r["group_id"]: r for r in rows}
    assert sorted(by_group) == sorted(s.group_id for s in specs + other_specs)
    assert all(by_group[s.group_id]["error"] for s in specs)
    assert not any(by_group[s.group_id]["error"] for s in other_specs)
    assert len(cleaned(other)) >= 3 * len(other_specs)
    cleaned(part)


def test_fused_stage_writes_what_compact_partition_writes_in_process(spark, partition, tmp_path):
    part, specs = partition
    other = generate(tmp_path / "other", "--records 2000 --keys 300 --segment-bytes 30000")
    other_specs = [dataclasses.replace(s, group_id=s.group_id + 100) for s in specs_for(other, 2)]
    reference_rows = compact_partition(specs) + compact_partition(other_specs)
    reference = cleaned(part), cleaned(other)
    sc = spark.sparkContext
    bins = pack(
        [sum(g.size for s in p for g in (*s.segments, *s.tail_segments)) for p in (specs, other_specs)], 2
    )
    table = {b: [(specs, other_specs)[i] for i in ids] for b, ids in enumerate(bins)}
    rows = fused(sc, len(bins), sc.broadcast(table)).collect()
    assert_df_equality(_frame(spark, rows), _frame(spark, reference_rows), ignore_row_order=True)
    assert (cleaned(part), cleaned(other)) == reference


def test_a_damaged_partition_fails_alone_in_the_fused_stage(spark, partition, tmp_path):
    part, specs = partition
    other = generate(tmp_path / "other", "--records 2000 --keys 300 --segment-bytes 30000")
    other_specs = [dataclasses.replace(s, group_id=s.group_id + 100) for s in specs_for(other, 2)]
    sc = spark.sparkContext
    (part / "00000000000000000000.log").rename(part / "moved-away")
    try:
        rows = fused(sc, 1, sc.broadcast({0: [specs, other_specs]})).collect()
    finally:
        (part / "moved-away").rename(part / "00000000000000000000.log")
    failed = [r["group_id"] for r in rows if r["error"]]
    assert sorted(failed) == [s.group_id for s in specs]
    assert len(cleaned(other)) >= 3 * len(other_specs)
    cleaned(part)


def test_task_rows_are_typed_as_the_stage_schema(spark):
    """`typed`: every `FUSED_FIELDS` name, numpy values as the schema's Python types, unknown names dropped."""
    import numpy as np
    from pyspark.sql import types as T

    from compaction.spark.stages import typed as _typed

    raw = [
        {"group_id": np.int32(7), "bytes_read": np.int64(1 << 40), "seconds": np.float32(0.5), "junk": 1},
        {"group_id": 8, "error": "damaged", "first_unstable": np.int64(12)},
    ]
    schema = T.StructType([T.StructField(n, t, True) for n, t in FUSED_FIELDS])
    typed = [_typed(r) for r in raw]
    assert all(type(v) in (int, float, str, type(None)) for r in typed for v in r.values())
    got = spark.createDataFrame([tuple(r[n] for n in schema.fieldNames()) for r in typed], schema)
    want = [{n: None for n in schema.fieldNames()} for _ in raw]
    want[0].update(group_id=7, bytes_read=1 << 40, seconds=0.5)
    want[1].update(group_id=8, error="damaged", first_unstable=12)
    expected = spark.createDataFrame([tuple(r[n] for n in schema.fieldNames()) for r in want], schema)
    assert_df_equality(got, expected)


def test_profiled_writes_one_pstats_per_partition_only_when_asked(tmp_path):
    import pstats
    from types import SimpleNamespace

    from compaction.spark.stages import _profiled

    specs = [SimpleNamespace(topic="orders", partition=3)]
    assert _profiled(lambda s: [len(s)], specs, None) == [1]
    assert not list(tmp_path.iterdir())
    assert _profiled(lambda s: [sum(range(10_000))], specs, str(tmp_path / "prof")) == [49_995_000]
    (out,) = (tmp_path / "prof").iterdir()
    assert out.name == "orders-3.pstats"
    assert pstats.Stats(str(out)).total_calls > 0
