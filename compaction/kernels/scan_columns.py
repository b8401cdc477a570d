"""The scan's result columns, its stop reasons and error codes, and the argument checks shared by
the compiled walk (`scan_kernels`) and its plain-Python twin (`scan_reference`).

`BatchColumns` holds one row per entry of a buffer (a v2 batch or a v0/v1 log entry), `RecordColumns`
one row per record, with the positions of keys and values in the walked buffer (not copies).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compaction.format.layout import (
    COMPRESSION_CODEC_MASK,
    MIN_RECORD_SIZE,
    TIMESTAMP_TYPE_MASK,
    TIMESTAMP_TYPE_SHIFT,
)

LEGACY_COUNT_UNKNOWN = -1  # a compressed wrapper's count is only known after decompression

# --- scan_batches stop reasons ---------------------------------------------------------------------
STOP_END = 0  # every byte consumed
STOP_PARTIAL = 1  # a partial trailing batch (the rest is shorter than its declared size)
STOP_CORRUPT = 2  # size < 14, magic not in 0..2, or a header that cannot fit in its declared size
CONTINUE = -1

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

NO_LIMIT = np.iinfo(np.int64).max  # the records count of a region read to its end


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
    # int32 (legacy: 1 uncompressed; a wrapper: -1 here, its count after scan_segment)
    records_count: np.ndarray
    crc: np.ndarray  # uint32 as stored (v2: CRC-32C, legacy: CRC-32)
    stop_position: int  # where the scan stopped
    stop_reason: int  # STOP_END / STOP_PARTIAL / STOP_CORRUPT

    def __len__(self) -> int:
        return len(self.position)

    @property
    def codec(self) -> np.ndarray:
        return (self.attributes & COMPRESSION_CODEC_MASK).astype(np.int8)

    @property
    def timestamp_type(self) -> np.ndarray:
        return ((self.attributes & TIMESTAMP_TYPE_MASK) >> TIMESTAMP_TYPE_SHIFT).astype(np.int8)


BATCH_FIELDS = (
    "position",
    "size",
    "base_offset",
    "last_offset",
    "magic",
    "attributes",
    "partition_leader_epoch",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "records_count",
    "crc",
)
BATCH_DTYPES = (
    np.int64,
    np.int64,
    np.int64,
    np.int64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.int64,
    np.int64,
    np.int16,
    np.int32,
    np.int32,
    np.uint32,
)


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


def _records_limit(records_count, n: int) -> np.ndarray:
    if records_count is None:
        return np.full(n, NO_LIMIT, dtype=np.int64)
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
    # A region of n bytes holds at most n // MIN_RECORD_SIZE records: this bounds the output
    # allocation even when recordsCount is corrupt.
    by_bytes = np.maximum(rec_end - rec_start, 0) // MIN_RECORD_SIZE
    return int(np.minimum(np.maximum(limit, 0), by_bytes).sum())


def _empty_records() -> RecordColumns:
    cols = [np.empty(0, dtype=dt) for dt in RECORD_DTYPES]
    return RecordColumns(*cols, error_code=ERR_OK, error_position=-1, error_batch=-1)
