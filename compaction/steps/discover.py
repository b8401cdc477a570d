"""Discovery: what is on disk under a Kafka log dir, as plan inputs.

Planning reads only what its decision needs (issue 6 target 5): the directory listings (names;
sizes and mtimes of the `.log` files), the per-log-dir checkpoint files and, only where a rule
asks for them, the last `.timeindex` entry of dirty segments (min.compaction.lag.ms > 0), the first
batch header of dirty segments (max.compaction.lag.ms set) and the tail of the active segment (the
log end offset, needed only when a checkpoint lies beyond the active segment's base). The contents
checks (`validate_contents`: every index file) run for the partitions a round cleans only; record
data is read later, by the executors, whose scan checks every batch.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from compaction.errors import CompactionError, IndexCorruptError, LogStructureError
from compaction.format import checkpoint as ckpt
from compaction.format import naming
from compaction.format.index import (
    build_indexes,
    read_offset_index,
    read_time_index,
    sanity_check_offset_index,
    sanity_check_time_index,
    sanity_check_txn_index,
)
from compaction.format.layout import (
    LEGACY_TIMESTAMP_OFFSET,
    MAGIC_OFFSET,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    OFFSET_ENTRY_SIZE,
    RECORD_BATCH_OVERHEAD,
    TIME_ENTRY_SIZE,
)
from compaction.kernels.scan import scan_batches, scan_segment
from compaction.policy.log_structure import RULE_INDEX, check_first_batches
from compaction.policy.plan import SegmentMeta
from compaction.runtime.storage import Storage
from compaction.settings import default_discovery_threads

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"

# Files a broker keeps in a partition dir beside its segments (docs/kafka-rules.md#file-names,
# #leader-epoch-checkpoint, #other-partition-files), plus our own commit intent. Anything else is reported: we
# do not guess what a stranger's file means.
KNOWN_PARTITION_FILES = frozenset({"leader-epoch-checkpoint", "partition.metadata", "compaction-commit.json"})
KNOWN_SUFFIXES = (".snapshot", ".snapshot.deleted", ".checkpoint", ".checkpoint.deleted", ".checkpoint.part")
# KRaft's metadata log is trimmed by snapshots, never by the log cleaner.
INTERNAL_TOPICS_NOT_CLEANED = frozenset({"__cluster_metadata"})

COMMIT_INTENT = "compaction-commit.json"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


# Threads listing, planning and committing partitions on the driver: the round's
# `Settings.threads`, set when it starts (`use_threads`).
_threads = default_discovery_threads()


def use_threads(n: int) -> None:
    """The threads of `map_threads` from now on in this process (1: serial)."""
    global _threads
    _threads = max(1, n)


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic GC off for a block that allocates millions of small acyclic objects (a
    listing of 3M files: one `LocalFile` each, one `SegmentFiles`/`SegmentMeta` per segment). Each
    full collection walks every live object, so with the GC on, the collections it triggers made a
    10,000 x 100 listing 3.5x slower (21.6 s -> 6.3 s). Nested use is fine."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            # The allocation counts grew while off: the first allocation after enable() would run
            # a full collection over every object made here (a fifth of a 10,000-partition dry
            # run). Frozen objects are left out of collections; they are freed by reference
            # counting as usual (`unfreeze_gc` returns them to the collector at the end of a run).
            gc.freeze()
            gc.enable()


def unfreeze_gc() -> None:
    gc.unfreeze()


def map_threads(fn, items: list, threads: int | None = None) -> list:
    """`[fn(x) for x in items]`, in order, on a thread pool when there is more than one item."""
    threads = _threads if threads is None else threads
    if threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix="discover") as pool:
        return list(pool.map(fn, items))


class LocalFile:
    """A local directory entry: name and type come from the listing itself (no syscall per file),
    size and mtime from one `os.stat` on first use, so a partition the plan skips costs a stat of
    its `.log` files only (its index files are never touched). Same fields as `storage.FileInfo`;
    an OSError (file gone) surfaces where the value is first used, in that partition's planning."""

    __slots__ = ("_stat", "is_dir", "name", "path")

    def __init__(self, name: str, path: str, is_dir: bool) -> None:
        self.name, self.path, self.is_dir, self._stat = name, path, is_dir, None

    def _st(self) -> os.stat_result:
        if self._stat is None:
            self._stat = os.stat(self.path)
        return self._stat

    @property
    def size(self) -> int:
        return -1 if self.is_dir else self._st().st_size

    @property
    def mtime_ns(self) -> int:
        return self._st().st_mtime_ns

    def __repr__(self) -> str:
        return f"LocalFile({self.path!r})"


def _list_local(path: str) -> list[LocalFile]:
    """`Storage.list_dir` for a local dir with `os.scandir`: one getdents pass, no stat, in the
    directory's own order (callers sort what they keep)."""
    with os.scandir(path) as it:
        return [LocalFile(e.name, e.path, e.is_dir()) for e in it]


def _read(storage: Storage, path: str, offset: int = 0, length: int | None = None) -> bytes:
    """`Storage.read_bytes`; on the local filesystem with plain os calls (open, pread, close),
    several times cheaper per small file than a pyarrow input file, same bytes and OSErrors."""
    if not storage.is_local:
        return storage.read_bytes(path, offset, length)
    fd = os.open(path, os.O_RDONLY)
    try:
        if length is None:
            length = max(os.fstat(fd).st_size - offset, 0)
        chunks = []
        while length > 0:
            chunk = os.pread(fd, length, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
            length -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


read_small = _read  # for plan_round.py: small whole files (a .txnindex)


@dataclass
class SegmentFiles:
    base_offset: int
    log: object | None = None
    index: object | None = None
    timeindex: object | None = None
    txnindex: object | None = None

    @property
    def name(self) -> str:
        return naming.segment_file_name(self.base_offset, ".log")


@dataclass
class PartitionDir:
    log_dir: str
    topic: str
    partition: int
    path: str
    segments: list[SegmentFiles] = field(default_factory=list)
    transient: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # files a broker would not have written
    has_commit_intent: bool = False  # the listing holds compaction-commit.json (recovery's cue)
    leader_epoch_checkpoint: str | None = None  # its path, when the listing holds one

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


@dataclass
class LogDirState:
    """One log dir: its partitions and the checkpoint files the cleaner reads."""

    uri: str
    storage: Storage
    path: str
    partitions: list[PartitionDir]
    cleaner_checkpoint: dict
    log_start_offsets: dict
    high_watermarks: dict


def read_log_dir(uri: str, topics: str | None = None) -> LogDirState:
    """List one log dir. A malformed checkpoint raises `CheckpointError` before anything is written."""
    with gc_paused():
        return _read_log_dir(uri, topics)


def _read_log_dir(uri: str, topics: str | None) -> LogDirState:
    storage, root = Storage.for_uri(uri)
    pattern = re.compile(topics) if topics else None
    todo = []
    for info in _list_local(root) if storage.is_local else storage.list_dir(root):
        if not info.is_dir:
            continue
        parsed = naming.parse_partition_dir_name(info.name)
        if parsed is None or parsed[0] in INTERNAL_TOPICS_NOT_CLEANED:
            continue
        if pattern and not pattern.fullmatch(parsed[0]):
            continue
        todo.append((info.path, *parsed))
    partitions = map_threads(lambda t: _list_partition(storage, uri, *t), todo)
    partitions.sort(key=lambda p: p.key)
    return LogDirState(
        uri=uri,
        storage=storage,
        path=root,
        partitions=partitions,
        cleaner_checkpoint=ckpt.read_checkpoint(storage, f"{root}/{CLEANER_CHECKPOINT}"),
        log_start_offsets=ckpt.read_checkpoint(storage, f"{root}/{LOG_START_CHECKPOINT}"),
        high_watermarks=ckpt.read_checkpoint(storage, f"{root}/{REPLICATION_CHECKPOINT}"),
    )


_SLOTS = {".log": "log", ".index": "index", ".timeindex": "timeindex", ".txnindex": "txnindex"}


def _list_partition(storage: Storage, log_dir: str, path: str, topic: str, partition: int) -> PartitionDir:
    part = PartitionDir(log_dir=log_dir, topic=topic, partition=partition, path=path)
    by_base: dict[int, SegmentFiles] = {}
    # Local: os.scandir (names and types only; sizes on first use). Elsewhere one listing call per
    # partition, on the discovery threads: on an object store a recursive listing of the log dir
    # is one sequential chain of pages (1,000 keys each: 3,000 round trips for 3M files), slower
    # than 10,000 prefix listings issued 16 at a time.
    for info in _list_local(path) if storage.is_local else storage.list_dir(path):
        name = info.name
        # Fast path (nearly every entry): <20 digits>.log/.index/.timeindex/.txnindex, a file.
        attr = _SLOTS.get(name[20:])
        prefix = name[:20]
        if attr is not None and not info.is_dir and prefix.isascii() and prefix.isdigit():
            base = int(prefix)
            if base <= naming.MAX_OFFSET:
                seg = by_base.get(base)
                if seg is None:
                    seg = by_base[base] = SegmentFiles(base)
                setattr(seg, attr, info)
                continue
        if name == COMMIT_INTENT:
            part.has_commit_intent = True
        elif name == LEADER_EPOCH_CHECKPOINT and not info.is_dir:
            part.leader_epoch_checkpoint = info.path
        if info.is_dir:
            # A broker never makes sub-directories in a partition dir; one named like a segment
            # file would also be read as that file (an unreadable file, from our side).
            part.problems.append(f"{info.path}: is a directory, not a file")
            continue
        if name in KNOWN_PARTITION_FILES or name.endswith(KNOWN_SUFFIXES):
            continue
        try:
            parsed = naming.parse_segment_file_name(name)
        except naming.SegmentNameError as exc:
            part.problems.append(f"{info.path}: {exc}")
            continue
        if parsed.transient is not None:
            part.transient.append(info.path)
            continue
        attr = _SLOTS.get(parsed.suffix)
        if attr is None:
            continue
        seg = by_base.setdefault(parsed.base_offset, SegmentFiles(parsed.base_offset))
        setattr(seg, attr, info)
    part.segments = sorted((s for s in by_base.values() if s.log is not None), key=lambda s: s.base_offset)
    part.problems.sort()
    part.transient.sort()
    return part


def relist_partition(storage: Storage, part: PartitionDir) -> PartitionDir:
    """`part` listed again (after recovery changed its files)."""
    return _list_partition(storage, part.log_dir, part.path, part.topic, part.partition)


def last_time_entry_ts(storage: Storage, seg: SegmentFiles) -> int:
    """`LogSegment.largestTimestamp` as loaded: the last `.timeindex` entry's timestamp (one
    12-byte read), -1 when there is none (the planner then uses the `.log` mtime, as Kafka does)."""
    info = seg.timeindex
    if info is None or info.size < TIME_ENTRY_SIZE or info.size % TIME_ENTRY_SIZE:
        return -1
    data = _read(storage, info.path, info.size - TIME_ENTRY_SIZE, TIME_ENTRY_SIZE)
    entries = read_time_index(data, seg.base_offset)
    return int(entries[-1][0]) if len(entries) else -1


def first_batch_timestamp(storage: Storage, seg: SegmentFiles) -> int:
    """maxTimestamp of the segment's first batch (one 61-byte read), -1 when there is none."""
    if seg.log.size < RECORD_BATCH_OVERHEAD:
        return -1
    head = _read(storage, seg.log.path, 0, RECORD_BATCH_OVERHEAD)
    magic = head[MAGIC_OFFSET]
    if magic >= MAGIC_V2:
        return int.from_bytes(head[MAX_TIMESTAMP_OFFSET : MAX_TIMESTAMP_OFFSET + 8], "big", signed=True)
    if magic == MAGIC_V1:
        return int.from_bytes(head[LEGACY_TIMESTAMP_OFFSET : LEGACY_TIMESTAMP_OFFSET + 8], "big", signed=True)
    return -1


def segment_meta(
    storage: Storage, seg: SegmentFiles, *, largest_ts: bool = False, first_batch_ts: bool = False,
    index_sizes: bool = True, sizes: bool = True,
) -> SegmentMeta:  # fmt: skip
    """The numbers `LogCleanerManager` and `groupSegmentsBySize` look at for one segment. Only the
    listing's `.log` size and mtime unless asked: `largest_ts` reads the last `.timeindex` entry,
    `first_batch_ts` the first batch header, `index_sizes` stats the index files (grouping only);
    what is not asked for is reported unknown (-1, 0 entries), which the planner never looks at.
    `sizes=False` leaves even the `.log` size and mtime at 0 (one stat fewer), for segments the
    plan cannot clean."""
    return SegmentMeta(
        base_offset=seg.base_offset,
        size=seg.log.size if sizes else 0,
        offset_index_entries=(seg.index.size // OFFSET_ENTRY_SIZE) if index_sizes and seg.index else 0,
        time_index_entries=(seg.timeindex.size // TIME_ENTRY_SIZE) if index_sizes and seg.timeindex else 0,
        largest_timestamp=last_time_entry_ts(storage, seg) if largest_ts else -1,
        first_batch_timestamp=first_batch_timestamp(storage, seg) if first_batch_ts else -1,
        mtime_ms=seg.log.mtime_ns // 1_000_000 if sizes else 0,
        next_offset=None,
    )


def log_end_offset(storage: Storage, seg: SegmentFiles, index_data: bytes | None = None) -> int:
    """Next offset after the last complete batch of (active) segment `seg`.

    Starts at the last offset-index entry, as the broker's `LogSegment.readNextOffset` does, so
    a 1 GiB active segment costs one index read plus a short scan. An empty `.log` costs nothing.
    """
    if seg.log.size == 0:
        return seg.base_offset
    start = 0
    if seg.index is not None and seg.index.size >= OFFSET_ENTRY_SIZE:
        data = index_data if index_data is not None else _read(storage, seg.index.path)
        entries = read_offset_index(data, seg.base_offset)
        # An active segment's index is preallocated: trailing zero entries read as (base, 0).
        valid = [e for e in entries if int(e[1]) > 0]
        if valid and int(valid[-1][1]) < seg.log.size:
            start = int(valid[-1][1])
    tail = _read(storage, seg.log.path, start, seg.log.size - start)
    cols = scan_batches(np.frombuffer(tail, dtype=np.uint8))
    if len(cols.last_offset) == 0:
        return seg.base_offset
    return int(cols.last_offset.max()) + 1


# --- validation (issue 5: bad input fails its partition, never the run) ---------------------------


class PartitionInvalid(CompactionError):
    """A partition dir we will not touch: unknown files, no segment, a broken index."""


def check_listing(part: PartitionDir) -> None:
    """What the listing alone shows (no read): files a broker would not have written, directories
    where files belong, no segment at all. Run for every partition before it is planned."""
    if part.problems:
        raise PartitionInvalid("unexpected file in partition dir: " + "; ".join(part.problems))
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
    validate_partition(storage, _list_partition(storage, "", part_path, "", -1))


def audit_structure(storage: Storage, part: PartitionDir) -> None:
    """The dry run's check of how the partition's segments fit together, from the first batch
    header of each (one 61-byte read per segment) and `leader-epoch-checkpoint`: base offsets
    against first offsets, overlaps with the next segment, leader epochs in order and within the
    checkpoint (`log_structure.check_first_batches`; raises `LogStructureError`). A round's
    scan checks the same for every batch, and the index entries."""
    segs = part.segments
    heads = [_read_checked(storage, s.log.path, 0, RECORD_BATCH_OVERHEAD) for s in segs]
    path = part.leader_epoch_checkpoint
    entries = ckpt.parse_leader_epoch_checkpoint(_read_checked(storage, path), path) if path else None
    check_first_batches([s.log.path for s in segs], [s.base_offset for s in segs], heads, entries,
                        path or LEADER_EPOCH_CHECKPOINT)  # fmt: skip


def _read_checked(storage: Storage, path: str, offset: int = 0, length: int | None = None) -> bytes:
    try:
        return _read(storage, path, offset, length)
    except OSError as exc:
        raise PartitionInvalid(f"{path}: cannot read: {exc}") from exc


def check_offset_index(storage: Storage, seg: SegmentFiles, active: bool,
                       next_base: int | None = None) -> bytes:  # fmt: skip
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
            rule=RULE_INDEX, path=path, position=i * OFFSET_ENTRY_SIZE, offset=int(offs[i]))  # fmt: skip
    for i in map(int, first_bad[:1]):
        offset, position = int(entries[i, 0]), int(entries[i, 1])
        where = {"path": path, "position": i * OFFSET_ENTRY_SIZE, "offset": offset}
        if offset < seg.base_offset:
            raise IndexCorruptError(f"index entry offset {offset} is below the base offset", **where)
        if position >= max(seg.log.size, 1):
            raise IndexCorruptError(
                f"index entry points to byte {position}, past the end of {seg.log.path} "
                f"({seg.log.size} bytes)", **where)  # fmt: skip
        if i and (offset <= entries[i - 1, 0] or position <= entries[i - 1, 1]):
            raise IndexCorruptError(
                f"index entry ({offset}, {position}) goes backwards after "
                f"({int(entries[i - 1, 0])}, {int(entries[i - 1, 1])})", **where)  # fmt: skip
    return data


def rebuild_missing_index(
    storage: Storage, part: PartitionDir, seg: SegmentFiles, index_interval_bytes: int, *, write: bool
) -> str:
    """Rebuild the `.index` of `seg` (and its `.timeindex` when that is missing too) from the
    `.log`, with CRC checks, as a broker's `LogSegment.recover` does when the index is missing.

    Raises a `KafkaFormatError` naming the byte position when the `.log` does not verify (then
    nothing is written). With `write`, each file goes to `<name>.cleaned` durably and is renamed
    into place (a crash leaves only a `.cleaned` file, which recovery removes). Returns the action.
    """
    active = seg is part.segments[-1]
    data = _read_checked(storage, seg.log.path)
    # The active segment may end in a partial batch after a broker crash: index the valid prefix.
    scan = scan_segment(np.frombuffer(data, dtype=np.uint8), seg.log.path, allow_trailing=active)
    b = scan.batches
    index, timeindex = build_indexes(b.position, b.size, b.last_offset, b.max_timestamp, seg.base_offset,
                                     index_interval_bytes)  # fmt: skip
    files = {".index": index} if seg.timeindex is not None else {".index": index, ".timeindex": timeindex}
    names = " and ".join(naming.segment_file_name(seg.base_offset, s) for s in files)
    if not write:
        return f"would rebuild missing {names} from {seg.name} (dry run)"
    for suffix, content in files.items():
        final = f"{part.path}/{naming.segment_file_name(seg.base_offset, suffix)}"
        storage.write_durable(final + ".cleaned", content)
        storage.rename(final + ".cleaned", final)
        setattr(seg, suffix[1:], storage.info(final))
    return f"rebuilt missing {names} from {seg.name} ({len(b.position)} batches verified)"
