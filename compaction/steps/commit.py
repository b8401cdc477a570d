"""Crash-safe replacement of segments, and recovery of a partition dir at start.

The swap follows Kafka's `LocalLog.replaceSegments` (docs/kafka-rules.md#swap-protocol) so that a broker
started on a dir we left half-way recovers it with its own `LogLoader` rules
(docs/kafka-rules.md#broker-load-checks):

1. `<new>.*.cleaned` -> `<new>.*.swap`, new segments in descending base offset;
2. every file of every replaced segment -> `*.deleted`, ascending;
3. `*.swap` -> live names; 4. `*.deleted` removed.

Each step fsyncs the directory before the next one starts. The job runs step 4
(`remove_replaced`) after it has advanced the checkpoint, as Kafka deletes replaced segments
asynchronously (`file.delete.delay.ms` later): the cleaned data is durable and live after step 3,
and unlinking large files is slow on some filesystems (~14 ms per 64 MiB with ext4's `discard`).
Before step 1 we also write a small intent file naming the old and new segments. Kafka's own recovery can only infer the replaced
range from the `.swap` segment's next offset, which misses old segments past the last batch the
cleaner kept (docs/kafka-rules.md#swap-protocol); with the intent file our recovery rolls forward or back
exactly. A broker ignores the file (it is neither a segment nor an index).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from compaction.runtime.faults import crash_point
from compaction.format import naming
from compaction.kernels.scan import scan_batches
from compaction.runtime.storage import Storage

INTENT_FILE = "compaction-commit.json"
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
CLEANED, SWAP, DELETED = ".cleaned", ".swap", ".deleted"


@dataclass(frozen=True)
class Replacement:
    """One cleaned group: the new segment and the old segments it replaces."""

    new_base: int
    old_bases: tuple[int, ...]


@dataclass
class RecoveryReport:
    path: str
    actions: list[str] = field(default_factory=list)

    def did(self, action: str) -> None:
        self.actions.append(action)


def _path(part: str, base: int, suffix: str, transient: str = "") -> str:
    return f"{part}/{naming.segment_file_name(base, suffix)}{transient}"


def _existing(storage: Storage, part: str) -> set[str]:
    return {info.name for info in storage.list_dir(part) if not info.is_dir}


def commit_partition(storage: Storage, part: str, replacements: list[Replacement], remove_old: bool = True) -> None:
    """Swap every cleaned group of one partition in, durably, in Kafka's order; with
    `remove_old=False` the replaced files stay as `*.deleted` (and the intent file with them)
    until `remove_replaced`."""
    crash_point("cleaned")
    names = _existing(storage, part)
    intent = _intent(names, replacements)
    storage.write_durable(f"{part}/{INTENT_FILE}", json.dumps(intent).encode())
    crash_point("intent")
    for name in sorted(intent["new_files"], reverse=True):  # 20-digit names sort by offset
        if name + CLEANED in names:
            storage.rename(f"{part}/{name}{CLEANED}", f"{part}/{name}{SWAP}")
    storage.fsync_dir(part)
    crash_point("swap")
    _finish_swap(storage, part, intent, remove_old)


def _intent(names: set[str], replacements: list[Replacement]) -> dict:
    """The exact file names on both sides, so a re-run can tell old files from new ones."""
    new_bases = {r.new_base for r in replacements}
    new_files = [
        naming.segment_file_name(r.new_base, s)
        for r in replacements
        for s in SEGMENT_SUFFIXES
        if naming.segment_file_name(r.new_base, s) + CLEANED in names
    ]
    old_files = []
    for base in sorted({b for r in replacements for b in r.old_bases}):
        # Kafka keeps a producer snapshot whose base offset is reused by a new segment.
        suffixes = SEGMENT_SUFFIXES if base in new_bases else (*SEGMENT_SUFFIXES, ".snapshot")
        old_files += [n for s in suffixes if (n := naming.segment_file_name(base, s)) in names]
    return {"new_files": sorted(new_files), "old_files": old_files}


def _finish_swap(storage: Storage, part: str, intent: dict, remove_old: bool = True) -> None:
    """Steps 2-3, and 4 with `remove_old`. Idempotent: safe to re-run after a crash."""
    names = _existing(storage, part)
    new_files = set(intent["new_files"])
    for name in intent["old_files"]:
        # A live name that a new file already took over (step 3 ran for it) is not old any more.
        if name in names and (name not in new_files or name + SWAP in names):
            storage.rename(f"{part}/{name}", f"{part}/{name}{DELETED}")
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
    for name in _existing(storage, part):
        if name.endswith(DELETED):
            storage.delete(f"{part}/{name}")
    storage.delete(f"{part}/{INTENT_FILE}", missing_ok=True)
    storage.fsync_dir(part)


def recover_partition(storage: Storage, part: str) -> RecoveryReport:
    """Bring one partition dir to a consistent state before planning (Kafka's `LogLoader`)."""
    report = RecoveryReport(part)
    names = _existing(storage, part)
    if INTENT_FILE in names:
        _recover_with_intent(storage, part, names, report)
    else:
        _recover_like_log_loader(storage, part, names, report)
    return report


def _recover_with_intent(storage: Storage, part: str, names: set[str], report: RecoveryReport) -> None:
    try:
        intent = json.loads(storage.read_bytes(f"{part}/{INTENT_FILE}"))
    except ValueError:
        # Torn intent (crash while writing it): step 1 had not started, nothing was renamed.
        storage.delete(f"{part}/{INTENT_FILE}")
        storage.fsync_dir(part)
        report.did(f"removed unreadable {INTENT_FILE}")
        _recover_like_log_loader(storage, part, _existing(storage, part), report)
        return
    # Only our own new files tell whether step 1 completed (a stray `.cleaned` must not trigger
    # a roll back once old files may already be `.deleted`).
    cleaned_left = any(n + CLEANED in names for n in intent["new_files"])
    if cleaned_left:
        # Step 1 did not complete: no old file was touched yet, so roll back. Undo step 1 first
        # (.swap -> .cleaned) and only then drop the intent: a crash in between repeats this roll
        # back, a crash after it leaves only `.cleaned` files, which the LogLoader path removes.
        # (Deleting `.swap` files first would let a re-run without `.cleaned` left roll forward
        # over missing new files and delete old segments.)
        for name in intent["new_files"]:
            if name + SWAP in names:
                storage.rename(f"{part}/{name}{SWAP}", f"{part}/{name}{CLEANED}")
        storage.fsync_dir(part)
        storage.delete(f"{part}/{INTENT_FILE}")
        storage.fsync_dir(part)
        for name in sorted(_existing(storage, part)):
            if name.endswith(CLEANED):
                storage.delete(f"{part}/{name}")
                report.did(f"removed {name} (interrupted swap rolled back)")
        storage.fsync_dir(part)
        return
    report.did(f"completed interrupted swap of {intent['new_files']}")
    _finish_swap(storage, part, intent)


def _recover_like_log_loader(storage: Storage, part: str, names: set[str], report: RecoveryReport) -> None:
    """The first two load steps of docs/kafka-rules.md#broker-load-checks, for leftovers of a broker's own
    cleaner."""
    for name in sorted(names):
        if name.endswith(DELETED):
            storage.delete(f"{part}/{name}")
            report.did(f"removed {name}")
    cleaned = [n for n in names if n.endswith(CLEANED)]
    min_cleaned = min((naming.parse_segment_file_name(n).base_offset for n in cleaned), default=None)
    for name in cleaned:
        storage.delete(f"{part}/{name}")
        report.did(f"removed {name}")
    swaps = [n for n in names if n.endswith(SWAP)]
    live_swaps = []
    for name in swaps:
        base = naming.parse_segment_file_name(name).base_offset
        if min_cleaned is not None and base >= min_cleaned:
            storage.delete(f"{part}/{name}")
            report.did(f"removed {name} (incomplete swap)")
        else:
            live_swaps.append(name)
    if live_swaps:
        _complete_kafka_swap(storage, part, live_swaps, report)
    storage.fsync_dir(part)


def _complete_kafka_swap(storage: Storage, part: str, swaps: list[str], report: RecoveryReport) -> None:
    logs = [n for n in swaps if n.endswith(".log" + SWAP)]
    bases = [naming.parse_segment_file_name(n).base_offset for n in logs]
    if not bases:
        return
    min_swap = min(bases)
    max_swap = max(_next_offset(storage, f"{part}/{n}", b) for n, b in zip(logs, bases))
    for name in _existing(storage, part):
        try:
            parsed = naming.parse_segment_file_name(name)
        except naming.SegmentNameError:  # leader-epoch-checkpoint, partition.metadata, ...
            continue
        if parsed.transient is None and min_swap <= parsed.base_offset < max_swap:
            storage.delete(f"{part}/{name}")
            report.did(f"removed {name} (replaced by swap)")
    for name in swaps:
        storage.rename(f"{part}/{name}", f"{part}/{name[: -len(SWAP)]}")
        report.did(f"renamed {name}")


def _next_offset(storage: Storage, path: str, base: int) -> int:
    cols = scan_batches(np.frombuffer(storage.read_bytes(path), dtype=np.uint8))
    return int(cols.last_offset.max()) + 1 if len(cols.last_offset) else base
