"""Executor-side work: the key scans and the rewrite into `.cleaned` files.

The offset map's input: `scan_partition` (the groups of one partition or one range, newest segment
first: `PartitionMap`, key ids from a `KeyTable`; `map_masks`: a map record is keyed, not aborted,
not control; dirty = in the dirty section). `rewrite_unit` applies Kafka's
cleaner rules batch by batch (`retention.py`) to the same segments, asking an `OffsetMap` for
map[key], keeping a record iff `offset >= map[key]` (absent -> -1), then writes
`<base>.log.cleaned` with fresh `.index`/`.timeindex` (and `.txnindex` when aborted
transactions' markers remain), durably, with the last source segment's mtime.

A "unit" is the groups one task rewrites in log order with one `CleanedTransactionMetadata`:
one group for partitions without transactions (groups run in parallel), all groups of the
partition otherwise (transaction state crosses group boundaries, docs/kafka-rules.md#transactions).
"""

from __future__ import annotations

import itertools
import time
from array import array
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from compaction.runtime import throttle
from compaction.steps.discover import read_small
from compaction.steps.erase import ERASED, ErasingMap, EraseError
from compaction.errors import CorruptRecordError
from compaction.format.checkpoint import parse_leader_epoch_checkpoint
from compaction.format import batch as fb
from compaction.format import naming
from compaction.kernels import rebuild
from compaction.kernels import upconvert
from compaction.format.index import AbortedTxn, build_indexes, read_offset_index, read_time_index, write_txn_index
from compaction.kernels.keymap import KeyTable
from compaction.kernels.scan import SegmentScan, scan_batches, scan_segment
from compaction.kernels.sidepack import pack_side
from compaction.policy.log_structure import (
    SegmentEpochs,
    check_index_entries,
    check_leader_epochs,
    check_segment_offsets,
    check_time_index_entries,
    segment_epochs,
)
from compaction.policy.retention import (
    BatchOutput,
    BatchRetention,
    CleanedTransactionMetadata,
    LastRecord,
    check_batch_retention,
    delete_horizon_ms,
    filter_batch_output,
    needs_delete_horizon,
    retain_legacy_deletes,
)
from compaction.runtime.segment_io import ReadAhead, SegmentWriter, is_mapped, read_segment_bytes
from compaction.runtime.storage import Storage

CLEANED = ".cleaned"


@dataclass(frozen=True)
class SourceSegment:
    base_offset: int
    size: int
    mtime_ns: int
    # The base offset of the partition's next segment (None: the last one, or not known): this
    # segment's offsets must stay below it (log_structure.py).
    next_base_offset: int | None = None


@dataclass(frozen=True)
class GroupSpec:
    """Everything an executor needs to scan or rewrite one output group."""

    group_id: int
    topic: str
    partition: int
    storage: Storage
    part_path: str
    segments: tuple[SourceSegment, ...]
    first_dirty_offset: int
    upper_bound: int  # first uncleanable offset (segment-aligned)
    now_ms: int
    delete_retention_ms: int
    legacy_delete_horizon_ms: int
    index_interval_bytes: int
    aborted_txns: tuple[AbortedTxn, ...] = ()
    last_records: dict[int, LastRecord] = field(default_factory=dict)
    retain_last_batch_of_round: bool = True
    # Uncleanable segments (incl. the active one): read for producer state only, never rewritten.
    tail_segments: tuple[SourceSegment, ...] = ()
    max_message_bytes: int = 2**31 - 1  # max.message.bytes: a larger batch fails the partition
    read_mode: str = "direct"  # segment_io.READ_MODES: how source segments are read (--read-mode)
    write_mode: str = "direct"  # segment_io.WRITE_MODES: how cleaned segments are written (--write-mode)
    dry_run: bool = False  # --dry-run: everything decided and sized as in a round, nothing written
    leader_epoch_checkpoint: str | None = None  # its path, when the partition dir holds one
    # --erase-keys: the listed keys (erase.EraseSet, shared by every spec: pickled once a job).
    erase: object | None = None
    # A group that only erases (one source segment, no compaction rule): records of listed keys
    # go, every other batch stays as it is; nothing is written when nothing is erased.
    erase_only: bool = False

    @property
    def new_base(self) -> int:
        return self.segments[0].base_offset

    def segment_path(self, base: int, suffix: str = ".log") -> str:
        return f"{self.part_path}/{naming.segment_file_name(base, suffix)}"


# --- reading ---------------------------------------------------------------------------------


def _planned_segment_bytes(spec: GroupSpec, seg: SourceSegment, data: np.ndarray | None = None) -> tuple[str, np.ndarray]:
    """(path, bytes) of a source segment (read now unless `data` was read ahead), which must
    still have the size it was planned with."""
    path = spec.segment_path(seg.base_offset)
    if data is None:
        data = read_segment_bytes(spec.storage, path, spec.read_mode)
    if len(data) != seg.size:
        raise CorruptRecordError(f"segment changed size since planning ({seg.size} -> {len(data)} bytes)", path=path)
    return path, data


def _check_batch_sizes(spec: GroupSpec, path: str, batches) -> None:
    too_big = np.flatnonzero(batches.size > spec.max_message_bytes)
    if len(too_big):  # Kafka's cleaner: "This log contains a message larger than maximum allowable size"
        i = int(too_big[0])
        raise CorruptRecordError(
            f"batch of {int(batches.size[i])} bytes is larger than max.message.bytes "
            f"{spec.max_message_bytes}", path=path, position=int(batches.position[i]),
            offset=int(batches.base_offset[i]))  # fmt: skip


def _read_segment(spec: GroupSpec, seg: SourceSegment, data: np.ndarray | None = None,
                  hash_keys: bool = True, epochs: list[SegmentEpochs] | None = None,
                  verify_crc: bool = True) -> SegmentScan:  # fmt: skip
    """The checked scan of a source segment; `epochs` (if given) receives its leader-epoch runs
    for `check_partition_epochs`. `verify_crc=False` only for a segment this round's scan has
    verified already (its size is checked again)."""
    path, data = _planned_segment_bytes(spec, seg, data)
    # A partial batch at the end of a non-active segment is corruption here, as in Kafka's cleaner.
    scan = scan_segment(data, path, hash_keys=hash_keys, verify_crc=verify_crc)
    _check_batch_sizes(spec, path, scan.batches)
    check_structure(spec, seg, path, scan.batches, epochs)
    return scan


def check_structure(spec: GroupSpec, seg: SourceSegment, path: str, batches,
                    epochs: list[SegmentEpochs] | None = None) -> None:  # fmt: skip
    """The segment's place in its log (log_structure.py): its offsets against its base, each
    other and the next segment's base, and its `.index` entries against its batches (the index
    is read here: a missing one is rebuilt by the driver before a round). Raises
    `LogStructureError`."""
    nxt = seg.next_base_offset
    check_segment_offsets(path, seg.base_offset, batches, nxt, None if nxt is None else spec.segment_path(nxt))
    base = seg.base_offset
    for suffix, read, check in ((".index", read_offset_index, check_index_entries),
                                (".timeindex", read_time_index, check_time_index_entries)):  # fmt: skip
        index_path = spec.segment_path(base, suffix)
        try:
            data = read_small(spec.storage, index_path)  # plain os calls on a local disk
        except FileNotFoundError:
            continue
        check(index_path, path, base, read(data, base), batches)
    if epochs is not None:
        epochs.append(segment_epochs(path, seg.base_offset, batches))


def check_partition_epochs(specs: list[GroupSpec], epochs: list[SegmentEpochs]) -> None:
    """Leader epochs of all the partition's segments (`epochs`, from its scan) in order, and
    consistent with its `leader-epoch-checkpoint` when it has one (LogStructureError)."""
    path = specs[0].leader_epoch_checkpoint if specs else None
    entries = parse_leader_epoch_checkpoint(specs[0].storage.read_bytes(path), path) if path else None
    check_leader_epochs(epochs, entries, path or "leader-epoch-checkpoint")


def aborted_batches(scan: SegmentScan, aborted: tuple[AbortedTxn, ...]) -> np.ndarray:
    """Per batch: True for transactional data batches inside an aborted transaction's range."""
    b = scan.batches
    flags = b.attributes.astype(np.int64)
    candidates = np.flatnonzero((flags & fb.TRANSACTIONAL_MASK != 0) & (flags & fb.CONTROL_MASK == 0))
    out = np.zeros(len(b.position), dtype=bool)
    if not aborted or not len(candidates):
        return out
    by_pid: dict[int, list[AbortedTxn]] = {}
    for txn in aborted:
        by_pid.setdefault(txn.producer_id, []).append(txn)
    for i in candidates:
        for txn in by_pid.get(int(b.producer_id[i]), ()):
            if txn.first_offset <= b.base_offset[i] <= txn.last_offset:
                out[i] = True
                break
    return out


class ScanCache:
    """The `SegmentScan`s of a whole-partition task's scan phase, kept for its rewrite phase so
    that each segment is CRC-checked, decompressed and walked once instead of twice.

    A segment read from a local disk into task memory is kept without its bytes (`reread`): the
    rewrite reads it again (`needs_read`, then `take(..., data)`), which on a local disk costs
    less than holding every segment of the partition in fresh memory at once (the first task of
    each worker paid ~0.7 GB of page faults for it, BENCHMARKS.md); its decompressed records
    and columns stay. Memory-mapped segments and those of object stores are kept whole.

    Bounded: a scan is kept only while the kept scans' own memory (decompressed `side` buffers,
    record and batch columns, and the segment bytes when kept and not memory-mapped) stays within
    `max_bytes`; the segments that do not fit are read and walked again by the rewrite, as
    without a cache. `take` hands a scan over once (the rewrite drops it after its segment), so
    the memory held only shrinks during the rewrite."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0
        self._scans: dict[tuple[int, int], tuple[SegmentScan, int]] = {}
        self.hits = self.misses = 0

    @staticmethod
    def footprint(scan: SegmentScan, with_file: bool = True) -> int:
        n = scan.side.nbytes
        if with_file and not is_mapped(scan.file):  # page cache, not task memory, when mapped
            n += scan.file.nbytes
        for cols in (scan.records, scan.batches):
            values = (getattr(cols, f) for f in cols.__slots__)
            n += sum(v.nbytes for v in values if isinstance(v, np.ndarray))
        return n

    def offer(self, group_id: int, base_offset: int, scan: SegmentScan, reread: bool = False) -> bool:
        """Keep `scan` (without its segment bytes when `reread` and they are not mapped) if it
        fits; True when kept."""
        drop = reread and not is_mapped(scan.file)
        size = self.footprint(scan, with_file=not drop)
        if self.held + size > self.max_bytes:
            return False
        # Without the packed keys (the map has their ids); without the bytes when `drop`, their
        # length standing in for them (SegmentScan.split must not change).
        file = _Absent(len(scan.file)) if drop else scan.file
        scan = SegmentScan(scan.path, file, scan.side, scan.batches, scan.records)
        self._scans[(group_id, base_offset)] = (scan, size)
        self.held += size
        return True

    def needs_read(self, group_id: int, base_offset: int) -> bool:
        """Whether the rewrite must read the segment's bytes (not kept, or kept without them)."""
        got = self._scans.get((group_id, base_offset))
        return got is None or isinstance(got[0].file, _Absent)

    def take(self, group_id: int, base_offset: int, data: np.ndarray | None = None) -> SegmentScan | None:
        """The kept scan (None when not kept); `data`: the segment's bytes read again, for a scan
        kept without them (same length, else CorruptRecordError)."""
        got = self._scans.pop((group_id, base_offset), None)
        if got is None:
            self.misses += 1
            return None
        self.hits += 1
        self.held -= got[1]
        scan = got[0]
        if isinstance(scan.file, _Absent):
            if data is None or len(data) != len(scan.file):
                raise CorruptRecordError(f"segment changed size between the scan and the rewrite "
                                         f"({len(scan.file)} -> {None if data is None else len(data)} bytes)",
                                         path=scan.path)  # fmt: skip
            scan = SegmentScan(scan.path, data, scan.side, scan.batches, scan.records)
        return scan

    def clear(self) -> None:
        self._scans.clear()
        self.held = 0


class _Absent:
    """Stands for segment bytes a `ScanCache` did not keep: only their length."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def map_masks(spec: GroupSpec, scan: SegmentScan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(control, usable, dirty) per record: in a control batch; usable records build the offset
    map (keyed, not in a control batch, not in an aborted transaction); dirty ones are usable and
    lie in [first dirty offset, upper bound)."""
    rec = scan.records
    control = (scan.batches.attributes.astype(np.int64) & fb.CONTROL_MASK) != 0
    excluded = control | aborted_batches(scan, spec.aborted_txns)
    usable = (rec.key_len >= 0) & ~excluded[rec.batch_index]
    dirty = usable & (rec.offset >= spec.first_dirty_offset) & (rec.offset < spec.upper_bound)
    return control[rec.batch_index], usable, dirty


def segment_producers(spec: GroupSpec, base_offset: int,
                      epochs: list[SegmentEpochs] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """Producer batch headers of a segment read for producer state only (above the cleanable
    range; the active one may end in a partial batch after a broker crash: not our business).
    Its place in the log is checked as a source segment's is (`check_structure`)."""
    path = spec.segment_path(base_offset)
    cols = scan_batches(np.frombuffer(spec.storage.read_bytes(path), dtype=np.uint8))
    seg = next((s for s in spec.tail_segments if s.base_offset == base_offset), None)
    if seg is not None:
        check_structure(spec, seg, path, cols, epochs)
    return producer_batches(cols)


def tail_producers(spec: GroupSpec, epochs: list[SegmentEpochs] | None = None) -> list[dict[str, np.ndarray]]:
    """Producer batch headers of the group's `tail_segments`."""
    return [segment_producers(spec, seg.base_offset, epochs) for seg in spec.tail_segments]


class PartitionMap:
    """The offset map of a whole partition built in one task (an `OffsetMap`): a `KeyTable` over
    the usable records of all its groups. The key ids of segments whose scan the task keeps for
    the rewrite are kept too, so those records are not hashed a second time."""

    hashes_keys = True  # the segments it did not keep are looked up by key
    verified = True  # scan_partition read every segment first

    def __init__(self, expected_keys: int = 0) -> None:
        self.table = KeyTable(expected_keys)
        self._ids: dict[tuple[int, int], np.ndarray] = {}

    def add(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray:
        """Add the segment's records; returns their key ids (for `keep_ids`, `latest`)."""
        _, usable, dirty = map_masks(spec, scan)
        return self._assign(scan, usable, dirty)

    def keep_ids(self, spec: GroupSpec, seg: SourceSegment, ids: np.ndarray) -> None:
        """Hold the ids `add` gave the segment for its rewrite (`found`), which then hashes none."""
        small = len(self.table) + self.table.regions < 2**31  # 4 bytes a record while they fit
        self._ids[(spec.group_id, seg.base_offset)] = ids.astype(np.int32) if small else ids

    def take_ids(self, spec: GroupSpec, seg: SourceSegment) -> np.ndarray:
        """The ids `keep_ids` held for the segment (given up)."""
        return self._ids.pop((spec.group_id, seg.base_offset))

    def latest(self, ids: np.ndarray) -> np.ndarray:
        """map.get(key) per record from its key id (-1: no id)."""
        return np.where(ids >= 0, self.table.latest_of(np.maximum(ids, 0)), -1)

    def _assign(self, scan: SegmentScan, usable: np.ndarray, dirty: np.ndarray) -> np.ndarray:
        r = scan.records
        return self.table.assign(scan.file, scan.side, scan.split, r.key_pos, r.key_len, usable, dirty, r.offset,
                                 scan.keys)  # fmt: skip

    def found(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray:
        ids = self._ids.pop((spec.group_id, seg.base_offset), None)
        if ids is None:  # not kept: look the keys up (never adds one)
            none = np.zeros(len(scan.records.offset), dtype=bool)
            ids = self._assign(scan, none, none)
        return self.latest(ids)


class Unmapped:
    """The offset map of a partition that is only erased (`GroupSpec.erase_only`): no key is
    mapped (every answer -1), so its scan hashes and stores no key; `ErasingMap` adds the erasing."""

    hashes_keys = False
    verified = True  # scan_partition read every segment first

    def add(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray:
        return np.full(len(scan.records.offset), -1, np.int64)

    def keep_ids(self, spec: GroupSpec, seg: SourceSegment, ids: np.ndarray) -> None:
        pass

    def latest(self, ids: np.ndarray) -> np.ndarray:
        return np.full(len(ids), -1, np.int64)

    def found(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray:
        return np.full(len(scan.records.offset), -1, np.int64)


def _read_ahead(specs: list[GroupSpec], todo: list[tuple[GroupSpec, SourceSegment]]) -> ReadAhead:
    """The bytes of the (spec, segment)s `todo`, in order, each read while the previous is worked on."""
    storage, mode = specs[0].storage, specs[0].read_mode
    return ReadAhead(lambda path: read_segment_bytes(storage, path, mode),
                     [spec.segment_path(seg.base_offset) for spec, seg in todo])  # fmt: skip


def scan_partition(specs: list[GroupSpec], cache: ScanCache | None = None,
                   keep_ids: bool = False, epochs: list[SegmentEpochs] | None = None,
                   ) -> tuple[PartitionMap | Unmapped, list[dict]]:  # fmt: skip
    """The whole-partition scan: the offset map of all `specs` (one partition, log order) and the
    producer batch headers (including those of the tail segments). Every segment's place in the
    log is checked as it is read (`check_structure`); `epochs` receives its leader-epoch runs.

    Newest segment first: once a segment is added, the latest offset of each of its keys is
    final (any later record of the key was added before it; earlier ones have lower offsets), so
    the records the rewrite may keep are known, and a kept scan holds only their decompressed
    bytes (`sidepack`); the decompressed records of the others are dropped right away.
    `keep_ids`: hold every segment's key ids (`PartitionMap.take_ids`), kept scan or not."""
    # Sizes the map's cache-sized regions; a guess (one key per 256 bytes of log) is enough.
    size = sum(seg.size for spec in specs for seg in spec.segments)
    # A partition only erased needs no offset map, except where the ids are shipped (`keep_ids`:
    # a range's scan exports its key table).
    unmapped = not keep_ids and all(spec.erase_only for spec in specs)
    pmap = Unmapped() if unmapped else PartitionMap(size // 256)
    todo = [(spec, seg) for spec in specs for seg in spec.segments][::-1]
    headers = []
    with _read_ahead(specs, todo) as ahead:
        for i, (spec, seg) in enumerate(todo):
            scan = _read_segment(spec, seg, ahead.get(i), pmap.hashes_keys, epochs=epochs)
            headers.append(producer_batches(scan.batches))
            ids = pmap.add(spec, seg, scan)
            if keep_ids:
                pmap.keep_ids(spec, seg, ids)
            if cache is not None:
                # Only a decompressed side can be packed: uncompressed segments skip the decision.
                # An erasing rewrite reads every record's key (ErasingMap): nothing packed away.
                packable = len(scan.side) and spec.erase is None
                packed = pack_side(scan, may_keep(spec, scan, pmap.latest(ids))) if packable else None
                if cache.offer(spec.group_id, seg.base_offset, packed or scan, spec.storage.is_local):
                    pmap.keep_ids(spec, seg, ids)
                del packed
            del scan  # its bytes' buffer is free for the read after next: two buffers in use, not three
    return pmap, [p for spec in specs for p in tail_producers(spec, epochs)] + headers[::-1]


def producer_batches(scan_batches_cols, start: int = 0, end: int | None = None) -> dict[str, np.ndarray]:
    """Header columns of the batches written by a producer (id >= 0): producer state input."""
    b = scan_batches_cols
    sel = np.flatnonzero(b.producer_id >= 0)
    return {
        "producer_id": b.producer_id[sel].astype(np.int64),
        "producer_epoch": b.producer_epoch[sel].astype(np.int32),
        "base_offset": b.base_offset[sel].astype(np.int64),
        "last_offset": b.last_offset[sel].astype(np.int64),
        "attributes": b.attributes[sel].astype(np.int32),
        "records_count": b.records_count[sel].astype(np.int32),
        "max_timestamp": b.max_timestamp[sel].astype(np.int64),
    }


# --- deciding --------------------------------------------------------------------------------


class OffsetMap(Protocol):
    """What the rewrite asks of the offset map: for every record of a segment, the latest offset
    of its key (`found`; -1 when the key is absent from the map or the record has no key).
    `keep_records` keeps a keyed record below the bound iff its offset >= found. `hashes_keys`:
    whether `found` reads the scan's key hashes (a rewrite's scan then hashes the keys);
    `verified`: this round's scan checked every segment's CRCs before the map was built (the
    rewrite's scan then does not again)."""

    hashes_keys: bool
    verified: bool

    def found(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray: ...


@dataclass
class _BatchView:
    """The fields of one batch that the retention rules read (duck-typed like retention.BatchInfo)."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    is_transactional: bool
    is_control: bool
    records_count: int
    magic: int
    delete_horizon_ms: int | None
    max_timestamp: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def _batch_view(scan: SegmentScan, i: int, n_records: int) -> _BatchView:
    b = scan.batches
    attrs = int(b.attributes[i])
    magic = int(b.magic[i])
    has_horizon = magic >= 2 and bool(attrs & fb.DELETE_HORIZON_MASK)
    return _BatchView(
        base_offset=int(b.base_offset[i]),
        last_offset=int(b.last_offset[i]),
        producer_id=int(b.producer_id[i]),
        producer_epoch=int(b.producer_epoch[i]),
        is_transactional=magic >= 2 and bool(attrs & fb.TRANSACTIONAL_MASK),
        is_control=magic >= 2 and bool(attrs & fb.CONTROL_MASK),
        records_count=n_records,
        magic=magic,
        delete_horizon_ms=int(b.base_timestamp[i]) if has_horizon else None,
        max_timestamp=int(b.max_timestamp[i]),
    )


def may_keep(spec: GroupSpec, scan: SegmentScan, found: np.ndarray) -> np.ndarray:
    """Per record: False where `keep_records` drops it whatever else the rewrite decides (an older
    record of a key, or no key, below the bound): `keep_records` with every delete retained, the
    one decision a record's tombstone or horizon can only narrow. What the batch-level rules add
    (transactions, control batches) only concerns batches `sidepack` does not pack."""
    rec = scan.records
    return keep_records(rec.offset, rec.key_len, rec.value_len, found, spec.upper_bound - 1, True)[0]


def keep_records(
    offsets: np.ndarray,
    key_len: np.ndarray,
    value_len: np.ndarray,
    found: np.ndarray,
    map_latest_offset: int,
    retain_deletes: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """`shouldRetainRecord` over the records of one data batch, vectorized.

    Returns (keep, invalid): beyond the map -> keep; no key -> drop and count invalid; else keep
    iff offset >= map[key] and (has value or deletes are still retained).
    """
    beyond = offsets > map_latest_offset
    keyed = key_len >= 0
    latest = offsets >= found
    has_value = value_len >= 0
    keep = beyond | (keyed & latest & (has_value | retain_deletes))
    invalid = ~beyond & ~keyed
    return keep, invalid


# --- writing ---------------------------------------------------------------------------------
#
# Memory per task (one rewrite unit): the cleaned `.log` is streamed to `<base>.log.cleaned` as
# batches are produced, so what a task holds at once is bounded by ONE source segment, not by the
# output group: the segment itself (a pooled buffer read with O_DIRECT, or memory-mapped with
# `--read-mode mmap` or below 8 MiB; a bytes copy on object stores), `SegmentScan.side` (the
# decompressed records of its compressed batches), ~45 B of record columns + ~10 B of keep/found
# arrays per record of the segment, the re-encoded records of its rebuilt batches (<= their
# uncompressed size + 14 B per record) plus their compressed copies, and the writer's two 8 MiB
# staging buffers (on object stores up to `_LogWriter.FLUSH_BYTES` of pending slices instead);
# plus 32 B per output batch of the group
# for the index columns. Roughly: segment size + 2 x its decompressed size + 60 B x its records,
# whatever the group size.


class _LogWriter:
    """`<base>.log.cleaned`, written as it is produced and made durable on `close` (the same
    guarantees as `Storage.write_durable`: local -> fsync the file and its directory). Local files
    go through `segment_io.SegmentWriter` (chunks copied into staging buffers at once); elsewhere
    chunks are gathered up to FLUSH_BYTES and streamed."""

    FLUSH_BYTES = 4 << 20

    def __init__(self, storage: Storage, path: str, write_mode: str = "direct") -> None:
        self.storage, self.path = storage, path
        self._local = SegmentWriter(path, write_mode) if storage.is_local else None
        if self._local is None:  # compression=None: the default would guess a codec from the file extension
            self._file = storage.fs.open_output_stream(path, compression=None)
        self._pending: list = []
        self._pending_bytes = 0

    def write(self, chunk) -> None:
        if self._local is not None:
            self._local.write(chunk)
            return
        self._pending.append(chunk)
        self._pending_bytes += len(chunk)
        if self._pending_bytes >= self.FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        chunks, self._pending, self._pending_bytes = self._pending, [], 0
        throttle.acquire(sum(len(c) for c in chunks))  # --io-max-bytes-per-second
        for c in chunks:
            self._file.write(c)

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
            return
        self.flush()
        self._file.close()


class _Discard:
    """The writer of a dry run: the batches are built and counted (`_Output.size`), not written."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, chunk) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class _Output:
    """The cleaned segment being written: batch bytes go to the `.log.cleaned` writer at once; only
    the columns the indexes are built from stay in memory, 8 bytes per value: the batches
    appended one run at a time in array('q')s, those appended as arrays (`append_columns`: a
    segment's converted legacy messages, up to millions) kept as such (`columns` joins them)."""

    writer: _LogWriter | None = None
    positions: array = field(default_factory=lambda: array("q"))
    sizes: array = field(default_factory=lambda: array("q"))
    last_offsets: array = field(default_factory=lambda: array("q"))
    max_timestamps: array = field(default_factory=lambda: array("q"))
    size: int = 0
    records: int = 0
    batches: int = 0
    _done: list[tuple[np.ndarray, ...]] = field(default_factory=list)  # column chunks before the arrays

    def open(self, spec: GroupSpec, discard: bool = False) -> None:
        if self.writer is None:
            path = spec.segment_path(spec.new_base, ".log") + CLEANED
            discard = discard or spec.dry_run
            self.writer = _Discard(path) if discard else _LogWriter(spec.storage, path, spec.write_mode)

    def append_run(self, chunks, batches: list[tuple[int, int, int, int]]) -> None:
        """Consecutive batches, in order, as byte chunks that are not copied (slices of the source
        segment, the kernel's output, freshly built bytes); `batches`: (size, last offset, max
        timestamp, records) of each."""
        for c in chunks:
            self.writer.write(c)
        sizes, last_offsets, max_timestamps, records = zip(*batches, strict=True)
        ends = list(itertools.accumulate(sizes, initial=self.size))
        self.positions.extend(ends[:-1])
        self.sizes.extend(sizes)
        self.last_offsets.extend(last_offsets)
        self.max_timestamps.extend(max_timestamps)
        self.size = ends[-1]
        self.records += sum(records)
        self.batches += len(sizes)

    def append_columns(self, chunk, sizes: np.ndarray, last_offsets: np.ndarray, max_timestamps: np.ndarray,
                       records: int) -> None:  # fmt: skip
        """`append_run` for many batches in one chunk, their columns as arrays."""
        self.writer.write(chunk)
        self._seal()
        ends = self.size + np.cumsum(sizes, dtype=np.int64)
        i64 = np.int64
        self._done.append((ends - sizes, np.asarray(sizes, i64), np.asarray(last_offsets, i64),
                           np.asarray(max_timestamps, i64)))  # fmt: skip
        self.size = int(ends[-1])
        self.records += records
        self.batches += len(sizes)

    def _seal(self) -> None:
        cols = (self.positions, self.sizes, self.last_offsets, self.max_timestamps)
        if len(self.sizes):
            self._done.append(tuple(np.frombuffer(c, dtype=np.int64) for c in cols))
            self.positions, self.sizes, self.last_offsets, self.max_timestamps = (array("q") for _ in cols)

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(positions, sizes, last offsets, max timestamps) of every batch written."""
        self._seal()
        if len(self._done) > 1:
            self._done = [tuple(np.concatenate(c) for c in zip(*self._done, strict=True))]
        return self._done[0] if self._done else tuple(np.empty(0, np.int64) for _ in range(4))


class _Runs:
    """The batches of one segment on their way to an `_Output`, in log order, a run at a time:
    consecutive verbatim batches go out as one slice of the source segment, consecutive built
    ones with their small chunks joined, so the writer and the index columns are called per run,
    not per batch (a segment rebuilds ~1,000 batches)."""

    # A bigger chunk (an uncompressed rebuilt payload) is written as it is, not copied once more.
    JOIN_MAX = 64 << 10

    def __init__(self, out: _Output, source: memoryview) -> None:
        self.out, self.source = out, source
        self.start = self.end = -1  # the verbatim run is source[start:end]
        self.built: list = []  # the built run's chunks
        self.batches: list[tuple[int, int, int, int]] = []

    def verbatim(self, pos: int, size: int, last_offset: int, max_timestamp: int, records: int) -> None:
        if self.built or pos != self.end:
            self.flush()
            self.start = pos
        self.end = pos + size
        self.batches.append((size, last_offset, max_timestamp, records))

    def built_batch(self, chunks, last_offset: int, max_timestamp: int, records: int) -> None:
        if self.end >= 0:
            self.flush()
        self.built.extend(chunks)
        self.batches.append((sum(len(c) for c in chunks), last_offset, max_timestamp, records))

    def flush(self) -> None:
        if self.end >= 0:
            self.out.append_run((self.source[self.start : self.end],), self.batches)
        elif self.batches:
            self.out.append_run(_joined(self.built, self.JOIN_MAX), self.batches)
        self.start = self.end = -1
        self.built, self.batches = [], []


def _joined(chunks: list, most: int) -> list:
    """`chunks` with each stretch of chunks smaller than `most` bytes joined into one."""
    out, small = [], []
    for c in chunks:
        if len(c) < most:
            small.append(c)
            continue
        if small:
            out.append(b"".join(small))
            small = []
        out.append(c)
    if small:
        out.append(b"".join(small))
    return out


@dataclass
class _Stats:
    bytes_read: int = 0
    records_read: int = 0
    batches_read: int = 0
    invalid_records: int = 0


def _rebuild(scan: SegmentScan, i: int, view: _BatchView, kept_offsets: set[int], horizon: int | None) -> bytes:
    """`MemoryRecordsBuilder` over the retained records via `build_batch`
    (docs/kafka-rules.md#writing-retained-batches) for the rare v2 batch whose header keys are not valid UTF-8
    (see format/rebuild.py); every other v2 batch goes through `_rebuild_v2`, legacy wrappers through
    `_rebuild_wrappers`."""
    b = scan.batches
    pos, size = int(b.position[i]), int(b.size[i])
    attrs = int(b.attributes[i])
    ts_type = (attrs & fb.TIMESTAMP_TYPE_MASK) >> 3
    raw = scan.file[pos : pos + size].tobytes()
    records = [r for r in fb.RecordBatch(raw, pos, scan.path).records() if r.offset in kept_offsets]
    return fb.build_batch(
        records,
        base_offset=view.base_offset,
        codec=attrs & fb.COMPRESSION_CODEC_MASK,
        timestamp_type=ts_type,
        producer_id=view.producer_id,
        producer_epoch=view.producer_epoch,
        base_sequence=int(b.base_sequence[i]),
        is_transactional=view.is_transactional,
        is_control=view.is_control,
        partition_leader_epoch=int(b.partition_leader_epoch[i]),
        delete_horizon_ms=horizon if horizon is not None else view.delete_horizon_ms,
        last_offset_delta=view.last_offset - view.base_offset,
        log_append_time=view.max_timestamp if ts_type == fb.LOG_APPEND_TIME else None,
    )


def _control_type(scan: SegmentScan, first: int, last: int) -> int | None:
    if last <= first:
        return None
    return fb.parse_control_type(scan.key(first))


# What _clean_segment decided for each batch (an int8 per batch), emitted in log order once the
# segment's v2 rebuilds and legacy conversions are done.
_DROP, _COPY, _REBUILD_V2, _REBUILD_WRAPPER, _EMPTY, _CONVERT = range(6)
_NO_NEW_HORIZON = -1


def _last_data_batches(last_records: dict[int, LastRecord], producer_id: np.ndarray,
                       last_offset: np.ndarray) -> np.ndarray:  # fmt: skip
    """`is_last_of_producer` for data batches, vectorized: the batch holds its producer's last
    data offset."""
    out = np.zeros(len(producer_id), dtype=bool)
    pairs = sorted((pid, r.last_data_offset) for pid, r in last_records.items() if r.last_data_offset is not None)
    if not pairs:
        return out
    pids = np.array([p for p, _ in pairs], dtype=np.int64)
    last = np.array([o for _, o in pairs], dtype=np.int64)
    j = np.minimum(np.searchsorted(pids, producer_id), len(pids) - 1)
    return (pids[j] == producer_id) & (last[j] == last_offset)


def _decide_plain(spec: GroupSpec, b, count: np.ndarray, n_keep: np.ndarray, n_tomb: np.ndarray,
                  has_horizon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """`checkBatchRetention` + `filterTo`'s branch for every v2 data batch outside transactions
    at once: (kind, needs a new delete horizon). Such a batch is never discarded (it is not
    aborted data) and never changes the transaction state, so it need not go through the
    per-batch path (`CleanedTransactionMetadata` consumes aborted ranges lazily, by offset)."""
    retain_empty = np.zeros(len(count), dtype=bool)
    if spec.last_records:
        retain_empty |= (b.producer_id >= 0) & _last_data_batches(spec.last_records, b.producer_id, b.last_offset)
    if spec.retain_last_batch_of_round:
        retain_empty |= b.last_offset + 1 == spec.upper_bound
    need_horizon = (n_keep > 0) & (n_tomb > 0) & ~has_horizon
    original = (n_keep == count) & ~need_horizon
    kept_kind = np.where(original, _COPY, _REBUILD_V2)
    empty_kind = np.where(retain_empty, _EMPTY, _DROP)
    return np.where(n_keep > 0, kept_kind, empty_kind).astype(np.int8), need_horizon


def _clean_segment(spec: GroupSpec, seg: SourceSegment, offset_map: OffsetMap, txn: CleanedTransactionMetadata,
                   out: _Output, stats: _Stats, scan: SegmentScan | None = None,
                   data: np.ndarray | None = None) -> None:  # fmt: skip
    """Clean one source segment into `out`: from its kept `scan`, else from `data` (its bytes,
    read ahead) or read now."""
    if scan is None:
        scan = _read_segment(spec, seg, data, offset_map.hashes_keys, verify_crc=not offset_map.verified)
    b, rec = scan.batches, scan.records
    nb = len(b.position)
    found = offset_map.found(spec, seg, scan)
    # An erasing-only group with nothing to erase is left as it is: nothing written.
    out.open(spec, discard=spec.erase_only and not bool((found == ERASED).any()))
    if spec.erase_only:
        return _erase_segment(spec, seg, scan, found, out, stats)
    # records are in batch order: a count per batch, in linear time (a segment of small legacy
    # messages has over a million batches)
    count = np.bincount(rec.batch_index, minlength=nb)
    bounds = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(count, out=bounds[1:])
    retain_legacy = retain_legacy_deletes(seg.mtime_ns // 1_000_000, spec.legacy_delete_horizon_ms)
    stats.bytes_read += seg.size
    stats.batches_read += nb
    # keep_records over every record of the segment at once; batches whose records are all kept
    # (control) or all dropped (discard) are overridden below.
    attrs = b.attributes.astype(np.int64)
    v2 = b.magic >= 2
    has_horizon = v2 & ((attrs & fb.DELETE_HORIZON_MASK) != 0)
    retain_deletes = np.where(v2, ~has_horizon | (spec.now_ms < b.base_timestamp), retain_legacy)
    keep, invalid = keep_records(rec.offset, rec.key_len, rec.value_len, found, spec.upper_bound - 1,
                                 retain_deletes[rec.batch_index])  # fmt: skip
    bi = rec.batch_index
    n_keep = np.bincount(bi[keep], minlength=nb)
    n_invalid = np.bincount(bi[invalid], minlength=nb)
    n_tomb = np.bincount(bi[keep & (rec.value_len < 0)], minlength=nb)
    plain = v2 & ((attrs & (fb.TRANSACTIONAL_MASK | fb.CONTROL_MASK)) == 0)
    kind, need_horizon = _decide_plain(spec, b, count, n_keep, n_tomb, has_horizon)
    # An uncompressed v0/v1 entry is a batch of one message outside transactions: the same
    # branch, except that a kept one is re-encoded as v2 (KIP-724), never copied, and one to be
    # retained empty is Kafka's IllegalStateException, which the per-batch path raises.
    messages = ~v2 & ((attrs & fb.COMPRESSION_CODEC_MASK) == 0)
    kind[messages & (n_keep > 0)] = _CONVERT
    fast = plain | (messages & (kind != _EMPTY))
    kind[~fast] = _DROP
    kept = np.where(fast, n_keep, 0)
    stats.records_read += int(count[fast].sum())
    stats.invalid_records += int(n_invalid[fast].sum())
    new_horizon = delete_horizon_ms(spec.now_ms, spec.delete_retention_ms)
    horizon = np.where(need_horizon, new_horizon, _NO_NEW_HORIZON)
    for i in np.flatnonzero(~fast).tolist():
        _decide_one(spec, scan, i, int(bounds[i]), int(bounds[i + 1]), txn, keep, int(n_keep[i]), int(n_tomb[i]),
                    int(n_invalid[i]), new_horizon, kind, kept, horizon, stats)  # fmt: skip
    _emit_segment(scan, kind, kept, horizon, keep, bounds, out)


def _decide_erase_only(b, count: np.ndarray, n_keep: np.ndarray, retain_empty: np.ndarray) -> np.ndarray:
    """Erasing without compaction, for every batch of a segment: one with nothing erased is copied
    byte for byte (control batches always), one with some records erased is rebuilt with the rest
    (its delete horizon kept; a v0/v1 wrapper's rest as one v2 batch, KIP-724), one with all
    erased is dropped unless it must stay as an empty batch (`retain_empty`, v2 only)."""
    v2 = b.magic >= 2
    control = v2 & ((b.attributes.astype(np.int64) & fb.CONTROL_MASK) != 0)
    partial = np.where(v2, _REBUILD_V2, _REBUILD_WRAPPER)
    emptied = np.where(retain_empty & v2, _EMPTY, _DROP)
    kind = np.where(n_keep == count, _COPY, np.where(n_keep > 0, partial, emptied)).astype(np.int8)
    kind[control] = _COPY
    return kind


def _erase_segment(spec: GroupSpec, seg: SourceSegment, scan: SegmentScan, found: np.ndarray, out: _Output,
                   stats: _Stats) -> None:  # fmt: skip
    """An erasing-only group's segment: only the records of listed keys go (`_decide_erase_only`).
    A batch left empty stays, as an empty batch, where Kafka's rules keep one: the last data batch
    of its producer (producer state), and the log's last batch, so that the log end offset a
    broker recovers from the segment does not move."""
    b, rec = scan.batches, scan.records
    nb = len(b.position)
    count = np.bincount(rec.batch_index, minlength=nb)
    bounds = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(count, out=bounds[1:])
    keep = found != ERASED
    n_keep = np.bincount(rec.batch_index[keep], minlength=nb)
    retain = np.zeros(nb, dtype=bool)
    if spec.last_records:
        retain |= (b.producer_id >= 0) & _last_data_batches(spec.last_records, b.producer_id, b.last_offset)
    if seg.next_base_offset is None and nb:  # the log's last batch holds the log end offset
        retain[-1] = True
        if b.magic[-1] < 2 and n_keep[-1] == 0:
            raise EraseError("erasing the log's last message, a v0/v1 one, would move the log end offset",
                             path=spec.segment_path(seg.base_offset), position=int(b.position[-1]),
                             offset=int(b.last_offset[-1]))  # fmt: skip
    kind = _decide_erase_only(b, count, n_keep, retain)
    stats.bytes_read += seg.size
    stats.batches_read += nb
    stats.records_read += int(count.sum())
    kept = np.where(kind == _COPY, count, n_keep)
    _emit_segment(scan, kind, kept, np.full(nb, _NO_NEW_HORIZON, np.int64), keep, bounds, out)


def _erase_only_txn_entries(spec: GroupSpec, seg: SourceSegment) -> list[AbortedTxn]:
    """The segment's own `.txnindex` entries (those whose ABORT marker it holds): an erasing-only
    rewrite keeps every marker where it is."""
    end = seg.next_base_offset if seg.next_base_offset is not None else 2**63
    return [a for a in spec.aborted_txns if seg.base_offset <= a.last_offset < end]


def _decide_one(spec: GroupSpec, scan: SegmentScan, i: int, first: int, last: int, txn: CleanedTransactionMetadata,
                keep: np.ndarray, n_keep: int, n_tomb: int, n_invalid: int, new_horizon: int, kind: np.ndarray,
                kept: np.ndarray, horizon: np.ndarray, stats: _Stats) -> None:  # fmt: skip
    """The per-batch path (transactional, control and legacy batches), in log order: the
    transaction state moves here. Fills kind/kept/horizon[i]; overrides `keep` for the records of
    discarded batches (all dropped) and of control batches (all kept)."""
    view = _batch_view(scan, i, last - first)
    decision = check_batch_retention(
        view, txn,
        control_type=_control_type(scan, first, last) if view.is_control else None,
        last_records_of_active_producers=spec.last_records,
        upper_bound_offset=spec.upper_bound,
        current_time_ms=spec.now_ms,
        retain_last_batch_of_round=spec.retain_last_batch_of_round,
    )  # fmt: skip
    if decision.retention is BatchRetention.DELETE:
        return  # dropped unread: its records are not counted (CleanerStats.messagesRead)
    stats.records_read += last - first
    if decision.discard_batch_records:
        n_kept, tombstones = 0, False
        keep[first:last] = False
    elif view.is_control:
        n_kept, tombstones = last - first, False
        keep[first:last] = True
    else:
        n_kept, tombstones = n_keep, n_tomb > 0
        stats.invalid_records += n_invalid
    marker = decision.contains_marker_for_empty_txn
    need_horizon = n_kept > 0 and needs_delete_horizon(view, tombstones, marker)
    output = filter_batch_output(view, decision.retention, n_kept, need_horizon)
    kept[i] = n_kept
    horizon[i] = new_horizon if need_horizon else _NO_NEW_HORIZON
    if output is BatchOutput.COPY_ORIGINAL:
        kind[i] = _COPY
    elif output is BatchOutput.REBUILD:
        kind[i] = _REBUILD_V2 if view.magic >= 2 else _REBUILD_WRAPPER
    elif output is BatchOutput.EMPTY_HEADER:
        kind[i] = _EMPTY


def _emit_segment(scan: SegmentScan, kind: np.ndarray, kept: np.ndarray, horizon: np.ndarray, keep: np.ndarray,
                  bounds: np.ndarray, out: _Output) -> None:  # fmt: skip
    """Write the batches of one segment in log order (`_Runs`): every v2 rebuild of the segment
    re-encoded by one kernel call (format/rebuild.py), every kept legacy message by another
    (format/upconvert.py), whose consecutive batches go out as one chunk."""
    b = scan.batches
    rebuilt = _rebuild_v2(scan, np.flatnonzero(kind == _REBUILD_V2), kept, horizon, keep, bounds)
    rebuilt.update(_rebuild_wrappers(scan, np.flatnonzero(kind == _REBUILD_WRAPPER), kept, horizon, keep, bounds))
    converted = _convert(scan, np.flatnonzero(kind == _CONVERT), horizon, bounds)
    mv = memoryview(scan.file)
    runs = _Runs(out, mv)
    emitted = np.flatnonzero(kind != _DROP)
    is_conv = kind[emitted] == _CONVERT
    cuts = [0, *(np.flatnonzero(is_conv[1:] != is_conv[:-1]) + 1).tolist(), len(emitted)]
    for lo, hi in itertools.pairwise(cuts):
        if lo < hi and is_conv[lo]:
            runs.flush()
            converted.emit(out, emitted[lo:hi], b.last_offset)
        elif lo < hi:
            _emit_batches(scan, emitted[lo:hi], kind, kept, horizon, keep, bounds, rebuilt, runs)
    runs.flush()
    out.writer.flush()  # nothing of this segment's buffers stays referenced after it


def _emit_batches(scan: SegmentScan, batches: np.ndarray, kind: np.ndarray, kept: np.ndarray, horizon: np.ndarray,
                  keep: np.ndarray, bounds: np.ndarray, rebuilt: dict, runs: _Runs) -> None:  # fmt: skip
    """The batches `batches` (none converted), one at a time."""
    b = scan.batches
    mv = runs.source
    cols = [c[batches].tolist() for c in (kind, kept, b.position, b.size, b.last_offset, b.max_timestamp)]
    for i, k, n_kept, pos, size, last_offset, max_ts in zip(batches.tolist(), *cols, strict=True):
        if k == _COPY:
            runs.verbatim(pos, size, last_offset, max_ts, n_kept)
        elif k == _REBUILD_V2 and i in rebuilt:
            chunks, new_max = rebuilt.pop(i)
            runs.built_batch(chunks, last_offset, new_max, n_kept)
        elif k == _REBUILD_WRAPPER:  # a legacy wrapper's kept messages
            chunks, new_last, new_max = rebuilt.pop(i)
            runs.built_batch(chunks, new_last, new_max, n_kept)
        elif k == _REBUILD_V2:  # the kernel left it to build_batch
            first, last = int(bounds[i]), int(bounds[i + 1])
            view = _batch_view(scan, i, last - first)
            offsets = set(scan.records.offset[first:last][keep[first:last]].tolist())
            new = int(horizon[i])
            data = _rebuild(scan, i, view, offsets, None if new == _NO_NEW_HORIZON else new)
            header = fb.BatchHeader.unpack_from(data)
            runs.built_batch((data,), header.last_offset, header.max_timestamp, n_kept)
        else:
            header = fb.BatchHeader.unpack_from(mv[pos : pos + fb.RECORD_BATCH_OVERHEAD])
            runs.built_batch((fb.build_empty_batch(header),), last_offset, max_ts, 0)


@dataclass
class _Converted:
    """The v2 batches of a segment's kept legacy messages (`upconvert.convert_messages`), batch j
    (of legacy entry idx[j]) at data[ends[j - 1]:ends[j]]."""

    idx: np.ndarray
    data: np.ndarray
    ends: np.ndarray
    max_ts: np.ndarray

    def emit(self, out: _Output, batches: np.ndarray, last_offset: np.ndarray) -> None:
        """Write the consecutive converted batches `batches` (a run of `idx`) as one chunk."""
        lo = int(np.searchsorted(self.idx, batches[0]))
        hi = lo + len(batches)
        start = int(self.ends[lo - 1]) if lo else 0
        sizes = np.diff(self.ends[lo:hi], prepend=start)
        out.append_columns(self.data[start : int(self.ends[hi - 1])], sizes, last_offset[batches],
                           self.max_ts[lo:hi], len(batches))  # fmt: skip


def _convert(scan: SegmentScan, idx: np.ndarray, horizon: np.ndarray, bounds: np.ndarray) -> _Converted:
    """Every kept message of the uncompressed legacy entries `idx` re-encoded as a v2 batch, in
    one kernel call: its one record is record bounds[i] of the scan."""
    if not len(idx):
        return _Converted(idx, np.empty(0, np.uint8), np.empty(0, np.int64), np.empty(0, np.int64))
    b = scan.batches
    log_append = (b.magic[idx] == 1) & ((b.attributes[idx] & fb.TIMESTAMP_TYPE_MASK) != 0)
    data, ends, max_ts = upconvert.convert_messages(scan.file, scan.side, scan.split, bounds[idx], scan.records,
                                                    log_append, horizon[idx])  # fmt: skip
    return _Converted(idx, data, ends, max_ts)


def _rebuild_v2(scan: SegmentScan, idx: np.ndarray, kept: np.ndarray, new_horizon: np.ndarray, keep: np.ndarray,
                bounds: np.ndarray) -> dict[int, tuple]:  # fmt: skip
    """{batch index: ([header, payload], max timestamp)} for the v2 REBUILD batches `idx` of a
    segment, re-encoded in one `rebuild_records` call and sealed together; batches the kernel
    flags are left out (they go through `build_batch`)."""
    if not len(idx):
        return {}
    b, rec = scan.batches, scan.records
    src, start, end = (a[idx] for a in rebuild.record_regions(scan))
    first = bounds[idx]
    count = bounds[idx + 1] - first
    attrs = b.attributes[idx].astype(np.int64)
    old = np.where((attrs & fb.DELETE_HORIZON_MASK) != 0, b.base_timestamp[idx], rebuild.NO_HORIZON)
    horizons = np.where(new_horizon[idx] != _NO_NEW_HORIZON, new_horizon[idx], old).astype(np.int64)
    has_first = count > 0
    expect = np.where(has_first, rec.key_pos[np.where(has_first, first, 0)] if len(rec.key_pos) else -1, -1)
    expect = np.where(has_first & (src == rebuild.SRC_SIDE), expect - scan.split, expect)
    payload, o_start, o_end, new_base, new_max, n_kept, flags = rebuild.rebuild_records(
        scan.file, scan.side, src, start, end, count, keep, first, b.base_timestamp[idx],
        b.timestamp_type[idx], b.max_timestamp[idx], horizons, expect, rec, scan.split, b.base_offset[idx],
    )  # fmt: skip
    wrong = np.flatnonzero(n_kept != kept[idx])
    if len(wrong):  # the kernel walked other records than the scan: never expected
        i = int(idx[wrong[0]])
        raise CorruptRecordError(f"rebuild kept {int(n_kept[wrong[0]])} records, the decision {int(kept[i])}",
                                 path=scan.path, position=int(b.position[i]), offset=int(b.base_offset[i]))  # fmt: skip
    ok = flags == 0
    sel = idx[ok]
    headers = rebuild.headers_for(
        base_offset=b.base_offset[sel], partition_leader_epoch=b.partition_leader_epoch[sel],
        attributes=attrs[ok], last_offset_delta=b.last_offset[sel] - b.base_offset[sel],
        base_timestamp=new_base[ok], max_timestamp=new_max[ok], producer_id=b.producer_id[sel],
        producer_epoch=b.producer_epoch[sel], base_sequence=b.base_sequence[sel], records_count=n_kept[ok],
        horizon=horizons[ok],
    )  # fmt: skip
    sealed = rebuild.seal_all(headers, payload, o_start[ok], o_end[ok], attrs[ok] & fb.COMPRESSION_CODEC_MASK)
    return dict(zip(sel.tolist(), zip(sealed, new_max[ok].tolist())))


def _rebuild_wrappers(scan: SegmentScan, idx: np.ndarray, kept: np.ndarray, new_horizon: np.ndarray,
                      keep: np.ndarray, bounds: np.ndarray) -> dict[int, tuple]:  # fmt: skip
    """{batch index: ([header, payload], last offset, max timestamp)} for the compressed legacy
    wrappers `idx` to rebuild: their kept messages as one v2 batch each with the wrapper's codec
    (what `_rebuild` builds with `build_batch`), encoded in one `upconvert.encode_kept` call."""
    if not len(idx):
        return {}
    b = scan.batches
    attrs = b.attributes[idx].astype(np.int64)
    log_append = (b.magic[idx] == 1) & ((attrs & fb.TIMESTAMP_TYPE_MASK) != 0)
    payload, start, end, base, last, base_ts, max_ts, n_kept = upconvert.encode_kept(
        scan.file, scan.side, scan.split, bounds[idx], bounds[idx + 1] - bounds[idx], keep, scan.records, log_append,
        b.max_timestamp[idx], new_horizon[idx])  # fmt: skip
    wrong = np.flatnonzero(n_kept != kept[idx])
    if len(wrong):  # never expected: the decision counted other records
        i = int(idx[wrong[0]])
        raise CorruptRecordError(f"rebuild kept {int(n_kept[wrong[0]])} records, the decision {int(kept[i])}",
                                 path=scan.path, position=int(b.position[i]), offset=int(b.base_offset[i]))  # fmt: skip
    minus_one = np.full(len(idx), -1, dtype=np.int64)
    codec = attrs & fb.COMPRESSION_CODEC_MASK
    headers = rebuild.headers_for(
        base_offset=base, partition_leader_epoch=minus_one, attributes=codec | np.where(log_append, fb.TIMESTAMP_TYPE_MASK, 0),
        last_offset_delta=last - base, base_timestamp=base_ts, max_timestamp=max_ts, producer_id=minus_one,
        producer_epoch=minus_one, base_sequence=minus_one, records_count=n_kept, horizon=new_horizon[idx],
    )  # fmt: skip
    sealed = rebuild.seal_all(headers, payload, start, end, codec)
    return dict(zip(idx.tolist(), zip(sealed, last.tolist(), max_ts.tolist(), strict=True), strict=True))


def _write_cleaned(spec: GroupSpec, out: _Output, txn_entries: list[AbortedTxn]) -> None:
    storage, base = spec.storage, spec.new_base
    out.open(spec)  # a group always has segments; this only matters for an empty one
    out.writer.close()
    if spec.dry_run:
        return
    offset_index, time_index = build_indexes(
        *out.columns(), base, spec.index_interval_bytes,
    )  # fmt: skip
    files = {".index": offset_index, ".timeindex": time_index}
    if txn_entries:
        files[".txnindex"] = write_txn_index(txn_entries)
    mtime_ns = spec.segments[-1].mtime_ns
    storage.set_mtime(out.writer.path, mtime_ns)
    for suffix, data in files.items():
        path = spec.segment_path(base, suffix) + CLEANED
        storage.write_durable(path, data)
        if suffix != ".txnindex":  # Kafka skips it: docs/kafka-rules.md#cleaned-file-times
            storage.set_mtime(path, mtime_ns)


def rewrite_unit(specs: list[GroupSpec], offset_map: OffsetMap, cache: ScanCache | None = None) -> list[dict]:
    """Clean the groups of one unit in log order; one stats dict per group. `offset_map` answers
    map.get(key) per record (see `OffsetMap`). Segments whose scan `cache` holds (from
    `scan_partition` in the same task) are not walked again; the segment bytes it did not keep
    are read again, one segment ahead."""
    txn = CleanedTransactionMetadata()
    if specs:
        txn.add_aborted(specs[0].aborted_txns)
    if specs and specs[0].erase is not None:  # both paths' maps (PartitionMap, ShippedMap) erase alike
        offset_map = ErasingMap(offset_map, specs[0].erase, specs[0].topic)
    results = []
    todo = [(spec, seg) for spec in specs for seg in spec.segments]
    reading = [cache is None or cache.needs_read(spec.group_id, seg.base_offset) for spec, seg in todo]
    needs_read, next_read = iter(reading), itertools.count()
    with _read_ahead(specs, [t for t, r in zip(todo, reading) if r]) as ahead:
        for spec in specs:
            started = time.monotonic()
            out, stats, entries = _Output(), _Stats(), []
            txn.set_cleaned_index(entries)
            for seg in spec.segments:
                data = ahead.get(next(next_read)) if next(needs_read) else None
                scan = cache.take(spec.group_id, seg.base_offset, data) if cache is not None else None
                _clean_segment(spec, seg, offset_map, txn, out, stats, scan, data)
                if spec.erase_only:
                    entries.extend(_erase_only_txn_entries(spec, seg))
                del scan, data
            unchanged = spec.erase_only and not offset_map.erased_in(spec.group_id)
            if not unchanged:
                _write_cleaned(spec, out, entries)
            else:
                out.open(spec, discard=True)
                out.writer.close()
            results.append(
                {
                    **(offset_map.row_fields(spec.group_id) if spec.erase is not None else {}),
                    "unchanged": int(unchanged),
                    "group_id": spec.group_id,
                    "bytes_read": stats.bytes_read,
                    "bytes_written": out.size,
                    "records_read": stats.records_read,
                    "records_written": out.records,
                    "batches_read": stats.batches_read,
                    "batches_written": out.batches,
                    "invalid_records": stats.invalid_records,
                    "seconds": time.monotonic() - started,
                }
            )
    if isinstance(offset_map, ErasingMap) and results:
        results[0]["erase_found"] = offset_map.found_bits()
    return results
