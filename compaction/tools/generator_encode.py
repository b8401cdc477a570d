"""Fast encoder for the generator's uncompressed v2 batches (numba).

The generator must write ~1 GB in well under a minute, and building `Record` objects for
`format.batch_build.build_batch` costs several microseconds per record. So uncompressed data batches
are laid out by one compiled loop straight from the generator's columnar plan. The bytes must be
exactly what `build_batch` produces for the same records: tests/unit/test_generator.py checks that,
so `build_batch` stays the reference and this is only a faster way to the same bytes.

Records are described by columns, not bytes: the key of record i is `key-<key_id zero padded>`
(`key_size` bytes in all), its value is `pool[value_pos : value_pos + value_len]` (-1 = null
value, a tombstone), and header j is `("h<j>", pool[value_pos + j : value_pos + j + 8])`.
The CRC is left zero here and filled by `fill_crcs` (the crc32c package is faster than numba).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from compaction.format.layout import (
    ATTRIBUTES_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
)
from compaction.kernels.varints import _varint_size, _write_varlong
from compaction.tools.generator_plan import HEADER_VALUE_SIZE


@njit(cache=True, inline="always")
def _write_be(out, pos, v, width):
    for i in range(width):
        out[pos + width - 1 - i] = np.uint8((v >> (8 * i)) & 0xFF)
    return pos + width


@njit(cache=True, inline="always")
def _decimal_width(v):
    n = 1
    while v >= 10:
        v //= 10
        n += 1
    return n


@njit(cache=True, inline="always")
def _write_key(out, pos, key_id, key_size):
    out[pos] = 107  # k
    out[pos + 1] = 101  # e
    out[pos + 2] = 121  # y
    out[pos + 3] = 45  # -
    v = key_id
    for i in range(key_size - 1, 3, -1):
        out[pos + i] = np.uint8(48 + v % 10)
        v //= 10
    return pos + key_size


@njit(cache=True, inline="always")
def _headers_size(n_headers):
    size = _varint_size(n_headers)
    for j in range(n_headers):
        name_len = 1 + _decimal_width(j)
        size += _varint_size(name_len) + name_len + _varint_size(8) + 8
    return size


@njit(cache=True, inline="always")
def _write_headers(out, pos, n_headers, pool, value_pos):
    pos = _write_varlong(out, pos, n_headers)
    for j in range(n_headers):
        w = _decimal_width(j)
        pos = _write_varlong(out, pos, 1 + w)
        out[pos] = 104  # h
        v = j
        for i in range(w, 0, -1):
            out[pos + i] = np.uint8(48 + v % 10)
            v //= 10
        pos += 1 + w
        pos = _write_varlong(out, pos, 8)
        out[pos : pos + 8] = pool[value_pos + j : value_pos + j + 8]
        pos += 8
    return pos


@njit(cache=True)
def _write_record(out, pos, ts_delta, off_delta, key_id, key_size, vpos, vlen, pool, n_headers, hsize):
    body = 1 + _varint_size(ts_delta) + _varint_size(off_delta)
    body += _varint_size(key_size) + key_size + _varint_size(vlen) + max(vlen, 0) + hsize
    pos = _write_varlong(out, pos, body)
    out[pos] = 0  # record attributes: always 0 (docs/kafka-rules.md#v2-records)
    pos = _write_varlong(out, pos + 1, ts_delta)
    pos = _write_varlong(out, pos, off_delta)
    pos = _write_varlong(out, pos, key_size)
    pos = _write_key(out, pos, key_id, key_size)
    pos = _write_varlong(out, pos, vlen)
    if vlen > 0:
        out[pos : pos + vlen] = pool[vpos : vpos + vlen]
        pos += vlen
    return _write_headers(out, pos, n_headers, pool, vpos)


@njit(cache=True)
def encode_records(out, pos, first, count, base_ts, rec_ts, key_id, key_size, vpos, vlen, pool, n_headers):
    """Concatenated v2 records of rec[first:first+count] at out[pos:]; returns the end position.

    Also used on its own for compressed batches (the record stream that gets compressed)."""
    hsize = _headers_size(n_headers)
    for r in range(first, first + count):
        pos = _write_record(
            out,
            pos,
            rec_ts[r] - base_ts,
            r - first,
            key_id[r],
            key_size,
            vpos[r],
            vlen[r],
            pool,
            n_headers,
            hsize,
        )
    return pos


@njit(cache=True)
def _write_header(out, pos, end, base_offset, ple, attributes, count, base_ts, max_ts, pid, epoch, seq):
    _write_be(out, pos, base_offset, 8)
    _write_be(out, pos + LENGTH_OFFSET, end - pos - LOG_OVERHEAD, 4)
    _write_be(out, pos + PARTITION_LEADER_EPOCH_OFFSET, ple, 4)
    out[pos + MAGIC_OFFSET] = MAGIC_V2
    _write_be(out, pos + CRC_OFFSET, 0, 4)  # filled by fill_crcs
    _write_be(out, pos + ATTRIBUTES_OFFSET, attributes, 2)
    _write_be(out, pos + LAST_OFFSET_DELTA_OFFSET, count - 1, 4)
    _write_be(out, pos + BASE_TIMESTAMP_OFFSET, base_ts, 8)
    _write_be(out, pos + MAX_TIMESTAMP_OFFSET, max_ts, 8)
    _write_be(out, pos + PRODUCER_ID_OFFSET, pid, 8)
    _write_be(out, pos + PRODUCER_EPOCH_OFFSET, epoch, 2)
    _write_be(out, pos + BASE_SEQUENCE_OFFSET, seq, 4)
    _write_be(out, pos + RECORDS_COUNT_OFFSET, count, 4)


@njit(cache=True)
def encode_batches(
    out,
    b_first,
    b_count,
    b_base_offset,
    b_attr,
    b_ple,
    b_pid,
    b_epoch,
    b_seq,
    rec_ts,
    key_id,
    key_size,
    vpos,
    vlen,
    pool,
    n_headers,
    b_pos,
):
    """Write whole uncompressed v2 batches (CRC zero) back to back; b_pos[i] gets batch i's start.

    Record offsets inside a batch are contiguous (offsetDelta = index in the batch), as a producer
    writes them. Returns the end position."""
    pos = 0
    for b in range(b_first.shape[0]):
        first = b_first[b]
        count = b_count[b]
        base_ts = rec_ts[first]
        max_ts = rec_ts[first]
        for r in range(first, first + count):
            max_ts = max(max_ts, rec_ts[r])
        b_pos[b] = pos
        end = encode_records(
            out,
            pos + RECORD_BATCH_OVERHEAD,
            first,
            count,
            base_ts,
            rec_ts,
            key_id,
            key_size,
            vpos,
            vlen,
            pool,
            n_headers,
        )
        _write_header(
            out,
            pos,
            end,
            b_base_offset[b],
            b_ple[b],
            b_attr[b],
            count,
            base_ts,
            max_ts,
            b_pid[b],
            b_epoch[b],
            b_seq[b],
        )
        pos = end
    return pos


def records_upper_bound(vlen: np.ndarray, key_size: int, n_headers: int) -> int:
    """Bytes enough for the records `vlen` describes (varints at their widest)."""
    per_record = 5 + 1 + 10 + 5 + key_size + 5 + 5 + n_headers * (5 + 12 + 5 + HEADER_VALUE_SIZE)
    return int(np.clip(vlen, 0, None).sum()) + len(vlen) * per_record
