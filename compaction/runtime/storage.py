"""The filesystem edge: list, read, durable write, rename, delete, mtime, locks.

Everything that touches a log dir goes through `Storage`, a thin layer over `pyarrow.fs`
(local disk, S3, GCS, HDFS; see docs/ARCHITECTURE.md and ecosystem notes B4). Two things pyarrow
does not give us and Kafka's crash-safety needs are done here by hand on local disks:

* fsync. pyarrow output streams have no fsync, so a local write is `os.open` / `os.write` /
  `os.fsync`, and the parent directory is fsynced after creating or renaming a file in it
  (otherwise the new directory entry itself may be lost on power failure).
* atomic replace. `os.replace` is atomic on POSIX. Object stores (S3, GCS) have no rename (pyarrow
  copies then deletes), so `atomic_rename` is False there; a single completed upload is atomic and
  durable, which is what `write_atomic` relies on instead.

`Storage` pickles by URI: the pyarrow filesystem is rebuilt lazily in the Spark executor (the
horovod "ship a factory, connect in the task" pattern), so no connection state crosses processes.

Locks (local log dirs only):
* `<logdir>/.compaction.lock`: our own exclusive run lock (`flock`, non-blocking).
* `<logdir>/.lock`: the broker's (`FileLock` in `LogManager.lockLogDirs`). Java's
  `FileChannel.tryLock` takes a POSIX record lock (fcntl F_SETLK); a wrapper script or another
  tool may hold it with `flock` instead, which on Linux neither sees the other: `kafka_lock_held`
  probes both (`fcntl.lockf`, then `fcntl.flock`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import posixpath
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from compaction.errors import FileTooLargeError, LockHeldError
from compaction.format.layout import FILE_MAX_BYTES
from compaction.runtime import durability
from compaction.runtime.faults import crash_point
from compaction.runtime.s3 import ObjectDeleter, base_s3, redact_uri, s3_scheme

if TYPE_CHECKING:
    import pyarrow as pa
    from typing_extensions import Buffer

COMPACTION_LOCK_FILE = ".compaction.lock"
KAFKA_LOCK_FILE = ".lock"  # LogManager.LockFileName
TMP_SUFFIX = ".tmp"  # CheckpointFile writes <file>.tmp then renames

_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
# pyarrow FileSystem.type_name values whose move() is not an atomic rename.
_NON_ATOMIC_RENAME_TYPES = frozenset({"s3", "gcs", "abfs"})


@dataclass(frozen=True, slots=True)
class FileInfo:
    name: str
    path: str
    size: int  # -1 for directories (pyarrow reports None)
    mtime_ns: int | None  # None where the filesystem does not report it
    is_dir: bool


class LocalFile:
    """A local directory entry: name and type come from the listing itself (no syscall per file),
    size and mtime from one `os.stat` on first use, so a partition the plan skips costs a stat of
    its `.log` files only (its index files are never touched). Same fields as `storage.FileInfo`;
    an OSError (file gone) surfaces where the value is first used, in that partition's planning."""

    __slots__ = ("_stat", "is_dir", "is_link", "is_special", "name", "path")

    def __init__(self, name: str, path: str, is_dir: bool, is_link: bool, is_special: bool = False) -> None:
        self.name, self.path, self.is_dir, self.is_link = name, path, is_dir, is_link
        self.is_special = is_special  # a pipe, socket or device: no regular file, no directory
        self._stat: os.stat_result | None = None

    def _st(self) -> os.stat_result:
        if self._stat is None:
            self._stat = os.stat(self.path)
        return self._stat

    @property
    def size(self) -> int:
        return -1 if self.is_dir else self._st().st_size

    @property
    def mtime_ns(self) -> int:
        return self._st().st_mtime_ns

    def __repr__(self) -> str:
        return f"LocalFile({self.path!r})"


def _local_file(entry: os.DirEntry) -> LocalFile:
    is_dir, is_link = entry.is_dir(), entry.is_symlink()
    return LocalFile(entry.name, entry.path, is_dir, is_link, not (is_dir or is_link or entry.is_file()))


def refuse_special(path: str, mode: int) -> None:
    """OSError (EINVAL) unless `mode` is a regular file's: a read of a pipe waits for a writer
    that never comes, a device's has no end."""
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "not a regular file (a pipe, socket, device or directory)", path)


@dataclass(frozen=True, slots=True)
class Bound:
    """The most bytes of a kind of file one read takes (`refuse_longer`), and what the error
    says that limit is."""

    most: int
    what: str


BROKER_FILE = Bound(FILE_MAX_BYTES, "a broker loads (a segment file's size is an int32)")


def refuse_longer(path: str, size: int, bound: Bound = BROKER_FILE) -> None:
    """`FileTooLargeError` when `size` bytes of the file at `path` are more than `bound` allows:
    checked before a read allocates for them, so a file's length (a sparse file claims any) never
    sizes what a process holds past the limit of its kind."""
    if size > bound.most:
        raise FileTooLargeError(bound.what, size=size, limit=bound.most, path=path, position=bound.most)


class Storage:
    """One filesystem. Paths are the filesystem's own paths (for S3 `bucket/key`)."""

    def __init__(self, filesystem: pafs.FileSystem | None = None, *, uri: str | None = None) -> None:
        if filesystem is None and uri is None:
            filesystem = pafs.LocalFileSystem()
        self._fs = filesystem
        self._uri = uri  # rebuilds the filesystem after unpickling when set
        self._deleter: ObjectDeleter | None = None  # S3: deletes without directory markers (s3.py)

    # --- construction and pickling ---------------------------------------------------------

    @classmethod
    def for_uri(cls, uri: str) -> tuple[Storage, str]:
        """`'s3://bucket/logs?region=eu-west-1'` -> (Storage, 'bucket/logs'); plain paths are local.
        `s3a://` (Hadoop's name for the same objects) is read as `s3://`."""
        if "://" not in uri:
            return cls(pafs.LocalFileSystem()), os.path.abspath(uri)
        uri = s3_scheme(uri)
        filesystem, path = pafs.FileSystem.from_uri(uri)
        return cls(filesystem, uri=uri), path

    @classmethod
    def local(cls) -> Storage:
        return cls(pafs.LocalFileSystem())

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            self._fs = pafs.FileSystem.from_uri(self._uri)[0]
        return self._fs

    def __getstate__(self) -> dict:
        if self._uri is not None:
            return {"uri": self._uri, "fs": None}
        return {"uri": None, "fs": self._fs}  # pyarrow's own filesystems pickle

    def __setstate__(self, state: dict) -> None:
        self._uri = state["uri"]
        self._fs = state["fs"]
        self._deleter = None

    def __repr__(self) -> str:
        return f"Storage({redact_uri(self._uri) if self._uri else self.fs.type_name})"

    # --- capabilities ---------------------------------------------------------------------

    @property
    def _base_type(self) -> str:
        filesystem = self.fs
        while isinstance(filesystem, pafs.SubTreeFileSystem):
            filesystem = filesystem.base_fs
        return filesystem.type_name

    @property
    def is_local(self) -> bool:
        """True only for the plain local filesystem, where paths are OS paths and fsync exists."""
        return isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def atomic_rename(self) -> bool:
        return self._base_type not in _NON_ATOMIC_RENAME_TYPES

    # --- read -------------------------------------------------------------------------------

    @staticmethod
    def join(*parts: str) -> str:
        return posixpath.join(*parts)

    def list_dir(self, path: str) -> list[FileInfo]:
        """Direct children sorted by name. FileNotFoundError if `path` does not exist."""
        infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=False, recursive=False))
        out = [
            FileInfo(
                name=info.base_name,
                path=info.path,
                size=-1 if info.size is None else info.size,
                mtime_ns=info.mtime_ns,
                is_dir=info.type == pafs.FileType.Directory,
            )
            for info in infos
        ]
        return sorted(out, key=lambda f: f.name)

    def info(self, path: str) -> FileInfo | None:
        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            return None
        return FileInfo(
            info.base_name,
            info.path,
            -1 if info.size is None else info.size,
            info.mtime_ns,
            info.type == pafs.FileType.Directory,
        )

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def read_bytes(
        self,
        path: str,
        offset: int = 0,
        length: int | None = None,
        bound: Bound = BROKER_FILE,
    ) -> bytes:
        """`length` bytes from `offset` (to the end when None); shorter only at end of file.
        `FileTooLargeError` instead when that is more than `bound` allows (`refuse_longer`)."""
        if self.is_local:  # before the open, which waits for a pipe's writer
            refuse_special(path, os.stat(path).st_mode)
        with self.fs.open_input_file(path) as f:
            if length is None:
                length = max(f.size() - offset, 0)
            refuse_longer(path, length, bound)
            return f.read_at(length, offset) if length else b""

    def read_small(
        self,
        path: str,
        offset: int = 0,
        length: int | None = None,
        bound: Bound = BROKER_FILE,
    ) -> bytes:
        """`read_bytes` for a small file (an index, a checkpoint): on the local filesystem with plain
        os calls (open, pread, close), several times cheaper per file than a pyarrow input file,
        same bytes and errors."""
        if not self.is_local:
            return self.read_bytes(path, offset, length, bound)
        fd = os.open(path, os.O_RDONLY | _O_NONBLOCK)  # a pipe opens without waiting, to be refused
        try:
            st = os.fstat(fd)
            refuse_special(path, st.st_mode)
            if length is None:
                length = max(st.st_size - offset, 0)
            refuse_longer(path, length, bound)
            chunks = []
            while length > 0:
                chunk = os.pread(fd, length, offset)
                if not chunk:
                    break
                chunks.append(chunk)
                offset += len(chunk)
                length -= len(chunk)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        finally:
            os.close(fd)

    def scan_dir(self, path: str) -> list[FileInfo] | list[LocalFile]:
        """The direct children, unsorted (callers sort what they keep); on the local filesystem with
        `os.scandir`: one getdents pass, no stat (`LocalFile`: size and mtime on first use)."""
        if not self.is_local:
            return self.list_dir(path)
        with os.scandir(path) as it:
            return [_local_file(e) for e in it]

    def open_input(self, path: str) -> pa.NativeFile:
        """A seekable pyarrow input file (ranged reads on object stores) for streaming reads."""
        return self.fs.open_input_file(path)

    # --- write ------------------------------------------------------------------------------

    def write_durable(self, path: str, data: bytes | memoryview | Iterable[bytes]) -> int:
        """Create/overwrite `path` with `data` and make it durable; returns bytes written.

        Local: write, fsync the file, fsync its directory (at the end of the open
        `durability.deferred()` batch, if any). Elsewhere: a completed upload is durable.
        Not atomic by itself: readers may see a partial file until it returns (use `write_atomic`
        or a temporary name such as `.cleaned`).
        """
        chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
        written = 0
        if path.endswith(".timeindex.cleaned"):
            crash_point("rewrite")
        if self.is_local:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for chunk in chunks:
                    written += _write_all(fd, chunk)
                synced_later = durability.later(path)
                if not synced_later:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if not synced_later:
                self.fsync_dir(posixpath.dirname(path) or ".")
            return written
        # compression=None: the default 'detect' would guess a codec from the file extension.
        with self.fs.open_output_stream(path, compression=None) as out:
            for chunk in chunks:
                out.write(chunk)
                written += len(memoryview(chunk).cast("B"))
        return written

    def write_atomic(self, path: str, data: bytes | memoryview | Iterable[bytes]) -> int:
        """Replace `path` so that readers see either the old or the new content (checkpoints).

        With atomic rename: `<path>.tmp`, fsync, rename over `path`, fsync dir (`CheckpointFile`).
        On object stores a single upload already replaces the object atomically, but only if
        nothing fails while it streams: pyarrow has no abort, and closing the stream on an
        exception (the `with` block) completes the upload with what was written so far. So the
        data is joined first; only the upload itself can then fail (a killed process never
        completes it). Fine for the small files this is for (checkpoints, reports).
        """
        if not self.atomic_rename:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                data = b"".join(bytes(memoryview(c).cast("B")) for c in data)
            return self.write_durable(path, data)
        tmp = path + TMP_SUFFIX
        written = self.write_durable(tmp, data)
        self.rename(tmp, path)
        return written

    def rename(self, src: str, dst: str, *, durable: bool = True) -> None:
        """Rename, replacing `dst`. Atomic locally (os.replace) and durable (dir fsync), unless
        `durable=False`: the caller fsyncs the directory itself once a batch of renames is done.

        Non-local filesystems: pyarrow `move`; where the backend refuses to overwrite (HDFS) the
        destination is deleted first, leaving a short window without `dst`.
        On S3/GCS this is copy + delete (see `atomic_rename`).
        """
        if self.is_local:
            os.replace(src, dst)
            if not durable:
                return
            self.fsync_dir(posixpath.dirname(dst) or ".")
            if posixpath.dirname(src) != posixpath.dirname(dst):
                self.fsync_dir(posixpath.dirname(src) or ".")
            return
        if self._base_type == "hdfs" and self.exists(dst):
            self.fs.delete_file(dst)
        deleter = self._s3_deleter()
        if deleter is None:
            self.fs.move(src, dst)
            return
        self.fs.copy_file(src, dst)  # what pyarrow's move does, without its parent marker
        deleter.delete(self._s3_path(src))

    def delete(self, path: str, *, missing_ok: bool = False) -> None:
        deleter = self._s3_deleter()
        if deleter is not None:
            if not missing_ok and not self.exists(path):
                raise FileNotFoundError(path)
            deleter.delete(self._s3_path(path))
            return
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            if not missing_ok:
                raise

    @property
    def is_s3(self) -> bool:
        return self._base_type == "s3"

    def bucket_versioning(self, path: str) -> str | None:
        """S3: the versioning status of `path`'s bucket ('Enabled', 'Suspended'; None if never
        turned on); OSError if it cannot be read. None elsewhere."""
        if not self.is_s3:
            return None
        deleter = self._s3_deleter()
        if deleter is None:
            raise OSError(
                "an assumed role (role_arn) is known to pyarrow only: the bucket's versioning cannot be read"
            )
        return deleter.versioning(self._s3_path(path).partition("/")[0])

    def purge_noncurrent_versions(self, directory: str, wanted: Callable[[str], bool]) -> tuple[int, int]:
        """S3: delete the noncurrent versions and delete markers of the objects directly in
        `directory` whose name `wanted(name)` accepts (s3.py `purge_noncurrent`); (count, bytes)."""
        deleter = self._s3_deleter()
        if deleter is None:
            raise OSError(
                "noncurrent versions can be purged on S3 only, and not under an assumed role (role_arn)"
            )
        return deleter.purge_noncurrent(self._s3_path(directory), wanted)

    def _s3_deleter(self) -> ObjectDeleter | None:
        """On S3, the boto3 deleter that leaves no directory marker behind (s3.py); else None.
        An assumed role (`role_arn`) stays with pyarrow, which alone knows its session."""
        if self._deleter is None and self._base_type == "s3":
            s3fs = base_s3(self.fs)
            if s3fs is not None and not s3fs.__reduce__()[1][0].get("role_arn"):
                self._deleter = ObjectDeleter(s3fs)
        return self._deleter

    def _s3_path(self, path: str) -> str:
        """`bucket/key` of `path` on the base S3 filesystem (a SubTreeFileSystem prefixes it)."""
        filesystem = self.fs
        while isinstance(filesystem, pafs.SubTreeFileSystem):
            path = posixpath.join(filesystem.base_path.rstrip("/"), path.lstrip("/"))
            filesystem = filesystem.base_fs
        return path

    def mkdir(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    def set_mtime(self, path: str, mtime_ns: int) -> bool:
        """Set the modification time (the cleaner carries the newest source mtime over to the
        cleaned segment; retention and the legacy delete horizon read it). Local disk only;
        elsewhere a no-op returning False (object stores set mtime at upload and cannot change it).
        """
        if not self.is_local:
            return False
        atime_ns = os.stat(path).st_atime_ns
        os.utime(path, ns=(atime_ns, mtime_ns))
        return True

    def fsync_dir(self, path: str) -> None:
        """Make created/renamed entries of a local directory durable. No-op elsewhere."""
        if self.is_local:
            durability.fsync_path(path, os.O_RDONLY | os.O_DIRECTORY)


def _write_all(fd: int, chunk: Buffer) -> int:
    view = memoryview(chunk).cast("B")
    total = len(view)
    while view:
        view = view[os.write(fd, view) :]
    return total


# --- locks --------------------------------------------------------------------------------------


class RunLock:
    """Exclusive, non-blocking `flock` on `<logdir>/.compaction.lock`. Use as a context manager.

    The file exists only while a run holds it: `release` unlinks it before unlocking, so a log dir
    is left as found. A run that opened the file just before the holder unlinked it would lock an
    orphan inode, so `acquire` checks that the inode it locked is still the one at the path."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, COMPACTION_LOCK_FILE)
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise LockHeldError(
                    f"{self.path} is locked: another compaction run is working on this log dir"
                ) from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                return self
            os.close(fd)  # the holder released and removed it meanwhile: lock the new file

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire_run_lock(log_dir: str) -> RunLock:
    """Take the run lock of a local log dir or raise `LockHeldError`."""
    return RunLock(log_dir).acquire()


def kafka_lock_held(log_dir: str) -> bool:
    """True if another process holds the broker's `<logdir>/.lock` (a broker serves this dir).

    Probes with a non-blocking POSIX record lock (what Java's `tryLock` holds; OFD locks
    conflict with it too), then a non-blocking `flock`, releasing each at once. A missing `.lock`
    file means no broker has used the dir (we do not create it). Limits: POSIX locks are per
    process, so a lock held by *this* process is not seen; on NFS the result is as good as the
    server's lock manager.
    """
    path = os.path.join(log_dir, KAFKA_LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR)
        kind = fcntl.LOCK_EX
    except FileNotFoundError:
        return False
    except PermissionError:
        # A read lock still conflicts with the broker's write lock.
        fd = os.open(path, os.O_RDONLY)
        kind = fcntl.LOCK_SH
    try:
        for take in (fcntl.lockf, fcntl.flock):
            try:
                take(fd, kind | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno in (errno.EACCES, errno.EAGAIN):
                    return True
                raise
            take(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def ensure_kafka_not_running(log_dir: str, ignore: bool = False) -> bool:
    """Raise `LockHeldError` when the broker's `.lock` is held, unless `ignore` (then True: the
    caller overrides a held lock)."""
    if not kafka_lock_held(log_dir):
        return False
    if ignore:
        return True
    raise LockHeldError(
        f"{os.path.join(log_dir, KAFKA_LOCK_FILE)} is locked: a Kafka broker is serving this log dir; "
        "stop it before compacting offline"
    )
