"""Test-only crash points: freeze the process at a named step of a run so a test can SIGKILL it.

`COMPACTION_CRASH_AT=<step>[:<n>]` makes the n-th (default first) arrival at `<step>` in a process
write the file named by `COMPACTION_CRASH_MARK` (if set) and stop the process with SIGSTOP; the
test waits for the mark and SIGKILLs the whole spark-submit session (driver, JVM, Python workers).
Stopping rather than killing keeps a stray setting from taking anything else down. Unset (always,
outside tests) a crash point costs one environment lookup; none sits in a per-record loop.

Steps: `rewrite` (executor: `.log.cleaned` and `.index.cleaned` written, `.timeindex.cleaned` not),
`cleaned` (driver: a partition's `.cleaned` files complete, its commit not started), `intent`
(intent file written), `swap` (`.cleaned` renamed to `.swap`), `deleted` (old files renamed to
`.deleted`), `renamed` (`.swap` renamed to live names, `.deleted` not yet removed), `checkpoint`
(before `cleaner-offset-checkpoint` is written), `checkpointed` (after).
"""

from __future__ import annotations

import os
import signal

ENV, MARK_ENV = "COMPACTION_CRASH_AT", "COMPACTION_CRASH_MARK"
_arrivals: dict[str, int] = {}


def crash_point(step: str) -> None:
    want = os.environ.get(ENV)
    if not want:
        return
    name, _, nth = want.partition(":")
    if name != step:
        return
    _arrivals[step] = _arrivals.get(step, 0) + 1
    if _arrivals[step] != int(nth or 1):
        return
    mark = os.environ.get(MARK_ENV)
    if mark:
        with open(mark, "w") as fh:
            fh.write(f"{step} {os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGSTOP)
