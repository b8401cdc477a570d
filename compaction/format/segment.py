"""Iterate the batches of a `.log` buffer: v2 batches and v0/v1 log entries
(docs/kafka-rules.md#log-file-parsing).

A `.log` file is a plain concatenation of entries with no file header. Every entry starts with
the same 17 bytes, whatever the format (Kafka `ByteBufferLogInputStream.nextBatchSize`,
`FileRecords`, `FileLogInputStream`):

| offset | size | field  | meaning                                                          |
|-------:|-----:|--------|------------------------------------------------------------------|
| 0      | 8    | offset | v2: baseOffset; v0/v1: the message (or wrapper) offset           |
| 8      | 4    | size   | bytes after this field; the entry is `size + 12` bytes           |
| 12     | 4    | -      | v2: partitionLeaderEpoch; v0/v1: crc                             |
| 16     | 1    | magic  | 0, 1 or 2                                                        |

Kafka's rules, in order, at each position:
1. fewer than 12 bytes left -> stop (partial trailing entry);
2. size < 14 -> `CorruptRecordError`;
3. fewer than 17 bytes left -> stop (partial);
4. magic not in 0..2 -> `CorruptRecordError`;
5. the whole entry not available -> stop (partial);
6. magic 2 -> `RecordBatch`, else `LegacyBatch`.

A partial trailing entry is what a crash mid-append leaves behind; like `kafka-dump-log` we stop
and report how many bytes were left (`SegmentReader.trailing_bytes`), or raise
`TruncatedBatchError` when the caller asks for a clean file (`allow_trailing=False`).
The offsets and sizes are declared in `layout.py`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

from compaction.errors import CorruptRecordError, CrcMismatchError, TruncatedBatchError
from compaction.format.batch import CRC_FIELD, RecordBatch
from compaction.format.crc import crc32, crc32c
from compaction.format.layout import (
    CRC_COVERED_FROM,
    CRC_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_CRC_COVERED_FROM,
    LEGACY_CRC_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    MIN_ENTRY_SIZE,
    RECORD_BATCH_OVERHEAD,
)
from compaction.format.legacy import LegacyBatch

if TYPE_CHECKING:
    from typing_extensions import Buffer


ENTRY_PREFIX = struct.Struct(">qi")  # offset, size
VALID_MAGICS = (MAGIC_V0, MAGIC_V1, MAGIC_V2)


class SegmentReader:
    """Iterate the entries of `buf[start:end]`; positions are positions in `buf` (the file).

    After iteration `stop_position` is where the last complete entry ends and `trailing_bytes`
    how many bytes of a partial entry follow it (0 for a clean file).
    """

    def __init__(
        self,
        buf: Buffer,
        path: str = "<memory>",
        start: int = 0,
        end: int | None = None,
        verify_crc: bool = True,
        allow_trailing: bool = True,
    ) -> None:
        self.buf = memoryview(buf)
        if self.buf.format != "B" or self.buf.ndim != 1:
            self.buf = self.buf.cast("B")
        self.path = path
        self.start = start
        self.end = len(self.buf) if end is None else min(end, len(self.buf))
        self.verify_crc = verify_crc
        self.allow_trailing = allow_trailing
        self.stop_position = start
        self.trailing_bytes = 0

    @property
    def trailing_position(self) -> int | None:
        """Where trailing bytes begin, if any. Test-only: the job reads the scan's stop fields."""
        return self.stop_position if self.trailing_bytes else None

    def __iter__(self) -> Iterator[RecordBatch | LegacyBatch]:
        pos = self.start
        while True:
            size = self._next_entry_size(pos)
            if size is None:
                self._stop(pos)
                return
            if self.verify_crc:
                self._verify_crc(pos, size)
            batch = self._make_batch(pos, size)
            pos += size
            self.stop_position = pos
            yield batch

    def _next_entry_size(self, pos: int) -> int | None:
        """Total size of the entry at `pos`, or None if only a partial entry (or nothing) is left."""
        remaining = self.end - pos
        if remaining < LOG_OVERHEAD:
            return None
        offset, size = ENTRY_PREFIX.unpack_from(self.buf, pos)
        if size < MIN_ENTRY_SIZE:
            raise CorruptRecordError(
                f"record size {size} is smaller than the minimum record overhead ({MIN_ENTRY_SIZE})",
                path=self.path,
                position=pos,
                offset=offset,
            )
        if remaining < HEADER_SIZE_UP_TO_MAGIC:
            return None
        magic = struct.unpack_from(">b", self.buf, pos + MAGIC_OFFSET)[0]
        if magic not in VALID_MAGICS:
            raise CorruptRecordError(
                f"invalid magic byte {magic}", path=self.path, position=pos, offset=offset
            )
        if remaining < size + LOG_OVERHEAD:
            return None
        return size + LOG_OVERHEAD

    def _make_batch(self, pos: int, size: int) -> RecordBatch | LegacyBatch:
        raw = self.buf[pos : pos + size]
        if raw[MAGIC_OFFSET] == MAGIC_V2:
            return RecordBatch(raw, pos, self.path)
        return LegacyBatch(raw, pos, self.path)

    def _verify_crc(self, pos: int, size: int) -> None:
        """Check the checksum before parsing, so a flipped byte reads as a CRC error, not garbage."""
        raw = self.buf[pos : pos + size]
        v2 = raw[MAGIC_OFFSET] == MAGIC_V2
        if v2 and size < RECORD_BATCH_OVERHEAD:
            return  # too short to hold a CRC: RecordBatch reports it as corrupt
        crc_at, covered_from, crc_fn = (
            (CRC_OFFSET, CRC_COVERED_FROM, crc32c)
            if v2
            else (LEGACY_CRC_OFFSET, LEGACY_CRC_COVERED_FROM, crc32)
        )
        (expected,) = CRC_FIELD.unpack_from(raw, crc_at)
        actual = crc_fn(raw[covered_from:])
        if actual != expected:
            offset = ENTRY_PREFIX.unpack_from(raw)[0]
            kind = "record batch" if v2 else "message"
            raise CrcMismatchError(
                f"{kind} checksum mismatch",
                expected=expected,
                actual=actual,
                path=self.path,
                position=pos,
                offset=offset,
            )

    def _stop(self, pos: int) -> None:
        self.stop_position = pos
        self.trailing_bytes = self.end - pos
        if self.trailing_bytes and not self.allow_trailing:
            needed = self._declared_size(pos)
            raise TruncatedBatchError(
                "partial batch at the end of the segment",
                available=self.trailing_bytes,
                needed=needed,
                path=self.path,
                position=pos,
            )

    def _declared_size(self, pos: int) -> int:
        if self.end - pos < LOG_OVERHEAD:
            return LOG_OVERHEAD
        return ENTRY_PREFIX.unpack_from(self.buf, pos)[1] + LOG_OVERHEAD


def iter_batches(
    buf: Buffer,
    path: str = "<memory>",
    start: int = 0,
    end: int | None = None,
    verify_crc: bool = True,
    allow_trailing: bool = True,
) -> Iterator[RecordBatch | LegacyBatch]:
    """Yield the batches of `buf[start:end]` (docs/kafka-rules.md#log-file-parsing). Use `SegmentReader` to
    see trailing bytes."""
    return iter(SegmentReader(buf, path, start, end, verify_crc, allow_trailing))
