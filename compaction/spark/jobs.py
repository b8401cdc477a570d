"""The round's Spark jobs as the driver submits them: the planned partitions cut into
whole-partition tasks and ranges, both stages run, and a partition whose scan met an open
transaction below its planned bound planned again and run once more.

The stages themselves (what runs in the executors) are in compaction/spark/stages.py.
"""

from __future__ import annotations

import logging
import re
import time

from compaction.errors import NoExecutors, TaskFailed
from compaction.runtime.exchange import Exchange
from compaction.runtime.task_progress import ProgressDir
from compaction.settings import JobOptions, Settings
from compaction.spark.failure import one_line
from compaction.spark.watchdog import NoExecutorWatch
from compaction.steps import report as rpt
from compaction.steps.outcome import task_rows
from compaction.steps.plan_round import Planned, plan_one, selected, set_specs
from compaction.steps.range_task import MERGE, PIECE, REWRITE, finish
from compaction.steps.schedule import RangePlan, cut_into_ranges, pack, partition_bytes, task_count

log = logging.getLogger("compaction")


def scan_and_rewrite(
    starter,
    todo: list[Planned],
    planned: list[Planned],
    opts: JobOptions,
    progress,
    timings: dict[str, float],
) -> tuple[list[Planned], dict[int, dict]]:
    """The Spark stages of the round over `todo` (`starter`: a `SparkStarter`); returns the
    partitions to commit (after any re-plan for an open transaction) and the rewrite rows by
    group id."""
    next_id = set_specs(todo, opts)
    starter.planned(todo)
    with progress.waiting("waiting for Spark (start-up and worker warm-up)"):
        sc = starter.get(timings)
    progress.phase("Spark UI: %s", sc.uiWebUrl or "disabled (spark.ui.enabled=false)")
    t = time.monotonic()
    watch = NoExecutorWatch(sc, starter.settings.no_executor_seconds)
    # What the executors have read, written and finished so far (runtime/task_progress.py): the
    # scan and the rewrite each go through every source segment once.
    channel = ProgressDir.create(
        starter.settings.exchange_dir, sc.master.startswith("local"), todo[0].log_dir.uri
    )
    work = 2 * sum(seg.size for p in todo for s in p.specs for seg in s.segments)
    with (
        channel,
        progress.watch(sc, sum(partition_bytes(p.specs) for p in todo), len(todo), channel, work),
        watch,
    ):
        try:
            results, replan = run_stages(sc, todo, opts, starter.settings, timings, channel.uri)
            if replan:
                todo = _replan_open_transactions(
                    sc, todo, planned, replan, results, opts, starter.settings, next_id, timings, channel.uri
                )
        except Exception as exc:
            if watch.fired:
                raise NoExecutors(
                    f"no executor was alive for {watch.seconds:.0f} s (spark.kafka.compaction."
                    "noExecutorSeconds): the round's Spark jobs were cancelled"
                ) from exc
            raise
    timings["stagesSeconds"] = time.monotonic() - t
    starter.stop_when_done()
    return todo, results


def _replan_open_transactions(
    sc, todo, planned, replan, results, opts, settings, next_id, timings=None, progress: str | None = None
) -> list[Planned]:
    """Partitions whose scan found an open transaction below the planned bound (Kafka's LSO,
    docs/kafka-rules.md#last-stable-offset): plan them again with that bound and run the stages once more for
    them. Returns the new list of partitions to commit; `planned` and `results` are updated in place."""
    again = []
    for i, first_unstable in replan.items():
        old = todo[i]
        new = plan_one(old.log_dir, old.partition_dir, opts, first_unstable, old.erase)
        new.result.recovery = old.result.recovery
        planned[next(k for k, x in enumerate(planned) if x is old)] = todo[i] = new
        if new.plan is not None and selected(new, opts):
            next_id = set_specs([new], opts, next_id)
            again.append(new)
    more, still = run_stages(sc, again, opts, settings, timings, progress) if again else ({}, {})
    results.update(more)
    for i in still:  # not expected: the new bound lies at or below every open transaction
        again[i].specs = []
        again[i].result.status = rpt.FAILED
        again[i].result.reason = "open transaction below the replanned bound"
    return [p for p in todo if p.specs]


def _cut(sc, todo: list[Planned], settings: Settings) -> list[bool]:
    sizes = [partition_bytes(p.specs) for p in todo]
    return cut_into_ranges(
        sizes, [len(p.specs) for p in todo], sc.defaultParallelism, settings.partition_task_max_bytes
    )


def run_stages(
    sc,
    todo: list[Planned],
    opts: JobOptions,
    settings: Settings,
    timings: dict[str, float] | None = None,
    progress: str | None = None,
) -> tuple[dict[int, dict], dict[int, int]]:
    """Scan, then rewrite. Also returns {index in `todo`: first unstable offset} for the partitions
    whose scan found an open transaction below the planned bound: they are not rewritten.
    `timings` (if given) receives the seconds of each Spark job (added up over calls); `progress`:
    the round's progress directory, where the tasks say what they have done so far."""
    timings = {} if timings is None else timings
    cut = _cut(sc, todo, settings)
    whole = [i for i, c in enumerate(cut) if not c]
    ranged = [i for i, c in enumerate(cut) if c]
    results: dict[int, dict] = {}
    replan: dict[int, int] = {}
    for idx, stage, key in (
        (whole, _run_partition_tasks, "partitionTasksSeconds"),
        (ranged, _run_ranges, "rangesSeconds"),
    ):
        if idx:
            t = time.monotonic()
            r, rp = stage(sc, [todo[i] for i in idx], opts, timings, settings, progress)
            elapsed = time.monotonic() - t
            if stage is _run_ranges:
                for row in r.values():  # a cut partition takes the whole stage: its seconds
                    row["stage_seconds"] = elapsed
            results.update(r)
            replan.update({idx[k]: v for k, v in rp.items()})
            timings[key] = timings.get(key, 0.0) + elapsed
    return results, replan


def _run_partition_tasks(
    sc,
    todo: list[Planned],
    opts: JobOptions,
    timings: dict[str, float],
    settings: Settings,
    progress: str | None = None,
):
    """Partitions compacted whole in their task (`stages.compact_partition`), packed by bytes
    into at most `tasks_per_core` tasks per core, biggest first (a task's fixed cost - Python
    worker, imports, Spark scheduling - is paid per task, not per partition; see `task_count`)."""
    from compaction.spark import stages as st  # pyspark: see _run_ranges

    sizes = [partition_bytes(p.specs) for p in todo]
    bins = pack(sizes, task_count(sum(sizes), sc.defaultParallelism, opts.tasks_per_core))
    sc.setJobGroup("partitions", "scan, offset map, producer state and rewrite, whole partitions per task")
    by_bin = sc.broadcast({b: [todo[i].specs for i in ids] for b, ids in enumerate(bins)})
    holds = [[todo[i].result.name for i in ids] for ids in bins]
    return task_rows(
        collected(st.fused(sc, len(bins), by_bin, settings.worker, progress), holds), todo, timings
    )


def _run_ranges(
    sc,
    todo: list[Planned],
    opts: JobOptions,
    timings: dict[str, float],
    settings: Settings,
    progress: str | None = None,
):
    """Partitions cut into ranges: one stage whose tasks scan their ranges, merge the key
    summaries and rewrite, meeting through the exchange directory (compaction/steps/range_task.py),
    then, when one of its tasks stopped early (a lost executor, a slot that never came), stages
    for what it left undone."""
    # stages imports pyspark: here, not at the round's import, the driver's main thread plans
    # while SparkStarter's thread imports it and starts the context (spark/session.py).
    from compaction.spark import stages as st

    plan = RangePlan.cut([p.specs for p in todo], st.task_slots(sc))
    bplan = sc.broadcast(plan)
    sc.setJobGroup(
        "ranges", f"{sum(map(len, plan.tasks))} ranges in {len(plan.tasks)} tasks: scan, merge, rewrite"
    )
    with Exchange.create(
        settings.exchange_dir, sc.master.startswith("local"), todo[0].log_dir.uri, settings.peer_wait_seconds
    ) as ex:
        names = [p.result.name for p in todo]
        holds = [sorted({names[plan.ranges[r].partition] for r in rids}) for rids in plan.tasks]
        rows = collected(st.ranged(sc, bplan, ex, settings.worker, progress), holds)

        def run(kind: str, items: list) -> list[dict]:
            if not items:
                return []
            # Not an error: a task's peer was lost, or never got a slot; the bytes are the same.
            log.warning(
                "ranges: a task stopped early (a peer lost or not started); running what it left: "
                "%d %s task(s)",
                len(items),
                kind,
            )
            sc.setJobGroup("ranges", f"ranges left undone: {kind}, {len(items)} tasks")
            held = {
                MERGE: lambda k: names,
                PIECE: lambda r: [names[plan.ranges[r].partition]],
                REWRITE: lambda i: [names[i[1]]],
            }
            return collected(
                st.resumed(sc, bplan, ex, kind, items, settings.worker, progress),
                [held[kind](i) for i in items],
            )

        # the damaged partitions' rows come from here
        rows = [st.typed(r) for r in finish(plan, ex, rows, run)]
    return task_rows(rows, todo, timings)


def collected(rdd, holds: list[list[str]]) -> list:
    """`rdd.collect()`; a job aborted by one task's failures is raised as `TaskFailed` naming the
    partitions `holds[task]` (Spark's own message names the task by its index in the stage)."""
    try:
        return rdd.collect()
    except Exception as exc:
        found = re.search(r"Task (\d+) in stage [\d.]+ failed", one_line(exc))
        if found is None or int(found.group(1)) >= len(holds):
            raise
        names = ", ".join(holds[int(found.group(1))])
        raise TaskFailed(f"a task holding {names} failed every attempt: {one_line(exc)}") from exc
