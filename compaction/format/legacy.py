"""Legacy message sets, magic v0 and v1 (docs/kafka-rules.md#legacy-messages): read (incl. compressed
wrappers) and write.

Kafka sources: `clients/.../common/record/LegacyRecord.java` (message layout, CRC),
`AbstractLegacyRecordBatch.java` (log entry header, `DeepRecordsIterator`), `MemoryRecordsBuilder.java`
(`appendLegacyRecord`, `writeLegacyCompressedWrapperHeader`).

Log entry (all big-endian):

| offset | size | field       | meaning                                                            |
|-------:|-----:|-------------|--------------------------------------------------------------------|
| 0      | 8    | offset      | absolute offset (wrapper: the LAST inner offset)                   |
| 8      | 4    | messageSize | bytes of the message that follows                                  |
| 12     | 4    | crc         | CRC-32 (IEEE) of the message from `magic` to the end               |
| 16     | 1    | magic       | 0 or 1                                                             |
| 17     | 1    | attributes  | bits 0-2 codec (0..3; zstd illegal), bit 3 timestamp type (v1)     |
| 18     | 8    | timestamp   | v1 only                                                            |
| ...    | 4    | keyLength   | -1 = null                                                          |
| ...    | n    | key         |                                                                    |
| ...    | 4    | valueLength | -1 = null                                                          |
| ...    | n    | value       | compressed wrapper: the compressed concatenation of inner entries  |

Compressed wrappers: v0 inner offsets are absolute; v1 inner offsets are relative (0..n-1) and the
absolute offset is `wrapperOffset - lastInnerRelative + innerRelative`, except that a wrapper
offset of 0 means base 0 (a librdkafka quirk). A LogAppendTime v1 wrapper's timestamp replaces
every inner timestamp. Inner messages may not be compressed; an empty wrapper is invalid.

The "batch" objects here mimic `batch.RecordBatch`: `header` (a `BatchHeader` with magic 0/1,
producer fields -1), `position`, `raw`, `magic`, `crc_valid()`, `records()`, `control_type()`.
The offsets and minimum sizes are declared in `layout.py`; the header Structs here must agree.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from compaction.errors import CorruptRecordError, CrcMismatchError
from compaction.format import compression
from compaction.format.batch import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    Record,
)
from compaction.format.crc import crc32
from compaction.format.layout import (
    COMPRESSION_CODEC_MASK,
    CREATE_TIME,
    LEGACY_CRC_COVERED_FROM,
    LEGACY_CRC_OFFSET,
    LEGACY_MAGIC_OFFSET,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V1,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    TIMESTAMP_TYPE_MASK,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer

LOG_ENTRY_HEADER = struct.Struct(">qi")  # offset, messageSize
MESSAGE_HEADER_V0 = struct.Struct(
    ">"
    "q"  # offset
    "i"  # messageSize
    "I"  # crc
    "b"  # magic
    "b"  # attributes
)
MESSAGE_HEADER_V1 = struct.Struct(MESSAGE_HEADER_V0.format + "q")  # + timestamp
LENGTH_FIELD = struct.Struct(">i")  # key and value lengths
RECORD_OVERHEAD = {MAGIC_V0: RECORD_OVERHEAD_V0, MAGIC_V1: RECORD_OVERHEAD_V1}  # the smallest message size
_HEADER_BY_MAGIC = {MAGIC_V0: MESSAGE_HEADER_V0, MAGIC_V1: MESSAGE_HEADER_V1}


class _Message:
    """One decoded log entry (outer or inner)."""

    __slots__ = ("attributes", "crc", "key", "magic", "offset", "timestamp", "value")

    def __init__(
        self,
        offset: int,
        crc: int,
        magic: int,
        attributes: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
    ) -> None:
        self.offset, self.crc, self.magic, self.attributes = offset, crc, magic, attributes
        self.timestamp, self.key, self.value = timestamp, key, value

    @property
    def codec(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def is_log_append_time(self) -> bool:
        return self.magic > MAGIC_V0 and bool(self.attributes & TIMESTAMP_TYPE_MASK)


def _read_nullable(buf: bytes | memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + LENGTH_FIELD.size > end:
        raise CorruptRecordError("message key/value length runs past the end of the message", position=pos)
    (length,) = LENGTH_FIELD.unpack_from(buf, pos)
    pos += LENGTH_FIELD.size
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptRecordError(f"message key/value of {length} bytes runs past the end", position=pos)
    return bytes(buf[pos : pos + length]), pos + length


def decode_message(buf: bytes | memoryview, pos: int = 0) -> tuple[_Message, int]:
    """Decode the log entry at `pos`; returns it and the position after it."""
    if len(buf) - pos < LOG_OVERHEAD + RECORD_OVERHEAD[MAGIC_V0]:
        raise CorruptRecordError("legacy message shorter than the minimum v0 message", position=pos)
    offset, size = LOG_ENTRY_HEADER.unpack_from(buf, pos)
    magic = buf[pos + LEGACY_MAGIC_OFFSET]
    if magic not in _HEADER_BY_MAGIC:
        raise CorruptRecordError(f"invalid legacy magic {magic}", position=pos, offset=offset)
    end = pos + LOG_OVERHEAD + size
    if size < RECORD_OVERHEAD[magic] or end > len(buf):
        raise CorruptRecordError(f"invalid v{magic} message size {size}", position=pos, offset=offset)
    header = _HEADER_BY_MAGIC[magic]
    fields = header.unpack_from(buf, pos)
    timestamp = fields[5] if magic == MAGIC_V1 else NO_TIMESTAMP
    key, p = _read_nullable(buf, pos + header.size, end)
    value, p = _read_nullable(buf, p, end)
    if p != end:
        raise CorruptRecordError(
            f"{end - p} bytes left over in a v{magic} message", position=pos, offset=offset
        )
    return _Message(offset, fields[2], magic, fields[4], timestamp, key, value), end


class LegacyBatch:
    """One v0/v1 log entry seen as a batch: a plain message (one record) or a compressed wrapper."""

    __slots__ = ("_header", "_message", "_records", "path", "position", "raw")

    def __init__(self, raw: Buffer, position: int = 0, path: str = "<memory>") -> None:
        self.raw = memoryview(raw)
        self.position = position
        self.path = path
        self._records: list[Record] | None = None
        self._header: BatchHeader | None = None
        try:
            self._message, end = decode_message(self.raw, 0)
        except CorruptRecordError as err:
            raise self._corrupt(err.message, err.offset) from err
        if end != len(self.raw):
            raise self._corrupt(f"entry is {len(self.raw)} bytes but its message ends at {end}")

    def _corrupt(self, message: str, offset: int | None = None) -> CorruptRecordError:
        return CorruptRecordError(message, path=self.path, position=self.position, offset=offset)

    @property
    def magic(self) -> int:
        return self._message.magic

    @property
    def is_compressed(self) -> bool:
        return self._message.codec != compression.CODEC_NONE

    @property
    def header(self) -> BatchHeader:
        """Batch-like header; for a wrapper, `base_offset` needs the inner records (decompresses)."""
        if self._header is None:
            m = self._message
            records = self.records()
            base = records[0].offset
            self._header = BatchHeader(
                base_offset=base,
                batch_length=len(self.raw) - LOG_OVERHEAD,
                partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
                magic=m.magic,
                crc=m.crc,
                attributes=m.attributes & 0xFF,
                last_offset_delta=m.offset - base,
                base_timestamp=m.timestamp,
                max_timestamp=m.timestamp,
                producer_id=NO_PRODUCER_ID,
                producer_epoch=NO_PRODUCER_EPOCH,
                base_sequence=NO_SEQUENCE,
                records_count=len(records),
            )
        return self._header

    @property
    def last_offset(self) -> int:
        """The entry's own offset: no decompression needed."""
        return self._message.offset

    def computed_crc(self) -> int:
        return crc32(self.raw[LEGACY_CRC_COVERED_FROM:])

    def crc_valid(self) -> bool:
        return self.computed_crc() == self._message.crc

    def ensure_valid(self) -> None:
        """Kafka's `LegacyRecord.ensureValid`. Test-only: the job checks CRCs in the scan kernels."""
        actual = self.computed_crc()
        if actual != self._message.crc:
            raise CrcMismatchError(
                "message checksum mismatch",
                expected=self._message.crc,
                actual=actual,
                path=self.path,
                position=self.position,
                offset=self._message.offset,
            )

    def control_type(self) -> None:
        return None  # legacy formats have no control records

    def records(self) -> list[Record]:
        if self._records is None:
            m = self._message
            if not self.is_compressed:
                self._records = [Record(m.offset, m.timestamp, m.key, m.value)]
            else:
                self._records = self._deep_records()
        return self._records

    def _deep_records(self) -> list[Record]:
        wrapper = self._message
        if wrapper.value is None:
            raise self._corrupt("compressed wrapper message with a null value", wrapper.offset)
        value_position = self.position + len(self.raw) - len(wrapper.value)
        data = compression.decompress(
            wrapper.codec, wrapper.value, wrapper.magic, path=self.path, position=value_position
        )
        inner = self._inner_messages(data)
        if wrapper.magic > MAGIC_V0:
            last_relative = inner[-1].offset
            base = 0 if wrapper.offset == 0 else wrapper.offset - last_relative
        else:
            base = 0  # v0 inner offsets are absolute
        out = []
        for m in inner:
            timestamp = wrapper.timestamp if wrapper.is_log_append_time else m.timestamp
            out.append(Record(base + m.offset, timestamp, m.key, m.value))
        return out

    def _inner_messages(self, data: bytes) -> list[_Message]:
        inner = []
        pos = 0
        while pos < len(data):
            try:
                m, pos = decode_message(data, pos)
            except CorruptRecordError as err:
                raise self._corrupt(
                    f"inner message at byte {err.position} of the decompressed value: {err.message}",
                    self._message.offset,
                ) from err
            if m.codec != compression.CODEC_NONE:
                raise self._corrupt("compressed message inside a compressed wrapper", self._message.offset)
            inner.append(m)
        if not inner:
            raise self._corrupt("compressed wrapper with no inner records", self._message.offset)
        return inner


# --- writing -------------------------------------------------------------------------------------


def encode_message(
    offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None
) -> bytes:
    """One log entry: offset, size, crc, magic, attributes, [timestamp], key, value."""
    header = _HEADER_BY_MAGIC[magic]
    body = bytearray()
    for data in (key, value):
        body += LENGTH_FIELD.pack(-1 if data is None else len(data))
        body += b"" if data is None else data
    size = header.size - LOG_OVERHEAD + len(body)
    head_fields = [offset, size, 0, magic, attributes] + ([timestamp] if magic == MAGIC_V1 else [])
    entry = bytearray(header.pack(*head_fields))
    entry += body
    struct.pack_into(">I", entry, LEGACY_CRC_OFFSET, crc32(memoryview(entry)[LEGACY_CRC_COVERED_FROM:]))
    return bytes(entry)


def _check_legacy(
    records: Sequence[Record], magic: int, timestamp_type: int, log_append_time: int | None
) -> None:
    if magic not in _HEADER_BY_MAGIC:
        raise ValueError(f"legacy magic must be 0 or 1, got {magic}")
    if any(r.headers for r in records):
        raise ValueError("magic v0/v1 does not support record headers")
    if timestamp_type == LOG_APPEND_TIME and (magic == MAGIC_V0 or log_append_time is None):
        raise ValueError("LogAppendTime needs magic v1 and log_append_time")


def build_legacy_message_set(
    records: Iterable[Record],
    magic: int,
    codec: int = compression.CODEC_NONE,
    *,
    timestamp_type: int = CREATE_TIME,
    log_append_time: int | None = None,
) -> bytes:
    """v0/v1 bytes for `records` at their own offsets: one message per record when uncompressed,
    one compressed wrapper otherwise (v0 absolute / v1 relative inner offsets, as Kafka writes)."""
    records = list(records)
    _check_legacy(records, magic, timestamp_type, log_append_time)
    ts_bit = TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0

    def timestamp(r: Record) -> int:
        if magic == MAGIC_V0:
            return NO_TIMESTAMP
        if timestamp_type == LOG_APPEND_TIME and log_append_time is not None:  # not None: _check_legacy
            return log_append_time
        return r.timestamp

    if codec == compression.CODEC_NONE:
        return b"".join(
            encode_message(r.offset, magic, ts_bit, timestamp(r), r.key, r.value) for r in records
        )
    if not records:
        raise ValueError("a compressed wrapper needs at least one record")
    first = records[0].offset
    inner = b"".join(
        encode_message(
            r.offset if magic == MAGIC_V0 else r.offset - first, magic, ts_bit, timestamp(r), r.key, r.value
        )
        for r in records
    )
    wrapper_ts = NO_TIMESTAMP if magic == MAGIC_V0 else max([NO_TIMESTAMP, *map(timestamp, records)])
    value = compression.compress(codec, inner, magic)
    return encode_message(records[-1].offset, magic, codec | ts_bit, wrapper_ts, None, value)
