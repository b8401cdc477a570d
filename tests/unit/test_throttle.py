"""The cleaner's I/O throttle (`--io-max-bytes-per-second`, Kafka's
`log.cleaner.io.max.bytes.per.second`): the decision with a fake clock, its bound as a property,
and the rate shared by processes through the host's file."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.runtime import throttle
from compaction.runtime.throttle import FileClock, MemoryClock, Throttler


class FakeTime:
    def __init__(self) -> None:
        self.t = 100.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


@pytest.mark.parametrize(
    "requests, sleeps",
    [
        ([(0, 1000)], [0.0]),  # an idle budget: the first request goes at once
        ([(0, 1000), (0, 1000)], [0.0, 1.0]),  # the second waits for the first one's second
        ([(0, 1000), (0.4, 500), (0, 500)], [0.0, 0.6, 0.5]),
        ([(0, 1000), (5.0, 1000)], [0.0, 0.0]),  # after a pause: no wait, and no burst saved up
        ([(0, 1000), (5.0, 1000), (0, 3000)], [0.0, 0.0, 1.0]),
        ([(0, 0), (0, 1000)], [0.0, 0.0]),  # nothing to move: no reservation
    ],
)
def test_sleeps_at_1000_bytes_per_second(requests, sleeps):
    clock = FakeTime()
    throttler = Throttler(1000.0, MemoryClock(), now=clock.now, sleep=clock.sleep)
    got = []
    for gap, nbytes in requests:
        clock.t += gap
        got.append(throttler.acquire(nbytes))
    assert got == pytest.approx(sleeps)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.floats(0, 2), st.integers(0, 50_000)), min_size=1, max_size=40),
    st.floats(100, 1e6),
)
def test_many_users_of_one_clock_stay_under_the_rate(requests, rate):
    """Any interleaving of users sharing a clock: the bytes started by time t never exceed
    rate x (t - first start) plus the request just started."""
    clock, shared = FakeTime(), MemoryClock()
    users = [Throttler(rate, shared, now=clock.now, sleep=lambda s: None) for _ in range(4)]
    started = []  # (start time, bytes)
    for user, gap, nbytes in requests:
        clock.t += gap
        waited = users[user].acquire(nbytes)
        if nbytes:
            started.append((clock.t + waited, nbytes))
    started.sort()
    total = 0
    for i, (t, nbytes) in enumerate(started):
        total += nbytes
        assert total - nbytes <= rate * (t - started[0][0]) * (1 + 1e-9) + 1e-6, i


def _worker(path: str, rate: float, requests: int, nbytes: int) -> None:
    throttler = Throttler(rate, FileClock(path))
    for _ in range(requests):
        throttler.acquire(nbytes)


def test_processes_of_a_host_share_the_rate_through_the_file(tmp_path):
    path, rate, procs, requests, nbytes = str(tmp_path / "io.throttle"), 2_000_000.0, 3, 10, 100_000
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_worker, args=(path, rate, requests, nbytes)) for _ in range(procs)]
    started = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
        assert w.exitcode == 0
    elapsed = time.monotonic() - started
    total = procs * requests * nbytes  # 3 MB at 2 MB/s: 1.5 s, less the first request
    assert elapsed >= (total - nbytes) / rate * 0.95
    assert elapsed < total / rate + 5  # and not one rate per process summed up the wrong way
    assert os.path.getsize(path) == 8


@pytest.fixture
def unthrottled_after():
    yield
    throttle.configure(None)


def test_process_throttler_follows_the_worker_settings(tmp_path, unthrottled_after):
    assert throttle.configure(None) is None and throttle.process_throttler() is None
    throttle.acquire(10**12)  # unthrottled: returns at once
    t = throttle.configure(5e6, str(tmp_path / "t"))
    assert t is not None and t.rate == 5e6 and t.clock.path == str(tmp_path / "t")
    assert throttle.process_throttler() is t
    assert throttle.configure(5e6, str(tmp_path / "t")) is t  # the next task of the same worker


def test_rate_must_be_positive():
    with pytest.raises(ValueError):
        Throttler(0, MemoryClock())


def test_segment_reads_and_writes_are_told_to_the_throttle(tmp_path, monkeypatch):
    """Every byte a task reads or writes of a segment passes `throttle.acquire` (read + write, as
    Kafka counts): direct reads per request, mapped reads whole, staged writes per buffer."""
    from compaction.runtime import segment_io
    from compaction.runtime.storage import Storage

    told = []
    monkeypatch.setattr(throttle, "acquire", told.append)
    data = os.urandom(3 << 20)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    monkeypatch.setattr(segment_io, "READ_CHUNK", 1 << 20)
    monkeypatch.setattr(segment_io, "direct_min_bytes", 0)
    for mode in ("direct", "mmap"):
        told.clear()
        assert bytes(segment_io.read_segment_bytes(Storage.local(), str(path), mode)) == data
        assert sum(told) == len(data), mode
    told.clear()
    writer = segment_io.SegmentWriter(str(tmp_path / "out.log.cleaned"), "buffered", buffer_bytes=1 << 20)
    writer.write(data)
    writer.close()
    assert sum(told) == len(data)


def test_default_file_is_host_wide_not_the_containers_tmpdir(monkeypatch, tmp_path, unthrottled_after):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # YARN's per-container temp dir
    path = throttle.configure(1e6, None).clock.path
    assert os.path.dirname(path) in ("/dev/shm", "/tmp")
    assert path.endswith(f"kafka-compaction-io-{os.getuid()}.throttle")
