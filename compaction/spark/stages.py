"""The Spark stages of one round.

- `fused`: partitions compacted whole, one task per bin of partitions (`compact_partition`).
- `ranged`: partitions cut into ranges, as one stage whose tasks meet through the exchange
  (compaction/steps/range_task.py, compaction/runtime/exchange.py), and `resumed`: what its tasks
  left undone when one of them stopped early, as stages that wait for nothing.

Errors inside a task never fail the Spark job: they come back as rows with `error`, so one
damaged partition cannot stop the others.
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
from compaction.steps import ranges
from compaction.steps.group import GroupSpec
from compaction.steps.range_task import configure, resume, run_task
from compaction.steps.rewrite import rewrite_unit
from compaction.steps.scan import ScanCache, check_partition_epochs, scan_partition
from compaction.steps.validate import checked_alongside

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
    ("seconds", T.DoubleType()),
    ("cpu_seconds", T.DoubleType()),  # CPU time of the task's work in this process
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
        prepare_worker(worker)
        configure(worker.part_chunk_bytes)
        with task_progress.reporting(progress, _task_name()):
            for t in task_ids:
                yield from map(typed, run_task(t, plan.value, ex, worker.scan_reuse_max_bytes))

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

    def run(part: Iterator) -> Iterator[dict]:
        prepare_worker(worker)
        configure(worker.part_chunk_bytes)
        with task_progress.reporting(progress, _task_name()):
            for item in part:
                yield from map(typed, resume(kind, item, plan.value, ex, worker.scan_reuse_max_bytes))

    return sc.parallelize(items, max(1, len(items))).mapPartitions(run)


# --- one task per partition ----------------------------------------------------------------
#
# A partition that is not cut into ranges is compacted whole in one task: scan its groups, build
# its offset map in the task (exact key bytes, `KeyTable`), derive producer state from its batch
# headers, then rewrite its groups in log order. It is the one-range case of compaction/steps/ranges.py
# with nothing to exchange: no block leaves the task. Decisions are the same either way.

FUSED_FIELDS = (
    *RESULT_FIELDS,  # cpu_seconds: of the whole partition
    ("first_unstable", T.LongType()),
    ("scan_seconds", T.DoubleType()),  # per partition, on its first group's row
    ("map_seconds", T.DoubleType()),
)


def compact_partition(specs: list, scan_reuse_bytes: int = WorkerSettings.scan_reuse_max_bytes) -> list[dict]:
    """The round for one partition (`specs`: all its groups, log order) in this process, keeping
    up to `scan_reuse_bytes` of its scans for the rewrite.

    Returns one row per group: the rewrite's stats, or `error`, or `first_unstable` (an open
    transaction below the planned bound: nothing was written, the driver plans again)."""
    import dataclasses

    started, cpu = time.monotonic(), time.process_time()
    cache = ScanCache(scan_reuse_bytes) if scan_reuse_bytes > 0 else None
    epochs: list = []  # leader-epoch runs per segment: checked before anything is written
    # The index checks the driver leaves to the task that reads the partition anyway; their
    # error, like the scan's, becomes the partition's rows in `fused`.
    pmap, producers = checked_alongside(
        specs[0].storage, specs[0].part_path, lambda: scan_partition(specs, cache, epochs=epochs)
    )
    check_partition_epochs(specs, epochs)
    state = ranges.producer_state(producers)
    scanned = time.monotonic()
    if state.first_unstable is not None and state.first_unstable < specs[0].upper_bound:
        return [{"group_id": s.group_id, "first_unstable": state.first_unstable} for s in specs]
    specs = [dataclasses.replace(s, last_records=state.last_records) for s in specs]
    mapped = time.monotonic()
    rows = rewrite_unit(specs, pmap, cache)
    cpu = time.process_time() - cpu
    rows[0].update(scan_seconds=scanned - started, map_seconds=mapped - scanned, cpu_seconds=cpu)
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
    compact = functools.partial(compact_partition, scan_reuse_bytes=worker.scan_reuse_max_bytes)

    def run(bin_ids: Iterator[int]) -> Iterator[dict]:
        prepare_worker(worker)
        table = partitions.value
        with task_progress.reporting(progress, _task_name()):
            for bin_id in bin_ids:
                for specs in table[bin_id]:
                    try:
                        rows = _profiled(compact, specs, worker.profile_dir)
                    except PARTITION_ERRORS as exc:  # anything else fails the job: a bug (errors.py)
                        rows = [{"group_id": s.group_id, "error": error_text(exc)} for s in specs]
                    yield from map(typed, rows)

    return sc.parallelize(range(bins), max(1, bins)).mapPartitions(run)


def pack(sizes: list[int], bins: int) -> list[list[int]]:
    """Indexes of `sizes` in at most `bins` bins, biggest first into the least loaded bin (LPT);
    bins ordered by load, heaviest first, so the longest tasks start first."""
    load = [0] * max(1, min(bins, len(sizes)))
    out: list[list[int]] = [[] for _ in load]
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        j = load.index(min(load))
        out[j].append(i)
        load[j] += sizes[i]
    return [out[j] for j in sorted(range(len(out)), key=lambda j: -load[j]) if out[j]]


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
    "pack",
    "ranged",
    "resumed",
    "task_slots",
    "typed",
]
