"""Walk v0/v1 message sets (docs/kafka-rules.md#legacy-messages) into record columns in one compiled call.

The compiled counterpart of `legacy.LegacyBatch.records()` for the scan: a region is a run of
log entries, each one message,

    offset int64 | size int32 | crc uint32 | magic int8 (0, 1) | attributes int8
    | timestamp int64 (v1 only) | keyLength int32 (< 0: null) | key | valueLength int32 | value

and the kernel writes, per message, its offset, timestamp, and the positions and lengths of its key
and value in the walked buffer (nothing is copied). Two kinds of region:

* an uncompressed entry of a segment: the region is the entry itself, in the file buffer; its
  offset and timestamp are the message's own;
* the decompressed value of a compressed wrapper (`inner`): the region holds the wrapper's inner
  messages, which may not be compressed themselves and may not be absent. v1 inner offsets are
  relative: absolute = wrapper offset - last inner offset + inner offset, except that a wrapper
  offset of 0 means base 0 (librdkafka); v0 inner offsets are absolute. A v1 LogAppendTime
  wrapper's timestamp replaces the inner ones (Kafka's `AbstractLegacyRecordBatch`).

`entry_crcs` computes the stored checksum's counterpart of many entries at once: CRC-32 over
[16, size) for v0/v1, CRC-32C over [21, size) for v2 (`crc.crc32_at` / `crc.crc32c_at`).

Malformed input comes back as an error code and the region and byte position where the walk
stopped, never as an exception from inside the kernel; `scan.py` then lets `legacy.LegacyBatch`
raise the typed error it has always raised for that entry. `walk_legacy_py` is the plain-Python
reference (built on `legacy.decode_message`) the tests compare the kernel with.
"""

from __future__ import annotations

import numpy as np

from compaction.errors import CorruptRecordError
from compaction.format.layout import (
    COMPRESSION_CODEC_MASK,
    CRC_COVERED_FROM,
    LEGACY_ATTRIBUTES_OFFSET,
    LEGACY_CRC_COVERED_FROM,
    LEGACY_KEY_LENGTH_OFFSET_V0,
    LEGACY_KEY_LENGTH_OFFSET_V1,
    LEGACY_LENGTH_SIZE,
    LEGACY_MAGIC_OFFSET,
    LEGACY_TIMESTAMP_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V1,
    MAGIC_V2,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    SIZE_OFFSET,
)
from compaction.format.legacy import decode_message
from compaction.kernels.crc import crc32_at, crc32c_at
from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.memops import prefetch_ahead

ERR_OK = 0
ERR_MESSAGE = 1  # framing, magic, size or a key/value length that does not fit the message
ERR_NESTED = 2  # a compressed message inside a compressed wrapper
ERR_EMPTY = 3  # a compressed wrapper with no inner message
ERR_NAMES = {
    ERR_OK: "ok",
    ERR_MESSAGE: "malformed legacy message",
    ERR_NESTED: "compressed message inside a compressed wrapper",
    ERR_EMPTY: "compressed wrapper with no inner records",
}

MIN_ENTRY = LOG_OVERHEAD + RECORD_OVERHEAD_V0  # an entry holding the smallest v0 message


@_njit
def _be32(buf, pos):
    v = np.int64(0)
    for i in range(4):
        v = (v << 8) | np.int64(buf[pos + i])
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@_njit
def _be64(buf, pos):
    v = np.int64(0)
    for i in range(8):
        v = (v << 8) | np.int64(buf[pos + i])
    return v


@_njit
def _message(buf, pos, end):
    """(key_pos, key_len, value_pos, value_len) of the entry buf[pos:end] whose framing is valid;
    key_pos -1 when a length runs past the message or bytes are left over (lengths < 0: null)."""
    v1 = buf[pos + LEGACY_MAGIC_OFFSET] == MAGIC_V1
    p = pos + (LEGACY_KEY_LENGTH_OFFSET_V1 if v1 else LEGACY_KEY_LENGTH_OFFSET_V0)
    if p + LEGACY_LENGTH_SIZE > end:
        return -1, 0, 0, 0
    kl = _be32(buf, p)
    p += LEGACY_LENGTH_SIZE
    kp = p
    if kl < 0:
        kl = -1
    elif kl > end - p:
        return -1, 0, 0, 0
    else:
        p += kl
    if p + LEGACY_LENGTH_SIZE > end:
        return -1, 0, 0, 0
    vl = _be32(buf, p)
    p += LEGACY_LENGTH_SIZE
    vp = p
    if vl < 0:
        vl = -1
    elif vl > end - p:
        return -1, 0, 0, 0
    else:
        p += vl
    if p != end:
        return -1, 0, 0, 0
    return kp, kl, vp, vl


@_njit
def walk_legacy_kernel(
    buf,
    start,
    end,
    inner,
    wrapper_offset,
    wrapper_magic,
    wrapper_lat,
    wrapper_ts,
    capacity,
    batch_index,
    offset,
    timestamp,
    key_pos,
    key_len,
    value_pos,
    value_len,
):
    """Messages of the regions buf[start[j]:end[j]] -> columns (batch_index = j). Returns
    (records written, error code, error position, error region)."""
    buf = borrow(buf)
    k = 0
    n_buf = len(buf)
    ahead = 0
    for j in range(len(start)):
        pos, stop = start[j], end[j]
        if pos < 0 or stop > n_buf or pos > stop:
            return k, ERR_MESSAGE, pos, j
        first = k
        while pos < stop:
            ahead = prefetch_ahead(buf, ahead, pos, n_buf)
            if stop - pos < MIN_ENTRY:
                return k, ERR_MESSAGE, pos, j
            size = _be32(buf, pos + SIZE_OFFSET)
            magic = buf[pos + LEGACY_MAGIC_OFFSET]
            smallest = RECORD_OVERHEAD_V1 if magic == MAGIC_V1 else RECORD_OVERHEAD_V0
            if magic > MAGIC_V1 or size < smallest or size > stop - pos - LOG_OVERHEAD:
                return k, ERR_MESSAGE, pos, j
            e = pos + LOG_OVERHEAD + size
            if inner[j] and (buf[pos + LEGACY_ATTRIBUTES_OFFSET] & COMPRESSION_CODEC_MASK) != 0:
                return k, ERR_NESTED, pos, j
            kp, kl, vp, vl = _message(buf, pos, e)
            if kp < 0 or k >= capacity:
                return k, ERR_MESSAGE, pos, j
            batch_index[k] = j
            offset[k] = _be64(buf, pos)
            timestamp[k] = _be64(buf, pos + LEGACY_TIMESTAMP_OFFSET) if magic == MAGIC_V1 else -1
            key_pos[k] = kp
            key_len[k] = kl
            value_pos[k] = vp
            value_len[k] = vl
            k += 1
            pos = e
        if inner[j]:
            if k == first:
                return k, ERR_EMPTY, start[j], j
            if wrapper_magic[j] > 0:
                base = 0 if wrapper_offset[j] == 0 else wrapper_offset[j] - offset[k - 1]
                for r in range(first, k):
                    offset[r] += base
            if wrapper_lat[j]:
                for r in range(first, k):
                    timestamp[r] = wrapper_ts[j]
    return k, ERR_OK, -1, -1


@_njit
def _entry_crcs_kernel(buf, position, size, magic, out):
    buf = borrow(buf)
    ahead = 0
    for i in range(len(position)):
        ahead = prefetch_ahead(buf, ahead, position[i], len(buf))
        if magic[i] >= MAGIC_V2:
            out[i] = crc32c_at(buf, position[i] + CRC_COVERED_FROM, size[i] - CRC_COVERED_FROM)
        else:
            out[i] = crc32_at(buf, position[i] + LEGACY_CRC_COVERED_FROM, size[i] - LEGACY_CRC_COVERED_FROM)


def entry_crcs(buf: np.ndarray, position: np.ndarray, size: np.ndarray, magic: np.ndarray) -> np.ndarray:
    """The checksum each entry should store (entries found by `scan.scan_batches`, so in bounds)."""
    out = np.empty(len(position), dtype=np.uint32)
    _entry_crcs_kernel(
        buf,
        np.ascontiguousarray(position, np.int64),
        np.ascontiguousarray(size, np.int64),
        np.ascontiguousarray(magic, np.int8),
        out,
    )
    return out


def region_capacity(start: np.ndarray, end: np.ndarray, inner: np.ndarray) -> int:
    """Records the regions can hold at most: one per uncompressed entry, one per MIN_ENTRY bytes
    of a wrapper's inner messages."""
    inner = np.asarray(inner)
    if not inner.any():
        return len(inner)
    by_bytes = np.maximum(np.asarray(end) - np.asarray(start), 0) // MIN_ENTRY
    return int(np.where(inner, by_bytes, 1).sum())


# --- plain-Python reference ------------------------------------------------------------------------


def walk_legacy_py(
    buf, start, end, inner, wrapper_offset, wrapper_magic, wrapper_lat, wrapper_ts
) -> tuple[list[tuple], int, int, int]:
    """Plain-Python reference of `walk_legacy_kernel`: (rows of (region, offset, timestamp,
    key_pos, key_len, value_pos, value_len), error code, error position, error region)."""
    b = bytes(np.asarray(buf, dtype=np.uint8))
    rows: list[tuple] = []
    for j in range(len(start)):
        pos, stop = int(start[j]), int(end[j])
        if pos < 0 or stop > len(b) or pos > stop:
            return rows, ERR_MESSAGE, pos, j
        view = memoryview(b)[:stop]
        mine: list[list] = []
        while pos < stop:
            try:
                m, nxt = decode_message(view, pos)
            except CorruptRecordError:
                return rows + [tuple(r) for r in mine], ERR_MESSAGE, pos, j
            if inner[j] and m.codec:
                return rows + [tuple(r) for r in mine], ERR_NESTED, pos, j
            # decode_message returns copies: the key starts after its length field
            kp = pos + (LEGACY_KEY_LENGTH_OFFSET_V1 if m.magic == MAGIC_V1 else LEGACY_KEY_LENGTH_OFFSET_V0)
            kp += LEGACY_LENGTH_SIZE
            vp = kp + (len(m.key) if m.key is not None else 0) + LEGACY_LENGTH_SIZE
            mine.append(
                [
                    j,
                    m.offset,
                    m.timestamp,
                    kp,
                    -1 if m.key is None else len(m.key),
                    vp,
                    -1 if m.value is None else len(m.value),
                ]
            )
            pos = nxt
        if inner[j]:
            if not mine:
                return rows, ERR_EMPTY, int(start[j]), j
            if int(wrapper_magic[j]) > 0:
                base = 0 if int(wrapper_offset[j]) == 0 else int(wrapper_offset[j]) - mine[-1][1]
                for r in mine:
                    r[1] += base
            if wrapper_lat[j]:
                for r in mine:
                    r[2] = int(wrapper_ts[j])
        rows += [tuple(r) for r in mine]
    return rows, ERR_OK, -1, -1
