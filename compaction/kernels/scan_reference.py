"""Plain-Python twins of the scan's compiled walk: same signatures, same results (the tests compare
them with `scan_batches` and `walk_records`, and with an independent decoder)."""

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
    MAGIC_V0,
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
from compaction.kernels.scan_columns import (
    BATCH_DTYPES,
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
    RECORD_DTYPES,
    STOP_CORRUPT,
    STOP_END,
    STOP_PARTIAL,
    BatchColumns,
    RecordColumns,
    _as_u8,
    _bounds,
    _walk_inputs,
)


def _py_be(b, pos: int, width: int, signed: bool = True) -> int:
    return int.from_bytes(b[pos : pos + width], "big", signed=signed)


def _py_entry_at(b, pos: int, end: int) -> tuple[int, int]:
    remaining = end - pos
    if remaining == 0:
        return STOP_END, 0
    if remaining < LOG_OVERHEAD:
        return STOP_PARTIAL, 0
    size = _py_be(b, pos + SIZE_OFFSET, 4)
    if size < MIN_ENTRY_SIZE:
        return STOP_CORRUPT, 0
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return STOP_PARTIAL, 0
    magic = b[pos + MAGIC_OFFSET]
    if magic not in (MAGIC_V0, MAGIC_V1, MAGIC_V2):
        return STOP_CORRUPT, 0
    total = size + LOG_OVERHEAD
    if total > remaining:
        return STOP_PARTIAL, 0
    if magic == MAGIC_V2 and total < RECORD_BATCH_OVERHEAD:
        return STOP_CORRUPT, 0
    if magic == MAGIC_V1 and size < RECORD_OVERHEAD_V1:
        return STOP_CORRUPT, 0
    return CONTINUE, total


def _py_entry_fields(b, pos: int, total: int) -> tuple:
    off = _py_be(b, pos, 8)
    magic = b[pos + MAGIC_OFFSET]
    if magic == MAGIC_V2:
        return (
            pos,
            total,
            off,
            off + _py_be(b, pos + LAST_OFFSET_DELTA_OFFSET, 4),
            magic,
            _py_be(b, pos + ATTRIBUTES_OFFSET, 2),
            _py_be(b, pos + PARTITION_LEADER_EPOCH_OFFSET, 4),
            _py_be(b, pos + BASE_TIMESTAMP_OFFSET, 8),
            _py_be(b, pos + MAX_TIMESTAMP_OFFSET, 8),
            _py_be(b, pos + PRODUCER_ID_OFFSET, 8),
            _py_be(b, pos + PRODUCER_EPOCH_OFFSET, 2),
            _py_be(b, pos + BASE_SEQUENCE_OFFSET, 4),
            _py_be(b, pos + RECORDS_COUNT_OFFSET, 4),
            _py_be(b, pos + CRC_OFFSET, 4, signed=False),
        )
    attr = b[pos + LEGACY_ATTRIBUTES_OFFSET]
    ts = _py_be(b, pos + LEGACY_TIMESTAMP_OFFSET, 8) if magic == MAGIC_V1 else -1
    count = 1 if attr & COMPRESSION_CODEC_MASK == 0 else LEGACY_COUNT_UNKNOWN
    crc = _py_be(b, pos + LEGACY_CRC_OFFSET, 4, signed=False)
    return (pos, total, off, off, magic, attr, -1, ts, ts, -1, -1, -1, count, crc)


def scan_batches_py(buf, start: int = 0, end: int = -1) -> BatchColumns:
    """Plain-Python reference of `scan_batches`."""
    arr = _as_u8(buf)
    start, end = _bounds(arr, start, end)
    b = arr.tobytes()
    rows = []
    pos = start
    while True:
        reason, total = _py_entry_at(b, pos, end)
        if reason != CONTINUE:
            break
        rows.append(_py_entry_fields(b, pos, total))
        pos += total
    cols = [np.array([r[j] for r in rows], dtype=dt) for j, dt in enumerate(BATCH_DTYPES)]
    return BatchColumns(*cols, stop_position=pos, stop_reason=reason)


class _PyRecordError(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _py_varint(b, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    bits = 7 * (max_bytes - 1)  # shift of the last allowed byte: 28 (int) or 63 (long)
    width = 32 if max_bytes == 5 else 64
    raw = shift = 0
    while True:
        if pos >= end:
            raise _PyRecordError(ERR_TRUNCATED)
        byte = b[pos]
        pos += 1
        if shift == bits:
            if byte & 0x80:
                raise _PyRecordError(ERR_BAD_VARINT)
            raw |= byte << shift
            break
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    raw &= (1 << width) - 1
    return (raw >> 1) ^ -(raw & 1), pos


def _py_body_varint(b, pos: int, body_end: int, max_bytes: int = 5) -> tuple[int, int]:
    try:
        return _py_varint(b, pos, body_end, max_bytes)
    except _PyRecordError as e:  # inside a record body, running out means a wrong record length
        raise _PyRecordError(ERR_RECORD_SIZE if e.code == ERR_TRUNCATED else e.code) from None


def _py_skip(pos: int, n: int, body_end: int) -> int:
    if n > 0:
        pos += n
        if pos > body_end:
            raise _PyRecordError(ERR_RECORD_SIZE)
    return pos


def _py_record(b, pos: int, end: int) -> tuple[int, tuple]:
    length, p = _py_varint(b, pos, end, 5)
    if length < 0:
        raise _PyRecordError(ERR_NEGATIVE_LENGTH)
    body_end = p + length
    if body_end > end:
        raise _PyRecordError(ERR_TRUNCATED)
    if p >= body_end:
        raise _PyRecordError(ERR_RECORD_SIZE)
    p += 1  # attributes
    ts_delta, p = _py_body_varint(b, p, body_end, 10)
    off_delta, p = _py_body_varint(b, p, body_end)
    key_len, p = _py_body_varint(b, p, body_end)
    if key_len < -1:
        raise _PyRecordError(ERR_NEGATIVE_LENGTH)
    key_pos = p
    p = _py_skip(p, key_len, body_end)
    value_len, p = _py_body_varint(b, p, body_end)
    if value_len < -1:
        raise _PyRecordError(ERR_NEGATIVE_LENGTH)
    value_pos = p
    p = _py_skip(p, value_len, body_end)
    n_headers, p = _py_body_varint(b, p, body_end)
    if n_headers < 0:
        raise _PyRecordError(ERR_NEGATIVE_LENGTH)
    for _ in range(n_headers):
        hk, p = _py_body_varint(b, p, body_end)
        if hk < 0:
            raise _PyRecordError(ERR_NEGATIVE_LENGTH)
        p = _py_skip(p, hk, body_end)
        hv, p = _py_body_varint(b, p, body_end)
        if hv < -1:
            raise _PyRecordError(ERR_NEGATIVE_LENGTH)
        p = _py_skip(p, hv, body_end)
    if p != body_end:
        raise _PyRecordError(ERR_RECORD_SIZE)
    return p, (ts_delta, off_delta, key_pos, key_len, value_pos, value_len)


def _wrap64(v: int) -> int:
    return (v + (1 << 63)) % (1 << 64) - (1 << 63)


def walk_records_py(
    buf, rec_start, rec_end, base_offset, base_timestamp, ts_type, max_ts, records_count=None
) -> RecordColumns:
    """Plain-Python reference of `walk_records`."""
    arr = _as_u8(buf)
    b = arr.tobytes()
    rs, re_, bo, bt, tt, mt, limit = (
        a.tolist()
        for a in _walk_inputs(rec_start, rec_end, base_offset, base_timestamp, ts_type, max_ts, records_count)
    )
    rows: list[tuple] = []
    error = (ERR_OK, -1, -1)
    for i in range(len(rs)):
        error = _py_walk_batch(b, i, rs[i], re_[i], bo[i], bt[i], tt[i], mt[i], limit[i], rows)
        if error[0] != ERR_OK:
            break
    cols = [np.array([r[j] for r in rows], dtype=dt) for j, dt in enumerate(RECORD_DTYPES)]
    return RecordColumns(*cols, error_code=error[0], error_position=error[1], error_batch=error[2])


def _py_walk_batch(b, i, pos, end, base_offset, base_ts, ts_type, max_ts, limit, rows) -> tuple:
    if pos < 0 or end > len(b) or pos > end:
        return ERR_BAD_REGION, pos, i
    if limit < 0:
        return ERR_BAD_COUNT, pos, i
    n = 0
    while n < limit and not (limit == NO_LIMIT and pos >= end):
        try:
            nxt, (ts_delta, off_delta, kp, kl, vp, vl) = _py_record(b, pos, end)
        except _PyRecordError as e:
            return e.code, pos, i
        ts = max_ts if ts_type == LOG_APPEND_TIME else _wrap64(base_ts + ts_delta)
        rows.append((i, _wrap64(base_offset + off_delta), ts, kp, kl, vp, vl))
        n += 1
        pos = nxt
    if pos != end:
        return ERR_COUNT_MISMATCH, pos, i
    return ERR_OK, -1, -1
