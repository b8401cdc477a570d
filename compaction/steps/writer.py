"""The writer of a cleaned segment: `<base>.log.cleaned` streamed as batches are produced, the
columns its indexes are built from, and the runs of batches a segment hands over.

Memory per task (one rewrite unit): the cleaned `.log` is streamed to `<base>.log.cleaned` as
batches are produced, so what a task holds at once is bounded by ONE source segment, not by the
output group: the segment itself (a pooled buffer read with O_DIRECT, or memory-mapped with
`--read-mode mmap` or below 8 MiB; a bytes copy on object stores), `SegmentScan.side` (the
decompressed records of its compressed batches), ~45 B of record columns + ~10 B of keep/found
arrays per record of the segment, the re-encoded records of its rebuilt batches, one
`emit.SLICE_BYTES` slice at a time (<= their uncompressed size + 14 B per record) plus their
compressed copies, and the writer's 8 MiB staging buffers, at most `segment_io.WRITE_AHEAD` + 1 (on
object stores up to `LogWriter.FLUSH_BYTES` of pending slices instead); plus 32 B per output batch
of the group for the index columns. Roughly: segment size + 2 x its decompressed size + 60 B x its
records, whatever the group size.
"""

from __future__ import annotations

import itertools
from array import array
from dataclasses import dataclass, field

import numpy as np

from compaction.runtime import task_progress, throttle
from compaction.runtime.segment_io import SegmentWriter
from compaction.runtime.storage import Storage
from compaction.settings import WriteMode
from compaction.steps.group import CLEANED, GroupSpec


class LogWriter:
    """`<base>.log.cleaned`, written as it is produced and made durable on `close` (the same
    guarantees as `Storage.write_durable`: local -> fsync the file and its directory). Local files
    go through `segment_io.SegmentWriter` (chunks copied into staging buffers at once); elsewhere
    chunks are gathered up to FLUSH_BYTES and streamed."""

    FLUSH_BYTES = 4 << 20

    def __init__(self, storage: Storage, path: str, write_mode: WriteMode = "direct") -> None:
        self.storage, self.path = storage, path
        self._local = SegmentWriter(path, write_mode) if storage.is_local else None
        if self._local is None:  # compression=None: the default would guess a codec from the file extension
            self._file = storage.fs.open_output_stream(path, compression=None)
        self._pending: list = []
        self._pending_bytes = 0

    def write(self, chunk) -> None:
        if self._local is not None:
            self._local.write(chunk)
            return
        self._pending.append(chunk)
        self._pending_bytes += len(chunk)
        if self._pending_bytes >= self.FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        chunks, self._pending, self._pending_bytes = self._pending, [], 0
        throttle.acquire(sum(len(c) for c in chunks))  # --io-max-bytes-per-second
        task_progress.count(written=sum(len(c) for c in chunks))
        for c in chunks:
            self._file.write(c)

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
            return
        self.flush()
        self._file.close()


class Discard:
    """The writer of a dry run: the batches are built and counted (`Output.size`), not written."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, chunk) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class Output:
    """The cleaned segment being written: batch bytes go to the `.log.cleaned` writer at once; only
    the columns the indexes are built from stay in memory, 8 bytes per value: the batches
    appended one run at a time in array('q')s, those appended as arrays (`append_columns`: a
    segment's converted legacy messages, up to millions) kept as such (`columns` joins them)."""

    writer: LogWriter | None = None
    positions: array = field(default_factory=lambda: array("q"))
    sizes: array = field(default_factory=lambda: array("q"))
    last_offsets: array = field(default_factory=lambda: array("q"))
    max_timestamps: array = field(default_factory=lambda: array("q"))
    size: int = 0
    records: int = 0
    batches: int = 0
    _done: list[tuple[np.ndarray, ...]] = field(default_factory=list)  # column chunks before the arrays

    def open(self, spec: GroupSpec, discard: bool = False) -> None:
        if self.writer is None:
            path = spec.segment_path(spec.new_base, ".log") + CLEANED
            discard = discard or spec.dry_run
            self.writer = Discard(path) if discard else LogWriter(spec.storage, path, spec.write_mode)

    def append_run(self, chunks, batches: list[tuple[int, int, int, int]]) -> None:
        """Consecutive batches, in order, as byte chunks that are not copied (slices of the source
        segment, the kernel's output, freshly built bytes); `batches`: (size, last offset, max
        timestamp, records) of each."""
        for c in chunks:
            self.writer.write(c)
        sizes, last_offsets, max_timestamps, records = zip(*batches, strict=True)
        ends = list(itertools.accumulate(sizes, initial=self.size))
        self.positions.extend(ends[:-1])
        self.sizes.extend(sizes)
        self.last_offsets.extend(last_offsets)
        self.max_timestamps.extend(max_timestamps)
        self.size = ends[-1]
        self.records += sum(records)
        self.batches += len(sizes)

    def append_columns(
        self, chunk, sizes: np.ndarray, last_offsets: np.ndarray, max_timestamps: np.ndarray, records: int
    ) -> None:
        """`append_run` for many batches in one chunk, their columns as arrays."""
        self.writer.write(chunk)
        self._seal()
        ends = self.size + np.cumsum(sizes, dtype=np.int64)
        i64 = np.int64
        self._done.append(
            (
                ends - sizes,
                np.asarray(sizes, i64),
                np.asarray(last_offsets, i64),
                np.asarray(max_timestamps, i64),
            )
        )
        self.size = int(ends[-1])
        self.records += records
        self.batches += len(sizes)

    def _seal(self) -> None:
        cols = (self.positions, self.sizes, self.last_offsets, self.max_timestamps)
        if len(self.sizes):
            self._done.append(tuple(np.frombuffer(c, dtype=np.int64) for c in cols))
            self.positions, self.sizes, self.last_offsets, self.max_timestamps = (array("q") for _ in cols)

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(positions, sizes, last offsets, max timestamps) of every batch written."""
        self._seal()
        if len(self._done) > 1:
            self._done = [tuple(np.concatenate(c) for c in zip(*self._done, strict=True))]
        return self._done[0] if self._done else tuple(np.empty(0, np.int64) for _ in range(4))


class Runs:
    """The batches of one segment on their way to an `Output`, in log order, a run at a time:
    consecutive verbatim batches go out as one slice of the source segment, consecutive built
    ones with their small chunks joined, so the writer and the index columns are called per run,
    not per batch (a segment rebuilds ~1,000 batches)."""

    # A bigger chunk (an uncompressed rebuilt payload) is written as it is, not copied once more.
    JOIN_MAX = 64 << 10

    def __init__(self, out: Output, source: memoryview) -> None:
        self.out, self.source = out, source
        self.start = self.end = -1  # the verbatim run is source[start:end]
        self.built: list = []  # the built run's chunks
        self.batches: list[tuple[int, int, int, int]] = []

    def verbatim(self, pos: int, size: int, last_offset: int, max_timestamp: int, records: int) -> None:
        if self.built or pos != self.end:
            self.flush()
            self.start = pos
        self.end = pos + size
        self.batches.append((size, last_offset, max_timestamp, records))

    def built_batch(self, chunks, last_offset: int, max_timestamp: int, records: int) -> None:
        if self.end >= 0:
            self.flush()
        self.built.extend(chunks)
        self.batches.append((sum(len(c) for c in chunks), last_offset, max_timestamp, records))

    def flush(self) -> None:
        if self.end >= 0:
            self.out.append_run((self.source[self.start : self.end],), self.batches)
        elif self.batches:
            self.out.append_run(_joined(self.built, self.JOIN_MAX), self.batches)
        self.start = self.end = -1
        self.built, self.batches = [], []


def _joined(chunks: list, most: int) -> list:
    """`chunks` with each stretch of chunks smaller than `most` bytes joined into one."""
    out, small = [], []
    for c in chunks:
        if len(c) < most:
            small.append(c)
            continue
        if small:
            out.append(b"".join(small))
            small = []
        out.append(c)
    if small:
        out.append(b"".join(small))
    return out
