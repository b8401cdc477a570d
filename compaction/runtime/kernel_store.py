"""The compiled kernels kept on the job's store, so that a fresh executor loads them instead of
compiling (most of a fresh executor's warm-up: bench/cold_start.py).

The store is a directory URI (`WorkerSettings.kernel_cache_dir`: by default
`.kafka-compaction-kernels` beside the first log dir, on the store every executor reads and writes
already). It holds one archive per cache key (`kernels/cache.py`: numba, llvmlite and Python
versions, the kernel sources' hash, the CPU's name and features), `kernels-<digest>.zip`, so
executors of different CPUs, or of an older release, each have their own and never read another's.

- `fetch` (every Python worker before its first kernel, `runtime/worker.py` `prepare_worker`; the
  driver too in local mode, before the workers start): where this host has no cache of its key
  yet, the key's archive is read from the store, checked (`kernels/cache.py` `unpack`: its key
  part by part, every file's sha256) and put in place whole, by rename. A missing, damaged or
  foreign archive is not used: the kernels are compiled, as with no store at all.
- `publish` (the warm-up task, after its tiny round has loaded or compiled every kernel; and at
  a task's start where the process compiled since, `publish_new`): where the store has no archive
  of this key yet, or this process had to compile, this host's cache is written there as one
  archive that appears whole (a rename on a filesystem, a single upload on an object store):
  executors writing at once, or a retried task, leave one whole archive.
- `prune` (after a publish wrote a new archive): the archives of other keys, and writers' leftover
  temporary files, not written for `KERNEL_CACHE_KEEP_SECONDS`, are deleted, so a store does not
  grow by an archive for every release and CPU type it ever saw.

Both are best efforts: a store that cannot be read or written costs the compile it was meant to
save, never the round.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import uuid

from compaction.kernels import cache
from compaction.runtime.storage import Storage
from compaction.settings import KERNEL_CACHE_KEEP_SECONDS

DISABLED = ("off", "none", "false")

_fetched: set[str] = set()  # store URIs this process has fetched from (once each)


def enabled(uri: str | None) -> bool:
    return bool(uri) and uri.strip().lower() not in DISABLED


def _archive(uri: str, key: cache.CacheKey) -> tuple[Storage, str]:
    storage, base = Storage.for_uri(uri)
    return storage, f"{base.rstrip('/')}/{key.archive_name}"


def fetch(uri: str | None) -> str:
    """Bring this key's cache from the store at `uri` onto this host, unless it is here already.
    Returns what happened: "off", "local" (here already), "tried" (earlier in this process),
    "fetched", "absent", or "rejected: why"."""
    if not enabled(uri):
        return "off"
    try:
        key = cache.current_key()
        directory = cache.local_dir(key)
        if os.path.isdir(directory):
            return "local"
        if uri in _fetched:
            return "tried"
        _fetched.add(uri)
        storage, path = _archive(uri, key)
        try:
            data = storage.read_bytes(path)
        except FileNotFoundError:
            return "absent"
        try:
            cache.unpack(data, key, directory)
        except cache.CacheRejected as exc:
            return f"rejected: {exc}"
        return "fetched"
    except Exception as exc:
        return f"rejected: {type(exc).__name__}: {exc}"


def publish_new(uri: str | None) -> str:
    """`publish` where this process compiled kernels since it last published (at a task's start:
    a kernel first needed by a stage, after the warm-up published, reaches the store too)."""
    if not enabled(uri) or _compiled() <= _published[0]:
        return "none new"
    return publish(uri, compiled=True)


def _compiled() -> int:
    return sum(cache.compiles().values())


_published = [0]  # compiles counted in this process when it last published


def publish(uri: str | None, compiled: bool) -> str:
    """Write this host's cache of this key to the store at `uri` where the store has none yet, or
    where this process `compiled` kernels (the store's archive lacked them, or was unusable).
    Returns "off", "present", "empty" (nothing cached here), "written" or "failed: why"."""
    if not enabled(uri):
        return "off"
    _published[0] = _compiled()
    try:
        key = cache.current_key()
        storage, path = _archive(uri, key)
        if not compiled and storage.exists(path):
            return "present"
        data = cache.pack(cache.local_dir(key), key)
        if not data:
            return "empty"
        _write_whole(storage, path, data)
        prune(storage, os.path.dirname(path), key)
        return "written"
    except Exception as exc:
        return f"failed: {type(exc).__name__}: {exc}"


def _write_whole(storage: Storage, path: str, data: bytes) -> None:
    """`path` replaced by `data` so that a reader sees the old archive or the new one, whole; a
    temporary name of this writer's own, since other executors may write the same archive."""
    parent = os.path.dirname(path)
    if storage.is_local:
        os.makedirs(parent, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=parent)
        try:
            os.fchmod(fd, 0o644)  # as any file the job writes (mkstemp's are the owner's only)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    elif not storage.atomic_rename:  # an object store: one upload replaces the object whole
        storage.write_durable(path, data)
    else:
        tmp = f"{path}.tmp.{uuid.uuid4().hex[:12]}"
        storage.write_durable(tmp, data)
        storage.rename(tmp, path, durable=False)


# The store's own files: archives and their writers' temporary names (`_write_whole`). Anything
# else in the directory is not the job's and is never deleted.
_STORE_FILE = re.compile(r"kernels-[0-9a-f]+\.zip(\.tmp\.[0-9A-Za-z_]+)?")


def prune(storage: Storage, base: str, key: cache.CacheKey, now: float | None = None) -> list[str]:
    """Delete the store's files other than `key`'s archive untouched for
    `KERNEL_CACHE_KEEP_SECONDS`; returns their names. Best effort, as the store itself."""
    cutoff_ns = int(((time.time() if now is None else now) - KERNEL_CACHE_KEEP_SECONDS) * 1e9)
    removed = []
    try:
        for f in storage.list_dir(base):
            if f.is_dir or f.name == key.archive_name or not _STORE_FILE.fullmatch(f.name):
                continue
            if f.mtime_ns is not None and f.mtime_ns < cutoff_ns:
                storage.delete(f.path, missing_ok=True)
                removed.append(f.name)
    except OSError:
        pass  # a store that cannot be listed or deleted from keeps its files; nothing else is lost
    return removed
