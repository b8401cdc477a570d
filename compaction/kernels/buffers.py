"""Large byte buffers reused within a process: the segments a task reads and the records it
rebuilds. A fresh multi-MiB numpy array is fresh pages, each costing a page fault and zeroing on
first touch (and on the VM of bench/, a trip to the hypervisor); a Python worker compacts
segment after segment, so it takes its buffers from here instead and they stay mapped."""

from __future__ import annotations

import sys
import threading

import numpy as np

ALIGN = 4096  # buffer addresses are page-aligned (O_DIRECT needs >= the logical block size)
# buffers a worker process keeps for reuse (a 1 GiB ScanCache + a read ahead + rebuilds)
POOL_MAX_BYTES = 2 << 30
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
        """Forget the buffers no one uses (they are freed with their last reference).

        Test-only: the job relies on the pool's bound; tests use this to see what it holds."""
        with self._lock:
            self._entries = [e for e in self._entries if sys.getrefcount(e[0]) > 3]

    def take(self, n: int, whole: bool = False, most: int | None = None) -> np.ndarray:
        """A writable, page-aligned buffer of n bytes that no one else uses; `whole`: all of the
        buffer found (at least n bytes), for a caller that fills what room it gets. `most`: no
        free buffer bigger than that is handed out (a new one is made instead), for a caller
        that holds the buffer for long and is charged for all of it."""
        cap = -(-max(n, 1) // _CAPACITY_STEP) * _CAPACITY_STEP
        most = None if most is None else max(most, cap)  # a buffer as made for n always passes
        with self._lock:
            best = None  # the smallest free buffer that fits: a big one stays free for a big request
            for entry in self._entries:
                # entry[0] is referred to by the entry tuple, by entry[1] (its view) and by the
                # call's argument: 3 means no outside user. What we hand out is a new slice, whose
                # base is entry[0], so it counts from here on.
                if most is not None and len(entry[1]) > most:
                    continue
                if len(entry[1]) >= n and (best is None or len(entry[1]) < len(best[1])):
                    if sys.getrefcount(entry[0]) <= 3:
                        best = entry
            if best is not None:
                return best[1][: len(best[1]) if whole else n]
            base = np.empty(cap + ALIGN, dtype=np.uint8)
            skip = -base.ctypes.data % ALIGN
            view = base[skip : skip + cap]
            if self.held + cap <= self.max_bytes:
                self._entries.append((base, view))
            return view[: cap if whole else n]


POOL = BufferPool()


def held_bytes(a: np.ndarray) -> int:
    """The bytes of the allocation `a` is a view of: what holding `a` keeps from reuse (a slice
    of a pool buffer holds the whole buffer)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a.nbytes
