"""Building RecordBatch v2 (magic 2): records, whole batches and empty batches, as Kafka's
`MemoryRecordsBuilder` writes them (docs/kafka-rules.md#writing-retained-batches). The layout is
drawn in `batch.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from compaction.format import compression
from compaction.format.batch import (
    CRC_FIELD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_ATTRIBUTES,
    BatchHeader,
    Record,
)
from compaction.format.crc import crc32c
from compaction.format.layout import (
    COMPRESSION_CODEC_MASK,
    CONTROL_MASK,
    CRC_COVERED_FROM,
    CRC_OFFSET,
    CREATE_TIME,
    DELETE_HORIZON_MASK,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from compaction.format.varint import write_varint, write_varlong


def encode_record(out: bytearray, record: Record, offset_delta: int, timestamp_delta: int) -> None:
    """Append one record (DefaultRecord.writeTo) to `out`."""
    body = bytearray([RECORD_ATTRIBUTES])
    write_varlong(timestamp_delta, body)
    write_varint(offset_delta, body)
    _write_nullable(body, record.key)
    _write_nullable(body, record.value)
    write_varint(len(record.headers), body)
    for name, value in record.headers:
        _write_nullable(body, name.encode("utf-8"))
        _write_nullable(body, value)
    write_varint(len(body), out)
    out += body


def _write_nullable(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(-1, out)
    else:
        write_varint(len(data), out)
        out += data


def _attributes(
    codec: int, timestamp_type: int, is_transactional: bool, is_control: bool, has_delete_horizon: bool
) -> int:
    return (
        (codec & COMPRESSION_CODEC_MASK)
        | (TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
        | (TRANSACTIONAL_MASK if is_transactional else 0)
        | (CONTROL_MASK if is_control else 0)
        | (DELETE_HORIZON_MASK if has_delete_horizon else 0)
    )


def _seal(header: BatchHeader, payload: bytes) -> bytes:
    """Header + payload with `batch_length` and the CRC filled in."""
    header.batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload)
    header.crc = 0
    buf = bytearray(header.pack())
    buf += payload
    header.crc = crc32c(memoryview(buf)[CRC_COVERED_FROM:])
    CRC_FIELD.pack_into(buf, CRC_OFFSET, header.crc)
    return bytes(buf)


def _validate_producer_fields(
    producer_id: int, producer_epoch: int, base_sequence: int, is_transactional: bool, is_control: bool
) -> None:
    # MemoryRecordsBuilder's constructor checks, so that we never write what Kafka would refuse.
    if is_transactional and producer_id == NO_PRODUCER_ID:
        raise ValueError("cannot write transactional messages without a valid producer id")
    if producer_id != NO_PRODUCER_ID and not is_control:
        if producer_epoch == NO_PRODUCER_EPOCH:
            raise ValueError("invalid negative producer epoch")
        if base_sequence < 0:
            raise ValueError("invalid negative sequence number used")


def _check_offsets(records: Sequence[Record], base_offset: int) -> None:
    previous = None
    for record in records:
        if record.offset < base_offset or (previous is not None and record.offset <= previous):
            raise ValueError(
                f"illegal offset {record.offset} (base {base_offset}, previous {previous}); "
                "offsets must increase"
            )
        previous = record.offset


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int | None = None,
    codec: int = compression.CODEC_NONE,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
    log_append_time: int | None = None,
) -> bytes:
    """Encode a v2 batch the way `MemoryRecordsBuilder` does (docs/kafka-rules.md#rebuilding-a-batch).

    * `base_offset` defaults to the first record's offset; records keep their absolute offsets
      (gaps allowed), so rebuilding with the original base offset preserves every offsetDelta.
    * `last_offset_delta` may be forced above the last record's delta (the cleaner keeps the
      original one so that the producer's last sequence survives).
    * `delete_horizon_ms` sets attribute bit 6 and becomes `baseTimestamp`; every
      timestampDelta is then relative to it (and may be negative).
    * LogAppendTime needs `log_append_time`, which becomes `maxTimestamp`.
    """
    records = list(records)
    if not records:
        raise ValueError("a batch needs at least one record; use build_empty_batch for an empty one")
    _validate_producer_fields(producer_id, producer_epoch, base_sequence, is_transactional, is_control)
    if timestamp_type == LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("LogAppendTime batches need log_append_time")
        max_timestamp = log_append_time
    else:  # MemoryRecordsBuilder starts from NO_TIMESTAMP and keeps the largest
        max_timestamp = max([NO_TIMESTAMP, *(r.timestamp for r in records)])
    base_offset = records[0].offset if base_offset is None else base_offset
    _check_offsets(records, base_offset)
    natural_last_delta = records[-1].offset - base_offset
    if last_offset_delta is None:
        last_offset_delta = natural_last_delta
    elif last_offset_delta < natural_last_delta:
        raise ValueError(
            f"last_offset_delta {last_offset_delta} is below the last record's {natural_last_delta}"
        )

    if delete_horizon_ms is not None and delete_horizon_ms >= 0:
        has_horizon, base_timestamp = True, delete_horizon_ms
    else:
        has_horizon, base_timestamp = False, records[0].timestamp
    payload = bytearray()
    for record in records:
        encode_record(payload, record, record.offset - base_offset, record.timestamp - base_timestamp)
    header = BatchHeader(
        base_offset=base_offset,
        batch_length=0,
        partition_leader_epoch=partition_leader_epoch,
        magic=MAGIC_V2,
        crc=0,
        attributes=_attributes(codec, timestamp_type, is_transactional, is_control, has_horizon),
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=len(records),
    )
    return _seal(header, compression.compress(codec, bytes(payload), MAGIC_V2))


def build_empty_batch(header: BatchHeader) -> bytes:
    """The 61-byte header Kafka keeps when no record of a batch survives
    (docs/kafka-rules.md#writing-retained-batches, #empty-batch).

    Keeps base offset, lastOffsetDelta, producer fields, leader epoch, timestamp type,
    transactional and control flags and maxTimestamp; codec none; delete-horizon flag cleared;
    baseTimestamp -1; no records; fresh CRC.
    """
    empty = BatchHeader(
        base_offset=header.base_offset,
        batch_length=0,
        partition_leader_epoch=header.partition_leader_epoch,
        magic=MAGIC_V2,
        crc=0,
        attributes=_attributes(
            compression.CODEC_NONE, header.timestamp_type, header.is_transactional, header.is_control, False
        ),
        last_offset_delta=header.last_offset_delta,
        base_timestamp=NO_TIMESTAMP,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=0,
    )
    return _seal(empty, b"")
