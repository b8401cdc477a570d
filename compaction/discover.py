"""Discovery: what is on disk under a Kafka log dir, as plan inputs.

Reads only what the plan needs: directory listings, the per-log-dir checkpoint files, the last
entry of each `.timeindex`, the first batch header of each segment (for max compaction lag) and
the tail of the active segment (for the log end offset). Record data is read later, by the
executors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from compaction.format import checkpoint as ckpt
from compaction.format import naming
from compaction.format.index import read_offset_index, read_time_index
from compaction.format.scan import scan_batches
from compaction.plan import SegmentMeta
from compaction.storage import Storage

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"

# Files a broker keeps in a partition dir beside its segments (spec §3.1, §4.4, §4.5), plus our
# own commit intent. Anything else is reported: we do not guess what a stranger's file means.
KNOWN_PARTITION_FILES = frozenset({"leader-epoch-checkpoint", "partition.metadata", "compaction-commit.json"})
KNOWN_SUFFIXES = (".snapshot", ".snapshot.deleted", ".checkpoint", ".checkpoint.deleted", ".checkpoint.part")
# KRaft's metadata log is trimmed by snapshots, never by the log cleaner.
INTERNAL_TOPICS_NOT_CLEANED = frozenset({"__cluster_metadata"})

OFFSET_ENTRY_BYTES = 8
TIME_ENTRY_BYTES = 12
# v2 header: maxTimestamp sits at byte 35; v1 message: timestamp at byte 18 (spec §1.1, §1.6).
V2_MAX_TIMESTAMP_AT = 35
V1_TIMESTAMP_AT = 18
FIRST_HEADER_BYTES = 61


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
    storage, root = Storage.for_uri(uri)
    pattern = re.compile(topics) if topics else None
    partitions = []
    for info in storage.list_dir(root):
        if not info.is_dir:
            continue
        parsed = naming.parse_partition_dir_name(info.name)
        if parsed is None or parsed[0] in INTERNAL_TOPICS_NOT_CLEANED:
            continue
        if pattern and not pattern.fullmatch(parsed[0]):
            continue
        partitions.append(_list_partition(storage, uri, info.path, *parsed))
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


def _list_partition(storage: Storage, log_dir: str, path: str, topic: str, partition: int) -> PartitionDir:
    part = PartitionDir(log_dir=log_dir, topic=topic, partition=partition, path=path)
    by_base: dict[int, SegmentFiles] = {}
    for info in storage.list_dir(path):
        if info.is_dir:
            continue
        if info.name in KNOWN_PARTITION_FILES or info.name.endswith(KNOWN_SUFFIXES):
            continue
        try:
            parsed = naming.parse_segment_file_name(info.name)
        except naming.SegmentNameError as exc:
            part.problems.append(f"{info.path}: {exc}")
            continue
        if parsed.transient is not None:
            part.transient.append(info.path)
            continue
        slot = {".log": "log", ".index": "index", ".timeindex": "timeindex", ".txnindex": "txnindex"}
        attr = slot.get(parsed.suffix)
        if attr is None:
            continue
        seg = by_base.setdefault(parsed.base_offset, SegmentFiles(parsed.base_offset))
        setattr(seg, attr, info)
    part.segments = sorted((s for s in by_base.values() if s.log is not None), key=lambda s: s.base_offset)
    return part


def _last_time_entry_ts(storage: Storage, seg: SegmentFiles) -> int:
    info = seg.timeindex
    if info is None or info.size < TIME_ENTRY_BYTES or info.size % TIME_ENTRY_BYTES:
        return -1
    data = storage.read_bytes(info.path, info.size - TIME_ENTRY_BYTES, TIME_ENTRY_BYTES)
    entries = read_time_index(data, seg.base_offset)
    return int(entries[-1][0]) if len(entries) else -1


def _first_batch_timestamp(storage: Storage, seg: SegmentFiles) -> int:
    if seg.log.size < FIRST_HEADER_BYTES:
        return -1
    head = storage.read_bytes(seg.log.path, 0, FIRST_HEADER_BYTES)
    magic = head[16]
    if magic >= 2:
        return int.from_bytes(head[V2_MAX_TIMESTAMP_AT : V2_MAX_TIMESTAMP_AT + 8], "big", signed=True)
    if magic == 1:
        return int.from_bytes(head[V1_TIMESTAMP_AT : V1_TIMESTAMP_AT + 8], "big", signed=True)
    return -1


def segment_meta(storage: Storage, seg: SegmentFiles, want_first_batch_ts: bool) -> SegmentMeta:
    """The numbers `LogCleanerManager` and `groupSegmentsBySize` look at for one segment."""
    largest = _last_time_entry_ts(storage, seg)
    mtime_ms = seg.log.mtime_ns // 1_000_000
    return SegmentMeta(
        base_offset=seg.base_offset,
        size=seg.log.size,
        offset_index_entries=(seg.index.size // OFFSET_ENTRY_BYTES) if seg.index else 0,
        time_index_entries=(seg.timeindex.size // TIME_ENTRY_BYTES) if seg.timeindex else 0,
        largest_timestamp=largest,
        first_batch_timestamp=_first_batch_timestamp(storage, seg) if want_first_batch_ts else -1,
        mtime_ms=mtime_ms,
        next_offset=None,
    )


def log_end_offset(storage: Storage, seg: SegmentFiles) -> int:
    """Next offset after the last complete batch of (active) segment `seg`.

    Starts at the last offset-index entry, as the broker's `LogSegment.readNextOffset` does, so
    a 1 GiB active segment costs one index read plus a short scan.
    """
    start = 0
    if seg.index is not None and seg.index.size >= OFFSET_ENTRY_BYTES:
        entries = read_offset_index(storage.read_bytes(seg.index.path), seg.base_offset)
        # An active segment's index is preallocated: trailing zero entries read as (base, 0).
        valid = [e for e in entries if int(e[1]) > 0]
        if valid and int(valid[-1][1]) < seg.log.size:
            start = int(valid[-1][1])
    tail = storage.read_bytes(seg.log.path, start, seg.log.size - start)
    cols = scan_batches(np.frombuffer(tail, dtype=np.uint8))
    if len(cols.last_offset) == 0:
        return seg.base_offset
    return int(cols.last_offset.max()) + 1
