"""Segment indexes `.index` and `.timeindex`: read, write, look up, sanity-check
(docs/kafka-rules.md#offset-index to #index-invariants). The `.txnindex` is in `txnindex`, the
entry rule that builds the indexes of a segment in `kernels/index_build.py`.

Sources: `storage/.../log/OffsetIndex.java`, `TimeIndex.java`, `AbstractIndex.java`,
`LogLoader.java`.

Wire formats (big-endian, no header, no checksum, no entry count: entries = file length / size)

    .index      8 bytes per entry                                  OffsetIndex.java
      0  int32  relative offset  offset - segment base offset, in [0, 2**31-1]
      4  int32  position         byte position of a batch start in the .log
      Entry (O, P): scanning the .log from P finds offset O or anything after it.

    .timeindex  12 bytes per entry                                 TimeIndex.java
      0  int64  timestamp        largest batch max-timestamp up to the batch whose last offset is O
      8  int32  relative offset  O - segment base offset
      Entry (T, O): every batch with max timestamp > T lies after the batch ending at O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import numpy as np

from compaction.errors import IndexCorruptError
from compaction.format.batch import NO_TIMESTAMP
from compaction.format.layout import INT32_MAX, OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset

# numpy views of the same layouts, for whole-file reads and writes without a Python loop.
OFFSET_ENTRY_DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
TIME_ENTRY_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])
assert OFFSET_ENTRY_DTYPE.itemsize == OFFSET_ENTRY_SIZE and TIME_ENTRY_DTYPE.itemsize == TIME_ENTRY_SIZE


# --- read -------------------------------------------------------------------------------------


def whole_entries(data: bytes | memoryview, entry_size: int) -> memoryview:
    # Like AbstractIndex: entries = floor(length / entrySize); a partial tail is not an entry
    # (the sanity checks below report it).
    view = memoryview(data).cast("B")
    return view[: len(view) - len(view) % entry_size]


def read_offset_index(data: bytes | memoryview, base_offset: int) -> np.ndarray:
    """`(n, 2)` int64 array of `[absolute offset, position]`, in file order."""
    raw = np.frombuffer(whole_entries(data, OFFSET_ENTRY_SIZE), dtype=OFFSET_ENTRY_DTYPE)
    out = np.empty((len(raw), 2), dtype=np.int64)
    out[:, 0] = raw["relative_offset"].astype(np.int64) + base_offset
    out[:, 1] = raw["position"]
    return out


def read_time_index(data: bytes | memoryview, base_offset: int) -> np.ndarray:
    """`(n, 2)` int64 array of `[timestamp, absolute offset]`, in file order."""
    raw = np.frombuffer(whole_entries(data, TIME_ENTRY_SIZE), dtype=TIME_ENTRY_DTYPE)
    out = np.empty((len(raw), 2), dtype=np.int64)
    out[:, 0] = raw["timestamp"]
    out[:, 1] = raw["relative_offset"].astype(np.int64) + base_offset
    return out


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
    """Entries `(offset, position)`; offsets strictly increasing, positions in [0, 2**31-1].

    Test-only: the job's indexes come from kernels/index_build.py; tests write them with this."""
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
    last: tuple[int, int] | None = None  # (timestamp, offset) of the entry before
    for timestamp, offset in entries:
        timestamp, offset = int(timestamp), int(offset)
        if last is not None and (timestamp <= last[0] or offset < last[1]):
            raise IndexCorruptError(
                f"time index entry ({timestamp}, {offset}) does not follow {last}",
                path=path,
                offset=offset,
            )
        out += TIME_ENTRY.pack(timestamp, _relative(offset, base_offset, path))
        last = (timestamp, offset)
    return bytes(out)


# --- lookup -----------------------------------------------------------------------------------


def lookup_offset(entries: np.ndarray, target: int, base_offset: int) -> tuple[int, int]:
    """`OffsetIndex.lookup`: the entry with the largest offset <= target, else `(base_offset, 0)`.

    Test-only: what a broker does with the index the job writes, as the tests' oracle."""
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


def _check_increasing(column: np.ndarray, *, strictly: bool, what: str, path: str, entry_size: int) -> None:
    steps = np.diff(column)
    bad = np.flatnonzero(steps <= 0 if strictly else steps < 0)
    if len(bad):
        i = int(bad[0]) + 1
        raise IndexCorruptError(
            f"{what} {column[i]} does not follow {column[i - 1]}", path=path, position=i * entry_size
        )


# --- encode (vectorised) ------------------------------------------------------------------------


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
