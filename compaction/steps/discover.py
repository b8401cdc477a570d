"""Discovery: what is on disk under a Kafka log dir, as plan inputs.

Planning reads only what its decision needs: the directory listings (names; sizes and mtimes of
the `.log` files, sizes of the `.txnindex` files), the per-log-dir checkpoint files and, only
where a rule asks for them, the last `.timeindex` entry of dirty segments (min.compaction.lag.ms >
0), the first batch header of dirty segments (max.compaction.lag.ms set) and the tail of the
active segment (the log end offset, needed only when a checkpoint lies beyond the active segment's
base). The contents checks (`validate.validate_contents`: every index file) run for the
partitions a round cleans only; record data is read later, by the executors, whose scan checks
every batch.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field

import numpy as np

from compaction.errors import PartitionInvalid, SegmentNameError
from compaction.format import checkpoint as ckpt
from compaction.format import naming
from compaction.format.index import read_offset_index, read_time_index
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
from compaction.format.txnindex import check_txn_index_size
from compaction.kernels.scan import scan_batches
from compaction.kernels.scan_reference import scan_batches_py
from compaction.policy.plan import SegmentMeta
from compaction.runtime.checkpoint_files import read_checkpoint
from compaction.runtime.driver import gc_paused, map_threads
from compaction.runtime.storage import Storage

log = logging.getLogger("compaction")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"

# Files a broker keeps in a partition dir beside its segments (docs/kafka-rules.md#file-names,
# #leader-epoch-checkpoint, #other-partition-files), plus our own commit intent. Anything else is reported: we
# do not guess what a stranger's file means.
KNOWN_PARTITION_FILES = frozenset(
    {ckpt.LEADER_EPOCH_CHECKPOINT, naming.PARTITION_METADATA, naming.COMMIT_INTENT_FILE}
)
KNOWN_SUFFIXES = (".snapshot", ".snapshot.deleted", ".checkpoint", ".checkpoint.deleted", ".checkpoint.part")
INTERNAL_TOPICS_NOT_CLEANED = naming.INTERNAL_TOPICS_NOT_CLEANED


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

    def refuse_problems(self) -> None:
        """PartitionInvalid naming the files a broker would not have written, if any: the job
        does not clean such a partition, nor does a read return it (a linked segment is not
        listed as one, so its rows would be missing). Then the IndexCorruptError of the first
        `.txnindex` longer than its segment can hold entries for (`check_txn_index_size`)."""
        if self.problems:
            raise PartitionInvalid("unexpected file in partition dir: " + "; ".join(self.problems))
        for seg in self.segments:
            if seg.txnindex is not None and seg.log is not None:
                check_txn_index_size(seg.txnindex.size, seg.log.size, seg.txnindex.path)


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


def read_log_dir(
    uri: str, topics: str | None = None, partitions: tuple[str, ...] | None = None
) -> LogDirState:
    """List one log dir (the partitions `topics`, a regex, and `partitions`, dir names, select). A
    malformed checkpoint raises `CheckpointError` before anything is written."""
    with gc_paused():
        return _read_log_dir(uri, topics, partitions)


def _read_log_dir(uri: str, topics: str | None, partitions: tuple[str, ...] | None = None) -> LogDirState:
    storage, root = Storage.for_uri(uri)
    pattern = re.compile(topics) if topics else None
    todo = []
    for info in storage.scan_dir(root):
        if not info.is_dir:
            continue
        parsed = naming.parse_partition_dir_name(info.name)
        if parsed is None or parsed[0] in INTERNAL_TOPICS_NOT_CLEANED:
            continue
        if pattern and not pattern.fullmatch(parsed[0]):
            continue
        if partitions is not None and info.name not in partitions:
            continue
        if getattr(info, "is_link", False):  # a broker follows it (log dirs on other disks are linked)
            log.info(
                "%s is a symbolic link to %s: followed, as a broker does",
                info.path,
                os.path.realpath(info.path),
            )
        todo.append((info.path, *parsed))
    partitions = map_threads(lambda t: list_partition(storage, uri, *t), todo)
    partitions.sort(key=lambda p: p.key)
    return LogDirState(
        uri=uri,
        storage=storage,
        path=root,
        partitions=partitions,
        cleaner_checkpoint=read_checkpoint(storage, f"{root}/{CLEANER_CHECKPOINT}"),
        log_start_offsets=read_checkpoint(storage, f"{root}/{LOG_START_CHECKPOINT}"),
        high_watermarks=read_checkpoint(storage, f"{root}/{REPLICATION_CHECKPOINT}"),
    )


_SLOTS = {".log": "log", ".index": "index", ".timeindex": "timeindex", ".txnindex": "txnindex"}


def list_partition(storage: Storage, log_dir: str, path: str, topic: str, partition: int) -> PartitionDir:
    part = PartitionDir(log_dir=log_dir, topic=topic, partition=partition, path=path)
    by_base: dict[int, SegmentFiles] = {}
    # Local: os.scandir (names and types only; sizes on first use). Elsewhere one listing call per
    # partition, on the discovery threads: on an object store a recursive listing of the log dir
    # is one sequential chain of pages (1,000 keys each: 3,000 round trips for 3M files), slower
    # than 10,000 prefix listings issued 16 at a time.
    for info in storage.scan_dir(path):
        name = info.name
        if getattr(info, "is_link", False):
            # A broker makes no link in a partition dir, and a rewrite would replace the link by a
            # file, leaving its target orphaned (or a stranger's file written through it).
            part.problems.append(
                f"{info.path}: is a symbolic link (to {_link_target(info.path)}), which a broker never makes"
            )
            continue
        if getattr(info, "is_special", False):
            # A read of a pipe would wait for ever (of a device, never end).
            part.problems.append(
                f"{info.path}: is not a regular file (a pipe, socket or device), which a broker never makes"
            )
            continue
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
        if name == naming.COMMIT_INTENT_FILE:
            part.has_commit_intent = True
        elif name == ckpt.LEADER_EPOCH_CHECKPOINT and not info.is_dir:
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
        except SegmentNameError as exc:
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


def _link_target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def relist_partition(storage: Storage, part: PartitionDir) -> PartitionDir:
    """`part` listed again (after recovery changed its files)."""
    return list_partition(storage, part.log_dir, part.path, part.topic, part.partition)


def last_time_entry_ts(storage: Storage, seg: SegmentFiles) -> int:
    """`LogSegment.largestTimestamp` as loaded: the last `.timeindex` entry's timestamp (one
    12-byte read), -1 when there is none (the planner then uses the `.log` mtime, as Kafka does)."""
    info = seg.timeindex
    if info is None or info.size < TIME_ENTRY_SIZE or info.size % TIME_ENTRY_SIZE:
        return -1
    data = storage.read_small(info.path, info.size - TIME_ENTRY_SIZE, TIME_ENTRY_SIZE)
    entries = read_time_index(data, seg.base_offset)
    return int(entries[-1][0]) if len(entries) else -1


def first_batch_timestamp(storage: Storage, seg: SegmentFiles) -> int:
    """maxTimestamp of the segment's first batch (one 61-byte read), -1 when there is none."""
    if seg.log.size < RECORD_BATCH_OVERHEAD:
        return -1
    head = storage.read_small(seg.log.path, 0, RECORD_BATCH_OVERHEAD)
    magic = head[MAGIC_OFFSET]
    if magic >= MAGIC_V2:
        return int.from_bytes(head[MAX_TIMESTAMP_OFFSET : MAX_TIMESTAMP_OFFSET + 8], "big", signed=True)
    if magic == MAGIC_V1:
        return int.from_bytes(head[LEGACY_TIMESTAMP_OFFSET : LEGACY_TIMESTAMP_OFFSET + 8], "big", signed=True)
    return -1


def segment_meta(
    storage: Storage,
    seg: SegmentFiles,
    *,
    largest_ts: bool = False,
    first_batch_ts: bool = False,
    index_sizes: bool = True,
    sizes: bool = True,
) -> SegmentMeta:
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


# The longest active-segment tail the driver walks in plain Python (`log_end_offset`).
PY_WALK_MAX_BYTES = 1 << 20


def log_end_offset(storage: Storage, seg: SegmentFiles, index_data: bytes | None = None) -> int:
    """Next offset after the last complete batch of (active) segment `seg`.

    Starts at the last offset-index entry, as the broker's `LogSegment.readNextOffset` does, so
    a 1 GiB active segment costs one index read plus a short scan. An empty `.log` costs nothing.
    """
    if seg.log.size == 0:
        return seg.base_offset
    start = 0
    if seg.index is not None and seg.index.size >= OFFSET_ENTRY_SIZE:
        if index_data is None:  # a rebuilt index not written yet (validate.PendingFile) holds its bytes
            index_data = getattr(seg.index, "data", None)
        data = index_data if index_data is not None else storage.read_small(seg.index.path)
        entries = read_offset_index(data, seg.base_offset)
        # An active segment's index is preallocated: trailing zero entries read as (base, 0).
        valid = [e for e in entries if int(e[1]) > 0]
        if valid and int(valid[-1][1]) < seg.log.size:
            start = int(valid[-1][1])
    tail = storage.read_small(seg.log.path, start, seg.log.size - start)
    # A tail past the last index entry is a few KB: walked in Python, the driver loads no kernel
    # for it (the first call of a compiled kernel loads it, longer than the walk); a long one (no index)
    # goes to the kernel.
    walk = scan_batches_py if len(tail) <= PY_WALK_MAX_BYTES else scan_batches
    cols = walk(np.frombuffer(tail, dtype=np.uint8))
    if len(cols.last_offset) == 0:
        return seg.base_offset
    return int(cols.last_offset.max()) + 1
