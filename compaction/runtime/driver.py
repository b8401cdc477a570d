"""The driver process's own settings for its metadata work: the thread pool on which it lists,
plans and commits partitions (`use_threads`, `map_threads`; the round sets its size once, from
`Settings.threads`), and Python's cyclic GC paused while it builds a listing of millions of small
objects (`gc_paused`; `unfreeze_gc` at the end of a round).
"""

from __future__ import annotations

import contextlib
import gc
from concurrent.futures import ThreadPoolExecutor

from compaction.settings import default_discovery_threads

# Threads listing, planning and committing partitions on the driver: the round's
# `Settings.threads`, set when it starts (`use_threads`).
_threads = default_discovery_threads()


def use_threads(n: int) -> None:
    """The threads of `map_threads` from now on in this process (1: serial)."""
    global _threads
    _threads = max(1, n)


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic GC off for a block that allocates millions of small acyclic objects (a
    listing of 3M files: one `LocalFile` each, one `SegmentFiles`/`SegmentMeta` per segment). Each
    full collection walks every live object, so with the GC on, the collections it triggers cost
    a listing of 10,000 x 100 files several times its own time (bench/plan_scale.py). Nested use
    is fine."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            # The allocation counts grew while off: the first allocation after enable() would run
            # a full collection over every object made here (a fifth of a 10,000-partition dry
            # run). Frozen objects are left out of collections; they are freed by reference
            # counting as usual (`unfreeze_gc` returns them to the collector at the end of a run).
            gc.freeze()
            gc.enable()


def unfreeze_gc() -> None:
    gc.unfreeze()


def map_threads(fn, items: list, threads: int | None = None) -> list:
    """`[fn(x) for x in items]`, in order, on a thread pool when there is more than one item."""
    threads = _threads if threads is None else threads
    if threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix="discover") as pool:
        return list(pool.map(fn, items))
