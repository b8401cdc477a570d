"""Compiled fast path: a .log buffer -> columnar numpy arrays (one row per batch, one per record).

The wire format (log entry framing, v2 batch header, v0/v1 message) is drawn in `format/layout.py`;
the v2 record is

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint (-1 null) | key | valueLength varint (-1 tombstone) | value
    | headersCount varint (>= 0) | headersCount x (keyLen varint >= 0 | key | valueLen varint >= -1 | value)

every varint zig-zag LEB128: int <= 5 bytes, long <= 10 bytes (docs/kafka-rules.md#varints).

The public entry of the scan, and where each layer lives:
  * `scan_batches` / `scan_batches_py`: walk the entries of a buffer (docs/kafka-rules.md#log-file-parsing)
    and return their header fields as `BatchColumns` (`scan_columns`). Legacy entries get the fields that
    exist.
  * `walk_records` / `walk_records_py`: decode the records of many v2 record regions in one call and
    return `RecordColumns` (positions of keys and values, not copies). Malformed input comes back as
    an error code and a byte position, never as an exception from inside the kernel.
  * `gather_keys`: keys -> one contiguous Arrow-ready binary column (int32 offsets, or int64 with
    `large=True` for `pa.large_binary()`).
  * `scan_segment`: CRC checks (all kinds in one compiled call per chunk), decompression into a
    side buffer, v0/v1 messages walked by `legacywalk` (in place, or in the side buffer for the
    contents of compressed wrappers), and typed errors naming the path and byte position
    (`scan_paths`).
The numba kernels are in `scan_kernels`, their plain-Python twins in `scan_reference`.

Kernels are `numba.njit(cache=True)`. numba writes its cache next to their file or, when that is not
writable (read-only site-packages, Spark executors), under `NUMBA_CACHE_DIR`; set that variable on
executors (e.g. `spark.executorEnv.NUMBA_CACHE_DIR=/tmp/numba`). When no cache location is usable at
all the kernels are compiled without a cache instead of failing the import.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compaction.errors import CorruptRecordError, TruncatedBatchError
from compaction.format.layout import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    MIN_ENTRY_SIZE,
    RECORD_BATCH_OVERHEAD,
    SIZE_OFFSET,
)
from compaction.kernels.scan_columns import (
    BATCH_DTYPES,
    BATCH_FIELDS,
    ERR_BAD_COUNT,
    ERR_BAD_REGION,
    ERR_BAD_VARINT,
    ERR_COUNT_MISMATCH,
    ERR_NAMES,
    ERR_NEGATIVE_LENGTH,
    ERR_OK,
    ERR_RECORD_SIZE,
    ERR_TRUNCATED,
    RECORD_DTYPES,
    RECORD_FIELDS,
    STOP_CORRUPT,
    STOP_END,
    STOP_PARTIAL,
    BatchColumns,
    RecordColumns,
    _as_u8,
    _bounds,
    _capacity,
    _walk_inputs,
)
from compaction.kernels.scan_kernels import _count_entries, _fill_entries, _gather_kernel, _walk_kernel
from compaction.kernels.scan_paths import (
    _check_codecs,
    _merge,
    _raise_legacy_error,
    _raise_walk_error,
    _verify_and_walk_plain,
    _walk_compressed,
    _walk_wrappers,
)
from compaction.kernels.scan_reference import _py_be, scan_batches_py, walk_records_py
from compaction.settings import MAX_INFLATED_BATCH_BYTES

__all__ = [
    "BATCH_DTYPES",
    "BATCH_FIELDS",
    "ERR_BAD_COUNT",
    "ERR_BAD_REGION",
    "ERR_BAD_VARINT",
    "ERR_COUNT_MISMATCH",
    "ERR_NAMES",
    "ERR_NEGATIVE_LENGTH",
    "ERR_OK",
    "ERR_RECORD_SIZE",
    "ERR_TRUNCATED",
    "RECORD_DTYPES",
    "RECORD_FIELDS",
    "STOP_CORRUPT",
    "STOP_END",
    "STOP_PARTIAL",
    "BatchColumns",
    "RecordColumns",
    "SegmentScan",
    "gather_keys",
    "scan_batches",
    "scan_batches_py",
    "scan_segment",
    "walk_records",
    "walk_records_py",
]


def scan_batches(buf, start: int = 0, end: int = -1) -> BatchColumns:
    """Header fields of every entry in buf[start:end] (numba). Never raises on malformed bytes:
    the scan stops and says why (`stop_reason`) and where (`stop_position`)."""
    buf = _as_u8(buf)
    start, end = _bounds(buf, start, end)
    n, stop_position, stop_reason = _count_entries(buf, start, end)
    cols = [np.empty(n, dtype=dt) for dt in BATCH_DTYPES]
    _fill_entries(buf, start, n, *cols)
    return BatchColumns(*cols, stop_position=int(stop_position), stop_reason=int(stop_reason))


def walk_records(
    buf, rec_start, rec_end, base_offset, base_timestamp, ts_type, max_ts, records_count=None
) -> RecordColumns:
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
    return RecordColumns(
        *(c[:k] for c in cols), error_code=int(code), error_position=int(pos), error_batch=int(batch)
    )


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
        return pa.Array.from_buffers(
            typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=null_count
        )


def scan_segment(
    buf,
    path: str = "<memory>",
    *,
    start: int = 0,
    end: int = -1,
    verify_crc: bool = True,
    allow_trailing: bool = False,
    hash_keys: bool = False,
    max_batch_bytes: int | None = None,
    inflate_limit: int = MAX_INFLATED_BATCH_BYTES,
) -> SegmentScan:
    """Scan buf[start:end] into batch and record columns; with `hash_keys`, also the keys packed
    and hashed (`SegmentScan.keys`).

    Raises CorruptRecordError (bad size/magic, malformed records, and with `max_batch_bytes` a
    batch larger than that: Kafka's `max.message.bytes`, checked before anything is inflated),
    CrcMismatchError, TruncatedBatchError (partial trailing batch, unless `allow_trailing`; then
    `batches.stop_reason` says so), UnsupportedCodecError, InflateLimitError (a batch's records
    inflate past `inflate_limit`); each names `path` and the byte position of the failing batch.
    """
    file = _as_u8(buf)
    batches = scan_batches(file, start, end)
    v2 = batches.magic == MAGIC_V2
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
    if max_batch_bytes is not None:
        check_batch_sizes(batches, max_batch_bytes, path)
    packed = np.flatnonzero(v2 & (codec != 0) & (batches.size > RECORD_BATCH_OVERHEAD))
    # The side buffer is built once per kind and only concatenated when a segment mixes
    # compressed v2 batches with compressed legacy wrappers, which is rare.
    packed_records, packed_side, packed_keys = _walk_compressed(
        file, batches, packed, path, len(file), hash_keys, inflate_limit
    )
    # Legacy errors in file order: wrappers after the first malformed message are not read.
    bad_message = int(message_records.error_batch)
    wrappers = np.flatnonzero(~v2 & (codec != 0))
    if bad_message >= 0:
        wrappers = wrappers[wrappers < bad_message]
    wrapped_records, wrapped_side, wrapped_keys = _walk_wrappers(
        file, batches, wrappers, path, len(file) + len(packed_side), hash_keys, inflate_limit
    )
    if bad_message >= 0:
        _raise_legacy_error(file, batches, bad_message, path, message_records.error_code)
    side = packed_side if not len(wrapped_side) else np.concatenate([packed_side, wrapped_side])
    keys = [walks[0].keys(), packed_keys, walks[1].keys(), wrapped_keys] if hash_keys else None
    records, keys = _merge([plain_records, packed_records, message_records, wrapped_records], keys)
    return SegmentScan(path=path, file=file, side=side, batches=batches, records=records, keys=keys)


def check_batch_sizes(batches: BatchColumns, max_batch_bytes: int, path: str) -> None:
    """Kafka's cleaner refuses a log holding a batch over `max.message.bytes` ("This log contains
    a message larger than maximum allowable size"); its compressed size says so before inflating."""
    too_big = np.flatnonzero(batches.size > max_batch_bytes)
    if len(too_big):
        i = int(too_big[0])
        raise CorruptRecordError(
            f"batch of {int(batches.size[i])} bytes is larger than max.message.bytes {max_batch_bytes}",
            path=path,
            position=int(batches.position[i]),
            offset=int(batches.base_offset[i]),
        )


def _check_stop(file, batches: BatchColumns, path: str, allow_trailing: bool) -> None:
    pos = batches.stop_position
    if batches.stop_reason == STOP_CORRUPT:
        raise CorruptRecordError(_corrupt_entry_message(file, pos), path=path, position=pos)
    if batches.stop_reason == STOP_PARTIAL and not allow_trailing:
        available = len(file) - pos
        needed = LOG_OVERHEAD
        if available >= LOG_OVERHEAD:
            needed = _py_be(file, pos + SIZE_OFFSET, 4) + LOG_OVERHEAD
        raise TruncatedBatchError(
            "partial trailing batch, log segment may be corrupt",
            available=available,
            needed=needed,
            path=path,
            position=pos,
        )


def _corrupt_entry_message(file, pos: int) -> str:
    size = _py_be(file, pos + SIZE_OFFSET, 4)
    if size < MIN_ENTRY_SIZE:
        return f"record size {size} is less than the minimum record overhead ({MIN_ENTRY_SIZE})"
    magic = _py_be(file, pos + MAGIC_OFFSET, 1)
    if magic not in (MAGIC_V0, MAGIC_V1, MAGIC_V2):
        return f"invalid magic {magic}"
    return f"entry size {size + LOG_OVERHEAD} is smaller than the magic v{magic} header"
