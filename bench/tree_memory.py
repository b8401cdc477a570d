"""The memory of a process tree (a spark-submit and its descendants: the driver JVM, the Python
daemon and its workers), sampled from /proc while it runs. The rusage the job's parent gets
from `wait4` cannot say it: PySpark's workers end with the job, after their daemon, and their
peaks do not reach it (its `ru_maxrss` is the largest JVM's). Linux only. Not a test."""

from __future__ import annotations

import os
import threading
from pathlib import Path

# The command lines of PySpark's worker daemons (`spark.python.daemon.module`): its own, ours.
DAEMONS = (b"pyspark.daemon", b"pyspark/daemon.py", b"compaction.spark.daemon")


def kb(status: str, field: str) -> int:
    """`field` of a /proc status text, in bytes."""
    for line in status.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


class TreeMemory:
    """Samples VmHWM/VmRSS of every descendant of `root_pid` until stopped."""

    def __init__(self, root_pid: int, interval: float = 0.2) -> None:
        self.root, self.interval = root_pid, interval
        self.hwm: dict[int, tuple[str, int]] = {}  # pid -> (kind, VmHWM bytes)
        # pid -> peak sampled RssAnon: VmHWM also counts mapped file pages (the segments the
        # scan and the rewrite memory-map: page cache, not the process's own memory)
        self.anon: dict[int, int] = {}
        self.peak_sum = {"java": 0, "python": 0, "all": 0}
        self.workers: set[int] = set()  # the workers' daemon and the workers it forks (same command line)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _cmdline(pid: int) -> bytes:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    @staticmethod
    def _kind(pid: int) -> str:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return "?"
        exe = os.path.basename(cmd[0].decode(errors="replace")) if cmd and cmd[0] else "?"
        if exe == "java":
            return "java"
        if exe.startswith("python"):
            return "python"
        return exe

    def _descendants(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
        out, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(children.get(pid, ()))
        return out

    def sample(self) -> None:
        sums = {"java": 0, "python": 0, "all": 0}
        for pid in self._descendants():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            # every time (spark-submit.sh execs its way to the driver JVM), but a zombie's empty
            # cmdline must not overwrite what the process was
            kind = self._kind(pid)
            if any(m in self._cmdline(pid) for m in DAEMONS):
                self.workers.add(pid)
            if kind == "?" and pid in self.hwm:
                kind = self.hwm[pid][0]
            self.hwm[pid] = (kind, max(kb(status, "VmHWM"), self.hwm.get(pid, ("", 0))[1]))
            rss = kb(status, "VmRSS")
            self.anon[pid] = max(self.anon.get(pid, 0), kb(status, "RssAnon"))
            sums["all"] += rss
            if kind in sums:
                sums[kind] += rss
        for k, v in sums.items():
            self.peak_sum[k] = max(self.peak_sum[k], v)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def start(self) -> TreeMemory:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def max_hwm(self, kind: str) -> int:
        return max((h for k, h in self.hwm.values() if k == kind), default=0)

    def max_worker_hwm(self) -> int:
        """The largest VmHWM of PySpark's daemon and workers."""
        return max((self.hwm[pid][1] for pid in self.workers if pid in self.hwm), default=0)

    def max_anon(self, kind: str) -> int:
        return max((self.anon.get(pid, 0) for pid, (k, _) in self.hwm.items() if k == kind), default=0)

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.hwm.values() if k == kind)
