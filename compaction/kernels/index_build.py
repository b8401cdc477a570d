"""Building the `.index` and `.timeindex` of a closed segment from its batches. Sources:
`storage/.../log/LogSegment.java` (`append`, `recover`, `onBecomeInactiveSegment`), `LogLoader.java`.

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

from collections.abc import Sequence

import numpy as np

from compaction.errors import CorruptRecordError, IndexCorruptError, IndexFullError
from compaction.format.index import (
    NO_TIMESTAMP,
    encode_offset_index,
    encode_time_index,
)
from compaction.format.layout import DEFAULT_INDEX_INTERVAL_BYTES, OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE
from compaction.kernels.jit import njit as _njit
from compaction.kernels.scan import STOP_END, scan_batches

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
def _index_entries_kernel(
    positions: np.ndarray,
    sizes: np.ndarray,
    last_offsets: np.ndarray,
    max_timestamps: np.ndarray,
    base_offset: int,
    interval: int,
) -> tuple[int, int, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray, int]:
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
    bytes_since = 0
    for i in range(n):
        if max_timestamps[i] > max_so_far:
            max_so_far = max_timestamps[i]
            offset_of_max = last_offsets[i]
        if bytes_since > interval:
            if n_offset > 0 and last_offsets[i] <= index_offsets[n_offset - 1]:
                return (
                    _OFFSETS_NOT_INCREASING,
                    i,
                    index_offsets,
                    index_positions,
                    0,
                    time_timestamps,
                    time_offsets,
                    0,
                )
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


def build_indexes(
    positions: np.ndarray,
    sizes: np.ndarray,
    last_offsets: np.ndarray,
    max_timestamps: np.ndarray,
    base_offset: int,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    path: str = "<memory>",
) -> tuple[bytes, bytes]:
    """`(.index bytes, .timeindex bytes)` of a closed segment holding these batches, trimmed.
    `path` (the segment's `.log`) names it in an `IndexCorruptError` (an offset that does not fit
    the index's int32 relative offsets: LogSegmentOffsetOverflow)."""
    offset_entries, time_entries = index_entries(
        positions, sizes, last_offsets, max_timestamps, base_offset, index_interval_bytes
    )
    return (
        encode_offset_index(offset_entries, base_offset, path),
        encode_time_index(time_entries, base_offset, path),
    )


# --- room in a new segment's indexes ----------------------------------------------------------


def index_room(segment_index_bytes: int) -> tuple[int, int]:
    """(offset entries, time entries before the one at close) a new segment's indexes take: Kafka
    sizes each file at `segment.index.bytes` rounded down to whole entries, and its time index is
    full one entry early, the last slot kept for the entry written at close (`TimeIndex.isFull`)."""
    return segment_index_bytes // OFFSET_ENTRY_SIZE, segment_index_bytes // TIME_ENTRY_SIZE - 1


def index_full_at(
    sizes: Sequence[int],
    max_timestamps: Sequence[int],
    index_interval_bytes: int,
    segment_index_bytes: int,
) -> tuple[str, int] | None:
    """Where `LogSegment.append` would find a new segment's index full writing these batches (the
    entry rule above): `(".index" | ".timeindex", batch number)`, or None. The time index is checked
    for room at every interval crossing, before it looks whether the timestamp grew. Plain Python:
    it runs only when `check_index_room` finds the entries near the limit."""
    max_offsets, max_times = index_room(segment_index_bytes)
    n_offset = n_time = 0
    last_time_ts = max_so_far = NO_TIMESTAMP
    bytes_since_last_entry = 0
    for i, (size, max_timestamp) in enumerate(zip(sizes, max_timestamps, strict=True)):
        max_so_far = max(max_so_far, int(max_timestamp))
        if bytes_since_last_entry > index_interval_bytes:
            if n_offset >= max_offsets:
                return ".index", i
            n_offset += 1
            if n_time >= max_times:
                return ".timeindex", i
            if max_so_far > last_time_ts:
                n_time, last_time_ts = n_time + 1, max_so_far
            bytes_since_last_entry = 0
        bytes_since_last_entry += int(size)
    if max_so_far > last_time_ts and n_time > max_times:  # the entry at close has no slot either
        return ".timeindex", len(sizes) - 1
    return None


def check_index_room(
    columns: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    index_bytes: int,
    time_index_bytes: int,
    index_interval_bytes: int,
    segment_index_bytes: int,
    path: str,
) -> None:
    """Raise `IndexFullError` when Kafka's cleaner could not write this cleaned segment's indexes
    within `segment.index.bytes` (docs/kafka-rules.md#index-room). `columns` are the segment's
    (positions, sizes, last offsets, max timestamps); the two sizes those of the built files."""
    max_offsets, max_times = index_room(segment_index_bytes)
    if index_bytes // OFFSET_ENTRY_SIZE <= max_offsets and time_index_bytes // TIME_ENTRY_SIZE < max_times:
        return  # fewer entries in all than the room at any crossing
    positions, sizes, _, max_timestamps = columns
    full = index_full_at(sizes, max_timestamps, index_interval_bytes, segment_index_bytes)
    if full is None:
        return
    which, at = full
    room = max_offsets if which == ".index" else max_times
    close = " before the one at close" if which == ".timeindex" else ""
    raise IndexFullError(
        f"{path}: the cleaned segment's {which} would need more entries than "
        f"segment.index.bytes={segment_index_bytes} holds ({room}{close}; batch {at} at byte {int(positions[at])}); "
        "Kafka's cleaner fails on the same segments: raise segment.index.bytes for this topic"
    )


# --- rebuild from a .log buffer ---------------------------------------------------------------


def rebuild_indexes_from_log(
    buf: np.ndarray,
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
    cols = scan_batches(buf)
    if cols.stop_reason != STOP_END and not allow_trailing:
        raise CorruptRecordError(
            f"unreadable bytes after the last whole batch (scan stop reason {cols.stop_reason}); "
            "pass allow_trailing=True to index the valid prefix",
            path=path,
            position=cols.stop_position,
        )
    return build_indexes(
        cols.position,
        cols.size,
        cols.last_offset,
        cols.max_timestamp,
        base_offset,
        index_interval_bytes,
        path,
    )
