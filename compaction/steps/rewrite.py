"""The rewrite: a unit's groups cleaned into `.cleaned` files, segment by segment.

`rewrite_unit` applies Kafka's cleaner rules to the segments of each group, asking an `OffsetMap`
(`offset_map.py`) for map[key] per record: the records are decided all at once (`policy/keep.py`,
a record is kept iff `offset >= map[key]`, absent -> -1), the batches outside transactions too,
the others one at a time in log order (`retention.check_batch_retention`, the transaction state
moving with them). `emit.py` writes what was decided to `<base>.log.cleaned` (`writer.py`), then
come fresh `.index`/`.timeindex` (and `.txnindex` when aborted transactions' markers remain),
durably, with the last source segment's mtime.

A "unit" is the groups one task rewrites in log order with one `CleanedTransactionMetadata`:
one group for partitions without transactions (groups run in parallel), all groups of the
partition otherwise (transaction state crosses group boundaries, docs/kafka-rules.md#transactions).
"""

from __future__ import annotations

import errno
import os
import posixpath
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from compaction.errors import DiskFullError, EraseError
from compaction.format import batch as fb
from compaction.format.txnindex import AbortedTxn, write_txn_index
from compaction.kernels.index_build import build_indexes, check_index_room
from compaction.kernels.scan import SegmentScan
from compaction.policy.keep import (
    COPY,
    NO_NEW_HORIZON,
    batch_view,
    decide_batch,
    decide_erase_only,
    decide_fast,
    keep_records,
    last_data_batches,
    retain_deletes,
)
from compaction.policy.retention import (
    BatchRetention,
    check_batch_retention,
    delete_horizon_ms,
    retain_legacy_deletes,
)
from compaction.policy.txn_state import CleanedTransactionMetadata
from compaction.runtime import durability, task_progress
from compaction.steps.emit import emit_segment
from compaction.steps.erase import ERASED, ErasingMap
from compaction.steps.group import CLEANED, GroupSpec, SourceSegment
from compaction.steps.offset_map import OffsetMap
from compaction.steps.results import GroupResult
from compaction.steps.scan import ScanCache, read_ahead, read_segment
from compaction.steps.writer import Output


@dataclass
class RewriteStats:
    """What the rewrite of a group (or of a piece of one) read, and how many of its segments it
    scanned again (walked, CRC-checked, decompressed) because the scan cache had not kept them."""

    bytes_read: int = 0
    records_read: int = 0
    batches_read: int = 0
    invalid_records: int = 0
    segments_rescanned: int = 0


@dataclass(frozen=True)
class PieceSpec:
    """A cut group rewritten from one of its ranges: its segments `lo` to `hi` are cleaned here,
    the others are pieces other tasks cleaned (`rewrite_piece`), added to the group's output by
    `before(out, stats)` (the earlier ones) and `after(out, stats)` (the later ones)."""

    lo: int
    hi: int
    before: Callable[[Output, RewriteStats], None]
    after: Callable[[Output, RewriteStats], None]


def _control_type(scan: SegmentScan, first: int, last: int) -> int | None:
    if last <= first:
        return None
    return fb.parse_control_type(scan.key(first))


def _clean_segment(
    spec: GroupSpec,
    seg: SourceSegment,
    offset_map: OffsetMap,
    txn: CleanedTransactionMetadata,
    out: Output,
    stats: RewriteStats,
    scan: SegmentScan | None = None,
    data: np.ndarray | None = None,
) -> None:
    """Clean one source segment into `out`: from its kept `scan`, else from `data` (its bytes,
    read ahead) or read now."""
    if scan is None:
        stats.segments_rescanned += 1
        scan = read_segment(spec, seg, data, offset_map.hashes_keys, verify_crc=not offset_map.verified)
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
    v2 = b.magic >= 2
    has_horizon = v2 & ((b.attributes.astype(np.int64) & fb.DELETE_HORIZON_MASK) != 0)
    retain = retain_deletes(v2, has_horizon, b.base_timestamp, spec.now_ms, retain_legacy)
    keep, invalid = keep_records(
        rec.offset, rec.key_len, rec.value_len, found, spec.upper_bound - 1, retain[rec.batch_index]
    )
    bi = rec.batch_index
    n_keep = np.bincount(bi[keep], minlength=nb)
    n_invalid = np.bincount(bi[invalid], minlength=nb)
    n_tomb = np.bincount(bi[keep & (rec.value_len < 0)], minlength=nb)
    kind, need_horizon, fast = decide_fast(
        b, count, n_keep, n_tomb, has_horizon, spec.last_records, spec.retain_empty_offset
    )
    kept = np.where(fast, n_keep, 0)
    stats.records_read += int(count[fast].sum())
    stats.invalid_records += int(n_invalid[fast].sum())
    new_horizon = delete_horizon_ms(spec.now_ms, spec.delete_retention_ms)
    horizon = np.where(need_horizon, new_horizon, NO_NEW_HORIZON)
    for i in np.flatnonzero(~fast).tolist():
        _decide_one(
            spec,
            scan,
            i,
            int(bounds[i]),
            int(bounds[i + 1]),
            txn,
            keep,
            int(n_keep[i]),
            int(n_tomb[i]),
            int(n_invalid[i]),
            new_horizon,
            kind,
            kept,
            horizon,
            stats,
        )
    emit_segment(scan, kind, kept, horizon, keep, bounds, out)


def _erase_segment(
    spec: GroupSpec,
    seg: SourceSegment,
    scan: SegmentScan,
    found: np.ndarray,
    out: Output,
    stats: RewriteStats,
) -> None:
    """An erasing-only group's segment: only the records of listed keys go (`decide_erase_only`).
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
        retain |= (b.producer_id >= 0) & last_data_batches(spec.last_records, b.producer_id, b.last_offset)
    if seg.next_base_offset is None and nb:  # the log's last batch holds the log end offset
        retain[-1] = True
        if b.magic[-1] < 2 and n_keep[-1] == 0:
            raise EraseError(
                "erasing the log's last message, a v0/v1 one, would move the log end offset",
                path=spec.segment_path(seg.base_offset),
                position=int(b.position[-1]),
                offset=int(b.last_offset[-1]),
            )
    kind = decide_erase_only(b, count, n_keep, retain)
    stats.bytes_read += seg.size
    stats.batches_read += nb
    stats.records_read += int(count.sum())
    kept = np.where(kind == COPY, count, n_keep)
    emit_segment(scan, kind, kept, np.full(nb, NO_NEW_HORIZON, np.int64), keep, bounds, out)


def _erase_only_txn_entries(spec: GroupSpec, seg: SourceSegment) -> list[AbortedTxn]:
    """The segment's own `.txnindex` entries (those whose ABORT marker it holds): an erasing-only
    rewrite keeps every marker where it is."""
    end = seg.next_base_offset if seg.next_base_offset is not None else 2**63
    return [a for a in spec.aborted_txns if seg.base_offset <= a.last_offset < end]


def _decide_one(
    spec: GroupSpec,
    scan: SegmentScan,
    i: int,
    first: int,
    last: int,
    txn: CleanedTransactionMetadata,
    keep: np.ndarray,
    n_keep: int,
    n_tomb: int,
    n_invalid: int,
    new_horizon: int,
    kind: np.ndarray,
    kept: np.ndarray,
    horizon: np.ndarray,
    stats: RewriteStats,
) -> None:
    """The per-batch path (transactional, control and legacy batches), in log order: the
    transaction state moves here. Fills kind/kept/horizon[i]; overrides `keep` for the records of
    discarded batches (all dropped) and of control batches (all kept)."""
    view = batch_view(scan.batches, i, last - first)
    decision = check_batch_retention(
        view,
        txn,
        control_type=_control_type(scan, first, last) if view.is_control else None,
        last_records_of_active_producers=spec.last_records,
        retain_empty_offset=spec.retain_empty_offset,
        current_time_ms=spec.now_ms,
    )
    if decision.retention is BatchRetention.DELETE:
        return  # dropped unread: its records are not counted (CleanerStats.messagesRead)
    stats.records_read += last - first
    kind[i], kept[i], horizon[i] = decide_batch(view, decision, n_keep, n_tomb, new_horizon)
    if decision.discard_batch_records:
        keep[first:last] = False
    elif view.is_control:
        keep[first:last] = True
    else:
        stats.invalid_records += n_invalid


class _Writing:
    """What a rewrite is writing, for the error when its disk fills: the group's output, and the
    index file being written after it."""

    out: Output | None = None
    path: str | None = None


@contextmanager
def _disk_full(specs: list[GroupSpec]):
    """Turn a full disk (or quota) while the unit's cleaned segments are written into a
    `DiskFullError` naming the file being written and the bytes the partition's cleaned segments
    may need: at most those of the segments they replace (the .cleaned files are removed by the
    driver, the partition fails, its input stays as it is)."""
    writing = _Writing()
    try:
        yield writing
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        out = writing.out
        path = writing.path or exc.filename or (out.writer.path if out is not None and out.writer else "?")
        needed = sum(seg.size for spec in specs for seg in spec.segments)
        free = _free_bytes(specs[0], posixpath.dirname(path)) if specs else None
        written = f"; {out.size} bytes of its group written" if out is not None else ""
        free_text = f", {free} bytes free there" if free is not None else ""
        raise DiskFullError(
            f"{path}: {exc.strerror or 'no space left'} while writing the partition's cleaned segments, which "
            f"need up to {needed} bytes (the {sum(len(s.segments) for s in specs)} segments they replace)"
            f"{written}{free_text}",
            path=path,
            needed=needed,
            free=free,
        ) from None


def _free_bytes(spec: GroupSpec, directory: str) -> int | None:
    if not spec.storage.is_local:
        return None
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _write_cleaned(
    spec: GroupSpec, out: Output, txn_entries: list[AbortedTxn], writing: _Writing | None = None
) -> None:
    storage, base = spec.storage, spec.new_base
    out.open(spec)  # a group always has segments; this only matters for an empty one
    out.writer.close()
    # An offset that does not fit the index names the group's first segment (its base is the new one's).
    # A dry run builds the indexes too: a group the round would fail on them fails the dry run alike.
    offset_index, time_index = build_indexes(
        *out.columns(),
        base,
        spec.index_interval_bytes,
        spec.segment_path(base),
    )
    if not spec.erase_only:  # a segment only erased is no cleaner's output: no group of Kafka's to match
        check_index_room(
            out.columns(),
            len(offset_index),
            len(time_index),
            spec.index_interval_bytes,
            spec.segment_index_bytes,
            spec.segment_path(base),
        )
    if spec.dry_run:
        return
    files = {".index": offset_index, ".timeindex": time_index}
    if txn_entries:
        files[".txnindex"] = write_txn_index(txn_entries)
    mtime_ns = spec.segments[-1].mtime_ns
    storage.set_mtime(out.writer.path, mtime_ns)
    for suffix, data in files.items():
        path = spec.segment_path(base, suffix) + CLEANED
        if writing is not None:
            writing.path = path
        storage.write_durable(path, data)
        if suffix != ".txnindex":  # Kafka skips it: docs/kafka-rules.md#cleaned-file-times
            storage.set_mtime(path, mtime_ns)


def rewrite_unit(
    specs: list[GroupSpec],
    offset_map: OffsetMap,
    cache: ScanCache | None = None,
    pieces: dict[int, PieceSpec] | None = None,
) -> list[GroupResult]:
    """Clean the groups of one unit in log order; one result per group. `offset_map` answers
    map.get(key) per record (see `OffsetMap`). Segments whose scan `cache` holds (from
    `scan_partition` in the same task) are not walked again; the segment bytes it did not keep
    are read again, one segment ahead. `pieces` {group id: its `PieceSpec`}: the cut groups
    rewritten here from one of their ranges."""
    pieces = pieces or {}
    txn = CleanedTransactionMetadata()
    if specs:
        txn.add_aborted(specs[0].aborted_txns)
    if specs and specs[0].erase is not None:  # both paths' maps (PartitionMap, ShippedMap) erase alike
        offset_map = ErasingMap(offset_map, specs[0].erase, specs[0].topic)
    results = []
    own = {
        spec.group_id: spec.segments[pieces[spec.group_id].lo : pieces[spec.group_id].hi]
        if spec.group_id in pieces
        else spec.segments
        for spec in specs
    }
    todo = [(spec, seg) for spec in specs for seg in own[spec.group_id]]
    # The groups' files are made durable together when the unit is done (runtime/durability.py):
    # inside `_disk_full`, which names the file of a late ENOSPC.
    with _segment_inputs(specs, todo, cache) as inputs, _disk_full(specs) as writing, durability.deferred():
        for spec in specs:
            started = time.monotonic()
            out, stats, entries = Output(), RewriteStats(), []
            writing.out = out
            txn.set_cleaned_index(entries)
            piece = pieces.get(spec.group_id)
            if piece is not None:
                out.open(spec)
                piece.before(out, stats)
            for seg in own[spec.group_id]:
                scan, data = next(inputs)
                _clean_segment(spec, seg, offset_map, txn, out, stats, scan, data)
                task_progress.count(done=seg.size)  # the driver's progress line
                if spec.erase_only:
                    entries.extend(_erase_only_txn_entries(spec, seg))
                del scan, data
            if piece is not None:
                piece.after(out, stats)
            unchanged = spec.erase_only and not offset_map.erased_in(spec.group_id)
            if not unchanged:
                _write_cleaned(spec, out, entries, writing)
                writing.path = None
            else:
                out.open(spec, discard=True)
                out.writer.close()
            results.append(
                GroupResult(
                    spec.group_id,
                    bytes_read=stats.bytes_read,
                    bytes_written=out.size,
                    records_read=stats.records_read,
                    records_written=out.records,
                    batches_read=stats.batches_read,
                    batches_written=out.batches,
                    invalid_records=stats.invalid_records,
                    segments_rescanned=stats.segments_rescanned,
                    seconds=time.monotonic() - started,
                    unchanged=int(unchanged),
                    **(offset_map.erase_counts(spec.group_id) if spec.erase is not None else {}),
                )
            )
    if isinstance(offset_map, ErasingMap) and results:
        results[0] = replace(results[0], erase_found=offset_map.found_bits())
    return results


def rewrite_piece(
    spec: GroupSpec, offset_map: OffsetMap, writer, cache: ScanCache | None = None
) -> tuple[Output, RewriteStats]:
    """The segments of `spec` (a stretch of a group that another task rewrites, of a partition
    without transactions: no transaction state crosses into it) cleaned into `writer` exactly as
    `rewrite_unit` would clean them in the group; the output's columns (positions from the part's
    start) and the stats, for that task's `rewrite_unit(pieces=...)`."""
    out, stats = Output(writer=writer), RewriteStats()
    txn = CleanedTransactionMetadata()
    txn.set_cleaned_index([])
    with (
        _segment_inputs([spec], [(spec, seg) for seg in spec.segments], cache) as inputs,
        durability.deferred(),
    ):
        for seg in spec.segments:
            scan, data = next(inputs)
            _clean_segment(spec, seg, offset_map, txn, out, stats, scan, data)
            task_progress.count(done=seg.size)  # the driver's progress line
            del scan, data
        writer.close()
    return out, stats


@contextmanager
def _segment_inputs(
    specs: list[GroupSpec], todo: list[tuple[GroupSpec, SourceSegment]], cache: ScanCache | None
):
    """(kept scan or None, bytes or None) of each (spec, segment) of `todo`, in order: the scan
    `cache` kept, else the segment's bytes, read one segment ahead."""
    reading = [cache is None or cache.needs_read(spec.group_id, seg.base_offset) for spec, seg in todo]
    with read_ahead(specs, [t for t, r in zip(todo, reading) if r], last=True) as ahead:

        def inputs():
            at = 0
            for (spec, seg), read in zip(todo, reading):
                data = ahead.get(at) if read else None
                at += read
                scan = cache.take(spec.group_id, seg.base_offset, data) if cache is not None else None
                yield scan, data
                del scan, data  # the caller's turn is over: its buffer is free for the read after next

        yield inputs()
