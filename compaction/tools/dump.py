"""`python -m compaction dump`: a kafka-dump-log (`DumpLogSegments`) equivalent.

Text output follows DumpLogSegments' vocabulary (batch lines `baseOffset: .. lastOffset: ..`,
record lines `| offset: ..`, index lines `offset: X position: Y`, `timestamp: T offset: O`,
"Found N invalid bytes at the end of FILE") so operators can diff it against the real tool.
`--json` prints one JSON object per line instead (batch / record / index / timeindex / txnindex /
error), the form tests and scripts consume.

Like kafka-dump-log: `--offsets-decoder` prints the records of `__consumer_offsets` (offset
commits and group metadata) and `--transaction-log-decoder` those of `__transaction_state` as
Kafka's own parsers do (`format/consumer_offsets.py`, `format/transaction_log.py`); either
implies `--print-data-log`. `--max-bytes N` reads only the first N bytes of each `.log` (whole batches within them; no
"invalid bytes" line then), `--skip-record-metadata` leaves out a record's offset, timestamp,
sizes and headers and prints only its key and payload.

Where Kafka only prints a problem, we also exit non-zero (1): this tool is used to verify what
the compaction job wrote, so a corrupt batch, a partial trailing batch, a CRC mismatch, an index
entry that does not point at its batch or a failed sanity check must fail the command.
Files can be any `.log/.index/.timeindex/.txnindex`, also with a `.cleaned/.swap/.deleted`
suffix (the job's transient files), on any filesystem `storage.Storage.for_uri` understands.

The printers are in `dump_log` (`.log`) and `dump_index` (the three indexes).
"""

from __future__ import annotations

import argparse
import json
import posixpath
import sys
from dataclasses import dataclass, field
from typing import TextIO

from compaction.cli.options import byte_size
from compaction.errors import SegmentNameError
from compaction.format.naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TRANSIENT_SUFFIXES,
    TXN_INDEX_SUFFIX,
    parse_segment_file_name,
)
from compaction.runtime.s3 import redact_uri
from compaction.runtime.storage import Storage
from compaction.tools.dump_index import print_offset_index, print_time_index, print_txn_index
from compaction.tools.dump_log import print_log

EXIT_OK, EXIT_PROBLEM = 0, 1


@dataclass
class DumpOptions:
    deep_iteration: bool = False
    print_data_log: bool = False
    json: bool = False
    index_sanity_check: bool = False
    verify_index_only: bool = False
    decoder: str | None = (
        None  # "offsets" or "transaction-log": coordinator records (format/consumer_offsets.py, transaction_log.py)
    )
    max_bytes: int | None = None  # read at most this many bytes of a .log
    skip_record_metadata: bool = False


@dataclass
class Output:
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
    parser.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help=".log, .index, .timeindex or .txnindex files (local paths or URIs)",
    )
    parser.add_argument(
        "--files", dest="files_csv", default=None, help="comma-separated files, as kafka-dump-log takes them"
    )
    parser.add_argument(
        "--deep-iteration", action="store_true", help="print every record, not only batch headers"
    )
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="also print keys and payloads as UTF-8 (implies --deep-iteration)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument(
        "--index-sanity-check", action="store_true", help="only run the broker's sanity check on index files"
    )
    parser.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check index entries against the .log without printing them",
    )
    decoders = parser.add_mutually_exclusive_group()
    decoders.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode the records as __consumer_offsets' offset commits and group metadata "
        "(implies --print-data-log)",
    )
    decoders.add_argument(
        "--transaction-log-decoder",
        action="store_true",
        help="decode the records as __transaction_state's transaction metadata (implies --print-data-log)",
    )
    parser.add_argument(
        "--max-bytes",
        type=_positive_int,
        default=None,
        metavar="N",
        help="read only the first N bytes (e.g. 64k, 1m) of each .log (the whole batches within them)",
    )
    parser.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="print only the key and payload of each record, not its offset, timestamp, sizes and headers",
    )


def _positive_int(text: str) -> int:
    value = byte_size(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes, not {value}")
    return value


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    files = list(args.files) + ([f for f in args.files_csv.split(",") if f] if args.files_csv else [])
    if not files:
        (err or sys.stderr).write("dump: no files given\n")
        return 2
    decoder = (
        "offsets" if args.offsets_decoder else "transaction-log" if args.transaction_log_decoder else None
    )
    print_data = args.print_data_log or decoder is not None  # as Kafka: a decoder implies printing the data
    options = DumpOptions(
        deep_iteration=args.deep_iteration or print_data,
        print_data_log=print_data,
        json=args.json,
        index_sanity_check=args.index_sanity_check,
        verify_index_only=args.verify_index_only,
        decoder=decoder,
        max_bytes=args.max_bytes,
        skip_record_metadata=args.skip_record_metadata,
    )
    return dump_files(files, options, out or sys.stdout, err or sys.stderr)


def dump_files(files: list[str], options: DumpOptions, out: TextIO, err: TextIO) -> int:
    output = Output(options, out, err)
    for file in files:
        _dump_one(file, output)
    return EXIT_PROBLEM if output.problems else EXIT_OK


def _dump_one(uri: str, output: Output) -> None:
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


_DUMPERS = {
    LOG_SUFFIX: print_log,
    INDEX_SUFFIX: print_offset_index,
    TIME_INDEX_SUFFIX: print_time_index,
    TXN_INDEX_SUFFIX: print_txn_index,
}
