"""The `.index` and `.timeindex` a broker writes for a closed segment, built from the `.log` bytes
with `struct` alone: an oracle that shares no code with compaction/kernels/index_build.py, written
from the spec (shared/reference/kafka-cleaner-spec.md 3.2, 3.3, 3.5 "KAFKA-806 behaviour", 3.7).

The rule, per batch in file order (Kafka 4.1+, and the job):
* the max timestamp so far moves to `(batch.maxTimestamp, batch.lastOffset)` when strictly greater;
* if more than `index.interval.bytes` bytes of batches lie between the last entry and this batch
  (strict, counted before the batch), the offset index gets `(lastOffset, batch start position)`
  and the time index `(max so far, its offset)` when that timestamp is greater than its last
  entry's (an empty time index starts at timestamp -1, so -1 is never indexed); the count restarts;
* closing the segment appends the max so far to the time index when greater than its last entry.
Offsets are stored relative to the segment's base offset.
"""

from __future__ import annotations

import struct

# Every batch (v0/v1 message or v2 batch) starts with: offset (v2: base offset), length of the rest.
LOG_OVERHEAD = struct.Struct(">qi")
# v2 from byte 12: leader epoch, magic, crc, attributes, last offset delta, base ts, max ts.
V2_HEADER = struct.Struct(">ibIhiqq")
# v0/v1 from byte 12: crc, magic, attributes; v1 then holds the timestamp at byte 18.
LEGACY_HEADER = struct.Struct(">Ibb")
V1_TIMESTAMP = struct.Struct(">q")
OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
NO_TIMESTAMP = -1


def batches(data: bytes) -> list[tuple[int, int, int, int]]:
    """(position, size, last offset, max timestamp) of each batch of a whole `.log`."""
    out, pos = [], 0
    while pos < len(data):
        assert pos + LOG_OVERHEAD.size <= len(data), f"partial batch header at byte {pos}"
        offset, length = LOG_OVERHEAD.unpack_from(data, pos)
        size = LOG_OVERHEAD.size + length
        assert length > 0 and pos + size <= len(data), f"batch at byte {pos} runs past the end"
        magic = data[pos + 16]
        if magic >= 2:
            _, _, _, _, last_delta, _, max_ts = V2_HEADER.unpack_from(data, pos + 12)
            last = offset + last_delta
        else:
            last = offset  # a compressed wrapper carries its last inner offset
            max_ts = V1_TIMESTAMP.unpack_from(data, pos + 18)[0] if magic == 1 else NO_TIMESTAMP
        out.append((pos, size, last, max_ts))
        pos += size
    return out


def entries(data: bytes, base: int, interval: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(offset entries, time entries) of a closed segment, as (relative offset, position) and
    (timestamp, relative offset)."""
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    since_last, max_ts, max_ts_offset = 0, NO_TIMESTAMP, base

    def time_entry() -> None:
        if max_ts > (times[-1][0] if times else NO_TIMESTAMP):
            times.append((max_ts, max_ts_offset - base))

    for pos, size, last, ts in batches(data):
        if ts > max_ts:
            max_ts, max_ts_offset = ts, last
        if since_last > interval:
            offsets.append((last - base, pos))
            time_entry()
            since_last = 0
        since_last += size
    time_entry()
    return offsets, times


def index_files(data: bytes, base: int, interval: int = 4096) -> tuple[bytes, bytes]:
    """The `.index` and `.timeindex` bytes (trimmed: no preallocated tail)."""
    offsets, times = entries(data, base, interval)
    return (
        b"".join(OFFSET_ENTRY.pack(o, p) for o, p in offsets),
        b"".join(TIME_ENTRY.pack(t, o) for t, o in times),
    )
