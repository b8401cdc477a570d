"""The partition pipeline: scan, checks, producer state, decide, rewrite. Every partition goes
through it, compacted whole in one task (`compact_whole`) or cut into ranges whose tasks meet
through the exchange (compaction/steps/range_task.py); both take these steps from here:

- `scan_cache`: the scans a task keeps for its rewrite, within its budget;
- `checked_scan`: the index checks the driver leaves to the task that reads the partition anyway,
  run beside its scan, their error raised first;
- `checked_state`: the partition's leader epochs checked, then its producer state derived from
  its batch headers (both before anything is written);
- `open_transaction`: the re-plan rule: an open transaction below the planned bound means nothing
  is written, the driver plans the partition again with that bound;
- `with_state`: the producer state handed to the rewrite (compaction/steps/rewrite.py);
- `TaskClock`: a task's timings, as one `TaskTimings`.
"""

from __future__ import annotations

import dataclasses
import resource
import time
from collections.abc import Callable
from typing import TypeVar

from compaction.settings import SCAN_REUSE_CODECS
from compaction.steps.group import GroupSpec
from compaction.steps.ranges import ProducerState, producer_state
from compaction.steps.results import GroupResult, TaskTimings, unstable
from compaction.steps.rewrite import rewrite_unit
from compaction.steps.scan import ScanCache, check_partition_epochs, scan_partition
from compaction.steps.validate import checked_alongside

T = TypeVar("T")


def scan_cache(reuse_bytes: int, codecs: frozenset[str] = SCAN_REUSE_CODECS) -> ScanCache | None:
    """Where a task keeps up to `reuse_bytes` of its scans for its rewrite (none at 0), those of
    compressed segments only where a batch is of one of `codecs` (`ScanCache`)."""
    return ScanCache(reuse_bytes, codecs) if reuse_bytes > 0 else None


def checked_scan(spec: GroupSpec, validate: bool, scan: Callable[[], T]) -> T:
    """`scan()`, with the partition's index checks beside it when `validate` (the task that scans
    the partition's first range runs them)."""
    return checked_alongside(spec.storage, spec.part_path, scan) if validate else scan()


def checked_state(specs: list[GroupSpec], epochs: list, producers: list) -> ProducerState:
    """The partition's producer state from its `producers` tables, once its leader-epoch runs
    `epochs` (log order) check."""
    check_partition_epochs(specs, epochs)
    return producer_state(producers, specs[0].now_ms, specs[0].producer_id_expiration_ms)


def open_transaction(state: ProducerState, specs: list[GroupSpec]) -> int | None:
    """The first offset of an open transaction below the partition's planned bound (its groups
    `specs`), if any: the partition is then not rewritten but planned again with that bound."""
    if state.first_unstable is not None and state.first_unstable < specs[0].upper_bound:
        return state.first_unstable
    return None


def with_state(specs: list[GroupSpec], state: ProducerState) -> list[GroupSpec]:
    """The groups `specs` given the partition's producer state."""
    return [dataclasses.replace(s, last_records=state.last_records) for s in specs]


class TaskClock:
    """A task's wall and CPU clocks since it started, and its process's page faults (a Python
    worker runs one task at a time: the process's counts since the start are the task's)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._cpu = time.process_time()
        self._usage = resource.getrusage(resource.RUSAGE_SELF)

    def timings(self, scan_seconds: float, map_seconds: float) -> TaskTimings:
        """The task's timings, its CPU seconds and faults counted until now."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return TaskTimings(
            scan_seconds,
            map_seconds,
            time.process_time() - self._cpu,
            usage.ru_stime - self._usage.ru_stime,
            usage.ru_minflt - self._usage.ru_minflt,
        )


def compact_whole(
    specs: list[GroupSpec], reuse_bytes: int, codecs: frozenset[str] = SCAN_REUSE_CODECS
) -> tuple[list[GroupResult], TaskTimings | None]:
    """The round for one partition (`specs`: all its groups, log order) in this task, keeping up
    to `reuse_bytes` of its scans for the rewrite (`scan_cache`): its offset map built in the task (exact key
    bytes, `KeyTable`), its producer state from its batch headers, its groups rewritten in log
    order as one unit. Returns a result per group and the task's timings (none when an open
    transaction stops it before the rewrite)."""
    clock = TaskClock()
    cache = scan_cache(reuse_bytes, codecs)
    epochs: list = []  # leader-epoch runs per segment: checked before anything is written
    offset_map, producers = checked_scan(specs[0], True, lambda: scan_partition(specs, cache, epochs=epochs))
    state = checked_state(specs, epochs, producers)
    scanned = time.monotonic()
    first_unstable = open_transaction(state, specs)
    if first_unstable is not None:
        return unstable((s.group_id for s in specs), first_unstable), None
    specs = with_state(specs, state)
    mapped = time.monotonic()
    results = rewrite_unit(specs, offset_map, cache)
    return results, clock.timings(scanned - clock.started, mapped - scanned)


__all__ = [
    "TaskClock",
    "checked_scan",
    "checked_state",
    "compact_whole",
    "open_transaction",
    "scan_cache",
    "with_state",
]
