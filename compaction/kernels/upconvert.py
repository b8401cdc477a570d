"""Kept v0/v1 messages re-encoded as v2 batches of one record each, in one compiled call.

Kafka 4.0's cleaner never copies a legacy batch (KIP-724: `filterTo` rebuilds it with
`MemoryRecordsBuilder` at magic v2), and an uncompressed v0/v1 log entry is a batch of one message,
so every kept message becomes a 61-byte v2 header and one record. `format.batch_build.build_batch` is the
reference for those bytes; per message (docs/kafka-rules.md#batch-v2-header, #v2-records,
#writing-retained-batches):

| field          | value                                                                      |
|----------------|----------------------------------------------------------------------------|
| baseOffset     | the message's offset (lastOffsetDelta 0, offsetDelta 0)                    |
| leader epoch, producer id / epoch, base sequence | -1                                       |
| attributes     | codec none; LogAppendTime for a v1 LogAppendTime message; delete horizon bit |
| baseTimestamp  | the delete horizon when one is set, else the message's timestamp (v0: -1)  |
| maxTimestamp   | the message's timestamp (LogAppendTime), else max(-1, its timestamp)       |
| record         | length, attributes 0, timestampDelta = timestamp - baseTimestamp,          |
|                | offsetDelta 0, key, value, no headers; every varint in its shortest form   |
| crc            | CRC-32C over [21, end)                                                     |

`convert_messages` (numba) and `convert_messages_py` (plain Python, through `build_batch`) share
one signature and return the same bytes. `encode_kept` does the same for the kept messages of
compressed wrappers, several to a batch (see below).
"""

from __future__ import annotations

import numpy as np

from compaction.format import batch as fb
from compaction.format.batch_build import build_batch
from compaction.format.layout import (
    ATTRIBUTE_FLAGS_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CRC_COVERED_FROM,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    MAX_VARINT_BYTES,
    MAX_VARLONG_BYTES,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    TIMESTAMP_TYPE_MASK,
)
from compaction.kernels.buffers import POOL, POOLED_MIN_BYTES
from compaction.kernels.crc import crc32c_at
from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.memops import copy_bytes, memcpy_at, put_be32, put_be64
from compaction.kernels.varints import _varint32_size, _varint_size, _write_varint, _write_varlong

HEADER = RECORD_BATCH_OVERHEAD
# a record's bytes beyond its key and value: length <= 5, attributes 1, timestampDelta <= 10,
# offsetDelta 1, key and value lengths <= 5 each, headers count 1
MAX_RECORD_OVERHEAD = MAX_VARINT_BYTES + 1 + MAX_VARLONG_BYTES + 1 + 2 * MAX_VARINT_BYTES + 1


# The header fields every converted batch shares: partitionLeaderEpoch, producerId, producerEpoch and
# baseSequence -1, magic 2, lastOffsetDelta 0, recordsCount 1; the others are written over it.
_TEMPLATE = np.zeros(HEADER, dtype=np.uint8)
_TEMPLATE[PARTITION_LEADER_EPOCH_OFFSET:MAGIC_OFFSET] = 0xFF
_TEMPLATE[MAGIC_OFFSET] = MAGIC_V2
_TEMPLATE[PRODUCER_ID_OFFSET:RECORDS_COUNT_OFFSET] = 0xFF  # producerId, producerEpoch, baseSequence
_TEMPLATE[HEADER - 1] = 1  # the low byte of recordsCount


@_njit
def _convert_kernel(
    file,
    side,
    split,
    rec,
    offset,
    timestamp,
    key_pos,
    key_len,
    value_pos,
    value_len,
    log_append,
    horizon,
    template,
    out,
    out_end,
    out_max_ts,
):
    file, side, template, out = borrow(file), borrow(side), borrow(template), borrow(out)
    o = np.int64(0)
    for j in range(len(rec)):
        r = rec[j]
        ts = timestamp[r]
        base_ts = horizon[j] if horizon[j] >= 0 else ts
        max_ts = ts if log_append[j] else max(np.int64(-1), ts)
        kl, vl = np.int64(key_len[r]), np.int64(value_len[r])
        tsd = ts - base_ts
        body = (
            1 + _varint_size(tsd) + 1 + _varint32_size(kl) + max(kl, 0) + _varint32_size(vl) + max(vl, 0) + 1
        )
        size = HEADER + _varint32_size(body) + body
        memcpy_at(out, o, template, 0, HEADER)
        put_be64(out, o, offset[r])
        put_be32(out, o + LENGTH_OFFSET, size - LOG_OVERHEAD)
        attrs = TIMESTAMP_TYPE_MASK if log_append[j] else 0
        if horizon[j] >= 0:
            attrs |= DELETE_HORIZON_MASK
        out[o + ATTRIBUTE_FLAGS_OFFSET] = attrs
        put_be64(out, o + BASE_TIMESTAMP_OFFSET, base_ts)
        put_be64(out, o + MAX_TIMESTAMP_OFFSET, max_ts)
        p = _write_varint(out, o + HEADER, body)
        out[p] = 0  # record attributes
        p = _write_varlong(out, p + 1, tsd)
        out[p] = 0  # offsetDelta
        p = _write_varint(out, p + 1, kl)
        if kl > 0:
            copy_bytes(file, side, split, key_pos[r], kl, out, p)
            p += kl
        p = _write_varint(out, p, vl)
        if vl > 0:
            copy_bytes(file, side, split, value_pos[r], vl, out, p)
            p += vl
        out[p] = 0  # headers count
        put_be32(out, o + CRC_OFFSET, crc32c_at(out, o + CRC_COVERED_FROM, size - CRC_COVERED_FROM))
        o += size
        out_end[j] = o
        out_max_ts[j] = max_ts
    return o


def convert_messages(
    file, side, split: int, rec: np.ndarray, records, log_append: np.ndarray, horizon: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The v2 batches of messages `rec` (indexes into `records`, a scan's `RecordColumns` whose
    positions address `file`, then `side` from `split`): per message, its v1 LogAppendTime flag
    and the delete horizon to set (-1: none). Returns (bytes, end of each batch in them, each
    batch's maxTimestamp)."""
    rec = np.ascontiguousarray(rec, dtype=np.int64)
    lengths = np.maximum(records.key_len[rec], 0).astype(np.int64) + np.maximum(records.value_len[rec], 0)
    cap = int(lengths.sum()) + (HEADER + MAX_RECORD_OVERHEAD) * len(rec)
    out = POOL.take(cap) if cap >= POOLED_MIN_BYTES else np.empty(cap, dtype=np.uint8)
    ends = np.empty(len(rec), dtype=np.int64)
    max_ts = np.empty(len(rec), dtype=np.int64)
    used = _convert_kernel(
        _u8(file),
        _u8(side),
        np.int64(split),
        rec,
        records.offset,
        records.timestamp,
        records.key_pos,
        records.key_len,
        records.value_pos,
        records.value_len,
        np.ascontiguousarray(log_append, dtype=np.bool_),
        np.ascontiguousarray(horizon, dtype=np.int64),
        _TEMPLATE,
        out,
        ends,
        max_ts,
    )
    return out[:used], ends, max_ts


def _u8(buf) -> np.ndarray:
    if isinstance(buf, np.ndarray) and buf.dtype == np.uint8:
        return buf
    return np.frombuffer(buf, dtype=np.uint8)


def convert_messages_py(
    file, side, split: int, rec: np.ndarray, records, log_append: np.ndarray, horizon: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plain-Python reference of `convert_messages`: `build_batch` over each message."""
    file, side = bytes(_u8(file)), bytes(_u8(side))

    def data(pos: int, n: int) -> bytes | None:
        if n < 0:
            return None
        return side[pos - split : pos - split + n] if pos >= split else file[pos : pos + n]

    out, ends, max_ts = bytearray(), [], []
    for j, r in enumerate(np.asarray(rec).tolist()):
        ts = int(records.timestamp[r])
        lat = bool(log_append[j])
        h = int(horizon[j])
        record = fb.Record(
            int(records.offset[r]),
            ts,
            data(int(records.key_pos[r]), int(records.key_len[r])),
            data(int(records.value_pos[r]), int(records.value_len[r])),
        )
        out += build_batch(
            [record],
            timestamp_type=fb.LOG_APPEND_TIME if lat else fb.CREATE_TIME,
            delete_horizon_ms=h if h >= 0 else None,
            log_append_time=ts if lat else None,
        )
        ends.append(len(out))
        max_ts.append(ts if lat else max(-1, ts))
    i64 = np.int64
    return np.frombuffer(bytes(out), dtype=np.uint8), np.array(ends, dtype=i64), np.array(max_ts, dtype=i64)


# --- compressed wrappers ---------------------------------------------------------------------------
#
# A compressed v0/v1 wrapper is a batch of several messages: its kept ones become one v2 batch
# (`build_batch` over them, with the wrapper's codec): baseOffset = the first kept offset,
# lastOffsetDelta = the last kept one's delta, offsetDelta = offset - baseOffset, baseTimestamp =
# the horizon or the first kept timestamp, maxTimestamp = the wrapper's (LogAppendTime) or
# max(-1, kept timestamps). `encode_kept` writes the records of many such batches in one call;
# `rebuild.headers_for` and `rebuild.seal_all` then compress each and seal it.


@_njit
def _encode_kept_kernel(
    file,
    side,
    split,
    first,
    count,
    keep,
    offset,
    timestamp,
    key_pos,
    key_len,
    value_pos,
    value_len,
    log_append,
    wrapper_ts,
    horizon,
    out,
    out_start,
    out_end,
    out_base,
    out_last,
    out_base_ts,
    out_max_ts,
    out_kept,
):
    file, side, out = borrow(file), borrow(side), borrow(out)
    o = np.int64(0)
    for j in range(len(first)):
        out_start[j] = o
        kept = 0
        base = np.int64(-1)
        last = np.int64(-1)
        base_ts = horizon[j]
        max_ts = np.int64(-1)
        for r in range(first[j], first[j] + count[j]):
            if not keep[r]:
                continue
            ts = timestamp[r]
            if kept == 0:
                base = offset[r]
                if horizon[j] < 0:
                    base_ts = ts
            if ts > max_ts:
                max_ts = ts
            last = offset[r]
            kl, vl = np.int64(key_len[r]), np.int64(value_len[r])
            tsd = ts - base_ts
            delta = offset[r] - base
            body = (
                1
                + _varint_size(tsd)
                + _varint32_size(delta)
                + _varint32_size(kl)
                + max(kl, 0)
                + _varint32_size(vl)
                + max(vl, 0)
                + 1
            )
            o = _write_varint(out, o, body)
            out[o] = 0  # record attributes
            o = _write_varlong(out, o + 1, tsd)
            o = _write_varint(out, o, delta)
            o = _write_varint(out, o, kl)
            if kl > 0:
                copy_bytes(file, side, split, key_pos[r], kl, out, o)
                o += kl
            o = _write_varint(out, o, vl)
            if vl > 0:
                copy_bytes(file, side, split, value_pos[r], vl, out, o)
                o += vl
            out[o] = 0  # headers count
            o += 1
            kept += 1
        out_end[j] = o
        out_base[j] = base
        out_last[j] = last
        out_base_ts[j] = base_ts
        out_max_ts[j] = wrapper_ts[j] if log_append[j] else max_ts
        out_kept[j] = kept
    return o


def encode_kept(
    file,
    side,
    split: int,
    first: np.ndarray,
    count: np.ndarray,
    keep: np.ndarray,
    records,
    log_append: np.ndarray,
    wrapper_ts: np.ndarray,
    horizon: np.ndarray,
) -> tuple:
    """The kept records (`keep`) of batches j = records first[j] .. first[j] + count[j] - 1 of
    `records` (a scan's columns; positions address `file`, then `side` from `split`), each batch's
    re-encoded back to back: (payload, start, end, base offset, last kept offset, base timestamp,
    max timestamp, kept count), one element per batch. `log_append`: a v1 LogAppendTime wrapper
    (its timestamp `wrapper_ts` is the max); `horizon`: the delete horizon to set (-1: none)."""
    first = np.ascontiguousarray(first, dtype=np.int64)
    count = np.ascontiguousarray(count, dtype=np.int64)
    keep = np.ascontiguousarray(keep, dtype=np.bool_)
    n = len(first)
    lengths = np.maximum(records.key_len, 0).astype(np.int64) + np.maximum(records.value_len, 0)
    at = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=at[1:])
    cap = int((at[first + count] - at[first]).sum()) + MAX_RECORD_OVERHEAD * int(count.sum())
    out = POOL.take(cap) if cap >= POOLED_MIN_BYTES else np.empty(cap, dtype=np.uint8)
    res = [np.empty(n, dtype=np.int64) for _ in range(7)]
    used = _encode_kept_kernel(
        _u8(file),
        _u8(side),
        np.int64(split),
        first,
        count,
        keep,
        records.offset,
        records.timestamp,
        records.key_pos,
        records.key_len,
        records.value_pos,
        records.value_len,
        np.ascontiguousarray(log_append, dtype=np.bool_),
        np.ascontiguousarray(wrapper_ts, dtype=np.int64),
        np.ascontiguousarray(horizon, dtype=np.int64),
        out,
        *res,
    )
    return (out[:used], *res)
