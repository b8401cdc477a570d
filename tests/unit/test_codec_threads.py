"""The codec threads (compaction/kernels/codec_threads.py): how work is cut into runs, that the
results come back in batch order with the first error raised, that a forked child makes its own
threads, and that batches sealed on the threads are the bytes sealed on the task's thread."""

from __future__ import annotations

import multiprocessing
import os
import random
import threading

import numpy as np
import pytest

from compaction.format import batch as fb
from compaction.format import compression
from compaction.format.layout import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD, RECORD_BATCH_OVERHEAD
from compaction.kernels import codec_threads
from compaction.kernels.rebuild_headers import header_for, headers_for, seal, seal_all

MiB = 1 << 20


@pytest.fixture
def threads():
    """Set the codec threads for one test; the module's default afterwards."""
    yield codec_threads.configure
    codec_threads.configure(codec_threads.CODEC_THREADS)


@pytest.mark.parametrize(
    "weights, n_threads, min_bytes, expected",
    [
        ([], 2, MiB, []),
        ([10], 2, MiB, [(0, 1)]),  # less than one run's work: one run
        ([MiB - 1, 1], 2, MiB, [(0, 2)]),  # exactly min_bytes closes a run
        ([MiB, MiB, MiB], 2, MiB, [(0, 1), (1, 2), (2, 3)]),
        ([MiB // 2] * 5, 2, MiB, [(0, 2), (2, 4), (4, 5)]),  # the last run may be short
        ([16 * MiB] + [1] * 3, 2, MiB, [(0, 1), (1, 4)]),
        ([MiB] * 16, 2, MiB, [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (10, 12), (12, 14), (14, 16)]),
        ([MiB] * 16, 4, MiB, [(j, j + 1) for j in range(16)]),  # a quarter of a thread's share
        ([0, 0, 0], 2, MiB, [(0, 3)]),
    ],
)
def test_runs(weights, n_threads, min_bytes, expected):
    got = codec_threads.runs(weights, n_threads, min_bytes)
    assert [(r.start, r.stop) for r in got] == expected
    assert [j for r in got for j in r] == list(range(len(weights)))


def test_results_come_back_in_batch_order_from_the_codec_threads(threads):
    threads(2)
    names = {}

    def fn(j):
        names[j] = threading.current_thread().name
        return j * j

    n = 64
    assert codec_threads.map_batches(fn, [MiB] * n) == [j * j for j in range(n)]
    assert all(name.startswith("codec") for name in names.values())


@pytest.mark.parametrize("n_threads, weights", [(1, [MiB] * 8), (2, [MiB // 4] * 3)])
def test_one_thread_or_little_work_runs_on_the_callers_thread(threads, n_threads, weights):
    threads(n_threads)
    seen = set()
    out = codec_threads.map_batches(lambda j: seen.add(threading.current_thread().name) or j, weights)
    assert out == list(range(len(weights)))
    assert seen == {threading.current_thread().name}


def test_the_first_error_in_batch_order_is_raised(threads):
    threads(2)

    def fn(j):
        if j in (5, 40):
            raise ValueError(f"batch {j}")
        return j

    with pytest.raises(ValueError, match="batch 5"):
        codec_threads.map_batches(fn, [MiB] * 64)


def _in_child(queue):
    queue.put(codec_threads.map_batches(lambda j: (threading.current_thread().name, os.getpid()), [MiB] * 8))


def test_a_forked_child_makes_its_own_threads(threads):
    """A pool made before a fork has no threads in the child (Spark's Python daemon forks its
    workers): the child's first call makes its own instead of waiting forever."""
    threads(2)
    codec_threads.map_batches(lambda j: j, [MiB] * 8)  # the parent's pool exists
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_in_child, args=(queue,))
    child.start()
    got = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0
    assert {pid for _, pid in got} == {child.pid}
    assert all(name.startswith("codec") for name, _ in got)


def _text(rng: random.Random, n: int) -> bytes:
    words = [b"alpha", b"beta", b"gamma", b'{"id":', b"42,", b'"tags":', b"[]}", b"delta"]
    return b" ".join(rng.choice(words) for _ in range(n // 5))[:n]


@pytest.mark.parametrize("codec", [CODEC_LZ4, CODEC_ZSTD, CODEC_GZIP, CODEC_SNAPPY])
def test_batches_sealed_on_the_threads_are_the_bytes_of_seal(threads, codec):
    """Many batches, several runs: each equals `seal` of its header and records, and reads back
    as a batch whose CRC holds."""
    rng = random.Random(codec)
    records = [_text(rng, rng.randrange(200 << 10, 600 << 10)) for _ in range(12)]
    payload = np.frombuffer(b"".join(records), np.uint8)
    ends = np.cumsum([len(r) for r in records])
    starts = np.concatenate(([0], ends[:-1]))
    n = len(records)
    fields = dict(
        base_offset=np.arange(n, dtype=np.int64) * 100,
        partition_leader_epoch=np.full(n, 3),
        attributes=np.full(n, codec),
        last_offset_delta=np.full(n, 99),
        base_timestamp=np.arange(n, dtype=np.int64) + 1_700_000_000_000,
        max_timestamp=np.arange(n, dtype=np.int64) + 1_700_000_000_500,
        producer_id=np.full(n, -1),
        producer_epoch=np.full(n, -1),
        base_sequence=np.full(n, -1),
        records_count=np.full(n, 7),
        horizon=np.full(n, -1),
    )
    threads(1)
    one = seal_all(headers_for(**fields), payload, starts, ends, np.full(n, codec))
    threads(2)
    assert len(codec_threads.runs(ends - starts, 2)) > 1  # the case under test: several runs
    two = seal_all(headers_for(**fields), payload, starts, ends, np.full(n, codec))
    for j in range(n):
        header = header_for(**{k: int(v[j]) for k, v in fields.items()})
        expected = b"".join(bytes(p) for p in seal(header, records[j], codec))
        assert b"".join(bytes(p) for p in two[j]) == b"".join(bytes(p) for p in one[j]) == expected
        batch = fb.RecordBatch(expected)
        assert batch.crc_valid() and batch.header.codec == codec
        assert compression.decompress(codec, batch.raw[RECORD_BATCH_OVERHEAD:]) == records[j]
