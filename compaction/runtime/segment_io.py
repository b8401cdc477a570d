"""Reading source segments into memory (through the page cache or with direct I/O, into reused
buffers, or as a memory map), and writing cleaned segments through reused staging buffers (direct
I/O where the disk allows).

A segment is read whole (its batches are walked, CRC-checked and partly copied to the output),
twice in a run: by the scan, then by the rewrite. Three ways on a local disk, chosen per job by
`--read-mode`:

- `buffered` (default): `pread` through the page cache into a page-aligned buffer taken from a
  per-process `BufferPool`, with a sequential hint so that the kernel reads far ahead. The scan's
  read leaves the segment in the page cache and the rewrite's read, the last one
  (`read_segment_bytes(..., last=True)`), finds it there and drops it (`POSIX_FADV_DONTNEED`):
  the disk is read once. A task keeps at most `cache_max_bytes` of segments in the cache this
  way (`configure`; the newest segments, which the scan reads first); the others are read with
  O_DIRECT, twice, as under `direct`. So what a task leaves in the cache is bounded by a setting
  whatever the partition's size, and a job over terabytes of archived segments does not evict
  the host's cache. Where memory is short the kernel evicts them first and the rewrite reads them
  from the disk again: slower, never wrong. Why both: on the 2-vCPU VM of bench/, reading the
  disk twice held the ranges stage's two tasks back more than the CPU the cache costs them; but
  filling the cache costs CPU (the first touch of each page), far more once a run caches more
  than the memory the VM has touched before (BENCHMARKS.md: 8 GiB all through the cache).
- `direct` for segments of `DIRECT_MIN_BYTES` or more: `O_DIRECT` reads into a pooled buffer, the
  page cache left alone (nothing allocated in it, nothing evicted), at the price of reading each
  segment from the disk twice. Filesystems without O_DIRECT (tmpfs, some FUSE) fall back to
  `mmap`.
- `mmap`: `MAP_SHARED | MAP_POPULATE`, read through the page cache without a copy (best when
  the segments are already cached, e.g. just written by a broker).

All give a read-only uint8 array (the same numba type, so each kernel is compiled once).
Linux kernels flush dirty page-cache pages of the range before an O_DIRECT read, so a file
written through the page cache just before is read correctly. Object stores are read whole with
one request (`Storage.read_bytes`).

Writes (`SegmentWriter`, `--write-mode`): batches are copied into a page-aligned staging buffer of
`WRITE_BUFFER` bytes from the same pool; each full buffer is queued for a background thread
(one large request each, overlapping the caller's work) while the caller fills another, up to
`WRITE_AHEAD` queued. With
`direct` (default) the file is opened with `O_DIRECT`: no page-cache pages are allocated per run
(a fresh worker's writev into the page cache costs it the first touch of every page, far more than
a warm process pays). The last, partial buffer is written padded to the block size and the
file truncated to its length. `close` fsyncs the file and its directory either way (at the end of
the open `durability.deferred()` batch, if any); O_DIRECT is not durability. `buffered` writes the
same buffers through the page cache.
"""

from __future__ import annotations

import errno
import mmap
import os
import posixpath
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from compaction.kernels.buffers import ALIGN, POOL
from compaction.runtime import durability, task_progress, throttle
from compaction.runtime.storage import Storage, refuse_longer, refuse_special
from compaction.settings import CACHE_MAX_BYTES, DIRECT_MIN_BYTES, ReadMode, WriteMode

WRITE_BUFFER = 8 << 20  # staging buffer: bytes per write request
# Full staging buffers a writer may have queued for its thread. The rewrite makes its output in
# bursts (a slice of a segment re-encoded in one kernel call, then all of its batches written at
# once, steps/emit.py): with a single buffer in flight the caller waits through each burst and
# the disk idles through each rebuild.
WRITE_AHEAD = 6
READ_CHUNK = 16 << 20  # bytes per O_DIRECT read: large sequential requests, bounded
# Bytes per read through the page cache: moderate, so that the kernel's own read-ahead (which
# starts the next window when the reader reaches a marked page) keeps the disk busy while the
# reader copies; a read of many MB is issued and waited for whole. With two readers of cold
# 64 MiB segments, 1 MiB reads keep up with 16 MiB ones at less CPU and well ahead of 128 KiB
# ones (bench/read_speed.py, BENCHMARKS.md).
BUFFERED_CHUNK = 1 << 20
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux only
_O_DIRECT = getattr(os, "O_DIRECT", 0)
_FADVISE = getattr(os, "posix_fadvise", None)  # not on macOS: reads work the same, the cache unadvised


direct_min_bytes = DIRECT_MIN_BYTES  # of this process: the round's `WorkerSettings.direct_min_bytes`
cache_max_bytes = CACHE_MAX_BYTES  # of this process: the round's `WorkerSettings.cache_max_bytes`
_cached: dict[str, int] = {}  # the files this task's reads left in the page cache, and their sizes


def configure(min_bytes: int, cache_bytes: int = CACHE_MAX_BYTES) -> None:
    """For the task starting in this process (`prepare_worker`): read local segments of
    `min_bytes` or more with O_DIRECT; under `buffered`, keep at most `cache_bytes` of them in
    the page cache between their reads. What an earlier task left cached is forgotten."""
    global direct_min_bytes, cache_max_bytes
    direct_min_bytes, cache_max_bytes = min_bytes, cache_bytes
    _cached.clear()


def read_segment_bytes(
    storage: Storage, path: str, mode: ReadMode = "buffered", last: bool = False
) -> np.ndarray:
    """The whole file as a read-only uint8 array (see the module docstring for `mode`). `last`:
    no later read of this run needs the file, so `buffered` lets the page cache drop it."""
    if not storage.is_local:
        data = storage.read_bytes(path)
        throttle.acquire(len(data))  # --io-max-bytes-per-second (throttle.py): told after the one request
        task_progress.count(read=len(data))
        return np.frombuffer(data, dtype=np.uint8)
    st = os.stat(path)
    refuse_special(path, st.st_mode)
    size = st.st_size
    refuse_longer(path, size)
    if mode == "buffered":
        if last and _cached.pop(path, None) is not None:
            return _read_buffered(path, size, last)  # where the scan's read left it
        if not last and (path in _cached or sum(_cached.values()) + size <= cache_max_bytes):
            _cached[path] = size
            return _read_buffered(path, size, last)
        mode = "direct"  # beyond the task's share of the cache: read from the disk each time
    if mode == "direct" and _O_DIRECT and size >= direct_min_bytes:
        data = _read_direct(path, size)
        if data is not None:
            return data
    throttle.acquire(size)  # MAP_POPULATE reads it all now
    task_progress.count(read=size)
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
        return _read_into_buffer(fd, size, ALIGN)
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # the filesystem refuses O_DIRECT requests after all: map it
            return None
        raise
    finally:
        os.close(fd)


def _read_buffered(path: str, size: int, last: bool) -> np.ndarray:
    """`size` bytes read through the page cache, which reads ahead of the requests; dropped from
    it after the `last` read (the bytes are in the buffer by then)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _FADVISE is not None:
            _FADVISE(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        data = _read_into_buffer(fd, size, 1)
        if last and _FADVISE is not None:
            _FADVISE(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return data
    finally:
        os.close(fd)


def _read_into_buffer(fd: int, size: int, block: int) -> np.ndarray:
    """`size` bytes of `fd` into a pooled buffer, in requests of READ_CHUNK, or BUFFERED_CHUNK
    through the page cache (`block` 1; O_DIRECT requests are whole blocks, the last one may pass
    the end of the file)."""
    buf = POOL.take(-(-size // ALIGN) * ALIGN)
    view, got = memoryview(buf), 0
    chunk = BUFFERED_CHUNK if block == 1 else READ_CHUNK
    while got < size:
        # from offset 0 on
        n = os.readv(fd, [view[got : got + min(-(-(size - got) // block) * block, chunk)]])
        if n <= 0:
            break
        throttle.acquire(n)  # --io-max-bytes-per-second (throttle.py), request by request
        task_progress.count(read=n)
        got += n
    out = buf[:got]
    out.flags.writeable = False
    return out


def prefetch(paths) -> None:
    """Have the kernel start reading small local files into the page cache
    (`POSIX_FADV_WILLNEED`), so that a read of them later does not wait for the disk. A missing
    file is skipped; without fadvise, nothing is done."""
    if _FADVISE is None:
        return
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            _FADVISE(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


class ReadAhead:
    """Reads the next file on one background thread while the caller works on the current one
    (reads release the GIL; so do the numba kernels). `get(i)` returns `read(paths[i])` (a path,
    or whatever names a file to `read`) in order, starting the read of i + 1 first."""

    def __init__(self, read, paths: list[str]) -> None:
        self._read, self._paths = read, paths
        self._pool = (
            ThreadPoolExecutor(1, thread_name_prefix="segment-read-ahead") if len(paths) > 1 else None
        )
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


class SegmentWriter:
    """A new local file written sequentially through pooled staging buffers, up to WRITE_AHEAD of
    them queued for its writer thread (see the module docstring); `close` makes it durable (fsync
    of the file and of its directory). Chunks are copied at `write`, so the caller's buffers are
    free again as soon as it returns."""

    def __init__(self, path: str, mode: WriteMode = "direct", buffer_bytes: int = WRITE_BUFFER) -> None:
        self.path = path
        self.direct = False
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        fd = -1
        if mode == "direct" and _O_DIRECT:
            try:
                fd = os.open(path, flags | _O_DIRECT, 0o644)
                self.direct = True
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # tmpfs, some FUSE: no O_DIRECT
                    raise
        if fd < 0:
            fd = os.open(path, flags, 0o644)
        self._file = os.fdopen(fd, "wb", buffering=0)  # closed in close(), or by GC on error
        self._size = -(-buffer_bytes // ALIGN) * ALIGN
        self._buf = POOL.take(self._size)
        self._free: list[np.ndarray] = []  # staging buffers written and not yet refilled
        self._fill = 0
        self._offset = 0  # file offset of the staging buffer's first byte
        self._thread: ThreadPoolExecutor | None = None
        self._inflight: deque[Future] = deque()  # oldest first; each gives its buffer back

    @property
    def size(self) -> int:
        """Bytes written so far (staged or on disk)."""
        return self._offset + self._fill

    def write(self, chunk) -> None:
        view = memoryview(chunk).cast("B") if not isinstance(chunk, bytes) else chunk
        n, at = len(view), 0
        while at < n:
            take = min(n - at, self._size - self._fill)
            self._buf[self._fill : self._fill + take] = np.frombuffer(view, np.uint8, take, at)
            self._fill += take
            at += take
            if self._fill == self._size:
                self._submit()

    def _submit(self) -> None:
        """Queue the full staging buffer for the writer thread and continue in a free one: a
        written one, else a new one while fewer than WRITE_AHEAD are queued."""
        while self._inflight and (self._inflight[0].done() or len(self._inflight) >= WRITE_AHEAD):
            self._reclaim()
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="segment-write")
        self._inflight.append(self._thread.submit(self._write_at, self._buf, self._fill, self._offset))
        self._buf = self._free.pop() if self._free else POOL.take(self._size)
        self._offset += self._fill
        self._fill = 0

    def _reclaim(self) -> None:
        """Wait for the oldest queued write; its buffer is free again."""
        self._free.append(self._inflight.popleft().result())  # raises the writer thread's error here

    def _wait(self) -> None:
        while self._inflight:
            self._reclaim()

    def _write_at(self, buf: np.ndarray, n: int, offset: int) -> np.ndarray:
        throttle.acquire(n)
        task_progress.count(written=n)
        fd, view, done = self._file.fileno(), memoryview(buf), 0
        while done < n:
            try:
                done += os.pwrite(fd, view[done:n], offset + done)
            except OSError as exc:  # O_DIRECT accepted at open, refused at write: go through the cache
                if exc.errno != errno.EINVAL or not self.direct:
                    raise
                self._buffered()
        return buf

    def _buffered(self) -> None:
        import fcntl

        fd = self._file.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_O_DIRECT)
        self.direct = False

    def close(self) -> None:
        """Write what is staged, fsync the file and its directory, release the buffers."""
        try:
            self._wait()
            n, end = self._fill, self._offset + self._fill
            if n:
                padded = -(-n // ALIGN) * ALIGN if self.direct else n
                self._buf[n:padded] = 0
                self._write_at(self._buf, padded, self._offset)
                if padded != n:
                    os.ftruncate(self._file.fileno(), end)
            synced_later = durability.later(self.path)
            if not synced_later:
                os.fsync(self._file.fileno())
        finally:
            if self._thread is not None:
                self._thread.shutdown(wait=True)
            self._file.close()
            self._buf, self._free = None, []
        if not synced_later:
            Storage.local().fsync_dir(posixpath.dirname(self.path) or ".")
