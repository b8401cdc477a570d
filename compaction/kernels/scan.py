"""Compiled fast path: a .log buffer -> columnar numpy arrays (one row per batch, one per record).

Wire format (docs/kafka-rules.md#batch-v2-header to #log-file-parsing; all header integers big-endian):

    log entry      = baseOffset int64 | size int32 | ... `size` more bytes      (LOG_OVERHEAD = 12)
    v2 batch       = baseOffset(0) int64 | batchLength(8) int32 | partitionLeaderEpoch(12) int32
                     | magic(16) int8 = 2 | crc(17) uint32 (CRC-32C over [21, end)) | attributes(21) int16
                     | lastOffsetDelta(23) int32 | baseTimestamp(27) int64 | maxTimestamp(35) int64
                     | producerId(43) int64 | producerEpoch(51) int16 | baseSequence(53) int32
                     | recordsCount(57) int32 | records(61..) (compressed as one stream if codec != 0)
    v2 record      = length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
                     | keyLength varint (-1 null) | key | valueLength varint (-1 tombstone) | value
                     | headersCount varint (>= 0) | headersCount x (keyLen varint >= 0 | key
                     | valueLen varint >= -1 | value)
                     every varint is zig-zag LEB128: int <= 5 bytes, long <= 10 bytes
                     (docs/kafka-rules.md#varints)
    v0/v1 message  = offset int64 | size int32 | crc(12) uint32 (CRC-32 IEEE over [16, end))
                     | magic(16) int8 | attributes(17) int8 | timestamp(18) int64 (v1 only) | key/value
                     with int32 lengths (docs/kafka-rules.md#legacy-messages)

Layers:
  * `scan_batches` / `scan_batches_py`: walk the entries of a buffer (docs/kafka-rules.md#log-file-parsing)
    and return their header fields as `BatchColumns`. Legacy entries get the fields that exist.
  * `walk_records` / `walk_records_py`: decode the records of many v2 record regions in one call and
    return `RecordColumns` (positions of keys and values, not copies). Malformed input comes back as
    an error code and a byte position, never as an exception from inside the kernel.
  * `gather_keys`: keys -> one contiguous Arrow-ready binary column (int32 offsets, or int64 with
    `large=True` for `pa.large_binary()`).
  * `scan_segment`: CRC checks (all kinds in one compiled call per chunk), decompression into a
    side buffer, v0/v1 messages walked by `legacywalk` (in place, or in the side buffer for the
    contents of compressed wrappers), and typed errors naming the path and byte position.

Kernels are `numba.njit(cache=True)`. numba writes its cache next to this file or, when that is not
writable (read-only site-packages, Spark executors), under `NUMBA_CACHE_DIR`; set that variable on
executors (e.g. `spark.executorEnv.NUMBA_CACHE_DIR=/tmp/numba`). When no cache location is usable at
all the kernels are compiled without a cache instead of failing the import.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compaction.runtime.buffers import POOL, POOLED_MIN_BYTES
from compaction.errors import (
    CorruptRecordError,
    CrcMismatchError,
    KafkaFormatError,
    TruncatedBatchError,
    UnsupportedCodecError,
)
from compaction.kernels.jit import njit as _njit
from compaction.kernels.keyhash import hash_keys
from compaction.kernels.legacywalk import ERR_NAMES as LEGACY_ERR_NAMES
from compaction.kernels.legacywalk import entry_crcs, region_capacity, walk_legacy_kernel
from compaction.kernels.memops import copy_bytes

# --- log entry framing (docs/kafka-rules.md#log-file-parsing) -------------------------------------
LOG_OVERHEAD = 12  # offset int64 + size int32
SIZE_OFFSET = 8
MAGIC_OFFSET = 16
HEADER_SIZE_UP_TO_MAGIC = 17
MIN_ENTRY_SIZE = 14  # Kafka rejects a `size` below LegacyRecord.RECORD_OVERHEAD_V0

# --- v2 batch header (docs/kafka-rules.md#batch-v2-header) ----------------------------------------
V2_PLE_OFFSET = 12
V2_CRC_OFFSET = 17
V2_ATTRIBUTES_OFFSET = 21
V2_LAST_OFFSET_DELTA_OFFSET = 23
V2_BASE_TIMESTAMP_OFFSET = 27
V2_MAX_TIMESTAMP_OFFSET = 35
V2_PRODUCER_ID_OFFSET = 43
V2_PRODUCER_EPOCH_OFFSET = 51
V2_BASE_SEQUENCE_OFFSET = 53
V2_RECORDS_COUNT_OFFSET = 57
V2_HEADER_SIZE = 61  # RECORD_BATCH_OVERHEAD; also the size of an empty batch

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
LOG_APPEND_TIME = 1
MAX_CODEC = 4  # zstd; 5..7 are not defined by Kafka

# --- legacy v0/v1 message (docs/kafka-rules.md#legacy-messages) -----------------------------------
LEGACY_CRC_OFFSET = 12
LEGACY_ATTRIBUTES_OFFSET = 17
LEGACY_TIMESTAMP_OFFSET = 18
LEGACY_MIN_SIZE_V0 = 14  # crc + magic + attributes + keyLength + valueLength
LEGACY_MIN_SIZE_V1 = 22  # ... + timestamp
LEGACY_COUNT_UNKNOWN = -1  # a compressed wrapper's count is only known after decompression

# --- scan_batches stop reasons ---------------------------------------------------------------------
STOP_END = 0  # every byte consumed
STOP_PARTIAL = 1  # a partial trailing batch (the rest is shorter than its declared size)
STOP_CORRUPT = 2  # size < 14, magic not in 0..2, or a header that cannot fit in its declared size
_CONTINUE = -1

# --- walk_records error codes ----------------------------------------------------------------------
ERR_OK = 0
ERR_TRUNCATED = 1  # a record (or its length varint) runs past the end of the record region
ERR_BAD_VARINT = 2  # a varint longer than 5 bytes (int) / 10 bytes (long)
ERR_NEGATIVE_LENGTH = 3  # record length < 0, key/header-key length < -1 or < 0, value length < -1
ERR_RECORD_SIZE = 4  # the fields do not end exactly at the record's declared length
ERR_COUNT_MISMATCH = 5  # bytes left after recordsCount records ("Incorrect declared batch size")
ERR_BAD_COUNT = 6  # recordsCount < 0
ERR_BAD_REGION = 7  # rec_start/rec_end outside the buffer or reversed
ERR_NAMES = {
    ERR_OK: "ok",
    ERR_TRUNCATED: "record runs past the end of the batch",
    ERR_BAD_VARINT: "malformed varint (too many bytes)",
    ERR_NEGATIVE_LENGTH: "invalid negative length",
    ERR_RECORD_SIZE: "record fields do not match the record's declared length",
    ERR_COUNT_MISMATCH: "bytes left after recordsCount records (incorrect declared batch size)",
    ERR_BAD_COUNT: "negative recordsCount",
    ERR_BAD_REGION: "record region outside the buffer",
}

# The smallest possible record is 7 bytes (length, attributes, timestampDelta, offsetDelta, keyLength,
# valueLength, headersCount: one byte each), so a region of n bytes holds at most n // 7 records.
# This bounds the output allocation even when recordsCount is corrupt.
MIN_RECORD_SIZE = 7
_NO_LIMIT = np.iinfo(np.int64).max

# ====================================================================================================
# Result containers
# ====================================================================================================


@dataclass(slots=True)
class BatchColumns:
    """One entry per batch (v2) or log entry (v0/v1), in file order."""

    position: np.ndarray  # int64, byte position of the entry in the buffer
    size: np.ndarray  # int64, whole entry size (12 + batchLength)
    base_offset: np.ndarray  # int64 (legacy: the entry offset)
    last_offset: np.ndarray  # int64 (legacy: the entry offset)
    magic: np.ndarray  # int8
    attributes: np.ndarray  # int16 (legacy: the attributes byte)
    partition_leader_epoch: np.ndarray  # int32 (legacy: -1)
    base_timestamp: np.ndarray  # int64 (v1: the message timestamp, v0: -1)
    max_timestamp: np.ndarray  # int64 (v1: the message timestamp, v0: -1)
    producer_id: np.ndarray  # int64 (legacy: -1)
    producer_epoch: np.ndarray  # int16 (legacy: -1)
    base_sequence: np.ndarray  # int32 (legacy: -1)
    records_count: np.ndarray  # int32 (legacy: 1 uncompressed; a wrapper: -1 here, its count after scan_segment)
    crc: np.ndarray  # uint32 as stored (v2: CRC-32C, legacy: CRC-32)
    stop_position: int  # where the scan stopped
    stop_reason: int  # STOP_END / STOP_PARTIAL / STOP_CORRUPT

    def __len__(self) -> int:
        return len(self.position)

    @property
    def codec(self) -> np.ndarray:
        return (self.attributes & CODEC_MASK).astype(np.int8)

    @property
    def timestamp_type(self) -> np.ndarray:
        return ((self.attributes & TIMESTAMP_TYPE_MASK) >> 3).astype(np.int8)


BATCH_FIELDS = (
    "position", "size", "base_offset", "last_offset", "magic", "attributes", "partition_leader_epoch",
    "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence",
    "records_count", "crc",
)  # fmt: skip
BATCH_DTYPES = (
    np.int64, np.int64, np.int64, np.int64, np.int8, np.int16, np.int32,
    np.int64, np.int64, np.int64, np.int16, np.int32,
    np.int32, np.uint32,
)  # fmt: skip


@dataclass(slots=True)
class RecordColumns:
    """One entry per record, in batch order then stream order; positions index the walked buffer."""

    batch_index: np.ndarray  # int32, index into the batch arrays passed to walk_records
    offset: np.ndarray  # int64, baseOffset + offsetDelta
    timestamp: np.ndarray  # int64 (LogAppendTime batches: the batch maxTimestamp)
    key_pos: np.ndarray  # int64
    key_len: np.ndarray  # int32, -1 = null key
    value_pos: np.ndarray  # int64
    value_len: np.ndarray  # int32, -1 = tombstone
    error_code: int  # ERR_OK or one of ERR_*
    error_position: int  # byte position in the walked buffer of the failing record (-1 if none)
    error_batch: int  # index of the batch holding it (-1 if none)

    def __len__(self) -> int:
        return len(self.offset)


RECORD_FIELDS = ("batch_index", "offset", "timestamp", "key_pos", "key_len", "value_pos", "value_len")
RECORD_DTYPES = (np.int32, np.int64, np.int64, np.int64, np.int32, np.int64, np.int32)


# ====================================================================================================
# numba kernels
# ====================================================================================================


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
    """(stop reason or _CONTINUE, entry size) for the entry at `pos` (docs/kafka-rules.md#log-file-parsing,
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
    if magic > 2:  # uint8 read: a negative int8 magic is > 127 here
        return STOP_CORRUPT, 0
    total = size + LOG_OVERHEAD
    if total > remaining:
        return STOP_PARTIAL, 0
    # A header that does not fit in its own declared size cannot be read at all.
    if magic == 2 and total < V2_HEADER_SIZE:
        return STOP_CORRUPT, 0
    if magic == 1 and size < LEGACY_MIN_SIZE_V1:
        return STOP_CORRUPT, 0
    return _CONTINUE, total


@_njit
def _count_entries(buf, start, end):
    pos = start
    n = 0
    while True:
        reason, total = _entry_at(buf, pos, end)
        if reason != _CONTINUE:
            return n, pos, reason
        n += 1
        pos += total


@_njit
def _fill_entries(buf, start, n, position, size, base_offset, last_offset, magic, attributes, ple,
                  base_ts, max_ts, producer_id, producer_epoch, base_sequence, records_count, crc):  # fmt: skip
    pos = start
    for i in range(n):
        total = _be_int(buf, pos + SIZE_OFFSET, 4) + LOG_OVERHEAD
        m = buf[pos + MAGIC_OFFSET]
        off = _be_int(buf, pos, 8)
        position[i] = pos
        size[i] = total
        base_offset[i] = off
        magic[i] = m
        if m == 2:
            attributes[i] = _be_int(buf, pos + V2_ATTRIBUTES_OFFSET, 2)
            last_offset[i] = off + _be_int(buf, pos + V2_LAST_OFFSET_DELTA_OFFSET, 4)
            ple[i] = _be_int(buf, pos + V2_PLE_OFFSET, 4)
            base_ts[i] = _be_int(buf, pos + V2_BASE_TIMESTAMP_OFFSET, 8)
            max_ts[i] = _be_int(buf, pos + V2_MAX_TIMESTAMP_OFFSET, 8)
            producer_id[i] = _be_int(buf, pos + V2_PRODUCER_ID_OFFSET, 8)
            producer_epoch[i] = _be_int(buf, pos + V2_PRODUCER_EPOCH_OFFSET, 2)
            base_sequence[i] = _be_int(buf, pos + V2_BASE_SEQUENCE_OFFSET, 4)
            records_count[i] = _be_int(buf, pos + V2_RECORDS_COUNT_OFFSET, 4)
            crc[i] = _be_uint32(buf, pos + V2_CRC_OFFSET)
        else:
            attr = buf[pos + LEGACY_ATTRIBUTES_OFFSET]
            attributes[i] = attr
            last_offset[i] = off
            ple[i] = -1
            ts = _be_int(buf, pos + LEGACY_TIMESTAMP_OFFSET, 8) if m == 1 else -1
            base_ts[i] = ts
            max_ts[i] = ts
            producer_id[i] = -1
            producer_epoch[i] = -1
            base_sequence[i] = -1
            records_count[i] = 1 if (attr & CODEC_MASK) == 0 else LEGACY_COUNT_UNKNOWN
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
def _walk_kernel(buf, rec_start, rec_end, base_offset, base_timestamp, ts_type, max_ts, count,
                 capacity, batch_index, offset, timestamp, key_pos, key_len, value_pos, value_len):  # fmt: skip
    """Returns (records written, error code, error position, error batch)."""
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
            if pos >= end and limit == _NO_LIMIT:
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
    for i in range(len(key_pos)):
        if key_len[i] > 0:
            copy_bytes(file, side, split, key_pos[i], key_len[i], out, offsets[i])


# ====================================================================================================
# Public kernels (numba) and their plain-Python references
# ====================================================================================================


def _as_u8(buf) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        if buf.dtype != np.uint8 or buf.ndim != 1:
            raise TypeError(f"expected a 1-D uint8 array, got {buf.dtype} with shape {buf.shape}")
        return buf
    return np.frombuffer(buf, dtype=np.uint8)


def _bounds(buf: np.ndarray, start: int, end: int) -> tuple[int, int]:
    end = len(buf) if end < 0 else min(end, len(buf))
    if not 0 <= start <= end:
        raise ValueError(f"bad scan range start={start} end={end} for a buffer of {len(buf)} bytes")
    return start, end


def scan_batches(buf, start: int = 0, end: int = -1) -> BatchColumns:
    """Header fields of every entry in buf[start:end] (numba). Never raises on malformed bytes:
    the scan stops and says why (`stop_reason`) and where (`stop_position`)."""
    buf = _as_u8(buf)
    start, end = _bounds(buf, start, end)
    n, stop_position, stop_reason = _count_entries(buf, start, end)
    cols = [np.empty(n, dtype=dt) for dt in BATCH_DTYPES]
    _fill_entries(buf, start, n, *cols)
    return BatchColumns(*cols, stop_position=int(stop_position), stop_reason=int(stop_reason))


def _records_limit(records_count, n: int) -> np.ndarray:
    if records_count is None:
        return np.full(n, _NO_LIMIT, dtype=np.int64)
    return np.ascontiguousarray(records_count, dtype=np.int64)


def _walk_inputs(rec_start, rec_end, base_offset, base_timestamp, ts_type, max_ts, records_count):
    rs = np.ascontiguousarray(rec_start, dtype=np.int64)
    re_ = np.ascontiguousarray(rec_end, dtype=np.int64)
    args = (
        rs,
        re_,
        np.ascontiguousarray(base_offset, dtype=np.int64),
        np.ascontiguousarray(base_timestamp, dtype=np.int64),
        np.ascontiguousarray(ts_type, dtype=np.int8),
        np.ascontiguousarray(max_ts, dtype=np.int64),
        _records_limit(records_count, len(rs)),
    )
    if len({len(a) for a in args}) != 1:
        raise ValueError("walk_records: per-batch arrays differ in length")
    return args


def _capacity(rec_start, rec_end, limit) -> int:
    by_bytes = np.maximum(rec_end - rec_start, 0) // MIN_RECORD_SIZE
    return int(np.minimum(np.maximum(limit, 0), by_bytes).sum())


def walk_records(buf, rec_start, rec_end, base_offset, base_timestamp, ts_type, max_ts,
                 records_count=None) -> RecordColumns:  # fmt: skip
    """Decode the v2 records of many batches in one compiled call (numba).

    Batch i's records are buf[rec_start[i]:rec_end[i]]. `ts_type` is the batch timestamp type (1 =
    LogAppendTime: every record reports max_ts[i]). With `records_count` the region must hold exactly
    that many records (Kafka's check); without it the region is read to its end. Decoding stops at
    the first malformed record: the columns then hold the records before it and `error_code`,
    `error_position`, `error_batch` say what and where.
    """
    buf = _as_u8(buf)
    args = _walk_inputs(rec_start, rec_end, base_offset, base_timestamp, ts_type, max_ts, records_count)
    cap = _capacity(args[0], args[1], args[6])
    cols = [np.empty(cap, dtype=dt) for dt in RECORD_DTYPES]
    k, code, pos, batch = _walk_kernel(buf, *args, cap, *cols)
    return RecordColumns(*(c[:k] for c in cols), error_code=int(code), error_position=int(pos),
                         error_batch=int(batch))  # fmt: skip


def gather_keys(buf, key_pos, key_len, *, large: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Keys -> (data uint8, offsets int32 [int64 if large]) for `pa.binary()` [`pa.large_binary()`].

    Record i's key is data[offsets[i]:offsets[i+1]]; null keys (key_len == -1) have zero length here
    and must be masked by the caller (see `SegmentScan.keys_arrow`). Wrap without copying with
    `pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])`.
    """
    buf = _as_u8(buf)
    return _gather(buf, np.empty(0, dtype=np.uint8), len(buf), key_pos, key_len, large)


def _gather(file, side, split, key_pos, key_len, large):
    key_pos = np.ascontiguousarray(key_pos, dtype=np.int64)
    key_len = np.ascontiguousarray(key_len, dtype=np.int32)
    lengths = np.maximum(key_len, 0).astype(np.int64)
    offsets = np.zeros(len(key_len) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if not large and total > np.iinfo(np.int32).max:
        raise OverflowError(f"{total} bytes of keys exceed int32 offsets; use large=True")
    present = key_len > 0
    if present.any():
        ends = key_pos[present] + lengths[present]
        in_side = key_pos[present] >= split
        limit = np.where(in_side, split + len(side), split)
        if (key_pos[present] < 0).any() or (ends > limit).any():
            raise ValueError("gather_keys: a key lies outside its buffer")
    data = np.empty(total, dtype=np.uint8)
    _gather_kernel(file, side, split, key_pos, key_len, offsets, data)
    return data, (offsets if large else offsets.astype(np.int32))


# --- plain-Python references (same signatures, same results; the tests compare them) --------------


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
    if magic not in (0, 1, 2):
        return STOP_CORRUPT, 0
    total = size + LOG_OVERHEAD
    if total > remaining:
        return STOP_PARTIAL, 0
    if (magic == 2 and total < V2_HEADER_SIZE) or (magic == 1 and size < LEGACY_MIN_SIZE_V1):
        return STOP_CORRUPT, 0
    return _CONTINUE, total


def _py_entry_fields(b, pos: int, total: int) -> tuple:
    off = _py_be(b, pos, 8)
    magic = b[pos + MAGIC_OFFSET]
    if magic == 2:
        return (
            pos, total, off, off + _py_be(b, pos + V2_LAST_OFFSET_DELTA_OFFSET, 4), magic,
            _py_be(b, pos + V2_ATTRIBUTES_OFFSET, 2), _py_be(b, pos + V2_PLE_OFFSET, 4),
            _py_be(b, pos + V2_BASE_TIMESTAMP_OFFSET, 8), _py_be(b, pos + V2_MAX_TIMESTAMP_OFFSET, 8),
            _py_be(b, pos + V2_PRODUCER_ID_OFFSET, 8), _py_be(b, pos + V2_PRODUCER_EPOCH_OFFSET, 2),
            _py_be(b, pos + V2_BASE_SEQUENCE_OFFSET, 4), _py_be(b, pos + V2_RECORDS_COUNT_OFFSET, 4),
            _py_be(b, pos + V2_CRC_OFFSET, 4, signed=False),
        )  # fmt: skip
    attr = b[pos + LEGACY_ATTRIBUTES_OFFSET]
    ts = _py_be(b, pos + LEGACY_TIMESTAMP_OFFSET, 8) if magic == 1 else -1
    count = 1 if attr & CODEC_MASK == 0 else LEGACY_COUNT_UNKNOWN
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
        if reason != _CONTINUE:
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


def walk_records_py(buf, rec_start, rec_end, base_offset, base_timestamp, ts_type, max_ts,
                    records_count=None) -> RecordColumns:  # fmt: skip
    """Plain-Python reference of `walk_records`."""
    arr = _as_u8(buf)
    b = arr.tobytes()
    rs, re_, bo, bt, tt, mt, limit = (
        a.tolist()
        for a in _walk_inputs(rec_start, rec_end, base_offset, base_timestamp, ts_type, max_ts,
                              records_count)  # fmt: skip
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
    while n < limit and not (limit == _NO_LIMIT and pos >= end):
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


# ====================================================================================================
# scan_segment: batches + CRCs + decompression + legacy -> one SegmentScan
# ====================================================================================================


@dataclass(slots=True)
class SegmentScan:
    """Everything the Spark scan needs from one buffer (a segment or a byte range of one).

    Record positions (`records.key_pos`, `records.value_pos`) live in one combined address space:
    [0, len(file)) is the file buffer itself (uncompressed v2 batches), [len(file), len(file) +
    len(side)) is `side`, where decompressed v2 record streams, then the decompressed contents of
    v0/v1 wrappers, were appended.
    """

    path: str
    file: np.ndarray  # uint8, the scanned buffer (not copied)
    side: np.ndarray  # uint8, decompressed v2 records + v0/v1 wrapper contents
    batches: BatchColumns
    records: RecordColumns  # error fields are always ERR_OK here (errors raise)
    # (hashes uint64, packed key bytes uint8, packed_offs int64) per record, from
    # `scan_segment(hash_keys=True)` (keyhash.hash_keys)
    keys: tuple | None = None

    @property
    def split(self) -> int:
        """First combined position that addresses `side`."""
        return len(self.file)

    @property
    def key_in_side(self) -> np.ndarray:
        """Per record: True when its key lives in `side`, False when in `file`."""
        return self.records.key_pos >= self.split

    def _slice(self, pos: int, length: int) -> bytes | None:
        if length < 0:
            return None
        if pos >= self.split:
            return self.side[pos - self.split : pos - self.split + length].tobytes()
        return self.file[pos : pos + length].tobytes()

    def key(self, i: int) -> bytes | None:
        return self._slice(int(self.records.key_pos[i]), int(self.records.key_len[i]))

    def value(self, i: int) -> bytes | None:
        return self._slice(int(self.records.value_pos[i]), int(self.records.value_len[i]))

    def gather_keys(self, *, large: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """All keys as (data, offsets), see `gather_keys`; null keys have zero length."""
        r = self.records
        return _gather(self.file, self.side, self.split, r.key_pos, r.key_len, large)

    def keys_arrow(self, *, large: bool = False):
        """The keys as a pyarrow BinaryArray (LargeBinaryArray) with nulls for null keys, built
        zero-copy over `gather_keys` output; ready for `pa.table({...}).group_by("key")`."""
        import pyarrow as pa

        data, offsets = self.gather_keys(large=large)
        valid = self.records.key_len >= 0
        n = len(valid)
        validity = None
        null_count = int(n - np.count_nonzero(valid))
        if null_count:
            validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        typ = pa.large_binary() if large else pa.binary()
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                     null_count=null_count)  # fmt: skip


def scan_segment(buf, path: str = "<memory>", *, start: int = 0, end: int = -1, verify_crc: bool = True,
                 allow_trailing: bool = False, hash_keys: bool = False) -> SegmentScan:  # fmt: skip
    """Scan buf[start:end] into batch and record columns; with `hash_keys`, also the keys packed
    and hashed (`SegmentScan.keys`).

    Raises CorruptRecordError (bad size/magic, malformed records), CrcMismatchError, TruncatedBatchError
    (partial trailing batch, unless `allow_trailing`; then `batches.stop_reason` says so),
    UnsupportedCodecError; each names `path` and the byte position of the failing batch.
    """
    file = _as_u8(buf)
    batches = scan_batches(file, start, end)
    v2 = batches.magic == 2
    codec = batches.codec
    plain = np.flatnonzero(v2 & (codec == 0))
    messages = np.flatnonzero(~v2 & (codec == 0))  # legacy entries of one message each
    walks = _verify_and_walk_plain(file, batches, plain, messages, path, verify_crc, hash_keys)
    plain_records, message_records = walks[0].columns(), walks[1].columns()
    # Errors in this order whatever their positions, as when every CRC was checked before the
    # walk: a batch cut short in the middle of a segment swallows the head of the next one, so its
    # CRC fails at its own position, before the walk goes astray after it.
    _check_stop(file, batches, path, allow_trailing)
    _check_codecs(batches, codec, v2, path)
    _raise_walk_error(plain_records, batches, path, in_side=False)
    packed = np.flatnonzero(v2 & (codec != 0) & (batches.size > V2_HEADER_SIZE))
    # The side buffer is built once per kind and only concatenated when a segment mixes
    # compressed v2 batches with compressed legacy wrappers, which is rare.
    packed_records, packed_side, packed_keys = _walk_compressed(file, batches, packed, path, len(file),
                                                                hash_keys)  # fmt: skip
    # Legacy errors in file order: wrappers after the first malformed message are not read.
    bad_message = int(message_records.error_batch)
    wrappers = np.flatnonzero(~v2 & (codec != 0))
    if bad_message >= 0:
        wrappers = wrappers[wrappers < bad_message]
    wrapped_records, wrapped_side, wrapped_keys = _walk_wrappers(file, batches, wrappers, path,
                                                                 len(file) + len(packed_side), hash_keys)  # fmt: skip
    if bad_message >= 0:
        _raise_legacy_error(file, batches, bad_message, path, message_records.error_code)
    side = packed_side if not len(wrapped_side) else np.concatenate([packed_side, wrapped_side])
    keys = [walks[0].keys(), packed_keys, walks[1].keys(), wrapped_keys] if hash_keys else None
    records, keys = _merge([plain_records, packed_records, message_records, wrapped_records], keys)
    return SegmentScan(path=path, file=file, side=side, batches=batches, records=records, keys=keys)


def _check_stop(file, batches: BatchColumns, path: str, allow_trailing: bool) -> None:
    pos = batches.stop_position
    if batches.stop_reason == STOP_CORRUPT:
        raise CorruptRecordError(_corrupt_entry_message(file, pos), path=path, position=pos)
    if batches.stop_reason == STOP_PARTIAL and not allow_trailing:
        available = len(file) - pos
        needed = LOG_OVERHEAD
        if available >= LOG_OVERHEAD:
            needed = _py_be(file, pos + SIZE_OFFSET, 4) + LOG_OVERHEAD
        raise TruncatedBatchError("partial trailing batch, log segment may be corrupt",
                                  available=available, needed=needed, path=path, position=pos)  # fmt: skip


def _corrupt_entry_message(file, pos: int) -> str:
    size = _py_be(file, pos + SIZE_OFFSET, 4)
    if size < MIN_ENTRY_SIZE:
        return f"record size {size} is less than the minimum record overhead ({MIN_ENTRY_SIZE})"
    magic = _py_be(file, pos + MAGIC_OFFSET, 1)
    if magic not in (0, 1, 2):
        return f"invalid magic {magic}"
    return f"entry size {size + LOG_OVERHEAD} is smaller than the magic v{magic} header"


CHUNK_BYTES = 1 << 20  # batches checked and walked together, while they are in the CPU cache


def _verify_and_walk_plain(file, batches: BatchColumns, plain: np.ndarray, messages: np.ndarray, path: str,
                           verify: bool, hashing: bool = False) -> tuple[_SubsetWalk, _LegacyWalk]:  # fmt: skip
    """Every batch's CRC (raising the first mismatch), the records of the uncompressed v2
    batches `plain` and the messages of the uncompressed legacy entries `messages`, ~CHUNK_BYTES
    of batches at a time: the CRC pass streams a chunk into the cache and the walks, whose every
    step waits for the bytes the previous one read, find it there (two passes over a whole 64 MiB
    segment, bigger than the cache, made the walk wait for memory: ~3x slower). Each walk stops
    at its first malformed record (its columns say where); the CRCs are checked to the end. With
    `hashing`, each chunk's keys are packed and hashed right after its walk
    (`keyhash.hash_keys`), for the same reason. Returns the two walks."""
    cuts = _chunk_cuts(batches.position + batches.size)
    plain_cuts = np.searchsorted(plain, cuts).tolist()
    message_cuts = np.searchsorted(messages, cuts).tolist()
    walk = _SubsetWalk(file, batches, plain, batches.position[plain] + V2_HEADER_SIZE,
                       batches.position[plain] + batches.size[plain], hashing)  # fmt: skip
    at = batches.position[messages]
    legacy = _LegacyWalk(file, messages, at, at + batches.size[messages], hashing=hashing)
    lo = 0
    for hi, plain_hi, message_hi in zip(cuts, plain_cuts, message_cuts, strict=True):
        if verify:
            _verify_crcs(file, batches, path, lo, hi)
        walk.advance(int(plain_hi))
        legacy.advance(int(message_hi))
        lo = hi
    return walk, legacy


def _chunk_cuts(ends: np.ndarray) -> list[int]:
    """Ends (exclusive indexes) of runs of ~CHUNK_BYTES of the items whose byte ranges end at
    `ends` (ascending); the last is len(ends)."""
    n = len(ends)
    if not n:
        return [0]
    marks = ends[0] + np.arange(CHUNK_BYTES, int(ends[-1] - ends[0]) + CHUNK_BYTES, CHUNK_BYTES)
    return [c for c in np.unique(np.searchsorted(ends, marks, side="right")).tolist() if c < n] + [n]


class _SubsetWalk:
    """`walk_records` over the v2 batches `idx` of `batches`, whose records are
    buf[rec_start[j]:rec_end[j]], called for a prefix of them at a time into one set of columns;
    batch indexes in the columns are those of `batches`. With `hashing`, the keys walked are
    packed and hashed too (`keys()`)."""

    kernel = staticmethod(_walk_kernel)

    def __init__(self, file, batches: BatchColumns, idx: np.ndarray, rec_start, rec_end, hashing: bool = False) -> None:
        args = _walk_inputs(rec_start, rec_end, batches.base_offset[idx], batches.base_timestamp[idx],
                            batches.timestamp_type[idx], batches.max_timestamp[idx],
                            batches.records_count[idx])  # fmt: skip
        self._setup(file, idx, args, _capacity(args[0], args[1], args[6]), hashing)

    def _setup(self, file, idx: np.ndarray, args: tuple, capacity: int, hashing: bool) -> None:
        self.file, self.idx, self.args, self.capacity = file, idx, args, capacity
        self.cols = [np.empty(self.capacity, dtype=dt) for dt in RECORD_DTYPES]
        self.done = self.k = 0  # batches walked, records written
        self.error = (ERR_OK, -1, -1)
        self.hashing = hashing
        if hashing:
            self.hashes = np.empty(self.capacity, np.uint64)
            self.packed_offs = np.empty(self.capacity + 1, np.int64)
            self.packed = np.empty(max(1, len(file) // 16), np.uint8)  # grown as needed
            self.packed_end = 0

    def advance(self, upto: int) -> None:
        """Walk batches [done, upto) of `idx` (nothing more after an error)."""
        a, b = self.done, upto
        if b <= a or self.error[0] != ERR_OK:
            return
        w, code, pos, batch = self.kernel(self.file, *(x[a:b] for x in self.args), self.capacity - self.k,
                                           *(c[self.k :] for c in self.cols))  # fmt: skip
        self.cols[0][self.k : self.k + w] += a  # batch indexes relative to the call
        if self.hashing and w:
            self._hash(self.k, self.k + w)
        self.k += w
        self.done = b
        if code != ERR_OK:
            self.error = (int(code), int(pos), int(batch) + a)

    def _hash(self, first: int, last: int) -> None:
        key_pos, key_len = self.cols[3], self.cols[4]
        need = self.packed_end + int(np.maximum(key_len[first:last], 0).sum())
        if need > len(self.packed):
            grown = np.empty(max(need, 2 * len(self.packed)), np.uint8)
            grown[: self.packed_end] = self.packed[: self.packed_end]
            self.packed = grown
        self.packed_end = hash_keys(self.file, self.file[:0], len(self.file), key_pos, key_len, first, last,
                                    self.packed, self.packed_offs, self.hashes, self.packed_end)  # fmt: skip

    def keys(self) -> tuple | None:
        if not self.hashing:
            return None
        if self.k == 0:
            self.packed_offs[0] = 0
        return self.hashes[: self.k], self.packed[: self.packed_end], self.packed_offs[: self.k + 1]

    def columns(self) -> RecordColumns:
        code, pos, batch = self.error
        cols = RecordColumns(*(c[: self.k] for c in self.cols), error_code=code, error_position=pos,
                             error_batch=int(self.idx[batch]) if batch >= 0 else -1)  # fmt: skip
        cols.batch_index = self.idx[cols.batch_index].astype(np.int32)  # subset index -> batch index
        return cols


class _LegacyWalk(_SubsetWalk):
    """`legacywalk.walk_legacy_kernel` over the regions buf[start[j]:end[j]] of the legacy
    entries `idx` (each region an uncompressed entry, or with `inner` the decompressed messages of
    a compressed wrapper, whose offset, magic, LogAppendTime flag and timestamp come with it), a
    prefix of them at a time, like `_SubsetWalk`."""

    kernel = staticmethod(walk_legacy_kernel)

    def __init__(self, buf, idx: np.ndarray, start, end, inner=None, wrapper_offset=None, wrapper_magic=None,
                 wrapper_lat=None, wrapper_ts=None, hashing: bool = False) -> None:  # fmt: skip
        n = len(idx)
        zeros = np.zeros(n, dtype=np.int64)
        args = (
            np.ascontiguousarray(start, dtype=np.int64), np.ascontiguousarray(end, dtype=np.int64),
            np.zeros(n, dtype=np.bool_) if inner is None else np.ascontiguousarray(inner, dtype=np.bool_),
            zeros if wrapper_offset is None else np.ascontiguousarray(wrapper_offset, dtype=np.int64),
            zeros if wrapper_magic is None else np.ascontiguousarray(wrapper_magic, dtype=np.int64),
            np.zeros(n, dtype=np.bool_) if wrapper_lat is None else np.ascontiguousarray(wrapper_lat, dtype=np.bool_),
            zeros if wrapper_ts is None else np.ascontiguousarray(wrapper_ts, dtype=np.int64),
        )  # fmt: skip
        self._setup(buf, idx, args, region_capacity(args[0], args[1], args[2]), hashing)


def _verify_crcs(file: np.ndarray, batches: BatchColumns, path: str, lo: int = 0, hi: int | None = None) -> None:
    """CRC-32C over [21, size) for v2, CRC-32 over [16, size) for v0/v1 (docs/kafka-rules.md#crc,
    #legacy-messages), of batches [lo, hi), in one compiled call (`legacywalk.entry_crcs`)."""
    hi = len(batches.position) if hi is None else hi
    actual = entry_crcs(file, batches.position[lo:hi], batches.size[lo:hi], batches.magic[lo:hi])
    bad = np.flatnonzero(actual != batches.crc[lo:hi])
    if len(bad):
        i = lo + int(bad[0])
        raise CrcMismatchError(f"magic v{int(batches.magic[i])} batch checksum mismatch", expected=int(batches.crc[i]),
                               actual=int(actual[i - lo]), path=path, position=int(batches.position[i]),
                               offset=int(batches.base_offset[i]))  # fmt: skip


def _check_codecs(batches: BatchColumns, codec: np.ndarray, v2: np.ndarray, path: str) -> None:
    # zstd (4) is illegal in legacy messages (docs/kafka-rules.md#compression); 5..7 are undefined everywhere.
    bad = np.flatnonzero((codec > MAX_CODEC) | (~v2 & (codec > 3)))
    if len(bad):
        i = int(bad[0])
        raise UnsupportedCodecError(f"unsupported compression codec id {int(codec[i])} "
                                    f"in a magic v{int(batches.magic[i])} batch",
                                    path=path, position=int(batches.position[i]),
                                    offset=int(batches.base_offset[i]))  # fmt: skip


_NO_BYTES = np.empty(0, dtype=np.uint8)


def _empty_records() -> RecordColumns:
    cols = [np.empty(0, dtype=dt) for dt in RECORD_DTYPES]
    return RecordColumns(*cols, error_code=ERR_OK, error_position=-1, error_batch=-1)


def _walk_subset(buf, batches: BatchColumns, idx: np.ndarray, rec_start, rec_end) -> RecordColumns:
    walk = _SubsetWalk(buf, batches, idx, rec_start, rec_end)
    walk.advance(len(idx))
    return walk.columns()


def _walk_compressed(file, batches: BatchColumns, idx: np.ndarray, path: str, base: int,
                     hashing: bool = False) -> tuple[RecordColumns, np.ndarray, tuple | None]:  # fmt: skip
    """Compressed v2 batches: decompress each record stream into the side buffer, walking (and
    with `hashing`, packing and hashing the keys of) ~CHUNK_BYTES of it at a time, right after
    it is copied there, while it is in the CPU cache. Returns (columns, side, keys or None)."""
    if not len(idx):
        walk = _SubsetWalk(_NO_BYTES, batches, idx, idx, idx, hashing)
        return _empty_records(), _NO_BYTES, walk.keys()
    from compaction.format.compression import decompress

    side_chunks = []
    mv = memoryview(file)
    start = np.empty(len(idx), dtype=np.int64)
    end = np.empty(len(idx), dtype=np.int64)
    at = 0
    for j, i in enumerate(idx.tolist()):
        pos, size = int(batches.position[i]), int(batches.size[i])
        codec = int(batches.attributes[i]) & CODEC_MASK
        data = _decompress(decompress, codec, mv[pos + V2_HEADER_SIZE : pos + size], 2, path, pos,
                           int(batches.base_offset[i]))  # fmt: skip
        side_chunks.append(data)
        start[j] = at
        at += len(data)
        end[j] = at
    # A large side buffer comes from the process's pool: a fresh multi-MiB array is fresh pages,
    # faulted in and zeroed every segment.
    side = POOL.take(at) if at >= POOLED_MIN_BYTES else np.empty(at, dtype=np.uint8)
    walk = _SubsetWalk(side, batches, idx, start, end, hashing)
    into, lo = memoryview(side), 0
    for hi in _chunk_cuts(end):
        for j, s, e in zip(range(lo, hi), start[lo:hi].tolist(), end[lo:hi].tolist()):
            into[s:e] = side_chunks[j]
            side_chunks[j] = None
        walk.advance(hi)
        lo = hi
    side.flags.writeable = False
    cols = walk.columns()
    _raise_walk_error(cols, batches, path, in_side=True, side_start=start)
    cols.key_pos += base
    cols.value_pos += base
    return cols, side, walk.keys()


def _decompress(decompress, codec: int, data, magic: int, path: str, pos: int, offset: int) -> bytes:
    try:
        return bytes(decompress(codec, data, magic, path=path, position=pos))
    except KafkaFormatError as e:  # already typed and placed; add the offset
        e.offset = offset
        raise
    except Exception as e:  # anything a codec library raises that compression.py does not map
        raise CorruptRecordError(f"cannot decompress codec {codec} records: {type(e).__name__}: {e}",
                                 path=path, position=pos, offset=offset) from e  # fmt: skip


def _raise_walk_error(cols: RecordColumns, batches: BatchColumns, path: str, *, in_side: bool,
                      side_start=None) -> None:  # fmt: skip
    if cols.error_code == ERR_OK:
        return
    i = cols.error_batch
    batch_pos = int(batches.position[i])
    what = ERR_NAMES.get(cols.error_code, f"error {cols.error_code}")
    if in_side:  # the position is inside a decompressed stream: report the batch, and where in it
        j = int(np.searchsorted(side_start, cols.error_position, side="right") - 1)
        inner = cols.error_position - int(side_start[j])
        raise CorruptRecordError(f"{what} at byte {inner} of the decompressed records of the batch",
                                 path=path, position=batch_pos, offset=int(batches.base_offset[i]))  # fmt: skip
    raise CorruptRecordError(f"{what} (in the batch at byte {batch_pos})", path=path,
                             position=cols.error_position, offset=int(batches.base_offset[i]))  # fmt: skip


def _walk_wrappers(file, batches: BatchColumns, idx: np.ndarray, path: str, base: int,
                   hashing: bool = False) -> tuple[RecordColumns, np.ndarray, tuple | None]:  # fmt: skip
    """Compressed v0/v1 wrappers `idx`: each one's value decompressed into the side buffer and its
    inner messages walked there in one kernel call (and with `hashing`, their keys packed and
    hashed). Sets each wrapper's `base_offset` (its first inner offset) and `records_count`.
    Returns (columns, side, keys or None); errors raise in file order."""
    if not len(idx):
        return _empty_records(), _NO_BYTES, _LegacyWalk(_NO_BYTES, idx, idx, idx, hashing=hashing).keys()
    from compaction.format.compression import decompress

    outer = _LegacyWalk(file, idx, batches.position[idx], batches.position[idx] + batches.size[idx])
    outer.advance(len(idx))
    heads = outer.columns()
    n_ok = len(heads)  # wrappers whose own message is well-formed
    chunks, at = [], 0
    start = np.zeros(len(idx), dtype=np.int64)
    end = np.zeros(len(idx), dtype=np.int64)
    mv = memoryview(file)
    for j, i in enumerate(idx[:n_ok].tolist()):
        vp, vl = int(heads.value_pos[j]), int(heads.value_len[j])
        try:
            if vl < 0:
                _raise_legacy_error(file, batches, i, path, ERR_OK)  # a null value
            codec = int(batches.attributes[i]) & CODEC_MASK
            data = _decompress(decompress, codec, mv[vp : vp + vl], int(batches.magic[i]), path, vp,
                               int(batches.last_offset[i]))  # fmt: skip
        except KafkaFormatError:  # after the errors of the wrappers before it, if any (raised here)
            _walk_inner(file, batches, idx[:j], _joined(chunks), start[:j], end[:j], path, base, False)
            raise
        chunks.append(np.frombuffer(data, dtype=np.uint8))
        start[j], at = at, at + len(data)
        end[j] = at
    if n_ok < len(idx):  # the wrappers before it were read: their errors come first
        _walk_inner(file, batches, idx[:n_ok], _joined(chunks), start[:n_ok], end[:n_ok], path, base, False)
        _raise_legacy_error(file, batches, int(idx[n_ok]), path, heads.error_code)
    side = _joined(chunks)
    side.flags.writeable = False
    cols, keys = _walk_inner(file, batches, idx, side, start, end, path, base, hashing)
    return cols, side, keys


def _joined(chunks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(chunks) if len(chunks) > 1 else chunks[0] if chunks else _NO_BYTES


def _walk_inner(file, batches: BatchColumns, idx: np.ndarray, side, start, end, path: str, base: int,
                hashing: bool) -> tuple[RecordColumns, tuple | None]:  # fmt: skip
    """The inner messages of the wrappers `idx`, decompressed to side[start[j]:end[j]]; raises
    the first malformed one's error; positions moved by `base` (the side's combined address)."""
    magic = batches.magic[idx].astype(np.int64)
    lat = (magic > 0) & ((batches.attributes[idx] & TIMESTAMP_TYPE_MASK) != 0)
    inner = np.ones(len(idx), dtype=np.bool_)
    walk = _LegacyWalk(side, idx, start, end, inner, batches.last_offset[idx], magic, lat,
                       batches.max_timestamp[idx], hashing)  # fmt: skip
    walk.advance(len(idx))
    cols = walk.columns()
    if cols.error_code != ERR_OK:
        _raise_legacy_error(file, batches, cols.error_batch, path, cols.error_code)
    first = np.searchsorted(cols.batch_index, idx, side="left")
    batches.records_count[idx] = np.searchsorted(cols.batch_index, idx, side="right") - first
    batches.base_offset[idx] = cols.offset[first]  # every wrapper holds a message (else an error)
    cols.key_pos += base
    cols.value_pos += base
    return cols, walk.keys()


def _raise_legacy_error(file, batches: BatchColumns, i: int, path: str, code: int) -> None:
    """The typed error `legacy.LegacyBatch` raises for entry i (the reader Kafka's rules were
    written down in), which the kernel found malformed; the kernel's own verdict otherwise."""
    from compaction.format.legacy import LegacyBatch

    pos, size = int(batches.position[i]), int(batches.size[i])
    LegacyBatch(memoryview(file)[pos : pos + size], pos, path).records()
    raise CorruptRecordError(LEGACY_ERR_NAMES.get(code, f"legacy error {code}"), path=path, position=pos,
                             offset=int(batches.last_offset[i]))  # fmt: skip


def _merge(parts: list[RecordColumns], keys: list | None = None) -> tuple[RecordColumns, tuple | None]:
    """Concatenate the record columns of the three paths back into batch order, and with `keys`
    (per part: `_SubsetWalk.keys()`) their hashed keys too: in the merged keys, packed_offs[r] is
    where record r's key starts in the packed bytes, which are then no longer in record order."""
    live = [j for j, p in enumerate(parts) if len(p)]
    if len(live) <= 1:
        j = live[0] if live else 0
        return (parts[j] if live else _empty_records()), (keys[j] if keys is not None else None)
    cols = [np.concatenate([getattr(parts[j], f) for j in live]) for f in RECORD_FIELDS]
    order = np.argsort(cols[0], kind="stable")  # each part is already in order within itself
    records = RecordColumns(*(c[order] for c in cols), error_code=ERR_OK, error_position=-1, error_batch=-1)
    if keys is None:
        return records, None
    shift = np.cumsum([0] + [len(keys[j][1]) for j in live])
    hashes = np.concatenate([keys[j][0] for j in live])[order]
    packed = np.concatenate([keys[j][1] for j in live])
    starts = np.concatenate([keys[j][2][:-1] + shift[n] for n, j in enumerate(live)])[order]
    return records, (hashes, packed, np.append(starts, shift[-1]))
