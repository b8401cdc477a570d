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

import base64
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import NamedTuple

import numpy as np

from compaction.format import checkpoint as ckpt
from compaction.format.batch import CRC_COVERED_FROM, CRC_FIELD, CRC_OFFSET, Record, build_batch, control_record
from compaction.format.crc import crc32c
from compaction.format.index import AbortedTxn, build_indexes, write_txn_index
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
from compaction.generator_plan import (
    HEADER_VALUE_SIZE,
    TXN_ABORTED,
    TXN_COMMITTED,
    TXN_NONE,
    GenerateOptions,
    PartitionPlan,
    header_name,
    key_bytes,
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
WRITE_BUFFER = 4 << 20
RECORD_COLUMNS = ("timestamp", "key_id", "value_pos", "value_len", "producer_id", "producer_epoch",
                  "sequence", "txn", "control_type", "coordinator_epoch", "batch")


class SegmentInfo(NamedTuple):
    base_offset: int
    size: int
    batches: int
    next_offset: int  # first offset after the segment's last batch
    has_txn_index: bool


class ManifestRecord(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    producer_id: int
    producer_epoch: int
    sequence: int
    txn: int  # TXN_NONE / TXN_COMMITTED / TXN_ABORTED
    control_type: int  # -1 for data; 0 ABORT / 1 COMMIT for markers


@dataclass
class PartitionManifest:
    """Everything written to one partition. Column arrays are indexed by offset (row i = offset i)."""

    topic: str
    partition: int
    plan: PartitionPlan
    pool: np.ndarray
    key_size: int
    headers_per_record: int
    segments: list[SegmentInfo] = field(default_factory=list)

    def __getattr__(self, name: str):  # columns straight from the plan: manifest.key_id, .txn, ...
        if name in RECORD_COLUMNS or name == "offset":
            return getattr(self.plan, name)
        raise AttributeError(name)

    @property
    def log_end_offset(self) -> int:
        return self.plan.log_end_offset

    @property
    def aborted(self) -> list[AbortedTxn]:
        return [AbortedTxn(*a) for a in self.plan.aborted]

    @property
    def is_control(self) -> np.ndarray:
        return self.plan.control_type >= 0

    @property
    def is_tombstone(self) -> np.ndarray:
        return (self.plan.value_len < 0) & ~self.is_control

    def key(self, offset: int) -> bytes | None:
        if self.plan.control_type[offset] >= 0:
            return control_record(int(self.plan.control_type[offset]), int(self.plan.coordinator_epoch[offset]))[0]
        return key_bytes(int(self.plan.key_id[offset]), self.key_size)

    def value(self, offset: int) -> bytes | None:
        if self.plan.control_type[offset] >= 0:
            return control_record(int(self.plan.control_type[offset]), int(self.plan.coordinator_epoch[offset]))[1]
        length = int(self.plan.value_len[offset])
        if length < 0:
            return None
        pos = int(self.plan.value_pos[offset])
        return self.pool[pos:pos + length].tobytes()

    def headers(self, offset: int) -> tuple[tuple[str, bytes], ...]:
        if self.plan.control_type[offset] >= 0:
            return ()
        pos = int(self.plan.value_pos[offset])
        return tuple((header_name(j), self.pool[pos + j:pos + j + HEADER_VALUE_SIZE].tobytes())
                     for j in range(self.headers_per_record))

    def record(self, offset: int) -> ManifestRecord:
        p = self.plan
        return ManifestRecord(
            offset, int(p.timestamp[offset]), self.key(offset), self.value(offset), self.headers(offset),
            int(p.producer_id[offset]), int(p.producer_epoch[offset]), int(p.sequence[offset]),
            int(p.txn[offset]), int(p.control_type[offset]))

    def records(self) -> Iterator[ManifestRecord]:
        return (self.record(i) for i in range(self.log_end_offset))

    def summary(self) -> dict:
        return {
            "topic": self.topic, "partition": self.partition, "logEndOffset": self.log_end_offset,
            "records": int((~self.is_control).sum()), "markers": int(self.is_control.sum()),
            "tombstones": int(self.is_tombstone.sum()), "abortedTxns": len(self.plan.aborted),
            "segments": [s._asdict() for s in self.segments],
        }


@dataclass
class Manifest:
    out_dir: str
    options: GenerateOptions
    partitions: dict[tuple[str, int], PartitionManifest]
    cleaner_checkpoint: dict[tuple[str, int], int]
    bytes_written: int = 0

    def summary(self) -> dict:
        return {"version": 1, "outDir": self.out_dir, "options": asdict(self.options),
                "bytesWritten": self.bytes_written,
                "cleanerCheckpoint": [[t, p, o] for (t, p), o in sorted(self.cleaner_checkpoint.items())],
                "partitions": [m.summary() for _, m in sorted(self.partitions.items())]}




# --- public API --------------------------------------------------------------------------------


def generate_log_dir(out_dir: str, **options) -> Manifest:
    """Write a broker-like log dir under `out_dir` (created; must not hold a log dir already).

    `options` are the fields of `GenerateOptions` (topics=(("orders", 2),), records=..., ...).
    """
    opts = GenerateOptions(**options)
    opts.validate()
    os.makedirs(out_dir, exist_ok=True)
    pool = make_value_pool(opts)
    producers = make_producers(opts)
    partitions: dict[tuple[str, int], PartitionManifest] = {}
    written = 0
    for topic, count in opts.topics:
        topic_id = _topic_id(opts.seed, topic)
        for partition in range(count):
            plan = plan_partition(opts, topic, partition, producers, len(pool))
            manifest = PartitionManifest(topic, partition, plan, pool, opts.key_size, opts.headers)
            part_dir = os.path.join(out_dir, partition_dir_name(topic, partition))
            manifest.segments = _write_partition(part_dir, plan, pool, opts)
            _write_partition_files(part_dir, plan, topic_id)
            partitions[(topic, partition)] = manifest
            written += sum(s.size for s in manifest.segments)
    checkpoint = _cleaner_checkpoint(opts, partitions)
    _write_log_dir_files(out_dir, opts, partitions, checkpoint)
    return Manifest(out_dir, opts, partitions, checkpoint, written)


# --- one partition -------------------------------------------------------------------------------


class _SegmentWriter:
    """Appends batches like `UnifiedLog.append`: roll before an append that would overflow
    `segment.bytes` (never for the first append of a segment), then keep the per-batch columns the
    index rule needs; closing a segment writes its trimmed indexes (+ .txnindex if it has aborts)."""

    def __init__(self, part_dir: str, opts: GenerateOptions) -> None:
        self.dir = part_dir
        self.opts = opts
        self.segments: list[SegmentInfo] = []
        self.file = None
        os.makedirs(part_dir, exist_ok=True)
        self._open(0)

    def _open(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.size = 0
        self.next_offset = base_offset
        self.columns: list[list[int]] = [[], [], [], []]  # positions, sizes, last offsets, max timestamps
        self.aborted: list[AbortedTxn] = []
        path = os.path.join(self.dir, segment_file_name(base_offset, LOG_SUFFIX))
        self.file = open(path, "wb", buffering=WRITE_BUFFER)  # noqa: SIM115 - closed in _close

    def append(self, data, first_offset: int, entries: list[tuple[int, int, int, int]]) -> None:
        """`entries`: (position in data, size, last offset, max timestamp) of each batch in `data`."""
        if self.size > 0 and self.size + len(data) > self.opts.segment_bytes:
            self._close()
            self._open(first_offset)
        for pos, size, last_offset, max_ts in entries:
            for column, v in zip(self.columns, (self.size + pos, size, last_offset, max_ts), strict=True):
                column.append(v)
            self.next_offset = last_offset + 1
        self.file.write(data)
        self.size += len(data)

    def add_aborted(self, txn: AbortedTxn) -> None:
        self.aborted.append(txn)  # lands in the segment holding the ABORT marker (spec 2.2)

    def _close(self) -> None:
        self.file.close()
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


def _write_partition(part_dir: str, plan: PartitionPlan, pool: np.ndarray, opts: GenerateOptions) -> list[SegmentInfo]:
    writer = _SegmentWriter(part_dir, opts)
    aborted_by_marker = {last: AbortedTxn(*a) for a in plan.aborted for last in [a[2]]}
    for b, data, entries in _iter_batch_bytes(plan, pool, opts):
        first = int(plan.b_first[b])
        writer.append(data, first, entries)
        if first in aborted_by_marker and plan.b_control[b]:
            writer.add_aborted(aborted_by_marker[first])
    return writer.finish()


def _iter_batch_bytes(plan: PartitionPlan, pool: np.ndarray, opts: GenerateOptions):
    """(batch row, bytes, index entries) in log order; plain v2 batches come from the numba path."""
    for start in range(0, len(plan.b_first), CHUNK_BATCHES):
        rows = np.arange(start, min(start + CHUNK_BATCHES, len(plan.b_first)))
        fast = rows[(plan.b_codec[rows] == 0) & ~plan.b_control[rows]] if opts.magic == 2 else rows[:0]
        encoded = _encode_fast(plan, pool, opts, fast)
        for b in rows:
            if b in encoded:
                data, max_ts = encoded[b]
                last = int(plan.b_first[b] + plan.b_count[b] - 1)
                yield int(b), data, [(0, len(data), last, max_ts)]
            else:
                data = _build_slow(plan, pool, opts, int(b))
                yield int(b), data, _entries_of(data)


def _encode_fast(plan: PartitionPlan, pool: np.ndarray, opts: GenerateOptions, rows: np.ndarray) -> dict:
    # Imported here: the numba kernels compile on first use; the CLI's --help should not wait.
    from compaction.generator_encode import BATCH_OVERHEAD, encode_batches, records_upper_bound

    if len(rows) == 0:
        return {}
    p = plan
    lo, hi = int(p.b_first[rows[0]]), int(p.b_first[rows[-1]] + p.b_count[rows[-1]])
    capacity = records_upper_bound(p.value_len[lo:hi], opts.key_size, opts.headers) + BATCH_OVERHEAD * len(rows)
    out = np.empty(capacity, dtype=np.uint8)
    attributes = np.where(p.b_transactional[rows], 0x10, 0).astype(np.int64)
    starts = np.empty(len(rows), dtype=np.int64)
    end = encode_batches(out, p.b_first[rows], p.b_count[rows], p.b_first[rows], attributes,
                         p.b_leader_epoch[rows], p.b_pid[rows], p.b_epoch[rows], p.b_seq[rows],
                         p.timestamp, p.key_id, opts.key_size, p.value_pos, p.value_len, pool, opts.headers,
                         starts)
    view = memoryview(out)
    bounds = np.append(starts, end)
    result = {}
    for i, b in enumerate(rows):
        s, e = int(bounds[i]), int(bounds[i + 1])
        CRC_FIELD.pack_into(view, s + CRC_OFFSET, crc32c(view[s + CRC_COVERED_FROM:e]))
        first, count = int(p.b_first[b]), int(p.b_count[b])
        result[b] = (view[s:e], int(p.timestamp[first:first + count].max()))
    return result


def _records_of(plan: PartitionPlan, pool: np.ndarray, opts: GenerateOptions, b: int) -> list[Record]:
    first, count = int(plan.b_first[b]), int(plan.b_count[b])
    manifest = PartitionManifest(plan.topic, plan.partition, plan, pool, opts.key_size, opts.headers)
    return [Record(o, int(plan.timestamp[o]), manifest.key(o), manifest.value(o), manifest.headers(o))
            for o in range(first, first + count)]


def _build_slow(plan: PartitionPlan, pool: np.ndarray, opts: GenerateOptions, b: int) -> bytes:
    """Compressed batches, markers and legacy message sets, through the format modules."""
    records = _records_of(plan, pool, opts, b)
    codec = int(plan.b_codec[b])
    if opts.magic < 2:
        return build_legacy_message_set(records, opts.magic, codec)
    return build_batch(
        records, codec=codec, producer_id=int(plan.b_pid[b]), producer_epoch=int(plan.b_epoch[b]),
        base_sequence=int(plan.b_seq[b]), is_transactional=bool(plan.b_transactional[b]),
        is_control=bool(plan.b_control[b]), partition_leader_epoch=int(plan.b_leader_epoch[b]))


def _entries_of(data: bytes) -> list[tuple[int, int, int, int]]:
    # A legacy uncompressed message set is one append of several entries, each a "batch" for the
    # index rule; reading them back through segment.py keeps one definition of a batch.
    return [(b.position, b.header.size, b.last_offset if b.magic < 2 else b.header.last_offset,
             b.header.max_timestamp) for b in iter_batches(data, verify_crc=False)]


# --- files beside the segments -------------------------------------------------------------------


def _write_file(path: str, data) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _topic_id(seed: int, topic: str) -> str:
    raw = partition_rng(seed, topic, -1 & 0xFFFF, 7).bytes(16)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")  # Kafka's Uuid.toString


def _write_partition_files(part_dir: str, plan: PartitionPlan, topic_id: str) -> None:
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


def write_summary(manifest: Manifest, path: str) -> None:
    with open(path, "w") as f:
        json.dump(manifest.summary(), f, indent=1)
        f.write("\n")


def options_from_dict(values: dict) -> GenerateOptions:
    known = {f.name for f in fields(GenerateOptions)}
    return GenerateOptions(**{k: v for k, v in values.items() if k in known})
