"""The cleaner's I/O throttle: Kafka's `log.cleaner.io.max.bytes.per.second`
(`--io-max-bytes-per-second`), for when the log dirs share disks with a live system.

Kafka's semantics: the bytes read plus the bytes written by all cleaner threads of a broker stay
under the rate (one `Throttler` shared by the threads, told of every read and write). Here the
threads are the job's tasks, and they are processes: all Python workers of the job on one host
share the rate. They do it through a shared clock (the "generic cell rate" scheme): a small file
holds the time at which the host's I/O budget is next free; a task that is about to move n bytes
takes the file's lock, reserves n / rate seconds from that time on (or from now, if the budget has
been idle), and sleeps until its reservation starts. Whatever the number of tasks and however they
interleave, the host's bytes by time t stay under rate x t plus one request. An idle budget is not
saved up (no burst after a pause), as Kafka's throttler does not let a quiet period pay for a
later spike either.

`Throttler` is the pure decision (clock, sleep and the shared state are injected, for tests);
`acquire(n)` is what the I/O code calls: a no-op unless the round set a rate, which reaches the
executors in the round's worker settings (`WorkerSettings.io_max_bytes_per_second`, applied by
`configure` when a task starts: `runtime.worker.prepare_worker`). The shared file (8 bytes, reused
by every run) is per user in `/dev/shm`, else `/tmp`: host-wide paths on purpose, not `$TMPDIR`,
which YARN points at each container's own dir. Where the executors of a host see no common dir
(Kubernetes pods), point `WorkerSettings.io_throttle_file` (`KAFKA_COMPACTION_IO_THROTTLE_FILE`)
at a shared mount (a hostPath), or the budget is per pod.
"""

from __future__ import annotations

import fcntl
import os
import struct
import tempfile
import time
from collections.abc import Callable

_STATE = struct.Struct("<d")


class MemoryClock:
    """The shared 'next free' time, within one process (tests, or a single-task host)."""

    def __init__(self) -> None:
        self.next_free = 0.0

    def reserve(self, now: float, seconds: float) -> float:
        start = max(now, self.next_free)
        self.next_free = start + seconds
        return start


class FileClock:
    """The shared 'next free' time in a file, under an exclusive `flock`: every process of the
    host that opens the same path shares it. CLOCK_MONOTONIC is one clock for the whole host."""

    def __init__(self, path: str) -> None:
        self.path = path

    def reserve(self, now: float, seconds: float) -> float:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, _STATE.size, 0)
            next_free = _STATE.unpack(raw)[0] if len(raw) == _STATE.size else 0.0
            start = max(now, next_free)
            os.pwrite(fd, _STATE.pack(start + seconds), 0)
            return start
        finally:
            os.close(fd)  # releases the lock


class Throttler:
    """Sleeps before each request so that the bytes of all users of `clock` stay under `rate`/s."""

    def __init__(
        self,
        rate: float,
        clock,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not rate > 0:
            raise ValueError(f"the I/O rate must be positive, not {rate}")
        self.rate, self.clock, self.now, self.sleep = rate, clock, now, sleep
        self.slept = 0.0

    def acquire(self, nbytes: int) -> float:
        """Wait until `nbytes` may be read or written; returns the seconds slept."""
        if nbytes <= 0:
            return 0.0
        now = self.now()
        wait = self.clock.reserve(now, nbytes / self.rate) - now
        if wait > 0:
            self.sleep(wait)
            self.slept += wait
            return wait
        return 0.0


_cached: tuple[tuple, Throttler | None] = ((None, None), None)


def configure(rate: float | None, path: str | None = None) -> Throttler | None:
    """Throttle this process's segment I/O to `rate` bytes/s (None: unthrottled), sharing the
    budget through the file `path` (None: the host-wide default). A call with the same values keeps
    the throttler it made before."""
    global _cached
    setting = (rate, path or None)
    if setting != _cached[0]:
        throttler = None
        if rate is not None:
            name = f"kafka-compaction-io-{os.getuid()}.throttle"
            throttler = Throttler(float(rate), FileClock(path or os.path.join(_host_dir(), name)))
        _cached = (setting, throttler)
    return _cached[1]


def process_throttler() -> Throttler | None:
    """The throttler of this process (None: unthrottled)."""
    return _cached[1]


def _host_dir() -> str:
    for candidate in ("/dev/shm", "/tmp"):
        if os.path.isdir(candidate) and os.access(candidate, os.W_OK):
            return candidate
    return tempfile.gettempdir()


def acquire(nbytes: int) -> None:
    """Called by the segment reads and writes before moving `nbytes`."""
    throttler = process_throttler()
    if throttler is not None:
        throttler.acquire(nbytes)
