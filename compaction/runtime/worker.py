"""What a reused Spark Python worker keeps from one task to the next.

PySpark's worker calls `importlib.invalidate_caches()` before every task (`worker_util.
setup_spark_files`). On CPython 3.10 and 3.11 that makes every `zipimporter` on the path read
its archive's whole directory again, in Python, at once (python/cpython#103200; later CPython
reads it lazily, on the next import through it), and the worker's path always holds two
archives: Spark's `pyspark.zip` and py4j's (1,300+ entries, one importer per package imported
from them). Measured on the 2-core bench box: 0.10-0.15 s between the JVM starting a task and
the task's function being called, in each of the two concurrent tasks, nearly all of it this
(BENCHMARKS.md, session 6). Spark later stopped calling
it for every task (SPARK-54744); the Spark this package runs on still does.

The archives of a worker do not change while it lives (Spark fetches an application's files once
into a per-application directory and refuses a second file of the same name), so the importers
that already exist may keep the directory they read.
"""

from __future__ import annotations

import sys
import zipimport


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
