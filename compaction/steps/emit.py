"""Writing one segment's decided batches in log order: verbatim slices of the source, v2 batches
re-encoded with their kept records (`kernels.rebuild`, one call per `SLICE_BYTES` of the
segment), legacy wrappers and messages re-encoded as v2 (`kernels.upconvert`), empty batches.
The batches the kernels build whole into one buffer (converted legacy messages, uncompressed
rebuilt v2 batches) go to the writer a run at a time, the others one at a time."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from compaction.errors import CorruptRecordError
from compaction.format import batch as fb
from compaction.format.batch_build import build_batch, build_empty_batch
from compaction.kernels import rebuild, upconvert
from compaction.kernels.scan import SegmentScan
from compaction.policy.keep import (
    CONVERT,
    COPY,
    DROP,
    NO_NEW_HORIZON,
    REBUILD_V2,
    REBUILD_WRAPPER,
    BatchView,
    batch_view,
)
from compaction.steps.writer import Output, Runs

# Source bytes of a segment whose batches are re-encoded and written together. The writer's
# thread writes one slice while the next is rebuilt (segment_io.WRITE_AHEAD queues the output of
# one slice whole); a segment-sized step would leave the disk idle through each rebuild and the
# rebuild waiting through each write.
SLICE_BYTES = 16 << 20


def emit_segment(
    scan: SegmentScan,
    kind: np.ndarray,
    kept: np.ndarray,
    horizon: np.ndarray,
    keep: np.ndarray,
    bounds: np.ndarray,
    out: Output,
) -> None:
    """Write the batches of one segment in log order (`Runs`), SLICE_BYTES of the source at a
    time: every v2 rebuild of a slice re-encoded by one kernel call (kernels/rebuild.py), every
    kept legacy message by another (kernels/upconvert.py); a run of consecutive batches built
    whole in one buffer goes out as one chunk."""
    runs = Runs(out, memoryview(scan.file))
    for lo, hi in itertools.pairwise(slices(scan.batches.position, SLICE_BYTES)):
        _emit_slice(scan, lo, hi, kind, kept, horizon, keep, bounds, runs)
    runs.flush()
    out.writer.flush()  # nothing of this segment's buffers stays referenced after it


def slices(position: np.ndarray, step: int) -> list[int]:
    """Batch indices cutting batches at byte `position`s into runs of about `step` bytes: the
    first batch at or past each multiple of `step`, with 0 and the batch count at the ends."""
    n = len(position)
    if not n:
        return [0, 0]
    marks = np.arange(int(position[0]) + step, int(position[-1]) + 1, step)
    cuts = np.unique(np.searchsorted(position, marks))
    return [0, *cuts[(cuts > 0) & (cuts < n)].tolist(), n]


def _emit_slice(
    scan: SegmentScan,
    lo: int,
    hi: int,
    kind: np.ndarray,
    kept: np.ndarray,
    horizon: np.ndarray,
    keep: np.ndarray,
    bounds: np.ndarray,
    runs: Runs,
) -> None:
    """Batches lo to hi of the segment."""
    of = lambda k: np.flatnonzero(kind[lo:hi] == k) + lo  # noqa: E731
    rebuilt, plain = _rebuild_v2(scan, of(REBUILD_V2), kept, horizon, keep, bounds)
    rebuilt.update(_rebuild_wrappers(scan, of(REBUILD_WRAPPER), kept, horizon, keep, bounds))
    chunked = (_convert(scan, of(CONVERT), horizon, bounds), plain)
    emitted = np.flatnonzero(kind[lo:hi] != DROP) + lo
    which = np.zeros(hi - lo, np.int8)  # 0: one at a time; 1 + k: in chunked[k]
    for k, c in enumerate(chunked):
        which[c.idx - lo] = 1 + k
    which = which[emitted - lo]
    cuts = [0, *(np.flatnonzero(which[1:] != which[:-1]) + 1).tolist(), len(emitted)]
    for a, b in itertools.pairwise(cuts):
        if a < b and which[a]:
            runs.flush()
            chunked[which[a] - 1].emit(runs.out, emitted[a:b], scan.batches.last_offset)
        elif a < b:
            _emit_batches(scan, emitted[a:b], kind, kept, horizon, keep, bounds, rebuilt, runs)


def _emit_batches(
    scan: SegmentScan,
    batches: np.ndarray,
    kind: np.ndarray,
    kept: np.ndarray,
    horizon: np.ndarray,
    keep: np.ndarray,
    bounds: np.ndarray,
    rebuilt: dict,
    runs: Runs,
) -> None:
    """The batches `batches` (none converted), one at a time."""
    b = scan.batches
    mv = runs.source
    cols = [c[batches].tolist() for c in (kind, kept, b.position, b.size, b.last_offset, b.max_timestamp)]
    for i, k, n_kept, pos, size, last_offset, max_ts in zip(batches.tolist(), *cols, strict=True):
        if k == COPY:
            runs.verbatim(pos, size, last_offset, max_ts, n_kept)
        elif k == REBUILD_V2 and i in rebuilt:
            chunks, new_max = rebuilt.pop(i)
            runs.built_batch(chunks, last_offset, new_max, n_kept)
        elif k == REBUILD_WRAPPER:  # a legacy wrapper's kept messages
            chunks, new_last, new_max = rebuilt.pop(i)
            runs.built_batch(chunks, new_last, new_max, n_kept)
        elif k == REBUILD_V2:  # the kernel left it to build_batch
            first, last = int(bounds[i]), int(bounds[i + 1])
            view = batch_view(scan.batches, i, last - first)
            offsets = set(scan.records.offset[first:last][keep[first:last]].tolist())
            new = int(horizon[i])
            data = _rebuild(scan, i, view, offsets, None if new == NO_NEW_HORIZON else new)
            header = fb.BatchHeader.unpack_from(data)
            runs.built_batch((data,), header.last_offset, header.max_timestamp, n_kept)
        else:
            header = fb.BatchHeader.unpack_from(mv[pos : pos + fb.RECORD_BATCH_OVERHEAD])
            runs.built_batch((build_empty_batch(header),), last_offset, max_ts, 0)


@dataclass
class _Chunked:
    """Batches of a segment built whole by one kernel call into one buffer, in log order: batch
    idx[j] is data[starts[j]:ends[j]], each starting where the one before it ends when their
    batches are consecutive in the segment."""

    idx: np.ndarray
    data: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    max_ts: np.ndarray
    records: np.ndarray

    @classmethod
    def empty(cls) -> _Chunked:
        none = np.empty(0, np.int64)
        return cls(none, np.empty(0, np.uint8), none, none, none, none)

    def emit(self, out: Output, batches: np.ndarray, last_offset: np.ndarray) -> None:
        """Write the consecutive batches `batches` (a run of `idx`) as one chunk."""
        lo = int(np.searchsorted(self.idx, batches[0]))
        hi = lo + len(batches)
        sizes = self.ends[lo:hi] - self.starts[lo:hi]
        out.append_columns(
            self.data[int(self.starts[lo]) : int(self.ends[hi - 1])],
            sizes,
            last_offset[batches],
            self.max_ts[lo:hi],
            int(self.records[lo:hi].sum()),
        )


def _convert(scan: SegmentScan, idx: np.ndarray, horizon: np.ndarray, bounds: np.ndarray) -> _Chunked:
    """Every kept message of the uncompressed legacy entries `idx` re-encoded as a v2 batch, in
    one kernel call: its one record is record bounds[i] of the scan."""
    if not len(idx):
        return _Chunked.empty()
    b = scan.batches
    log_append = (b.magic[idx] == 1) & ((b.attributes[idx] & fb.TIMESTAMP_TYPE_MASK) != 0)
    data, ends, max_ts = upconvert.convert_messages(
        scan.file, scan.side, scan.split, bounds[idx], scan.records, log_append, horizon[idx]
    )
    return _Chunked(
        idx,
        data,
        np.concatenate([[0], ends[:-1]]).astype(np.int64),
        ends,
        max_ts,
        np.ones(len(idx), np.int64),
    )


def _rebuild_v2(
    scan: SegmentScan,
    idx: np.ndarray,
    kept: np.ndarray,
    new_horizon: np.ndarray,
    keep: np.ndarray,
    bounds: np.ndarray,
) -> tuple[dict[int, tuple], _Chunked]:
    """The v2 REBUILD batches `idx` of a segment, re-encoded in one `rebuild_records` call and
    sealed together: the uncompressed ones whole in the kernel's buffer (`seal_plain`), the
    compressed ones as {batch index: ([header, payload], max timestamp)}; batches the kernel
    flags are left out (they go through `build_batch`)."""
    if not len(idx):
        return {}, _Chunked.empty()
    b, rec = scan.batches, scan.records
    src, start, end = (a[idx] for a in rebuild.record_regions(scan))
    first = bounds[idx]
    count = bounds[idx + 1] - first
    attrs = b.attributes[idx].astype(np.int64)
    old = np.where((attrs & fb.DELETE_HORIZON_MASK) != 0, b.base_timestamp[idx], rebuild.NO_HORIZON)
    horizons = np.where(new_horizon[idx] != NO_NEW_HORIZON, new_horizon[idx], old).astype(np.int64)
    has_first = count > 0
    expect = np.where(has_first, rec.key_pos[np.where(has_first, first, 0)] if len(rec.key_pos) else -1, -1)
    expect = np.where(has_first & (src == rebuild.SRC_SIDE), expect - scan.split, expect)
    payload, o_start, o_end, new_base, new_max, n_kept, flags = rebuild.rebuild_records(
        scan.file,
        scan.side,
        src,
        start,
        end,
        count,
        keep,
        first,
        b.base_timestamp[idx],
        b.timestamp_type[idx],
        b.max_timestamp[idx],
        horizons,
        expect,
        rec,
        scan.split,
        b.base_offset[idx],
        room=fb.RECORD_BATCH_OVERHEAD,
    )
    wrong = np.flatnonzero(n_kept != kept[idx])
    if len(wrong):  # the kernel walked other records than the scan: never expected
        i = int(idx[wrong[0]])
        raise CorruptRecordError(
            f"rebuild kept {int(n_kept[wrong[0]])} records, the decision {int(kept[i])}",
            path=scan.path,
            position=int(b.position[i]),
            offset=int(b.base_offset[i]),
        )
    ok = flags == 0
    sel = idx[ok]
    headers = rebuild.headers_for(
        base_offset=b.base_offset[sel],
        partition_leader_epoch=b.partition_leader_epoch[sel],
        attributes=attrs[ok],
        last_offset_delta=b.last_offset[sel] - b.base_offset[sel],
        base_timestamp=new_base[ok],
        max_timestamp=new_max[ok],
        producer_id=b.producer_id[sel],
        producer_epoch=b.producer_epoch[sel],
        base_sequence=b.base_sequence[sel],
        records_count=n_kept[ok],
        horizon=horizons[ok],
    )
    codec = attrs[ok] & fb.COMPRESSION_CODEC_MASK
    plain = codec == 0
    rebuild.seal_plain(headers[plain], payload, o_start[ok][plain], o_end[ok][plain])
    whole = _Chunked(
        sel[plain],
        payload,
        o_start[ok][plain] - fb.RECORD_BATCH_OVERHEAD,
        o_end[ok][plain],
        new_max[ok][plain],
        n_kept[ok][plain],
    )
    packed = ~plain
    sealed = rebuild.seal_all(headers[packed], payload, o_start[ok][packed], o_end[ok][packed], codec[packed])
    return dict(zip(sel[packed].tolist(), zip(sealed, new_max[ok][packed].tolist()))), whole


def _rebuild_wrappers(
    scan: SegmentScan,
    idx: np.ndarray,
    kept: np.ndarray,
    new_horizon: np.ndarray,
    keep: np.ndarray,
    bounds: np.ndarray,
) -> dict[int, tuple]:
    """{batch index: ([header, payload], last offset, max timestamp)} for the compressed legacy
    wrappers `idx` to rebuild: their kept messages as one v2 batch each with the wrapper's codec
    (what `_rebuild` builds with `build_batch`), encoded in one `upconvert.encode_kept` call."""
    if not len(idx):
        return {}
    b = scan.batches
    attrs = b.attributes[idx].astype(np.int64)
    log_append = (b.magic[idx] == 1) & ((attrs & fb.TIMESTAMP_TYPE_MASK) != 0)
    payload, start, end, base, last, base_ts, max_ts, n_kept = upconvert.encode_kept(
        scan.file,
        scan.side,
        scan.split,
        bounds[idx],
        bounds[idx + 1] - bounds[idx],
        keep,
        scan.records,
        log_append,
        b.max_timestamp[idx],
        new_horizon[idx],
    )
    wrong = np.flatnonzero(n_kept != kept[idx])
    if len(wrong):  # never expected: the decision counted other records
        i = int(idx[wrong[0]])
        raise CorruptRecordError(
            f"rebuild kept {int(n_kept[wrong[0]])} records, the decision {int(kept[i])}",
            path=scan.path,
            position=int(b.position[i]),
            offset=int(b.base_offset[i]),
        )
    minus_one = np.full(len(idx), -1, dtype=np.int64)
    codec = attrs & fb.COMPRESSION_CODEC_MASK
    headers = rebuild.headers_for(
        base_offset=base,
        partition_leader_epoch=minus_one,
        attributes=codec | np.where(log_append, fb.TIMESTAMP_TYPE_MASK, 0),
        last_offset_delta=last - base,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=minus_one,
        producer_epoch=minus_one,
        base_sequence=minus_one,
        records_count=n_kept,
        horizon=new_horizon[idx],
    )
    sealed = rebuild.seal_all(headers, payload, start, end, codec)
    return dict(zip(idx.tolist(), zip(sealed, last.tolist(), max_ts.tolist(), strict=True), strict=True))


def _rebuild(
    scan: SegmentScan, i: int, view: BatchView, kept_offsets: set[int], horizon: int | None
) -> bytes:
    """`MemoryRecordsBuilder` over the retained records via `build_batch`
    (docs/kafka-rules.md#writing-retained-batches) for the rare v2 batch whose header keys are not valid UTF-8
    (see kernels/rebuild.py); every other v2 batch goes through `_rebuild_v2`, legacy wrappers through
    `_rebuild_wrappers`."""
    b = scan.batches
    pos, size = int(b.position[i]), int(b.size[i])
    attrs = int(b.attributes[i])
    ts_type = (attrs & fb.TIMESTAMP_TYPE_MASK) >> 3
    raw = scan.file[pos : pos + size].tobytes()
    records = [r for r in fb.RecordBatch(raw, pos, scan.path).records() if r.offset in kept_offsets]
    return build_batch(
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
