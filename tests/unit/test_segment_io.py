"""segment_io: buffered and direct reads into reused buffers give the bytes a memory map gives;
the last read of a file leaves it out of the page cache; a buffer is
never handed out while any view of it lives; unsupported filesystems fall back; read-ahead keeps
order and errors; staged (direct) writes give the bytes written, at every size around the buffer
and block boundaries; the job writes the same files in every read and write mode, with and
without its scan cache."""

from __future__ import annotations

import dataclasses
import errno
import os

import numpy as np
import pyarrow as pa
import pytest
from genkit import generate
from groupkit import outcomes
from test_rewrite_unit import NOW, _cleaned_files, _partition_specs

from compaction.kernels.buffers import ALIGN, BufferPool, held_bytes
from compaction.runtime import segment_io
from compaction.runtime.segment_io import ReadAhead, SegmentWriter, read_segment_bytes
from compaction.runtime.storage import Storage
from compaction.settings import DIRECT_MIN_BYTES, READ_MODES

LOCAL = Storage.local()


@pytest.fixture
def direct_always(monkeypatch):
    monkeypatch.setattr(segment_io, "direct_min_bytes", 0)


def _file(path, n, seed=1) -> bytes:
    data = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return data


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


# --- the pool --------------------------------------------------------------------------------


def test_pool_reuses_a_buffer_once_its_last_view_is_gone():
    pool = BufferPool()
    a = pool.take(1000)
    first = _address(a)
    assert first % ALIGN == 0 and len(a) == 1000 and a.flags.writeable
    del a
    b = pool.take(5000)
    assert _address(b) == first


@pytest.mark.parametrize("hold", ["slice", "memoryview", "arrow", "readonly view"])
def test_pool_never_hands_out_a_buffer_in_use(hold):
    pool = BufferPool()
    a = pool.take(4096)
    a[:] = 7
    holder = {
        "slice": lambda x: x[10:20],
        "memoryview": lambda x: memoryview(x)[5:],
        "arrow": lambda x: pa.py_buffer(x[100:]),
        "readonly view": lambda x: x[:].view(),
    }[hold](a)
    first = _address(a)
    del a
    b = pool.take(4096)
    assert _address(b) != first
    b[:] = 9  # must not show through the held view
    assert bytes(memoryview(holder)[:1]) == b"\x07"
    del holder
    c = pool.take(4096)
    assert _address(c) == first


def test_pool_never_hands_out_a_buffer_held_as_taken():
    pool = BufferPool()
    pool.take(4096)  # dropped at once
    a = pool.take(4096)  # served from the pool this time
    b = pool.take(4096)
    assert _address(a) != _address(b)
    del b
    assert _address(pool.take(10)) != _address(a)


def test_a_whole_buffer_is_its_room_and_in_use_until_dropped():
    pool = BufferPool()
    a = pool.take(100, whole=True)  # fresh
    at = _address(a)
    assert len(a) == 8 << 20
    del a
    a = pool.take(100, whole=True)  # from the pool
    assert _address(a) == at and len(a) == 8 << 20
    b = pool.take(100, whole=True)
    assert _address(b) != at  # a holds it
    del b
    assert _address(pool.take(100)) != at


def test_pool_serves_the_smallest_free_buffer_that_fits():
    pool = BufferPool()
    big, small = pool.take(20 << 20), pool.take(1 << 20)
    big_at, small_at = _address(big), _address(small)
    del big, small
    assert _address(pool.take(100)) == small_at
    assert _address(pool.take(9 << 20)) == big_at


def test_pool_hands_out_no_buffer_above_most():
    """`most`: a free buffer bigger than that (or than a new one for the request) is passed
    over and a new one made; one within it is reused."""
    pool = BufferPool()
    big = pool.take(40 << 20)
    big_at = _address(big)
    del big
    small = pool.take(1 << 20, most=2 << 20)  # 8 MiB as made: the 40 MiB one is passed over
    assert _address(small) != big_at and pool.held == (40 + 8) << 20
    small_at = _address(small)
    del small
    assert _address(pool.take(4 << 20, most=8 << 20)) == small_at
    assert _address(pool.take(17 << 20, most=40 << 20)) == big_at
    assert _address(pool.take(17 << 20, most=34 << 20)) not in (big_at, small_at)


def test_trim_forgets_free_buffers_only():
    pool = BufferPool()
    busy = pool.take(10)
    pool.take(10)  # dropped at once
    assert pool.held == 2 * (8 << 20)
    pool.trim()
    assert pool.held == 8 << 20
    assert _address(pool.take(10)) != _address(busy)


def test_pool_keeps_at_most_its_bound():
    pool = BufferPool(max_bytes=16 << 20)
    held = [pool.take(6 << 20), pool.take(6 << 20)]  # 8 MiB each after rounding
    extra = pool.take(1 << 20)  # still served, but not kept for reuse
    assert pool.held == 16 << 20
    del held, extra
    assert pool.held == 16 << 20


# --- reading ---------------------------------------------------------------------------------


SIZES = [0, 1, ALIGN - 1, ALIGN, ALIGN + 1, 3 * ALIGN + 17, (9 << 20) + 123, (segment_io.READ_CHUNK << 1) + 5]


@pytest.mark.parametrize("n", SIZES)
def test_every_read_mode_equals_the_file(tmp_path, direct_always, n):
    path = tmp_path / "00000000000000000000.log"
    data = _file(path, n)
    got = {mode: read_segment_bytes(LOCAL, str(path), mode) for mode in READ_MODES}
    got["buffered, last"] = read_segment_bytes(LOCAL, str(path), "buffered", last=True)
    assert all(a.tobytes() == data for a in got.values())
    assert not any(a.flags.writeable for a in got.values())  # one numba type for all


@pytest.fixture
def advice(monkeypatch):
    """The posix_fadvise advice given per file name, in order."""
    advised: dict[str, list[int]] = {}
    real = os.posix_fadvise

    def record(fd, offset, n, a):
        advised.setdefault(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")), []).append(a)
        return real(fd, offset, n, a)

    monkeypatch.setattr(segment_io, "_FADVISE", record)
    yield advised
    segment_io.configure(DIRECT_MIN_BYTES)


def test_a_task_keeps_at_most_its_budget_in_the_page_cache(tmp_path, advice):
    """The first files read within the budget stay cached until their last read drops them;
    the others are read with O_DIRECT both times, the cache left alone."""
    segment_io.configure(0, cache_bytes=2 * ALIGN)
    names = ["a.log", "b.log", "c.log"]
    data = {n: _file(tmp_path / n, ALIGN, seed=i) for i, n in enumerate(names)}
    seq, drop = os.POSIX_FADV_SEQUENTIAL, os.POSIX_FADV_DONTNEED
    for n in names:  # the scan
        assert read_segment_bytes(LOCAL, str(tmp_path / n), "buffered").tobytes() == data[n]
    assert advice == {"a.log": [seq], "b.log": [seq]}
    for n in names:  # the rewrite
        assert read_segment_bytes(LOCAL, str(tmp_path / n), "buffered", last=True).tobytes() == data[n]
    assert advice == {"a.log": [seq, seq, drop], "b.log": [seq, seq, drop]}
    read_segment_bytes(LOCAL, str(tmp_path / "c.log"), "buffered")  # the budget is free again
    assert advice["c.log"] == [seq]
    segment_io.configure(0, cache_bytes=ALIGN)  # a new task: what the last one left is forgotten
    read_segment_bytes(LOCAL, str(tmp_path / "a.log"), "buffered")
    assert advice["a.log"][-1] == seq and len(advice["a.log"]) == 4


def test_the_last_buffered_read_leaves_the_file_out_of_the_page_cache(tmp_path, monkeypatch):
    advised = []
    real = os.posix_fadvise
    monkeypatch.setattr(segment_io, "_FADVISE", lambda fd, o, n, a: (advised.append(a), real(fd, o, n, a)))
    path = tmp_path / "a.log"
    _file(path, 3 * ALIGN)
    read_segment_bytes(LOCAL, str(path), "buffered")
    assert advised == [os.POSIX_FADV_SEQUENTIAL]  # the rewrite reads it again, from the cache
    advised.clear()
    read_segment_bytes(LOCAL, str(path), "buffered", last=True)
    assert advised == [os.POSIX_FADV_SEQUENTIAL, os.POSIX_FADV_DONTNEED]


def test_prefetch_advises_each_file_that_exists_and_changes_none(tmp_path, monkeypatch):
    advised = []
    real = os.posix_fadvise
    monkeypatch.setattr(segment_io, "_FADVISE", lambda fd, o, n, a: (advised.append(a), real(fd, o, n, a)))
    _file(tmp_path / "a.index", 4096)
    before = (tmp_path / "a.index").read_bytes()
    segment_io.prefetch([str(tmp_path / "a.index"), str(tmp_path / "missing.timeindex")])
    assert advised == [os.POSIX_FADV_WILLNEED]
    assert (tmp_path / "a.index").read_bytes() == before


def test_the_scan_starts_reading_each_segments_indexes_before_its_bytes(tmp_path, monkeypatch):
    from compaction.steps import scan

    log_dir = tmp_path / "logs"
    generate(log_dir, "--topics t:1 --records 3000 --keys 300 --segment-bytes 40000 --seed 5")
    specs = _partition_specs(log_dir)
    events = []
    monkeypatch.setattr(scan, "prefetch", lambda paths: events.extend(os.path.basename(p) for p in paths))
    real = scan.read_segment_bytes
    monkeypatch.setattr(
        scan,
        "read_segment_bytes",
        lambda storage, path, *a: (events.append(os.path.basename(path)), real(storage, path, *a))[1],
    )
    scan.scan_partition(specs)
    bases = [s.base_offset for spec in specs for s in spec.segments]
    assert sorted(events) == sorted(f"{b:020d}{x}" for b in bases for x in (".index", ".timeindex", ".log"))
    for b in bases:  # the read-ahead thread reads the next segment meanwhile: segments interleave
        assert events.index(f"{b:020d}.timeindex") < events.index(f"{b:020d}.log")
        assert events.index(f"{b:020d}.index") < events.index(f"{b:020d}.log")


def test_direct_read_sees_writes_not_yet_flushed(tmp_path, direct_always):
    path = tmp_path / "a.log"
    _file(path, 3 * ALIGN)
    with open(path, "r+b") as fh:  # page cache only, no fsync
        fh.seek(ALIGN + 5)
        fh.write(b"fresh bytes")
    got = read_segment_bytes(LOCAL, str(path), "direct").tobytes()
    assert got[ALIGN + 5 : ALIGN + 16] == b"fresh bytes"


def test_small_segments_are_mapped(tmp_path, monkeypatch):
    monkeypatch.setattr(segment_io, "direct_min_bytes", 1 << 20)
    path = tmp_path / "a.log"
    _file(path, 1000)
    assert segment_io.is_mapped(read_segment_bytes(LOCAL, str(path), "direct"))
    monkeypatch.setattr(segment_io, "direct_min_bytes", 0)
    assert not segment_io.is_mapped(read_segment_bytes(LOCAL, str(path), "direct"))


@pytest.fixture
def open_refuses_direct(monkeypatch):
    """A filesystem that refuses O_DIRECT at open (EINVAL), as tmpfs does."""
    real_open = os.open

    def no_direct(p, flags, *a, **kw):
        if flags & segment_io._O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(p, flags, *a, **kw)

    monkeypatch.setattr(segment_io.os, "open", no_direct)


def test_direct_read_falls_back_where_the_filesystem_refuses_it(tmp_path, direct_always, open_refuses_direct):
    path = tmp_path / "a.log"
    data = _file(path, 2 * ALIGN + 3)
    assert read_segment_bytes(LOCAL, str(path), "direct").tobytes() == data


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no tmpfs at /dev/shm")
def test_direct_read_on_tmpfs(direct_always):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        path = Path(d) / "a.log"
        data = _file(path, 5 * ALIGN + 1)
        assert read_segment_bytes(LOCAL, str(path), "direct").tobytes() == data


def test_other_errors_are_not_swallowed(tmp_path, direct_always):
    with pytest.raises(FileNotFoundError):
        read_segment_bytes(LOCAL, str(tmp_path / "missing.log"), "direct")


# --- read-ahead ------------------------------------------------------------------------------


def test_read_ahead_gives_each_file_in_order_reading_each_once():
    calls = []

    def read(p):
        calls.append(p)
        return p.upper()

    paths = ["a", "b", "c", "d"]
    with ReadAhead(read, paths) as ahead:
        assert [ahead.get(i) for i in range(4)] == ["A", "B", "C", "D"]
    assert sorted(calls) == paths


def test_read_ahead_raises_the_error_of_the_file_asked_for():
    def read(p):
        if p == "bad":
            raise OSError(errno.EIO, "I/O error", p)
        return p

    with ReadAhead(read, ["ok", "bad", "never"]) as ahead:
        assert ahead.get(0) == "ok"
        with pytest.raises(OSError, match="I/O error"):
            ahead.get(1)


# --- staged writes -----------------------------------------------------------------------------

BUF = 4 * ALIGN  # a small staging buffer, so that the tests cross it often


def _chunks(sizes, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]


@pytest.mark.parametrize("mode", ["direct", "buffered"])
@pytest.mark.parametrize(
    "sizes",
    [
        [],
        [1],
        [ALIGN - 1],
        [ALIGN],
        [ALIGN + 1],
        [BUF - 1],
        [BUF],
        [BUF + 1],
        [BUF - 1, 1, 1],
        [3 * BUF + 5],
        [7] * 3000,
        [BUF // 2, BUF, BUF // 2 + 1, 17, 5 * BUF],
    ],
)
def test_staged_write_gives_the_bytes_written(tmp_path, mode, sizes):
    chunks = _chunks(sizes)
    path = tmp_path / "a.log.cleaned"
    w = SegmentWriter(str(path), mode, buffer_bytes=BUF)
    for i, c in enumerate(chunks):  # every kind of chunk the rewrite hands over
        w.write([c, c.tobytes(), memoryview(c), bytearray(c.tobytes())][i % 4])
    assert w.size == sum(sizes)
    w.close()
    assert path.read_bytes() == b"".join(c.tobytes() for c in chunks)
    assert w.direct == (mode == "direct")  # tmp_path is a real disk here, which takes O_DIRECT


def test_staged_write_copies_at_once(tmp_path):
    """The caller's buffer may be reused (or returned to the pool) right after `write`."""
    path = tmp_path / "a.log.cleaned"
    w = SegmentWriter(str(path), "direct", buffer_bytes=BUF)
    c = np.full(100, 7, np.uint8)
    w.write(c)
    c[:] = 9
    w.write(c)
    w.close()
    assert path.read_bytes() == b"\x07" * 100 + b"\x09" * 100


def test_staged_write_queues_full_buffers_while_the_disk_is_busy(tmp_path, monkeypatch):
    """The caller hands WRITE_AHEAD full buffers to the writer thread without waiting for any write
    (a rebuild's burst of output); the next full buffer waits for the oldest write to finish."""
    import threading

    disk_free, real_pwrite = threading.Event(), os.pwrite
    monkeypatch.setattr(
        segment_io.os, "pwrite", lambda fd, data, at: disk_free.wait(10) and real_pwrite(fd, data, at)
    )
    w = SegmentWriter(str(tmp_path / "a"), "buffered", buffer_bytes=BUF)

    def writing(data: bytes) -> threading.Event:
        done = threading.Event()
        threading.Thread(target=lambda: (w.write(data), done.set()), daemon=True).start()
        return done

    assert writing(b"x" * (BUF * segment_io.WRITE_AHEAD)).wait(5)  # queued while no write has finished
    one_more = writing(b"y" * BUF + b"z")
    assert not one_more.wait(0.3)
    disk_free.set()
    assert one_more.wait(5)
    w.close()
    assert (tmp_path / "a").read_bytes() == b"x" * (BUF * segment_io.WRITE_AHEAD) + b"y" * BUF + b"z"


def test_staged_write_falls_back_where_open_refuses_direct(tmp_path, open_refuses_direct):
    (c,) = _chunks([2 * BUF + 3])
    w = SegmentWriter(str(tmp_path / "a"), "direct", buffer_bytes=BUF)
    w.write(c)
    w.close()
    assert not w.direct and (tmp_path / "a").read_bytes() == c.tobytes()


def test_staged_write_falls_back_where_a_direct_write_is_refused(tmp_path, monkeypatch):
    """Some filesystems take O_DIRECT at open and refuse it at write (EINVAL): the writer turns it
    off and writes through the cache, mid-file and for the padded last block alike."""
    real_pwrite, refused = os.pwrite, []

    def refuse_direct(fd, data, offset):
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETFL) & segment_io._O_DIRECT:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(segment_io.os, "pwrite", refuse_direct)
    (c,) = _chunks([2 * BUF + 3])
    w = SegmentWriter(str(tmp_path / "a"), "direct", buffer_bytes=BUF)
    w.write(c)
    w.close()
    assert refused == [0] and not w.direct and (tmp_path / "a").read_bytes() == c.tobytes()


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no tmpfs at /dev/shm")
def test_staged_write_on_tmpfs():
    import tempfile
    from pathlib import Path

    (c,) = _chunks([3 * BUF + 11])
    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        w = SegmentWriter(str(Path(d) / "a"), "direct", buffer_bytes=BUF)
        w.write(c)
        w.close()
        assert (Path(d) / "a").read_bytes() == c.tobytes()


def test_staged_write_raises_the_background_write_error(tmp_path, monkeypatch):
    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segment_io.os, "pwrite", full)
    w = SegmentWriter(str(tmp_path / "a"), "direct", buffer_bytes=BUF)
    with pytest.raises(OSError, match="No space left"):
        for c in _chunks([BUF] * 3):  # the first full buffer fails on the thread, seen at the next
            w.write(c)
        w.close()


def test_staged_write_is_fsynced_with_its_directory(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(
        segment_io.os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_mode), real_fsync(fd))
    )
    w = SegmentWriter(str(tmp_path / "a"), "direct", buffer_bytes=BUF)
    w.write(b"x" * (BUF + 1))
    w.close()
    import stat

    assert [stat.S_ISREG(m) for m in synced] == [True, False]  # the file, then its directory


# --- the job's task in every mode -------------------------------------------------------------


def test_compact_partition_writes_the_same_files_in_every_read_mode(tmp_path, direct_always, monkeypatch):
    from compaction.spark import stages

    log_dir = tmp_path / "logs"
    generate(
        log_dir,
        "--topics t:1 --records 5000 --keys 600 --codec mixed --segment-bytes 60000 --tombstone-ratio 0.1"
        " --transactions 0.2 --abort-ratio 0.3 --seed 11",
    )
    specs = _partition_specs(log_dir)
    assert NOW and all(s.read_mode == "buffered" for s in specs)
    buffered_rows = stages.compact_partition(specs)
    read_buffered = _cleaned_files(log_dir)
    specs = [dataclasses.replace(s, read_mode="direct") for s in specs]
    direct_rows = stages.compact_partition(specs)
    direct = _cleaned_files(log_dir)
    mapped_rows = stages.compact_partition([dataclasses.replace(s, read_mode="mmap") for s in specs])
    mapped = _cleaned_files(log_dir)
    # Every decompressed side buffer and rebuilt payload from the pool as well, however small.
    from compaction.kernels import rebuild, scan_paths

    monkeypatch.setattr(scan_paths, "POOLED_MIN_BYTES", 0)
    monkeypatch.setattr(rebuild, "POOLED_MIN_BYTES", 0)
    pooled_rows = stages.compact_partition(specs)
    pooled = _cleaned_files(log_dir)
    written_rows = stages.compact_partition([dataclasses.replace(s, write_mode="buffered") for s in specs])
    written = _cleaned_files(log_dir)
    # every segment read and walked again
    uncached_rows = stages.compact_partition(specs, scan_reuse_bytes=0)
    uncached = _cleaned_files(log_dir)
    segment_io.POOL.trim()
    assert direct and read_buffered == direct == mapped == pooled == written == uncached
    assert outcomes(buffered_rows) == outcomes(direct_rows) == outcomes(mapped_rows) == outcomes(pooled_rows)
    assert outcomes(direct_rows) == outcomes(written_rows) == outcomes(uncached_rows)


def test_scan_cache_keeps_local_segments_without_their_bytes(tmp_path, direct_always):
    """The rewrite reads them again; a segment whose size changed in between is an error naming it."""
    from compaction.errors import CorruptRecordError
    from compaction.kernels.scan import scan_segment
    from compaction.steps.scan import ScanCache

    path = tmp_path / "00000000000000000000.log"
    from compaction.format import batch as fb
    from compaction.format.batch_build import build_batch

    path.write_bytes(
        b"".join(build_batch([fb.Record(i, NOW, b"k%d" % i, b"v" * 50)], base_offset=i) for i in range(20))
    )
    scan = scan_segment(read_segment_bytes(LOCAL, str(path), "direct"), str(path))
    cache = ScanCache(64 << 20)
    assert cache.offer(0, 0, scan, reread=True) and cache.offer(0, 1, scan, reread=False)
    # kept with its bytes, the whole buffer they were read into is held
    assert held_bytes(scan.file) > len(scan.file)
    assert cache.held == 2 * ScanCache.footprint(scan) - held_bytes(scan.file)
    assert cache.needs_read(0, 0) and not cache.needs_read(0, 1) and cache.needs_read(0, 2)
    again = cache.take(0, 0, read_segment_bytes(LOCAL, str(path), "direct"))
    assert (
        again.file.tobytes() == scan.file.tobytes()
        and again.records is scan.records
        and again.split == scan.split
    )
    cache.offer(0, 0, scan, reread=True)
    with pytest.raises(CorruptRecordError, match="changed size") as err:
        cache.take(0, 0, scan.file[:-1])
    assert err.value.path == str(path)
    mapped = scan_segment(read_segment_bytes(LOCAL, str(path), "mmap"), str(path))
    # mapped: kept, costs no memory
    assert cache.offer(0, 3, mapped, reread=True) and not cache.needs_read(0, 3)


def test_read_and_write_mode_options_reach_every_group(tmp_path):
    from compaction.cli.options import parse_args
    from compaction.steps import plan_round

    log_dir = tmp_path / "logs"
    generate(log_dir, "--topics t:1 --records 800 --keys 100 --segment-bytes 20000")
    for argv, modes in (
        ([], ("buffered", "direct")),
        (["--read-mode", "mmap"], ("mmap", "direct")),
        (["--read-mode", "direct"], ("direct", "direct")),
        (["--write-mode", "buffered"], ("buffered", "buffered")),
    ):
        opts = parse_args(["--log-dir", str(log_dir), "--now-ms", str(NOW), *argv])
        planned, _ = plan_round.discover_and_plan(opts)
        config = plan_round.resolve_topic_config(
            None, plan_round.job_config(opts, planned[0].partition_dir.topic)
        )
        specs = plan_round.group_specs(planned[0], opts, config, 0)
        assert specs and {(s.read_mode, s.write_mode) for s in specs} == {modes}
    with pytest.raises(SystemExit):
        parse_args(["--log-dir", str(log_dir), "--read-mode", "cached"])
    with pytest.raises(SystemExit):
        parse_args(["--log-dir", str(log_dir), "--write-mode", "mmap"])


def test_buffered_reads_without_posix_fadvise(tmp_path, monkeypatch):
    """Where the OS has no posix_fadvise (macOS) the bytes are the same, the cache unadvised."""
    monkeypatch.setattr(segment_io, "_FADVISE", None)
    path = tmp_path / "a.log"
    data = _file(path, 3 * ALIGN + 5)
    for last in (False, True):
        assert read_segment_bytes(LOCAL, str(path), "buffered", last=last).tobytes() == data
