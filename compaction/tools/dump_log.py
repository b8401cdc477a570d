"""The `.log` printers of `python -m compaction dump` (`tools/dump.py`): batch lines, record
lines and coordinator records, in DumpLogSegments' vocabulary or as JSON objects."""

from __future__ import annotations

import base64
import posixpath
from typing import TYPE_CHECKING

from compaction.errors import KafkaFormatError
from compaction.format.batch import CONTROL_ABORT, CONTROL_COMMIT, parse_control_type, parse_end_txn_marker
from compaction.format.compression import CODEC_NAMES
from compaction.format.consumer_offsets import format_offsets_record
from compaction.format.layout import CREATE_TIME, INT32_MAX, LOG_APPEND_TIME, MAGIC_V2
from compaction.format.segment import SegmentReader
from compaction.format.transaction_log import format_txn_record

if TYPE_CHECKING:
    from compaction.tools.dump import Output

TIMESTAMP_TYPE_NAMES = {CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime"}
CONTROL_TYPE_NAMES = {
    CONTROL_ABORT: "ABORT",
    CONTROL_COMMIT: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}


# --- .log ----------------------------------------------------------------------------------------


def print_log(file: str, data: bytes, base_offset: int, storage, path, output: Output) -> None:
    output.text(f"Log starting offset: {base_offset}")
    reader = SegmentReader(data, file, verify_crc=False)
    try:
        for batch in reader:
            _emit_batch(file, batch, output)
            if output.options.deep_iteration:
                _emit_records(batch, output)
    except KafkaFormatError as exc:
        output.error(file, exc.position, str(exc))
        return
    if reader.trailing_bytes and output.options.max_bytes is None:  # a cut batch is not an error then
        name = posixpath.basename(file)
        message = f"Found {reader.trailing_bytes} invalid bytes at the end of {name}"
        output.error(file, reader.stop_position, message, text_to_stdout=True)


def batch_last_offset(batch) -> int:
    return batch.header.last_offset if batch.magic == MAGIC_V2 else batch.last_offset


def _timestamp_type_name(header) -> str:
    return TIMESTAMP_TYPE_NAMES.get(header.timestamp_type, "NoTimestampType")


def _last_sequence(header) -> int:
    if header.base_sequence < 0:
        return -1
    return _add_sequence(header.base_sequence, header.last_offset_delta)


def _add_sequence(base: int, delta: int) -> int:
    # DefaultRecordBatch.incrementSequence: wraps past Int.MAX_VALUE to 0
    return base + delta if base <= INT32_MAX - delta else delta - (INT32_MAX - base) - 1


def _emit_batch(file: str, batch, output: Output) -> None:
    h = batch.header
    crc_valid = batch.crc_valid()
    output.obj(
        {
            "type": "batch",
            "baseOffset": h.base_offset,
            "lastOffset": batch_last_offset(batch),
            "count": h.records_count,
            "position": batch.position,
            "size": h.size,
            "magic": batch.magic,
            "compression": CODEC_NAMES.get(h.codec, str(h.codec)),
            "crcValid": crc_valid,
            "isTransactional": h.is_transactional,
            "isControl": h.is_control,
            "producerId": h.producer_id,
            "producerEpoch": h.producer_epoch,
            "baseSequence": h.base_sequence,
            "partitionLeaderEpoch": h.partition_leader_epoch,
            "maxTimestamp": h.max_timestamp,
            "timestampType": _timestamp_type_name(h),
            "deleteHorizonMs": h.delete_horizon_ms,
        }
    )
    output.text(_batch_line(batch, crc_valid))
    if not crc_valid:
        output.error(
            file,
            batch.position,
            f"{file}: byte {batch.position}: CRC mismatch in the batch at "
            f"offset {h.base_offset} (stored {h.crc}, computed {batch.computed_crc()})",
        )


def _batch_line(batch, crc_valid: bool) -> str:
    h = batch.header
    if batch.magic == MAGIC_V2:
        horizon = h.delete_horizon_ms
        horizon = "OptionalLong.empty" if horizon is None else f"OptionalLong[{horizon}]"
        head = (
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {_last_sequence(h)} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {_java(h.is_transactional)} isControl: {_java(h.is_control)} "
            f"deleteHorizonMs: {horizon}"
        )
    else:
        head = f"offset: {batch.last_offset}"
    return (
        f"{head} position: {batch.position} {_timestamp_type_name(h)}: {h.max_timestamp} size: {h.size} "
        f"magic: {batch.magic} compresscodec: {CODEC_NAMES.get(h.codec, h.codec)} crc: {h.crc} "
        f"isvalid: {_java(crc_valid)}"
    )


def _java(flag: bool) -> str:
    return "true" if flag else "false"


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


_DECODERS = {"offsets": format_offsets_record, "transaction-log": format_txn_record}


def _emit_records(batch, output: Output) -> None:
    h = batch.header
    options = output.options
    decode = _DECODERS.get(options.decoder, _string_decoder)
    for record in batch.records():
        control = _control_fields(batch, record) if h.is_control else None
        data = None
        if options.print_data_log and not h.is_control:
            data = decode(record.offset, record.key, record.value)
        if options.json:
            obj = {
                "type": "record",
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": _b64(record.key),
                "value": _b64(record.value),
                "headers": [[name, _b64(value)] for name, value in record.headers],
            }
            if control is not None:
                obj["controlType"] = control[0]
            if data is not None and options.decoder is not None:
                obj["decodedKey"], obj["decodedValue"] = data
            output.obj(obj)
        else:
            output.text(_record_line(batch, record, control, data, options.skip_record_metadata))


def _string_decoder(offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    """kafka-dump-log's default StringDecoder (UTF-8; malformed bytes replaced)."""
    return (
        None if key is None else key.decode("utf-8", "replace"),
        None if value is None else value.decode("utf-8", "replace"),
    )


def _control_fields(batch, record) -> tuple[str, str]:
    """(type name, text tail) of a control record, as DumpLogSegments prints it."""
    type_id = parse_control_type(record.key, batch)
    name = CONTROL_TYPE_NAMES.get(type_id, "UNKNOWN")
    if type_id in (CONTROL_ABORT, CONTROL_COMMIT):
        _, coordinator_epoch = parse_end_txn_marker(record.value)
        return name, f"endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}"
    return name, f"controlType: {name}({type_id})"


def _record_line(batch, record, control, data: tuple | None, skip_metadata: bool) -> str:
    """DumpLogSegments.dumpLog's record line, piece by piece, its spacing included (with
    --skip-record-metadata a record without a key prints ` payload: ...`, without the `|`)."""
    h = batch.header
    line, prefix = "", "| "
    if not skip_metadata:
        line += (
            f"{prefix}offset: {record.offset} {_timestamp_type_name(h)}: {record.timestamp} "
            f"keySize: {_size(record.key)} valueSize: {_size(record.value)}"
        )
        prefix = " "
        if batch.magic == MAGIC_V2:
            delta = record.offset - h.base_offset
            sequence = -1 if h.base_sequence < 0 else _add_sequence(h.base_sequence, delta)
            line += f" sequence: {sequence} headerKeys: [{','.join(name for name, _ in record.headers)}]"
        if control is not None:
            line += " " + control[1]
    if data is not None:
        key, payload = data
        if key is not None:
            line += f"{prefix}key: {key}"
            prefix = " "
        if payload is not None:
            line += f" payload: {payload}"
    return line


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)
