"""Progress of a round while it runs: what the driver is doing, and while Spark works, the tasks
done out of the total (from `SparkContext.statusTracker()`), the bytes the executors have read and
written so far (every second from inside their tasks: runtime/task_progress.py), the rate over the
last RATE_WINDOW seconds and an ETA from the share of the scan and rewrite done.

On a terminal a live bar, redrawn in place (the launcher says when the user's terminal shows the
driver's output: TTY_ENV); elsewhere (Airflow's task log, cron) one
plain log line every `interval` seconds (the round's `Settings.progress_seconds`, default 5).
Spark's own console bar stays off (`spark.ui.showConsoleProgress=false`): it would draw over ours.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

from compaction.settings import PROGRESS_SECONDS

log = logging.getLogger("compaction.progress")

MB = 1_048_576
# The rate and the ETA are over the last this many seconds: they follow a change of pace (the
# rewrite after the scan, a throttle) without swinging with every poll.
RATE_WINDOW = 20.0
# Set by the launcher when the user's terminal will show the driver's output (spark-submit pipes
# it, so the driver cannot see that for itself): the live bar instead of log lines.
TTY_ENV = "KAFKA_COMPACTION_PROGRESS_TTY"


@dataclass(frozen=True)
class Snapshot:
    """The round's Spark work at one instant: task counts from Spark's status tracker, and what the
    executors say they have read, written and finished (runtime/task_progress.py)."""

    tasks_done: int
    tasks_total: int
    running: int
    elapsed: float
    total_bytes: int  # the planned partitions' bytes
    read: int = 0  # bytes the executors read so far
    written: int = 0  # bytes they wrote so far
    work_done: int = 0  # bytes of source segments scanned + rewritten so far
    work_total: int = 0  # every source segment's bytes, twice (a scan and a rewrite)
    rate: float = 0.0  # bytes read + written per second, over the last RATE_WINDOW seconds
    work_rate: float = 0.0  # work bytes per second, over the same window
    finished: bool = False  # every job returned

    @property
    def fraction(self) -> float:
        if self.finished:
            return 1.0
        if self.work_total:
            return min(1.0, self.work_done / self.work_total)
        return self.tasks_done / self.tasks_total if self.tasks_total else 0.0

    @property
    def eta(self) -> float | None:
        if self.finished:
            return 0.0
        if self.work_done <= 0 or self.work_rate <= 0:
            return None
        return max(0.0, self.work_total - self.work_done) / self.work_rate


def describe(s: Snapshot, partitions: int) -> str:
    eta = "ETA --" if s.eta is None else f"ETA {_clock(s.eta)}"
    return (
        f"{s.tasks_done}/{s.tasks_total} tasks ({s.running} running) for {partitions} partitions; "
        f"{s.read / MB:,.1f} MB read, {s.written / MB:,.1f} MB written of {s.total_bytes / MB:,.1f} MB planned, "
        f"{s.rate / MB:,.1f} MB/s, {100 * s.fraction:.0f}% done, {eta}, elapsed {_clock(s.elapsed)}"
    )


def bar(s: Snapshot, width: int = 24) -> str:
    filled = int(width * s.fraction)
    return f"[{'#' * filled}{'-' * (width - filled)}] {100 * s.fraction:5.1f}%"


def _clock(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class StageCounter:
    """Task counts of the Spark jobs started since it was made, from the status tracker. Job ids
    are sequential in a SparkContext, so every job is found, also one that started and ended
    between two polls. A finished job counts the tasks its stages completed (a stage it skipped,
    its input reused, counts nothing); a running one all its stages' tasks."""

    def __init__(self, sc, first_job: int = 0) -> None:
        self._tracker = sc.statusTracker()
        self._next = first_job
        self._jobs: list[int] = []

    @classmethod
    def after_current(cls, sc) -> StageCounter:
        """Counting only jobs started from now on (not the warm-up's)."""
        tracker, n = sc.statusTracker(), 0
        while tracker.getJobInfo(n) is not None:
            n += 1
        return cls(sc, n)

    def poll(self, finished: bool = False) -> tuple[int, int, int]:
        """(tasks done, tasks in all, tasks running). `finished`: every job has returned (the
        tracker, fed by Spark's listener bus, may not have seen their last tasks end yet)."""
        while self._tracker.getJobInfo(self._next) is not None:
            self._jobs.append(self._next)
            self._next += 1
        done = total = running = 0
        for jid in self._jobs:
            job = self._tracker.getJobInfo(jid)
            if job is None:
                continue
            stages = [self._tracker.getStageInfo(sid) for sid in job.stageIds]
            stages = [st for st in stages if st is not None]
            if finished and job.status not in ("SUCCEEDED", "FAILED"):
                n = sum(st.numTasks for st in stages)
                done, total = done + n, total + n
            elif job.status in ("SUCCEEDED", "FAILED"):
                n = sum(min(st.numCompletedTasks, st.numTasks) for st in stages)
                done, total = done + n, total + n
            else:
                total += sum(st.numTasks for st in stages)
                done += sum(min(st.numCompletedTasks, st.numTasks) for st in stages)
                running += sum(st.numActiveTasks for st in stages)
        return done, total, running


def reconcile(done: int, total: int, running: int, ex, finished: bool = False) -> tuple[int, int, int]:
    """Task counts from the tracker (done, total, running) made to agree with the executors' files
    (`ex`, a `task_progress.Totals`). The tracker is fed by Spark's listener bus, which writes a
    stage's live figures at most every `spark.ui.liveUpdate.period`: it may not yet have heard that
    a task started, or that it ended, when its executor has already said so."""
    if finished:
        return done, total, 0
    unseen_ends = max(0, ex.finished - done)
    done += unseen_ends
    running = max(ex.running, running - unseen_ends)
    return done, max(total, done + running), running


class Reporter:
    """Reports a round's progress until `stop()`; `watch(sc, ...)` starts the Spark part."""

    def __init__(self, stream=None, interval: float | None = None, tty: bool | None = None) -> None:
        self._stream = stream or sys.stderr
        self._interval = PROGRESS_SECONDS if interval is None else interval
        if tty is None:
            tty = self._stream.isatty() or os.environ.get(TTY_ENV) == "1"
        self._tty = tty

    def phase(self, message: str, *args) -> None:
        log.info(message, *args, extra={"fields": {"event": "phase"}})

    def waiting(self, what: str) -> _Heartbeat:
        """A context: `what ... N s` every interval while the block runs (Spark's start-up)."""
        return _Heartbeat(what, self._interval)

    def watch(self, sc, total_bytes: int, partitions: int, channel=None, work_total: int = 0) -> _Watch:
        """The Spark part: task counts from `sc`, the executors' figures from `channel` (a
        `task_progress.ProgressDir`), out of `work_total` bytes of scan and rewrite."""
        return _Watch(self, StageCounter.after_current(sc), total_bytes, partitions, channel, work_total)

    def draw(self, s: Snapshot, partitions: int, final: bool = False) -> None:
        if self._tty:
            end = "\n" if final else ""
            self._stream.write(f"\r{bar(s)} {describe(s, partitions)}\033[K{end}")
            self._stream.flush()
        else:
            log.info(
                "progress: %s",
                describe(s, partitions),
                extra={
                    "fields": {
                        "event": "progress",
                        "tasksDone": s.tasks_done,
                        "tasksTotal": s.tasks_total,
                        "tasksRunning": s.running,
                        "bytesRead": s.read,
                        "bytesWritten": s.written,
                        "workDone": s.work_done,
                        "workTotal": s.work_total,
                        "bytesTotal": s.total_bytes,
                        "partitions": partitions,
                        "fraction": round(s.fraction, 4),
                        "bytesPerSecond": round(s.rate),
                        "elapsedSeconds": round(s.elapsed, 3),
                        "etaSeconds": None if s.eta is None else round(s.eta, 1),
                    }
                },
            )

    @property
    def tick(self) -> float:
        return min(self._interval, 0.5) if self._tty else self._interval


class _Heartbeat:
    def __init__(self, what: str, interval: float) -> None:
        self._what, self._interval = what, interval
        self._stop = threading.Event()

    def __enter__(self) -> _Heartbeat:
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="progress-wait", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            log.info(
                "%s ... %.0f s",
                self._what,
                time.monotonic() - self._t0,
                extra={"fields": {"event": "waiting"}},
            )

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class _Watch:
    def __init__(
        self,
        reporter: Reporter,
        counter: StageCounter,
        total_bytes: int,
        partitions: int,
        channel=None,
        work_total: int = 0,
    ) -> None:
        self._r, self._counter, self._channel = reporter, counter, channel
        self._total, self._partitions, self._work_total = total_bytes, partitions, work_total
        self._stop = threading.Event()
        self._samples: deque = deque()  # (elapsed, read + written, work done), the last RATE_WINDOW s

    def __enter__(self) -> _Watch:
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._thread.start()
        return self

    def snapshot(self, finished: bool = False) -> Snapshot:
        done, total, running = self._counter.poll(finished)
        elapsed = time.monotonic() - self._t0
        ex = self._channel.totals() if self._channel is not None else None
        if ex is None:
            return Snapshot(done, total, running, elapsed, self._total, finished=finished)
        io = ex.read + ex.written
        self._samples.append((elapsed, io, ex.done))
        while len(self._samples) > 2 and elapsed - self._samples[1][0] >= RATE_WINDOW:
            self._samples.popleft()
        t0, io0, done0 = self._samples[0] if len(self._samples) > 1 else (0.0, 0, 0)
        span = elapsed - t0
        rate, work_rate = ((io - io0) / span, (ex.done - done0) / span) if span > 0 else (0.0, 0.0)
        if work_rate <= 0 and ex.done > 0 and elapsed > 0:
            work_rate = ex.done / elapsed  # nothing finished within the window: the average so far
        done, total, running = reconcile(done, total, running, ex, finished)
        return Snapshot(
            done,
            total,
            running,
            elapsed,
            self._total,
            ex.read,
            ex.written,
            ex.done,
            self._work_total,
            rate,
            work_rate,
            finished,
        )

    def _run(self) -> None:
        while not self._stop.wait(self._r.tick):
            try:
                self._r.draw(self.snapshot(), self._partitions)
            except Exception as exc:
                log.debug("progress poll failed: %s", exc)

    def __exit__(self, exc_type, *exc) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self._r.draw(self.snapshot(finished=exc_type is None), self._partitions, final=True)
        except Exception as err:
            log.debug("progress poll failed: %s", err)
