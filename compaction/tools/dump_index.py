"""The index printers of `python -m compaction dump` (`tools/dump.py`): `.index`, `.timeindex`
and `.txnindex` entries, each checked against the `.log` beside it when there is one."""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

from compaction.errors import KafkaFormatError
from compaction.format.index import (
    read_offset_index,
    read_time_index,
    sanity_check_offset_index,
    sanity_check_time_index,
)
from compaction.format.layout import ABORTED_TXN_SIZE, OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE
from compaction.format.naming import LOG_SUFFIX, TRANSIENT_SUFFIXES
from compaction.format.segment import iter_batches
from compaction.format.txnindex import read_txn_index, sanity_check_txn_index
from compaction.tools.dump_log import batch_last_offset

if TYPE_CHECKING:
    from compaction.tools.dump import Output


def _sibling(path: str, suffix: str) -> str:
    """The file of the same segment with another suffix, keeping a transient suffix."""
    directory, name = posixpath.split(path)
    transient = next((t for t in TRANSIENT_SUFFIXES if name.endswith(t)), "")
    prefix = name.split(".", 1)[0]
    return posixpath.join(directory, prefix + suffix + transient)


# --- indexes -------------------------------------------------------------------------------------


def _sanity(file: str, check, data: bytes, base_offset: int, output: Output) -> None:
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
    return -1 if batch is None else batch_last_offset(batch)


def print_offset_index(file: str, data: bytes, base_offset: int, storage, path, output: Output) -> None:
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


def _report_index_mismatches(file: str, mismatches: list, output: Output) -> None:
    if mismatches and not output.options.json:
        output.note(f"Mismatches in :{file}")
    for i, offset, found in mismatches:
        output.error(file, i * OFFSET_ENTRY_SIZE, f"  Index offset: {offset}, log offset: {found}")


def print_time_index(file: str, data: bytes, base_offset: int, storage, path, output: Output) -> None:
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
            out[batch_last_offset(batch)] = batch.header.max_timestamp
    except KafkaFormatError:
        pass  # the .log itself is dumped (and its corruption reported) when it is listed
    return out


def _check_time_entry(file, i, timestamp, offset, previous, max_ts_by_last, output: Output) -> None:
    position = i * TIME_ENTRY_SIZE
    if offset not in max_ts_by_last:
        output.error(
            file, position, f"{file}: indexed offset {offset} is not the last offset of a batch in the log"
        )
    elif max_ts_by_last[offset] != timestamp:
        output.error(
            file,
            position,
            f"{file}: timestamp mismatch: index timestamp {timestamp}, "
            f"log timestamp {max_ts_by_last[offset]} (offset {offset})",
        )
    if previous >= timestamp:
        output.error(
            file,
            position,
            f"{file}: out of order timestamp: index timestamp {timestamp}, "
            f"previously indexed timestamp {previous}",
        )


def print_txn_index(file: str, data: bytes, base_offset: int, storage, path, output: Output) -> None:
    if output.options.index_sanity_check:
        _sanity(file, sanity_check_txn_index, data, base_offset, output)
        return
    for txn in read_txn_index(data):
        output.text(
            f"version: 0 producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
            f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}"
        )
        output.obj(
            {
                "type": "txnindex",
                "producerId": txn.producer_id,
                "firstOffset": txn.first_offset,
                "lastOffset": txn.last_offset,
                "lastStableOffset": txn.last_stable_offset,
            }
        )
    if len(data) % ABORTED_TXN_SIZE:
        whole = len(data) - len(data) % ABORTED_TXN_SIZE
        output.error(
            file,
            whole,
            f"{file}: byte {whole}: {len(data) - whole} bytes of a partial "
            f"{ABORTED_TXN_SIZE}-byte aborted transaction entry at the end",
        )
