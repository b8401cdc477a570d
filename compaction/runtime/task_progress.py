"""What the executors have done so far, for the driver's progress line while a stage runs.

Spark's accumulators reach the driver only when a task ends, and one task may hold a whole
partition for minutes. So each task counts, in its own process, the segment bytes it read and
wrote (told by the I/O code, next to the throttle) and the bytes of segments its scan and its
rewrite finished, and a thread of the task writes them every beat (`beat_seconds`: BEAT_SECONDS on a
disk, longer on an object store, where each beat is a PUT) into a small file of a directory the
driver reads: the round's progress directory, on the same store as the exchange
directory of the ranges stage (a temporary directory on the driver's host under a local master,
else beside the first log dir or under `spark.kafka.compaction.exchangeDir`: where every executor
can write and the driver can list).

One file per task of a stage, `<stage>-<partition>.json`: a retried attempt overwrites its
predecessor's, so a task's bytes are counted once.

    {"read": bytes read, "written": bytes written, "done": bytes of source segments scanned +
     rewritten, "finished": false until the task returns, "failed": true if it raised instead,
     "beat": a counter}
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import tempfile
import threading
import urllib.parse
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

from compaction.runtime.storage import Storage
from compaction.settings import PROGRESS_BEAT_OBJECT_STORE_SECONDS, PROGRESS_BEAT_SECONDS, beside

PREFIX = ".kafka-compaction-progress-"
BEAT_SECONDS = PROGRESS_BEAT_SECONDS  # on a disk (settings.py)
OBJECT_STORE_BEAT_SECONDS = PROGRESS_BEAT_OBJECT_STORE_SECONDS  # this worker's (`configure`)

_lock = threading.Lock()
_counts = {"read": 0, "written": 0, "done": 0}


def configure(object_store_seconds: float) -> None:
    """This worker's beat on an object store (`WorkerSettings.progress_beat_object_store_seconds`)."""
    global OBJECT_STORE_BEAT_SECONDS
    OBJECT_STORE_BEAT_SECONDS = object_store_seconds


def count(read: int = 0, written: int = 0, done: int = 0) -> None:
    """Called by the I/O code (`read`, `written` bytes) and the scan and rewrite loops (`done`:
    a source segment's bytes, once by the scan and once by the rewrite)."""
    with _lock:
        _counts["read"] += read
        _counts["written"] += written
        _counts["done"] += done


def counts() -> dict[str, int]:
    with _lock:
        return dict(_counts)


@dataclass(frozen=True)
class Totals:
    """The executors' figures summed over the progress files."""

    read: int = 0
    written: int = 0
    done: int = 0
    running: int = 0  # tasks that have written a file and not ended
    tasks: int = 0  # tasks that have written a file
    finished: int = 0  # tasks whose file says they returned (a failed attempt's says it failed)


class ProgressDir:
    """The round's progress directory (picklable: the tasks get its URI in their worker settings)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    @classmethod
    def create(cls, configured: str | None, local_master: bool, log_dir: str) -> ProgressDir:
        """A new directory where the exchange directory of the ranges stage would go (see the
        module docstring)."""
        name = PREFIX + uuid.uuid4().hex[:12]
        if configured:
            uri = _within(configured, name)
        elif local_master:
            uri = tempfile.mkdtemp(prefix=PREFIX)
        else:
            uri = beside(log_dir, name)
        storage, root = Storage.for_uri(uri)
        if storage.is_local:
            os.makedirs(root, exist_ok=True)
        return cls(uri)

    def remove(self) -> None:
        storage, root = self._storage()
        if storage.is_local:
            shutil.rmtree(root, ignore_errors=True)
            return
        try:  # object by object: an object store has no directory to remove
            for info in storage.list_dir(root):
                storage.delete(f"{root.rstrip('/')}/{info.name}", missing_ok=True)
        except OSError:
            pass  # a best effort: nothing a later run reads

    def __enter__(self) -> ProgressDir:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def _storage(self):
        return Storage.for_uri(self.uri)

    def beat_seconds(self) -> float:
        """How often a task rewrites its file here: each beat is a PUT on an object store (a store
        without atomic rename: S3, GCS, ABFS), a rename on a disk or HDFS."""
        return BEAT_SECONDS if self._storage()[0].atomic_rename else OBJECT_STORE_BEAT_SECONDS

    def write(self, name: str, figures: dict) -> None:
        storage, root = self._storage()
        path, data = f"{root.rstrip('/')}/{name}.json", json.dumps(figures).encode()
        if not storage.is_local:
            storage.write_atomic(path, data)  # an upload appears whole
            return
        # Renamed into place, never fsynced: it is read while the task runs, never after a crash;
        # and a rewrite's batch of deferred syncs (durability.py) must not take a file that the
        # next beat renames away.
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)

    def totals(self) -> Totals:
        """Sums of every task's last file (a file being replaced is read as it was, or skipped)."""
        storage, root = self._storage()
        sums = {"read": 0, "written": 0, "done": 0, "running": 0, "tasks": 0, "finished": 0}
        try:
            infos = storage.list_dir(root)
        except OSError:
            return Totals()
        for info in infos:
            if info.is_dir or not info.name.endswith(".json"):
                continue
            try:
                figures = json.loads(storage.read_bytes(f"{root.rstrip('/')}/{info.name}"))
            except (OSError, ValueError):
                continue  # renamed away between the listing and the read: the next poll sees it
            for key in ("read", "written", "done"):
                sums[key] += int(figures.get(key, 0))
            sums["tasks"] += 1
            sums["finished"] += bool(figures.get("finished"))
            sums["running"] += not figures.get("finished") and not figures.get("failed")
        return Totals(**sums)


def _within(dir_uri: str, name: str) -> str:
    """The URI of `name` inside the directory `dir_uri` (a path or a URI; its query kept)."""
    if "://" not in dir_uri:
        return os.path.join(dir_uri, name)
    parts = urllib.parse.urlsplit(dir_uri)
    return urllib.parse.urlunsplit(parts._replace(path=posixpath.join(parts.path or "/", name)))


@contextmanager
def reporting(uri: str | None, name: str | None = None):
    """Around one task's work: its figures (this process's counts since it started) written to the
    progress directory `uri` every `ProgressDir.beat_seconds` and once more, `finished`, when it ends, as
    `name` (`<stage>-<partition>`: a retried attempt replaces its predecessor's file; by default
    this thread's). Nothing without a directory (a task run outside a round)."""
    if not uri:
        yield
        return
    name = name or f"task-{threading.get_ident()}"
    pdir, start, stop = ProgressDir(uri), counts(), threading.Event()
    period = pdir.beat_seconds()

    def figures(finished: bool, beat: int, failed: bool = False) -> dict:
        now = counts()
        return {**{k: now[k] - start[k] for k in now}, "finished": finished, "failed": failed, "beat": beat}

    def beat() -> None:
        n = 0
        while not stop.wait(period if n else 0.0):
            try:
                pdir.write(name, figures(False, n))
            except OSError:
                pass  # a missed beat: the next one may land
            n += 1

    thread = threading.Thread(target=beat, name="task-progress", daemon=True)
    thread.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        stop.set()
        thread.join()
        try:
            pdir.write(name, figures(ok, -1, failed=not ok))
        except OSError:
            pass


__all__ = [
    "BEAT_SECONDS",
    "OBJECT_STORE_BEAT_SECONDS",
    "ProgressDir",
    "Totals",
    "configure",
    "count",
    "counts",
    "reporting",
]
