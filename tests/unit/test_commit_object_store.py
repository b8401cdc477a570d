"""Crash safety of the commit on an object store without atomic rename.

The storage here is the real `Storage` code over an in-memory pyarrow `PyFileSystem` that behaves
like S3/GCS as far as the commit can tell:

* a PUT (an output stream) publishes the object whole when the stream is closed, or not at all;
* `move` (pyarrow's rename on S3/GCS) is a server-side copy, which overwrites the destination and
  is atomic per object, followed by a separate delete of the source;
* a delete removes one object; listings are strongly consistent (S3 since 2020, GCS always);
* there is no fsync (`fsync_dir` is a no-op off local disk).

`Storage._base_type` reports "s3", so `atomic_rename` is False and `write_atomic` takes its
object-store path. A crash is raised before the n-th primitive operation (PUT, copy, delete), for
every n, which includes the point between the copy and the delete of one rename: the source and
its copy then both exist. Recovery (and a crash during recovery, then recovery again) must leave
exactly the old or exactly the new segment set, byte for byte, and be idempotent.
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from test_commit import CLEANED, NEW_STATE, OLD, OLD_STATE, REPLACEMENTS, name

from compaction.runtime.checkpoint_files import read_checkpoint, write_checkpoint
from compaction.runtime.storage import TMP_SUFFIX, Storage
from compaction.steps.commit import INTENT_FILE, commit_partition
from compaction.steps.recover import recover_partition

PART = "bucket/logs/t-0"


class Crash(Exception):
    pass


class ObjectStore:
    """The bucket's contents, shared by every 'process' (Storage) that opens it, plus a crash
    schedule and a log of primitive operations."""

    def __init__(self, objects: dict[str, bytes] | None = None) -> None:
        self.objects: dict[str, bytes] = dict(objects or {})
        self.ops: list[tuple[str, str]] = []
        self.crash_before: int | None = None

    def op(self, kind: str, path: str) -> None:
        if self.crash_before is not None and len(self.ops) >= self.crash_before:
            raise Crash(f"crash before {kind} #{len(self.ops) + 1} {path}")
        self.ops.append((kind, path))

    def put(self, path: str, data: bytes) -> None:
        self.op("put", path)
        self.objects[path] = data

    def copy(self, src: str, dst: str) -> None:
        if src not in self.objects:
            raise FileNotFoundError(src)
        self.op("copy", f"{src} -> {dst}")
        self.objects[dst] = self.objects[src]  # overwrites, whole or not at all

    def delete(self, path: str) -> None:
        if path not in self.objects:
            raise FileNotFoundError(path)
        self.op("delete", path)
        del self.objects[path]

    def snapshot(self, prefix: str = PART) -> dict[str, bytes]:
        cut = len(prefix) + 1
        return {p[cut:]: d for p, d in sorted(self.objects.items()) if p.startswith(prefix + "/")}


class _Upload(io.RawIOBase):
    """An upload: buffered client-side, published by one PUT when closed (S3 PutObject or
    CompleteMultipartUpload). A crash before the close publishes nothing."""

    def __init__(self, store: ObjectStore, path: str) -> None:
        self._store, self._path, self._buf = store, path, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self._buf += bytes(b)
        return len(b)

    def close(self) -> None:
        if not self.closed:
            super().close()
            self._store.put(self._path, bytes(self._buf))


class ObjectStoreHandler(pafs.FileSystemHandler):
    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return self is not other

    def get_type_name(self) -> str:
        return "s3-double"

    def normalize_path(self, path: str) -> str:
        return path

    def _info(self, path: str) -> pafs.FileInfo:
        if path in self.store.objects:
            return pafs.FileInfo(path, pafs.FileType.File, size=len(self.store.objects[path]))
        if any(p.startswith(path.rstrip("/") + "/") for p in self.store.objects):
            return pafs.FileInfo(path, pafs.FileType.Directory)  # implicit "directory" prefix
        return pafs.FileInfo(path, pafs.FileType.NotFound)

    def get_file_info(self, paths):
        return [self._info(p) for p in paths]

    def get_file_info_selector(self, selector):
        prefix = selector.base_dir.rstrip("/") + "/"
        children = {p[len(prefix) :].split("/", 1)[0] for p in self.store.objects if p.startswith(prefix)}
        if not children and not selector.allow_not_found:
            raise FileNotFoundError(selector.base_dir)
        return [self._info(prefix + c) for c in sorted(children)]

    def create_dir(self, path, recursive):
        pass  # prefixes need no creation

    def delete_dir(self, path):
        raise NotImplementedError

    def delete_dir_contents(self, path, missing_dir_ok=False):
        raise NotImplementedError

    def delete_root_dir_contents(self):
        raise NotImplementedError

    def delete_file(self, path):
        self.store.delete(path)

    def move(self, src, dest):
        # pyarrow's S3FileSystem.Move: CopyObject, then DeleteObject. Not atomic as a pair.
        self.store.copy(src, dest)
        self.store.delete(src)

    def copy_file(self, src, dest):
        self.store.copy(src, dest)

    def open_input_stream(self, path):
        return pa.BufferReader(self.store.objects[path])

    def open_input_file(self, path):
        if path not in self.store.objects:
            raise FileNotFoundError(path)
        return pa.BufferReader(self.store.objects[path])

    def open_output_stream(self, path, metadata):
        return pa.PythonFile(_Upload(self.store, path), mode="w")

    def open_append_stream(self, path, metadata):
        raise NotImplementedError  # object stores have no append


class ObjectStoreStorage(Storage):
    """The real `Storage`, told that its backend is S3 (PyFileSystem reports "py::s3-double")."""

    @property
    def _base_type(self) -> str:
        return "s3"


def storage_over(store: ObjectStore) -> Storage:
    return ObjectStoreStorage(pafs.PyFileSystem(ObjectStoreHandler(store)))


def fresh_store() -> ObjectStore:
    files = {**OLD, **{n + ".cleaned": d for n, d in CLEANED.items()}}
    return ObjectStore({f"{PART}/{n}": d for n, d in files.items()})


def crashed(store: ObjectStore, fn, n: int | None) -> bool:
    """Run `fn(storage)` on a process that dies before the n-th operation from now (None: never).
    Returns True if it crashed. The crash may surface wrapped by pyarrow; the store tells."""
    store.crash_before = None if n is None else len(store.ops) + n
    try:
        fn(storage_over(store))
    except Exception:
        if store.crash_before is None or len(store.ops) < store.crash_before:
            raise  # a real error, not the injected crash
        return True
    finally:
        store.crash_before = None
    return False


def consistent(store: ObjectStore) -> str:
    state = store.snapshot()
    if state == OLD_STATE:
        return "old"
    assert state == NEW_STATE, f"mixed state: {sorted(state)}"
    return "new"


def commit(storage: Storage) -> None:
    commit_partition(storage, PART, REPLACEMENTS)


def recover(storage: Storage):
    return recover_partition(storage, PART)


def count_commit_ops() -> tuple[int, list[tuple[str, str]]]:
    store = fresh_store()
    assert not crashed(store, commit, None)
    assert store.snapshot() == NEW_STATE
    return len(store.ops), store.ops


def test_double_behaves_like_an_object_store():
    store = fresh_store()
    storage = storage_over(store)
    assert not storage.is_local and not storage.atomic_rename
    src, dst = f"{PART}/{name(0)}.cleaned", f"{PART}/{name(0)}.swap"
    storage.rename(src, dst)
    assert store.ops == [("copy", f"{src} -> {dst}"), ("delete", src)]
    # A rename interrupted between its copy and its delete leaves both objects, each whole.
    store.crash_before = len(store.ops) + 1
    back = f"{PART}/{name(0)}.cleaned"
    with pytest.raises(Crash):
        storage.rename(dst, back)
    assert store.objects[dst] == store.objects[back] == CLEANED[name(0)]


def test_commit_without_crash_gives_new_set():
    _, ops = count_commit_ops()
    kinds = {k for k, _ in ops}
    assert kinds == {"put", "copy", "delete"}  # intent PUT, renames as copy+delete, deletes
    store = fresh_store()
    crashed(store, commit, None)
    assert store.snapshot() == NEW_STATE
    assert recover(storage_over(store)).actions == []


def test_crash_before_every_primitive_op_recovers_to_old_or_new():
    total, ops = count_commit_ops()
    # Every rename is a copy followed by the delete of its source, so the n loop below stops
    # between the two halves of each rename as well as between renames.
    copies = [i for i, (k, _) in enumerate(ops) if k == "copy"]
    assert len(copies) >= 10 and all(ops[i + 1][0] == "delete" for i in copies)
    outcomes = []
    for n in range(total + 1):
        store = fresh_store()
        assert crashed(store, commit, n) == (n < total)
        crashed(store, recover, None)
        outcomes.append(consistent(store))
        assert INTENT_FILE not in store.snapshot()
        again = recover(storage_over(store))  # idempotent
        assert again.actions == [] and consistent(store) == outcomes[-1]
    assert outcomes[0] == "old" and outcomes[-1] == "new"
    switch = outcomes.index("new")
    assert outcomes[switch:] == ["new"] * (len(outcomes) - switch)
    # The switch is the delete of the last `.cleaned` source: until then recovery rolls back.
    last_cleaned_delete = max(i for i, (k, p) in enumerate(ops) if k == "delete" and p.endswith(".cleaned"))
    assert switch == last_cleaned_delete + 1


def test_crash_during_recovery_then_recover_again():
    total, _ = count_commit_ops()
    for n in range(total):
        probe = fresh_store()
        crashed(probe, commit, n)
        before = len(probe.ops)
        crashed(probe, recover, None)
        recovery_ops = len(probe.ops) - before
        for m in range(recovery_ops):
            store = fresh_store()
            assert crashed(store, commit, n)
            assert crashed(store, recover, m)
            # A second crash during the second recovery, then a clean one.
            for k in (0, 1, 2, None):
                crashed(store, recover, k)
            consistent(store)
            assert INTENT_FILE not in store.snapshot()
            assert recover(storage_over(store)).actions == []


def test_crash_mid_upload_of_intent_publishes_nothing():
    """The intent file is one PUT: a process dying while streaming it leaves no object, so no
    torn intent can exist on an object store (the local-disk torn-intent case does not arise)."""
    store = fresh_store()
    assert crashed(store, commit, 0)
    assert INTENT_FILE not in store.snapshot()
    crashed(store, recover, None)
    assert store.snapshot() == OLD_STATE


# --- the checkpoint ------------------------------------------------------------------------------

CKPT = "bucket/logs/cleaner-offset-checkpoint"


def test_checkpoint_write_is_one_put_and_old_or_new():
    old, new = {("t", 0): 5}, {("t", 0): 17, ("u", 1): 3}
    store = ObjectStore()
    crashed(store, lambda s: write_checkpoint(s, CKPT, old), None)
    store.ops.clear()
    # No `.tmp` + rename on an object store: exactly one PUT of the final name.
    assert not crashed(store, lambda s: write_checkpoint(s, CKPT, new), None)
    assert store.ops == [("put", CKPT)]
    assert read_checkpoint(storage_over(store), CKPT) == new
    assert not any(p.endswith(TMP_SUFFIX) for p in store.objects)
    # A crash before or during the upload leaves the previous checkpoint whole.
    crashed(store, lambda s: write_checkpoint(s, CKPT, old), None)
    assert crashed(store, lambda s: write_checkpoint(s, CKPT, new), 0)
    assert read_checkpoint(storage_over(store), CKPT) == old


def test_checkpoint_upload_interrupted_mid_stream_publishes_nothing():
    """pyarrow closes (= completes) an object upload when an exception leaves its `with` block,
    so `write_atomic` must not stream from an iterator that can fail: it joins the chunks first.
    (Without that, this test published the truncated b"0\\n" over the checkpoint.)"""
    store = ObjectStore({CKPT: b"0\n1\nt 0 5\n"})
    storage = storage_over(store)

    def chunks():
        yield b"0\n"
        raise Crash("process died mid-upload")

    with pytest.raises(Crash):
        storage.write_atomic(CKPT, chunks())
    assert store.objects[CKPT] == b"0\n1\nt 0 5\n" and store.ops == []
