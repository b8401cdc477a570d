"""Large byte buffers reused within a process: the segments a task reads and the records it
rebuilds. A fresh multi-MiB numpy array is fresh pages, each costing a page fault and zeroing on
first touch (and on the VM of bench/, a trip to the hypervisor); a Python worker compacts
segment after segment, so it takes its buffers from here instead and they stay mapped."""

from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

ALIGN = 4096  # buffer addresses are page-aligned (O_DIRECT needs >= the logical block size)
POOL_MAX_BYTES = 2 << 30  # buffers a worker process keeps for reuse (a 1 GiB ScanCache + a read ahead + rebuilds)
POOLED_MIN_BYTES = 1 << 20  # smaller arrays come from malloc as usual
_CAPACITY_STEP = 8 << 20  # buffer sizes are rounded up to this, so neighbouring sizes share buffers


class BufferPool:
    """Page-aligned uint8 buffers reused across reads. A buffer is free again once nothing but
    the pool refers to it: every view of it (numpy slices, memoryviews, Arrow buffers) holds a
    reference to its base array, so the reference count says when the last user is gone."""

    def __init__(self, max_bytes: int = POOL_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: list[tuple[np.ndarray, np.ndarray]] = []  # (base allocation, aligned view)
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        return sum(len(e[1]) for e in self._entries)

    def trim(self) -> None:
        """Forget the buffers no one uses (they are freed with their last reference)."""
        with self._lock:
            self._entries = [e for e in self._entries if sys.getrefcount(e[0]) > 3]

    def take(self, n: int) -> np.ndarray:
        """A writable, page-aligned buffer of at least n bytes that no one else uses."""
        with self._lock:
            best = None  # the smallest free buffer that fits: a big one stays free for a big request
            for entry in self._entries:
                # entry[0] is referred to by the entry tuple, by entry[1] (its view) and by the
                # call's argument: 3 means no outside user. What we hand out is a new slice, whose
                # base is entry[0], so it counts from here on.
                if len(entry[1]) >= n and (best is None or len(entry[1]) < len(best[1])):
                    if sys.getrefcount(entry[0]) <= 3:
                        best = entry
            if best is not None:
                return best[1][:n]
            cap = -(-max(n, 1) // _CAPACITY_STEP) * _CAPACITY_STEP
            base = np.empty(cap + ALIGN, dtype=np.uint8)
            skip = -base.ctypes.data % ALIGN
            view = base[skip : skip + cap]
            if self.held + cap <= self.max_bytes:
                self._entries.append((base, view))
            return view[:n]


POOL = BufferPool()


# glibc's mallopt parameters (malloc.h) and the values set by `keep_freed_heap`.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_TRIM_BYTES = 1 << 30  # free heap kept by the process before it is given back to the kernel
HEAP_MMAP_BYTES = 32 << 20  # allocations below this come from the heap, not from their own mmap
_heap_kept = False


def keep_freed_heap() -> bool:
    """Have glibc's malloc keep freed memory for reuse (once per process; False where the C
    library has no mallopt). A task allocates and frees the same sizes segment after segment:
    decompressed batches, record columns, key hashes. By default glibc maps each allocation of
    more than ~128 KiB (a threshold it raises as such blocks are freed) separately and unmaps it
    when freed, and trims the heap's free top, so each segment faulted in fresh pages again (on
    the mixed-codec bench, ~40% fewer page faults in a worker's first partition and ~90% fewer in
    the next; BENCHMARKS.md, session 5)."""
    global _heap_kept
    if _heap_kept:
        return True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    _heap_kept = bool(mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_BYTES))
    return _heap_kept
