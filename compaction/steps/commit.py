"""Committing a round: the crash-safe replacement of each partition's segments, then each log
dir's cleaner checkpoint, then the replaced files' removal.

The swap follows Kafka's `LocalLog.replaceSegments` (docs/kafka-rules.md#swap-protocol) so that a broker
started on a dir we left half-way recovers it with its own `LogLoader` rules
(docs/kafka-rules.md#broker-load-checks):

1. `<new>.*.cleaned` -> `<new>.*.swap`, new segments in descending base offset;
2. every file of every replaced segment -> `*.deleted`, ascending;
3. `*.swap` -> live names; 4. `*.deleted` removed.

Each step fsyncs the directory before the next one starts. The job runs step 4
(`remove_replaced`) after it has advanced the checkpoint, as Kafka deletes replaced segments
asynchronously (`file.delete.delay.ms` later): the cleaned data is durable and live after step 3,
and unlinking large files is slow on some filesystems (ext4 mounted with `discard` trims every
freed extent).
Before step 1 we also write a small intent file naming the old and new segments. Kafka's own
recovery can only infer the replaced range from the `.swap` segment's next offset, which misses
old segments past the last batch the cleaner kept (docs/kafka-rules.md#swap-protocol); with the
intent file our recovery (compaction/steps/recover.py) rolls forward or back exactly. A broker
ignores the file (it is neither a segment nor an index).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compaction.format import naming
from compaction.runtime.checkpoint_files import read_checkpoint, write_checkpoint
from compaction.runtime.faults import crash_point
from compaction.runtime.storage import Storage
from compaction.steps import report as rpt
from compaction.steps.discover import CLEANER_CHECKPOINT, LogDirState
from compaction.steps.outcome import outcome, record_sizes
from compaction.steps.validate import write_rebuilt

if TYPE_CHECKING:
    from compaction.steps.plan_round import Planned

log = logging.getLogger("compaction")

INTENT_FILE = naming.COMMIT_INTENT_FILE
CLEANED, SWAP, DELETED = ".cleaned", ".swap", ".deleted"


@dataclass(frozen=True)
class Replacement:
    """One cleaned group: the new segment and the old segments it replaces."""

    new_base: int
    old_bases: tuple[int, ...]


def file_names(storage: Storage, part: str) -> set[str]:
    """The names of the files (not directories) in a partition dir."""
    return {info.name for info in storage.list_dir(part) if not info.is_dir}


def commit_partition(
    storage: Storage, part: str, replacements: list[Replacement], remove_old: bool = True
) -> None:
    """Swap every cleaned group of one partition in, durably, in Kafka's order; with
    `remove_old=False` the replaced files stay as `*.deleted` (and the intent file with them)
    until `remove_replaced`."""
    crash_point("cleaned")
    names = file_names(storage, part)
    intent = _intent(names, replacements)
    storage.write_durable(f"{part}/{INTENT_FILE}", json.dumps(intent).encode())
    crash_point("intent")
    for name in sorted(intent["new_files"], reverse=True):  # 20-digit names sort by offset
        if name + CLEANED in names:
            storage.rename(f"{part}/{name}{CLEANED}", f"{part}/{name}{SWAP}")
    storage.fsync_dir(part)
    crash_point("swap")
    finish_swap(storage, part, intent, remove_old)


def _intent(names: set[str], replacements: list[Replacement]) -> dict:
    """The exact file names on both sides, so a re-run can tell old files from new ones."""
    new_bases = {r.new_base for r in replacements}
    new_files = [
        naming.segment_file_name(r.new_base, s)
        for r in replacements
        for s in naming.SEGMENT_FILE_SUFFIXES
        if naming.segment_file_name(r.new_base, s) + CLEANED in names
    ]
    old_files = []
    for base in sorted({b for r in replacements for b in r.old_bases}):
        # Kafka keeps a producer snapshot whose base offset is reused by a new segment.
        suffixes = naming.SEGMENT_FILE_SUFFIXES if base in new_bases else naming.SEGMENT_SUFFIXES
        old_files += [n for s in suffixes if (n := naming.segment_file_name(base, s)) in names]
    return {"new_files": sorted(new_files), "old_files": old_files}


def finish_swap(storage: Storage, part: str, intent: dict, remove_old: bool = True) -> None:
    """Steps 2-3, and 4 with `remove_old`. Idempotent: safe to re-run after a crash."""
    names = file_names(storage, part)
    new_files = set(intent["new_files"])
    # Step 2 renames every file of every replaced segment (thousands in a partition of small
    # segments), so they are made durable together by the one fsync after them: any subset of
    # them surviving a crash is recovered alike, by the intent file or by the LogLoader's rule
    # (every `.swap` is in place, so the old segments in its range go). Steps 1 and 3 rename a
    # few new files and keep a fsync per rename: the LogLoader's reading of a half-done step 3
    # relies on their order.
    for name in intent["old_files"]:
        # A live name that a new file already took over (step 3 ran for it) is not old any more.
        if name in names and (name not in new_files or name + SWAP in names):
            storage.rename(f"{part}/{name}", f"{part}/{name}{DELETED}", durable=False)
    storage.fsync_dir(part)
    crash_point("deleted")
    for name in intent["new_files"]:
        if name + SWAP in names:
            storage.rename(f"{part}/{name}{SWAP}", f"{part}/{name}")
    storage.fsync_dir(part)
    crash_point("renamed")
    if remove_old:
        remove_replaced(storage, part)


def remove_replaced(storage: Storage, part: str) -> None:
    """Step 4, once the swap is complete: the `*.deleted` files, then the intent file. A crash
    in between leaves both for the next run's recovery (or a broker's `LogLoader`) to remove."""
    for name in file_names(storage, part):
        if name.endswith(DELETED):
            storage.delete(f"{part}/{name}")
    storage.delete(f"{part}/{INTENT_FILE}", missing_ok=True)
    storage.fsync_dir(part)


# --- a round's commits ------------------------------------------------------------------------


def commit(p: Planned, results: dict[int, dict]) -> None:
    """Swap a partition's cleaned groups in, or (a failed rewrite) remove its `.cleaned` files."""
    rows = outcome(p, results)
    if rows is None:
        _discard_cleaned(p)
        return
    replacements = [
        Replacement(s.new_base, tuple(x.base_offset for x in s.segments))
        for s, row in zip(p.specs, rows)
        if not row.get("unchanged")
    ]
    record_sizes(p, rows)
    if not replacements:  # erasing only, and no listed key in it
        p.result.status, p.result.reason = rpt.SKIPPED, "no listed key in it, nothing to compact"
        return
    for rebuilt in p.rebuilt:  # before the intent: a replaced segment's rebuilt index goes with it
        p.result.recovery.append(write_rebuilt(p.log_dir.storage, rebuilt))
    commit_partition(p.log_dir.storage, p.partition_dir.path, replacements, remove_old=False)
    p.result.status, p.result.reason = (
        rpt.CLEANED,
        None if p.compacting else "erased (erase only, not compacted)",
    )


def _discard_cleaned(p: Planned) -> None:
    storage = p.log_dir.storage
    for info in storage.list_dir(p.partition_dir.path):
        if info.name.endswith(CLEANED):
            storage.delete(info.path)


def advance_checkpoints(planned: list[Planned], dirs: list[LogDirState]) -> None:
    """Write each log dir's cleaner-offset-checkpoint once, atomically, after its commits."""
    for ld in dirs:
        updates = {}
        for p in planned:
            if p.log_dir is not ld or p.plan is None:
                continue
            # erasing alone leaves the dirty section as it was
            if p.result.status == rpt.CLEANED and p.compacting:
                updates[p.partition_dir.key] = p.plan.first_uncleanable_offset
            elif p.plan.force_update_checkpoint and p.result.status != rpt.FAILED:
                updates[p.partition_dir.key] = p.plan.first_dirty_offset  # Kafka resets invalid checkpoints
        if updates:
            path = f"{ld.path}/{CLEANER_CHECKPOINT}"
            write_checkpoint(ld.storage, path, {**read_checkpoint(ld.storage, path), **updates})


def remove_replaced_segments(p: Planned) -> None:
    """The replaced segments' files (`*.deleted`) once the checkpoint is advanced, as Kafka
    deletes them asynchronously; a failure leaves them to the next run's recovery."""
    try:
        remove_replaced(p.log_dir.storage, p.partition_dir.path)
    except OSError as exc:
        log.warning(
            "could not remove the replaced segments of %s (the next run will): %s", p.partition_dir.path, exc
        )


def is_segment_object(name: str) -> bool:
    """A segment's file, or a name the swap gives one (`.cleaned`, `.swap`, `.deleted`), or the
    intent file: the objects of a partition dir a round replaces, and only those."""
    return name == INTENT_FILE or naming.is_segment_file_name(name)


def purge_replaced_versions(p: Planned) -> tuple[int, int] | OSError:
    """The noncurrent versions and delete markers of the segment objects of a partition on a
    versioned bucket (`Storage.purge_noncurrent_versions`): (count, bytes), or the error."""
    try:
        return p.log_dir.storage.purge_noncurrent_versions(p.partition_dir.path, is_segment_object)
    except OSError as exc:
        return exc
