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
itself instead of reading the columns) share one signature.
"""

from __future__ import annotations


import crc32c as _crc32c
import numpy as np

from compaction.runtime.buffers import POOL, POOLED_MIN_BYTES
from compaction.format import batch as fb
from compaction.format import compression
from compaction.kernels.jit import njit as _njit
from compaction.kernels.memops import memcpy_at
from compaction.kernels.scan import (
    ERR_OK,
    ERR_RECORD_SIZE,
    LOG_APPEND_TIME,
    V2_HEADER_SIZE,
    SegmentScan,
    _read_varint,
    _skip_headers,
)

SRC_NONE, SRC_FILE, SRC_SIDE = -1, 0, 1
NO_HORIZON = -1
NEEDS_FALLBACK = 1  # per-batch flag: a header key is not valid UTF-8, use build_batch
ERR_LAYOUT = 20  # a region does not match the scan's record columns (count, end or first key position)
ERR_NAMES = {ERR_LAYOUT: "record region does not match the scanned records"}
MAX_GROWTH_PER_RECORD = 14  # timestampDelta may grow from 1 to 10 bytes, the length varint by <= 5

# ====================================================================================================
# numba helpers
# ====================================================================================================


@_njit
def _varint_size(v):
    """Bytes of the zig-zag varint of an int32 (or of a varlong: same formula on int64)."""
    z = np.uint64((np.int64(v) << 1) ^ (np.int64(v) >> 63))
    n = 1
    while z >= np.uint64(0x80):
        z >>= np.uint64(7)
        n += 1
    return n


@_njit
def _zigzag32(v):
    """Zig-zag of an int32 value as Java computes it: only the low 32 bits are kept."""
    return np.uint64(((np.int64(v) << 1) ^ (np.int64(v) >> 31)) & 0xFFFFFFFF)


@_njit
def _write_unsigned(out, pos, z):
    while z >= np.uint64(0x80):
        out[pos] = np.uint8((z & np.uint64(0x7F)) | np.uint64(0x80))
        z >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(z)
    return pos + 1


@_njit
def _write_varint(out, pos, v):
    return _write_unsigned(out, pos, _zigzag32(v))


@_njit
def _write_varlong(out, pos, v):
    return _write_unsigned(out, pos, np.uint64((np.int64(v) << 1) ^ (np.int64(v) >> 63)))


@_njit
def _varint32_size(v):
    z = _zigzag32(v)
    n = 1
    while z >= np.uint64(0x80):
        z >>= np.uint64(7)
        n += 1
    return n


@_njit
def _valid_utf8(buf, pos, n):
    """What Python's strict UTF-8 decoder accepts (no overlongs, no surrogates, <= U+10FFFF)."""
    i = pos
    end = pos + n
    while i < end:
        c = buf[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            need, lo, hi = 1, 0x80, 0xBF
        elif c == 0xE0:
            need, lo, hi = 2, 0xA0, 0xBF
        elif 0xE1 <= c <= 0xEC or c == 0xEE or c == 0xEF:
            need, lo, hi = 2, 0x80, 0xBF
        elif c == 0xED:
            need, lo, hi = 2, 0x80, 0x9F
        elif c == 0xF0:
            need, lo, hi = 3, 0x90, 0xBF
        elif 0xF1 <= c <= 0xF3:
            need, lo, hi = 3, 0x80, 0xBF
        elif c == 0xF4:
            need, lo, hi = 3, 0x80, 0x8F
        else:
            return False
        if i + need >= end:  # the continuation bytes run past the key
            return False
        b = buf[i + 1]
        if b < lo or b > hi:
            return False
        for k in range(2, need + 1):
            b = buf[i + k]
            if b < 0x80 or b > 0xBF:
                return False
        i += need + 1
    return True


@_njit
def _headers_canonical_size(buf, pos, end):
    """(size of the headers re-encoded with shortest varints, all header keys valid UTF-8) for the
    headers at buf[pos:end] (already validated by the scan)."""
    if buf[pos] == 0 and end == pos + 1:
        return 1, True
    count, p = _read_varint(buf, pos, end)
    size = _varint32_size(count)
    ok = True
    for _ in range(count):
        klen, p = _read_varint(buf, p, end)
        if not _valid_utf8(buf, p, klen):
            ok = False
        size += _varint32_size(klen) + klen
        p += klen
        vlen, p = _read_varint(buf, p, end)
        size += _varint32_size(vlen)
        if vlen > 0:
            size += vlen
            p += vlen
    return size, ok


@_njit
def _write_headers(out, o, buf, pos, end, canonical_size):
    """Copy the headers verbatim when they already use shortest varints, else re-encode them."""
    if canonical_size == end - pos:
        memcpy_at(out, o, buf, pos, canonical_size)
        return o + canonical_size
    count, p = _read_varint(buf, pos, end)
    o = _write_varint(out, o, count)
    for _ in range(count):
        klen, p = _read_varint(buf, p, end)
        o = _write_varint(out, o, klen)
        memcpy_at(out, o, buf, p, klen)
        o += klen
        p += klen
        vlen, p = _read_varint(buf, p, end)
        o = _write_varint(out, o, vlen)
        if vlen > 0:
            memcpy_at(out, o, buf, p, vlen)
            o += vlen
            p += vlen
    return o


@_njit
def _batch_layout_ok(buf, shift, start, stop, first, count, expect_key_pos, r_kp, r_vp, r_vl):
    """The scan's columns fit the region: its first key where `expect_key_pos` says (when >= 0)
    and the last record's headers ending exactly at the region's end."""
    if count == 0:
        return start == stop
    if expect_key_pos >= 0 and r_kp[first] - shift != expect_key_pos:
        return False
    last = first + count - 1
    hpos = r_vp[last] - shift + max(r_vl[last], 0)
    return start <= hpos < stop and _skip_headers(buf, hpos, stop) == stop


@_njit
def _rebuild_one(buf, shift, start, stop, first, count, keep, log_append, max_ts, horizon, base_offset, r_off,
                 r_ts, r_kp, r_kl, r_vp, r_vl, out, o):  # fmt: skip
    """Re-encode the kept records of one batch into out[o:], reading them where the scan's columns
    put them (buffer position = column position - shift). Dropped records (most of them, in a first
    clean) are not read at all: walking from record to record was a chain of cache misses, each
    record's length giving the next one's address. Returns (err, err pos, new end, new base ts,
    new max ts, kept, needs fallback)."""
    z = np.int64(0)
    new_base = horizon
    new_max = np.int64(-1)
    kept = 0
    fallback = False
    for r in range(first, first + count):
        if not keep[r]:
            continue
        kp, kl, vp, vl = r_kp[r] - shift, r_kl[r], r_vp[r] - shift, r_vl[r]
        hpos = vp + max(vl, 0)
        if kp < start or hpos >= stop:
            return ERR_LAYOUT, kp, o, z, z, kept, fallback
        hend = _skip_headers(buf, hpos, stop)
        if hend < 0:
            return ERR_LAYOUT, hpos, o, z, z, kept, fallback
        ts = max_ts if log_append else r_ts[r]
        if kept == 0 and horizon < 0:
            new_base = ts
        if ts > new_max:
            new_max = ts
        hsize, utf8_ok = _headers_canonical_size(buf, hpos, hend)
        if not utf8_ok:
            fallback = True
        tsd = ts - new_base
        off_delta = r_off[r] - base_offset
        klen = max(kl, 0)
        vlen = max(vl, 0)
        body = (1 + _varint_size(tsd) + _varint32_size(off_delta) + _varint32_size(kl) + klen
                + _varint32_size(vl) + vlen + hsize)  # fmt: skip
        o = _write_varint(out, o, body)
        out[o] = 0
        o = _write_varlong(out, o + 1, tsd)
        o = _write_varint(out, o, off_delta)
        o = _write_varint(out, o, kl)
        memcpy_at(out, o, buf, kp, klen)
        o += klen
        o = _write_varint(out, o, vl)
        memcpy_at(out, o, buf, vp, vlen)
        o += vlen
        o = _write_headers(out, o, buf, hpos, hend, hsize)
        kept += 1
    if log_append:
        new_max = max_ts
    return ERR_OK, -1, o, new_base, new_max, kept, fallback


@_njit
def _rebuild_kernel(file, side, src, start, end, count, keep, keep_start, base_ts, ts_type, max_ts, horizon,
                    expect_key_pos, split, base_offset, r_off, r_ts, r_kp, r_kl, r_vp, r_vl, out, out_start, out_end,
                    out_base_ts, out_max_ts, out_count, flags):  # fmt: skip
    o = 0
    for i in range(len(src)):
        side_src = src[i] != SRC_FILE
        buf = side if side_src else file
        shift = split if side_src else 0
        pos, stop = start[i], end[i]
        if pos < 0 or stop > len(buf) or pos > stop:
            return ERR_LAYOUT, i, pos
        first = keep_start[i]
        if not _batch_layout_ok(buf, shift, pos, stop, first, count[i], expect_key_pos[i], r_kp, r_vp, r_vl):
            return ERR_LAYOUT, i, pos
        out_start[i] = o
        err, err_pos, o, nb, nm, kept, fallback = _rebuild_one(
            buf, shift, pos, stop, first, count[i], keep, ts_type[i] == LOG_APPEND_TIME, max_ts[i], horizon[i],
            base_offset[i], r_off, r_ts, r_kp, r_kl, r_vp, r_vl, out, o)  # fmt: skip
        if err != ERR_OK:
            return err, i, err_pos
        out_end[i] = o
        out_base_ts[i] = nb
        out_max_ts[i] = nm
        out_count[i] = kept
        flags[i] = NEEDS_FALLBACK if fallback else 0
    return ERR_OK, -1, -1


@_njit
def _region_ends(side, first_rec, last_rec, value_pos, value_len, split, starts, ends):
    """Chain the side regions of compressed batches: each starts where the previous one ended; a
    region ends after the headers of its last record (value end + headers)."""
    at = np.int64(0)
    for j in range(len(first_rec)):
        starts[j] = at
        if last_rec[j] > first_rec[j]:
            r = last_rec[j] - 1
            p = value_pos[r] - split + max(value_len[r], 0)
            q = _skip_headers(side, p, len(side))
            if q < 0:
                return j
            at = q
        ends[j] = at
    return -1


# ====================================================================================================
# public API
# ====================================================================================================


class RebuildError(ValueError):
    """The kernel could not re-encode a region (`code`, batch `index`, byte `position`)."""

    def __init__(self, code: int, index: int, position: int) -> None:
        super().__init__(f"rebuild error {code} ({ERR_NAMES.get(code, 'malformed record')}) in batch "
                         f"{index} at byte {position}")  # fmt: skip
        self.code, self.index, self.position = code, index, position


def record_regions(scan: SegmentScan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per batch of `scan`: (source SRC_FILE / SRC_SIDE / SRC_NONE for legacy, start, end) of its
    uncompressed records in `scan.file` or `scan.side` (see the module docstring)."""
    b = scan.batches
    n = len(b.position)
    src = np.full(n, SRC_NONE, dtype=np.int8)
    start = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    v2 = b.magic == 2
    codec = b.codec
    plain = v2 & (codec == 0)
    src[plain] = SRC_FILE
    start[plain] = b.position[plain] + V2_HEADER_SIZE
    end[plain] = b.position[plain] + b.size[plain]
    empty_packed = v2 & (codec != 0) & (b.size <= V2_HEADER_SIZE)
    src[empty_packed] = SRC_FILE
    start[empty_packed] = end[empty_packed] = b.position[empty_packed] + b.size[empty_packed]
    packed = np.flatnonzero(v2 & (codec != 0) & (b.size > V2_HEADER_SIZE))
    if len(packed):
        bounds = np.searchsorted(scan.records.batch_index, np.arange(n + 1))
        s = np.empty(len(packed), dtype=np.int64)
        e = np.empty(len(packed), dtype=np.int64)
        r = scan.records
        bad = _region_ends(scan.side, bounds[packed], bounds[packed + 1], r.value_pos, r.value_len,
                           scan.split, s, e)  # fmt: skip
        if bad >= 0:
            raise RebuildError(ERR_LAYOUT, int(packed[bad]), -1)
        src[packed] = SRC_SIDE
        start[packed] = s
        end[packed] = e
    return src, start, end


def _capacity(start, end, count) -> int:
    return int(np.sum(np.asarray(end, dtype=np.int64) - np.asarray(start, dtype=np.int64))) + \
        MAX_GROWTH_PER_RECORD * int(np.sum(count))


def rebuild_records(file, side, src, start, end, count, keep, keep_start, base_ts, ts_type, max_ts, horizon,
                    expect_key_pos, records, split, base_offset):  # fmt: skip
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
    is not valid UTF-8 (then use build_batch for that batch). Raises RebuildError on malformed input.
    """
    n = len(src)
    args = _arrays(file, side, src, start, end, count, keep, keep_start, base_ts, ts_type, max_ts, horizon,
                   expect_key_pos)  # fmt: skip
    i64 = np.int64
    cols = (np.int64(split), np.asarray(base_offset, dtype=i64),
            *(np.asarray(getattr(records, f), dtype=i64) for f in _RECORD_COLUMNS))  # fmt: skip
    cap = _capacity(args[3], args[4], args[5])
    out = POOL.take(cap) if cap >= POOLED_MIN_BYTES else np.empty(cap, dtype=np.uint8)
    res = [np.empty(n, dtype=np.int64) for _ in range(5)] + [np.empty(n, dtype=np.int8)]
    err, index, position = _rebuild_kernel(*args, *cols, out, *res)
    if err != ERR_OK:
        raise RebuildError(int(err), int(index), int(position))
    used = int(res[1][-1]) if n else 0
    return (out[:used], *res)


_RECORD_COLUMNS = ("offset", "timestamp", "key_pos", "key_len", "value_pos", "value_len")


def _arrays(file, side, src, start, end, count, keep, keep_start, base_ts, ts_type, max_ts, horizon,
            expect_key_pos):  # fmt: skip
    i64 = np.int64
    return (
        _u8(file), _u8(side), np.asarray(src, dtype=np.int8), np.asarray(start, dtype=i64),
        np.asarray(end, dtype=i64), np.asarray(count, dtype=i64), np.asarray(keep, dtype=np.bool_),
        np.asarray(keep_start, dtype=i64), np.asarray(base_ts, dtype=i64), np.asarray(ts_type, dtype=np.int8),
        np.asarray(max_ts, dtype=i64), np.asarray(horizon, dtype=i64), np.asarray(expect_key_pos, dtype=i64),
    )  # fmt: skip


def _u8(buf) -> np.ndarray:
    if isinstance(buf, np.ndarray) and buf.dtype == np.uint8:
        return buf
    return np.frombuffer(buf, dtype=np.uint8)


def rebuild_records_py(file, side, src, start, end, count, keep, keep_start, base_ts, ts_type, max_ts,
                       horizon, expect_key_pos, records=None, split=None, base_offset=None):  # fmt: skip
    """Plain-Python reference of `rebuild_records` (same signature, same results): it walks each
    region record by record, decoding every record into a `format.batch.Record`, and encodes the
    kept ones with `encode_record`, i.e. exactly what `build_batch` does with them. It does not
    read the scan's columns (`records`, `split`, `base_offset`): the kernel, which does, is checked
    against the bytes themselves."""
    file, side = bytes(_u8(file)), bytes(_u8(side))
    n = len(src)
    payload = bytearray()
    out_start, out_end, new_base, new_max, kept_n = (np.zeros(n, dtype=np.int64) for _ in range(5))
    flags = np.zeros(n, dtype=np.int8)
    for i in range(n):
        buf = file if int(src[i]) == SRC_FILE else side
        pos, stop = int(start[i]), int(end[i])
        if pos < 0 or stop > len(buf) or pos > stop:
            raise RebuildError(ERR_LAYOUT, i, pos)
        view = memoryview(buf)[:stop]
        log_append = int(ts_type[i]) == LOG_APPEND_TIME
        records = []
        for r in range(int(count[i])):
            try:
                record, key_pos, utf8_ok, nxt = _py_record(view, pos, int(base_ts[i]))
            except (ValueError, IndexError) as e:  # CorruptRecordError is a ValueError
                raise RebuildError(ERR_RECORD_SIZE, i, pos) from e
            if r == 0 and int(expect_key_pos[i]) >= 0 and key_pos != int(expect_key_pos[i]):
                raise RebuildError(ERR_LAYOUT, i, pos)
            if log_append:
                record.timestamp = int(max_ts[i])
            if keep[int(keep_start[i]) + r]:
                records.append(record)
                if not utf8_ok:
                    flags[i] = NEEDS_FALLBACK
            pos = nxt
        if pos != stop:
            raise RebuildError(ERR_LAYOUT, i, pos)
        h = int(horizon[i])
        base = h if h >= 0 else (records[0].timestamp if records else h)
        out_start[i] = len(payload)
        for record in records:
            fb.encode_record(payload, record, record.offset, record.timestamp - base)
        out_end[i] = len(payload)
        new_base[i] = base
        new_max[i] = int(max_ts[i]) if log_append else max([-1, *(r.timestamp for r in records)])
        kept_n[i] = len(records)
    return np.frombuffer(bytes(payload), dtype=np.uint8), out_start, out_end, new_base, new_max, kept_n, flags


def _py_record(view, pos: int, base_ts: int) -> tuple[fb.Record, int, bool, int]:
    """(Record with offset = offsetDelta, key position, header keys valid UTF-8, next position)."""
    from compaction.errors import CorruptRecordError
    from compaction.format.varint import read_varint, read_varlong

    length, p = read_varint(view, pos)
    body_end = p + length
    if length < 0 or body_end > len(view):
        raise CorruptRecordError("record runs past the region")
    body = view[:body_end]
    ts_delta, p = read_varlong(body, p + 1)
    off_delta, p = read_varint(body, p)
    key_len, p = read_varint(body, p)
    key_pos = p
    key, p = fb._read_bytes(body, p, key_len, "key")
    value_len, p = read_varint(body, p)
    value, p = fb._read_bytes(body, p, value_len, "value")
    count, p = read_varint(body, p)
    headers, utf8_ok = [], True
    for _ in range(count):
        hk_len, p = read_varint(body, p)
        name, p = fb._read_bytes(body, p, hk_len, "header key")
        hv_len, p = read_varint(body, p)
        hvalue, p = fb._read_bytes(body, p, hv_len, "header value")
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            text, utf8_ok = name.decode("utf-8", errors="replace"), False
        headers.append((text, hvalue))
    if p != body_end:
        raise CorruptRecordError("record fields do not end at its length")
    return fb.Record(off_delta, base_ts + ts_delta, key, value, tuple(headers)), key_pos, utf8_ok, p


# ====================================================================================================
# whole batches
# ====================================================================================================


def header_for(*, base_offset: int, partition_leader_epoch: int, attributes: int, last_offset_delta: int,
               base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
               base_sequence: int, records_count: int, horizon: int) -> fb.BatchHeader:  # fmt: skip
    """The rebuilt batch's header fields (batch_length and crc filled by `seal`). `attributes` are
    the original ones: codec, timestamp type, transactional and control bits are kept; the
    delete-horizon bit is set when `horizon >= 0` (or was already set)."""
    attrs = attributes & (fb.COMPRESSION_CODEC_MASK | fb.TIMESTAMP_TYPE_MASK | fb.TRANSACTIONAL_MASK
                          | fb.CONTROL_MASK | fb.DELETE_HORIZON_MASK)  # fmt: skip
    if horizon >= 0:
        attrs |= fb.DELETE_HORIZON_MASK
    return fb.BatchHeader(base_offset, 0, partition_leader_epoch, fb.MAGIC_V2, 0, attrs, last_offset_delta,
                          base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
                          records_count)  # fmt: skip


# The v2 batch header as a packed big-endian numpy record (same fields and order as
# batch.BATCH_HEADER), so the headers of all rebuilt batches of a segment are filled at once.
HEADER_DTYPE = np.dtype(
    [("base_offset", ">i8"), ("batch_length", ">i4"), ("partition_leader_epoch", ">i4"), ("magic", "i1"),
     ("crc", ">u4"), ("attributes", ">i2"), ("last_offset_delta", ">i4"), ("base_timestamp", ">i8"),
     ("max_timestamp", ">i8"), ("producer_id", ">i8"), ("producer_epoch", ">i2"), ("base_sequence", ">i4"),
     ("records_count", ">i4")]
)  # fmt: skip
assert HEADER_DTYPE.itemsize == fb.RECORD_BATCH_OVERHEAD
_KEPT_ATTRS = (fb.COMPRESSION_CODEC_MASK | fb.TIMESTAMP_TYPE_MASK | fb.TRANSACTIONAL_MASK | fb.CONTROL_MASK
               | fb.DELETE_HORIZON_MASK)  # fmt: skip


def headers_for(*, base_offset, partition_leader_epoch, attributes, last_offset_delta, base_timestamp,
                max_timestamp, producer_id, producer_epoch, base_sequence, records_count, horizon) -> np.ndarray:  # fmt: skip
    """`header_for` over arrays (one element per rebuilt batch): a HEADER_DTYPE array whose
    batch_length and crc `seal_all` fills."""
    h = np.zeros(len(base_offset), HEADER_DTYPE)
    attrs = np.asarray(attributes, np.int64) & _KEPT_ATTRS
    attrs = np.where(np.asarray(horizon) >= 0, attrs | fb.DELETE_HORIZON_MASK, attrs)
    for name, values in (("base_offset", base_offset), ("partition_leader_epoch", partition_leader_epoch),
                         ("attributes", attrs), ("last_offset_delta", last_offset_delta),
                         ("base_timestamp", base_timestamp), ("max_timestamp", max_timestamp),
                         ("producer_id", producer_id), ("producer_epoch", producer_epoch),
                         ("base_sequence", base_sequence), ("records_count", records_count)):  # fmt: skip
        h[name] = values
    h["magic"] = fb.MAGIC_V2
    return h


def seal_all(headers: np.ndarray, payload, starts, ends, codecs) -> list[list]:
    """`seal` for every header of `headers_for`: [header bytes, payload] per batch, the records of
    batch j being payload[starts[j]:ends[j]], compressed with codecs[j]."""
    raw = headers.view(np.uint8).reshape(len(headers), fb.RECORD_BATCH_OVERHEAD)
    view = memoryview(payload)
    out = []
    covered = fb.CRC_COVERED_FROM
    for j, (s, e, codec) in enumerate(zip(np.asarray(starts).tolist(), np.asarray(ends).tolist(),
                                          np.asarray(codecs).tolist())):  # fmt: skip
        records = view[s:e]
        if codec:
            body = compression.compress(codec, records, fb.MAGIC_V2)
        else:
            body = records
        head = raw[j]
        fb.BATCH_LENGTH_FIELD.pack_into(head, fb.LENGTH_OFFSET, fb.RECORD_BATCH_OVERHEAD - fb.LOG_OVERHEAD + len(body))
        crc = _crc32c.crc32c(body, _crc32c.crc32c(head[covered:]))
        fb.CRC_FIELD.pack_into(head, fb.CRC_OFFSET, crc)
        out.append([head.tobytes(), body])
    return out


def seal(header: fb.BatchHeader, records, codec: int) -> list:
    """[header bytes, payload] of the batch: payload compressed with `codec` (default level),
    batch_length and the CRC-32C over [21, end) filled in. The payload is not copied when
    uncompressed (a memoryview into the kernel's output)."""
    if codec:
        payload = compression.compress(codec, records, fb.MAGIC_V2)
    else:
        payload = memoryview(records)
    header.batch_length = fb.RECORD_BATCH_OVERHEAD - fb.LOG_OVERHEAD + len(payload)
    header.crc = 0
    head = bytearray(header.pack())
    header.crc = _crc32c.crc32c(payload, _crc32c.crc32c(memoryview(head)[fb.CRC_COVERED_FROM :]))
    fb.CRC_FIELD.pack_into(head, fb.CRC_OFFSET, header.crc)
    return [bytes(head), payload]
