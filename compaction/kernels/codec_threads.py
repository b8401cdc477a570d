"""The threads a task compresses its rewritten batches on (`rebuild_headers.seal_all`). zstd,
lz4, snappy, gzip and CRC-32C release the GIL while they work on a buffer, so the batches of one
slice can be compressed side by side; the task's own thread waits for them (it takes no part)
and gets the results in the batches' order.

Work is handed out in runs of consecutive batches of at least RUN_MIN_BYTES, so that a thread's
hand-over (tens of microseconds) stays small against what it does; a call with less than two
runs' work, or with one thread configured, runs on the calling thread."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from compaction.settings import CODEC_THREADS

T = TypeVar("T")

RUN_MIN_BYTES = 1 << 20  # lz4 compresses 1 MiB in ~2 ms on the bench machine, zstd in ~5

_threads = CODEC_THREADS
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0  # a pool's threads do not survive a fork: a forked child makes its own


def configure(threads: int) -> None:
    """For the task starting in this process (`prepare_worker`)."""
    global _threads
    threads = max(1, int(threads))
    if threads != _threads:
        _shutdown()
    _threads = threads


def _shutdown() -> None:
    global _pool
    if _pool is not None and _pool_pid == os.getpid():
        _pool.shutdown(wait=True)
    _pool = None


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        _pool = ThreadPoolExecutor(_threads, thread_name_prefix="codec")
        _pool_pid = os.getpid()
    return _pool


def runs(weights: Sequence[int], threads: int, min_bytes: int = RUN_MIN_BYTES) -> list[range]:
    """Consecutive index ranges covering `weights`, each of at least `min_bytes` (the last may be
    less) and at most about a quarter of a thread's share, so that threads that finish early
    take the next run."""
    total = sum(weights)
    target = max(min_bytes, total // max(1, 4 * threads))
    out, start, acc = [], 0, 0
    for j, w in enumerate(weights):
        acc += w
        if acc >= target:
            out.append(range(start, j + 1))
            start, acc = j + 1, 0
    if start < len(weights):
        out.append(range(start, len(weights)))
    return out


def map_batches(fn: Callable[[int], T], weights: Sequence[int]) -> list[T]:
    """[fn(j) for j in range(len(weights))], on the codec threads when there is enough work;
    weights[j] is batch j's bytes. An exception of `fn` is raised here, the first in batch order."""
    parts = runs(weights, _threads) if _threads > 1 else []
    if len(parts) < 2:
        return [fn(j) for j in range(len(weights))]
    done = _executor().map(lambda part: [fn(j) for j in part], parts)
    return [value for part in done for value in part]
