"""A pytest plugin (`-p steady_kernels`) for a mutant's test run: the compiled-kernel cache keeps
the unmutated module's key (`MUTATION_KERNEL_DIGEST`, the kernel sources' digest the baseline
computed), so that a mutant loads the kernels of every other file instead of compiling them all.

A module that defines kernels is one of `kernels/cache.py`'s kernel sources: each mutant of it
changes the sources' digest, hence the cache directory, and every kernel a test calls was
compiled again (a minute or more a mutant; the tests themselves take seconds). The kernels of the
mutated file itself are still compiled afresh: numba checks each cached function against a hash of
its own source file (`_Locator.get_source_stamp`), which the mutant changed.
"""

from __future__ import annotations

import os

from compaction.kernels import cache

_DIGEST = os.environ["MUTATION_KERNEL_DIGEST"]
cache.sources_digest = lambda package_dir=cache.PACKAGE_DIR: _DIGEST
cache.current_key.cache_clear()
