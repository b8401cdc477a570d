"""worker.keep_freed_heap: freed allocations are reused without new page faults (glibc)."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

CHILD = r"""
import resource, sys
import numpy as np
from compaction.runtime.worker import keep_freed_heap
if sys.argv[1] == "keep":
    assert keep_freed_heap() and keep_freed_heap()
faults = []
for _ in range(3):  # a segment's decompressed batches: ~36 KiB each, all freed after it
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    chunks = [bytes(36 << 10) for _ in range(512)]
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del chunks
print(faults[-1])
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallopt"), reason="no glibc mallopt")
def test_freed_memory_is_reused_without_page_faults():
    assert _faults("default") >= 1000  # the heap top was trimmed: ~4,600 pages faulted in again
    assert _faults("keep") < 50
