"""The rebuild's compiled kernel: the kept records of many v2 batches re-encoded in one call.

`_rebuild_kernel` reads only the kept records, at the positions the scan's record columns give,
and checks every region against them; `_region_ends` chains the side regions of compressed
batches. Errors come back as a code, a batch index and a byte position (`RebuildError`), never as
an exception from inside the kernel. See `rebuild.py` for what a rebuilt batch looks like.
"""

from __future__ import annotations

import numpy as np

from compaction.errors import RebuildError
from compaction.format.layout import LOG_APPEND_TIME
from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.memops import memcpy_at
from compaction.kernels.scan_columns import ERR_OK
from compaction.kernels.scan_kernels import _read_varint, _skip_headers
from compaction.kernels.varints import _varint32_size, _varint_size, _write_varint, _write_varlong

SRC_NONE, SRC_FILE, SRC_SIDE = -1, 0, 1
NO_HORIZON = -1
NEEDS_FALLBACK = 1  # per-batch flag: a header key is not valid UTF-8, use build_batch
ERR_LAYOUT = 20  # a region does not match the scan's record columns (count, end or first key position)
ERR_NAMES = {ERR_LAYOUT: "record region does not match the scanned records"}


def rebuild_error(code: int, index: int, position: int) -> RebuildError:
    """The typed error of a kernel's error code, in batch `index` at byte `position`."""
    return RebuildError(code, index, position, ERR_NAMES.get(code, "malformed record"))


def _u8(buf) -> np.ndarray:
    if isinstance(buf, np.ndarray) and buf.dtype == np.uint8:
        return buf
    return np.frombuffer(buf, dtype=np.uint8)


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
def _rebuild_one(
    buf,
    shift,
    start,
    stop,
    first,
    count,
    keep,
    log_append,
    max_ts,
    horizon,
    base_offset,
    r_off,
    r_ts,
    r_kp,
    r_kl,
    r_vp,
    r_vl,
    out,
    o,
):
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
        body = (
            1
            + _varint_size(tsd)
            + _varint32_size(off_delta)
            + _varint32_size(kl)
            + klen
            + _varint32_size(vl)
            + vlen
            + hsize
        )
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
def _rebuild_kernel(
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
    split,
    base_offset,
    r_off,
    r_ts,
    r_kp,
    r_kl,
    r_vp,
    r_vl,
    out,
    out_start,
    out_end,
    out_base_ts,
    out_max_ts,
    out_count,
    flags,
    room,
):
    file, side, keep, out = borrow(file), borrow(side), borrow(keep), borrow(out)
    r_off, r_ts, r_kp, r_kl = borrow(r_off), borrow(r_ts), borrow(r_kp), borrow(r_kl)
    r_vp, r_vl = borrow(r_vp), borrow(r_vl)
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
        o += room
        out_start[i] = o
        err, err_pos, o, nb, nm, kept, fallback = _rebuild_one(
            buf,
            shift,
            pos,
            stop,
            first,
            count[i],
            keep,
            ts_type[i] == LOG_APPEND_TIME,
            max_ts[i],
            horizon[i],
            base_offset[i],
            r_off,
            r_ts,
            r_kp,
            r_kl,
            r_vp,
            r_vl,
            out,
            o,
        )
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
    side = borrow(side)
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
