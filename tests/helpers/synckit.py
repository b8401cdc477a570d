"""The files a piece of code creates and fsyncs, in order: for the tests of when a rewrite's
files are made durable (runtime/durability.py)."""

from __future__ import annotations

import os


def record_creates_and_fsyncs(monkeypatch) -> list[tuple[str, str]]:
    """From now on (for the test), ("create", path) for each file opened with O_CREAT and
    ("fsync", path) for each fsync (the path resolved from the descriptor), in order, in the
    list returned."""
    events: list[tuple[str, str]] = []
    real_fsync, real_open = os.fsync, os.open

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def opened(path, flags, *a, **kw):
        if flags & os.O_CREAT:
            events.append(("create", str(path)))
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "open", opened)
    return events
