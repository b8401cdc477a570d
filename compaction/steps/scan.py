"""The scan: reading a group's source segments with every check of their place in the log, and
the whole-partition scan that builds the offset map and the producer state's input.

`scan_partition` reads the groups of one partition (or one range), newest segment first, into a
`PartitionMap` (`offset_map.py`) and collects the headers of producer batches (`producer_batches`,
the tail segments' too). `ScanCache` keeps the scans for the rewrite of the same task, so each
segment is decompressed and walked once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from compaction.errors import CorruptRecordError
from compaction.format import naming
from compaction.format.checkpoint import LEADER_EPOCH_CHECKPOINT, parse_leader_epoch_checkpoint
from compaction.format.compression import CODEC_NAMES
from compaction.format.index import read_offset_index, read_time_index
from compaction.format.layout import COMPRESSION_CODEC_MASK
from compaction.kernels.buffers import held_bytes
from compaction.kernels.scan import (
    BATCH_FIELDS,
    STOP_CORRUPT,
    BatchColumns,
    SegmentScan,
    scan_batches,
    scan_segment,
)
from compaction.kernels.sidepack import pack_side
from compaction.policy.keep import may_keep
from compaction.policy.log_structure import (
    SegmentEpochs,
    check_index_entries,
    check_leader_epochs,
    check_segment_offsets,
    check_time_index_entries,
    segment_epochs,
)
from compaction.runtime import task_progress
from compaction.runtime.checkpoint_files import read_checkpoint_bytes
from compaction.runtime.segment_io import READ_CHUNK, ReadAhead, is_mapped, prefetch, read_segment_bytes
from compaction.runtime.storage import Storage, refuse_longer
from compaction.settings import SCAN_REUSE_CODECS
from compaction.steps.group import GroupSpec, SourceSegment
from compaction.steps.offset_map import PartitionMap, Unmapped


def _planned_segment_bytes(
    spec: GroupSpec, seg: SourceSegment, data: np.ndarray | None = None
) -> tuple[str, np.ndarray]:
    """(path, bytes) of a source segment (read now unless `data` was read ahead), which must
    still have the size it was planned with."""
    path = spec.segment_path(seg.base_offset)
    if data is None:
        data = read_segment_bytes(spec.storage, path, spec.read_mode)
    if len(data) != seg.size:
        raise CorruptRecordError(
            f"segment changed size since planning ({seg.size} -> {len(data)} bytes)", path=path
        )
    return path, data


def read_segment(
    spec: GroupSpec,
    seg: SourceSegment,
    data: np.ndarray | None = None,
    hash_keys: bool = True,
    epochs: list[SegmentEpochs] | None = None,
    verify_crc: bool = True,
) -> SegmentScan:
    """The checked scan of a source segment; `epochs` (if given) receives its leader-epoch runs
    for `check_partition_epochs`. `verify_crc=False` only for a segment this round's scan has
    verified already (its size is checked again)."""
    path, data = _planned_segment_bytes(spec, seg, data)
    # A partial batch at the end of a non-active segment is corruption here, as in Kafka's cleaner.
    scan = scan_segment(
        data,
        path,
        hash_keys=hash_keys,
        verify_crc=verify_crc,
        max_batch_bytes=spec.max_message_bytes,
        inflate_limit=spec.max_inflated_batch_bytes,
    )
    check_structure(spec, seg, path, scan.batches, epochs)
    return scan


def check_structure(
    spec: GroupSpec, seg: SourceSegment, path: str, batches, epochs: list[SegmentEpochs] | None = None
) -> None:
    """The segment's place in its log (log_structure.py): its offsets against its base, each
    other and the next segment's base, and its `.index` entries against its batches (the index
    is read here: a missing one is rebuilt by the driver before a round). Raises
    `LogStructureError`."""
    nxt = seg.next_base_offset
    check_segment_offsets(
        path, seg.base_offset, batches, nxt, None if nxt is None else spec.segment_path(nxt)
    )
    base = seg.base_offset
    for suffix, read, check in (
        (".index", read_offset_index, check_index_entries),
        (".timeindex", read_time_index, check_time_index_entries),
    ):
        index_path = spec.segment_path(base, suffix)
        try:
            data = spec.storage.read_small(index_path)  # plain os calls on a local disk
        except FileNotFoundError:
            continue
        check(index_path, path, base, read(data, base), batches)
    if epochs is not None:
        epochs.append(segment_epochs(path, seg.base_offset, batches))


def check_partition_epochs(specs: list[GroupSpec], epochs: list[SegmentEpochs]) -> None:
    """Leader epochs of all the partition's segments (`epochs`, from its scan) in order, and
    consistent with its `leader-epoch-checkpoint` when it has one (LogStructureError)."""
    path = specs[0].leader_epoch_checkpoint if specs else None
    data = read_checkpoint_bytes(specs[0].storage, path) if path else None
    entries = parse_leader_epoch_checkpoint(data, path) if path else None
    check_leader_epochs(epochs, entries, path or LEADER_EPOCH_CHECKPOINT)


def worth_keeping(attributes: np.ndarray, decompressed: bool, codecs: frozenset[str]) -> bool:
    """Whether a segment's scan is worth keeping for its rewrite, given its batches' `attributes`
    and whether its scan holds `decompressed` records: a scan of uncompressed batches always (its
    columns, small beside the walk and key hashing they save); of compressed ones when a batch
    is of one of `codecs` (`WorkerSettings.scan_reuse_codecs`: those dear to decompress again)."""
    if not decompressed:
        return True
    present = np.unique(np.asarray(attributes) & COMPRESSION_CODEC_MASK)
    return any(CODEC_NAMES.get(int(c)) in codecs for c in present)


class ScanCache:
    """The `SegmentScan`s of a whole-partition task's scan phase, kept for its rewrite phase so
    that each segment is CRC-checked, decompressed and walked once instead of twice.

    A segment read from a local disk into task memory is kept without its bytes (`reread`): the
    rewrite reads it again (`needs_read`, then `take(..., data)`), which on a local disk costs
    less than holding every segment of the partition in fresh memory at once (the first task of
    each worker paid a first touch of all of it, bench/fresh_memory.py); its decompressed records
    and columns stay. Memory-mapped segments and those of object stores are kept whole.

    Bounded: a scan is kept only while the kept scans' own memory (decompressed `side` buffers,
    record and batch columns, and the segment bytes when kept and not memory-mapped; a buffer
    counted whole where a scan holds a view of it) stays within `max_bytes`; the segments that do
    not fit are read and walked again by the rewrite, as without a cache. `take` hands a scan
    over once (the rewrite drops it after its segment), so the memory held only shrinks during
    the rewrite.

    When full, the scans that save the least work per byte held go first: an offer's `worth`
    (what its rewrite would otherwise decompress and walk again) over its footprint is its
    density, and a scan that does not fit displaces kept ones of a lower density, lowest first,
    when that makes room (else nothing is displaced). The scan runs newest segment first and
    the older segments keep fewer records, so their packed scans are the small ones: first come
    first kept filled the budget with the newest segments' near-whole sides and decompressed the
    oldest twice.

    Only the scans `worth_keeping` under `codecs` are offered: the others are scanned again by
    the rewrite, as when the cache is full."""

    def __init__(self, max_bytes: int, codecs: frozenset[str] = SCAN_REUSE_CODECS) -> None:
        self.max_bytes = max_bytes
        self.codecs = codecs
        self.held = 0
        self._scans: dict[tuple[int, int], tuple[SegmentScan, int, int]] = {}  # (scan, size, worth)
        self.hits = self.misses = 0

    def wants(self, scan: SegmentScan) -> bool:
        """Whether `scan` is worth offering (`worth_keeping` under this cache's `codecs`)."""
        return worth_keeping(scan.batches.attributes, len(scan.side) > 0, self.codecs)

    @staticmethod
    def footprint(scan: SegmentScan, with_file: bool = True) -> int:
        # The allocations held, not the views' lengths: a view of a pool buffer holds all of it.
        n = held_bytes(scan.side)
        if with_file and not is_mapped(scan.file):  # page cache, not task memory, when mapped
            n += held_bytes(scan.file)
        for cols in (scan.records, scan.batches):
            values = (getattr(cols, f) for f in cols.__slots__)
            n += sum(v.nbytes for v in values if isinstance(v, np.ndarray))
        return n

    def offer(
        self,
        group_id: int,
        base_offset: int,
        scan: SegmentScan,
        reread: bool = False,
        worth: int = 0,
        displaced: Callable[[int, int], None] | None = None,
    ) -> bool:
        """Keep `scan` (without its segment bytes when `reread` and they are not mapped) if it
        fits, or once kept scans of a lower density than its `worth` per byte are displaced to
        make room (each reported as `displaced(group_id, base_offset)`); True when kept."""
        drop = reread and not is_mapped(scan.file)
        size = self.footprint(scan, with_file=not drop)
        if self.held + size > self.max_bytes and not self._make_room(size, worth, displaced):
            return False
        # Without the packed keys (the map has their ids); without the bytes when `drop`, their
        # length standing in for them (SegmentScan.split must not change).
        file = _Absent(len(scan.file)) if drop else scan.file
        scan = SegmentScan(scan.path, file, scan.side, scan.batches, scan.records)
        self._scans[(group_id, base_offset)] = (scan, size, worth)
        self.held += size
        return True

    def _make_room(self, size: int, worth: int, displaced: Callable[[int, int], None] | None) -> bool:
        """Drop the kept scans of a lower density than `worth` / `size`, lowest first, until
        `size` fits; none when they cannot make the room. True when it fits."""
        # a / b < c / d as a * d < c * b: exact for ints, and a footprint of 0 is the densest
        lower = [k for k, (_, n, w) in self._scans.items() if w * size < worth * n]
        lower.sort(key=lambda k: self._scans[k][2] / max(self._scans[k][1], 1))
        need, picked = self.held + size - self.max_bytes, []
        for key in lower:
            if need <= 0:
                break
            picked.append(key)
            need -= self._scans[key][1]
        if need > 0:
            return False
        for key in picked:
            self.held -= self._scans.pop(key)[1]
            if displaced is not None:
                displaced(*key)
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
                raise CorruptRecordError(
                    f"segment changed size between the scan and the rewrite "
                    f"({len(scan.file)} -> {None if data is None else len(data)} bytes)",
                    path=scan.path,
                )
            scan = SegmentScan(scan.path, data, scan.side, scan.batches, scan.records)
        return scan


class _Absent:
    """Stands for segment bytes a `ScanCache` did not keep: only their length."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def batch_headers(storage: Storage, path: str, chunk: int = READ_CHUNK) -> BatchColumns:
    """`scan_batches` of the whole file at `path`, read `chunk` bytes at a time (more at once only
    for a batch longer than that): the headers of a segment read for them alone hold memory of a
    chunk and the largest batch, not of the file (an active segment of 1 GiB was 1 GiB of fresh
    memory in each task that read it). Positions are the file's."""
    info = storage.info(path)
    size = info.size if info is not None else 0
    refuse_longer(path, size)
    parts, pos, want = [], 0, chunk
    while True:
        asked = min(want, size - pos)
        data = storage.read_small(path, pos, asked)
        cols = scan_batches(np.frombuffer(data, dtype=np.uint8))
        cols.position += pos
        parts.append(cols)
        if len(data) < asked:  # a file that shrank while read ends where the read did
            size = pos + len(data)
        if cols.stop_reason == STOP_CORRUPT or pos + len(data) >= size:
            break
        # The read ended on a batch boundary or inside a batch: go on from the batch's start,
        # reading twice as much at once when a batch was longer than the whole read.
        want = chunk if cols.stop_position else 2 * want
        pos += cols.stop_position
    if len(parts) == 1:
        return parts[0]
    columns = [np.concatenate([getattr(p, f) for p in parts]) for f in BATCH_FIELDS]
    return BatchColumns(*columns, stop_position=pos + cols.stop_position, stop_reason=cols.stop_reason)


def segment_producers(
    spec: GroupSpec, base_offset: int, epochs: list[SegmentEpochs] | None = None
) -> dict[str, np.ndarray]:
    """Producer batch headers of a segment read for producer state only (above the cleanable
    range; the active one may end in a partial batch after a broker crash: not our business).
    Its place in the log is checked as a source segment's is (`check_structure`)."""
    path = spec.segment_path(base_offset)
    cols = batch_headers(spec.storage, path)
    seg = next((s for s in spec.tail_segments if s.base_offset == base_offset), None)
    if seg is not None:
        check_structure(spec, seg, path, cols, epochs)
    return producer_batches(cols)


def tail_producers(spec: GroupSpec, epochs: list[SegmentEpochs] | None = None) -> list[dict[str, np.ndarray]]:
    """Producer batch headers of the group's `tail_segments`."""
    return [segment_producers(spec, seg.base_offset, epochs) for seg in spec.tail_segments]


def read_ahead(
    specs: list[GroupSpec],
    todo: list[tuple[GroupSpec, SourceSegment]],
    last: bool = False,
    indexes: bool = False,
) -> ReadAhead:
    """The bytes of the (spec, segment)s `todo`, in order, each read while the previous is worked
    on; `last`: the run's last read of them (`read_segment_bytes`). `indexes`: the reads of a
    local segment's `.index` and `.timeindex` are started first (`check_structure` reads them):
    read on the task's own thread from a cold disk, each kept it waiting (BENCHMARKS.md)."""
    storage, mode = specs[0].storage, specs[0].read_mode
    warm = indexes and storage.is_local

    def read(item: tuple[GroupSpec, SourceSegment]):
        spec, seg = item
        if warm:
            suffixes = (naming.INDEX_SUFFIX, naming.TIME_INDEX_SUFFIX)
            prefetch(spec.segment_path(seg.base_offset, suffix) for suffix in suffixes)
        return read_segment_bytes(storage, spec.segment_path(seg.base_offset), mode, last)

    return ReadAhead(read, todo)


# Segments below this in all say too little of the others to project the map's size from them.
PROJECT_MIN_BYTES = 1 << 20


def scan_partition(
    specs: list[GroupSpec],
    cache: ScanCache | None = None,
    keep_ids: bool = False,
    epochs: list[SegmentEpochs] | None = None,
) -> tuple[PartitionMap | Unmapped, list[dict]]:
    """The whole-partition scan: the offset map of all `specs` (one partition, log order) and the
    producer batch headers (including those of the tail segments). Every segment's place in the
    log is checked as it is read (`check_structure`); `epochs` receives its leader-epoch runs.
    See `scan_segments`."""
    pmap, headers = scan_segments(specs, cache, keep_ids, epochs)
    return pmap, [p for spec in specs for p in tail_producers(spec, epochs)] + headers


def scan_segments(
    specs: list[GroupSpec],
    cache: ScanCache | None = None,
    keep_ids: bool = False,
    epochs: list[SegmentEpochs] | None = None,
) -> tuple[PartitionMap | Unmapped, list[dict]]:
    """The offset map of the segments of `specs` (one partition, log order) and each segment's
    producer batch headers, in log order (the tail segments left out). Every segment's place in
    the log is checked as it is read (`check_structure`); `epochs` receives its leader-epoch runs.

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
    scanned = 0
    with read_ahead(specs, todo, indexes=True) as ahead:
        for i, (spec, seg) in enumerate(todo):
            scan = read_segment(spec, seg, ahead.get(i), pmap.hashes_keys, epochs=epochs)
            task_progress.count(done=seg.size)
            headers.append(producer_batches(scan.batches))
            ids = pmap.add(spec, seg, scan)
            scanned += seg.size
            if not unmapped and scanned >= PROJECT_MIN_BYTES:
                # The keys so far at the same rate in the segments to come: an upper bound of the
                # key count for most logs, tighter as segments whose keys repeat are added. The
                # map grows there in one step if it fills, instead of doubling per fill.
                pmap.table.expect(len(pmap.table) * size // scanned)
            if keep_ids:
                pmap.keep_ids(spec, seg, ids)
            if cache is not None and cache.wants(scan):
                # Only a decompressed side can be packed: uncompressed segments skip the decision.
                # An erasing rewrite reads every record's key (ErasingMap): nothing packed away.
                packable = len(scan.side) and spec.erase is None
                keep = may_keep(scan.records, pmap.latest(ids), spec.upper_bound) if packable else None
                packed = pack_side(scan, keep) if packable else None
                # What a hit saves the rewrite: decompressing the side and walking the segment
                # (and hashing its keys again, about as many bytes).
                worth = len(scan.side) + len(scan.file)
                # keep_ids holds every segment's ids anyway; else a displaced scan's go with it
                gone = None if keep_ids else pmap.drop_ids
                if cache.offer(
                    spec.group_id, seg.base_offset, packed or scan, spec.storage.is_local, worth, gone
                ):
                    pmap.keep_ids(spec, seg, ids)
                del packed, keep
            del scan  # its bytes' buffer is free for the read after next: two buffers in use, not three
    return pmap, headers[::-1]


def producer_batches(b) -> dict[str, np.ndarray]:
    """Header columns of the batches written by a producer (id >= 0): producer state input."""
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
