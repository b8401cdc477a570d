"""Validation: a partition dir that a broker would not load, or that we would not understand, is
failed with an error naming the file and byte position, and never touched; the other partitions
of the round go on. What the listing alone shows is checked for every partition before it is
planned (`check_listing`); the index files are read for the partitions a round cleans only
(`validate_contents`), on the driver or in the task that reads the partition anyway
(`validate_partition_path`). A missing `.index` is rebuilt as a broker's `LogSegment.recover`
would (`rebuild_missing_index`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from compaction.errors import IndexCorruptError, LogStructureError, PartitionInvalid
from compaction.format import checkpoint as ckpt
from compaction.format import naming
from compaction.format.index import read_offset_index, sanity_check_offset_index, sanity_check_time_index
from compaction.format.layout import OFFSET_ENTRY_SIZE, RECORD_BATCH_OVERHEAD, TIME_ENTRY_SIZE
from compaction.format.txnindex import sanity_check_txn_index
from compaction.kernels.index_build import build_indexes
from compaction.kernels.scan import scan_segment
from compaction.policy.log_structure import RULE_INDEX, check_first_batches
from compaction.runtime.checkpoint_files import CHECKPOINT_FILE
from compaction.runtime.storage import BROKER_FILE, Bound, Storage
from compaction.steps.discover import PartitionDir, SegmentFiles, list_partition

T = TypeVar("T")


def check_listing(part: PartitionDir) -> None:
    """What the listing alone shows (no read): files a broker would not have written, directories
    where files belong, no segment at all. Run for every partition before it is planned."""
    part.refuse_problems()
    if not part.segments:
        raise PartitionInvalid(f"{part.path}: partition dir holds no segment (.log) file")


def validate_contents(storage: Storage, part: PartitionDir, index_bounds: bool = False) -> None:
    """The index checks of one partition dir (docs/kafka-rules.md#broker-load-checks, #index-invariants);
    raises on the first problem, naming the file and byte position. Reads every non-empty `.index`,
    `.timeindex` and `.txnindex` (never a `.log`: the executors' scan checks the batches, CRCs and sizes and
    names the file and byte position of the first bad one). A missing `.index` is not a problem here:
    `rebuild_missing_index` rebuilds it as a broker's `LogSegment.recover` would.

    Run for the partitions a round cleans only: a skipped partition is read no further than its
    plan needs. Takes a `PartitionDir` (picklable), so an executor can run it as well as the driver.
    `index_bounds` (the dry run's audit): also no `.index` entry at or past the next segment's
    base; a round's scan checks every entry against the batches instead, after the segment's own
    offsets, whose damage is the cause to report when both are wrong (a renamed segment).
    """
    for i, seg in enumerate(part.segments):
        active = i == len(part.segments) - 1
        if seg.index is not None and seg.index.size:
            bound = part.segments[i + 1].base_offset if index_bounds and not active else None
            check_offset_index(storage, seg, active, bound)
        if seg.timeindex is not None and seg.timeindex.size:
            data = _read_checked(storage, seg.timeindex.path)
            if active:  # preallocated: drop trailing all-zero entries (timestamp 0, offset base)
                whole = len(data) - len(data) % TIME_ENTRY_SIZE
                while whole > TIME_ENTRY_SIZE and not any(data[whole - TIME_ENTRY_SIZE : whole]):
                    whole -= TIME_ENTRY_SIZE
                data = data[:whole] + data[len(data) - len(data) % TIME_ENTRY_SIZE :]
            sanity_check_time_index(data, seg.base_offset, seg.timeindex.path)
        if seg.txnindex is not None and seg.txnindex.size:
            data = _read_checked(storage, seg.txnindex.path)
            sanity_check_txn_index(data, seg.base_offset, seg.txnindex.path)


def validate_partition(storage: Storage, part: PartitionDir) -> None:
    """`check_listing` then `validate_contents`: every check a partition gets before it is cleaned."""
    check_listing(part)
    validate_contents(storage, part)


def validate_partition_path(storage: Storage, part_path: str) -> None:
    """`validate_partition` of the partition dir at `part_path`, listed here: for an executor (a
    `GroupSpec` carries `storage` and `part_path`) so a task that reads the partition's segments
    anyway can run the index checks there instead of the driver. Raises `PartitionInvalid` or an
    `IndexCorruptError` naming the file (and byte position); reads index files only."""
    validate_partition(storage, list_partition(storage, "", part_path, "", -1))


def checked_alongside(storage: Storage, part_path: str, work: Callable[[], T]) -> T:
    """`work()` (the scan of the partition) with `validate_partition_path` running beside it on a
    thread: the checks' reads wait for the disk while the scan uses the CPU. Errors as if the
    checks had run first: theirs is raised before any of the work's."""
    with ThreadPoolExecutor(1, thread_name_prefix="index-checks") as pool:
        checks = pool.submit(validate_partition_path, storage, part_path)
        try:
            done = work()
        except BaseException:
            checks.result()
            raise
        checks.result()
        return done


def audit_structure(storage: Storage, part: PartitionDir) -> None:
    """The dry run's check of how the partition's segments fit together, from the first batch
    header of each (one 61-byte read per segment) and `leader-epoch-checkpoint`: base offsets
    against first offsets, overlaps with the next segment, leader epochs in order and within the
    checkpoint (`log_structure.check_first_batches`; raises `LogStructureError`). A round's
    scan checks the same for every batch, and the index entries."""
    segs = part.segments
    heads = [_read_checked(storage, s.log.path, 0, RECORD_BATCH_OVERHEAD) for s in segs]
    path = part.leader_epoch_checkpoint
    data = _read_checked(storage, path, bound=CHECKPOINT_FILE) if path else None
    entries = ckpt.parse_leader_epoch_checkpoint(data, path) if path else None
    check_first_batches(
        [s.log.path for s in segs],
        [s.base_offset for s in segs],
        heads,
        entries,
        path or ckpt.LEADER_EPOCH_CHECKPOINT,
    )


def _read_checked(
    storage: Storage,
    path: str,
    offset: int = 0,
    length: int | None = None,
    bound: Bound = BROKER_FILE,
) -> bytes:
    try:
        return storage.read_small(path, offset, length, bound)
    except OSError as exc:
        raise PartitionInvalid(f"{path}: cannot read: {exc}") from exc


def check_offset_index(
    storage: Storage, seg: SegmentFiles, active: bool, next_base: int | None = None
) -> bytes:
    """Broker sanity checks (docs/kafka-rules.md#broker-load-checks) plus: offsets and positions strictly
    increasing, no offset below the base, no position at or past the end of the `.log`
    (docs/kafka-rules.md#index-invariants), no offset at or past `next_base` (the next segment's base: an
    index of another segment). Returns the bytes."""
    path = seg.index.path
    data = _read_checked(storage, path)
    sanity_check_offset_index(data, seg.base_offset, path)
    entries = read_offset_index(data, seg.base_offset)
    if active:
        # A live broker's active index is preallocated: trailing (base, 0) entries are padding.
        real = np.flatnonzero((entries[:, 0] != seg.base_offset) | (entries[:, 1] != 0))
        entries = entries[: (int(real[-1]) + 1) if len(real) else min(len(entries), 1)]
    # Vectorised: find the first entry failing any check, then report it exactly as the per-entry
    # checks below would (a real 1 GiB segment's index has ~260k entries).
    offs, poss = entries[:, 0], entries[:, 1]
    bad = (offs < seg.base_offset) | (poss >= max(seg.log.size, 1))
    bad[1:] |= (offs[1:] <= offs[:-1]) | (poss[1:] <= poss[:-1])
    first_bad = np.flatnonzero(bad)
    past = np.flatnonzero(offs >= next_base) if next_base is not None else first_bad[:0]
    if len(past) and (not len(first_bad) or past[0] < first_bad[0]):
        i = int(past[0])
        raise LogStructureError(
            f"entry for offset {int(offs[i])} lies at or past the next segment's base offset {next_base}",
            rule=RULE_INDEX,
            path=path,
            position=i * OFFSET_ENTRY_SIZE,
            offset=int(offs[i]),
        )
    for i in map(int, first_bad[:1]):
        offset, position = int(entries[i, 0]), int(entries[i, 1])
        where = {"path": path, "position": i * OFFSET_ENTRY_SIZE, "offset": offset}
        if offset < seg.base_offset:
            raise IndexCorruptError(f"index entry offset {offset} is below the base offset", **where)
        if position >= max(seg.log.size, 1):
            raise IndexCorruptError(
                f"index entry points to byte {position}, past the end of {seg.log.path} "
                f"({seg.log.size} bytes)",
                **where,
            )
        if i and (offset <= entries[i - 1, 0] or position <= entries[i - 1, 1]):
            raise IndexCorruptError(
                f"index entry ({offset}, {position}) goes backwards after "
                f"({int(entries[i - 1, 0])}, {int(entries[i - 1, 1])})",
                **where,
            )
    return data


@dataclass
class PendingFile:
    """A file rebuilt in memory, in the shape of a listing's entry (`LocalFile`), so that the plan
    sees its size: written into the partition only when the round cleans it (`write_rebuilt`)."""

    name: str
    path: str
    data: bytes
    is_dir: bool = False
    is_link: bool = False
    mtime_ns: int = 0

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass
class RebuiltIndex:
    """The index files of one segment rebuilt from its verified `.log` (`rebuilt_index`)."""

    segment: str  # the .log's name
    batches: int
    files: dict[str, PendingFile]  # suffix -> file


def rebuilt_index(
    storage: Storage, part: PartitionDir, seg: SegmentFiles, index_interval_bytes: int
) -> RebuiltIndex:
    """The `.index` of `seg` (and its `.timeindex` when that is missing too) rebuilt from the
    `.log`, with CRC checks, as a broker's `LogSegment.recover` does when the index is missing;
    `seg` lists them as `PendingFile`s from now on. Nothing is written.

    Raises a `KafkaFormatError` naming the byte position when the `.log` does not verify."""
    active = seg is part.segments[-1]
    data = _read_checked(storage, seg.log.path)
    # The active segment may end in a partial batch after a broker crash: index the valid prefix.
    scan = scan_segment(np.frombuffer(data, dtype=np.uint8), seg.log.path, allow_trailing=active)
    b = scan.batches
    index, timeindex = build_indexes(
        b.position,
        b.size,
        b.last_offset,
        b.max_timestamp,
        seg.base_offset,
        index_interval_bytes,
        seg.log.path,
    )
    contents = {".index": index} if seg.timeindex is not None else {".index": index, ".timeindex": timeindex}
    files = {}
    for suffix, content in contents.items():
        name = naming.segment_file_name(seg.base_offset, suffix)
        files[suffix] = PendingFile(name, f"{part.path}/{name}", content)
        setattr(seg, suffix[1:], files[suffix])
    return RebuiltIndex(seg.name, len(b.position), files)


def write_rebuilt(storage: Storage, rebuilt: RebuiltIndex) -> str:
    """Write rebuilt index files durably: each to `<name>.cleaned`, renamed into place (a crash
    leaves only a `.cleaned` file, which recovery removes). Returns the action."""
    for f in rebuilt.files.values():
        storage.write_durable(f.path + ".cleaned", f.data)
        storage.rename(f.path + ".cleaned", f.path)
    return f"rebuilt missing {_names(rebuilt)} from {rebuilt.segment} ({rebuilt.batches} batches verified)"


def planned_rebuild(rebuilt: RebuiltIndex) -> str:
    """What a dry run reports of a rebuild."""
    return f"would rebuild missing {_names(rebuilt)} from {rebuilt.segment} (dry run)"


def _names(rebuilt: RebuiltIndex) -> str:
    return " and ".join(f.name for f in rebuilt.files.values())


def rebuild_missing_index(
    storage: Storage, part: PartitionDir, seg: SegmentFiles, index_interval_bytes: int, *, write: bool
) -> str:
    """`rebuilt_index`, and with `write` `write_rebuilt` at once. Returns the action."""
    rebuilt = rebuilt_index(storage, part, seg, index_interval_bytes)
    return write_rebuilt(storage, rebuilt) if write else planned_rebuild(rebuilt)
