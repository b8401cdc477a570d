"""The round's guard against a cluster with no executor left: Spark waits for one forever (a
standalone cluster whose workers are all gone, a Kubernetes namespace out of quota), which a
scheduled round must not. While the stages run, the driver counts the executors every few
seconds; none for `no_executor_seconds` in a row cancels the round's jobs, and the round fails
as a whole (exit 75) with its report, nothing committed. A local master always has its one.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("compaction")

POLL_SECONDS = 2.0


def executors(sc) -> int:
    """Executors alive now, the driver not counted (`SparkStatusTracker.getExecutorInfos`)."""
    return max(0, len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1)


class NoExecutorWatch:
    """A context manager: cancels every job of `sc` once no executor was alive for `seconds`."""

    def __init__(self, sc, seconds: float) -> None:
        self.sc, self.seconds = sc, seconds
        self.fired = False
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self) -> NoExecutorWatch:
        if self.seconds > 0 and not self.sc.master.startswith("local"):
            self._thread = threading.Thread(target=self._run, name="no-executor-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        since = None
        while not self._stop.wait(POLL_SECONDS):
            try:
                n = executors(self.sc)
            except Exception:
                return
            now = time.monotonic()
            since = None if n else (since or now)
            if since is not None and now - since >= self.seconds:
                log.error("no executor for %.0f s: cancelling the round's Spark jobs", now - since)
                self.fired = True
                self.sc.cancelAllJobs()
                return
