"""The byte work of `--output-dir` around the round (compaction/archive.py): a partition copied up
to its cut into the staging log dir, then promoted into the output under its marker.

`stage_partition` reads a source partition and writes only to the staging dir: the segments'
whole batches up to the cut (policy/cut.py; a partial batch a crash left at a segment's end is
never copied), each written segment's `.index` / `.timeindex` built afresh from its bytes and
its `.txnindex` without the entries of markers past the cut, `leader-epoch-checkpoint` without
the epochs starting at or past the cut, `partition.metadata` as it is, and an empty segment at
the cut's end offset: the active segment of the copy, so that the round may clean every
segment holding data. Producer snapshots are not copied (a broker rebuilds them from the log).

`promote` moves a staged partition to `<output>/<topic>-<partition>` (one rename on a local
disk; a copy of each file on an object store) and then writes its marker
`<output>/.archived-<topic>-<partition>.json`: a partition is in the output once its marker is.
A marker is a file at the log dir's top, which a broker ignores (it loads directories only).
"""

from __future__ import annotations

import json
import shutil
import struct
from dataclasses import asdict, dataclass
from typing import NamedTuple

from compaction.format import checkpoint as ckpt
from compaction.format import naming
from compaction.format.batch import BatchHeader
from compaction.format.layout import LEGACY_TIMESTAMP_OFFSET, MAGIC_OFFSET, MAGIC_V1, MAGIC_V2
from compaction.format.segment import SegmentReader
from compaction.format.txnindex import read_txn_index, write_txn_index
from compaction.kernels.index_build import rebuild_indexes_from_log
from compaction.policy.cut import Cut, cut_log
from compaction.runtime.checkpoint_files import read_checkpoint_bytes
from compaction.runtime.faults import crash_point
from compaction.runtime.storage import Storage
from compaction.steps.discover import PartitionDir

MARKER_PREFIX = ".archived-"
_TIMESTAMP = struct.Struct(">q")


class _LegacyHead(NamedTuple):
    """What the cut reads of a v0/v1 entry: its offset and (v1) timestamp; never transactional."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int = -1
    is_transactional: bool = False
    is_control: bool = False
    records_count: int = 1


@dataclass(frozen=True)
class Staged:
    """A partition in the staging dir: its cut and the offsets its marker records."""

    topic: str
    partition: int
    source: str  # the source partition dir's URI-less path
    cut: Cut
    log_start_offset: int
    segments: int  # segment files written, the empty active one included

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def _head(batch) -> BatchHeader | _LegacyHead:
    raw = batch.raw
    if raw[MAGIC_OFFSET] == MAGIC_V2:
        return batch.header
    ts = _TIMESTAMP.unpack_from(raw, LEGACY_TIMESTAMP_OFFSET)[0] if raw[MAGIC_OFFSET] == MAGIC_V1 else -1
    return _LegacyHead(batch.last_offset, batch.last_offset, ts)


class _Copier:
    """Feeds `cut_log` the partition's batch headers segment after segment and writes each
    segment's held prefix to the staging dir: a segment the walk left whole when it moved on,
    the last one up to the cut when `cut_log` stopped."""

    def __init__(self, src: Storage, part: PartitionDir, dst: Storage, dst_dir: str) -> None:
        self.src, self.part, self.dst, self.dst_dir = src, part, dst, dst_dir
        self.current = None  # (segment files, its bytes, the end of its held batches)
        self.written: list[int] = []

    def headers(self):
        for seg in self.part.segments:
            data = self.src.read_bytes(seg.log.path)
            self.current = [seg, data, 0]
            for batch in SegmentReader(data, seg.log.path, verify_crc=False):
                yield _head(batch)
                self.current[2] = batch.position + len(batch.raw)  # asked for the next: this one is held
            self.flush(None)

    def flush(self, end_offset: int | None) -> None:
        """Write the current segment's held prefix (nothing if it holds no batch)."""
        if self.current is None:
            return
        seg, data, end = self.current
        self.current = None
        if end == 0:
            return
        held = memoryview(data)[:end]
        base = seg.base_offset
        path = lambda suffix: f"{self.dst_dir}/{naming.segment_file_name(base, suffix)}"  # noqa: E731
        self.dst.write_durable(path(".log"), held)
        index, timeindex = rebuild_indexes_from_log(held, base, path=seg.log.path)
        self.dst.write_durable(path(".index"), index)
        self.dst.write_durable(path(".timeindex"), timeindex)
        if seg.txnindex is not None:
            entries = read_txn_index(self.src.read_bytes(seg.txnindex.path))
            if end_offset is not None:
                entries = [e for e in entries if e.last_offset < end_offset]  # its marker is past the cut
            if entries:
                self.dst.write_durable(path(".txnindex"), write_txn_index(entries, path(".txnindex")))
        self.written.append(base)


def stage_partition(
    src: Storage,
    part: PartitionDir,
    log_start_offset: int,
    dst: Storage,
    staging_root: str,
    as_of_time_ms: int | None,
    as_of_offset: int | None,
) -> Staged:
    """Copy one source partition up to its cut into `staging_root` (a leftover copy replaced)."""
    name = f"{part.topic}-{part.partition}"
    dst_dir = f"{staging_root}/{name}"
    delete_tree(dst, dst_dir)
    make_dir(dst, dst_dir)
    copier = _Copier(src, part, dst, dst_dir)
    cut = cut_log(copier.headers(), as_of_time_ms, as_of_offset, log_start_offset)
    copier.flush(cut.end_offset)
    start = min(log_start_offset, cut.end_offset)
    for suffix in (".log", ".index", ".timeindex"):  # the copy's active segment, empty
        dst.write_durable(f"{dst_dir}/{naming.segment_file_name(cut.end_offset, suffix)}", b"")
    if part.leader_epoch_checkpoint:
        epochs = ckpt.parse_leader_epoch_checkpoint(
            read_checkpoint_bytes(src, part.leader_epoch_checkpoint),
            part.leader_epoch_checkpoint,
        )
        kept = [(e, o) for e, o in epochs if o < cut.end_offset]  # LeaderEpochFileCache.truncateFromEnd
        dst.write_durable(
            f"{dst_dir}/{ckpt.LEADER_EPOCH_CHECKPOINT}", ckpt.format_leader_epoch_checkpoint(kept).encode()
        )
    metadata = f"{part.path}/{naming.PARTITION_METADATA}"
    if src.exists(metadata):
        dst.write_durable(f"{dst_dir}/{naming.PARTITION_METADATA}", src.read_bytes(metadata))
    crash_point("staged")
    return Staged(part.topic, part.partition, part.path, cut, start, len(copier.written) + 1)


def delete_tree(storage: Storage, path: str) -> None:
    """Remove a directory and what it holds (nothing if it is absent)."""
    if storage.info(path) is None:
        return
    if storage.is_local:
        shutil.rmtree(path)
        return
    for info in storage.list_dir(path):  # an object store: its "directories" are key prefixes
        if info.is_dir:
            delete_tree(storage, info.path)
        else:
            storage.delete(info.path, missing_ok=True)


def make_dir(storage: Storage, path: str) -> None:
    """A directory on a local disk; nothing on an object store, where an empty marker object
    would outlive the files under it."""
    if storage.is_local:
        storage.mkdir(path)


def marker_path(root: str, topic: str, partition: int) -> str:
    return f"{root}/{MARKER_PREFIX}{topic}-{partition}.json"


def read_markers(storage: Storage, root: str) -> dict[tuple[str, int], dict]:
    """The partitions already in the output: (topic, partition) -> their marker."""
    if storage.info(root) is None:
        return {}
    out = {}
    for info in storage.list_dir(root):
        if not info.is_dir and info.name.startswith(MARKER_PREFIX) and info.name.endswith(".json"):
            marker = json.loads(storage.read_bytes(info.path))
            out[(marker["topic"], marker["partition"])] = marker
    return out


def promote(staging: Storage, staged_dir: str, out: Storage, out_root: str, marker: dict) -> str:
    """Move a staged partition into the output, then write its marker; the output dir's path."""
    name = staged_dir.rstrip("/").rsplit("/", 1)[-1]
    target = f"{out_root}/{name}"
    delete_tree(out, target)  # an earlier run's promotion, cut short before its marker
    if out.atomic_rename and staging.is_local == out.is_local:
        out.rename(staged_dir, target)
    else:
        make_dir(out, target)
        for info in staging.list_dir(staged_dir):
            out.write_durable(f"{target}/{info.name}", staging.read_bytes(info.path))
        delete_tree(staging, staged_dir)
    crash_point("promoted")
    out.write_atomic(
        marker_path(out_root, marker["topic"], marker["partition"]),
        json.dumps(marker, sort_keys=True).encode(),
    )
    return target


def marker_for(staged: Staged, source_uri: str, output: str, cleaner_offset: int | None) -> dict:
    """What a partition's marker records: where it came from, its cut and its checkpoints' offsets."""
    return {
        "topic": staged.topic,
        "partition": staged.partition,
        "source": source_uri,
        "output": output,
        "cut": {k: v for k, v in asdict(staged.cut).items() if k != "open_transactions"},
        "logStartOffset": staged.log_start_offset,
        "logEndOffset": staged.cut.end_offset,
        "cleanerOffset": cleaner_offset,
    }
