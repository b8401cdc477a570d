"""Offline Kafka log compaction on Spark."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zipfile

__version__ = "0.1.0"


def _serve_from_disk_when_zipped() -> None:
    """On executors the package arrives as `--py-files compaction.zip`. Numba cannot cache
    kernels whose source lives in a zip (it recompiles in every Python worker of every run), so
    extract the zip once per machine, keyed by its sources, and import the rest of
    the package from there. A normal install is left alone.

    This runs at import, before any other module of the package is imported (they are what numba
    compiles and caches, so they must come from the extracted copy), in every Python process that
    imports the package from the zip: it must cost next to nothing once the copy exists. The
    launcher writes a sha256 of the sources into the zip's comment (`cli/launcher.py`
    `ensure_zip`), and the comment sits at the end of the file: one seek and one short read name
    the copy. Only a zip without that comment is hashed whole."""
    archive = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isfile(archive) or not zipfile.is_zipfile(archive):
        return
    stamp = _sources_digest(archive) or _file_digest(archive)
    base = os.environ.get("NUMBA_CACHE_DIR") or tempfile.gettempdir()
    root = os.path.join(base, f"compaction-src-{stamp[:16]}")
    if not os.path.isdir(os.path.join(root, "compaction")):
        os.makedirs(base, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f"compaction-src-{stamp[:16]}-", dir=base)
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
        try:
            os.rename(tmp, root)
        except OSError:  # another worker on this machine extracted the same zip first
            shutil.rmtree(tmp, ignore_errors=True)
    __path__[:] = [os.path.join(root, "compaction")]


_EOCD = b"PK\x05\x06"  # a zip's end-of-central-directory record: 22 bytes, then the comment
_EOCD_BYTES = 22


def _sources_digest(archive: str) -> str | None:
    """The hex sha256 in the zip's comment (what `ensure_zip` writes there), or None."""
    with open(archive, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - _EOCD_BYTES - 64))  # a comment of 64 hex digits: the record at this spot
        tail = fh.read()
    at = tail.rfind(_EOCD)
    if at < 0:
        return None
    comment = tail[at + _EOCD_BYTES :]
    if int.from_bytes(tail[at + 20 : at + 22], "little") != len(comment) or len(comment) != 64:
        return None
    text = comment.decode("ascii", "replace")
    return text if all(c in "0123456789abcdef" for c in text) else None


def _file_digest(archive: str) -> str:
    with open(archive, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


try:
    _serve_from_disk_when_zipped()
except OSError:
    pass  # unwritable temp dir: import from the zip (correct, only slower to start)


def __getattr__(name: str):
    """`compaction.KafkaLogDataSource`, imported on first use: importing the package stays free of
    pyspark (executors and the launcher import it without a SparkSession)."""
    if name == "KafkaLogDataSource":
        from compaction.spark.datasource import KafkaLogDataSource

        return KafkaLogDataSource
    raise AttributeError(f"module 'compaction' has no attribute {name!r}")
