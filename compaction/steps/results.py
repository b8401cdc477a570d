"""What a partition task hands back: one `GroupResult` per output group, and the task's
`TaskTimings`, as typed records between the steps; `as_rows` turns them into the dicts a Spark
stage returns (compaction/spark/stages.py `FUSED_FIELDS`), at the Spark boundary only.

A group's result is exactly one of: its rewrite's counts, its `error` (the partition fails, its
input stays as it is), or `first_unstable` (an open transaction below the planned bound: nothing
was written, the driver plans the partition again with that bound).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

# The `group_id` of a ranges task's timings row: its timings are the task's, not a group's.
STATS_ROW = -1
# The fields of a task's rows that measure how the run went (its clocks, its page faults, how much
# its scan cache held), not what it read and wrote: two runs that write the same bytes differ here.
MEASURED = frozenset(
    {
        "seconds",
        "cpu_seconds",
        "system_seconds",
        "minor_faults",
        "scan_seconds",
        "map_seconds",
        "segments_rescanned",
    }
)


@dataclass(frozen=True)
class GroupResult:
    """One group's outcome; a field left None is not known (not a zero)."""

    group_id: int
    error: str | None = None
    first_unstable: int | None = None
    bytes_read: int | None = None
    bytes_written: int | None = None
    records_read: int | None = None
    records_written: int | None = None
    batches_read: int | None = None
    batches_written: int | None = None
    invalid_records: int | None = None
    segments_rescanned: int | None = None  # scanned again by the rewrite: not in the scan cache
    seconds: float | None = None
    unchanged: int | None = None  # 1: an erasing-only group that erased nothing, nothing written
    erased_records: int | None = None  # --erase-keys: records of listed keys removed
    erased_bytes: int | None = None
    erase_found: str | None = None  # which listed keys the unit met (a bitmap; its first group)

    def row(self) -> dict:
        """The Spark row: the fields that are known."""
        return {f.name: v for f in dataclasses.fields(self) if (v := getattr(self, f.name)) is not None}


def failed(group_ids: Iterable[int], error: str) -> list[GroupResult]:
    """Groups `group_ids` failed with `error`."""
    return [GroupResult(g, error=error) for g in group_ids]


def unstable(group_ids: Iterable[int], first_unstable: int) -> list[GroupResult]:
    """Groups `group_ids` not rewritten: an open transaction at `first_unstable` lies below their
    partition's planned bound."""
    return [GroupResult(g, first_unstable=first_unstable) for g in group_ids]


@dataclass(frozen=True)
class TaskTimings:
    """Where a task's time went: scanning, building the offset map (the merge, and the wait for the
    others' merges, in a ranges task), its CPU seconds in this process, the kernel's share of them
    (`system_seconds`) and the minor page faults it took: most of a task's system time is first
    touches of fresh memory, the cost that grows most when the host is slow."""

    scan_seconds: float
    map_seconds: float
    cpu_seconds: float
    system_seconds: float = 0.0
    minor_faults: int = 0

    def row(self) -> dict:
        return dataclasses.asdict(self)


def as_rows(records: Iterable[GroupResult | TaskTimings]) -> list[dict]:
    """Spark rows of a task's records; a `TaskTimings` as its own row (`group_id` STATS_ROW)."""
    return [{"group_id": STATS_ROW, **r.row()} if isinstance(r, TaskTimings) else r.row() for r in records]


__all__ = ["MEASURED", "STATS_ROW", "GroupResult", "TaskTimings", "as_rows", "failed", "unstable"]
