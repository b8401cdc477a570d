"""Re-encode the retained records of many v2 batches in one compiled call (docs/kafka-rules.md#v2-records,
#writing-retained-batches).

`build_batch` is the reference for what a rebuilt batch looks like; this module produces the same
bytes without decoding records into Python objects. Per rebuilt batch (all from the original batch
unless said otherwise):

* records: only the retained ones, each re-encoded from scratch (docs/kafka-rules.md#v2-records): length
  recomputed, attributes 0, `timestampDelta = timestamp - newBaseTimestamp`, original `offsetDelta` (the base
  offset is kept, so the delta does not change), key, value and headers byte for byte; every varint
  is written in its shortest form (as `DefaultRecord.writeTo` does), whatever the input used;
* `newBaseTimestamp` = the delete horizon when one is set (>= 0), else the first retained record's
  timestamp; a record's timestamp as read is `baseTimestamp + timestampDelta` (CreateTime) or the
  batch `maxTimestamp` (LogAppendTime, `DefaultRecordBatch.RecordIterator`);
* `maxTimestamp` = max(-1, retained timestamps) for CreateTime, the original for LogAppendTime;
* header (`header_for`): base offset, lastOffsetDelta, leader epoch, producer fields kept; codec
  and timestamp type kept; delete-horizon bit set when a horizon is; recordsCount = retained;
  CRC-32C over [21, end) of the compressed-as-before payload (`compression.compress`, default level).

Header keys are Java Strings in Kafka: `build_batch` decodes them as UTF-8 with replacement and
encodes them again, which only round-trips for valid UTF-8. The kernel checks that; a batch with a
header key that is not valid UTF-8 is flagged (`NEEDS_FALLBACK`) and left to `build_batch`.

Where a batch's records live (`record_regions`): uncompressed v2 batches in the file buffer at
[position + 61, position + size); compressed v2 batches in `SegmentScan.side`, where `scan_segment`
appended their decompressed streams back to back from side offset 0, in file order (only batches
larger than the 61-byte header; `sidepack` may have packed them to the records that may be kept
and each batch's last, in the same order). The kernel reads only the kept records, at the positions the
scan's record columns give (no walk over the dropped ones), and checks every region against those
columns (first key position, the last record's headers ending exactly at the region's end, every
kept record inside it), so a change of that layout fails loudly.

`rebuild_records` (numba) and `rebuild_records_py` (plain Python reference, which walks the regions
itself instead of reading the columns) share one signature. This module is their Python-facing
entry; the compiled kernel is in `rebuild_kernels`, the twin in `rebuild_reference`, the headers
and sealing of the rebuilt batches in `rebuild_headers`.
"""

from __future__ import annotations

import numpy as np

from compaction.errors import RebuildError
from compaction.format.layout import MAGIC_V2, RECORD_BATCH_OVERHEAD
from compaction.kernels.buffers import POOL, POOLED_MIN_BYTES
from compaction.kernels.rebuild_headers import (
    HEADER_DTYPE,
    header_for,
    headers_for,
    seal,
    seal_all,
    seal_plain,
)
from compaction.kernels.rebuild_kernels import (
    ERR_LAYOUT,
    ERR_NAMES,
    NEEDS_FALLBACK,
    NO_HORIZON,
    SRC_FILE,
    SRC_NONE,
    SRC_SIDE,
    _rebuild_kernel,
    _region_ends,
    _u8,
    rebuild_error,
)
from compaction.kernels.rebuild_reference import rebuild_records_py
from compaction.kernels.scan import SegmentScan
from compaction.kernels.scan_columns import ERR_OK

__all__ = [
    "ERR_LAYOUT",
    "ERR_NAMES",
    "HEADER_DTYPE",
    "NEEDS_FALLBACK",
    "NO_HORIZON",
    "SRC_FILE",
    "SRC_NONE",
    "SRC_SIDE",
    "RebuildError",
    "header_for",
    "headers_for",
    "rebuild_records",
    "rebuild_records_py",
    "record_regions",
    "seal",
    "seal_all",
    "seal_plain",
]

MAX_GROWTH_PER_RECORD = 14  # timestampDelta may grow from 1 to 10 bytes, the length varint by <= 5


def record_regions(scan: SegmentScan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per batch of `scan`: (source SRC_FILE / SRC_SIDE / SRC_NONE for legacy, start, end) of its
    uncompressed records in `scan.file` or `scan.side` (see the module docstring)."""
    b = scan.batches
    n = len(b.position)
    src = np.full(n, SRC_NONE, dtype=np.int8)
    start = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    v2 = b.magic == MAGIC_V2
    codec = b.codec
    plain = v2 & (codec == 0)
    src[plain] = SRC_FILE
    start[plain] = b.position[plain] + RECORD_BATCH_OVERHEAD
    end[plain] = b.position[plain] + b.size[plain]
    empty_packed = v2 & (codec != 0) & (b.size <= RECORD_BATCH_OVERHEAD)
    src[empty_packed] = SRC_FILE
    start[empty_packed] = end[empty_packed] = b.position[empty_packed] + b.size[empty_packed]
    packed = np.flatnonzero(v2 & (codec != 0) & (b.size > RECORD_BATCH_OVERHEAD))
    if len(packed):
        bounds = np.searchsorted(scan.records.batch_index, np.arange(n + 1))
        s = np.empty(len(packed), dtype=np.int64)
        e = np.empty(len(packed), dtype=np.int64)
        r = scan.records
        bad = _region_ends(
            scan.side, bounds[packed], bounds[packed + 1], r.value_pos, r.value_len, scan.split, s, e
        )
        if bad >= 0:
            raise rebuild_error(ERR_LAYOUT, int(packed[bad]), -1)
        src[packed] = SRC_SIDE
        start[packed] = s
        end[packed] = e
    return src, start, end


def _capacity(start, end, count) -> int:
    return int(
        np.sum(np.asarray(end, dtype=np.int64) - np.asarray(start, dtype=np.int64))
    ) + MAX_GROWTH_PER_RECORD * int(np.sum(count))


def rebuild_records(
    file,
    side,
    src,
    start,
    end,
    count,
    keep,
    keep_start,
    base_ts,
    ts_type,
    max_ts,
    horizon,
    expect_key_pos,
    records,
    split,
    base_offset,
    room=0,
):
    """Re-encode the kept records of `len(src)` regions (numba).

    Per region i: records in `file` (src 0) or `side` (src 1) at [start[i], end[i]), exactly
    `count[i]` of them, which are records keep_start[i] + n of `records` (the scan's
    `RecordColumns`, positions in its combined address space: side positions start at `split`);
    `keep[keep_start[i] + n]` says whether record n is kept; the original batch's `base_ts`,
    `ts_type` (1 = LogAppendTime), `max_ts`, `base_offset`; `horizon` (-1 = none) is the delete
    horizon the rebuilt batch carries; `expect_key_pos` (-1 = unchecked) the position of the first
    record's key in its buffer as the scan found it. Only the kept records are read, at the
    positions `records` gives; the region is checked against them (first key, end of the last
    record's headers).

    Returns (payload uint8 array, out_start, out_end, new_base_ts, new_max_ts, kept, flags): region
    i's new records are payload[out_start[i]:out_end[i]]; flags[i] = NEEDS_FALLBACK when a header key
    is not valid UTF-8 (then use build_batch for that batch). `room` bytes are left free before each
    region's records (`seal_plain` writes the batch header there). Raises RebuildError on
    malformed input.
    """
    n = len(src)
    args = _arrays(
        file,
        side,
        src,
        start,
        end,
        count,
        keep,
        keep_start,
        base_ts,
        ts_type,
        max_ts,
        horizon,
        expect_key_pos,
    )
    i64 = np.int64
    cols = (
        np.int64(split),
        np.asarray(base_offset, dtype=i64),
        *(np.asarray(getattr(records, f), dtype=i64) for f in _RECORD_COLUMNS),
    )
    cap = _capacity(args[3], args[4], args[5]) + room * n
    out = POOL.take(cap) if cap >= POOLED_MIN_BYTES else np.empty(cap, dtype=np.uint8)
    res = [np.empty(n, dtype=np.int64) for _ in range(5)] + [np.empty(n, dtype=np.int8)]
    err, index, position = _rebuild_kernel(*args, *cols, out, *res, np.int64(room))
    if err != ERR_OK:
        raise rebuild_error(int(err), int(index), int(position))
    used = int(res[1][-1]) if n else 0
    return (out[:used], *res)


_RECORD_COLUMNS = ("offset", "timestamp", "key_pos", "key_len", "value_pos", "value_len")


def _arrays(
    file, side, src, start, end, count, keep, keep_start, base_ts, ts_type, max_ts, horizon, expect_key_pos
):
    i64 = np.int64
    return (
        _u8(file),
        _u8(side),
        np.asarray(src, dtype=np.int8),
        np.asarray(start, dtype=i64),
        np.asarray(end, dtype=i64),
        np.asarray(count, dtype=i64),
        np.asarray(keep, dtype=np.bool_),
        np.asarray(keep_start, dtype=i64),
        np.asarray(base_ts, dtype=i64),
        np.asarray(ts_type, dtype=np.int8),
        np.asarray(max_ts, dtype=i64),
        np.asarray(horizon, dtype=i64),
        np.asarray(expect_key_pos, dtype=i64),
    )
