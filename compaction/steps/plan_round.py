"""Planning a round: each partition's state read from its listing, its plan (compaction/policy/plan.py),
and its groups as `GroupSpec`s (how they are laid over Spark tasks: compaction/steps/schedule.py).

A partition is planned from its listing and reads no more of its files than the plan's rules
look at (`partition_state`); the rules themselves are all in compaction/policy/plan.py.
"""

from __future__ import annotations

import dataclasses
import time

from compaction.errors import PARTITION_ERRORS
from compaction.format.txnindex import read_txn_index
from compaction.policy.plan import (
    REASON_LAG_BOUND,
    REASON_NOTHING_CLEANABLE,
    PartitionPlan,
    PartitionState,
    high_watermark_in_reach,
    last_stable_offset,
    non_active_segments_from,
    plan_partition,
    too_recent_to_clean,
    validated_checkpoint,
)
from compaction.policy.topic_config import LONG_MAX, TopicConfig, resolve_topic_config
from compaction.runtime.driver import gc_paused, map_threads
from compaction.runtime.s3 import redact_uri
from compaction.runtime.storage import Storage
from compaction.settings import JobOptions
from compaction.steps import report as rpt
from compaction.steps.discover import (
    LogDirState,
    PartitionDir,
    first_batch_timestamp,
    last_time_entry_ts,
    log_end_offset,
    read_log_dir,
    segment_meta,
)
from compaction.steps.erase import EraseSet, load_erase_set
from compaction.steps.group import GroupSpec, SourceSegment
from compaction.steps.validate import (
    RebuiltIndex,
    audit_structure,
    check_listing,
    planned_rebuild,
    rebuilt_index,
    validate_contents,
)


@dataclasses.dataclass
class Planned:
    """A partition on its way through the round."""

    log_dir: LogDirState
    partition_dir: PartitionDir
    result: rpt.PartitionResult
    plan: PartitionPlan | None = None
    specs: list[GroupSpec] = dataclasses.field(default_factory=list)
    erase: EraseSet | None = None  # the round's --erase-keys, when some apply to its topic
    erasing: bool = False  # --erase-keys applies to its topic: every segment's listed keys go
    compacting: bool = True  # the round's compaction decisions apply (not --erase-only, eligible)
    # Index files rebuilt from verified segments, written only if the round cleans the partition
    # (`commit.commit`): a partition the round refuses is left exactly as found.
    rebuilt: list[RebuiltIndex] = dataclasses.field(default_factory=list)
    aborted: tuple = ()  # its `.txnindex` entries, read when the stages take it (`plan_one`)


def job_config(opts: JobOptions, topic: str) -> dict:
    # No topic config lives in a log dir (it is in the cluster metadata), so unless told
    # otherwise every selected topic is treated as compacted: that is why the user runs us.
    return {"cleanup.policy": "compact", **opts.config_for(topic)}


def topic_config(opts: JobOptions, topic: str) -> TopicConfig:
    """The topic's configs: per-topic override > job-wide option > Kafka default."""
    return resolve_topic_config(opts.topic_config.get(topic), job_config(opts, topic))


def sized_segments(segs, checkpoint: int | None, start: int):
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


def partition_state(
    ld: LogDirState,
    partition_dir: PartitionDir,
    config: TopicConfig,
    first_unstable: int | None = None,
    *,
    now_ms: int | None = None,
    exact_lso: bool = True,
    index_sizes: bool = True,
    exact_hw: bool = False,
) -> PartitionState:
    """The partition as `plan_partition` sees it, reading only what its rules look at: segment
    sizes and mtimes come from the listing, and

    * the log end offset (a read of the active segment's index and tail) only where it can change
      the plan: a checkpoint past the active base (Kafka resets a checkpoint beyond the LEO), an
      open transaction at or past it, or, with `exact_lso`, a high watermark past it (the LSO then
      bounds nothing, only the reported reason can tell: `plan_one` asks again for that case), or,
      with `exact_hw`, a high watermark past the active base or unknown (the log end offset then
      tells whether a cleaned batch can end at the high watermark: `plan_one` asks for an
      eligible partition, whose active segment its task reads anyway);
    * largest timestamps and first batch timestamps as `_lag_timestamps` says;
    * index sizes (groupSegmentsBySize only) with `index_sizes`.

    Values not read are left unknown (`segment_meta`); the planner never looks at them.
    """
    storage, segs = ld.storage, partition_dir.segments
    active = segs[-1]
    base = active.base_offset  # the LEO is at least this
    start = max(ld.log_start_offsets.get(partition_dir.key, 0), segs[0].base_offset)
    checkpoint = ld.cleaner_checkpoint.get(partition_dir.key)
    hw = ld.high_watermarks.get(partition_dir.key)
    need_leo = (
        (checkpoint is not None and checkpoint > base)
        or (first_unstable is not None and first_unstable >= base and (hw is None or hw > base))
        or (exact_lso and hw is not None and hw > base)
        or (exact_hw and (hw is None or hw > base))
    )
    leo = log_end_offset(storage, active) if need_leo or active.log.size == 0 else None
    # An unknown LEO is >= the active base, and then so is every checkpoint that is not reset.
    end = leo if leo is not None else base
    sized = sized_segments(segs, checkpoint, start)
    metas = [segment_meta(storage, s, index_sizes=index_sizes, sizes=i in sized) for i, s in enumerate(segs)]
    first_dirty, _ = validated_checkpoint(checkpoint, start, end)
    _lag_timestamps(storage, partition_dir, metas, config, first_dirty, now_ms)
    lso = last_stable_offset(hw, first_unstable, leo, base)
    return PartitionState(tuple(metas), start, end, checkpoint, lso, high_watermark_in_reach(hw, leo, base))


def _lag_timestamps(
    storage: Storage,
    partition_dir: PartitionDir,
    metas: list,
    config: TopicConfig,
    first_dirty: int,
    now_ms: int | None,
) -> None:
    """Fill in `metas` the timestamps the lag rules read: largest timestamps (last `.timeindex`
    entry) only with min.compaction.lag.ms > 0, for the dirty non-active segments up to the first
    one too recent (findFirstUncleanableSegment stops there; with `now_ms` None, all of them);
    first batch timestamps only with max.compaction.lag.ms set, for the dirty non-active segments
    (maxCompactionDelay)."""
    min_lag = config.min_compaction_lag_ms > 0
    max_lag = config.max_compaction_lag_ms < LONG_MAX
    if not (min_lag or max_lag):
        return
    at = {m.base_offset: i for i, m in enumerate(metas)}
    for m in non_active_segments_from(metas, first_dirty):
        i = at[m.base_offset]
        seg = partition_dir.segments[i]
        if min_lag:
            metas[i] = dataclasses.replace(metas[i], largest_timestamp=last_time_entry_ts(storage, seg))
        if max_lag:
            first_ts = first_batch_timestamp(storage, seg)
            metas[i] = dataclasses.replace(metas[i], first_batch_timestamp=first_ts)
        lag = config.min_compaction_lag_ms
        if min_lag and now_ms is not None and too_recent_to_clean(metas[i], now_ms, lag):
            min_lag = False  # the first uncleanable segment: later ones are never looked at
            if not max_lag:
                break


def _aborted_txns(storage: Storage, partition_dir: PartitionDir) -> tuple:
    out = []
    for seg in partition_dir.segments:
        if seg.txnindex is not None and seg.txnindex.size:
            out.extend(read_txn_index(storage.read_small(seg.txnindex.path)))
    return tuple(out)


def group_specs(p: Planned, opts: JobOptions, config: TopicConfig, next_id: int) -> list[GroupSpec]:
    """The groups of a partition: the plan's, and with --erase-keys one erasing-only group per
    segment the compaction does not rewrite (all of them with --erase-only or when the partition
    is not eligible), the active one included, all in log order."""
    plan, partition_dir, ld = p.plan, p.partition_dir, p.log_dir
    erase = p.erase
    p.erasing = erase is not None
    p.compacting = plan.eligible and not opts.erase_only
    by_base = {s.base_offset: s for s in partition_dir.segments}
    after = {a.base_offset: b.base_offset for a, b in zip(partition_dir.segments, partition_dir.segments[1:])}
    src = lambda s: SourceSegment(s.base_offset, s.log.size, s.log.mtime_ns, after.get(s.base_offset))  # noqa: E731
    tail = tuple(src(s) for s in partition_dir.segments if s.base_offset >= plan.first_uncleanable_offset)
    aborted = p.aborted
    groups = [(tuple(g), False) for g in plan.groups] if p.compacting else []
    if p.erasing:  # the erasing-only groups read every other segment: no tail is left to read apart
        covered = {b for g, _ in groups for b in g}
        groups = sorted(
            groups
            + [((s.base_offset,), True) for s in partition_dir.segments if s.base_offset not in covered]
        )
        tail = ()
    # An erasing-only partition has no dirty section: nothing enters the offset map as dirty,
    # and no open transaction bounds it.
    first_dirty, bound = (plan.first_dirty_offset, plan.first_uncleanable_offset) if p.compacting else (0, 0)
    return [
        GroupSpec(
            group_id=next_id + n,
            topic=partition_dir.topic,
            partition=partition_dir.partition,
            storage=ld.storage,
            part_path=partition_dir.path,
            segments=tuple(src(by_base[b]) for b in group),
            first_dirty_offset=first_dirty,
            upper_bound=bound,
            now_ms=opts.now_ms,
            delete_retention_ms=config.delete_retention_ms,
            legacy_delete_horizon_ms=plan.legacy_delete_horizon_ms,
            index_interval_bytes=config.index_interval_bytes,
            aborted_txns=aborted,
            retain_empty_offset=plan.high_watermark if p.compacting else None,
            tail_segments=tail if n == len(groups) - 1 else (),
            max_message_bytes=config.max_message_bytes,
            segment_index_bytes=config.segment_index_bytes,
            producer_id_expiration_ms=opts.producer_id_expiration_ms,
            max_inflated_batch_bytes=opts.max_inflated_batch_bytes,
            read_mode=opts.read_mode,
            write_mode=opts.write_mode,
            dry_run=opts.dry_run,
            leader_epoch_checkpoint=partition_dir.leader_epoch_checkpoint,
            erase=erase,
            erase_only=erase_only,
        )
        for n, (group, erase_only) in enumerate(groups)
    ]


def set_specs(todo: list[Planned], opts: JobOptions, next_id: int = 0) -> int:
    """Give each partition of `todo` its groups, numbered from `next_id`; returns the next free id."""
    for p in todo:
        p.specs = group_specs(p, opts, topic_config(opts, p.partition_dir.topic), next_id)
        next_id += len(p.specs)
    return next_id


def plan_one(
    ld: LogDirState,
    partition_dir: PartitionDir,
    opts: JobOptions,
    first_unstable: int | None = None,
    erase: EraseSet | None = None,
) -> Planned:
    """Plan one partition from its listing; when the plan cleans it, rebuild a missing `.index`
    (after `validate_contents` has read its index files; otherwise those checks run in the
    partition's task, or on the driver for a dry run). A skipped partition is read no further than
    its plan needs (`partition_state`), so a damaged file in it is not seen: it is left as found."""
    result = rpt.PartitionResult(
        partition_dir.topic,
        partition_dir.partition,
        redact_uri(ld.uri),  # no credentials in the report
        segmentsBefore=len(partition_dir.segments),
    )
    # `erase`: the round's key file, loaded once by `discover_and_plan`, kept where it applies.
    p = Planned(
        ld,
        partition_dir,
        result,
        erase=erase if erase is not None and erase.applies_to(partition_dir.topic) else None,
    )
    try:
        check_listing(partition_dir)
        config = topic_config(opts, partition_dir.topic)

        def plan(**kw) -> PartitionPlan:
            state = partition_state(ld, partition_dir, config, first_unstable, now_ms=opts.now_ms, **kw)
            return plan_partition(partition_dir.topic, partition_dir.partition, state, config, opts.now_ms)

        p.plan = plan(exact_lso=False, index_sizes=False)
        if not p.plan.eligible and p.plan.reason in (REASON_LAG_BOUND, REASON_NOTHING_CLEANABLE):
            p.plan = plan(index_sizes=False)  # an LSO at the active base names another reason
        if p.plan.eligible:
            _check_and_rebuild_indexes(p, opts, config)
            # the groups (groupSegmentsBySize reads the index sizes) and the high watermark
            p.plan = plan(exact_lso=False, exact_hw=True)
        if selected(p, opts):  # read here, where a file that cannot be read fails its partition alone
            p.aborted = _aborted_txns(ld.storage, partition_dir)
    except PARTITION_ERRORS as exc:  # anything else is a bug: the round fails (errors.py)
        result.status, result.reason = rpt.FAILED, str(exc)
        return p
    plan = p.plan
    result.dirtyRatio = plan.cleanable_ratio
    result.dirtyBytes = plan.dirty_bytes
    result.firstDirtyOffset = plan.first_dirty_offset
    result.firstUncleanableOffset = plan.first_uncleanable_offset
    result.segmentsAfter = len(partition_dir.segments)
    if not plan.eligible:
        result.reason = plan.reason
    return p


def _check_and_rebuild_indexes(p: Planned, opts: JobOptions, config: TopicConfig) -> None:
    ld, partition_dir = p.log_dir, p.partition_dir
    missing = [seg for seg in partition_dir.segments if seg.index is None]
    if opts.dry_run or missing:
        # A real round checks the index files in the task that reads the partition anyway
        # (`pipeline.checked_scan`; the driver for partitions on the Spark map path):
        # 10,000 partitions' indexes are not read one by one here. A dry run reports
        # damage without tasks; a missing index is rebuilt only in a partition found sound.
        if opts.dry_run:  # how the segments fit together, as far as their first batches show
            audit_structure(ld.storage, partition_dir)
        validate_contents(ld.storage, partition_dir, index_bounds=opts.dry_run)
    if missing and not opts.recover_only:
        # Rebuilt from the verified .log as a broker's LogLoader would
        # (docs/kafka-rules.md#broker-load-checks), in memory: written only when the round cleans
        # the partition (a skipped or refused partition is left exactly as found).
        for seg in missing:
            p.rebuilt.append(rebuilt_index(ld.storage, partition_dir, seg, config.index_interval_bytes))
        if opts.dry_run:
            p.result.recovery += [planned_rebuild(r) for r in p.rebuilt]


def discover_and_plan(
    opts: JobOptions, listed: dict[str, LogDirState] | None = None, timings: dict[str, float] | None = None
) -> tuple[list[Planned], list[LogDirState]]:
    """List each log dir (or take the listing `recover` made: `listed`), then plan its partitions
    on a thread pool (each partition touches only its own files; results keep the listing's order).
    `timings["listSeconds"]` gets the listing's seconds (added to what `recover` put there)."""
    planned, dirs = [], []
    erase = load_erase_set(opts.erase_keys) if opts.erase_keys else None  # the key file as it is now
    for uri in opts.log_dirs:
        ld = (listed or {}).get(uri)
        if ld is None:
            t = time.monotonic()
            ld = read_log_dir(uri, opts.topics, opts.partitions)
            if timings is not None:
                timings["listSeconds"] = timings.get("listSeconds", 0.0) + time.monotonic() - t
        dirs.append(ld)
        with gc_paused():  # ~1M SegmentMeta objects at 10,000 x 100: see gc_paused
            planned += map_threads(
                lambda partition_dir, ld=ld: plan_one(ld, partition_dir, opts, None, erase), ld.partitions
            )
    return planned, dirs


def selected(p: Planned, opts: JobOptions) -> bool:
    """Whether the round's stages take the partition: eligible for compaction, or (--erase-keys)
    of a topic that some listed key applies to."""
    if p.plan is None or p.result.status == rpt.FAILED:
        return False
    if p.erase is not None:
        return True
    return p.plan.eligible and not opts.erase_only


def to_clean(
    planned: list[Planned], recovered: dict[tuple[str, str], list[str]], opts: JobOptions
) -> list[Planned]:
    """The partitions the round's stages take, each partition's recovery actions put first in its
    report; with --plan-only or --recover-only none is taken further, and the report says why."""
    for p in planned:
        p.result.recovery = recovered.get((p.log_dir.uri, p.partition_dir.path), []) + p.result.recovery
    todo = [p for p in planned if selected(p, opts)]
    chosen = {id(p) for p in todo}
    for p in planned:
        if opts.erase_only and p.plan is not None and p.plan.eligible and id(p) not in chosen:
            p.result.reason = "no listed key applies to its topic (erase only)"
    if opts.recover_only or opts.plan_only:
        for p in todo:
            what = "eligible" if p.plan.eligible and not opts.erase_only else "to erase"
            p.result.status = rpt.ELIGIBLE  # not skipped: a round would take it
            p.result.reason = f"{what} (plan only)" if opts.plan_only else f"{what} (recover only)"
    return todo
