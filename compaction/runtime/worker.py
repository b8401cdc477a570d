"""How a task's Python worker process is set up: every change a task makes to its process sits
behind `prepare_worker()`, called where a task starts (the stages' task functions in
compaction/spark/stages.py, the warm-up's in compaction/spark/warmup.py), never at import.

- The round's worker settings (`WorkerSettings`, resolved on the driver and carried inside the
  task function): the segment I/O throttle (runtime/throttle.py) and the size from which local
  segments are read with O_DIRECT (runtime/segment_io.py), the progress files' beat on an object
  store (runtime/task_progress.py).
- glibc's malloc keeps the memory a task frees (`keep_freed_heap`).
- The zip importers keep their archive's directory from task to task (`keep_zip_directories`).
- The objects the imports made are left out of Python's cyclic garbage collection
  (`freeze_imported_objects`).
- pyarrow takes pandas as absent (`pyarrow_without_pandas`).
- The compiled kernels come from the job's store where this host has none of its key yet
  (`runtime/kernel_store.py` `fetch`), before the task's first kernel; numba's compiles are counted
  (`kernels/cache.py` `count_compiles`: the warm-up reports them).

Each step is idempotent and cheap after the first call: a reused worker runs it before every task.

The package's own extraction from its shipped zip runs earlier, in `compaction/__init__.py`: it
must happen before the rest of the package is imported.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import zipimport

from compaction.kernels import codec_threads
from compaction.kernels.cache import count_compiles
from compaction.runtime import kernel_store, segment_io, task_progress, throttle
from compaction.settings import WorkerSettings


def prepare_worker(settings: WorkerSettings | None = None) -> None:
    """Set this process up for a task of the round whose worker settings are `settings` (None:
    the defaults)."""
    settings = WorkerSettings() if settings is None else settings
    pyarrow_without_pandas()
    keep_freed_heap()
    keep_zip_directories()
    freeze_imported_objects()
    throttle.configure(settings.io_max_bytes_per_second, settings.io_throttle_file)
    segment_io.configure(settings.direct_min_bytes, settings.cache_max_bytes)
    codec_threads.configure(settings.codec_threads)
    task_progress.configure(settings.progress_beat_object_store_seconds)
    count_compiles()
    kernel_store.fetch(settings.kernel_cache_dir)
    kernel_store.publish_new(settings.kernel_cache_dir)


# --- pyarrow -------------------------------------------------------------------------------------


class _NoPandas:
    """A meta path finder for which pandas does not exist."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            raise ImportError("pandas is left out of this worker (compaction/runtime/worker.py)")
        return None


def pyarrow_without_pandas() -> None:
    """Where pandas is installed, pyarrow imports it (a larger import than pyarrow's own) at the
    first array it builds from Python objects or a numpy array, to check whether they are pandas
    objects; a task never hands it one. pyarrow tries that import once per process and remembers
    a failure: here it fails, pandas' own import stays possible. Nothing done where pandas was
    imported already."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)


# --- garbage collection --------------------------------------------------------------------------

_frozen = False


def freeze_imported_objects() -> None:
    """Move every object alive now (what numba, numpy, pyarrow and pyspark built at import, a few
    hundred thousand objects) out of the collector's reach, once per process. A task allocates
    enough objects to trigger a full collection now and then, and each one walked them all. They
    live as long as the process anyway."""
    global _frozen
    if not _frozen:
        gc.freeze()
        _frozen = True


# --- malloc --------------------------------------------------------------------------------------

# glibc's mallopt parameters (malloc.h) and the values set by `keep_freed_heap`.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
HEAP_TRIM_BYTES = 1 << 30  # free heap kept by the process before it is given back to the kernel
HEAP_MMAP_BYTES = 32 << 20  # allocations below this come from the heap, not from their own mmap
HEAP_PAD_BYTES = 64 << 20  # free room a heap keeps: a thread's heap is at most 64 MiB (glibc, 64-bit)
_heap_kept = False


def keep_freed_heap() -> bool:
    """Have glibc's malloc keep freed memory for reuse (once per process; False where the C
    library has no mallopt). A task allocates and frees the same sizes segment after segment:
    decompressed batches, record columns, key hashes. By default glibc maps each allocation of
    more than ~128 KiB (a threshold it raises as such blocks are freed) separately and unmaps it
    when freed, and trims the heap's free top, so each segment faulted in fresh pages again (what
    a first touch costs: bench/fresh_memory.py). The pad does the same for the heaps of threads
    other than the main one (the read-ahead and writer threads): glibc frees such a heap, or the
    free end of it, once more than the pad is free, whatever the trim threshold; with the default
    pad each round of allocations there faulted its pages in again (stage time with and without
    it: bench/startup.py, BENCHMARKS.md)."""
    global _heap_kept
    if _heap_kept:
        return True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    _heap_kept = all(
        mallopt(param, value)
        for param, value in (
            (M_MMAP_THRESHOLD, HEAP_MMAP_BYTES),
            (M_TRIM_THRESHOLD, HEAP_TRIM_BYTES),
            (M_TOP_PAD, HEAP_PAD_BYTES),
        )
    )
    return _heap_kept


# --- zip importers -------------------------------------------------------------------------------
#
# PySpark's worker calls `importlib.invalidate_caches()` before every task (`worker_util.
# setup_spark_files`). On CPython 3.10 and 3.11 that makes every `zipimporter` on the path read
# its archive's whole directory again, in Python, at once (python/cpython#103200; later CPython
# reads it lazily, on the next import through it), and the worker's path always holds two
# archives: Spark's `pyspark.zip` and py4j's (1,300+ entries, one importer per package imported
# from them). That is most of the time between the JVM starting a task and the task's function
# being called (bench/e2e.py). Spark later stopped calling it for every task (SPARK-54744); the
# Spark this package runs on still does.
#
# The archives of a worker do not change while it lives (Spark fetches an application's files once
# into a per-application directory and refuses a second file of the same name), so the importers
# that already exist may keep the directory they read.


class _KeptDirectoryZipImporter(zipimport.zipimporter):
    """A zipimporter whose archive directory, once read, stays valid for the process."""

    def invalidate_caches(self) -> None:
        pass


def keep_zip_directories() -> int:
    """Make the zip importers of this process keep their directory through
    `importlib.invalidate_caches()`; returns how many were changed. Importers made later (a
    package first imported from an archive afterwards) read theirs again until the next call."""
    changed = 0
    for importer in list(sys.path_importer_cache.values()):
        if type(importer) is zipimport.zipimporter:
            importer.__class__ = _KeptDirectoryZipImporter
            changed += 1
    return changed
