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

The segments of one partition are written by `generator_segments`.
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

from compaction.cli.options import byte_size
from compaction.format import checkpoint as ckpt
from compaction.format.naming import PARTITION_METADATA, partition_dir_name
from compaction.tools.generator_manifest import Manifest, ManifestRecord, PartitionManifest, SegmentInfo
from compaction.tools.generator_plan import (
    TXN_ABORTED,
    TXN_COMMITTED,
    TXN_NONE,
    GeneratedPartition,
    GenerateOptions,
    make_producers,
    make_value_pool,
    partition_rng,
    plan_partition,
)
from compaction.tools.generator_segments import Scratch, write_file, write_partition

__all__ = [
    "TXN_ABORTED",
    "TXN_COMMITTED",
    "TXN_NONE",
    "GenerateOptions",
    "Manifest",
    "ManifestRecord",
    "PartitionManifest",
    "SegmentInfo",
    "generate_log_dir",
]


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
    scratch = Scratch()
    for topic, count in opts.topics:
        topic_id = _topic_id(opts.seed, topic)
        for partition in range(count):
            plan = plan_partition(opts, topic, partition, producers, len(pool))
            manifest = PartitionManifest(topic, partition, plan, pool, opts.key_size, opts.headers)
            part_dir = os.path.join(out_dir, partition_dir_name(topic, partition))
            manifest.segments = write_partition(part_dir, plan, pool, opts, scratch)
            _write_partition_files(part_dir, plan, topic_id)
            partitions[(topic, partition)] = manifest
            written += sum(s.size for s in manifest.segments)
            if not keep_records:
                manifest.drop_records()
    checkpoint = _cleaner_checkpoint(opts, partitions)
    _write_log_dir_files(out_dir, opts, partitions, checkpoint)
    return Manifest(out_dir, opts, partitions, checkpoint, written)


# --- files beside the segments -------------------------------------------------------------------


def _topic_id(seed: int, topic: str) -> str:
    raw = partition_rng(seed, topic, -1 & 0xFFFF, 7).bytes(16)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")  # Kafka's Uuid.toString


def _write_partition_files(part_dir: str, plan: GeneratedPartition, topic_id: str) -> None:
    write_file(
        os.path.join(part_dir, ckpt.LEADER_EPOCH_CHECKPOINT),
        ckpt.format_leader_epoch_checkpoint(plan.leader_epoch_entries()).encode(),
    )
    # PartitionMetadataFile writes no trailing newline (as in the real-kafka fixtures).
    write_file(os.path.join(part_dir, PARTITION_METADATA), f"version: 0\ntopic_id: {topic_id}".encode())


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
        write_file(os.path.join(out_dir, name), ckpt.format_offset_checkpoint(entries).encode())
    write_file(os.path.join(out_dir, "meta.properties"), _meta_properties(opts).encode())


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

    a(
        "--segment-bytes",
        type=byte_size,
        default=d.segment_bytes,
        help="roll size, like segment.bytes (1 MiB)",
    )
    a("--index-interval-bytes", type=byte_size, default=d.index_interval_bytes, help="index.interval.bytes")
    a("--tombstone-ratio", type=float, default=d.tombstone_ratio, help="fraction of null values")
    a("--headers", type=int, default=d.headers, help="headers per record (default 0)")
    a(
        "--transactions",
        type=float,
        default=d.transactions,
        help="fraction of batches from transactional producers",
    )
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
    a(
        "--checkpoint",
        type=_checkpoint,
        default=(),
        help="cleaner-offset-checkpoint entries, comma-separated: topic:partition=N, topic=N or *=N",
    )
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
    print(
        f"generated {len(manifest.partitions)} partitions, {records} records, {size} bytes "
        f"in {seconds:.2f} s ({size / max(seconds, 1e-9) / 1e6:.1f} MB/s) under {args.out_dir}"
    )
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
                f"expected topic:partition=offset, topic=offset or *=offset, got {item!r}"
            )
        out.append((topic, int(partition) if colon else None, int(offset)))
    return tuple(out)
