"""Recovery at the start of a round: every selected partition dir brought to a consistent state
before anything is planned, and the log dirs locked against a broker and another run.

A partition left half-way by an interrupted commit (compaction/steps/commit.py) is rolled forward
or back exactly by its intent file; leftovers of a broker's own cleaner (`.cleaned`, `.swap`,
`.deleted` files without an intent file) are handled by the rules of Kafka's `LogLoader`
(docs/kafka-rules.md#broker-load-checks).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from compaction.errors import SegmentNameError
from compaction.format import naming
from compaction.runtime.storage import KAFKA_LOCK_FILE, Storage, acquire_run_lock, ensure_kafka_not_running
from compaction.settings import JobOptions
from compaction.steps.commit import CLEANED, DELETED, INTENT_FILE, SWAP, file_names, finish_swap
from compaction.steps.discover import LogDirState, read_log_dir, relist_partition
from compaction.steps.scan import batch_headers

log = logging.getLogger("compaction")


def lock_log_dirs(opts: JobOptions) -> list:
    """The run locks of the local log dirs (none for a dry run), after checking that no broker
    holds them (with --ignore-broker-lock, a held one is said at WARN and overridden)."""
    locks = []
    for uri in opts.log_dirs:
        storage, path = Storage.for_uri(uri)
        if not storage.is_local:
            continue  # object stores have no locks; documented: one run per prefix (Airflow max_active_runs=1)
        if ensure_kafka_not_running(path, ignore=opts.ignore_broker_lock):
            log.warning(
                "%s is locked: a Kafka broker may be serving this log dir; compacting it anyway "
                "(--ignore-broker-lock)",
                f"{path}/{KAFKA_LOCK_FILE}",
            )
        if not opts.dry_run:
            locks.append(acquire_run_lock(path))
    return locks


def recover(
    opts: JobOptions, listed: dict[str, LogDirState] | None = None, timings: dict[str, float] | None = None
) -> dict[tuple[str, str], list[str]]:
    """Finish or roll back interrupted swaps in every selected partition (Kafka's LogLoader).
    Fills `listed` with each log dir's listing, recovered partitions listed again, for
    `discover_and_plan` (one listing per run). Returns each recovered partition's actions by
    (log dir, partition path)."""
    done = {}
    for uri in opts.log_dirs:
        t = time.monotonic()
        ld = read_log_dir(uri, opts.topics, opts.partitions)
        if timings is not None:
            timings["listSeconds"] = timings.get("listSeconds", 0.0) + time.monotonic() - t
        for i, part in enumerate(ld.partitions):
            if part.transient or part.has_commit_intent:  # seen in the listing: no exists() per partition
                done[(uri, part.path)] = recover_partition(ld.storage, part.path).actions
                ld.partitions[i] = relist_partition(ld.storage, part)
        if listed is not None:
            listed[uri] = ld
    for (_, path), actions in done.items():
        for a in actions:
            log.info("recovery %s: %s", path, a)
    return done


@dataclass
class RecoveryReport:
    """What recovery did in one partition dir, one line per action."""

    path: str
    actions: list[str] = field(default_factory=list)

    def did(self, action: str) -> None:
        self.actions.append(action)


def recover_partition(storage: Storage, part: str) -> RecoveryReport:
    """Bring one partition dir to a consistent state before planning (Kafka's `LogLoader`)."""
    report = RecoveryReport(part)
    names = file_names(storage, part)
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
        _recover_like_log_loader(storage, part, file_names(storage, part), report)
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
        for name in sorted(file_names(storage, part)):
            if name.endswith(CLEANED):
                storage.delete(f"{part}/{name}")
                report.did(f"removed {name} (interrupted swap rolled back)")
        storage.fsync_dir(part)
        return
    report.did(f"completed interrupted swap of {intent['new_files']}")
    finish_swap(storage, part, intent)


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
    for name in file_names(storage, part):
        try:
            parsed = naming.parse_segment_file_name(name)
        except SegmentNameError:  # leader-epoch-checkpoint, partition.metadata, ...
            continue
        if parsed.transient is None and min_swap <= parsed.base_offset < max_swap:
            storage.delete(f"{part}/{name}")
            report.did(f"removed {name} (replaced by swap)")
    for name in swaps:
        storage.rename(f"{part}/{name}", f"{part}/{name[: -len(SWAP)]}")
        report.did(f"renamed {name}")


def _next_offset(storage: Storage, path: str, base: int) -> int:
    cols = batch_headers(storage, path)
    return int(cols.last_offset.max()) + 1 if len(cols.last_offset) else base
