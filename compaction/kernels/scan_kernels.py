"""The scan's compiled walk (numba): log entries -> batch columns, v2 records -> record columns.

* `_count_entries` / `_fill_entries`: the entries of a buffer, in Kafka's order of checks (see
  `format/segment.py`), and their header fields (legacy entries get the fields that exist);
* `_walk_kernel`: the v2 records of many record regions; malformed input comes back as an error code
  and a byte position, never as an exception from inside the kernel;
* `_read_varint`, `_read_varlong`, `_skip_headers`: the record-field readers, shared with
  `rebuild` and `sidepack`;
* `_gather_kernel`: keys copied into one contiguous column.

The offsets and masks come from `format/layout.py`; `scan_reference` holds the plain-Python twins.
"""

from __future__ import annotations

import numpy as np

from compaction.format.layout import (
    ATTRIBUTES_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    COMPRESSION_CODEC_MASK,
    CRC_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    LEGACY_ATTRIBUTES_OFFSET,
    LEGACY_CRC_OFFSET,
    LEGACY_TIMESTAMP_OFFSET,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    MIN_ENTRY_SIZE,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORD_OVERHEAD_V1,
    RECORDS_COUNT_OFFSET,
    SIZE_OFFSET,
)
from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.memops import copy_bytes, prefetch_ahead
from compaction.kernels.scan_columns import (
    CONTINUE,
    ERR_BAD_COUNT,
    ERR_BAD_REGION,
    ERR_BAD_VARINT,
    ERR_COUNT_MISMATCH,
    ERR_NEGATIVE_LENGTH,
    ERR_OK,
    ERR_RECORD_SIZE,
    ERR_TRUNCATED,
    LEGACY_COUNT_UNKNOWN,
    NO_LIMIT,
    STOP_CORRUPT,
    STOP_END,
    STOP_PARTIAL,
)


@_njit
def _be_int(buf, pos, width):
    """Signed big-endian integer of `width` bytes (2, 4 or 8)."""
    v = np.int64(0)
    for i in range(width):
        v = (v << 8) | np.int64(buf[pos + i])
    if width < 8:  # sign-extend; for width 8 the shifts already wrapped into the sign bit
        sign = np.int64(1) << (8 * width - 1)
        if v & sign:
            v -= sign << 1
    return v


@_njit
def _be_uint32(buf, pos):
    v = np.int64(0)
    for i in range(4):
        v = (v << 8) | np.int64(buf[pos + i])
    return v


@_njit
def _entry_at(buf, pos, end):
    """(stop reason or CONTINUE, entry size) for the entry at `pos` (docs/kafka-rules.md#log-file-parsing,
    Kafka's order)."""
    remaining = end - pos
    if remaining == 0:
        return STOP_END, 0
    if remaining < LOG_OVERHEAD:
        return STOP_PARTIAL, 0
    size = _be_int(buf, pos + SIZE_OFFSET, 4)
    if size < MIN_ENTRY_SIZE:
        return STOP_CORRUPT, 0
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return STOP_PARTIAL, 0
    magic = np.int64(buf[pos + MAGIC_OFFSET])
    if magic > MAGIC_V2:  # uint8 read: a negative int8 magic is > 127 here
        return STOP_CORRUPT, 0
    total = size + LOG_OVERHEAD
    if total > remaining:
        return STOP_PARTIAL, 0
    # A header that does not fit in its own declared size cannot be read at all.
    if magic == MAGIC_V2 and total < RECORD_BATCH_OVERHEAD:
        return STOP_CORRUPT, 0
    if magic == MAGIC_V1 and size < RECORD_OVERHEAD_V1:
        return STOP_CORRUPT, 0
    return CONTINUE, total


@_njit
def _count_entries(buf, start, end):
    buf = borrow(buf)
    pos = start
    n = 0
    ahead = pos
    while True:
        ahead = prefetch_ahead(buf, ahead, pos, end)
        reason, total = _entry_at(buf, pos, end)
        if reason != CONTINUE:
            return n, pos, reason
        n += 1
        pos += total


@_njit
def _fill_entries(
    buf,
    start,
    n,
    position,
    size,
    base_offset,
    last_offset,
    magic,
    attributes,
    ple,
    base_ts,
    max_ts,
    producer_id,
    producer_epoch,
    base_sequence,
    records_count,
    crc,
):
    buf = borrow(buf)
    pos = start
    ahead = pos
    for i in range(n):
        ahead = prefetch_ahead(buf, ahead, pos, len(buf))
        total = _be_int(buf, pos + SIZE_OFFSET, 4) + LOG_OVERHEAD
        m = buf[pos + MAGIC_OFFSET]
        off = _be_int(buf, pos, 8)
        position[i] = pos
        size[i] = total
        base_offset[i] = off
        magic[i] = m
        if m == MAGIC_V2:
            attributes[i] = _be_int(buf, pos + ATTRIBUTES_OFFSET, 2)
            last_offset[i] = off + _be_int(buf, pos + LAST_OFFSET_DELTA_OFFSET, 4)
            ple[i] = _be_int(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, 4)
            base_ts[i] = _be_int(buf, pos + BASE_TIMESTAMP_OFFSET, 8)
            max_ts[i] = _be_int(buf, pos + MAX_TIMESTAMP_OFFSET, 8)
            producer_id[i] = _be_int(buf, pos + PRODUCER_ID_OFFSET, 8)
            producer_epoch[i] = _be_int(buf, pos + PRODUCER_EPOCH_OFFSET, 2)
            base_sequence[i] = _be_int(buf, pos + BASE_SEQUENCE_OFFSET, 4)
            records_count[i] = _be_int(buf, pos + RECORDS_COUNT_OFFSET, 4)
            crc[i] = _be_uint32(buf, pos + CRC_OFFSET)
        else:
            attr = buf[pos + LEGACY_ATTRIBUTES_OFFSET]
            attributes[i] = attr
            last_offset[i] = off
            ple[i] = -1
            ts = _be_int(buf, pos + LEGACY_TIMESTAMP_OFFSET, 8) if m == MAGIC_V1 else -1
            base_ts[i] = ts
            max_ts[i] = ts
            producer_id[i] = -1
            producer_epoch[i] = -1
            base_sequence[i] = -1
            records_count[i] = 1 if (attr & COMPRESSION_CODEC_MASK) == 0 else LEGACY_COUNT_UNKNOWN
            crc[i] = _be_uint32(buf, pos + LEGACY_CRC_OFFSET)
        pos += total


@_njit
def _read_varint(buf, pos, end):
    """Zig-zag int32 varint as Kafka's ByteUtils.readVarint: (value, next pos) or (0, -error)."""
    if pos >= end:
        return np.int64(0), -ERR_TRUNCATED
    raw = np.int64(buf[pos])
    if raw < 0x80:  # fast path: most lengths and deltas fit in one byte
        return (raw >> 1) ^ -(raw & 1), pos + 1
    raw = np.int64(0)
    shift = 0
    while True:
        if pos >= end:
            return np.int64(0), -ERR_TRUNCATED
        b = np.int64(buf[pos])
        pos += 1
        if shift == 28:  # 5th byte: no continuation allowed; bits past 32 fall off (Java int shift)
            if b & 0x80:
                return np.int64(0), -ERR_BAD_VARINT
            raw = (raw | (b << 28)) & 0xFFFFFFFF
            break
        raw |= (b & 0x7F) << shift
        if (b & 0x80) == 0:
            break
        shift += 7
    return (raw >> 1) ^ -(raw & 1), pos


@_njit
def _read_varlong(buf, pos, end):
    """Zig-zag int64 varint as Kafka's ByteUtils.readVarlong: (value, next pos) or (0, -error)."""
    if pos >= end:
        return np.int64(0), -ERR_TRUNCATED
    raw = np.int64(buf[pos])
    if raw < 0x80:
        return (raw >> 1) ^ -(raw & 1), pos + 1
    raw = np.int64(0)
    shift = 0
    while True:
        if pos >= end:
            return np.int64(0), -ERR_TRUNCATED
        b = np.int64(buf[pos])
        pos += 1
        if shift == 63:  # 10th byte: only its lowest bit survives the int64 shift
            if b & 0x80:
                return np.int64(0), -ERR_BAD_VARINT
            raw |= b << 63
            break
        raw |= (b & 0x7F) << shift
        if (b & 0x80) == 0:
            break
        shift += 7
    # logical shift right by one (raw may be negative as a signed int64), then undo the zig-zag
    return ((raw >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(raw & 1), pos


@_njit
def _skip_headers(buf, pos, body_end):
    """Validate and skip a record's headers; returns next pos or -error."""
    if pos < body_end and buf[pos] == 0:  # no headers: the common case
        return pos + 1
    count, pos = _read_varint(buf, pos, body_end)
    if pos < 0:
        return pos if pos != -ERR_TRUNCATED else -ERR_RECORD_SIZE
    if count < 0:
        return -ERR_NEGATIVE_LENGTH
    for _ in range(count):
        klen, pos = _read_varint(buf, pos, body_end)
        if pos < 0:
            return pos if pos != -ERR_TRUNCATED else -ERR_RECORD_SIZE
        if klen < 0:
            return -ERR_NEGATIVE_LENGTH
        pos += klen
        if pos > body_end:
            return -ERR_RECORD_SIZE
        vlen, pos = _read_varint(buf, pos, body_end)
        if pos < 0:
            return pos if pos != -ERR_TRUNCATED else -ERR_RECORD_SIZE
        if vlen < -1:
            return -ERR_NEGATIVE_LENGTH
        if vlen > 0:
            pos += vlen
            if pos > body_end:
                return -ERR_RECORD_SIZE
    return pos


@_njit
def _read_record(buf, pos, end):
    """Parse one record at `pos`: (next pos or -error, ts_delta, off_delta, key_pos, key_len,
    value_pos, value_len)."""
    z = np.int64(0)
    length, p = _read_varint(buf, pos, end)
    if p < 0:
        return p, z, z, z, z, z, z
    if length < 0:
        return np.int64(-ERR_NEGATIVE_LENGTH), z, z, z, z, z, z
    body_end = p + length
    if body_end > end:
        return np.int64(-ERR_TRUNCATED), z, z, z, z, z, z
    # Inside the body every overrun means the declared length is wrong (Kafka: "Invalid record size").
    if p >= body_end:
        return np.int64(-ERR_RECORD_SIZE), z, z, z, z, z, z
    p += 1  # record attributes: unused by Kafka
    ts_delta, p = _read_varlong(buf, p, body_end)
    if p < 0:
        return (p if p != -ERR_TRUNCATED else -ERR_RECORD_SIZE), z, z, z, z, z, z
    off_delta, p = _read_varint(buf, p, body_end)
    if p < 0:
        return (p if p != -ERR_TRUNCATED else -ERR_RECORD_SIZE), z, z, z, z, z, z
    key_len, p = _read_varint(buf, p, body_end)
    if p < 0:
        return (p if p != -ERR_TRUNCATED else -ERR_RECORD_SIZE), z, z, z, z, z, z
    if key_len < -1:
        return np.int64(-ERR_NEGATIVE_LENGTH), z, z, z, z, z, z
    key_pos = p
    if key_len > 0:
        p += key_len
        if p > body_end:
            return np.int64(-ERR_RECORD_SIZE), z, z, z, z, z, z
    value_len, p = _read_varint(buf, p, body_end)
    if p < 0:
        return (p if p != -ERR_TRUNCATED else -ERR_RECORD_SIZE), z, z, z, z, z, z
    if value_len < -1:
        return np.int64(-ERR_NEGATIVE_LENGTH), z, z, z, z, z, z
    value_pos = p
    if value_len > 0:
        p += value_len
        if p > body_end:
            return np.int64(-ERR_RECORD_SIZE), z, z, z, z, z, z
    p = _skip_headers(buf, p, body_end)
    if p < 0:
        return p, z, z, z, z, z, z
    if p != body_end:
        return np.int64(-ERR_RECORD_SIZE), z, z, z, z, z, z
    return p, ts_delta, off_delta, key_pos, key_len, value_pos, value_len


@_njit
def _walk_kernel(
    buf,
    rec_start,
    rec_end,
    base_offset,
    base_timestamp,
    ts_type,
    max_ts,
    count,
    capacity,
    batch_index,
    offset,
    timestamp,
    key_pos,
    key_len,
    value_pos,
    value_len,
):
    """Returns (records written, error code, error position, error batch)."""
    buf = borrow(buf)
    k = 0
    n_buf = len(buf)
    for i in range(len(rec_start)):
        pos = rec_start[i]
        end = rec_end[i]
        if pos < 0 or end > n_buf or pos > end:
            return k, ERR_BAD_REGION, pos, i
        limit = count[i]
        if limit < 0:
            return k, ERR_BAD_COUNT, pos, i
        n = 0
        while n < limit:
            if pos >= end and limit == NO_LIMIT:
                break
            nxt, ts_delta, off_delta, kp, kl, vp, vl = _read_record(buf, pos, end)
            if nxt < 0:
                return k, -nxt, pos, i
            if k >= capacity:  # unreachable: a parsed record is >= 7 bytes; guards the arrays anyway
                return k, ERR_TRUNCATED, pos, i
            batch_index[k] = i
            offset[k] = base_offset[i] + off_delta
            timestamp[k] = max_ts[i] if ts_type[i] == LOG_APPEND_TIME else base_timestamp[i] + ts_delta
            key_pos[k] = kp
            key_len[k] = kl
            value_pos[k] = vp
            value_len[k] = vl
            k += 1
            n += 1
            pos = nxt
        if pos != end:
            return k, ERR_COUNT_MISMATCH, pos, i
    return k, ERR_OK, -1, -1


@_njit
def _gather_kernel(file, side, split, key_pos, key_len, offsets, out):
    """Copy each key into `out` at offsets[i]; positions >= split address `side` (at pos - split)."""
    file, side, out = borrow(file), borrow(side), borrow(out)
    for i in range(len(key_pos)):
        if key_len[i] > 0:
            copy_bytes(file, side, split, key_pos[i], key_len[i], out, offsets[i])
