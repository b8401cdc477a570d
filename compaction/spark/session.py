"""The round's Spark session, started on a thread at the beginning of the run so that its
start-up and the Python workers' warm-up overlap recovery, discovery and planning."""

from __future__ import annotations

import os
import threading
import time

from compaction.cli.options import JobOptions
from compaction.runtime import throttle


def spark_session(opts: JobOptions):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("kafka-offline-compaction")
    if opts.io_max_bytes_per_second is not None:  # the executors' segment I/O throttle (throttle.py)
        builder = builder.config(f"spark.executorEnv.{throttle.RATE_ENV}", repr(opts.io_max_bytes_per_second))
    if "SPARK_MASTER" in os.environ and not os.environ.get("SPARK_HOME_SUBMITTED"):
        builder = builder.master(os.environ["SPARK_MASTER"])
    spark = builder.getOrCreate()
    # The rewrite's shuffle carries few bytes but each group is heavy: never merge groups into
    # one task (AQE coalescing would), and keep small runs from spawning 200 empty tasks.
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    return spark


class SparkStarter:
    """The Spark session, and Python workers warmed up (compaction/spark/warmup.py), started on a thread
    at the beginning of the run so that both overlap recovery, discovery and planning. The
    warm-up waits for the plan (`planned`): none for a round with nothing to clean.
    Spark conf `spark.kafka.compaction.warmup` (default true) turns the warm-up off."""

    def __init__(self, opts: JobOptions) -> None:
        self._t0 = time.monotonic()
        self._out: dict = {}
        self._plan: list = []
        self._planned = threading.Event()
        self._thread = threading.Thread(target=self._start, args=(opts,), name="spark-start", daemon=True)
        self._thread.start()

    def planned(self, todo: list) -> None:
        """The partitions the stages will run (their specs set); [] when none."""
        self._plan = list(todo)
        self._planned.set()

    def _start(self, opts: JobOptions) -> None:
        try:
            spark = spark_session(opts)
            self._out["sparkStartSeconds"] = time.monotonic() - self._t0
            self._planned.wait()
            if self._plan and spark.conf.get("spark.kafka.compaction.warmup", "true").lower() != "false":
                from compaction.spark.warmup import warm_executors

                self._out["workerWarmupSeconds"] = warm_executors(spark)
            self._out["spark"] = spark
        except BaseException as exc:  # noqa: BLE001 - raised again on the main thread by get()
            self._out["error"] = exc

    def join(self) -> None:
        self._planned.set()
        self._thread.join()

    def get(self, timings: dict[str, float]):
        """The session, once up. `sparkWaitSeconds`: how long the round waited for it after planning."""
        t = time.monotonic()
        self.join()
        timings["sparkWaitSeconds"] = time.monotonic() - t
        for key in ("sparkStartSeconds", "workerWarmupSeconds"):
            if key in self._out:
                timings[key] = self._out[key]
        if "error" in self._out:
            raise self._out["error"]
        return self._out["spark"]
