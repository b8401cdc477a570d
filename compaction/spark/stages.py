"""The Spark stages of one round.

- `fused`: partitions compacted whole, one task per bin of partitions (`compact_partition`).
- `ranged`: partitions cut into ranges, as one stage whose tasks meet through the exchange
  (compaction/steps/range_task.py, compaction/runtime/exchange.py), and `resumed`: what its tasks
  left undone when one of them stopped early, as stages that wait for nothing.

Errors inside a task never fail the Spark job: they come back as rows with `error`, so one
damaged partition cannot stop the others. The tasks' typed records (compaction/steps/results.py)
become Spark rows here, and only here.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator

from pyspark import TaskContext
from pyspark.sql import types as T

from compaction.errors import PARTITION_ERRORS, error_text
from compaction.runtime import task_progress
from compaction.runtime.worker import prepare_worker
from compaction.settings import WorkerSettings
from compaction.steps import results
from compaction.steps.group import GroupSpec
from compaction.steps.pipeline import compact_whole
from compaction.steps.range_task import configure, resume, run_task

RESULT_FIELDS = (
    ("group_id", T.IntegerType()),
    ("error", T.StringType()),
    ("bytes_read", T.LongType()),
    ("bytes_written", T.LongType()),
    ("records_read", T.LongType()),
    ("records_written", T.LongType()),
    ("batches_read", T.LongType()),
    ("batches_written", T.LongType()),
    ("invalid_records", T.LongType()),
    ("segments_rescanned", T.LongType()),  # scanned again by the rewrite (not in the scan cache)
    ("seconds", T.DoubleType()),
    ("cpu_seconds", T.DoubleType()),  # CPU time of the task's work in this process
    ("system_seconds", T.DoubleType()),  # the kernel's share of it
    ("minor_faults", T.LongType()),  # page faults the task took (first touches of fresh memory)
    # --erase-keys (compaction/steps/erase.py): records of listed keys removed
    (
        "erased_records",
        T.LongType(),
    ),
    ("erased_bytes", T.LongType()),
    ("erase_found", T.StringType()),  # which listed keys the unit met (a bitmap; first row of a unit)
    ("unchanged", T.IntegerType()),  # an erasing-only group that erased nothing: nothing written
)


def task_slots(sc) -> int:
    """Tasks the cluster runs at once (the ranges stage's tasks wait for each other: more than this
    would leave the later ones to the follow-up stages); the default parallelism where Spark does
    not say (no executor yet, as under dynamic allocation)."""
    try:
        jsc = sc._jsc.sc()
        n = int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:
        n = 0
    return max(1, n or sc.defaultParallelism)


def _task_name() -> str | None:
    """`<stage>-<partition>` of the running Spark task: its progress file's name."""
    ctx = TaskContext.get()
    return f"{ctx.stageId()}-{ctx.partitionId()}" if ctx is not None else None


def ranged(sc, plan, ex, worker: WorkerSettings = WorkerSettings(), progress: str | None = None):
    """The ranges stage (compaction/steps/range_task.py) as an RDD of result rows: one task per
    entry of `plan.tasks` (a broadcast `RangePlan`), in workers set up for `worker`. An ordinary
    stage: Spark retries a lost task (a retried task writes what the first attempt wrote), and it
    runs under dynamic allocation. Its tasks wait for each other only while the awaited one is
    alive; what is left when one stops early, `resumed` finishes. `progress`: the round's progress
    directory (runtime/task_progress.py)."""
    n_tasks = len(plan.value.tasks)

    def run(task_ids: Iterator[int]) -> Iterator[dict]:
        reuse, codecs = worker.scan_reuse_max_bytes, worker.scan_reuse_codecs
        return _ranges_rows(task_ids, lambda t: run_task(t, plan.value, ex, reuse, codecs), worker, progress)

    return sc.parallelize(range(n_tasks), n_tasks).mapPartitions(run)


def resumed(
    sc,
    plan,
    ex,
    kind: str,
    items: list,
    worker: WorkerSettings = WorkerSettings(),
    progress: str | None = None,
):
    """What the ranges stage left undone, of one `kind` (`range_task.finish`): one task per item,
    as an RDD of result rows."""

    def run(task_items: Iterator) -> Iterator[dict]:
        reuse, codecs = worker.scan_reuse_max_bytes, worker.scan_reuse_codecs
        return _ranges_rows(
            task_items, lambda item: resume(kind, item, plan.value, ex, reuse, codecs), worker, progress
        )

    return sc.parallelize(items, max(1, len(items))).mapPartitions(run)


def _ranges_rows(items: Iterator, task, worker: WorkerSettings, progress: str | None) -> Iterator[dict]:
    """The rows of `task(item)` for each of a Spark task's `items`, in a worker set up for `worker`
    and for the ranges stage."""
    prepare_worker(worker)
    configure(worker.part_chunk_bytes)
    with task_progress.reporting(progress, _task_name()):
        for item in items:
            yield from map(typed, results.as_rows(task(item)))


# --- one task per partition ----------------------------------------------------------------
#
# A partition that is not cut into ranges is compacted whole in one task
# (compaction/steps/pipeline.py `compact_whole`). It is the one-range case of the ranges stage with
# nothing to exchange: no block leaves the task. Decisions are the same either way.

FUSED_FIELDS = (
    *RESULT_FIELDS,  # cpu_seconds: of the whole partition
    ("first_unstable", T.LongType()),
    ("scan_seconds", T.DoubleType()),  # per partition, on its first group's row
    ("map_seconds", T.DoubleType()),
)


def compact_partition(
    specs: list,
    scan_reuse_bytes: int = WorkerSettings.scan_reuse_max_bytes,
    scan_reuse_codecs: frozenset[str] = WorkerSettings.scan_reuse_codecs,
) -> list[dict]:
    """The round for one partition (`specs`: all its groups, log order) in this process, keeping
    up to `scan_reuse_bytes` of its scans (of compressed segments: `scan_reuse_codecs`) for the
    rewrite (`compact_whole`), as Spark rows.

    Returns one row per group: the rewrite's stats, or `error`, or `first_unstable` (an open
    transaction below the planned bound: nothing was written, the driver plans again); the task's
    timings on the first group's row."""
    found, timings = compact_whole(specs, scan_reuse_bytes, scan_reuse_codecs)
    rows = results.as_rows(found)
    if timings is not None:
        rows[0].update(timings.row())
    return rows


def _profiled(task, specs: list, where: str | None):
    """`task(specs)`, under cProfile when `where` (`WorkerSettings.profile_dir`) names a directory
    of the executor host: one `<topic>-<partition>.pstats` per partition, timed in CPU seconds of
    the task's thread (waits for I/O excluded), for `python -m pstats`."""
    import os

    if not where:
        return task(specs)
    import cProfile

    prof = cProfile.Profile(time.thread_time)
    rows = prof.runcall(task, specs)
    os.makedirs(where, exist_ok=True)
    prof.dump_stats(os.path.join(where, f"{specs[0].topic}-{specs[0].partition}.pstats"))
    return rows


def fused(sc, bins: int, partitions, worker: WorkerSettings = WorkerSettings(), progress: str | None = None):
    """One task per bin of partitions (see `compact_partition`), in workers set up for `worker`,
    as an RDD of result rows (dicts with every `FUSED_FIELDS` name). `partitions` is a broadcast
    of {bin id: [[GroupSpec, ...], ...]} (the groups of each partition of the bin, in log order).
    A Python RDD rather than a DataFrame: its job starts sooner, with no query to analyse and
    compile, and its few rows need no columnar transfer. `progress`: the round's progress
    directory (runtime/task_progress.py)."""
    compact = functools.partial(
        compact_partition,
        scan_reuse_bytes=worker.scan_reuse_max_bytes,
        scan_reuse_codecs=worker.scan_reuse_codecs,
    )

    def run(bin_ids: Iterator[int]) -> Iterator[dict]:
        prepare_worker(worker)
        table = partitions.value
        with task_progress.reporting(progress, _task_name()):
            for bin_id in bin_ids:
                for specs in table[bin_id]:
                    try:
                        rows = _profiled(compact, specs, worker.profile_dir)
                    except PARTITION_ERRORS as exc:  # anything else fails the job: a bug (errors.py)
                        rows = results.as_rows(results.failed((s.group_id for s in specs), error_text(exc)))
                    yield from map(typed, rows)

    return sc.parallelize(range(bins), max(1, bins)).mapPartitions(run)


_PY_KINDS = {T.IntegerType: int, T.StringType: str, T.LongType: int, T.DoubleType: float}
_KINDS = {n: _PY_KINDS[type(t)] for n, t in FUSED_FIELDS}


def typed(row: dict) -> dict:
    """A task's row with every `FUSED_FIELDS` name, as plain Python values of the schema's types
    (not numpy's)."""
    return {n: None if row.get(n) is None else kind(row[n]) for n, kind in _KINDS.items()}


__all__ = [
    "FUSED_FIELDS",
    "GroupSpec",
    "compact_partition",
    "fused",
    "ranged",
    "resumed",
    "task_slots",
    "typed",
]
