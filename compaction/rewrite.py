"""Executor-side work on one output group: the key scan and the rewrite into `.cleaned` files.

`scan_group` reads the group's source segments and returns one row per distinct key with its
latest offset and its latest *dirty* offset (records of the dirty section, keyed, not aborted,
not control). `rewrite_unit` re-reads the same segments and applies Kafka's cleaner rules batch
by batch (`retention.py`), keeping a record iff `offset >= map[key]` (absent -> -1), then writes
`<base>.log.cleaned` with fresh `.index`/`.timeindex` (and `.txnindex` when aborted
transactions' markers remain), durably, with the last source segment's mtime.

A "unit" is the groups one task rewrites in log order with one `CleanedTransactionMetadata`:
one group for partitions without transactions (groups run in parallel), all groups of the
partition otherwise (transaction state crosses group boundaries, spec §5.8).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.errors import CorruptRecordError
from compaction.format import batch as fb
from compaction.format import naming
from compaction.format.index import AbortedTxn, build_indexes, write_txn_index
from compaction.format.scan import SegmentScan, scan_batches, scan_segment
from compaction.retention import (
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
from compaction.storage import Storage

CLEANED = ".cleaned"


@dataclass(frozen=True)
class SourceSegment:
    base_offset: int
    size: int
    mtime_ns: int


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

    @property
    def new_base(self) -> int:
        return self.segments[0].base_offset

    def segment_path(self, base: int, suffix: str = ".log") -> str:
        return f"{self.part_path}/{naming.segment_file_name(base, suffix)}"


# --- reading ---------------------------------------------------------------------------------


def _read_segment(spec: GroupSpec, seg: SourceSegment) -> SegmentScan:
    path = spec.segment_path(seg.base_offset)
    data = spec.storage.read_bytes(path)
    if len(data) != seg.size:
        raise CorruptRecordError(f"segment changed size since planning ({seg.size} -> {len(data)} bytes)", path=path)
    # A partial batch at the end of a non-active segment is corruption here, as in Kafka's cleaner.
    scan = scan_segment(np.frombuffer(data, dtype=np.uint8), path)
    too_big = np.flatnonzero(scan.batches.size > spec.max_message_bytes)
    if len(too_big):  # Kafka's cleaner: "This log contains a message larger than maximum allowable size"
        i = int(too_big[0])
        raise CorruptRecordError(
            f"batch of {int(scan.batches.size[i])} bytes is larger than max.message.bytes "
            f"{spec.max_message_bytes}", path=path, position=int(scan.batches.position[i]),
            offset=int(scan.batches.base_offset[i]))  # fmt: skip
    return scan


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


def scan_group(spec: GroupSpec) -> tuple[pa.Table, pa.Table]:
    """Distinct keys of the group with `max_offset` and `dirty_offset` (-1 when not dirty), and
    the headers of its producer batches (plus those of `tail_segments`)."""
    tables, producers = [], []
    for seg in spec.tail_segments:
        data = spec.storage.read_bytes(spec.segment_path(seg.base_offset))
        # The active segment may end in a partial batch after a broker crash: not our business.
        producers.append(producer_batches(scan_batches(np.frombuffer(data, dtype=np.uint8))))
    for seg in spec.segments:
        scan = _read_segment(spec, seg)
        producers.append(producer_batches(scan.batches))
        rec = scan.records
        control = (scan.batches.attributes.astype(np.int64) & fb.CONTROL_MASK) != 0
        excluded = control | aborted_batches(scan, spec.aborted_txns)
        usable = (rec.key_len >= 0) & ~excluded[rec.batch_index]
        dirty = usable & (rec.offset >= spec.first_dirty_offset) & (rec.offset < spec.upper_bound)
        keys = scan.keys_arrow().filter(pa.array(usable))
        tables.append(
            pa.table(
                {
                    "key": keys,
                    "max_offset": pa.array(rec.offset[usable]),
                    "dirty_offset": pa.array(np.where(dirty, rec.offset, -1)[usable]),
                }
            )
        )
    prod = pa.concat_tables([pa.table(p) for p in producers]) if producers else None
    if not tables:
        empty = pa.table({"key": pa.array([], pa.binary()), "max_offset": pa.array([], pa.int64()),
                          "dirty_offset": pa.array([], pa.int64())})  # fmt: skip
        return empty, prod
    agg = pa.concat_tables(tables).group_by("key").aggregate([("max_offset", "max"), ("dirty_offset", "max")])
    keys = agg.select(["key", "max_offset_max", "dirty_offset_max"])
    return keys.rename_columns(["key", "max_offset", "dirty_offset"]), prod


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


def found_offsets(keys: pa.Array, lookup_keys: pa.Array, lookup_latest: np.ndarray) -> np.ndarray:
    """map.get(key) for every record key: the latest offset, or -1 when absent (or null key)."""
    if len(lookup_keys) == 0:
        return np.full(len(keys), -1, dtype=np.int64)
    idx = pc.index_in(keys, value_set=lookup_keys)
    hit = idx.is_valid().to_numpy(zero_copy_only=False)
    pos = idx.fill_null(0).to_numpy(zero_copy_only=False)
    return np.where(hit, lookup_latest[pos], -1).astype(np.int64)


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


@dataclass
class _Output:
    """The cleaned segment being built: batch bytes and the columns its indexes come from."""

    chunks: list = field(default_factory=list)
    positions: list = field(default_factory=list)
    sizes: list = field(default_factory=list)
    last_offsets: list = field(default_factory=list)
    max_timestamps: list = field(default_factory=list)
    size: int = 0
    records: int = 0

    def append(self, data, last_offset: int, max_timestamp: int, records: int) -> None:
        self.chunks.append(data)
        self.positions.append(self.size)
        self.sizes.append(len(data))
        self.last_offsets.append(last_offset)
        self.max_timestamps.append(max_timestamp)
        self.size += len(data)
        self.records += records


@dataclass
class _Stats:
    bytes_read: int = 0
    records_read: int = 0
    batches_read: int = 0
    invalid_records: int = 0


def _rebuild(scan: SegmentScan, i: int, view: _BatchView, kept_offsets: set[int], horizon: int | None,
             first: int, last: int) -> bytes:  # fmt: skip
    """`MemoryRecordsBuilder` over the retained records (spec §5.11), v0/v1 converted to v2."""
    b = scan.batches
    pos, size = int(b.position[i]), int(b.size[i])
    attrs = int(b.attributes[i])
    ts_type = (attrs & fb.TIMESTAMP_TYPE_MASK) >> 3
    if view.magic >= 2:
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
    rec = scan.records
    records = [
        fb.Record(int(rec.offset[j]), int(rec.timestamp[j]), scan.key(j), scan.value(j))
        for j in range(first, last)
        if int(rec.offset[j]) in kept_offsets
    ]
    legacy_log_append = view.magic == 1 and ts_type == fb.LOG_APPEND_TIME
    return fb.build_batch(
        records,
        codec=attrs & fb.COMPRESSION_CODEC_MASK,
        timestamp_type=fb.LOG_APPEND_TIME if legacy_log_append else fb.CREATE_TIME,
        delete_horizon_ms=horizon,
        log_append_time=view.max_timestamp if legacy_log_append else None,
    )


def _control_type(scan: SegmentScan, first: int, last: int) -> int | None:
    if last <= first:
        return None
    return fb.parse_control_type(scan.key(first))


def _clean_segment(spec: GroupSpec, seg: SourceSegment, lookup_keys, lookup_latest, txn: CleanedTransactionMetadata,
                   out: _Output, stats: _Stats) -> None:  # fmt: skip
    scan = _read_segment(spec, seg)
    b, rec = scan.batches, scan.records
    found = found_offsets(scan.keys_arrow(), lookup_keys, lookup_latest)
    bounds = np.searchsorted(rec.batch_index, np.arange(len(b.position) + 1))
    retain_legacy = retain_legacy_deletes(seg.mtime_ns // 1_000_000, spec.legacy_delete_horizon_ms)
    stats.bytes_read += seg.size
    stats.batches_read += len(b.position)
    for i in range(len(b.position)):
        first, last = int(bounds[i]), int(bounds[i + 1])
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
            continue  # dropped unread: its records are not counted (CleanerStats.messagesRead)
        stats.records_read += last - first
        _emit_batch(spec, scan, i, view, decision, first, last, found, retain_legacy, out, stats)


def _emit_batch(spec, scan, i, view, decision, first, last, found, retain_legacy, out, stats) -> None:
    rec = scan.records
    if decision.discard_batch_records:
        keep = np.zeros(last - first, dtype=bool)
    elif view.is_control:
        keep = np.ones(last - first, dtype=bool)
    else:
        retain_deletes = (
            view.delete_horizon_ms is None or spec.now_ms < view.delete_horizon_ms
            if view.magic >= 2 else retain_legacy
        )  # fmt: skip
        keep, invalid = keep_records(
            rec.offset[first:last], rec.key_len[first:last], rec.value_len[first:last],
            found[first:last], spec.upper_bound - 1, retain_deletes,
        )  # fmt: skip
        stats.invalid_records += int(invalid.sum())
    n_kept = int(keep.sum())
    tombstones = bool((keep & (rec.value_len[first:last] < 0)).any()) and not view.is_control
    need_horizon = n_kept > 0 and needs_delete_horizon(view, tombstones, decision.contains_marker_for_empty_txn)
    kind = filter_batch_output(view, decision.retention, n_kept, need_horizon)
    b = scan.batches
    pos, size = int(b.position[i]), int(b.size[i])
    if kind is BatchOutput.COPY_ORIGINAL:
        out.append(scan.file[pos : pos + size].tobytes(), view.last_offset, view.max_timestamp, n_kept)
    elif kind is BatchOutput.REBUILD:
        horizon = delete_horizon_ms(spec.now_ms, spec.delete_retention_ms) if need_horizon else None
        kept = set(rec.offset[first:last][keep].tolist())
        data = _rebuild(scan, i, view, kept, horizon, first, last)
        header = fb.BatchHeader.unpack_from(data)
        out.append(data, header.last_offset, header.max_timestamp, n_kept)
    elif kind is BatchOutput.EMPTY_HEADER:
        header = fb.BatchHeader.unpack_from(scan.file[pos : pos + fb.RECORD_BATCH_OVERHEAD].tobytes())
        out.append(fb.build_empty_batch(header), view.last_offset, view.max_timestamp, 0)


def _write_cleaned(spec: GroupSpec, out: _Output, txn_entries: list[AbortedTxn]) -> None:
    storage, base = spec.storage, spec.new_base
    offset_index, time_index = build_indexes(
        np.asarray(out.positions, dtype=np.int64), np.asarray(out.sizes, dtype=np.int64),
        np.asarray(out.last_offsets, dtype=np.int64), np.asarray(out.max_timestamps, dtype=np.int64),
        base, spec.index_interval_bytes,
    )  # fmt: skip
    files = {".log": out.chunks, ".index": offset_index, ".timeindex": time_index}
    if txn_entries:
        files[".txnindex"] = write_txn_index(txn_entries)
    mtime_ns = spec.segments[-1].mtime_ns
    for suffix, data in files.items():
        path = spec.segment_path(base, suffix) + CLEANED
        storage.write_durable(path, data)
        if suffix != ".txnindex":  # Kafka's setLastModified skips the txn index (spec §5.6 step 5)
            storage.set_mtime(path, mtime_ns)


def rewrite_unit(specs: list[GroupSpec], lookup_keys: pa.Array, lookup_latest: np.ndarray) -> list[dict]:
    """Clean the groups of one unit in log order; one stats dict per group."""
    txn = CleanedTransactionMetadata()
    if specs:
        txn.add_aborted(specs[0].aborted_txns)
    results = []
    for spec in specs:
        started = time.monotonic()
        out, stats, entries = _Output(), _Stats(), []
        txn.set_cleaned_index(entries)
        for seg in spec.segments:
            _clean_segment(spec, seg, lookup_keys, lookup_latest, txn, out, stats)
        _write_cleaned(spec, out, entries)
        results.append(
            {
                "group_id": spec.group_id,
                "bytes_read": stats.bytes_read,
                "bytes_written": out.size,
                "records_read": stats.records_read,
                "records_written": out.records,
                "batches_read": stats.batches_read,
                "batches_written": len(out.sizes),
                "invalid_records": stats.invalid_records,
                "seconds": time.monotonic() - started,
            }
        )
    return results
