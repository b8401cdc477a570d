"""Broker-like Kafka log dir generator (`python -m compaction generate`) and its Python API.

`generate_log_dir(out_dir, **options)` writes what a Kafka 4.1 broker leaves on disk after a clean
shutdown: `<topic>-<partition>/<20-digit base>.log` segments rolled at `segment_bytes`, trimmed
`.index`/`.timeindex` following the per-batch entry rule, `.txnindex` where aborted
transactions end, `leader-epoch-checkpoint`, `partition.metadata`, and the log-dir level
`meta.properties` and offset checkpoints. It returns a `Manifest` of every record written, so
tests can compute the expected compaction result without reading our own output back.

Deliberately absent: `.kafka_cleanshutdown` (a broker deletes it at startup, and its absence
makes a broker recover every segment past the recovery point, which also checks our CRCs), and
producer `.snapshot` files (a broker rebuilds producer state from the log when they are missing).

Same options + seed -> byte-identical files (timestamps come from the options, not the clock).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import sys
import time

import numpy as np

from compaction.format import checkpoint as ckpt
from compaction.format.batch import BATCH_LENGTH_FIELD, CRC_FIELD, Record
from compaction.format.batch_build import build_batch
from compaction.format.compression import compress
from compaction.format.crc import crc32c
from compaction.format.index_build import build_indexes
from compaction.format.txnindex import AbortedTxn, write_txn_index
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
    partition_dir_name,
    segment_file_name,
)
from compaction.format.segment import iter_batches
from compaction.tools.generator_manifest import Manifest, ManifestRecord, PartitionManifest, SegmentInfo
from compaction.tools.generator_plan import (
    TXN_ABORTED,
    TXN_COMMITTED,
    TXN_NONE,
    GenerateOptions,
    GeneratedPartition,
    make_producers,
    make_value_pool,
    partition_rng,
    plan_partition,
)

__all__ = [
    "TXN_ABORTED", "TXN_COMMITTED", "TXN_NONE", "GenerateOptions", "Manifest", "ManifestRecord",
    "PartitionManifest", "SegmentInfo", "generate_log_dir",
]

CHUNK_BATCHES = 4096  # batches encoded per numba call: bounds the scratch buffer
IOV_MAX = 1024  # buffers per os.writev call (Linux UIO_MAXIOV)


# --- public API --------------------------------------------------------------------------------


def generate_log_dir(out_dir: str, *, keep_records: bool = True, **options) -> Manifest:
    """Write a broker-like log dir under `out_dir` (created; must not hold a log dir already).

    `options` are the fields of `GenerateOptions` (topics=(("orders", 2),), records=..., ...).
    With `keep_records=False` each partition's record columns are dropped once written (only
    summaries remain), so generating many GB does not need as much memory.
    """
    opts = GenerateOptions(**options)
    opts.validate()
    os.makedirs(out_dir, exist_ok=True)
    pool = make_value_pool(opts)
    producers = make_producers(opts)
    partitions: dict[tuple[str, int], PartitionManifest] = {}
    written = 0
    scratch = _Scratch()
    for topic, count in opts.topics:
        topic_id = _topic_id(opts.seed, topic)
        for partition in range(count):
            plan = plan_partition(opts, topic, partition, producers, len(pool))
            manifest = PartitionManifest(topic, partition, plan, pool, opts.key_size, opts.headers)
            part_dir = os.path.join(out_dir, partition_dir_name(topic, partition))
            manifest.segments = _write_partition(part_dir, plan, pool, opts, scratch)
            _write_partition_files(part_dir, plan, topic_id)
            partitions[(topic, partition)] = manifest
            written += sum(s.size for s in manifest.segments)
            if not keep_records:
                manifest.drop_records()
    checkpoint = _cleaner_checkpoint(opts, partitions)
    _write_log_dir_files(out_dir, opts, partitions, checkpoint)
    return Manifest(out_dir, opts, partitions, checkpoint, written)


# --- one partition -------------------------------------------------------------------------------


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
            _writev_all(self.fd, self.pending[i:i + IOV_MAX])
        self.pending.clear()

    def add_aborted(self, txn: AbortedTxn) -> None:
        self.aborted.append(txn)  # in the ABORT marker's segment (docs/kafka-rules.md#txnindex)

    def _close(self) -> None:
        self.flush()
        os.close(self.fd)
        arrays = [np.asarray(c, dtype=np.int64) for c in self.columns]
        index, time_index = build_indexes(*arrays, self.base_offset, self.opts.index_interval_bytes)
        _write_file(self._path(INDEX_SUFFIX), index)
        _write_file(self._path(TIME_INDEX_SUFFIX), time_index)
        if self.aborted:
            _write_file(self._path(TXN_INDEX_SUFFIX), write_txn_index(self.aborted))
        self.segments.append(SegmentInfo(self.base_offset, self.size, len(self.columns[0]),
                                         self.next_offset, bool(self.aborted)))

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
            rest = rest[os.write(fd, rest):]


class _Scratch:
    """One growing buffer the numba encoder reuses: first-touching fresh pages costs more than
    encoding into them, so chunks after the first pay no page faults."""

    def __init__(self) -> None:
        self.buf = np.empty(0, dtype=np.uint8)

    def get(self, capacity: int) -> np.ndarray:
        if len(self.buf) < capacity:
            self.buf = np.empty(int(capacity * 1.25), dtype=np.uint8)
        return self.buf


def _write_partition(part_dir: str, plan: GeneratedPartition, pool: np.ndarray, opts: GenerateOptions,
                     scratch: _Scratch) -> list[SegmentInfo]:
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


def _chunk_bytes(plan: GeneratedPartition, pool: np.ndarray, opts: GenerateOptions, rows: np.ndarray,
                 scratch: _Scratch):
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


def _encode_fast(plan: GeneratedPartition, pool: np.ndarray, opts: GenerateOptions, rows: np.ndarray,
                 scratch: _Scratch) -> list[tuple[memoryview, int, int]]:
    """(bytes, last offset, max timestamp) of each batch row, encoded into the scratch buffer."""
    # Imported here: the numba kernels compile on first use; the CLI's --help should not wait.
    from compaction.tools.generator_encode import encode_batches, records_upper_bound

    if len(rows) == 0:
        return []
    p = plan
    lo, hi = int(p.b_first[rows[0]]), int(p.b_first[rows[-1]] + p.b_count[rows[-1]])
    out = scratch.get(records_upper_bound(p.value_len[lo:hi], opts.key_size, opts.headers)
                      + RECORD_BATCH_OVERHEAD * len(rows))
    attributes = (np.where(p.b_transactional[rows], TRANSACTIONAL_MASK, 0) | p.b_codec[rows]).astype(np.int64)
    starts = np.empty(len(rows), dtype=np.int64)
    end = encode_batches(out, p.b_first[rows], p.b_count[rows], p.b_first[rows], attributes,
                         p.b_leader_epoch[rows], p.b_pid[rows], p.b_epoch[rows], p.b_seq[rows],
                         p.timestamp, p.key_id, opts.key_size, p.value_pos, p.value_len, pool, opts.headers,
                         starts)
    view = memoryview(out)
    bounds = np.append(starts, end).tolist()
    lasts = (p.b_first[rows] + p.b_count[rows] - 1).tolist()
    max_ts = _batch_max(p.timestamp[lo:hi], p.b_first[rows] - lo, p.b_count[rows]).tolist()
    codecs = p.b_codec[rows].tolist()
    result = []
    for i in range(len(rows)):
        s, e = bounds[i], bounds[i + 1]
        if codecs[i]:
            data = _compressed(view[s:e], codecs[i])
        else:
            data = view[s:e]
            CRC_FIELD.pack_into(data, CRC_OFFSET, crc32c(data[CRC_COVERED_FROM:]))
        result.append((data, lasts[i], max_ts[i]))
    return result


def _compressed(plain: memoryview, codec: int) -> bytearray:
    """The batch `plain` (records uncompressed, codec already in its attributes) with its record
    stream compressed: what build_batch gives for the same records (tests check byte equality)."""
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
    return [Record(o, int(plan.timestamp[o]), manifest.key(o), manifest.value(o), manifest.headers(o))
            for o in range(first, first + count)]


def _build_slow(plan: GeneratedPartition, pool: np.ndarray, opts: GenerateOptions, b: int) -> bytes:
    """Markers and legacy message sets, through the format modules (also the reference the fast
    path is tested against)."""
    records = _records_of(plan, pool, opts, b)
    codec = int(plan.b_codec[b])
    if opts.magic < MAGIC_V2:
        return build_legacy_message_set(records, opts.magic, codec)
    return build_batch(
        records, codec=codec, producer_id=int(plan.b_pid[b]), producer_epoch=int(plan.b_epoch[b]),
        base_sequence=int(plan.b_seq[b]), is_transactional=bool(plan.b_transactional[b]),
        is_control=bool(plan.b_control[b]), partition_leader_epoch=int(plan.b_leader_epoch[b]))


def _entries_of(data: bytes) -> list[tuple[int, int, int, int]]:
    # A legacy uncompressed message set is one append of several entries, each a "batch" for the
    # index rule; reading them back through segment.py keeps one definition of a batch.
    return [(b.position, b.header.size, b.last_offset if b.magic < MAGIC_V2 else b.header.last_offset,
             b.header.max_timestamp) for b in iter_batches(data, verify_crc=False)]


# --- files beside the segments -------------------------------------------------------------------


def _write_file(path: str, data) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _topic_id(seed: int, topic: str) -> str:
    raw = partition_rng(seed, topic, -1 & 0xFFFF, 7).bytes(16)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")  # Kafka's Uuid.toString


def _write_partition_files(part_dir: str, plan: GeneratedPartition, topic_id: str) -> None:
    _write_file(os.path.join(part_dir, ckpt.LEADER_EPOCH_CHECKPOINT),
                ckpt.format_leader_epoch_checkpoint(plan.leader_epoch_entries()).encode())
    # PartitionMetadataFile writes no trailing newline (as in the real-kafka fixtures).
    _write_file(os.path.join(part_dir, "partition.metadata"), f"version: 0\ntopic_id: {topic_id}".encode())


def _cleaner_checkpoint(opts: GenerateOptions, partitions: dict) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for topic, partition, offset in opts.checkpoint:
        for tp in partitions:
            if topic in ("*", tp[0]) and partition in (None, tp[1]):
                out[tp] = offset
    return out


def _write_log_dir_files(out_dir: str, opts: GenerateOptions, partitions: dict, cleaner: dict) -> None:
    leo = {tp: m.log_end_offset for tp, m in partitions.items()}
    files = {
        ckpt.CLEANER_OFFSET_CHECKPOINT: cleaner,
        ckpt.RECOVERY_POINT_OFFSET_CHECKPOINT: leo,  # clean shutdown: everything flushed
        ckpt.LOG_START_OFFSET_CHECKPOINT: {},  # only written when logStart > first base offset
        ckpt.REPLICATION_OFFSET_CHECKPOINT: leo,  # high watermark = log end offset
    }
    for name, entries in files.items():
        _write_file(os.path.join(out_dir, name), ckpt.format_offset_checkpoint(entries).encode())
    _write_file(os.path.join(out_dir, "meta.properties"), _meta_properties(opts).encode())


def _meta_properties(opts: GenerateOptions) -> str:
    # java.util.Properties.store: a blank comment line, then the date comment, then key=value.
    date = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(opts.timestamp_start / 1000))
    cluster = base64.urlsafe_b64encode(np.random.default_rng(opts.seed).bytes(16)).decode().rstrip("=")
    return f"#\n#{date}\nbroker.id={opts.broker_id}\nversion=0\ncluster.id={cluster}\n"


# --- CLI -----------------------------------------------------------------------------------------

DESCRIPTION = """Write a synthetic, broker-like Kafka log dir (what a 4.1 broker leaves after a clean
shutdown, minus .kafka_cleanshutdown and producer .snapshot files, which a broker does without).
Same options and --seed give byte-identical files."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = GenerateOptions()
    a = parser.add_argument
    a("out_dir", metavar="OUT_LOG_DIR", help="log dir to create (must be empty or absent)")
    a("--topics", type=_topics, default=d.topics, help="name[:partitions],... (default orders:2,customers:2)")
    a("--records", type=int, default=d.records, help=f"data records per partition (default {d.records})")
    a("--keys", type=int, default=d.keys, help=f"distinct keys (default {d.keys})")
    a("--key-skew", type=float, default=d.key_skew, help="zipf exponent; 0 = uniform (default 0)")
    a("--key-size", type=int, default=d.key_size, help="key bytes, b'key-' + zero-padded id (default 10)")
    a("--value-size", type=_range, default=d.value_size, help="N or MIN:MAX value bytes (default 20:200)")
    a("--codec", choices=["none", "gzip", "snappy", "lz4", "zstd", "mixed"], default=d.codec)
    a("--batch-records", type=_range, default=d.batch_records, help="N or MIN:MAX records per batch")
    a("--segment-bytes", type=int, default=d.segment_bytes, help="roll size, like segment.bytes (1 MiB)")
    a("--index-interval-bytes", type=int, default=d.index_interval_bytes, help="index.interval.bytes")
    a("--tombstone-ratio", type=float, default=d.tombstone_ratio, help="fraction of null values")
    a("--headers", type=int, default=d.headers, help="headers per record (default 0)")
    a("--transactions", type=float, default=d.transactions,
      help="fraction of batches from transactional producers")
    a("--idempotent", type=float, default=d.idempotent, help="fraction of batches from idempotent producers")
    a("--abort-ratio", type=float, default=d.abort_ratio, help="fraction of transactions aborted")
    a("--txn-producers", type=int, default=d.txn_producers, help="transactional producers (default 4)")
    a("--idempotent-producers", type=int, default=d.idempotent_producers)
    a("--txn-batches", type=int, default=d.txn_batches, help="max batches per transaction and partition")
    a("--legacy", choices=["v0", "v1"], default=None, help="write message format v0/v1 instead of v2")
    a("--timestamp-start", type=int, default=d.timestamp_start, help="timestamp of offset 0 (ms)")
    a("--timestamp-step-ms", type=int, default=d.timestamp_step_ms, help="timestamp increment per offset")
    a("--leader-epochs", type=int, default=d.leader_epochs, help="leader epochs over the log (default 1)")
    a("--seed", type=int, default=d.seed)
    a("--checkpoint", type=_checkpoint, default=(),
      help="cleaner-offset-checkpoint entries, comma-separated: topic:partition=N, topic=N or *=N")
    a("--broker-id", type=int, default=d.broker_id)
    a("--summary", metavar="FILE", help="also write a JSON summary of what was generated")


def run(args: argparse.Namespace) -> int:
    if os.path.isdir(args.out_dir) and os.listdir(args.out_dir):
        sys.stderr.write(f"generate: {args.out_dir} is not empty\n")
        return 2
    names = [f.name for f in dataclasses.fields(GenerateOptions)]
    options = {n: getattr(args, n) for n in names if hasattr(args, n)}
    started = time.perf_counter()
    try:
        manifest = generate_log_dir(args.out_dir, keep_records=False, **options)
    except ValueError as exc:
        sys.stderr.write(f"generate: {exc}\n")
        return 2
    seconds = time.perf_counter() - started
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(manifest.summary() | {"seconds": round(seconds, 3)}, f, indent=1)
    records = sum(m.summary()["records"] for m in manifest.partitions.values())
    size = manifest.bytes_written
    print(f"generated {len(manifest.partitions)} partitions, {records} records, {size} bytes "
          f"in {seconds:.2f} s ({size / max(seconds, 1e-9) / 1e6:.1f} MB/s) under {args.out_dir}")
    return 0


def _range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(":")
    try:
        return int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or MIN:MAX, got {text!r}") from None


def _topics(text: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in filter(None, text.split(",")):
        name, _, count = item.partition(":")
        if not name or (count and not count.isdigit()):
            raise argparse.ArgumentTypeError(f"expected name[:partitions], got {item!r}")
        out.append((name, int(count or 1)))
    return tuple(out)


def _checkpoint(text: str) -> tuple[tuple[str, int | None, int], ...]:
    out = []
    for item in filter(None, text.split(",")):
        where, eq, offset = item.rpartition("=")
        topic, colon, partition = where.partition(":")
        if not eq or not topic or not offset.lstrip("-").isdigit() or (colon and not partition.isdigit()):
            raise argparse.ArgumentTypeError(
                f"expected topic:partition=offset, topic=offset or *=offset, got {item!r}")
        out.append((topic, int(partition) if colon else None, int(offset)))
    return tuple(out)
