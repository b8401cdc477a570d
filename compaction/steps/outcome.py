"""What the rewrite tasks' rows say about each partition: failed, or its sizes and erase counts
for the report (`rpt.PartitionResult`), and a dry run's verdict.

A task's row (compaction/spark/stages.py `FUSED_FIELDS`, made of a `results.GroupResult`) is one
group's rewrite: its bytes and records read and written, its seconds, or the `error` that failed
it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from compaction.steps import report as rpt
from compaction.steps.erase import key_count, unpack_bits
from compaction.steps.results import STATS_ROW

if TYPE_CHECKING:
    from compaction.steps.plan_round import Planned


def task_rows(rows: list[dict], todo: list[Planned], timings: dict[str, float]):
    """The tasks' rows as (results by group id, {index in `todo`: first unstable offset}); their
    timings added to `timings`."""
    owner = {s.group_id: i for i, p in enumerate(todo) for s in p.specs}
    results, replan = {}, {}
    for d in rows:
        scan_s, map_s, cpu_s, sys_s = (
            d.pop(k) or 0.0 for k in ("scan_seconds", "map_seconds", "cpu_seconds", "system_seconds")
        )
        add_seconds(
            timings,
            taskScanSeconds=scan_s,
            taskMapSeconds=map_s,
            taskCpuSeconds=cpu_s,
            taskSystemSeconds=sys_s,
        )
        add_counts(timings, taskMinorFaults=d.pop("minor_faults"))
        if d["group_id"] == STATS_ROW:
            continue
        add_seconds(timings, taskRewriteSeconds=d["seconds"] or 0.0)
        add_counts(timings, taskSegmentsRescanned=d.pop("segments_rescanned"))
        d["task_seconds"] = scan_s + map_s  # a whole partition's scan and map, before its rewrite
        unstable = d.pop("first_unstable")
        if unstable is not None:
            replan[owner[d["group_id"]]] = unstable
        else:
            results[d["group_id"]] = d
    return results, replan


def add_seconds(timings: dict[str, float], **seconds: float) -> None:
    for name, v in seconds.items():
        timings[name] = timings.get(name, 0.0) + float(v)


def add_counts(timings: dict, **counts: int | None) -> None:
    """Counts (page faults, segments scanned again) added to the round's `timings`; None is 0."""
    for name, v in counts.items():
        timings[name] = timings.get(name, 0) + int(v or 0)


def outcome(p: Planned, results: dict[int, dict]) -> list[dict] | None:
    """The rewrite rows of the partition's groups, or None after marking it failed."""
    rows = [results.get(s.group_id, {"error": "no result from the rewrite task"}) for s in p.specs]
    errors = [row["error"] for row in rows if row.get("error")]
    if errors:
        p.result.status, p.result.reason = rpt.FAILED, errors[0]
        return None
    return rows


def _record_erasure(p: Planned, rows: list[dict]) -> None:
    """The partition's erase counts from its groups' rows: records and bytes, and the listed keys
    met by any unit (their bitmaps OR-ed) or by none."""
    erase = p.specs[0].erase
    n = key_count(erase, p.partition_dir.topic)
    met = np.zeros(n, bool)
    for row in rows:
        met |= unpack_bits(row.get("erase_found"), n)
    r = p.result
    r.erasedRecords = sum(int(row.get("erased_records") or 0) for row in rows)
    r.erasedBytes = sum(int(row.get("erased_bytes") or 0) for row in rows)
    r.eraseKeysFound = int(met.sum())
    r.eraseKeysNotFound = n - r.eraseKeysFound


def record_sizes(p: Planned, rows: list[dict]) -> None:
    """The partition's report sizes: its groups' rows added up."""
    r = p.result
    if p.erasing:
        _record_erasure(p, rows)
    r.endOffset = p.plan.first_uncleanable_offset
    r.groups = len(p.specs)
    r.segmentsAfter = r.segmentsBefore - sum(len(s.segments) for s in p.specs) + len(p.specs)
    for key, total in (
        ("bytes_read", "bytesRead"),
        ("bytes_written", "bytesWritten"),
        ("records_read", "recordsRead"),
        ("records_written", "recordsWritten"),
        ("invalid_records", "invalidRecords"),
    ):
        setattr(r, total, sum(int(row[key] or 0) for row in rows))
    r.reclaimableBytes = r.bytesRead - r.bytesWritten
    r.reclaimableRecords = r.recordsRead - r.recordsWritten
    # The partition's elapsed time: its scan, map and rewrite in its task, or, cut into ranges,
    # the stage its ranges ran in (they scan, merge and rewrite together).
    stage = max(float(row.get("stage_seconds") or 0) for row in rows)
    r.seconds = stage or sum(float(row["seconds"] or 0) + float(row.get("task_seconds") or 0) for row in rows)


def dry_outcome(p: Planned, results: dict[int, dict]) -> None:
    """A dry run's verdict: what the round would do, with the sizes its rewrite would write."""
    rows = outcome(p, results)
    if rows is not None:
        p.result.status, p.result.reason = rpt.ELIGIBLE, "a round would clean it (dry run)"
        if not p.compacting:
            p.result.reason = "a round would erase listed keys in it (dry run)"
            if all(row.get("unchanged") for row in rows):
                p.result.status, p.result.reason = (
                    rpt.SKIPPED,
                    "no listed key in it, nothing to compact (dry run)",
                )
        record_sizes(p, rows)
