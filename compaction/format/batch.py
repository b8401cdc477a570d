"""RecordBatch v2 (magic 2): header, records, parse, control records. Building batches is in
`batch_build.py`.

Kafka sources: `clients/.../common/record/DefaultRecordBatch.java` (header layout, attributes,
`writeHeader`, `writeEmptyHeader`), `DefaultRecord.java` (record layout), `MemoryRecordsBuilder.java`
(building rules), `ControlRecordType.java`, `EndTransactionMarker.java`. docs/kafka-rules.md#batch-v2-header
to #derived-header-fields, #control-records, #writing-retained-batches.

Batch header (all big-endian; 61 bytes = `RECORD_BATCH_OVERHEAD`):

| offset | size | field                | meaning                                                   |
|-------:|-----:|----------------------|-----------------------------------------------------------|
| 0      | 8    | baseOffset           | offset of the first offset slot                           |
| 8      | 4    | batchLength          | bytes after this field (total size - 12)                  |
| 12     | 4    | partitionLeaderEpoch | -1 = none; NOT covered by the CRC                         |
| 16     | 1    | magic                | 2                                                         |
| 17     | 4    | crc                  | CRC-32C of bytes [21, end)                                |
| 21     | 2    | attributes           | flags in the low byte (byte 22), see the masks below      |
| 23     | 4    | lastOffsetDelta      | lastOffset - baseOffset                                   |
| 27     | 8    | baseTimestamp        | first record's timestamp, or the delete horizon (bit 6)   |
| 35     | 8    | maxTimestamp         | max record timestamp, or the append time (LogAppendTime)  |
| 43     | 8    | producerId           | -1 = none                                                 |
| 51     | 2    | producerEpoch        | -1 = none                                                 |
| 53     | 4    | baseSequence         | -1 = none                                                 |
| 57     | 4    | recordsCount         | number of records (uncompressed count)                    |
| 61     | ...  | records              | concatenated records, compressed as one stream if codec>0 |

Record (all varints zig-zag, see `varint.py`):
`length varint | attributes int8 (0) | timestampDelta varlong | offsetDelta varint |
keyLength varint (-1 null) | key | valueLength varint (-1 null = tombstone) | value |
headersCount varint | per header: keyLength varint, key utf-8, valueLength varint (-1 null), value`.

The offsets, sizes and attribute masks are declared in `layout.py`; `BATCH_HEADER` must agree.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compaction.errors import CorruptRecordError, CrcMismatchError
from compaction.format import compression
from compaction.format.crc import crc32c
from compaction.format.layout import (
    COMPRESSION_CODEC_MASK,
    CONTROL_MASK,
    CRC_COVERED_FROM,
    CREATE_TIME,
    DELETE_HORIZON_MASK,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from compaction.format.varint import read_varint, read_varlong

if TYPE_CHECKING:
    from typing_extensions import Buffer

BATCH_HEADER = struct.Struct(
    ">"
    "q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc (unsigned)
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordsCount
)

CRC_FIELD = struct.Struct(">I")
BATCH_LENGTH_FIELD = struct.Struct(">i")
ATTRIBUTES_FIELD = struct.Struct(">h")

NO_TIMESTAMP_TYPE = -1  # TimestampType id; CREATE_TIME and LOG_APPEND_TIME are the attribute bit's values
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# Control records (docs/kafka-rules.md#control-records): key = int16 version + int16 type; COMMIT/ABORT value
# = int16 version + int32 coordinator epoch.
CONTROL_ABORT, CONTROL_COMMIT = 0, 1
CONTROL_KEY = struct.Struct(">hh")
END_TXN_MARKER_VALUE = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

RECORD_ATTRIBUTES = 0  # no record-level attributes are defined


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(slots=True)
class BatchHeader:
    """The fixed header fields. Also used for v0/v1 "batches" (see `legacy.py`)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def unpack_from(cls, buf: Buffer, pos: int = 0) -> BatchHeader:
        return cls(*BATCH_HEADER.unpack_from(buf, pos))

    def pack(self) -> bytes:
        return BATCH_HEADER.pack(
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def codec(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        if self.magic == MAGIC_V0:  # v0 has no timestamps at all
            return NO_TIMESTAMP_TYPE
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID


class RecordBatch:
    """A v2 batch over a memoryview of its bytes (`raw`), found at byte `position` of `path`."""

    __slots__ = ("header", "path", "position", "raw")

    def __init__(self, raw: Buffer, position: int = 0, path: str = "<memory>") -> None:
        self.raw = memoryview(raw)
        self.position = position
        self.path = path
        if len(self.raw) < RECORD_BATCH_OVERHEAD:
            raise self._corrupt(
                f"record batch of {len(self.raw)} bytes is smaller than the "
                f"{RECORD_BATCH_OVERHEAD}-byte v2 header"
            )
        self.header = BatchHeader.unpack_from(self.raw)
        if self.header.magic != MAGIC_V2:
            raise self._corrupt(f"magic {self.header.magic} is not a v2 record batch")
        if self.header.size != len(self.raw):
            raise self._corrupt(
                f"batch length field says {self.header.size} bytes, buffer has {len(self.raw)}"
            )

    def _corrupt(self, message: str) -> CorruptRecordError:
        offset = getattr(self, "header", None)
        return CorruptRecordError(
            message,
            path=self.path,
            position=self.position,
            offset=None if offset is None else offset.base_offset,
        )

    @property
    def magic(self) -> int:
        return MAGIC_V2

    def computed_crc(self) -> int:
        return crc32c(self.raw[CRC_COVERED_FROM:])

    def crc_valid(self) -> bool:
        return self.computed_crc() == self.header.crc

    def ensure_valid(self) -> None:
        """Kafka's `RecordBatch.ensureValid`. Test-only: the job checks CRCs in the scan kernels."""
        actual = self.computed_crc()
        if actual != self.header.crc:
            raise CrcMismatchError(
                "record batch checksum mismatch",
                expected=self.header.crc,
                actual=actual,
                path=self.path,
                position=self.position,
                offset=self.header.base_offset,
            )

    def records_payload(self) -> bytes | memoryview:
        """The (decompressed) concatenated records."""
        body = self.raw[RECORD_BATCH_OVERHEAD:]
        if self.header.codec == compression.CODEC_NONE:
            return body
        return compression.decompress(
            self.header.codec, body, MAGIC_V2, path=self.path, position=self.position + RECORD_BATCH_OVERHEAD
        )

    def records(self) -> list[Record]:
        """Decode every record. LogAppendTime batches report maxTimestamp for every record."""
        h = self.header
        if h.records_count < 0:
            raise self._corrupt(f"invalid record count {h.records_count}")
        try:
            return decode_records(self.records_payload(), h)
        except CorruptRecordError as err:
            if err.path != "<memory>":
                raise
            raise self._corrupt(f"{err.message} (at byte {err.position} of the records)") from err

    def control_type(self) -> int | None:
        """Type of the first control record (0 ABORT, 1 COMMIT, ...); None if not a control batch."""
        if not self.header.is_control or self.header.records_count == 0:
            return None
        first = self.records()[0]
        return parse_control_type(first.key, self)


def decode_records(payload: bytes | memoryview, header: BatchHeader) -> list[Record]:
    """Decode `header.records_count` records from `payload`; no bytes may remain afterwards."""
    log_append = header.timestamp_type == LOG_APPEND_TIME
    out = []
    pos = 0
    for _ in range(header.records_count):
        record, pos = _decode_record(payload, pos, header.base_offset, header.base_timestamp)
        if log_append:
            record.timestamp = header.max_timestamp
        out.append(record)
    if pos != len(payload):
        raise CorruptRecordError(
            f"Incorrect declared batch size: {len(payload) - pos} bytes left after "
            f"{header.records_count} records",
            position=pos,
        )
    return out


def _read_nullable(buf: memoryview, pos: int, length: int, what: str) -> tuple[bytes | None, int]:
    """A nullable field's bytes (a negative length: null)."""
    if length < 0:
        return None, pos
    return _read_exact(buf, pos, length, what)


def _read_exact(buf: memoryview, pos: int, length: int, what: str) -> tuple[bytes, int]:
    if pos + length > len(buf):
        raise CorruptRecordError(f"{what} of {length} bytes runs past the end", position=pos)
    return bytes(buf[pos : pos + length]), pos + length


def _decode_record(
    buf: bytes | memoryview, pos: int, base_offset: int, base_timestamp: int
) -> tuple[Record, int]:
    start = pos
    size, pos = read_varint(buf, pos)
    body_start = pos
    if size < 0 or body_start + size > len(buf):
        raise CorruptRecordError(f"record length {size} runs past the end of the batch", position=start)
    buf_end = body_start + size
    view = memoryview(buf)[:buf_end]  # a record may not read past its declared length
    pos += 1  # record attributes: int8, unused
    ts_delta, pos = read_varlong(view, pos)
    offset_delta, pos = read_varint(view, pos)
    key_len, pos = read_varint(view, pos)
    key, pos = _read_nullable(view, pos, key_len, "key")
    value_len, pos = read_varint(view, pos)
    value, pos = _read_nullable(view, pos, value_len, "value")
    headers, pos = _decode_headers(view, pos)
    if pos != buf_end:
        raise CorruptRecordError(
            f"Invalid record size: expected {size} bytes in record payload, read {pos - body_start}",
            position=start,
        )
    return Record(base_offset + offset_delta, base_timestamp + ts_delta, key, value, headers), pos


def _decode_headers(buf: memoryview, pos: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, pos = read_varint(buf, pos)
    if count < 0:
        raise CorruptRecordError(f"invalid negative header count {count}", position=pos)
    headers = []
    for _ in range(count):
        key_len, pos = read_varint(buf, pos)
        if key_len < 0:
            raise CorruptRecordError(f"invalid negative header key size {key_len}", position=pos)
        key, pos = _read_exact(buf, pos, key_len, "header key")
        value_len, pos = read_varint(buf, pos)
        value, pos = _read_nullable(buf, pos, value_len, "header value")
        # Java decodes header keys with `new String(bytes, UTF_8)`, replacing malformed input.
        headers.append((key.decode("utf-8", errors="replace"), value))
    return tuple(headers), pos


# --- control records -----------------------------------------------------------------------------


def control_record(control_type: int, coordinator_epoch: int = 0) -> tuple[bytes, bytes]:
    """Key and value of an end-transaction marker (COMMIT or ABORT), as the broker writes them."""
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise ValueError(f"control type {control_type} is not an end-transaction marker")
    key = CONTROL_KEY.pack(CONTROL_KEY_VERSION, control_type)
    value = END_TXN_MARKER_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    return key, value


def parse_control_type(key: bytes | None, where: RecordBatch | None = None) -> int:
    """ControlRecordType.parseTypeId: the int16 at key offset 2; version must be >= 0."""
    path = "<memory>" if where is None else where.path
    position = None if where is None else where.position
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError(
            "invalid control record key (fewer than 4 bytes)", path=path, position=position
        )
    version, control_type = CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(
            f"invalid control record key version {version}", path=path, position=position
        )
    return control_type


def parse_end_txn_marker(value: bytes | None) -> tuple[int, int]:
    """(version, coordinatorEpoch) of a COMMIT/ABORT marker value."""
    if value is None or len(value) < END_TXN_MARKER_VALUE.size:
        raise CorruptRecordError("invalid end-transaction marker value")
    return END_TXN_MARKER_VALUE.unpack_from(value)
