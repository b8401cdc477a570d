"""segment_io: direct reads into reused buffers give the bytes a memory map gives; a buffer is
never handed out while any view of it lives; unsupported filesystems fall back; read-ahead keeps
order and errors; the job writes the same files in both read modes."""

from __future__ import annotations

import dataclasses
import errno
import os

import numpy as np
import pyarrow as pa
import pytest
from test_rewrite_unit import NOW, _cleaned_files, _partition_specs

from compaction import segment_io
from compaction.buffers import ALIGN, BufferPool
from compaction.segment_io import ReadAhead, read_segment_bytes
from compaction.storage import Storage

LOCAL = Storage.local()


@pytest.fixture
def direct_always(monkeypatch):
    monkeypatch.setenv("KAFKA_COMPACTION_DIRECT_MIN_BYTES", "0")


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


def test_pool_serves_the_smallest_free_buffer_that_fits():
    pool = BufferPool()
    big, small = pool.take(20 << 20), pool.take(1 << 20)
    big_at, small_at = _address(big), _address(small)
    del big, small
    assert _address(pool.take(100)) == small_at
    assert _address(pool.take(9 << 20)) == big_at


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


@pytest.mark.parametrize("n", [0, 1, ALIGN - 1, ALIGN, ALIGN + 1, 3 * ALIGN + 17, (9 << 20) + 123])
def test_direct_read_equals_the_file(tmp_path, direct_always, n):
    path = tmp_path / "00000000000000000000.log"
    data = _file(path, n)
    got = read_segment_bytes(LOCAL, str(path), "direct")
    mapped = read_segment_bytes(LOCAL, str(path), "mmap")
    assert got.tobytes() == data == mapped.tobytes()
    assert not got.flags.writeable and not mapped.flags.writeable  # one numba type for both


def test_direct_read_sees_writes_not_yet_flushed(tmp_path, direct_always):
    path = tmp_path / "a.log"
    _file(path, 3 * ALIGN)
    with open(path, "r+b") as fh:  # page cache only, no fsync
        fh.seek(ALIGN + 5)
        fh.write(b"fresh bytes")
    got = read_segment_bytes(LOCAL, str(path), "direct").tobytes()
    assert got[ALIGN + 5 : ALIGN + 16] == b"fresh bytes"


def test_small_segments_are_mapped(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_COMPACTION_DIRECT_MIN_BYTES", str(1 << 20))
    path = tmp_path / "a.log"
    _file(path, 1000)
    assert segment_io.is_mapped(read_segment_bytes(LOCAL, str(path), "direct"))
    monkeypatch.setenv("KAFKA_COMPACTION_DIRECT_MIN_BYTES", "0")
    assert not segment_io.is_mapped(read_segment_bytes(LOCAL, str(path), "direct"))


def test_direct_read_falls_back_where_the_filesystem_refuses_it(tmp_path, direct_always, monkeypatch):
    path = tmp_path / "a.log"
    data = _file(path, 2 * ALIGN + 3)
    real_open = os.open

    def no_direct(p, flags, *a, **kw):
        if flags & segment_io._O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(p, flags, *a, **kw)

    monkeypatch.setattr(segment_io.os, "open", no_direct)
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


# --- the job's task in both modes -----------------------------------------------------------


def test_compact_partition_writes_the_same_files_in_both_read_modes(tmp_path, direct_always, monkeypatch):
    from compaction import spark_stages
    from compaction.__main__ import main as cli

    log_dir = tmp_path / "logs"
    cli(["generate", str(log_dir), "--topics", "t:1", "--records", "5000", "--keys", "600", "--codec", "mixed",
         "--segment-bytes", "60000", "--tombstone-ratio", "0.1", "--transactions", "0.2", "--abort-ratio", "0.3",
         "--seed", "11"])  # fmt: skip
    specs = _partition_specs(log_dir)
    assert NOW and all(s.read_mode == "direct" for s in specs)
    direct_rows = spark_stages.compact_partition(specs)
    direct = _cleaned_files(log_dir)
    mapped_rows = spark_stages.compact_partition([dataclasses.replace(s, read_mode="mmap") for s in specs])
    mapped = _cleaned_files(log_dir)
    # Every decompressed side buffer and rebuilt payload from the pool as well, however small.
    from compaction.format import rebuild, scan

    monkeypatch.setattr(scan, "POOLED_MIN_BYTES", 0)
    monkeypatch.setattr(rebuild, "POOLED_MIN_BYTES", 0)
    pooled_rows = spark_stages.compact_partition(specs)
    pooled = _cleaned_files(log_dir)
    segment_io.POOL.trim()
    assert direct and direct == mapped == pooled
    strip = lambda rows: [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]  # noqa: E731
    assert strip(direct_rows) == strip(mapped_rows) == strip(pooled_rows)


def test_read_mode_option_reaches_every_group(tmp_path):
    from compaction import run
    from compaction.__main__ import main as cli
    from compaction.options import parse_args

    log_dir = tmp_path / "logs"
    cli(["generate", str(log_dir), "--topics", "t:1", "--records", "800", "--keys", "100", "--segment-bytes", "20000"])
    for argv, mode in (([], "direct"), (["--read-mode", "mmap"], "mmap")):
        opts = parse_args(["--log-dir", str(log_dir), "--now-ms", str(NOW), *argv])
        planned, _ = run.discover_and_plan(opts)
        config = run.resolve_topic_config(None, run._job_config(opts, planned[0].part.topic))
        specs = run._specs(planned[0], opts, config, 0)
        assert specs and {s.read_mode for s in specs} == {mode}
    with pytest.raises(SystemExit):
        parse_args(["--log-dir", str(log_dir), "--read-mode", "buffered"])
