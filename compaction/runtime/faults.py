"""Test-only crash points: freeze the process at a named step of a run so a test can SIGKILL it.

`COMPACTION_CRASH_AT=<step>[:<n>]` makes the n-th (default first) arrival at `<step>` in a process
write the file named by `COMPACTION_CRASH_MARK` (if set) and stop the process with SIGSTOP; the
test waits for the mark and SIGKILLs the whole spark-submit session (driver, JVM, Python workers).
Stopping rather than killing keeps a stray setting from taking anything else down. Unset (always,
outside tests) a crash point costs one environment lookup; none sits in a per-record loop.

The process stops where the step says even when threads arrive together (the driver commits
partitions on a thread pool): arrivals are counted under a lock, and the n-th takes a hold that is
never released, so any later arrival at that step waits on it instead of running past it in the
moment before the SIGSTOP lands. The threads before the n-th have passed, as they would have.

`COMPACTION_CRASH_HOW=kill` makes the n-th arrival SIGKILL its own process instead: in an
executor's Python worker, Spark sees the worker die as it would under the OOM killer (the task
fails; with no attempt left, the job aborts and the driver reports the round failed).
`COMPACTION_CRASH_HOW=raise` makes every arrival from the n-th raise an `AssertionError`: a bug
at that step, which no partition's error handling may swallow.

Steps: `rewrite` (executor: `.log.cleaned` and `.index.cleaned` written, `.timeindex.cleaned` not),
`cleaned` (driver: a partition's `.cleaned` files complete, its commit not started), `intent`
(intent file written), `swap` (`.cleaned` renamed to `.swap`), `deleted` (old files renamed to
`.deleted`), `renamed` (`.swap` renamed to live names, `.deleted` not yet removed), `checkpoint`
(before `cleaner-offset-checkpoint` is written), `checkpointed` (after); with `--output-dir`,
`staged` (driver: a partition copied up to its cut into the staging dir) and `promoted` (a
partition moved into the output, its marker not yet written).
"""

from __future__ import annotations

import os
import signal
import threading

ENV, MARK_ENV, HOW_ENV = "COMPACTION_CRASH_AT", "COMPACTION_CRASH_MARK", "COMPACTION_CRASH_HOW"
_arrivals: dict[str, int] = {}
_count_lock = threading.Lock()
_hold = threading.Lock()  # taken by the arrival that stops the process, never released


def crash_point(step: str) -> None:
    want = os.environ.get(ENV)
    if not want:
        return
    name, _, nth = want.partition(":")
    if name != step:
        return
    if os.environ.get(HOW_ENV) == "raise":  # a bug at this step: every arrival from the n-th raises
        with _count_lock:
            _arrivals[step] = arrival = _arrivals.get(step, 0) + 1
        if arrival >= int(nth or 1):
            raise AssertionError(f"crash point {step} (a stand-in for a bug)")
        return
    with _count_lock:
        _arrivals[step] = arrival = _arrivals.get(step, 0) + 1
        if arrival < int(nth or 1):
            return
        stopper = arrival == int(nth or 1)
        if stopper:
            _hold.acquire()  # under the count lock: no later arrival can reach the hold first
    if not stopper:
        _hold.acquire()  # blocks for good: the process is being stopped at this step
        return
    mark = os.environ.get(MARK_ENV)
    if mark:
        with open(mark, "w") as fh:
            fh.write(f"{step} {os.getpid()}\n")
    # To this thread, not the process: a signal sent to the process is taken by whichever thread
    # the kernel picks, and this one could run on past the step before the stop reaches it.
    how = signal.SIGKILL if os.environ.get(HOW_ENV) == "kill" else signal.SIGSTOP
    signal.pthread_kill(threading.get_ident(), how)
