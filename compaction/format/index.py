"""Segment indexes: `.index`, `.timeindex`, `.txnindex` (docs/kafka-rules.md#txnindex, #offset-index to
#index-invariants).

Sources: `storage/.../log/OffsetIndex.java`, `TimeIndex.java`, `AbstractIndex.java`,
`TransactionIndex.java`, `AbortedTxn.java`, `LogSegment.java` (`append`, `recover`,
`onBecomeInactiveSegment`), `LogLoader.java`.

Wire formats (big-endian, no header, no checksum, no entry count: entries = file length / size)

    .index      8 bytes per entry                                  OffsetIndex.java
      0  int32  relative offset  offset - segment base offset, in [0, 2**31-1]
      4  int32  position         byte position of a batch start in the .log
      Entry (O, P): scanning the .log from P finds offset O or anything after it.

    .timeindex  12 bytes per entry                                 TimeIndex.java
      0  int64  timestamp        largest batch max-timestamp up to the batch whose last offset is O
      8  int32  relative offset  O - segment base offset
      Entry (T, O): every batch with max timestamp > T lies after the batch ending at O.

    .txnindex   34 bytes per entry (AbortedTxn), created lazily    TransactionIndex.java
      0  int16  version          0
      2  int64  producerId
     10  int64  firstOffset      first offset of the aborted transaction's data
     18  int64  lastOffset       offset of the ABORT marker
     26  int64  lastStableOffset LSO when the abort completed

Entry rule (`build_indexes`), the per-batch rule of Kafka 4.1+ (KAFKA-806), the same as `LogSegment.recover`'s
(docs/kafka-rules.md#index-entries, #segment-recovery):

    maxSoFar, offsetOfMax = -1, base           # TimeIndex.lastEntry() of an empty index
    bytesSinceLastEntry = 0
    for each batch (position, size, lastOffset, maxTimestamp) in file order:
        if maxTimestamp > maxSoFar: maxSoFar, offsetOfMax = maxTimestamp, lastOffset
        if bytesSinceLastEntry > interval:     # strict, before this batch's bytes are counted
            offset index += (lastOffset, position)
            time index maybeAppend(maxSoFar, offsetOfMax)   # only if maxSoFar > last entry's ts
            bytesSinceLastEntry = 0
        bytesSinceLastEntry += size
    at close: time index maybeAppend(maxSoFar, offsetOfMax)  # docs/kafka-rules.md#closing-a-segment

So the first batch never gets an entry, the timestamp -1 (v0 data) is never indexed, and the last
time entry of a closed segment is its max timestamp. Files are written trimmed (length = entries x
size): the broker counts trailing zero bytes as entries (docs/kafka-rules.md#index-file-size).

The per-batch loop runs over millions of batches per run, so it is a numba kernel over numpy
columns; `index_entries_py` is the plain-Python reference it is property-tested against.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from compaction.errors import CorruptRecordError, IndexCorruptError
from compaction.format.layout import ABORTED_TXN_SIZE, OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE
from compaction.kernels.jit import njit as _njit

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
ABORTED_TXN = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset
ABORTED_TXN_VERSION = 0

# numpy views of the same layouts, for whole-file reads and writes without a Python loop.
OFFSET_ENTRY_DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
TIME_ENTRY_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])
assert OFFSET_ENTRY_DTYPE.itemsize == OFFSET_ENTRY_SIZE and TIME_ENTRY_DTYPE.itemsize == TIME_ENTRY_SIZE

DEFAULT_INDEX_INTERVAL_BYTES = 4096  # index.interval.bytes
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes
NO_TIMESTAMP = -1  # RecordBatch.NO_TIMESTAMP
INT32_MAX = 2**31 - 1


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


# --- read -------------------------------------------------------------------------------------


def _whole_entries(data: bytes | memoryview, entry_size: int) -> memoryview:
    # Like AbstractIndex: entries = floor(length / entrySize); a partial tail is not an entry
    # (the sanity checks below report it).
    view = memoryview(data).cast("B")
    return view[: len(view) - len(view) % entry_size]


def read_offset_index(data: bytes | memoryview, base_offset: int) -> np.ndarray:
    """`(n, 2)` int64 array of `[absolute offset, position]`, in file order."""
    raw = np.frombuffer(_whole_entries(data, OFFSET_ENTRY_SIZE), dtype=OFFSET_ENTRY_DTYPE)
    out = np.empty((len(raw), 2), dtype=np.int64)
    out[:, 0] = raw["relative_offset"].astype(np.int64) + base_offset
    out[:, 1] = raw["position"]
    return out


def read_time_index(data: bytes | memoryview, base_offset: int) -> np.ndarray:
    """`(n, 2)` int64 array of `[timestamp, absolute offset]`, in file order."""
    raw = np.frombuffer(_whole_entries(data, TIME_ENTRY_SIZE), dtype=TIME_ENTRY_DTYPE)
    out = np.empty((len(raw), 2), dtype=np.int64)
    out[:, 0] = raw["timestamp"]
    out[:, 1] = raw["relative_offset"].astype(np.int64) + base_offset
    return out


def read_txn_index(data: bytes | memoryview) -> list[AbortedTxn]:
    return [
        AbortedTxn(*fields[1:])
        for fields in ABORTED_TXN.iter_unpack(_whole_entries(data, ABORTED_TXN_SIZE))
    ]


# --- write (invariants enforced here, like OffsetIndex.append / TimeIndex.maybeAppend) ---------


def _relative(offset: int, base_offset: int, path: str) -> int:
    relative = offset - base_offset
    if not 0 <= relative <= INT32_MAX:  # IndexOffsetOverflowException
        raise IndexCorruptError(
            f"offset {offset} cannot be stored relative to base offset {base_offset}",
            path=path,
            offset=offset,
        )
    return relative


def write_offset_index(entries: Iterable[Sequence[int]], base_offset: int, path: str = "<memory>") -> bytes:
    """Entries `(offset, position)`; offsets strictly increasing, positions in [0, 2**31-1]."""
    out = bytearray()
    last = None
    for offset, position in entries:
        offset, position = int(offset), int(position)
        if last is not None and offset <= last:  # InvalidOffsetException
            raise IndexCorruptError(
                f"offset index entries must increase: {offset} after {last}", path=path, offset=offset
            )
        if not 0 <= position <= INT32_MAX:
            raise IndexCorruptError(f"position {position} out of range", path=path, offset=offset)
        out += OFFSET_ENTRY.pack(_relative(offset, base_offset, path), position)
        last = offset
    return bytes(out)


def write_time_index(entries: Iterable[Sequence[int]], base_offset: int, path: str = "<memory>") -> bytes:
    """Entries `(timestamp, offset)`; timestamps strictly increasing, offsets non-decreasing."""
    out = bytearray()
    last_ts, last_offset = None, None
    for timestamp, offset in entries:
        timestamp, offset = int(timestamp), int(offset)
        if last_ts is not None and (timestamp <= last_ts or offset < last_offset):
            raise IndexCorruptError(
                f"time index entry ({timestamp}, {offset}) does not follow ({last_ts}, {last_offset})",
                path=path,
                offset=offset,
            )
        out += TIME_ENTRY.pack(timestamp, _relative(offset, base_offset, path))
        last_ts, last_offset = timestamp, offset
    return bytes(out)


def write_txn_index(entries: Iterable[AbortedTxn], path: str = "<memory>") -> bytes:
    """`TransactionIndex.append` requires strictly increasing lastOffset."""
    out = bytearray()
    last = None
    for txn in entries:
        if last is not None and txn.last_offset <= last:
            raise IndexCorruptError(
                f"txn index lastOffset must increase: {txn.last_offset} after {last}",
                path=path,
                offset=txn.last_offset,
            )
        out += ABORTED_TXN.pack(ABORTED_TXN_VERSION, *txn)
        last = txn.last_offset
    return bytes(out)


# --- lookup -----------------------------------------------------------------------------------


def lookup_offset(entries: np.ndarray, target: int, base_offset: int) -> tuple[int, int]:
    """`OffsetIndex.lookup`: the entry with the largest offset <= target, else `(base_offset, 0)`."""
    i = int(np.searchsorted(entries[:, 0], target, side="right")) - 1
    return (base_offset, 0) if i < 0 else (int(entries[i, 0]), int(entries[i, 1]))


def lookup_timestamp(entries: np.ndarray, target: int, base_offset: int) -> tuple[int, int]:
    """`TimeIndex.lookup`: the entry with the largest timestamp <= target, else `(-1, base_offset)`."""
    i = int(np.searchsorted(entries[:, 0], target, side="right")) - 1
    return (NO_TIMESTAMP, base_offset) if i < 0 else (int(entries[i, 0]), int(entries[i, 1]))


# --- sanity checks ----------------------------------------------------------------------------
# The broker-level checks are exactly OffsetIndex/TimeIndex/TransactionIndex.sanityCheck
# (docs/kafka-rules.md#broker-load-checks); `strict=True` adds the write-time invariants
# (docs/kafka-rules.md#index-invariants) that a file we wrote must satisfy.


def sanity_check_offset_index(
    data: bytes | memoryview, base_offset: int, path: str = "<memory>", *, strict: bool = False
) -> None:
    # Same order as OffsetIndex.sanityCheck: last offset first, then the length.
    entries = read_offset_index(data, base_offset)
    if len(entries) and entries[-1, 0] < base_offset:
        raise IndexCorruptError(
            f"last offset {entries[-1, 0]} is below the base offset {base_offset}",
            path=path,
            position=(len(entries) - 1) * OFFSET_ENTRY_SIZE,
        )
    if len(data) % OFFSET_ENTRY_SIZE:
        raise IndexCorruptError(
            f"index file length {len(data)} is not a multiple of {OFFSET_ENTRY_SIZE}", path=path
        )
    if strict:
        _check_increasing(
            entries[:, 0], strictly=True, what="offset", path=path, entry_size=OFFSET_ENTRY_SIZE
        )
        _check_increasing(
            entries[:, 1], strictly=True, what="position", path=path, entry_size=OFFSET_ENTRY_SIZE
        )
        if len(entries) and entries[0, 0] < base_offset:
            raise IndexCorruptError(f"offset {entries[0, 0]} below base {base_offset}", path=path, position=0)


def sanity_check_time_index(
    data: bytes | memoryview, base_offset: int, path: str = "<memory>", *, strict: bool = False
) -> None:
    entries = read_time_index(data, base_offset)
    last_position = (len(entries) - 1) * TIME_ENTRY_SIZE
    if len(entries) and entries[-1, 0] < entries[0, 0]:
        raise IndexCorruptError(
            f"last timestamp {entries[-1, 0]} is below the first timestamp {entries[0, 0]}",
            path=path,
            position=last_position,
        )
    if len(entries) and entries[-1, 1] < base_offset:
        raise IndexCorruptError(
            f"last offset {entries[-1, 1]} is below the base offset {base_offset}",
            path=path,
            position=last_position,
        )
    if len(data) % TIME_ENTRY_SIZE:
        raise IndexCorruptError(
            f"time index file length {len(data)} is not a multiple of {TIME_ENTRY_SIZE}", path=path
        )
    if strict:
        _check_increasing(
            entries[:, 0], strictly=True, what="timestamp", path=path, entry_size=TIME_ENTRY_SIZE
        )
        _check_increasing(entries[:, 1], strictly=False, what="offset", path=path, entry_size=TIME_ENTRY_SIZE)


def sanity_check_txn_index(
    data: bytes | memoryview, base_offset: int, path: str = "<memory>", *, strict: bool = False
) -> None:
    """Broker: any entry with lastOffset < base offset is corrupt (-> segment recovery)."""
    entries = read_txn_index(data)
    for i, txn in enumerate(entries):
        if txn.last_offset < base_offset:
            raise IndexCorruptError(
                f"aborted txn lastOffset {txn.last_offset} is below the base offset {base_offset}",
                path=path,
                position=i * ABORTED_TXN_SIZE,
                offset=txn.last_offset,
            )
    if strict:
        if len(data) % ABORTED_TXN_SIZE:
            raise IndexCorruptError(f"txn index length {len(data)} is not a multiple of 34", path=path)
        for i in range(1, len(entries)):
            if entries[i].last_offset <= entries[i - 1].last_offset:
                raise IndexCorruptError(
                    "txn index lastOffset not increasing", path=path, position=i * ABORTED_TXN_SIZE
                )


def _check_increasing(column: np.ndarray, *, strictly: bool, what: str, path: str, entry_size: int) -> None:
    steps = np.diff(column)
    bad = np.flatnonzero(steps <= 0 if strictly else steps < 0)
    if len(bad):
        i = int(bad[0]) + 1
        raise IndexCorruptError(
            f"{what} {column[i]} does not follow {column[i - 1]}", path=path, position=i * entry_size
        )


# --- the entry rule ---------------------------------------------------------------------------

# Kernel status codes (numba cannot raise our typed errors with context).
_OK = 0
_OFFSETS_NOT_INCREASING = 1


def index_entries_py(
    positions: Sequence[int],
    sizes: Sequence[int],
    last_offsets: Sequence[int],
    max_timestamps: Sequence[int],
    base_offset: int,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Reference implementation of the entry rule: `([(offset, position)], [(timestamp, offset)])`."""
    offset_entries: list[tuple[int, int]] = []
    time_entries: list[tuple[int, int]] = []
    last_time_ts = NO_TIMESTAMP  # TimeIndex.lastEntry() of an empty index is (-1, baseOffset)
    max_so_far, offset_of_max = NO_TIMESTAMP, base_offset
    bytes_since_last_entry = 0
    for position, size, last_offset, max_timestamp in zip(
        positions, sizes, last_offsets, max_timestamps, strict=True
    ):
        if max_timestamp > max_so_far:
            max_so_far, offset_of_max = int(max_timestamp), int(last_offset)
        if bytes_since_last_entry > index_interval_bytes:
            if offset_entries and last_offset <= offset_entries[-1][0]:
                raise IndexCorruptError(
                    f"batch last offset {last_offset} does not follow {offset_entries[-1][0]}",
                    position=int(position),
                    offset=int(last_offset),
                )
            offset_entries.append((int(last_offset), int(position)))
            if max_so_far > last_time_ts:
                time_entries.append((max_so_far, offset_of_max))
                last_time_ts = max_so_far
            bytes_since_last_entry = 0
        bytes_since_last_entry += int(size)
    if max_so_far > last_time_ts:  # onBecomeInactiveSegment / close
        time_entries.append((max_so_far, offset_of_max))
    return offset_entries, time_entries

@_njit
def _index_entries_kernel(positions, sizes, last_offsets, max_timestamps, base_offset, interval):
    # Mirrors index_entries_py line by line; returns (status, batch index, arrays, counts).
    n = positions.shape[0]
    # At most one offset entry per batch; one more time entry for the final one at close.
    index_offsets = np.empty(n, dtype=np.int64)
    index_positions = np.empty(n, dtype=np.int64)
    time_timestamps = np.empty(n + 1, dtype=np.int64)
    time_offsets = np.empty(n + 1, dtype=np.int64)
    n_offset = 0
    n_time = 0
    last_time_ts = np.int64(-1)
    max_so_far = np.int64(-1)
    offset_of_max = np.int64(base_offset)
    bytes_since = np.int64(0)
    for i in range(n):
        if max_timestamps[i] > max_so_far:
            max_so_far = max_timestamps[i]
            offset_of_max = last_offsets[i]
        if bytes_since > interval:
            if n_offset > 0 and last_offsets[i] <= index_offsets[n_offset - 1]:
                return (_OFFSETS_NOT_INCREASING, i, index_offsets, index_positions, 0,
                        time_timestamps, time_offsets, 0)
            index_offsets[n_offset] = last_offsets[i]
            index_positions[n_offset] = positions[i]
            n_offset += 1
            if max_so_far > last_time_ts:
                time_timestamps[n_time] = max_so_far
                time_offsets[n_time] = offset_of_max
                n_time += 1
                last_time_ts = max_so_far
            bytes_since = 0
        bytes_since += sizes[i]
    if max_so_far > last_time_ts:
        time_timestamps[n_time] = max_so_far
        time_offsets[n_time] = offset_of_max
        n_time += 1
    return _OK, n, index_offsets, index_positions, n_offset, time_timestamps, time_offsets, n_time


def index_entries(
    positions: np.ndarray,
    sizes: np.ndarray,
    last_offsets: np.ndarray,
    max_timestamps: np.ndarray,
    base_offset: int,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
) -> tuple[np.ndarray, np.ndarray]:
    """Compiled entry rule: `(offset entries (n, 2) [offset, position], time entries (m, 2) [ts, offset])`."""
    columns = [
        np.ascontiguousarray(c, dtype=np.int64) for c in (positions, sizes, last_offsets, max_timestamps)
    ]
    if len({len(c) for c in columns}) != 1:
        raise ValueError("positions, sizes, last_offsets and max_timestamps must have the same length")
    status, at, offs, poss, n_off, tss, toffs, n_time = _index_entries_kernel(
        *columns, np.int64(base_offset), np.int64(index_interval_bytes)
    )
    if status == _OFFSETS_NOT_INCREASING:
        raise IndexCorruptError(
            f"batch {at}: last offset {columns[2][at]} does not follow the previous index entry",
            position=int(columns[0][at]),
            offset=int(columns[2][at]),
        )
    return np.stack([offs[:n_off], poss[:n_off]], axis=1), np.stack([tss[:n_time], toffs[:n_time]], axis=1)


def encode_offset_index(entries: np.ndarray, base_offset: int, path: str = "<memory>") -> bytes:
    """Vectorised `write_offset_index` for the (n, 2) arrays `index_entries` returns."""
    out = np.empty(len(entries), dtype=OFFSET_ENTRY_DTYPE)
    relative = entries[:, 0] - base_offset
    _check_relative(relative, path)
    out["relative_offset"] = relative
    out["position"] = entries[:, 1]
    return out.tobytes()


def encode_time_index(entries: np.ndarray, base_offset: int, path: str = "<memory>") -> bytes:
    out = np.empty(len(entries), dtype=TIME_ENTRY_DTYPE)
    relative = entries[:, 1] - base_offset
    _check_relative(relative, path)
    out["timestamp"] = entries[:, 0]
    out["relative_offset"] = relative
    return out.tobytes()


def _check_relative(relative: np.ndarray, path: str) -> None:
    bad = np.flatnonzero((relative < 0) | (relative > INT32_MAX))
    if len(bad):
        raise IndexCorruptError(
            f"relative offset {relative[bad[0]]} does not fit an int32 (LogSegmentOffsetOverflow)", path=path
        )


def build_indexes(
    positions: np.ndarray,
    sizes: np.ndarray,
    last_offsets: np.ndarray,
    max_timestamps: np.ndarray,
    base_offset: int,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
) -> tuple[bytes, bytes]:
    """`(.index bytes, .timeindex bytes)` of a closed segment holding these batches, trimmed."""
    offset_entries, time_entries = index_entries(
        positions, sizes, last_offsets, max_timestamps, base_offset, index_interval_bytes
    )
    return encode_offset_index(offset_entries, base_offset), encode_time_index(time_entries, base_offset)


# --- rebuild from a .log buffer ---------------------------------------------------------------

def rebuild_indexes_from_log(
    buf,
    base_offset: int,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    *,
    path: str = "<memory>",
    allow_trailing: bool = False,
) -> tuple[bytes, bytes]:
    """`(.index, .timeindex)` a 4.1+ broker holds for this closed segment (= `LogSegment.recover`).

    Batch headers come from `scan.scan_batches` (no CRC check: that is the scan's caller's job).
    A partial or malformed tail raises `CorruptRecordError` unless `allow_trailing`, in which case
    the indexes cover the valid prefix, as `recover` does before truncating the .log.
    """
    from compaction.kernels.scan import STOP_END, scan_batches  # numba kernels: import on use

    cols = scan_batches(buf)
    if cols.stop_reason != STOP_END and not allow_trailing:
        raise CorruptRecordError(
            f"unreadable bytes after the last whole batch (scan stop reason {cols.stop_reason}); "
            "pass allow_trailing=True to index the valid prefix",
            path=path,
            position=cols.stop_position,
        )
    return build_indexes(
        cols.position, cols.size, cols.last_offset, cols.max_timestamp, base_offset, index_interval_bytes
    )
