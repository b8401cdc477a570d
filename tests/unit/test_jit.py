"""kernels.jit.borrow: inside a kernel, the same memory without its reference count (writes land
in the caller's array, reads see it); outside one, and for anything but an array, the argument
itself. The kernels that use it are checked against their plain-Python twins in their own tests."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from compaction.kernels.jit import borrow


@njit
def _helper(buf, i):  # a loop and a branch: a call numba's reference-count pruning leaves counted
    total = 0
    for j in range(i + 1):
        if buf[j] > 0:
            total += buf[j]
    return total


@njit
def _kernel(buf, out, scale):
    buf, out, scale = borrow(buf), borrow(out), borrow(scale)
    for i in range(len(out)):
        out[i] = _helper(buf, i) * scale
    return out.sum()


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_a_borrowed_array_is_the_same_memory(n):
    buf = np.arange(n, dtype=np.int64) - 3
    buf.flags.writeable = False  # read-only arrays too
    out = np.zeros(n, dtype=np.int64)
    got = _kernel(buf, out, 2)
    want = np.array([2 * sum(int(v) for v in buf[: i + 1] if v > 0) for i in range(n)], dtype=np.int64)
    assert out.tolist() == want.tolist() and got == want.sum()


def test_outside_a_kernel_borrow_is_the_identity():
    a = np.zeros(3)
    assert borrow(a) is a and borrow(5) == 5
