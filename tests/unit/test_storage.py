"""Storage over pyarrow.fs: local round trip, durability paths, pickling, locks."""

import os
import pickle
import shutil
import subprocess
import sys
import textwrap

import pyarrow.fs as pafs
import pytest

from compaction.errors import FileTooLargeError, LockHeldError
from compaction.format.layout import FILE_MAX_BYTES
from compaction.runtime import faults
from compaction.runtime.segment_io import read_segment_bytes
from compaction.runtime.storage import (
    BROKER_FILE,
    COMPACTION_LOCK_FILE,
    KAFKA_LOCK_FILE,
    Bound,
    FileInfo,
    RunLock,
    Storage,
    acquire_run_lock,
    ensure_kafka_not_running,
    kafka_lock_held,
)


def test_storage_imports_without_the_packages_its_annotations_name():
    """`typing_extensions` (for `Buffer`) is no dependency of the package: only type checkers
    import it."""
    code = "import sys; sys.modules['typing_extensions'] = None; import compaction.runtime.storage"
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo)
    assert out.returncode == 0, out.stderr


def test_for_uri_local_forms(tmp_path):
    for uri in (str(tmp_path), f"file://{tmp_path}"):
        storage, path = Storage.for_uri(uri)
        assert path == str(tmp_path)
        assert storage.is_local and storage.atomic_rename
    storage, path = Storage.for_uri("relative/dir")
    assert path == os.path.abspath("relative/dir")


def test_for_uri_s3_without_network():
    storage, path = Storage.for_uri("s3://bucket/logs/dir?region=us-east-1")
    assert path == "bucket/logs/dir"
    assert not storage.is_local
    assert not storage.atomic_rename
    clone = pickle.loads(pickle.dumps(storage))
    assert clone._fs is None  # rebuilt lazily from the URI in the executor
    assert clone.fs.type_name == "s3" and clone.fs.region == "us-east-1"


def test_round_trip_local(tmp_path):
    storage, root = Storage.for_uri(f"file://{tmp_path}")
    storage.mkdir(storage.join(root, "t-0"))
    path = storage.join(root, "t-0", "00000000000000000000.log")
    assert not storage.exists(path)
    assert storage.write_durable(path, b"hello world") == 11
    assert storage.exists(path)
    assert storage.read_bytes(path) == b"hello world"
    assert storage.read_bytes(path, 6) == b"world"
    assert storage.read_bytes(path, 2, 3) == b"llo"
    assert storage.read_bytes(path, 11) == b""
    # chunks, including memoryviews of non-byte arrays
    n = storage.write_durable(path, iter([b"ab", memoryview(b"cd"), bytearray(b"ef")]))
    assert n == 6 and storage.read_bytes(path) == b"abcdef"
    with storage.open_input(path) as f:
        f.seek(2)
        assert f.read(2) == b"cd"

    storage.write_durable(storage.join(root, "t-0", "00000000000000000000.index"), b"")
    listing = storage.list_dir(storage.join(root, "t-0"))
    assert [f.name for f in listing] == ["00000000000000000000.index", "00000000000000000000.log"]
    assert listing[1] == FileInfo("00000000000000000000.log", path, 6, listing[1].mtime_ns, False)
    assert listing[1].mtime_ns == os.stat(path).st_mtime_ns
    top = storage.list_dir(root)
    assert [(f.name, f.is_dir) for f in top] == [("t-0", True)]
    with pytest.raises(FileNotFoundError):
        storage.list_dir(storage.join(root, "missing"))

    # rename replaces the destination atomically
    other = storage.join(root, "t-0", "00000000000000000000.log.cleaned")
    storage.write_durable(other, b"new")
    storage.rename(other, path)
    assert storage.read_bytes(path) == b"new" and not storage.exists(other)

    assert storage.set_mtime(path, 1_600_000_000_123_456_789)
    assert os.stat(path).st_mtime_ns == 1_600_000_000_123_456_789
    assert storage.info(path).mtime_ns == 1_600_000_000_123_456_789

    storage.delete(path)
    assert not storage.exists(path)
    with pytest.raises(FileNotFoundError):
        storage.delete(path)
    storage.delete(path, missing_ok=True)
    storage.fsync_dir(root)


def test_write_atomic_leaves_no_tmp(tmp_path):
    storage = Storage.local()
    path = str(tmp_path / "cleaner-offset-checkpoint")
    storage.write_atomic(path, b"0\n0\n")
    storage.write_atomic(path, b"0\n1\nt 0 5\n")
    assert open(path, "rb").read() == b"0\n1\nt 0 5\n"
    assert os.listdir(tmp_path) == ["cleaner-offset-checkpoint"]


def _fsynced(monkeypatch) -> list[str]:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_write_durable_fsyncs_file_and_dir(tmp_path, monkeypatch):
    synced = _fsynced(monkeypatch)
    path = str(tmp_path / "x.log")
    Storage.local().write_durable(path, b"abc")
    assert synced == [path, str(tmp_path)]


SEG = "00000000000000000010"


@pytest.mark.parametrize(
    "name, fires",
    [
        (f"{SEG}.log.cleaned", False),
        (f"{SEG}.index.cleaned", False),
        (f"{SEG}.timeindex.cleaned", True),  # a rewrite's last file: `.log` and `.index` are written
        (f"{SEG}.txnindex.cleaned", False),
        (f"{SEG}.timeindex", False),  # a rebuilt index, or anything else not the rewrite's
        (f"{SEG}.timeindex.swap", False),
        ("cleaner-offset-checkpoint", False),
    ],
)
def test_the_rewrite_crash_point_fires_on_the_time_index_a_rewrite_writes_and_no_other_write(
    tmp_path, monkeypatch, name, fires
):
    """The crash tests' `rewrite` step (runtime/faults.py) stops a task between a cleaned
    segment's `.index` and its `.timeindex`: armed to raise, only that write reaches it, before
    the file is made."""
    monkeypatch.setattr(faults, "_arrivals", {})
    monkeypatch.setenv(faults.ENV, "rewrite")
    monkeypatch.setenv(faults.HOW_ENV, "raise")
    path = str(tmp_path / name)
    if fires:
        with pytest.raises(AssertionError, match="crash point rewrite"):
            Storage.local().write_durable(path, b"abc")
        assert os.listdir(tmp_path) == []
    else:
        assert Storage.local().write_durable(path, b"abc") == 3
        assert os.listdir(tmp_path) == [name]
    assert faults._arrivals == ({"rewrite": 1} if fires else {})


def test_written_files_have_the_mode_of_kafkas_own(tmp_path):
    """rw-r--r-- under the usual umask, as a broker writes its segments: a broker or tool running
    as another user of the group reads them, and none can write them."""
    old = os.umask(0o022)
    try:
        Storage.local().write_durable(str(tmp_path / "x.log"), b"abc")
        Storage.local().write_atomic(str(tmp_path / "cleaner-offset-checkpoint"), b"0\n0\n")
    finally:
        os.umask(old)
    assert {f.name: f.stat().st_mode & 0o777 for f in tmp_path.iterdir()} == {
        "x.log": 0o644,
        "cleaner-offset-checkpoint": 0o644,
    }


def test_a_durable_rename_fsyncs_each_directory_it_changes(tmp_path, monkeypatch):
    """A rename is durable once the directories whose entries it changed are fsynced: the
    destination's, and the source's when it left another one. `durable=False` leaves that to the
    caller (one fsync after a batch of renames)."""
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "x").write_bytes(d.encode())
    synced = _fsynced(monkeypatch)
    storage = Storage.local()
    storage.rename(str(tmp_path / "a" / "x"), str(tmp_path / "a" / "y"))
    assert synced == [str(tmp_path / "a")]
    synced.clear()
    storage.rename(str(tmp_path / "a" / "y"), str(tmp_path / "b" / "z"))
    assert synced == [str(tmp_path / "b"), str(tmp_path / "a")]
    synced.clear()
    storage.rename(str(tmp_path / "b" / "z"), str(tmp_path / "b" / "w"), durable=False)
    assert synced == []
    assert sorted(os.listdir(tmp_path / "a")) == [] and sorted(os.listdir(tmp_path / "b")) == ["w", "x"]


def test_storage_pickles_and_works_in_another_process(tmp_path):
    storage, root = Storage.for_uri(f"file://{tmp_path}")
    clone = pickle.loads(pickle.dumps(storage))
    clone.write_durable(clone.join(root, "a"), b"1")
    assert storage.read_bytes(storage.join(root, "a")) == b"1"
    # plain Storage() (no URI) pickles its pyarrow filesystem
    for local in (Storage.local(), Storage()):
        plain = pickle.loads(pickle.dumps(local))
        assert plain.is_local and plain.read_bytes(str(tmp_path / "a")) == b"1"
    # and in a separate interpreter, as in a Spark executor
    code = (
        "import pickle, sys; s = pickle.loads(sys.stdin.buffer.read()); "
        "sys.stdout.write(s.read_bytes(%r).decode())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code % str(tmp_path / "a")],
        input=pickle.dumps(storage),
        capture_output=True,
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert out.stdout == b"1"


def test_non_local_filesystem_paths(tmp_path):
    # SubTreeFileSystem stands in for a remote store: no fsync, no set_mtime, pyarrow streams.
    storage = Storage(pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()))
    assert not storage.is_local and storage.atomic_rename
    storage.mkdir("d")
    storage.write_durable("d/f", [b"ab", b"c"])
    assert storage.read_bytes("d/f") == b"abc"
    storage.write_atomic("d/ckpt", b"0\n0\n")
    assert storage.read_bytes("d/ckpt") == b"0\n0\n" and not storage.exists("d/ckpt.tmp")
    storage.rename("d/f", "d/g")
    assert [f.name for f in storage.list_dir("d")] == ["ckpt", "g"]
    assert storage.set_mtime("d/g", 1) is False
    storage.fsync_dir("d")  # no-op
    assert pickle.loads(pickle.dumps(storage)).read_bytes("d/g") == b"abc"


def test_an_assumed_role_stays_with_pyarrow():
    """Under an assumed role (`role_arn`) only pyarrow holds the session: no boto3 deleter is made
    (it would act with other credentials), and what needs one is an OSError naming the role."""
    storage = Storage(pafs.S3FileSystem(role_arn="arn:aws:iam::123456789012:role/c", region="us-east-1"))
    assert storage.is_s3 and storage._s3_deleter() is None
    with pytest.raises(OSError, match=r"assumed role \(role_arn\)"):
        storage.bucket_versioning("bucket/logs")
    with pytest.raises(OSError, match=r"assumed role \(role_arn\)"):
        storage.purge_noncurrent_versions("bucket/logs", lambda name: True)
    keys = Storage(pafs.S3FileSystem(access_key="AKIA", secret_key="s3cret", region="us-east-1"))
    assert keys._s3_deleter() is not None and keys._s3_deleter() is keys._s3_deleter()


def test_mock_filesystem_has_no_compression_detection():
    # A '.gz'-looking name must be written as-is (compression=None).
    storage = Storage(pafs._MockFileSystem())
    storage.write_durable("x.log.gz", b"raw")
    assert storage.read_bytes("x.log.gz") == b"raw"


# --- reads and listings: every filesystem answers alike -----------------------------------------

DATA = b"hello world"  # 11 bytes

# (offset, length) -> the bytes every read gives: lengths past the end stop there, and a read
# from the end or past it is empty.
READS = [
    ((0, None), DATA),
    ((6, None), b"world"),
    ((2, 3), b"llo"),
    ((0, 1), b"h"),
    ((10, 1), b"d"),
    ((10, None), b"d"),
    ((9, 5), b"ld"),
    ((11, None), b""),
    ((11, 5), b""),
    ((20, None), b""),
    ((0, 0), b""),
]


def _stores(tmp_path):
    """The local disk, a pyarrow path over it (no OS calls) and pyarrow's in-memory store (which
    refuses a read past the end, as S3 does), each holding `d/f` with DATA."""
    mock = pafs._MockFileSystem()
    mock.create_dir("d")
    with mock.open_output_stream("d/f") as out:
        out.write(DATA)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(DATA)
    return [
        (Storage.local(), str(tmp_path / "d" / "f")),
        (Storage(pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())), "d/f"),
        (Storage(mock), "d/f"),
    ]


@pytest.mark.parametrize(("at", "expected"), READS)
def test_reads_stop_at_the_end_of_the_file_on_every_filesystem(tmp_path, at, expected):
    for storage, path in _stores(tmp_path):
        assert storage.read_bytes(path, *at) == expected, (storage, at)
        assert storage.read_small(path, *at) == expected, (storage, at)
        assert storage.read_bytes(path) == storage.read_small(path) == DATA


def test_a_small_read_goes_on_after_a_short_pread(tmp_path, monkeypatch):
    """POSIX lets `pread` return fewer bytes than asked (a signal, a network filesystem): the read
    goes on from where it stopped until it has them all or the file ends."""
    path = str(tmp_path / "f")
    (tmp_path / "f").write_bytes(DATA)
    real_pread = os.pread
    calls = []

    def pread(fd, n, offset):
        calls.append((n, offset))
        return real_pread(fd, min(n, 3), offset)

    monkeypatch.setattr(os, "pread", pread)
    storage = Storage.local()
    for at, expected in READS:
        assert storage.read_small(path, *at) == expected, at
    calls.clear()
    assert storage.read_small(path, 1, 8) == b"ello wor"
    assert calls == [(8, 1), (5, 4), (2, 7)]
    calls.clear()
    assert storage.read_small(path, 4) == b"o world"
    assert calls == [(7, 4), (4, 7), (1, 10)]  # it asks for the rest only: no call past the end
    calls.clear()
    assert storage.read_small(path, 11) == b"" and calls == []  # nothing left: nothing asked


def test_a_scan_and_a_listing_report_the_same_entries(tmp_path):
    """`scan_dir` (local: `os.scandir`, sizes and mtimes on first use) gives what `list_dir` does,
    directories with size -1, and says which entries are links (a partition linked from another
    disk); elsewhere it is the listing itself."""
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(DATA)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "t-1")
    (tmp_path / "cleaner-offset-checkpoint").write_bytes(b"0\n0\n")
    storage = Storage.local()
    scanned = sorted(storage.scan_dir(str(tmp_path)), key=lambda f: f.name)
    listed = storage.list_dir(str(tmp_path))
    fields = lambda f: (f.name, f.path, f.size, f.mtime_ns, f.is_dir)  # noqa: E731
    assert [fields(f) for f in scanned] == [fields(f) for f in listed]
    assert [(f.name, f.size, f.is_dir, f.is_link) for f in scanned] == [
        ("cleaner-offset-checkpoint", 4, False, False),
        ("elsewhere", -1, True, False),
        ("t-0", -1, True, False),
        ("t-1", -1, True, True),
    ]
    assert [fields(storage.info(f.path)) for f in scanned] == [fields(f) for f in listed]
    assert scanned[0].mtime_ns == os.stat(tmp_path / "cleaner-offset-checkpoint").st_mtime_ns
    remote = Storage(pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()))
    assert [fields(f) for f in remote.scan_dir("t-0")] == [fields(f) for f in remote.list_dir("t-0")]
    assert [(f.name, f.size) for f in remote.scan_dir("t-0")] == [("00000000000000000000.log", 11)]
    assert [(f.name, f.size) for f in remote.list_dir("")][-2:] == [("t-0", -1), ("t-1", -1)]
    assert remote.info("t-0").size == -1


def test_mkdir_makes_the_missing_parents(tmp_path):
    storage = Storage.local()
    storage.mkdir(str(tmp_path / "a" / "b" / "t-0"))
    storage.mkdir(str(tmp_path / "a" / "b" / "t-0"))  # already there: nothing to do
    assert (tmp_path / "a" / "b" / "t-0").is_dir()


def test_a_storage_is_shown_without_its_credentials():
    storage, _ = Storage.for_uri("s3://AKIA:s3cret@bucket/logs?region=us-east-1")
    assert repr(storage) == "Storage(s3://***@bucket/logs?region=us-east-1)"
    assert repr(Storage.local()) == "Storage(local)"


# --- locks ---------------------------------------------------------------------------------------


def test_run_lock_is_exclusive(tmp_path):
    with RunLock(str(tmp_path)) as lock:
        assert lock.held
        assert os.path.exists(tmp_path / COMPACTION_LOCK_FILE)
        with pytest.raises(LockHeldError, match="another compaction run"):
            acquire_run_lock(str(tmp_path))
    again = acquire_run_lock(str(tmp_path))
    again.release()
    assert not again.held


def test_run_lock_held_by_another_process(tmp_path):
    holder = _hold_lock(tmp_path / COMPACTION_LOCK_FILE, "flock")
    try:
        with pytest.raises(LockHeldError):
            acquire_run_lock(str(tmp_path))
    finally:
        holder.kill()
        holder.wait()
    acquire_run_lock(str(tmp_path)).release()


def _hold_lock(path, kind):
    """A child process that locks `path` the way the broker (Java FileChannel.tryLock: POSIX
    fcntl lock) or a compaction run (flock) does, and waits."""
    code = textwrap.dedent(f"""
        import fcntl, os, sys
        fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT)
        {"fcntl.lockf" if kind == "posix" else "fcntl.flock"}(fd, fcntl.LOCK_EX)
        print("locked", flush=True)
        sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"locked\n"
    return proc


def test_kafka_lock_detection(tmp_path):
    assert not kafka_lock_held(str(tmp_path))  # no .lock file: never served by a broker
    assert not os.path.exists(tmp_path / KAFKA_LOCK_FILE)  # and we did not create one
    (tmp_path / KAFKA_LOCK_FILE).write_bytes(b"")
    assert not kafka_lock_held(str(tmp_path))  # left over by a stopped broker
    ensure_kafka_not_running(str(tmp_path))
    broker = _hold_lock(tmp_path / KAFKA_LOCK_FILE, "posix")
    try:
        assert kafka_lock_held(str(tmp_path))
        with pytest.raises(LockHeldError, match="Kafka broker"):
            ensure_kafka_not_running(str(tmp_path))
    finally:
        broker.kill()
        broker.wait()
    assert not kafka_lock_held(str(tmp_path))


def test_the_run_lock_file_has_the_mode_of_kafkas_own(tmp_path):
    old = os.umask(0o022)
    try:
        with RunLock(str(tmp_path)):
            assert (tmp_path / COMPACTION_LOCK_FILE).stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(old)


def test_a_run_lock_whose_file_was_removed_meanwhile_is_released(tmp_path):
    """Someone removed the lock file while a run held it: the run still ends cleanly and unlocks."""
    lock = acquire_run_lock(str(tmp_path))
    os.unlink(tmp_path / COMPACTION_LOCK_FILE)
    lock.release()
    assert not lock.held and os.listdir(tmp_path) == []
    acquire_run_lock(str(tmp_path)).release()


def test_a_held_broker_lock_is_overridden_only_when_asked(tmp_path):
    """`ensure_kafka_not_running` answers whether it overrode a held lock: False when none is held
    (with or without the override), True when it is held and `ignore` says go on; held and not
    ignored, it raises."""
    (tmp_path / KAFKA_LOCK_FILE).write_bytes(b"")
    assert ensure_kafka_not_running(str(tmp_path)) is False
    assert ensure_kafka_not_running(str(tmp_path), ignore=True) is False
    broker = _hold_lock(tmp_path / KAFKA_LOCK_FILE, "flock")
    try:
        assert ensure_kafka_not_running(str(tmp_path), ignore=True) is True
        with pytest.raises(LockHeldError, match=f"{tmp_path}/{KAFKA_LOCK_FILE} is locked: a Kafka broker"):
            ensure_kafka_not_running(str(tmp_path))
    finally:
        broker.kill()
        broker.wait()
    assert ensure_kafka_not_running(str(tmp_path)) is False


def _without_write_rights() -> list[str]:
    """The command prefix that runs a process which, like a tool running as another user than the
    broker's, cannot write a file the permission bits forbid (root: without CAP_DAC_OVERRIDE)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and no setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


@pytest.mark.parametrize("kind", ["posix", "flock"])
def test_a_broker_lock_this_user_cannot_write_is_still_seen_held(tmp_path, kind):
    """A broker's `.lock` is rw-r--r-- and its owner's: a tool running as another user opens it
    read-only, and its shared lock still conflicts with the broker's exclusive one."""
    lock_file = tmp_path / KAFKA_LOCK_FILE
    lock_file.write_bytes(b"")
    lock_file.chmod(0o444)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    check = [
        *_without_write_rights(),
        sys.executable,
        "-c",
        "import os, sys; from compaction.runtime.storage import kafka_lock_held as held\n"
        "try:\n    os.open(sys.argv[2], os.O_RDWR)\nexcept PermissionError:\n    pass\n"
        "else:\n    sys.exit('the .lock is writable here')\n"
        "print(held(sys.argv[1]))",
        str(tmp_path),
        str(lock_file),
    ]

    def held() -> str:
        out = subprocess.run(check, capture_output=True, text=True, cwd=repo)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert held() == "False"
    broker = _hold_lock(lock_file, kind)
    try:
        assert held() == "True"
    finally:
        broker.kill()
        broker.wait()
    assert held() == "False"


def test_run_lock_leaves_no_file_behind(tmp_path):
    # A run must not leave in a user's dir a file it did not find there.
    before = sorted(os.listdir(tmp_path))
    with RunLock(str(tmp_path)):
        assert (tmp_path / COMPACTION_LOCK_FILE).exists()
    assert sorted(os.listdir(tmp_path)) == before


def test_run_lock_never_locks_a_file_its_holder_removed(tmp_path, monkeypatch):
    # B opened the lock file while A held it; A released (unlinking it); B's flock then takes the
    # orphan inode, so B must notice and lock the file at the path instead, which C then sees held.
    path = tmp_path / COMPACTION_LOCK_FILE
    a = acquire_run_lock(str(tmp_path))
    stale_fd = os.open(path, os.O_RDWR)
    a.release()
    import fcntl

    real_open = os.open
    calls = []

    def open_stale_first(p, flags, *mode):
        calls.append(p)
        return os.dup(stale_fd) if len(calls) == 1 else real_open(p, flags, *mode)

    monkeypatch.setattr(os, "open", open_stale_first)
    b = acquire_run_lock(str(tmp_path))
    monkeypatch.setattr(os, "open", real_open)
    assert len(calls) == 2  # the orphan was refused, the path's file locked
    with pytest.raises(LockHeldError):
        acquire_run_lock(str(tmp_path))
    b.release()
    fcntl.flock(stale_fd, fcntl.LOCK_UN)
    os.close(stale_fd)


class _DeletesSeen:
    """A filesystem that records the files deleted through it (the rest as the one it wraps)."""

    def __init__(self, fs: pafs.FileSystem) -> None:
        self._fs, self.deleted = fs, []

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def delete_file(self, path: str) -> None:
        self.deleted.append(path)
        self._fs.delete_file(path)


def test_a_store_whose_move_replaces_is_never_left_without_the_destination():
    """On a store whose move replaces its destination, a rename over a file moves onto it: no
    delete first, so a reader never finds the name missing (only HDFS refuses to overwrite)."""
    fs = pafs._MockFileSystem()
    fs.create_dir("b")
    for name, data in (("b/checkpoint.tmp", b"new"), ("b/checkpoint", b"old")):
        with fs.open_output_stream(name) as out:
            out.write(data)
    seen = _DeletesSeen(fs)
    Storage(seen).rename("b/checkpoint.tmp", "b/checkpoint")
    assert seen.deleted == []
    assert Storage(fs).read_bytes("b/checkpoint") == b"new" and not Storage(fs).exists("b/checkpoint.tmp")


def _sparse(path, size: int) -> str:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return str(path)


@pytest.mark.parametrize("local", [True, False], ids=["os", "pyarrow"])
@pytest.mark.parametrize(
    "size, most, refused",
    [
        (0, 0, False),
        (100, 100, False),
        (101, 100, True),
        (FILE_MAX_BYTES, None, False),
        (FILE_MAX_BYTES + 1, None, True),
    ],
)
def test_a_whole_file_read_refuses_a_file_longer_than_its_kind_before_reading(
    tmp_path, local, size, most, refused
):
    """The bound on one read: at it the file is read, one byte past it nothing is (sparse files:
    a read of the refused ones would ask for gigabytes)."""
    storage = Storage.local() if local else Storage(pafs.LocalFileSystem())
    path = _sparse(tmp_path / "00000000000000000000.log", size)
    bound = BROKER_FILE if most is None else Bound(most, "a test allows")
    kw = {} if most is None else {"bound": bound}
    limit = bound.most
    if refused:
        for read in (storage.read_small, storage.read_bytes):
            with pytest.raises(FileTooLargeError) as err:
                read(path, **kw)
            assert (err.value.path, err.value.position, err.value.size, err.value.limit) == (
                path,
                limit,
                size,
                limit,
            )
            assert f"{path}: byte {limit}: {size} bytes, more than the {limit} {bound.what}" == str(err.value)
        # a range of it within the bound is still read
        assert storage.read_small(path, size - 8, 8, **kw) == bytes(8)
    elif size <= 1 << 20:
        assert storage.read_small(path, **kw) == storage.read_bytes(path, **kw) == bytes(size)


@pytest.mark.parametrize("mode", ["buffered", "direct", "mmap"])
def test_a_segment_longer_than_a_broker_loads_is_refused_in_every_read_mode(tmp_path, mode):
    path = _sparse(tmp_path / "00000000000000000000.log", FILE_MAX_BYTES + 1)
    with pytest.raises(FileTooLargeError) as err:
        read_segment_bytes(Storage.local(), path, mode)
    assert err.value.path == path and err.value.size == FILE_MAX_BYTES + 1


@pytest.mark.timeout(60)  # a read that opened the pipe would wait for a writer for ever
@pytest.mark.parametrize("kind", ["pipe", "directory"])
def test_a_read_refuses_what_is_not_a_regular_file_without_waiting(tmp_path, kind):
    path = str(tmp_path / "00000000000000000000.log")
    os.mkfifo(path) if kind == "pipe" else os.mkdir(path)
    storage = Storage.local()
    for read in (storage.read_small, storage.read_bytes, lambda p: read_segment_bytes(storage, p)):
        with pytest.raises(OSError, match="not a regular file"):
            read(path)
