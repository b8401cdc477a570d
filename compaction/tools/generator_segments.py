"""Writing one generated partition's segments (`generator.generate_log_dir`): batches encoded in
chunks by the numba encoder (`generator_encode`), control batches and legacy message sets through
the format modules; rolled at `segment_bytes` as a broker rolls them, each closed with its indexes.
"""

from __future__ import annotations

import os

import numpy as np

from compaction.format.batch import BATCH_LENGTH_FIELD, CRC_FIELD, Record
from compaction.format.batch_build import build_batch
from compaction.format.compression import compress
from compaction.format.crc import crc32c
from compaction.format.layout import (
    CRC_COVERED_FROM,
    CRC_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_MASK,
)
from compaction.format.legacy import build_legacy_message_set
from compaction.format.naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file_name,
)
from compaction.format.segment import iter_batches
from compaction.format.txnindex import AbortedTxn, write_txn_index
from compaction.kernels.index_build import build_indexes
from compaction.tools.generator_manifest import PartitionManifest, SegmentInfo
from compaction.tools.generator_plan import GeneratedPartition, GenerateOptions

CHUNK_BATCHES = 4096  # batches encoded per numba call: bounds the scratch buffer
IOV_MAX = 1024  # buffers per os.writev call (Linux UIO_MAXIOV)


class _SegmentWriter:
    """Appends batches like `UnifiedLog.append`: roll before an append that would overflow
    `segment.bytes` (never for the first append of a segment), then keep the per-batch columns the
    index rule needs; closing a segment writes its trimmed indexes (+ .txnindex if it has aborts).

    Appended buffers are only queued; `flush()` hands them to one `os.writev` per 1024 buffers
    (tens of thousands of small `write` calls cost more than encoding the bytes)."""

    def __init__(self, part_dir: str, opts: GenerateOptions) -> None:
        self.dir = part_dir
        self.opts = opts
        self.segments: list[SegmentInfo] = []
        self.pending: list = []
        os.makedirs(part_dir, exist_ok=True)
        self._open(0)

    def _open(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.size = 0
        self.next_offset = base_offset
        self.columns: list[list[int]] = [[], [], [], []]  # positions, sizes, last offsets, max timestamps
        self.aborted: list[AbortedTxn] = []
        path = os.path.join(self.dir, segment_file_name(base_offset, LOG_SUFFIX))
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def append(self, data, first_offset: int, entries: list[tuple[int, int, int, int]]) -> None:
        """`entries`: (position in data, size, last offset, max timestamp) of each batch in `data`."""
        if self.size > 0 and self.size + len(data) > self.opts.segment_bytes:
            self._close()
            self._open(first_offset)
        for pos, size, last_offset, max_ts in entries:
            for column, v in zip(self.columns, (self.size + pos, size, last_offset, max_ts), strict=True):
                column.append(v)
            self.next_offset = last_offset + 1
        self.pending.append(data)
        self.size += len(data)

    def flush(self) -> None:
        for i in range(0, len(self.pending), IOV_MAX):
            _writev_all(self.fd, self.pending[i : i + IOV_MAX])
        self.pending.clear()

    def add_aborted(self, txn: AbortedTxn) -> None:
        self.aborted.append(txn)  # in the ABORT marker's segment (docs/kafka-rules.md#txnindex)

    def _close(self) -> None:
        self.flush()
        os.close(self.fd)
        arrays = [np.asarray(c, dtype=np.int64) for c in self.columns]
        index, time_index = build_indexes(*arrays, self.base_offset, self.opts.index_interval_bytes)
        write_file(self._path(INDEX_SUFFIX), index)
        write_file(self._path(TIME_INDEX_SUFFIX), time_index)
        if self.aborted:
            write_file(self._path(TXN_INDEX_SUFFIX), write_txn_index(self.aborted))
        self.segments.append(
            SegmentInfo(
                self.base_offset, self.size, len(self.columns[0]), self.next_offset, bool(self.aborted)
            )
        )

    def _path(self, suffix: str) -> str:
        return os.path.join(self.dir, segment_file_name(self.base_offset, suffix))

    def finish(self) -> list[SegmentInfo]:
        self._close()
        return self.segments


def _writev_all(fd: int, buffers: list) -> None:
    written = os.writev(fd, buffers)
    total = sum(len(b) for b in buffers)
    if written < total:  # short write (rare on local files): finish the rest one buffer at a time
        rest = b"".join(bytes(b) for b in buffers)[written:]
        while rest:
            rest = rest[os.write(fd, rest) :]


class Scratch:
    """One growing buffer the numba encoder reuses: first-touching fresh pages costs more than
    encoding into them, so chunks after the first pay no page faults."""

    def __init__(self) -> None:
        self.buf = np.empty(0, dtype=np.uint8)

    def get(self, capacity: int) -> np.ndarray:
        if len(self.buf) < capacity:
            self.buf = np.empty(int(capacity * 1.25), dtype=np.uint8)
        return self.buf


def write_partition(
    part_dir: str, plan: GeneratedPartition, pool: np.ndarray, opts: GenerateOptions, scratch: Scratch
) -> list[SegmentInfo]:
    writer = _SegmentWriter(part_dir, opts)
    aborted_by_marker = {a[2]: AbortedTxn(*a) for a in plan.aborted}
    for start in range(0, len(plan.b_first), CHUNK_BATCHES):
        rows = np.arange(start, min(start + CHUNK_BATCHES, len(plan.b_first)))
        for b, data, entries in _chunk_bytes(plan, pool, opts, rows, scratch):
            first = int(plan.b_first[b])
            writer.append(data, first, entries)
            if plan.b_control[b] and first in aborted_by_marker:
                writer.add_aborted(aborted_by_marker[first])
        writer.flush()  # before the next chunk overwrites the scratch buffer
    return writer.finish()


def _chunk_bytes(
    plan: GeneratedPartition, pool: np.ndarray, opts: GenerateOptions, rows: np.ndarray, scratch: Scratch
):
    """(batch row, bytes, index entries) in log order; v2 data batches come from the numba path."""
    is_fast = ~plan.b_control[rows] & (opts.magic == MAGIC_V2)
    encoded = iter(_encode_fast(plan, pool, opts, rows[is_fast], scratch))
    for b, fast in zip(rows.tolist(), is_fast.tolist(), strict=True):
        if fast:
            data, last, max_ts = next(encoded)
            yield b, data, [(0, len(data), last, max_ts)]
        else:
            data = _build_slow(plan, pool, opts, b)
            yield b, data, _entries_of(data)


def _encode_fast(
    plan: GeneratedPartition, pool: np.ndarray, opts: GenerateOptions, rows: np.ndarray, scratch: Scratch
) -> list[tuple[memoryview, int, int]]:
    """(bytes, last offset, max timestamp) of each batch row, encoded into the scratch buffer."""
    # Imported here: the numba kernels compile on first use; the CLI's --help should not wait.
    from compaction.tools.generator_encode import encode_batches, records_upper_bound

    if len(rows) == 0:
        return []
    p = plan
    lo, hi = int(p.b_first[rows[0]]), int(p.b_first[rows[-1]] + p.b_count[rows[-1]])
    out = scratch.get(
        records_upper_bound(p.value_len[lo:hi], opts.key_size, opts.headers)
        + RECORD_BATCH_OVERHEAD * len(rows)
    )
    attributes = (np.where(p.b_transactional[rows], TRANSACTIONAL_MASK, 0) | p.b_codec[rows]).astype(np.int64)
    starts = np.empty(len(rows), dtype=np.int64)
    end = encode_batches(
        out,
        p.b_first[rows],
        p.b_count[rows],
        p.b_first[rows],
        attributes,
        p.b_leader_epoch[rows],
        p.b_pid[rows],
        p.b_epoch[rows],
        p.b_seq[rows],
        p.timestamp,
        p.key_id,
        opts.key_size,
        p.value_pos,
        p.value_len,
        pool,
        opts.headers,
        starts,
    )
    view = memoryview(out)
    bounds = np.append(starts, end).tolist()
    lasts = (p.b_first[rows] + p.b_count[rows] - 1).tolist()
    max_ts = _batch_max(p.timestamp[lo:hi], p.b_first[rows] - lo, p.b_count[rows]).tolist()
    codecs = p.b_codec[rows].tolist()
    result = []
    for i in range(len(rows)):
        s, e = bounds[i], bounds[i + 1]
        if codecs[i]:
            data = compress_batch(view[s:e], codecs[i])
        else:
            data = view[s:e]
            CRC_FIELD.pack_into(data, CRC_OFFSET, crc32c(data[CRC_COVERED_FROM:]))
        result.append((data, lasts[i], max_ts[i]))
    return result


def compress_batch(plain: memoryview, codec: int) -> bytearray:
    """The batch `plain` (records uncompressed, codec already in its attributes) with its record
    stream compressed, its length and CRC set: what build_batch gives for the same records (tests
    check byte equality)."""
    out = bytearray(plain[:RECORD_BATCH_OVERHEAD])
    out += compress(codec, bytes(plain[RECORD_BATCH_OVERHEAD:]))
    BATCH_LENGTH_FIELD.pack_into(out, LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    CRC_FIELD.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[CRC_COVERED_FROM:]))
    return out


def _batch_max(values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """max(values[s:s+c]) per batch; batches may leave gaps (other batches) between them."""
    bounds = np.column_stack([starts, starts + counts]).ravel()
    return np.maximum.reduceat(np.append(values, 0), bounds)[::2]


def _records_of(plan: GeneratedPartition, pool: np.ndarray, opts: GenerateOptions, b: int) -> list[Record]:
    first, count = int(plan.b_first[b]), int(plan.b_count[b])
    manifest = PartitionManifest(plan.topic, plan.partition, plan, pool, opts.key_size, opts.headers)
    return [
        Record(o, int(plan.timestamp[o]), manifest.key(o), manifest.value(o), manifest.headers(o))
        for o in range(first, first + count)
    ]


def _build_slow(plan: GeneratedPartition, pool: np.ndarray, opts: GenerateOptions, b: int) -> bytes:
    """Markers and legacy message sets, through the format modules (also the reference the fast
    path is tested against)."""
    records = _records_of(plan, pool, opts, b)
    codec = int(plan.b_codec[b])
    if opts.magic < MAGIC_V2:
        return build_legacy_message_set(records, opts.magic, codec)
    return build_batch(
        records,
        codec=codec,
        producer_id=int(plan.b_pid[b]),
        producer_epoch=int(plan.b_epoch[b]),
        base_sequence=int(plan.b_seq[b]),
        is_transactional=bool(plan.b_transactional[b]),
        is_control=bool(plan.b_control[b]),
        partition_leader_epoch=int(plan.b_leader_epoch[b]),
    )


def _entries_of(data: bytes) -> list[tuple[int, int, int, int]]:
    # A legacy uncompressed message set is one append of several entries, each a "batch" for the
    # index rule; reading them back through segment.py keeps one definition of a batch.
    return [
        (
            b.position,
            b.header.size,
            b.last_offset if b.magic < MAGIC_V2 else b.header.last_offset,
            b.header.max_timestamp,
        )
        for b in iter_batches(data, verify_crc=False)
    ]


def write_file(path: str, data) -> None:
    with open(path, "wb") as f:
        f.write(data)
