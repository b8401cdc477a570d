"""One compaction round: recover -> discover -> plan -> Spark stages -> commit -> checkpoint -> report.

The driver does the cheap metadata work and the commits; executors do the byte work. Every
partition succeeds or fails on its own: a damaged partition is reported `failed` with the file
and byte position, its files untouched, while the others are cleaned.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time

import numpy as np

from compaction.cli import logs
from compaction.steps import report as rpt
from compaction.cli import report_html
from compaction.steps.commit import Replacement, commit_partition, recover_partition, remove_replaced
from compaction.steps.discover import (
    CLEANER_CHECKPOINT,
    LogDirState,
    PartitionDir,
    audit_structure,
    check_listing,
    first_batch_timestamp,
    gc_paused,
    last_time_entry_ts,
    log_end_offset,
    map_threads,
    read_log_dir,
    read_small,
    rebuild_missing_index,
    relist_partition,
    segment_meta,
    unfreeze_gc,
    use_threads,
    validate_contents,
)
from compaction.steps.erase import EraseSet, key_count, load_erase_set, unpack_bits
from compaction.errors import CheckpointError, CompactionError
from compaction.format.checkpoint import read_checkpoint, write_checkpoint
from compaction.format.index import read_txn_index
from compaction.cli.options import LONG_MAX, JobOptions, parse_args
from compaction.policy.plan import (
    REASON_LAG_BOUND,
    REASON_NOTHING_CLEANABLE,
    PartitionPlan,
    PartitionState,
    non_active_segments_from,
    plan_partition,
    resolve_topic_config,
)
from compaction.cli.preflight import check_round
from compaction.cli.progress import Reporter
from compaction.steps.group import CLEANED, GroupSpec, SourceSegment
from compaction.runtime.s3 import redact_uri
from compaction.runtime.storage import Storage, acquire_run_lock, ensure_kafka_not_running
from compaction.settings import Settings

log = logging.getLogger("compaction")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


@dataclasses.dataclass
class Planned:
    """A partition on its way through the round."""

    log_dir: LogDirState
    part: PartitionDir
    result: rpt.PartitionResult
    plan: PartitionPlan | None = None
    specs: list[GroupSpec] = dataclasses.field(default_factory=list)
    erasing: bool = False  # --erase-keys applies to its topic: every segment's listed keys go
    compacting: bool = True  # the round's compaction decisions apply (not --erase-only, eligible)


def _job_config(opts: JobOptions, topic: str) -> dict:
    # No topic config lives in a log dir (it is in the cluster metadata), so unless told
    # otherwise every selected topic is treated as compacted: that is why the user runs us.
    return {"cleanup.policy": "compact", **opts.config_for(topic)}


def _sized_segments(segs, checkpoint: int | None, start: int):
    """Indexes of the segments whose size the plan needs. All of them, except in the steady state
    of a partition cleaned before (checkpoint at the active base): nothing is cleanable, the ratio
    is 0 / clean bytes, which is 0 when any non-active segment is non-empty (else NaN, as in
    Kafka), and no other rule reads a size or mtime. Then the non-active segments are stat'ed
    from the last one back only until a non-empty one (most of a 10,000 x 100 steady-state plan
    was one stat per segment)."""
    base = segs[-1].base_offset
    if checkpoint != base or start > base:
        return range(len(segs))
    sized = {len(segs) - 1}
    for i in range(len(segs) - 2, -1, -1):
        sized.add(i)
        if segs[i].log.size > 0:
            break
    return sized


def _partition_state(
    ld: LogDirState, part: PartitionDir, config, first_unstable: int | None = None, *,
    now_ms: int | None = None, exact_lso: bool = True, index_sizes: bool = True,
) -> PartitionState:  # fmt: skip
    """The partition as `plan_partition` sees it, reading only what its rules look at
    (docs/kafka-rules.md#cleanable-range, #dirty-ratio): segment sizes and mtimes come from the listing, and

    * the log end offset (a read of the active segment's index and tail) only where it can change
      the plan: a checkpoint past the active base (Kafka resets a checkpoint beyond the LEO), an
      open transaction at or past it, or, with `exact_lso`, a high watermark past it (the LSO then
      bounds nothing, only the reported reason can tell: `_plan_one` asks again for that case);
    * largest timestamps (last `.timeindex` entry) only with min.compaction.lag.ms > 0, for the
      dirty non-active segments up to the first one too recent (findFirstUncleanableSegment stops
      there; with `now_ms` None, all of them);
    * first batch timestamps only with max.compaction.lag.ms set, for the dirty non-active
      segments (maxCompactionDelay);
    * index sizes (groupSegmentsBySize only) with `index_sizes`.

    Values not read are left unknown (`segment_meta`); the planner never looks at them.
    """
    storage, segs = ld.storage, part.segments
    active = segs[-1]
    base = active.base_offset  # the LEO is at least this
    start = max(ld.log_start_offsets.get(part.key, 0), segs[0].base_offset)
    checkpoint = ld.cleaner_checkpoint.get(part.key)
    hw = ld.high_watermarks.get(part.key)
    need_leo = (
        (checkpoint is not None and checkpoint > base)
        or (first_unstable is not None and first_unstable >= base and (hw is None or hw > base))
        or (exact_lso and hw is not None and hw > base)
    )
    leo = log_end_offset(storage, active) if need_leo or active.log.size == 0 else None
    if hw is None:
        lso = None
    elif hw <= base:
        lso = hw  # min(HW, LEO) with LEO >= active base >= HW
    else:
        lso = min(hw, leo) if leo is not None else None  # >= the active base: bounds nothing
    if first_unstable is not None:  # LSO: docs/kafka-rules.md#last-stable-offset
        bound = lso if lso is not None else leo
        lso = first_unstable if bound is None else min(bound, first_unstable)  # None: LEO > it
    sized = _sized_segments(segs, checkpoint, start)
    metas = [segment_meta(storage, s, index_sizes=index_sizes, sizes=i in sized) for i, s in enumerate(segs)]
    min_lag = config.min_compaction_lag_ms > 0
    max_lag = config.max_compaction_lag_ms < LONG_MAX
    if min_lag or max_lag:
        # cleanableOffsets' checkpoint validation; without the LEO the checkpoint is <= the base
        first_dirty = start if checkpoint is None else checkpoint
        if first_dirty < start or first_dirty > (leo if leo is not None else base):
            first_dirty = start
        at = {m.base_offset: i for i, m in enumerate(metas)}
        horizon = None if now_ms is None else now_ms - config.min_compaction_lag_ms
        for m in non_active_segments_from(metas, first_dirty):
            i = at[m.base_offset]
            if min_lag:
                largest = last_time_entry_ts(storage, segs[i])
                metas[i] = dataclasses.replace(metas[i], largest_timestamp=largest)
            if max_lag:
                first_ts = first_batch_timestamp(storage, segs[i])
                metas[i] = dataclasses.replace(metas[i], first_batch_timestamp=first_ts)
            if min_lag and horizon is not None and metas[i].effective_largest_timestamp > horizon:
                min_lag = False  # the first uncleanable segment: later ones are never looked at
                if not max_lag:
                    break
    # An unknown LEO is >= the active base, and then so is every checkpoint that is not reset.
    return PartitionState(tuple(metas), start, leo if leo is not None else base, checkpoint, lso)


def _aborted_txns(storage: Storage, part: PartitionDir) -> tuple:
    out = []
    for seg in part.segments:
        if seg.txnindex is not None and seg.txnindex.size:
            out.extend(read_txn_index(read_small(storage, seg.txnindex.path)))
    return tuple(out)


def _specs(p: Planned, opts: JobOptions, config, next_id: int) -> list[GroupSpec]:
    """The groups of a partition: the plan's, and with --erase-keys one erasing-only group per
    segment the compaction does not rewrite (all of them with --erase-only or when the partition
    is not eligible), the active one included, all in log order."""
    plan, part, ld = p.plan, p.part, p.log_dir
    erase = erase_set_for(opts, part.topic)
    p.erasing = erase is not None
    p.compacting = plan.eligible and not opts.erase_only
    by_base = {s.base_offset: s for s in part.segments}
    after = {a.base_offset: b.base_offset for a, b in zip(part.segments, part.segments[1:])}
    src = lambda s: SourceSegment(s.base_offset, s.log.size, s.log.mtime_ns, after.get(s.base_offset))  # noqa: E731
    tail = tuple(src(s) for s in part.segments if s.base_offset >= plan.first_uncleanable_offset)
    aborted = _aborted_txns(ld.storage, part)
    groups = [(tuple(g), False) for g in plan.groups] if p.compacting else []
    if p.erasing:  # the erasing-only groups read every other segment: no tail is left to read apart
        covered = {b for g, _ in groups for b in g}
        groups = sorted(groups + [((s.base_offset,), True) for s in part.segments if s.base_offset not in covered])
        tail = ()
    # An erasing-only partition has no dirty section: nothing enters the offset map as dirty,
    # and no open transaction bounds it.
    first_dirty, bound = (plan.first_dirty_offset, plan.first_uncleanable_offset) if p.compacting else (0, 0)
    specs = []
    for n, (group, erase_only) in enumerate(groups):
        specs.append(
            GroupSpec(
                group_id=next_id + n,
                topic=part.topic,
                partition=part.partition,
                storage=ld.storage,
                part_path=part.path,
                segments=tuple(src(by_base[b]) for b in group),
                first_dirty_offset=first_dirty,
                upper_bound=bound,
                now_ms=opts.now_ms,
                delete_retention_ms=config.delete_retention_ms,
                legacy_delete_horizon_ms=plan.legacy_delete_horizon_ms,
                index_interval_bytes=config.index_interval_bytes,
                aborted_txns=aborted,
                tail_segments=tail if n == len(groups) - 1 else (),
                max_message_bytes=config.max_message_bytes,
                read_mode=opts.read_mode,
                write_mode=opts.write_mode,
                dry_run=opts.dry_run,
                leader_epoch_checkpoint=part.leader_epoch_checkpoint,
                erase=erase,
                erase_only=erase_only,
            )
        )
    return specs


# The round's key file in its shipped form (`run` loads it once; asked per partition).
_ERASE_SETS: dict[str, EraseSet] = {}


def erase_set_for(opts: JobOptions, topic: str) -> EraseSet | None:
    """The run's listed keys when some apply to `topic` (--erase-keys), else None."""
    if not opts.erase_keys:
        return None
    if opts.erase_keys not in _ERASE_SETS:
        _ERASE_SETS[opts.erase_keys] = load_erase_set(opts.erase_keys)
    erase = _ERASE_SETS[opts.erase_keys]
    return erase if erase.applies_to(topic) else None


def _plan_one(
    ld: LogDirState, part: PartitionDir, opts: JobOptions, first_unstable: int | None = None
) -> Planned:
    """Plan one partition from its listing; when the plan cleans it, rebuild a missing `.index`
    (after `validate_contents` has read its index files; otherwise those checks run in the
    partition's task, or on the driver for a dry run). A skipped partition is read no further than
    its plan needs (`_partition_state`), so a damaged file in it is not seen: it is left as found."""
    result = rpt.PartitionResult(part.topic, part.partition, redact_uri(ld.uri),  # no credentials in the report
                                 segmentsBefore=len(part.segments))  # fmt: skip
    p = Planned(ld, part, result)
    try:
        check_listing(part)
        config = resolve_topic_config(opts.topic_config.get(part.topic), _job_config(opts, part.topic))

        def plan(**kw) -> PartitionPlan:
            state = _partition_state(ld, part, config, first_unstable, now_ms=opts.now_ms, **kw)
            return plan_partition(part.topic, part.partition, state, config, opts.now_ms)

        p.plan = plan(exact_lso=False, index_sizes=False)
        if not p.plan.eligible and p.plan.reason in (REASON_LAG_BOUND, REASON_NOTHING_CLEANABLE):
            p.plan = plan(index_sizes=False)  # an LSO at the active base names another reason
        if p.plan.eligible:
            missing = [seg for seg in part.segments if seg.index is None]
            if opts.dry_run or missing:
                # A real round checks the index files in the task that reads the partition anyway
                # (spark_stages.compact_partition; the driver for partitions on the Spark map path):
                # 10,000 partitions' indexes are not read one by one here. A dry run reports
                # damage without tasks; a missing index is rebuilt only in a partition found sound.
                if opts.dry_run:  # how the segments fit together, as far as their first batches show
                    audit_structure(ld.storage, part)
                validate_contents(ld.storage, part, index_bounds=opts.dry_run)
            if missing and not opts.recover_only:
                # Rebuilt from the verified .log as a broker's LogLoader would
                # (docs/kafka-rules.md#broker-load-checks), only in a partition this run cleans (a skipped
                # partition is left exactly as found).
                interval, write = config.index_interval_bytes, not opts.dry_run
                for seg in missing:
                    action = rebuild_missing_index(ld.storage, part, seg, interval, write=write)
                    result.recovery.append(action)
            p.plan = plan(exact_lso=False)  # the groups: groupSegmentsBySize reads the index sizes
    except (CompactionError, ValueError, OSError) as exc:
        result.status, result.reason = rpt.FAILED, str(exc)
        return p
    plan = p.plan
    result.dirtyRatio = plan.cleanable_ratio
    result.dirtyBytes = plan.dirty_bytes
    result.firstDirtyOffset = plan.first_dirty_offset
    result.firstUncleanableOffset = plan.first_uncleanable_offset
    result.segmentsAfter = len(part.segments)
    if not plan.eligible:
        result.reason = plan.reason
    return p


def discover_and_plan(
    opts: JobOptions, listed: dict[str, LogDirState] | None = None, timings: dict[str, float] | None = None
) -> tuple[list[Planned], list[LogDirState]]:
    """List each log dir (or take the listing `_recover` made: `listed`), then plan its partitions
    on a thread pool (each partition touches only its own files; results keep the listing's order).
    `timings["listSeconds"]` gets the listing's seconds (added to what `_recover` put there)."""
    planned, dirs = [], []
    for uri in opts.log_dirs:
        ld = (listed or {}).get(uri)
        if ld is None:
            t = time.monotonic()
            ld = read_log_dir(uri, opts.topics)
            if timings is not None:
                timings["listSeconds"] = timings.get("listSeconds", 0.0) + time.monotonic() - t
        dirs.append(ld)
        with gc_paused():  # ~1M SegmentMeta objects at 10,000 x 100: see gc_paused
            planned += map_threads(lambda part, ld=ld: _plan_one(ld, part, opts), ld.partitions)
    return planned, dirs


def _recover(
    opts: JobOptions, listed: dict[str, LogDirState] | None = None, timings: dict[str, float] | None = None
) -> dict[tuple[str, str], list[str]]:
    """Finish or roll back interrupted swaps in every selected partition (Kafka's LogLoader).
    Fills `listed` with each log dir's listing, recovered partitions listed again, for
    `discover_and_plan` (one listing per run)."""
    done = {}
    for uri in opts.log_dirs:
        t = time.monotonic()
        ld = read_log_dir(uri, opts.topics)
        if timings is not None:
            timings["listSeconds"] = timings.get("listSeconds", 0.0) + time.monotonic() - t
        for i, part in enumerate(ld.partitions):
            if part.transient or part.has_commit_intent:  # seen in the listing: no exists() per partition
                done[(uri, part.path)] = recover_partition(ld.storage, part.path).actions
                ld.partitions[i] = relist_partition(ld.storage, part)
        if listed is not None:
            listed[uri] = ld
    for (_, path), actions in done.items():
        for a in actions:
            log.info("recovery %s: %s", path, a)
    return done


def _lock_log_dirs(opts: JobOptions) -> list:
    locks = []
    for uri in opts.log_dirs:
        storage, path = Storage.for_uri(uri)
        if not storage.is_local:
            continue  # object stores have no locks; documented: one run per prefix (Airflow max_active_runs=1)
        if not opts.ignore_broker_lock:
            ensure_kafka_not_running(path)
        if not opts.dry_run:
            locks.append(acquire_run_lock(path))
    return locks


def _spark_session(settings: Settings):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("kafka-offline-compaction")
    if settings.spark_master:
        builder = builder.master(settings.spark_master)
    spark = builder.getOrCreate()
    # The rewrite's shuffle carries few bytes but each group is heavy: never merge groups into
    # one task (AQE coalescing would), and keep small runs from spawning 200 empty tasks.
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    return spark


class _SparkStarter:
    """The Spark session, and Python workers warmed up (compaction/spark/warmup.py), started on a thread
    at the beginning of the run so that both overlap recovery, discovery and planning. The
    warm-up waits for the plan (`planned`): none for a round with nothing to clean.
    `Settings.warmup` (Spark conf `spark.kafka.compaction.warmup`) turns the warm-up off. Once the
    session is up, `settings` are the round's with its Spark conf read."""

    def __init__(self, settings: Settings) -> None:
        self._t0 = time.monotonic()
        self._out: dict = {}
        self._plan: list[Planned] = []
        self._planned = threading.Event()
        self.settings = settings
        self._thread = threading.Thread(target=self._start, name="spark-start", daemon=True)
        self._thread.start()

    def planned(self, todo: list[Planned]) -> None:
        """The partitions the stages will run (their specs set); [] when none."""
        self._plan = list(todo)
        self._planned.set()

    def _start(self) -> None:
        try:
            spark = _spark_session(self.settings)
            self._out["sparkStartSeconds"] = time.monotonic() - self._t0
            self.settings = settings = self.settings.with_spark_conf(spark.conf)
            self._planned.wait()
            if self._plan and settings.warmup:
                from compaction.spark.warmup import warm_executors

                self._out["workerWarmupSeconds"] = warm_executors(spark, settings.worker)
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


def _partition_bytes(p: Planned) -> int:
    return sum(seg.size for s in p.specs for seg in (*s.segments, *s.tail_segments))


# A partition of one group below this is compacted whole even when it is more than a core's share
# of the round: the ranges stage's exchange costs more than the second core saves.
RANGES_MIN_BYTES = 128 << 20


def cut_into_ranges(sizes: list[int], groups: list[int], cores: int, limit: int) -> list[bool]:
    """Per partition: cut into ranges (compaction/steps/range_task.py) or compacted whole. Cut when it
    holds more than `limit` bytes, or more than a core's share of the round (one big partition
    alone would leave the other cores idle) and either several groups or RANGES_MIN_BYTES."""
    share = sum(sizes) / max(1, cores)
    return [size > limit or (size > share and (n > 1 or size >= RANGES_MIN_BYTES))
            for size, n in zip(sizes, groups)]  # fmt: skip


def _cut(spark, todo: list[Planned], settings: Settings) -> list[bool]:
    sizes = [_partition_bytes(p) for p in todo]
    return cut_into_ranges(sizes, [len(p.specs) for p in todo], spark.sparkContext.defaultParallelism,
                           settings.partition_task_max_bytes)  # fmt: skip


def _run_stages(
    spark, todo: list[Planned], opts: JobOptions, settings: Settings, timings: dict[str, float] | None = None
) -> tuple[dict[int, dict], dict[int, int]]:
    """Scan, then rewrite. Also returns {index in `todo`: first unstable offset} for the partitions
    whose scan found an open transaction below the planned bound: they are not rewritten.
    `timings` (if given) receives the seconds of each Spark job (added up over calls)."""
    timings = {} if timings is None else timings
    cut = _cut(spark, todo, settings)
    whole = [i for i, c in enumerate(cut) if not c]
    ranged = [i for i, c in enumerate(cut) if c]
    results: dict[int, dict] = {}
    replan: dict[int, int] = {}
    for idx, stage, key in ((whole, _run_partition_tasks, "partitionTasksSeconds"),
                            (ranged, _run_ranges, "rangesSeconds")):  # fmt: skip
        if idx:
            t = time.monotonic()
            r, rp = stage(spark, [todo[i] for i in idx], opts, timings, settings)
            results.update(r)
            replan.update({idx[k]: v for k, v in rp.items()})
            timings[key] = timings.get(key, 0.0) + time.monotonic() - t
    return results, replan


MIN_SPLIT_TASK_BYTES = 1 << 30  # below this per task, more tasks than cores cost more than they balance


def task_count(total_bytes: int, cores: int, tasks_per_core: int) -> int:
    """Whole-partition tasks for `total_bytes` of partitions: `tasks_per_core` per core, so that
    Spark can even out partitions whose cost their bytes misjudge (codecs), but never more than
    one per core unless each holds MIN_SPLIT_TASK_BYTES: between two tasks on a core Spark spends
    ~0.2-0.3 s (result, scheduling, the worker's task set-up), what a core compacts ~150 MB in."""
    wanted = max(1, cores) * max(1, tasks_per_core)
    return max(1, min(cores, wanted), min(wanted, total_bytes // MIN_SPLIT_TASK_BYTES))


def _run_partition_tasks(spark, todo: list[Planned], opts: JobOptions, timings: dict[str, float],
                         settings: Settings):  # fmt: skip
    """Partitions compacted whole in their task (spark_stages.compact_partition), packed by bytes
    into at most `tasks_per_core` tasks per core, biggest first (a task's fixed cost - Python
    worker, imports, Spark scheduling - is paid per task, not per partition; see `task_count`)."""
    from compaction.spark import stages as st

    sc = spark.sparkContext
    sizes = [_partition_bytes(p) for p in todo]
    bins = st.pack(sizes, task_count(sum(sizes), sc.defaultParallelism, opts.tasks_per_core))
    sc.setJobGroup("partitions", "scan, offset map, producer state and rewrite, whole partitions per task")
    parts = sc.broadcast({b: [todo[i].specs for i in ids] for b, ids in enumerate(bins)})
    return _task_rows(st.fused(sc, len(bins), parts, settings.worker).collect(), todo, timings)


def _run_ranges(spark, todo: list[Planned], opts: JobOptions, timings: dict[str, float], settings: Settings):
    """Partitions cut into ranges: one barrier stage whose tasks scan their ranges, merge the key
    summaries and rewrite, meeting through the exchange directory (compaction/steps/range_task.py)."""
    from compaction.spark import stages as st
    from compaction.runtime.exchange import Exchange
    from compaction.steps.range_task import RangePlan

    sc = spark.sparkContext
    plan = RangePlan.cut([p.specs for p in todo], st.task_slots(sc))
    sc.setJobGroup("ranges", f"{sum(map(len, plan.tasks))} ranges in {len(plan.tasks)} tasks: scan, merge, rewrite")
    with Exchange.create(settings.exchange_dir, sc.master.startswith("local"), todo[0].log_dir.uri) as ex:
        rows = st.ranged(sc, sc.broadcast(plan), ex, settings.worker).collect()
    return _task_rows(rows, todo, timings)


def _task_rows(rows: list[dict], todo: list[Planned], timings: dict[str, float]):
    """The tasks' rows as (results by group id, {index in `todo`: first unstable offset}); their
    timings added to `timings`."""
    from compaction.steps.range_task import STATS_ROW

    owner = {s.group_id: i for i, p in enumerate(todo) for s in p.specs}
    results, replan = {}, {}
    for d in rows:
        scan_s, map_s, cpu_s = (d.pop(k) or 0.0 for k in ("scan_seconds", "map_seconds", "cpu_seconds"))
        _add(timings, taskScanSeconds=scan_s, taskMapSeconds=map_s, taskCpuSeconds=cpu_s)
        if d["group_id"] == STATS_ROW:
            continue
        _add(timings, taskRewriteSeconds=d["seconds"] or 0.0)
        unstable = d.pop("first_unstable")
        if unstable is not None:
            replan[owner[d["group_id"]]] = unstable
        else:
            results[d["group_id"]] = d
    return results, replan


def _add(timings: dict[str, float], **seconds: float) -> None:
    for name, v in seconds.items():
        timings[name] = timings.get(name, 0.0) + float(v)


def _discard_cleaned(p: Planned) -> None:
    storage = p.log_dir.storage
    for info in storage.list_dir(p.part.path):
        if info.name.endswith(CLEANED):
            storage.delete(info.path)


def _outcome(p: Planned, results: dict[int, dict]) -> list[dict] | None:
    """The rewrite rows of the partition's groups, or None after marking it failed."""
    rows = [results.get(s.group_id, {"error": "no result from the rewrite task"}) for s in p.specs]
    errors = [row["error"] for row in rows if row.get("error")]
    if errors:
        p.result.status, p.result.reason = rpt.FAILED, errors[0]
        return None
    return rows


def _record_erasure(p: Planned, rows: list[dict]) -> None:
    """The partition's erase counts from its groups' rows: records and bytes, and the listed keys
    met by any unit (their bitmaps OR-ed) or by none."""
    erase = p.specs[0].erase
    n = key_count(erase, p.part.topic)
    met = np.zeros(n, bool)
    for row in rows:
        met |= unpack_bits(row.get("erase_found"), n)
    r = p.result
    r.erasedRecords = sum(int(row.get("erased_records") or 0) for row in rows)
    r.erasedBytes = sum(int(row.get("erased_bytes") or 0) for row in rows)
    r.eraseKeysFound = int(met.sum())
    r.eraseKeysNotFound = n - r.eraseKeysFound


def _record_sizes(p: Planned, rows: list[dict]) -> None:
    r = p.result
    if p.erasing:
        _record_erasure(p, rows)
    r.endOffset = p.plan.first_uncleanable_offset
    r.groups = len(p.specs)
    r.segmentsAfter = r.segmentsBefore - sum(len(s.segments) for s in p.specs) + len(p.specs)
    for key, total in (("bytes_read", "bytesRead"), ("bytes_written", "bytesWritten"),
                       ("records_read", "recordsRead"), ("records_written", "recordsWritten"),
                       ("invalid_records", "invalidRecords")):  # fmt: skip
        setattr(r, total, sum(int(row[key] or 0) for row in rows))
    r.reclaimableBytes = r.bytesRead - r.bytesWritten
    r.reclaimableRecords = r.recordsRead - r.recordsWritten
    r.seconds = sum(float(row["seconds"] or 0) for row in rows)


def _commit(p: Planned, results: dict[int, dict]) -> None:
    rows = _outcome(p, results)
    if rows is None:
        _discard_cleaned(p)
        return
    replacements = [Replacement(s.new_base, tuple(x.base_offset for x in s.segments))
                    for s, row in zip(p.specs, rows) if not row.get("unchanged")]  # fmt: skip
    _record_sizes(p, rows)
    if not replacements:  # erasing only, and no listed key in it
        p.result.status, p.result.reason = rpt.SKIPPED, "no listed key in it, nothing to compact"
        return
    commit_partition(p.log_dir.storage, p.part.path, replacements, remove_old=False)
    p.result.status, p.result.reason = rpt.CLEANED, None if p.compacting else "erased (erase only, not compacted)"


def _dry_outcome(p: Planned, results: dict[int, dict]) -> None:
    """A dry run's verdict: what the round would do, with the sizes its rewrite would write."""
    rows = _outcome(p, results)
    if rows is not None:
        p.result.status, p.result.reason = rpt.ELIGIBLE, "a round would clean it (dry run)"
        if not p.compacting:
            p.result.reason = "a round would erase listed keys in it (dry run)"
            if all(row.get("unchanged") for row in rows):
                p.result.status, p.result.reason = rpt.SKIPPED, "no listed key in it, nothing to compact (dry run)"
        _record_sizes(p, rows)


def _remove_replaced(p: Planned) -> None:
    """The replaced segments' files (`*.deleted`) once the checkpoint is advanced, as Kafka
    deletes them asynchronously; a failure leaves them to the next run's recovery."""
    try:
        remove_replaced(p.log_dir.storage, p.part.path)
    except OSError as exc:
        log.warning("could not remove the replaced segments of %s (the next run will): %s", p.part.path, exc)


def _advance_checkpoints(planned: list[Planned], dirs: list[LogDirState]) -> None:
    """Write each log dir's cleaner-offset-checkpoint once, atomically, after its commits."""
    for ld in dirs:
        updates = {}
        for p in planned:
            if p.log_dir is not ld or p.plan is None:
                continue
            if p.result.status == rpt.CLEANED and p.compacting:  # erasing alone leaves the dirty section as it was
                updates[p.part.key] = p.plan.first_uncleanable_offset
            elif p.plan.force_update_checkpoint and p.result.status != rpt.FAILED:
                updates[p.part.key] = p.plan.first_dirty_offset  # Kafka resets invalid checkpoints
        if updates:
            path = f"{ld.path}/{CLEANER_CHECKPOINT}"
            write_checkpoint(ld.storage, path, {**read_checkpoint(ld.storage, path), **updates})


def _replan_open_transactions(spark, todo, planned, replan, results, opts, settings, next_id,
                              timings=None) -> list[Planned]:  # fmt: skip
    """Partitions whose scan found an open transaction below the planned bound (Kafka's LSO,
    docs/kafka-rules.md#last-stable-offset): plan them again with that bound and run the stages once more for
    them. Returns the new list of partitions to commit; `planned` and `results` are updated in place."""
    again = []
    for i, first_unstable in replan.items():
        old = todo[i]
        new = _plan_one(old.log_dir, old.part, opts, first_unstable)
        new.result.recovery = old.result.recovery
        planned[next(k for k, x in enumerate(planned) if x is old)] = todo[i] = new
        if new.plan is not None and _selected(new, opts):
            config = resolve_topic_config(opts.topic_config.get(new.part.topic), _job_config(opts, new.part.topic))
            new.specs = _specs(new, opts, config, next_id)
            next_id += len(new.specs)
            again.append(new)
    more, still = _run_stages(spark, again, opts, settings, timings) if again else ({}, {})
    results.update(more)
    for i in still:  # not expected: the new bound lies at or below every open transaction
        again[i].specs = []
        again[i].result.status = rpt.FAILED
        again[i].result.reason = "open transaction below the replanned bound"
    return [p for p in todo if p.specs]


def _selected(p: Planned, opts: JobOptions) -> bool:
    """Whether the round's stages take the partition: eligible for compaction, or (--erase-keys)
    of a topic that some listed key applies to."""
    if p.plan is None or p.result.status == rpt.FAILED:
        return False
    if erase_set_for(opts, p.part.topic) is not None:
        return True
    return p.plan.eligible and not opts.erase_only


def _say_planned(progress: Reporter, planned: list[Planned], todo: list[Planned], timings: dict) -> None:
    failed = sum(p.result.status == rpt.FAILED for p in planned)
    progress.phase(
        "planned %d partitions in %.1f s: %d to clean, %d skipped, %d failed",
        len(planned), timings.get("recoverySeconds", 0.0) + timings.get("planSeconds", 0.0), len(todo),
        len(planned) - len(todo) - failed, failed,
    )  # fmt: skip


def _scan_and_rewrite(starter: _SparkStarter, todo: list[Planned], planned: list[Planned], opts: JobOptions,
                      progress, timings: dict[str, float]) -> tuple[list[Planned], dict[int, dict]]:  # fmt: skip
    """The Spark stages of the round over `todo`; returns the partitions to commit (after any
    re-plan for an open transaction) and the rewrite rows by group id."""
    next_id = 0
    for p in todo:
        config = resolve_topic_config(opts.topic_config.get(p.part.topic), _job_config(opts, p.part.topic))
        p.specs = _specs(p, opts, config, next_id)
        next_id += len(p.specs)
    starter.planned(todo)
    with progress.waiting("waiting for Spark (start-up and worker warm-up)"):
        spark = starter.get(timings)
    progress.phase("Spark UI: %s", spark.sparkContext.uiWebUrl or "disabled (spark.ui.enabled=false)")
    t = time.monotonic()
    with progress.watch(spark.sparkContext, sum(map(_partition_bytes, todo)), len(todo)):
        results, replan = _run_stages(spark, todo, opts, starter.settings, timings)
        if replan:
            todo = _replan_open_transactions(spark, todo, planned, replan, results, opts, starter.settings,
                                             next_id, timings)  # fmt: skip
    timings["stagesSeconds"] = time.monotonic() - t
    return todo, results


def run(opts: JobOptions, progress: Reporter | None = None) -> tuple[int, dict]:
    started_ms = int(time.time() * 1000)
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    settings = Settings.resolve(opts, None, os.environ)  # the Spark conf's knobs: once the session is up
    use_threads(settings.threads)
    progress = progress or Reporter(interval=settings.progress_seconds)
    check_round(opts)  # a usage error (not a log dir, no report dir) before any lock or write
    _ERASE_SETS.clear()  # the key file as it is now (load_erase_set parses it again only if changed)
    locks = _lock_log_dirs(opts)
    # A dry run starts Spark only once it knows it has partitions to size (no start-up to hide).
    starter = None if opts.dry_run or opts.recover_only else _SparkStarter(settings)
    try:
        listed: dict[str, LogDirState] = {}
        progress.phase("%s and listing %d log dir(s)", "checking" if opts.dry_run else "recovering", len(opts.log_dirs))
        recovered = {} if opts.dry_run else _recover(opts, listed, timings)
        timings["recoverySeconds"] = time.monotonic() - t0
        planned, dirs = discover_and_plan(opts, listed, timings)
        timings["planSeconds"] = time.monotonic() - t0 - timings["recoverySeconds"]
        for p in planned:
            p.result.recovery = recovered.get((p.log_dir.uri, p.part.path), []) + p.result.recovery
        todo = [p for p in planned if _selected(p, opts)]
        chosen = {id(p) for p in todo}
        for p in planned:
            if opts.erase_only and p.plan is not None and p.plan.eligible and id(p) not in chosen:
                p.result.reason = "no listed key applies to its topic (erase only)"
        _say_planned(progress, planned, todo, timings)
        if opts.recover_only or opts.plan_only:
            for p in todo:
                what = "eligible" if p.plan.eligible and not opts.erase_only else "to erase"
                p.result.reason = f"{what} (plan only)" if opts.plan_only else f"{what} (recover only)"
        elif todo and opts.dry_run:
            starter = _SparkStarter(settings)
            todo, results = _scan_and_rewrite(starter, todo, planned, opts, progress, timings)
            for p in todo:
                _dry_outcome(p, results)
        elif todo:
            todo, results = _scan_and_rewrite(starter, todo, planned, opts, progress, timings)
            progress.phase("committing %d partitions", len(todo))
            t3 = time.monotonic()
            # Partitions commit independently (each its own intent file and swap,
            # docs/kafka-rules.md#swap-protocol), so
            # their renames and fsyncs overlap on a thread pool; the checkpoint waits for all.
            map_threads(lambda p: _commit(p, results), todo)
            _advance_checkpoints(planned, dirs)
            timings["commitSeconds"] = time.monotonic() - t3
            t4 = time.monotonic()
            map_threads(_remove_replaced, [p for p in todo if p.result.status == rpt.CLEANED])
            timings["deleteSeconds"] = time.monotonic() - t4
        elif not opts.dry_run:
            _advance_checkpoints(planned, dirs)
    finally:
        if starter is not None:
            starter.join()  # a round with nothing to clean still lets the session come up whole
        for lock in locks:
            lock.release()
    timings["totalSeconds"] = time.monotonic() - t0
    results = [p.result for p in planned]
    report = rpt.build_report(results, _args_echo(opts), timings, started_ms)
    unfreeze_gc()
    code = EXIT_FAILED if any(r.status == rpt.FAILED for r in results) else EXIT_OK
    return code, report


def _args_echo(opts: JobOptions) -> dict:
    args = dataclasses.asdict(opts)
    args["log_dirs"] = [redact_uri(uri) for uri in opts.log_dirs]  # s3://KEY:SECRET@... stays out
    for name in ("report", "report_html", "metrics_file", "erase_keys"):
        args[name] = getattr(opts, name) and redact_uri(getattr(opts, name))
    return args


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    logs.setup(opts.log_format)
    try:
        code, report = run(opts)
    except CheckpointError as exc:
        # Like a broker taking the log dir offline: nothing is written until the file is fixed.
        print(f"error: {exc}\nNothing was written. Fix the file (format: version line, entry count "
              "line, then '<topic> <partition> <offset>' lines) or move it away: without it every "
              "partition is treated as fully dirty, which is safe but cleans everything again.",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    except CompactionError as exc:
        # A held lock (broker or another run) stops the run before anything is written.
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if opts.report:
        storage, path = Storage.for_uri(opts.report)
        storage.write_atomic(path, rpt.dumps(report).encode())
    if opts.report_html:
        storage, path = Storage.for_uri(opts.report_html)
        storage.write_atomic(path, report_html.render(report).encode())
    for entry in report["partitions"]:
        logs.log_partition(entry)
    if opts.dry_run:
        print(rpt.reclaim_table(report), flush=True)
    logs.log_totals(report["totals"], report["timings"].get("totalSeconds"))
    if opts.metrics_file:
        from compaction.cli import metrics

        metrics.write(opts.metrics_file, report, code, time.time())
    return code
