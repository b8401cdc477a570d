"""The round's SparkContext, started on a thread at the beginning of the run so that its
start-up and the Python workers' warm-up overlap recovery, discovery and planning."""

from __future__ import annotations

import threading
import time

from compaction.runtime import kernel_store
from compaction.settings import Settings


def spark_context(settings: Settings):
    """The round's SparkContext. The stages are plain RDD jobs: no SparkSession, whose SQL state
    (catalyst, the session catalog) costs the JVM seconds to set up and the round nothing."""
    from pyspark import SparkConf, SparkContext

    # The JVM first, so that the conf starts from spark-submit's (its --name wins over our default).
    SparkContext._ensure_initialized()
    conf = SparkConf().setIfMissing("spark.app.name", "kafka-offline-compaction")
    # A task writes its groups' `.cleaned` files in place: two live attempts of one task (a
    # speculative copy) would write the same file at once. A retry after a lost task is safe (the
    # lost attempt's process is gone with its executor or its worker daemon), a speculative one
    # is not, so speculation stays off whatever the cluster's defaults say.
    conf.set("spark.speculation", "false")
    if settings.spark_master:
        conf.setMaster(settings.spark_master)
    return SparkContext.getOrCreate(conf)


class SparkStarter:
    """The SparkContext, and Python workers warmed up (compaction/spark/warmup.py), started on a thread
    at the beginning of the run so that both overlap recovery, discovery and planning. The
    warm-up waits for the plan (`planned`): none for a round with nothing to clean.
    `Settings.warmup` (Spark conf `spark.kafka.compaction.warmup`) turns the warm-up off. Once the
    context is up, `settings` are the round's with its Spark conf read."""

    def __init__(self, settings: Settings) -> None:
        self._t0 = time.monotonic()
        self._out: dict = {}
        self._plan: list = []
        self._planned = threading.Event()
        self.settings = settings
        self._ours = False  # the context started here, not one the caller's process had running
        self._stopped = False
        # The compiled kernels from the job's store (as the options and the environment name it)
        # while the JVM starts: in local mode the Python workers' daemon, started by the warm-up,
        # finds them on this host (runtime/kernel_store.py).
        self._kernels = threading.Thread(
            target=_fetch_kernels, args=(settings,), name="kernel-fetch", daemon=True
        )
        self._kernels.start()
        self._thread = threading.Thread(target=self._start, name="spark-start", daemon=True)
        self._thread.start()

    def planned(self, todo: list) -> None:
        """The partitions the stages will run (their specs set); [] when none."""
        self._plan = list(todo)
        self._planned.set()

    def _start(self) -> None:
        try:
            from pyspark import SparkContext

            self._ours = SparkContext._active_spark_context is None
            sc = spark_context(self.settings)
            self._kernels.join()  # before any Python worker starts
            self._out["sparkStartSeconds"] = time.monotonic() - self._t0
            self.settings = settings = self.settings.with_spark_conf(sc.getConf())
            # Done already, unless the Spark conf names another store than the environment did.
            _fetch_kernels(settings)
            self._planned.wait()
            if self._plan and settings.warmup:
                # warmup imports pyspark (stages): not on the round's import path
                from compaction.spark.warmup import warm_executors

                seconds, compiled = warm_executors(sc, settings.worker)
                self._out["workerWarmupSeconds"], self._out["workerKernelCompiles"] = seconds, compiled
            self._out["sc"] = sc
        except BaseException as exc:
            self._out["error"] = exc

    def join(self) -> None:
        self._planned.set()
        self._thread.join()

    def get(self, timings: dict[str, float]):
        """The SparkContext, once up. `sparkWaitSeconds`: how long the round waited for it after planning."""
        t = time.monotonic()
        self.join()
        timings["sparkWaitSeconds"] = time.monotonic() - t
        for key in ("sparkStartSeconds", "workerWarmupSeconds", "workerKernelCompiles"):
            if key in self._out:
                timings[key] = self._out[key]
        if "error" in self._out:
            raise self._out["error"]
        return self._out["sc"]

    @property
    def up(self) -> bool:
        """Whether the context came up (a failed start raises from `get`)."""
        return "sc" in self._out

    @property
    def app_id(self) -> str | None:
        """Spark's application id, once the context is up (what Spark's UI and history server
        and the cluster manager name the run by)."""
        sc = self._out.get("sc")
        return sc.applicationId if sc is not None else None

    def stop_when_done(self) -> None:
        """The stages are done (or failed): a context started here is stopped on a thread, so that
        its stop (executors, Python workers, shuffle and temp dirs) overlaps the commit rather
        than following the report at the process's exit. The thread is not a daemon: the process
        exits once it is done. Once only."""
        sc = self._out.get("sc")
        if self._ours and sc is not None and not self._stopped:
            self._stopped = True
            threading.Thread(target=_stop, args=(sc,), name="spark-stop").start()


def _fetch_kernels(settings: Settings) -> None:
    kernel_store.fetch(settings.worker.kernel_cache_dir)


def _stop(sc) -> None:
    # The JVM's context only: PySpark's `stop()` then shuts its accumulator server down, which
    # waits out the server's 0.5 s poll, longer than the JVM's part; that server is a daemon
    # thread, gone with the process.
    try:
        sc._jsc.stop()
    except Exception:
        pass
