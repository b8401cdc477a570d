"""pyworker.keep_zip_directories: after importlib.invalidate_caches() (PySpark calls it before
every task) the directory of an archive already on the path is not read again, whether CPython
re-reads it in the call (3.10-3.12) or at the next import through it (later), and imports from
it still work. Run in a subprocess: it changes the process's import state."""

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
    before, changed, after, total = map(int, subprocess.run(child, capture_output=True, text=True,
                                                            check=True).stdout.split())  # fmt: skip
    assert before >= 1  # without it: the directory read again after every call
    assert changed >= 2  # the importers of the archive and of zpkg inside it
    assert after == 0
    assert total == 6
