"""Reading source segments into memory: direct I/O into reused buffers, or a memory map.

A segment is read whole (its batches are walked, CRC-checked and partly copied to the output).
Two ways on a local disk, chosen per job by `--read-mode`:

- `direct` (default) for segments of `DIRECT_MIN_BYTES` or more: `O_DIRECT` reads into a
  page-aligned buffer taken from a per-process `BufferPool`. The data does not pass through the
  page cache: no page-cache pages are allocated and first touched per run (on the 2-vCPU VM of
  bench/ that first touch cost as much CPU as the compaction itself; BENCHMARKS.md), the read is
  one large sequential request, and a job over terabytes of archived segments does not evict
  everything else from the page cache. The buffers are reused by the next segment and the next
  task of the same Python worker. Filesystems without O_DIRECT (tmpfs, some FUSE) fall back to
  `mmap`.
- `mmap`: `MAP_SHARED | MAP_POPULATE`, read through the page cache (best when the segments are
  already cached, e.g. just written by a broker).

Both give a read-only uint8 array (the same numba type, so each kernel is compiled once).
Linux kernels flush dirty page-cache pages of the range before an O_DIRECT read, so a file
written through the page cache just before is read correctly. Object stores are read whole with
one request (`Storage.read_bytes`).
"""

from __future__ import annotations

import errno
import mmap
import os
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from compaction.buffers import ALIGN, POOL
from compaction.storage import Storage

READ_MODES = ("direct", "mmap")
DIRECT_MIN_BYTES = 8 << 20  # smaller segments are mapped: one syscall, nothing to flush; env override for tests
READ_CHUNK = 16 << 20  # bytes per pread: large sequential requests, bounded
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux only
_O_DIRECT = getattr(os, "O_DIRECT", 0)


def direct_min_bytes() -> int:
    return int(os.environ.get("KAFKA_COMPACTION_DIRECT_MIN_BYTES", DIRECT_MIN_BYTES))


def read_segment_bytes(storage: Storage, path: str, mode: str = "direct") -> np.ndarray:
    """The whole file as a read-only uint8 array (see the module docstring for `mode`)."""
    if not storage.is_local:
        return np.frombuffer(storage.read_bytes(path), dtype=np.uint8)
    size = os.stat(path).st_size
    if mode == "direct" and _O_DIRECT and size >= direct_min_bytes():
        data = _read_direct(path, size)
        if data is not None:
            return data
    return _map(path, size)


def is_mapped(array: np.ndarray) -> bool:
    """Whether `array` lies in a memory map (page cache, not the process's own memory)."""
    while array is not None:
        if isinstance(array, mmap.mmap):
            return True
        array = array.obj if isinstance(array, memoryview) else getattr(array, "base", None)
    return False


def _map(path: str, size: int) -> np.ndarray:
    if size == 0:
        empty = np.empty(0, dtype=np.uint8)  # mmap refuses empty files
        empty.flags.writeable = False
        return empty
    fd = os.open(path, os.O_RDONLY)
    try:
        # MAP_POPULATE: the whole segment is read anyway; one call maps all its pages instead of
        # a page fault per 64 KiB as the scan first touches them.
        mm = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    return np.frombuffer(mm, dtype=np.uint8)


def _read_direct(path: str, size: int) -> np.ndarray | None:
    """O_DIRECT read of `size` bytes, or None where the filesystem does not support it."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_DIRECT)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return None
        raise
    try:
        buf = POOL.take(-(-size // ALIGN) * ALIGN)
        view, got = memoryview(buf), 0
        while got < size:
            want = min(-(-(size - got) // ALIGN) * ALIGN, READ_CHUNK)  # the last request may pass EOF
            try:
                n = os.preadv(fd, [view[got : got + want]], got)
            except OSError as exc:
                if exc.errno == errno.EINVAL and got == 0:
                    return None
                raise
            if n <= 0:
                break
            got += n
    finally:
        os.close(fd)
    out = buf[:got]
    out.flags.writeable = False
    return out


class ReadAhead:
    """Reads the next file on one background thread while the caller works on the current one
    (reads release the GIL; so do the numba kernels). `get(i)` returns file i of `paths` in
    order, starting the read of i + 1 first."""

    def __init__(self, read, paths: list[str]) -> None:
        self._read, self._paths = read, paths
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="segment-read-ahead") if len(paths) > 1 else None
        self._pending: dict[int, Future] = {}

    def get(self, i: int) -> np.ndarray:
        got = self._pending.pop(i, None)
        if self._pool is not None and i + 1 < len(self._paths) and i + 1 not in self._pending:
            self._pending[i + 1] = self._pool.submit(self._read, self._paths[i + 1])
        return got.result() if got is not None else self._read(self._paths[i])

    def close(self) -> None:
        for f in self._pending.values():
            f.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
