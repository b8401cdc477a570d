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

from compaction.kernels.cache import LazyKernelCache


def njit(fn):
    """`numba.njit(nogil=True)`, cached on disk: kernels release the GIL (read-ahead and write
    threads run beside them), and compiled code is kept in the key-named directory of
    `kernels/cache.py` (executors load it instead of compiling; a cache of another CPU, numba or
    source is never read). Where no cache directory is usable (the sources are not files on disk,
    a read-only cache dir) the kernel is compiled in each process: the import must not fail for
    that."""
    dispatcher = numba.njit(nogil=True)(fn)
    # What `Dispatcher.enable_caching` does, with the package's cache instead of numba's default.
    dispatcher._cache = LazyKernelCache(fn)
    KERNELS.append(dispatcher)
    return dispatcher


KERNELS: list = []  # every dispatcher made by `njit` (tests check they are all cached)


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
