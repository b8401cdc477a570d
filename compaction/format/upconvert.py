"""Kept v0/v1 messages re-encoded as v2 batches of one record each, in one compiled call.

Kafka 4.0's cleaner never copies a legacy batch (KIP-724: `filterTo` rebuilds it with
`MemoryRecordsBuilder` at magic v2), and an uncompressed v0/v1 log entry is a batch of one message,
so every kept message becomes a 61-byte v2 header and one record. `format.batch.build_batch` is the
reference for those bytes; per message (spec §1.1, §1.4, §5.11):

| field              | value                                                                  |
|--------------------|------------------------------------------------------------------------|
| baseOffset         | the message's offset (lastOffsetDelta 0, offsetDelta 0)                |
| partitionLeaderEpoch, producerId, producerEpoch, baseSequence | -1                          |
| attributes         | codec none; LogAppendTime bit for a v1 LogAppendTime message; delete-horizon bit with a horizon |
| baseTimestamp      | the delete horizon when one is set, else the message's timestamp (v0: -1) |
| maxTimestamp       | the message's timestamp (LogAppendTime), else max(-1, its timestamp)   |
| record             | length, attributes 0, timestampDelta = timestamp - baseTimestamp, offsetDelta 0, key, value, no headers; shortest varints |
| crc                | CRC-32C over [21, end)                                                 |

`convert_messages` (numba) and `convert_messages_py` (plain Python, through `build_batch`) share
one signature and return the same bytes.
"""

from __future__ import annotations

import numpy as np

from compaction.buffers import POOL, POOLED_MIN_BYTES
from compaction.format import batch as fb
from compaction.format.crc import crc32c_at
from compaction.format.jit import njit as _njit
from compaction.format.memops import copy_bytes, memcpy_at
from compaction.format.rebuild import _varint32_size, _varint_size, _write_varint, _write_varlong

HEADER = fb.RECORD_BATCH_OVERHEAD  # 61
# a record's bytes beyond its key and value: length <= 5, attributes 1, timestampDelta <= 10,
# offsetDelta 1, key and value lengths <= 5 each, headers count 1
MAX_RECORD_OVERHEAD = 5 + 1 + 10 + 1 + 5 + 5 + 1


# The header fields every converted batch shares: partitionLeaderEpoch, producerId, producerEpoch and
# baseSequence -1, magic 2, lastOffsetDelta 0, recordsCount 1; the others are written over it.
_TEMPLATE = np.zeros(HEADER, dtype=np.uint8)
_TEMPLATE[12:16] = 0xFF
_TEMPLATE[16] = fb.MAGIC_V2
_TEMPLATE[43:57] = 0xFF
_TEMPLATE[60] = 1


@_njit
def _put_be64(out, o, v):
    v = np.int64(v)
    for i in range(8):
        out[o + i] = np.uint8((v >> (56 - 8 * i)) & 0xFF)


@_njit
def _put_be32(out, o, v):
    v = np.int64(v)
    for i in range(4):
        out[o + i] = np.uint8((v >> (24 - 8 * i)) & 0xFF)


@_njit
def _convert_kernel(file, side, split, rec, offset, timestamp, key_pos, key_len, value_pos, value_len,
                    log_append, horizon, template, out, out_end, out_max_ts):  # fmt: skip
    o = np.int64(0)
    for j in range(len(rec)):
        r = rec[j]
        ts = timestamp[r]
        base_ts = horizon[j] if horizon[j] >= 0 else ts
        max_ts = ts if log_append[j] else max(np.int64(-1), ts)
        kl, vl = np.int64(key_len[r]), np.int64(value_len[r])
        tsd = ts - base_ts
        body = (1 + _varint_size(tsd) + 1 + _varint32_size(kl) + max(kl, 0) + _varint32_size(vl) + max(vl, 0)
                + 1)  # fmt: skip
        size = HEADER + _varint32_size(body) + body
        memcpy_at(out, o, template, 0, HEADER)
        _put_be64(out, o, offset[r])
        _put_be32(out, o + 8, size - 12)
        attrs = fb.TIMESTAMP_TYPE_MASK if log_append[j] else 0
        if horizon[j] >= 0:
            attrs |= fb.DELETE_HORIZON_MASK
        out[o + 22] = attrs  # the low byte of the int16
        _put_be64(out, o + 27, base_ts)
        _put_be64(out, o + 35, max_ts)
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
        _put_be32(out, o + 17, crc32c_at(out, o + 21, size - 21))
        o += size
        out_end[j] = o
        out_max_ts[j] = max_ts
    return o


def convert_messages(file, side, split: int, rec: np.ndarray, records, log_append: np.ndarray,
                     horizon: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
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
    used = _convert_kernel(_u8(file), _u8(side), np.int64(split), rec, records.offset, records.timestamp,
                           records.key_pos, records.key_len, records.value_pos, records.value_len,
                           np.ascontiguousarray(log_append, dtype=np.bool_),
                           np.ascontiguousarray(horizon, dtype=np.int64), _TEMPLATE, out, ends, max_ts)  # fmt: skip
    return out[:used], ends, max_ts


def _u8(buf) -> np.ndarray:
    if isinstance(buf, np.ndarray) and buf.dtype == np.uint8:
        return buf
    return np.frombuffer(buf, dtype=np.uint8)


def convert_messages_py(file, side, split: int, rec: np.ndarray, records, log_append: np.ndarray,
                        horizon: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
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
        record = fb.Record(int(records.offset[r]), ts, data(int(records.key_pos[r]), int(records.key_len[r])),
                           data(int(records.value_pos[r]), int(records.value_len[r])))  # fmt: skip
        out += fb.build_batch([record], timestamp_type=fb.LOG_APPEND_TIME if lat else fb.CREATE_TIME,
                              delete_horizon_ms=h if h >= 0 else None,
                              log_append_time=ts if lat else None)  # fmt: skip
        ends.append(len(out))
        max_ts.append(ts if lat else max(-1, ts))
    i64 = np.int64
    return np.frombuffer(bytes(out), dtype=np.uint8), np.array(ends, dtype=i64), np.array(max_ts, dtype=i64)
