"""The one compile policy of the package's numba kernels."""

from __future__ import annotations

import numba


def njit(fn):
    """`numba.njit(cache=True, nogil=True)`: compiled code is cached on disk (executors load it
    instead of compiling) and kernels release the GIL (read-ahead and write threads run beside
    them). Without the cache where no cache directory is writable (read-only site-packages on
    executors without NUMBA_CACHE_DIR): the import must not fail for that."""
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(cache=False, nogil=True)(fn)
