"""The driver JVM's class-data-sharing archive: Spark's classes mapped from one file at start,
instead of found, parsed and verified one by one in every run.

A round's spark-submit JVM loads thousands of classes from Spark's jars, before the driver's Python
starts and again while the SparkContext starts. Java's dynamic CDS archive (JDK 13+) keeps them
ready-made: one run's JVM writes the classes it loaded at its exit (`-XX:ArchiveClassesAtExit`,
a few seconds more at the end of that run, once per Java and Spark install), and later runs map
that file (`-XX:SharedArchiveFile`), which shortens every later spark-submit (BENCHMARKS.md,
`bench/startup.py --b-env KAFKA_COMPACTION_CDS_DIR=off`).

Files, in the cache dir (`KAFKA_COMPACTION_CDS_DIR`):
- `<key>.jsa`: an archive ready to map. `key` digests the Java and Spark installs (`archive_key`):
  an upgrade of either starts a new archive rather than one the JVM would refuse.
- `<key>.<pid>.partial`: being written by the JVM of process `pid` (the launcher execs
  spark-submit, and spark-submit execs that JVM: one process id throughout).

A partial archive is never mapped: the JVM maps a file's regions as its header describes them, and
a truncated file crashes it (SIGBUS), not refused. Java writes the header last, after every
region, so a later launcher promotes a partial file to `<key>.jsa` only once its writer is gone
and its header is there (`promote`); a writer killed mid-write leaves a headerless file, which is
deleted. Java also writes each region's checksum and checks them all before it maps the file
(`-XX:+VerifySharedSpaces`): one damaged since is refused, and the JVM starts without it. An
archive no run has used for `STALE_SECONDS` (that of a Java or Spark since replaced)
is deleted by the next launcher (`prune`): each run touches the one it maps.
"""

from __future__ import annotations

import glob
import hashlib
import os
import struct
import time

from compaction.runtime.storage import Storage

DISABLED = ("", "0", "off", "false", "no")
# CDS_DYNAMIC_ARCHIVE_MAGIC, the header's first field (native order): a file whose header was
# never written starts with zeros.
DYNAMIC_MAGIC = 0xF00BABA8
MAGIC = struct.Struct("=I")
# A dump writes ~60-110 MB; below this much free space the run makes none (a failed write is an
# error at the JVM's exit, after the round).
MIN_FREE_BYTES = 512 << 20
STALE_SECONDS = 30 * 86400
# Both with each archive option. The JVM's CDS messages go to stdout by default (the dump warns of
# every class it leaves out). The checksums of the archive's regions are written with it and
# checked before it is mapped: a damaged archive is refused, not run.
COMMON = ("-XX:+VerifySharedSpaces", "-Xlog:cds*=off")
FORMAT = b"regions checksummed\n"  # in the key: archives written without checksums are not mapped


def default_dir(env: dict) -> str:
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "kafka-compaction", "jvm")


def archive_key(java: str, spark_home: str) -> str:
    """A digest of what an archive depends on: the Java install (its launcher, VM and base
    archive) and Spark's jars (names, sizes, times)."""
    java_home = os.path.dirname(os.path.dirname(os.path.realpath(java)))
    h = hashlib.sha256(FORMAT)
    for path in (os.path.realpath(java), *sorted(glob.glob(os.path.join(java_home, "lib", "server", "*")))):
        _add_stat(h, path)
    for path in sorted(glob.glob(os.path.join(spark_home, "jars", "*.jar"))):
        _add_stat(h, path)
    return h.hexdigest()[:24]


def _add_stat(h, path: str) -> None:
    try:
        st = os.stat(path)
    except OSError:
        return
    h.update(f"{os.path.basename(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())


def java_options(cache_dir: str, key: str, pid: int) -> list[str]:
    """The driver JVM's options for the archive of `key`: map it if it is ready, else have this
    run (process `pid`) write it; none when the dir cannot take it."""
    final = os.path.join(cache_dir, f"{key}.jsa")
    try:
        os.makedirs(cache_dir, exist_ok=True)
        promote(cache_dir, key)
        prune(cache_dir, key)
        if os.path.exists(final):
            _touch(final)
            return [f"-XX:SharedArchiveFile={final}", *COMMON]
        st = os.statvfs(cache_dir)
        if not os.access(cache_dir, os.W_OK) or st.f_bavail * st.f_frsize < MIN_FREE_BYTES:
            return []
    except OSError:
        return []
    return [f"-XX:ArchiveClassesAtExit={partial_path(cache_dir, key, pid)}", *COMMON]


def partial_path(cache_dir: str, key: str, pid: int) -> str:
    return os.path.join(cache_dir, f"{key}.{pid}.partial")


def promote(cache_dir: str, key: str) -> None:
    """Every finished partial archive of `key` made `<key>.jsa` (durably); unfinished ones of
    gone writers deleted; ones still being written left alone."""
    final = os.path.join(cache_dir, f"{key}.jsa")
    for path in glob.glob(partial_path(glob.escape(cache_dir), glob.escape(key), "*")):
        pid = _writer_pid(path)
        if pid is None or writer_alive(pid, path):
            continue
        try:
            if has_header(path):
                _fsync(path)
                os.replace(path, final)
                Storage.local().fsync_dir(cache_dir)
            else:
                os.unlink(path)
        except OSError:  # another launcher promoted or deleted it first
            continue


def prune(cache_dir: str, key: str, now: float | None = None) -> None:
    """Delete the archives of other keys no run has used for `STALE_SECONDS`, and finished or
    abandoned partial ones of theirs as old."""
    now = time.time() if now is None else now
    for path in glob.glob(os.path.join(glob.escape(cache_dir), "*")):
        name = os.path.basename(path)
        if name.startswith(key + ".") or not name.endswith((".jsa", ".partial")):
            continue
        try:
            if now - os.stat(path).st_mtime > STALE_SECONDS and not _being_written(path):
                os.unlink(path)
        except OSError:  # another launcher pruned it first
            continue


def _touch(path: str) -> None:
    """In use: not stale (`prune`). Another user's archive in a shared dir keeps its time."""
    try:
        os.utime(path)
    except OSError:
        pass


def _writer_pid(path: str) -> int | None:
    """The pid in a `<key>.<pid>.partial` name (None: not such a name)."""
    parts = os.path.basename(path).split(".")
    return int(parts[1]) if len(parts) == 3 and parts[2] == "partial" and parts[1].isdigit() else None


def _being_written(path: str) -> bool:
    pid = _writer_pid(path)
    return pid is not None and writer_alive(pid, path)


def has_header(path: str) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(MAGIC.size)
    return len(head) == MAGIC.size and MAGIC.unpack(head)[0] == DYNAMIC_MAGIC


def writer_alive(pid: int, path: str) -> bool:
    """Whether process `pid` is still the JVM writing `path` (a reused pid is not)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return f"-XX:ArchiveClassesAtExit={path}".encode() in fh.read()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: the pid alone
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
