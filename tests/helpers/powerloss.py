"""A durability model: a `Storage` that does every operation for real on a local directory and
records it, and the images a power loss after any recorded operation leaves behind.

Local semantics (POSIX, as ext4/xfs give them, and no more):
* a file's data is durable once the file is fsynced: before, the inode holds what its last fsync
  saw (nothing for a new file);
* a directory entry (create, rename, unlink) is durable once its directory is fsynced; of the
  entry operations after a directory's last fsync, any may survive without the others, in any
  order. All subsets are too many to try: the model tries every prefix (a journal committing them
  in order) and every suffix (the later ones without the earlier ones) of them.

Object-store semantics (S3, GCS): a PUT is atomic and durable when it returns, a DELETE too, a
rename is a copy (a PUT of the destination) then a DELETE of the source, and there is no fsync.

`images(k)` yields, for a power loss after the first `k` operations, the directory trees that may
be found on restart, as {path: bytes}; `all_images()` each distinct one of every k.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from e2ekit import files_under

from compaction.runtime import durability
from compaction.runtime import storage as storage_module
from compaction.runtime.storage import Storage


@dataclass(frozen=True)
class Op:
    kind: str  # create, write, fsync, rename, unlink, fsync_dir; object store: put, delete
    path: str
    other: str | None = None  # rename's destination
    data: bytes = b""


def _join(data) -> bytes:  # the object store's PUT body
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(memoryview(data).cast("B"))
    return b"".join(bytes(memoryview(c).cast("B")) for c in data)


class RecordingStorage(Storage):
    """The local filesystem, every durability-relevant system call of `Storage` recorded in `ops`:
    while `recording()` is active, the modules that make files durable (RECORDED: `Storage` and
    the fsyncs it leaves to runtime/durability.py) see an `os` whose open, write, fsync and
    replace are recorded as they run (so that an fsync the code leaves out is missing from the
    record too); unlinks are recorded at `delete`."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        recorder = _RecordingOs(self.ops)  # one for all: an fd opened in one module is synced in another
        for module in RECORDED:
            module.os = recorder
        try:
            yield
        finally:
            for module in RECORDED:
                module.os = os

    def delete(self, path: str, *, missing_ok: bool = False) -> None:
        if missing_ok and not os.path.exists(path):
            return
        self.ops.append(Op("unlink", path))
        super().delete(path, missing_ok=missing_ok)


RECORDED = (storage_module, durability)


class _RecordingOs:
    """`os` for the RECORDED modules, recording what becomes durable when (from any thread:
    `durability.sync` fsyncs from a pool)."""

    def __init__(self, ops: list[Op]) -> None:
        self._ops, self._paths, self._dirs = ops, {}, set()

    def __getattr__(self, name: str):
        return getattr(os, name)

    def open(self, path, flags, mode=0o777, **kw):
        fd = os.open(path, flags, mode, **kw)
        self._paths[fd] = os.fspath(path)
        if flags & os.O_DIRECTORY:
            self._dirs.add(fd)
        elif flags & os.O_CREAT and (flags & os.O_TRUNC or os.fstat(fd).st_size == 0):
            self._ops.append(Op("create", os.fspath(path)))
        return fd

    def write(self, fd, data):
        n = os.write(fd, data)
        self._ops.append(Op("write", self._paths[fd], data=bytes(memoryview(data).cast("B")[:n])))
        return n

    def fsync(self, fd):
        os.fsync(fd)
        self._ops.append(Op("fsync_dir" if fd in self._dirs else "fsync", self._paths[fd]))

    def close(self, fd):
        os.close(fd)
        self._paths.pop(fd, None)
        self._dirs.discard(fd)

    def replace(self, src, dst):
        os.replace(src, dst)
        self._ops.append(Op("rename", os.fspath(src), os.fspath(dst)))


class ObjectStoreRecording(Storage):
    """What the job does on an object store (no atomic rename, no fsync), done on a local
    directory and recorded as PUTs and DELETEs."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []

    @property
    def is_local(self) -> bool:
        return False

    @property
    def atomic_rename(self) -> bool:
        return False

    def write_durable(self, path: str, data) -> int:
        data = _join(data)
        self.ops.append(Op("put", path, data=data))
        with open(path, "wb") as fh:
            fh.write(data)
        return len(data)

    def rename(self, src: str, dst: str, *, durable: bool = True) -> None:
        with open(src, "rb") as fh:
            data = fh.read()
        self.ops.append(Op("put", dst, data=data))
        with open(dst, "wb") as fh:
            fh.write(data)
        self.ops.append(Op("delete", src))
        os.unlink(src)

    def delete(self, path: str, *, missing_ok: bool = False) -> None:
        if not os.path.exists(path):
            if missing_ok:
                return
            raise FileNotFoundError(path)
        self.ops.append(Op("delete", path))
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        pass


def snapshot(root: str) -> dict[str, bytes]:
    """Every file under `root`, by path: the durable state a recording starts from."""
    return dict(files_under(root))


class Model:
    """Replays `ops` from the durable tree `start`."""

    def __init__(self, start: dict[str, bytes], ops: list[Op]) -> None:
        self.start, self.ops = start, ops

    def images(self, k: int) -> Iterator[dict[str, bytes]]:
        """The trees a power loss right after `ops[:k]` may leave."""
        names = dict.fromkeys(self.start)  # path -> inode
        inodes = {i: [data, data] for i, data in enumerate(self.start.values())}  # [current, durable]
        for i, path in enumerate(self.start):
            names[path] = i
        durable = dict(names)  # per path: the entries as of their directory's last fsync
        pending: list[tuple[str, str, str | None, int | None]] = []  # (kind, path, dst, inode)
        for op in self.ops[:k]:
            if op.kind == "put":  # object store: atomic and durable
                inode = len(inodes)
                inodes[inode] = [op.data, op.data]
                names[op.path] = durable[op.path] = inode
            elif op.kind == "delete":
                names.pop(op.path)
                durable.pop(op.path, None)
            elif op.kind == "create":
                if op.path in names:
                    inodes[names[op.path]][0] = b""  # O_TRUNC
                else:
                    inode = len(inodes)
                    inodes[inode] = [b"", b""]
                    names[op.path] = inode
                    pending.append(("link", op.path, None, inode))
            elif op.kind == "write":
                inodes[names[op.path]][0] += op.data
            elif op.kind == "fsync":
                inode = inodes[names[op.path]]
                inode[1] = inode[0]
            elif op.kind == "rename":
                inode = names.pop(op.path)
                names[op.other] = inode
                pending.append(("rename", op.path, op.other, inode))
            elif op.kind == "unlink":
                names.pop(op.path)
                pending.append(("unlink", op.path, None, None))
            elif op.kind == "fsync_dir":
                d = op.path.rstrip("/")
                still = []
                for p in pending:  # the directory's entries, as they stand now, become durable
                    touched = [x for x in (p[1], p[2]) if x is not None]
                    if any(posixpath.dirname(x) == d for x in touched):
                        _apply(durable, p)
                    else:
                        still.append(p)
                pending = still
            else:  # pragma: no cover
                raise ValueError(op.kind)
        n = len(pending)
        for survivors in [pending[:j] for j in range(n + 1)] + [pending[j:] for j in range(1, n)]:
            tree = dict(durable)
            for p in survivors:
                _apply(tree, p)
            yield {path: inodes[inode][1] for path, inode in tree.items()}

    def all_images(self) -> Iterator[tuple[int, dict[str, bytes]]]:
        """(k, image) for every k, each distinct image once (at its first k)."""
        seen = set()
        for k in range(len(self.ops) + 1):
            for image in self.images(k):
                key = tuple(sorted((p, hash(d)) for p, d in image.items()))
                if key not in seen:
                    seen.add(key)
                    yield k, image


def _apply(tree: dict[str, int], p: tuple) -> None:
    kind, path, dst, inode = p
    if kind == "link":
        tree[path] = inode
    elif kind == "rename":
        if tree.get(path) == inode:
            del tree[path]
        tree[dst] = inode
    else:
        tree.pop(path, None)


def lay_out(image: dict[str, bytes], old_root: str, new_root: str) -> None:
    """Write `image` (paths under `old_root`) under `new_root`."""
    for path, data in image.items():
        target = os.path.join(new_root, os.path.relpath(path, old_root))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as fh:
            fh.write(data)


def count(ops: Iterable[Op], kind: str) -> int:
    return sum(op.kind == kind for op in ops)
