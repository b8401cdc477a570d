"""worker.keep_freed_heap: freed allocations are reused without new page faults (glibc), on the
main thread's heap and on another thread's."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

CHILD = r"""
import resource, sys, threading
from compaction.runtime.worker import keep_freed_heap
if sys.argv[1] == "keep":
    assert keep_freed_heap() and keep_freed_heap()
count, size = int(sys.argv[2]), int(sys.argv[3])
faults = []
def rounds():
    for _ in range(3):  # all freed after each round, as a segment's allocations are
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        chunks = [bytes(size) for _ in range(count)]
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        del chunks
if sys.argv[4] == "thread":
    t = threading.Thread(target=rounds)
    t.start()
    t.join()
else:
    rounds()
print(faults[-1])
"""

needs_mallopt = pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallopt"), reason="no glibc mallopt")


def _faults(mode: str, count: int, size: int, thread: str = "main") -> int:
    argv = [sys.executable, "-c", CHILD, mode, str(count), str(size), thread]
    return int(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)


@needs_mallopt
def test_freed_memory_is_reused_without_page_faults():
    # a segment's decompressed batches: ~36 KiB each
    assert _faults("default", 512, 36 << 10) >= 1000  # the heap top was trimmed: ~4,600 pages again
    assert _faults("keep", 512, 36 << 10) < 50


@needs_mallopt
def test_another_threads_freed_heap_is_kept():
    # 160 MB in 4 MB blocks on a thread: more than one of its arena's 64 MB heaps
    assert _faults("default", 40, 4 << 20, "thread") >= 1000  # a heap freed: ~5,000 pages again
    assert _faults("keep", 40, 4 << 20, "thread") < 50
