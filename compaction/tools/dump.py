"""`python -m compaction dump`: a kafka-dump-log (`DumpLogSegments`) equivalent.

Text output follows DumpLogSegments' vocabulary (batch lines `baseOffset: .. lastOffset: ..`,
record lines `| offset: ..`, index lines `offset: X position: Y`, `timestamp: T offset: O`,
"Found N invalid bytes at the end of FILE") so operators can diff it against the real tool.
`--json` prints one JSON object per line instead (batch / record / index / timeindex / txnindex /
error), the form tests and scripts consume.

Like kafka-dump-log: `--offsets-decoder` prints the records of `__consumer_offsets` (offset
commits and group metadata) and `--transaction-log-decoder` those of `__transaction_state` as
Kafka's own parsers do (`format/coordinator.py`); either implies `--print-data-log`.
`--max-bytes N` reads only the first N bytes of each `.log` (whole batches within them; no
"invalid bytes" line then), `--skip-record-metadata` leaves out a record's offset, timestamp,
sizes and headers and prints only its key and payload.

Where Kafka only prints a problem, we also exit non-zero (1): this tool is used to verify what
the compaction job wrote, so a corrupt batch, a partial trailing batch, a CRC mismatch, an index
entry that does not point at its batch or a failed sanity check must fail the command.
Files can be any `.log/.index/.timeindex/.txnindex`, also with a `.cleaned/.swap/.deleted`
suffix (the job's transient files), on any filesystem `storage.Storage.for_uri` understands.
"""

from __future__ import annotations

import argparse
import base64
import json
import posixpath
import sys
from dataclasses import dataclass, field
from typing import TextIO

from compaction.errors import KafkaFormatError
from compaction.format.batch import CONTROL_ABORT, CONTROL_COMMIT, parse_control_type, parse_end_txn_marker
from compaction.format.compression import CODEC_NAMES
from compaction.format.coordinator import format_offsets_record, format_txn_record
from compaction.format.index import (
    read_offset_index,
    read_time_index,
    sanity_check_offset_index,
    sanity_check_time_index,
)
from compaction.format.txnindex import read_txn_index, sanity_check_txn_index
from compaction.format.layout import (
    ABORTED_TXN_SIZE,
    CREATE_TIME,
    LOG_APPEND_TIME,
    MAGIC_V2,
    OFFSET_ENTRY_SIZE,
    TIME_ENTRY_SIZE,
)
from compaction.format.naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TRANSIENT_SUFFIXES,
    TXN_INDEX_SUFFIX,
    SegmentNameError,
    parse_segment_file_name,
)
from compaction.format.segment import SegmentReader, iter_batches
from compaction.runtime.s3 import redact_uri
from compaction.runtime.storage import Storage

EXIT_OK, EXIT_PROBLEM = 0, 1
TIMESTAMP_TYPE_NAMES = {CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime"}
CONTROL_TYPE_NAMES = {CONTROL_ABORT: "ABORT", CONTROL_COMMIT: "COMMIT", 2: "LEADER_CHANGE",
                      3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
INT32_MAX = 2**31 - 1


@dataclass
class DumpOptions:
    deep_iteration: bool = False
    print_data_log: bool = False
    json: bool = False
    index_sanity_check: bool = False
    verify_index_only: bool = False
    decoder: str | None = None  # "offsets" or "transaction-log": coordinator records (format/coordinator.py)
    max_bytes: int | None = None  # read at most this many bytes of a .log
    skip_record_metadata: bool = False


@dataclass
class _Output:
    """Where lines go, and whether anything went wrong (-> exit status)."""

    options: DumpOptions
    out: TextIO
    err: TextIO
    problems: int = 0
    _pending: list[str] = field(default_factory=list)

    def text(self, line: str) -> None:
        if not self.options.json:
            self.out.write(line + "\n")

    def obj(self, value: dict) -> None:
        if self.options.json:
            self.out.write(json.dumps(value) + "\n")

    def error(self, file: str, position: int | None, message: str, *, text_to_stdout: bool = False) -> None:
        """One problem: a JSON error object, or a text line (stderr unless Kafka prints it on stdout)."""
        self.problems += 1
        if self.options.json:
            self.obj({"type": "error", "file": file, "position": position, "message": message})
        else:
            (self.out if text_to_stdout else self.err).write(message + "\n")

    def note(self, message: str) -> None:
        self.err.write(message + "\n")


# --- entry points ----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help=".log, .index, .timeindex or .txnindex files (local paths or URIs)")
    parser.add_argument("--files", dest="files_csv", default=None,
                        help="comma-separated files, as kafka-dump-log takes them")
    parser.add_argument("--deep-iteration", action="store_true",
                        help="print every record, not only batch headers")
    parser.add_argument("--print-data-log", action="store_true",
                        help="also print keys and payloads as UTF-8 (implies --deep-iteration)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="only run the broker's sanity check on index files")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check index entries against the .log without printing them")
    decoders = parser.add_mutually_exclusive_group()
    decoders.add_argument("--offsets-decoder", action="store_true",
                          help="decode the records as __consumer_offsets' offset commits and group metadata "
                               "(implies --print-data-log)")
    decoders.add_argument("--transaction-log-decoder", action="store_true",
                          help="decode the records as __transaction_state's transaction metadata "
                               "(implies --print-data-log)")
    parser.add_argument("--max-bytes", type=_positive_int, default=None, metavar="N",
                        help="read only the first N bytes of each .log (the whole batches within them)")
    parser.add_argument("--skip-record-metadata", action="store_true",
                        help="print only the key and payload of each record, not its offset, timestamp, "
                             "sizes and headers")


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes, not {value}")
    return value


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    files = list(args.files) + ([f for f in args.files_csv.split(",") if f] if args.files_csv else [])
    if not files:
        (err or sys.stderr).write("dump: no files given\n")
        return 2
    decoder = ("offsets" if args.offsets_decoder
               else "transaction-log" if args.transaction_log_decoder else None)  # fmt: skip
    print_data = args.print_data_log or decoder is not None  # as Kafka: a decoder implies printing the data
    options = DumpOptions(
        deep_iteration=args.deep_iteration or print_data, print_data_log=print_data,
        json=args.json, index_sanity_check=args.index_sanity_check, verify_index_only=args.verify_index_only,
        decoder=decoder, max_bytes=args.max_bytes, skip_record_metadata=args.skip_record_metadata)
    return dump_files(files, options, out or sys.stdout, err or sys.stderr)


def dump_files(files: list[str], options: DumpOptions, out: TextIO, err: TextIO) -> int:
    output = _Output(options, out, err)
    for file in files:
        _dump_one(file, output)
    return EXIT_PROBLEM if output.problems else EXIT_OK


_DUMPERS: dict = {}  # suffix -> function, filled below


def _dump_one(uri: str, output: _Output) -> None:
    file = redact_uri(uri)  # what is printed: s3://KEY:SECRET@... shows as s3://***@...
    output.text(f"Dumping {file}")
    storage, path = Storage.for_uri(uri)
    suffix, base_offset = _classify(posixpath.basename(path))  # the path: a URI may end in ?options
    dumper = _DUMPERS.get(suffix)
    if dumper is None:
        output.note(f"Ignoring unknown file {file}")
        return
    limit = output.options.max_bytes if suffix == LOG_SUFFIX else None
    try:
        data = storage.read_bytes(path, 0, limit)
    except (OSError, FileNotFoundError) as exc:
        output.error(file, None, f"cannot read {file}: {exc}")
        return
    dumper(file, data, base_offset, storage, path, output)


def _classify(name: str) -> tuple[str | None, int]:
    """(suffix, base offset); lenient like Kafka: any leading number before the first dot."""
    try:
        parsed = parse_segment_file_name(name)
        return parsed.suffix, parsed.base_offset
    except SegmentNameError:
        pass
    for transient in TRANSIENT_SUFFIXES:
        name = name.removesuffix(transient)
    prefix, _, rest = name.partition(".")
    suffix = "." + rest.rsplit(".", 1)[-1] if rest else None
    return suffix, int(prefix) if prefix.isdigit() else 0


def _sibling(path: str, suffix: str) -> str:
    """The file of the same segment with another suffix, keeping a transient suffix."""
    directory, name = posixpath.split(path)
    transient = next((t for t in TRANSIENT_SUFFIXES if name.endswith(t)), "")
    prefix = name.split(".", 1)[0]
    return posixpath.join(directory, prefix + suffix + transient)


# --- .log ----------------------------------------------------------------------------------------


def _dump_log(file: str, data: bytes, base_offset: int, storage, path, output: _Output) -> None:
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


def _last_offset(batch) -> int:
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


def _emit_batch(file: str, batch, output: _Output) -> None:
    h = batch.header
    crc_valid = batch.crc_valid()
    output.obj({
        "type": "batch", "baseOffset": h.base_offset, "lastOffset": _last_offset(batch),
        "count": h.records_count, "position": batch.position, "size": h.size, "magic": batch.magic,
        "compression": CODEC_NAMES.get(h.codec, str(h.codec)), "crcValid": crc_valid,
        "isTransactional": h.is_transactional, "isControl": h.is_control, "producerId": h.producer_id,
        "producerEpoch": h.producer_epoch, "baseSequence": h.base_sequence,
        "partitionLeaderEpoch": h.partition_leader_epoch, "maxTimestamp": h.max_timestamp,
        "timestampType": _timestamp_type_name(h), "deleteHorizonMs": h.delete_horizon_ms,
    })
    output.text(_batch_line(batch, crc_valid))
    if not crc_valid:
        output.error(file, batch.position, f"{file}: byte {batch.position}: CRC mismatch in the batch at "
                     f"offset {h.base_offset} (stored {h.crc}, computed {batch.computed_crc()})")


def _batch_line(batch, crc_valid: bool) -> str:
    h = batch.header
    if batch.magic == MAGIC_V2:
        horizon = h.delete_horizon_ms
        horizon = "OptionalLong.empty" if horizon is None else f"OptionalLong[{horizon}]"
        head = (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
                f"baseSequence: {h.base_sequence} lastSequence: {_last_sequence(h)} "
                f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
                f"partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {_java(h.is_transactional)} isControl: {_java(h.is_control)} "
                f"deleteHorizonMs: {horizon}")
    else:
        head = f"offset: {batch.last_offset}"
    return (f"{head} position: {batch.position} {_timestamp_type_name(h)}: {h.max_timestamp} size: {h.size} "
            f"magic: {batch.magic} compresscodec: {CODEC_NAMES.get(h.codec, h.codec)} crc: {h.crc} "
            f"isvalid: {_java(crc_valid)}")


def _java(flag: bool) -> str:
    return "true" if flag else "false"


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


_DECODERS = {"offsets": format_offsets_record, "transaction-log": format_txn_record}


def _emit_records(batch, output: _Output) -> None:
    h = batch.header
    options = output.options
    decode = _DECODERS.get(options.decoder, _string_decoder)
    for record in batch.records():
        control = _control_fields(batch, record) if h.is_control else None
        data = None
        if options.print_data_log and not h.is_control:
            data = decode(record.offset, record.key, record.value)
        if options.json:
            obj = {"type": "record", "offset": record.offset, "timestamp": record.timestamp,
                   "key": _b64(record.key), "value": _b64(record.value),
                   "headers": [[name, _b64(value)] for name, value in record.headers]}
            if control is not None:
                obj["controlType"] = control[0]
            if data is not None and options.decoder is not None:
                obj["decodedKey"], obj["decodedValue"] = data
            output.obj(obj)
        else:
            output.text(_record_line(batch, record, control, data, options.skip_record_metadata))


def _string_decoder(offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    """kafka-dump-log's default StringDecoder (UTF-8; malformed bytes replaced)."""
    return (None if key is None else key.decode("utf-8", "replace"),
            None if value is None else value.decode("utf-8", "replace"))  # fmt: skip


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
        line += (f"{prefix}offset: {record.offset} {_timestamp_type_name(h)}: {record.timestamp} "
                 f"keySize: {_size(record.key)} valueSize: {_size(record.value)}")
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


# --- indexes -------------------------------------------------------------------------------------


def _sanity(file: str, check, data: bytes, base_offset: int, output: _Output) -> None:
    try:
        check(data, base_offset, file)
    except KafkaFormatError as exc:
        output.error(file, exc.position, str(exc))
        return
    output.text(f"{file} passed sanity check.")  # JSON mode: silence and exit 0 mean "passed"


def _log_beside(file: str, storage, path: str) -> bytes | None:
    log_path = _sibling(path, LOG_SUFFIX)
    return storage.read_bytes(log_path) if storage.exists(log_path) else None


def _batch_last_offset_at(log: bytes, position: int) -> int:
    """Last offset of the batch starting at `position`, -1 if no whole batch starts there."""
    try:
        batch = next(iter_batches(log, start=position, verify_crc=False), None)
    except KafkaFormatError:
        return -1
    return -1 if batch is None else _last_offset(batch)


def _dump_offset_index(file: str, data: bytes, base_offset: int, storage, path, output: _Output) -> None:
    entries = read_offset_index(data, base_offset)
    if len(entries) == 0:
        output.text(f"{file} is empty.")
        return
    if output.options.index_sanity_check:
        _sanity(file, sanity_check_offset_index, data, base_offset, output)
        return
    log = _log_beside(file, storage, path)
    mismatches = []
    for i, (offset, position) in enumerate(entries.tolist()):
        if offset == base_offset and i > 0:
            break  # the zero tail of a preallocated (untrimmed) index, as DumpLogSegments stops
        if log is not None:
            found = _batch_last_offset_at(log, position)
            if found != offset:
                mismatches.append((i, offset, found))
        if not output.options.verify_index_only:
            output.text(f"offset: {offset} position: {position}")
            output.obj({"type": "index", "offset": offset, "position": position})
    _report_index_mismatches(file, mismatches, output)


def _report_index_mismatches(file: str, mismatches: list, output: _Output) -> None:
    if mismatches and not output.options.json:
        output.note(f"Mismatches in :{file}")
    for i, offset, found in mismatches:
        output.error(file, i * OFFSET_ENTRY_SIZE, f"  Index offset: {offset}, log offset: {found}")


def _dump_time_index(file: str, data: bytes, base_offset: int, storage, path, output: _Output) -> None:
    if output.options.index_sanity_check:
        _sanity(file, sanity_check_time_index, data, base_offset, output)
        return
    entries = read_time_index(data, base_offset)
    log = _log_beside(file, storage, path)
    max_ts_by_last = _max_timestamps(log, file) if log is not None else None
    previous = -1
    for i, (timestamp, offset) in enumerate(entries.tolist()):
        if offset == base_offset and i > 0:
            break
        if max_ts_by_last is not None:
            _check_time_entry(file, i, timestamp, offset, previous, max_ts_by_last, output)
        if not output.options.verify_index_only:
            output.text(f"timestamp: {timestamp} offset: {offset}")
            output.obj({"type": "timeindex", "timestamp": timestamp, "offset": offset})
        previous = timestamp


def _max_timestamps(log: bytes, file: str) -> dict[int, int]:
    """last offset -> batch maxTimestamp for every whole batch of the segment."""
    out = {}
    try:
        for batch in iter_batches(log, verify_crc=False):
            out[_last_offset(batch)] = batch.header.max_timestamp
    except KafkaFormatError:
        pass  # the .log itself is dumped (and its corruption reported) when it is listed
    return out


def _check_time_entry(file, i, timestamp, offset, previous, max_ts_by_last, output: _Output) -> None:
    position = i * TIME_ENTRY_SIZE
    if offset not in max_ts_by_last:
        output.error(file, position, f"{file}: indexed offset {offset} is not the last offset of a batch "
                     "in the log")
    elif max_ts_by_last[offset] != timestamp:
        output.error(file, position, f"{file}: timestamp mismatch: index timestamp {timestamp}, "
                     f"log timestamp {max_ts_by_last[offset]} (offset {offset})")
    if previous >= timestamp:
        output.error(file, position, f"{file}: out of order timestamp: index timestamp {timestamp}, "
                     f"previously indexed timestamp {previous}")


def _dump_txn_index(file: str, data: bytes, base_offset: int, storage, path, output: _Output) -> None:
    if output.options.index_sanity_check:
        _sanity(file, sanity_check_txn_index, data, base_offset, output)
        return
    for txn in read_txn_index(data):
        output.text(f"version: 0 producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
                    f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}")
        output.obj({"type": "txnindex", "producerId": txn.producer_id, "firstOffset": txn.first_offset,
                    "lastOffset": txn.last_offset, "lastStableOffset": txn.last_stable_offset})
    if len(data) % ABORTED_TXN_SIZE:
        whole = len(data) - len(data) % ABORTED_TXN_SIZE
        output.error(file, whole, f"{file}: byte {whole}: {len(data) - whole} bytes of a partial "
                     f"{ABORTED_TXN_SIZE}-byte aborted transaction entry at the end")


_DUMPERS.update({LOG_SUFFIX: _dump_log, INDEX_SUFFIX: _dump_offset_index,
                 TIME_INDEX_SUFFIX: _dump_time_index, TXN_INDEX_SUFFIX: _dump_txn_index})
