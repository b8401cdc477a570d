"""The rewrite tasks' rows read back on the driver (compaction/steps/outcome.py): rows by group
id, open transactions to plan again, and each partition's report sizes or failure."""

from __future__ import annotations

from types import SimpleNamespace

from compaction.steps import report as rpt
from compaction.steps.outcome import dry_outcome, outcome, record_sizes, task_rows
from compaction.steps.plan_round import Planned
from compaction.steps.results import STATS_ROW


def _planned(group_ids, segments_per_group=2, compacting=True) -> Planned:
    part = SimpleNamespace(topic="t", partition=0)
    specs = [
        SimpleNamespace(group_id=g, segments=(None,) * segments_per_group, erase=None) for g in group_ids
    ]
    p = Planned(
        None,
        part,
        rpt.PartitionResult("t", 0, "/logs", segmentsBefore=10),
        plan=SimpleNamespace(first_uncleanable_offset=500),
        specs=specs,
        compacting=compacting,
    )
    return p


def _row(group_id, **kw) -> dict:
    row = {
        "group_id": group_id,
        "error": None,
        "bytes_read": 100,
        "bytes_written": 40,
        "records_read": 10,
        "records_written": 4,
        "invalid_records": 0,
        "seconds": 0.5,
        "first_unstable": None,
        "scan_seconds": 0.25,
        "map_seconds": 0.125,
        "cpu_seconds": 1.0,
        "system_seconds": 0.125,
        "minor_faults": 1000,
        "segments_rescanned": 2,
    }
    return {**row, **kw}


def test_task_rows_by_group_with_open_transactions_to_plan_again_and_timings_added():
    todo = [_planned([1, 2]), _planned([3])]
    stats = {
        "group_id": STATS_ROW,
        "scan_seconds": 2.0,
        "map_seconds": None,
        "cpu_seconds": 3.0,
        "system_seconds": 0.5,
        "minor_faults": 20_000,
    }
    timings = {"taskScanSeconds": 1.0}
    results, replan = task_rows(
        [_row(1), _row(2), _row(3, first_unstable=42, segments_rescanned=None), stats], todo, timings
    )
    assert (
        sorted(results) == [1, 2] and "first_unstable" not in results[1] and "scan_seconds" not in results[1]
    )
    assert replan == {1: 42}  # by index in `todo`
    assert timings == {
        "taskScanSeconds": 1.0 + 3 * 0.25 + 2.0,
        "taskMapSeconds": 3 * 0.125,
        "taskCpuSeconds": 3 * 1.0 + 3.0,
        "taskSystemSeconds": 3 * 0.125 + 0.5,
        "taskMinorFaults": 3 * 1000 + 20_000,
        "taskRewriteSeconds": 3 * 0.5,
        "taskSegmentsRescanned": 2 * 2,  # the groups rewritten; the one planned again has no stats
    }


def test_a_group_in_error_or_without_a_row_fails_its_partition():
    p = _planned([1, 2])
    assert outcome(p, {1: _row(1), 2: _row(2, error="damaged at byte 7")}) is None
    assert (p.result.status, p.result.reason) == (rpt.FAILED, "damaged at byte 7")
    q = _planned([1, 2])
    assert outcome(q, {1: _row(1)}) is None
    assert q.result.reason == "no result from the rewrite task"


def test_record_sizes_add_up_the_groups():
    p = _planned([1, 2], segments_per_group=3)
    record_sizes(p, [_row(1), _row(2, bytes_written=10, invalid_records=1)])
    r = p.result
    assert (r.bytesRead, r.bytesWritten, r.reclaimableBytes) == (200, 50, 150)
    assert (r.recordsRead, r.recordsWritten, r.reclaimableRecords, r.invalidRecords) == (20, 8, 12, 1)
    assert (r.groups, r.segmentsAfter, r.endOffset, r.seconds) == (2, 10 - 6 + 2, 500, 1.0)
    assert r.erasedRecords is None  # not erasing


def test_dry_outcome_says_what_a_round_would_do():
    p = _planned([1])
    dry_outcome(p, {1: _row(1)})
    assert (p.result.status, p.result.bytesWritten) == (rpt.ELIGIBLE, 40)
    q = _planned([1], compacting=False)
    dry_outcome(q, {1: _row(1, unchanged=1)})
    assert q.result.status == rpt.SKIPPED and "no listed key" in q.result.reason
