"""runtime/worker.py: importing the package changes nothing in the process; `prepare_worker` does
it all. `keep_zip_directories`: after importlib.invalidate_caches() (PySpark calls it before every
task) the directory of an archive already on the path is not read again, whether CPython re-reads
it in the call (3.10-3.12) or at the next import through it (later), and imports from it still
work. Run in subprocesses: they change the process's import state."""

from __future__ import annotations

import subprocess
import sys
import zipfile

CHILD = r"""
import importlib, sys, zipimport
archive = sys.argv[1]
sys.path.insert(0, archive)
import zpkg.first  # makes importers for the archive and for zpkg inside it
reads = []
real = zipimport._read_directory
zipimport._read_directory = lambda path: reads.append(path) or real(path)
importlib.invalidate_caches()
import zpkg.second
before = len(reads)
from compaction.runtime.worker import keep_zip_directories
changed = keep_zip_directories()
importlib.invalidate_caches()
import zpkg.third  # still found in the kept directory
print(before, changed, len(reads) - before, zpkg.first.VALUE + zpkg.second.VALUE + zpkg.third.VALUE)
"""


def test_invalidate_caches_keeps_zip_directories(tmp_path):
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zpkg/__init__.py", "")
        for n, name in enumerate(("first", "second", "third"), 1):
            zf.writestr(f"zpkg/{name}.py", f"VALUE = {n}\n")
    child = [sys.executable, "-c", CHILD, str(archive)]
    before, changed, after, total = map(
        int, subprocess.run(child, capture_output=True, text=True, check=True).stdout.split()
    )
    assert before >= 1  # without it: the directory read again after every call
    assert changed >= 2  # the importers of the archive and of zpkg inside it
    assert after == 0
    assert total == 6


PREPARE = r"""
import sys, zipimport
sys.path.insert(0, sys.argv[1])
import zpkg.first
import compaction.round, compaction.spark.stages, compaction.spark.warmup
from compaction.runtime import segment_io, throttle, worker
from compaction.settings import DIRECT_MIN_BYTES, WorkerSettings

def kinds():
    caches = sys.path_importer_cache.values()
    return sorted({type(i).__name__ for i in caches if isinstance(i, zipimport.zipimporter)})
# nothing at import: the process is as Python made it
assert kinds() == ["zipimporter"], kinds()
assert not worker._heap_kept and throttle.process_throttler() is None
assert segment_io.direct_min_bytes == DIRECT_MIN_BYTES
worker.prepare_worker(WorkerSettings(direct_min_bytes=0, io_max_bytes_per_second=1e9, io_throttle_file=sys.argv[2]))
assert kinds() == ["_KeptDirectoryZipImporter"], kinds()
assert segment_io.direct_min_bytes == 0
t = throttle.process_throttler()
assert t.rate == 1e9 and t.clock.path == sys.argv[2]
print(worker._heap_kept)
worker.prepare_worker()  # the next task, of a round with the defaults
assert throttle.process_throttler() is None and segment_io.direct_min_bytes == DIRECT_MIN_BYTES
"""


def test_importing_changes_nothing_prepare_worker_does_it_all(tmp_path):
    """Importing the package's task modules leaves the process alone; `prepare_worker` applies the
    round's worker settings (throttle, O_DIRECT threshold), keeps the freed heap (glibc) and the
    zip importers' directories."""
    import ctypes

    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zpkg/__init__.py", "")
        zf.writestr("zpkg/first.py", "VALUE = 1\n")
    child = [sys.executable, "-c", PREPARE, str(archive), str(tmp_path / "io.throttle")]
    out = subprocess.run(child, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(hasattr(ctypes.CDLL(None), "mallopt"))


PANDAS = r"""
import sys
import numpy as np
import pyarrow as pa
from compaction.runtime.worker import prepare_worker
prepare_worker()
# What a task builds: arrays from numpy and from lists, tables from dicts.
t = pa.table({"a": np.arange(3), "b": pa.array([b"x", b"y", None])})
left_out = "pandas" not in sys.modules
import pandas  # still importable, and pyarrow still converts when asked
print(left_out, len(t), len(t.to_pandas()), "pandas" in sys.modules)
"""


def test_a_worker_builds_arrow_data_without_importing_pandas():
    out = subprocess.run(
        [sys.executable, "-c", PANDAS], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["True", "3", "3", "True"]
