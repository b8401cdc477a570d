"""A task's new files made durable together at the end of its rewrite, not one by one.

A task writes its cleaned segments as `*.cleaned` files that nothing reads until the driver
commits them, after the task has returned. Made durable file by file as each is closed (fsync of
the file, then of its directory), a group of three files costs three journal commits in a row,
and a partition cut into many small groups pays them serially; issued together at the end, the
filesystem joins them into a few (`bench/fsync_batch.py`, BENCHMARKS.md). Inside `deferred()`,
`SegmentWriter.close` and `Storage.write_durable` leave their syncs to its end, where every file
and then each directory is fsynced once, the files from a few threads so that the filesystem
joins them into few journal commits. The guarantee is unchanged: each file is durable before the
rewrite returns, hence before any commit reads it. Outside `deferred()` (the driver's commit,
the intent file, checkpoints) a durable write is synced at once, as before.
"""

from __future__ import annotations

import os
import posixpath
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

SYNC_THREADS = 4  # fsyncs in flight at the end of a batch: enough for the journal to join them

_lock = threading.Lock()
_pending: list[str] | None = None  # files whose fsync waits for the end of the open batch
_depth = 0


def later(path: str) -> bool:
    """Take `path` into the open batch: True when its fsync (and its directory's) is postponed to
    the batch's end, False when no batch is open and the caller syncs now."""
    with _lock:
        if _pending is None:
            return False
        _pending.append(path)
        return True


@contextmanager
def deferred() -> Iterator[None]:
    """Postpone the local durable writes made inside to its end, then sync them all. Nested
    batches join the outermost one. On an error nothing is synced: the files are not committed."""
    global _pending, _depth
    with _lock:
        if _depth == 0:
            _pending = []
        _depth += 1
    ok = False
    try:
        yield
        ok = True
    finally:
        with _lock:
            _depth -= 1
            paths = _pending if _depth == 0 else None
            if _depth == 0:
                _pending = None
        if ok and paths:
            sync(paths)


def sync(paths: list[str]) -> None:
    """fsync every file, then every directory holding them once."""
    files = list(dict.fromkeys(paths))
    with ThreadPoolExecutor(min(SYNC_THREADS, len(files))) as pool:
        list(pool.map(fsync_path, files))
    for directory in dict.fromkeys(posixpath.dirname(p) or "." for p in files):
        fsync_path(directory, os.O_RDONLY | os.O_DIRECTORY)


def fsync_path(path: str, flags: int = os.O_RDONLY) -> None:
    """fsync a file, or with `os.O_DIRECTORY` in `flags` a directory, by its path."""
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
