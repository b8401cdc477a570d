"""The one compile policy of the package's numba kernels, and `borrow`, which every kernel called
from Python applies to its array arguments.

Why `borrow`: an array that comes in from Python carries a reference count (numba's meminfo),
and each call from one kernel to another that takes the array increments and decrements it with
atomic instructions wherever numba's reference-count pruning cannot pair them up (any helper with
a loop or a branch, such as `key_hash` or `copy_bytes`). In a loop over millions of records those
atomics cost more than the work they guard. The caller (the
Python code that passed the array) holds the array for the whole call, so inside the kernel a view
without a meminfo is safe, and its counting compiles to nothing. It must not outlive the call:
never return a borrowed array or store it anywhere.
"""

from __future__ import annotations

import numba
from numba import types
from numba.extending import intrinsic, overload


def njit(fn):
    """`numba.njit(cache=True, nogil=True)`: compiled code is cached on disk (executors load it
    instead of compiling) and kernels release the GIL (read-ahead and write threads run beside
    them). Without the cache where no cache directory is writable (read-only site-packages on
    executors without NUMBA_CACHE_DIR): the import must not fail for that."""
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(cache=False, nogil=True)(fn)


def borrow(arr):
    """`arr` itself, viewed without its reference count inside a kernel (see the module docstring)."""
    return arr


@intrinsic
def _borrowed(typingctx, arr):
    def codegen(context, builder, signature, args):
        view = context.make_array(signature.args[0])(context, builder, args[0])
        view.meminfo = context.get_constant_null(types.MemInfoPointer(types.voidptr))
        view.parent = context.get_constant_null(types.pyobject)
        return view._getvalue()

    return arr(arr), codegen


@overload(borrow, jit_options={"cache": True})
def _borrow_overload(arr):
    if isinstance(arr, types.Array):
        return lambda arr: _borrowed(arr)
    return lambda arr: arr
