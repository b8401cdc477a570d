"""pyworker.keep_zip_directories: importlib.invalidate_caches() (PySpark calls it before every
task) no longer re-reads the directory of archives already on the path, and imports from them
still work. Run in a subprocess: it changes the process's import state."""

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
before = len(reads)
from compaction.pyworker import keep_zip_directories
changed = keep_zip_directories()
importlib.invalidate_caches()
import zpkg.second  # still found in the kept directory
print(before, changed, len(reads) - before, zpkg.first.VALUE + zpkg.second.VALUE)
"""


def test_invalidate_caches_keeps_zip_directories(tmp_path):
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zpkg/__init__.py", "")
        zf.writestr("zpkg/first.py", "VALUE = 1\n")
        zf.writestr("zpkg/second.py", "VALUE = 2\n")
    out = subprocess.run([sys.executable, "-c", CHILD, str(archive)], capture_output=True, text=True, check=True)
    before, changed, after, total = map(int, out.stdout.split())
    assert before >= 2  # without it: one read per importer (the archive, zpkg), every call
    assert changed >= 2
    assert after == 0
    assert total == 3
