"""Pure planning of one partition: which offsets are cleanable, how dirty it is, whether it is
eligible, its legacy delete horizon, and (through ``grouping``) how its segments group into output
segments. Topic configs are resolved in ``topic_config``.

Every function mirrors one method of Kafka's ``LogCleanerManager`` / ``LogToClean`` / ``Cleaner``
(docs/kafka-rules.md#choosing-the-log, #legacy-delete-horizon). No Spark, no files: the inputs are
segment metadata that ``discover.py`` reads from a partition directory.

Offline difference: our offset map is exact and unbounded (it holds every key of the dirty range,
however many), so a round always maps the whole dirty range and Kafka's
``endOffset = map.latestOffset + 1`` equals the segment-aligned ``firstUncleanableOffset``
(docs/kafka-rules.md#offset-map: the last segment ends at the bound). ``plan_partition`` groups
``logSegments(0, firstUncleanableOffset)`` on that basis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from compaction.format.layout import OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE
from compaction.policy.grouping import group_segments_by_size
from compaction.policy.topic_config import LONG_MAX, TopicConfig

# --- Reasons reported for a partition that is not cleaned ---------------------------------------
REASON_NOT_COMPACTED = "cleanup.policy is delete"
REASON_ACTIVE_ONLY = "nothing cleanable: active segment only"
REASON_LSO_BOUND = "nothing cleanable: bounded by the last stable offset"
REASON_LAG_BOUND = "nothing cleanable: within min.compaction.lag.ms"
REASON_NOTHING_CLEANABLE = "nothing cleanable"
REASON_BELOW_RATIO = "below min.cleanable.dirty.ratio"


@dataclass(frozen=True)
class SegmentMeta:
    """What the planner needs of one segment (Kafka's ``LogSegment`` accessors)."""

    base_offset: int
    size: int  # bytes of the .log file (LogSegment.size)
    offset_index_entries: int  # len(.index) // 8 of the existing index
    time_index_entries: int  # len(.timeindex) // 12 of the existing index
    largest_timestamp: int  # max timestamp of the segment, -1 if unknown
    first_batch_timestamp: int  # maxTimestamp of its first batch, -1 if no batch
    mtime_ms: int  # .log lastModified
    next_offset: int | None = None  # offset after its last batch (readNextOffset), None if unknown

    @property
    def offset_index_bytes(self) -> int:
        """``OffsetIndex.sizeInBytes``: entries x 8 (the file is trimmed to its entries)."""
        return self.offset_index_entries * OFFSET_ENTRY_SIZE

    @property
    def time_index_bytes(self) -> int:
        """``TimeIndex.sizeInBytes``: entries x 12."""
        return self.time_index_entries * TIME_ENTRY_SIZE

    @property
    def effective_largest_timestamp(self) -> int:
        """``LogSegment.largestTimestamp``: the max timestamp if known (>= 0), else the mtime."""
        return self.largest_timestamp if self.largest_timestamp >= 0 else self.mtime_ms


@dataclass(frozen=True)
class PartitionState:
    """One partition as the cleaner manager sees it (``UnifiedLog`` + its checkpoint entry).

    ``segments`` are sorted by base offset; the last one is the active segment.
    ``last_stable_offset`` None means "no bound beyond the active segment"
    (docs/kafka-rules.md#last-stable-offset: the caller computes min(HW, first unstable offset) when it has
    them).
    """

    segments: tuple[SegmentMeta, ...]
    log_start_offset: int
    log_end_offset: int
    checkpoint_offset: int | None = None
    last_stable_offset: int | None = None
    # The high watermark where a cleaned batch can end at it (`high_watermark_in_reach`).
    high_watermark: int | None = None

    def __post_init__(self) -> None:
        if not self.segments:
            raise ValueError("a partition always has an active segment")
        bases = [s.base_offset for s in self.segments]
        if bases != sorted(set(bases)):
            raise ValueError(f"segments must be sorted by distinct base offset: {bases}")

    @property
    def active_segment(self) -> SegmentMeta:
        return self.segments[-1]


def log_segments(segments: Sequence[SegmentMeta], start: int, end: int) -> list[SegmentMeta]:
    """``LogSegments.values(from, to)``: the segment containing ``start`` through those with
    base < ``end``; empty when ``start == end`` (non-aligned empty ranges)."""
    if start == end:
        return []
    if end < start:
        raise ValueError(f"invalid segment range [{start}, {end})")
    floor = max((s.base_offset for s in segments if s.base_offset <= start), default=None)
    low = start if floor is None else floor
    return [s for s in segments if low <= s.base_offset < end]


def non_active_segments_from(segments: Sequence[SegmentMeta], start: int) -> list[SegmentMeta]:
    """``LogSegments.nonActiveLogSegmentsFrom``: segments from the one containing ``start`` up to
    the active segment (excluded); empty when ``start`` is past the active base."""
    active_base = segments[-1].base_offset
    if start > active_base:
        return []
    return log_segments(segments, start, active_base)


class OffsetsToClean(NamedTuple):
    """``LogCleanerManager.OffsetsToClean``."""

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool


def validated_checkpoint(
    checkpoint: int | None, log_start_offset: int, log_end_offset: int
) -> tuple[int, bool]:
    """Checkpoint validation of ``cleanableOffsets`` -> (first dirty offset, force update): absent
    -> log start (no forced update); below log start or beyond log end -> log start and the
    checkpoint is rewritten."""
    first_dirty = log_start_offset if checkpoint is None else checkpoint
    if first_dirty < log_start_offset or first_dirty > log_end_offset:
        return log_start_offset, True
    return first_dirty, False


def _first_dirty_offset(state: PartitionState) -> tuple[int, bool]:
    return validated_checkpoint(state.checkpoint_offset, state.log_start_offset, state.log_end_offset)


def last_stable_offset(
    high_watermark: int | None, first_unstable: int | None, log_end_offset: int | None, active_base: int
) -> int | None:
    """``UnifiedLog.lastStableOffset`` as far as the inputs know it: min(HW, LEO, first offset of
    an open transaction), each term taken when known. ``log_end_offset`` None means unknown but
    at least ``active_base``; the result is then exact below ``active_base`` and None (no bound
    beyond the active segment) when it could only be at or past it, the only place the cleaner
    reads it (``cleanableOffsets`` caps it at the active base)."""
    if high_watermark is None:
        lso = None
    elif high_watermark <= active_base:
        lso = high_watermark  # the LEO is at least the active base: the HW is the minimum
    else:
        lso = min(high_watermark, log_end_offset) if log_end_offset is not None else None
    if first_unstable is not None:
        bound = lso if lso is not None else log_end_offset
        lso = first_unstable if bound is None else min(bound, first_unstable)
    return lso


def high_watermark_in_reach(
    high_watermark: int | None, log_end_offset: int | None, active_base: int
) -> int | None:
    """The log's high watermark (``UnifiedLog.highWatermark``) if a batch below the active segment
    can end at it, else None. Offline it is the checkpointed one capped at the log end offset, or
    the log end offset without a checkpoint entry (a leader's high watermark catches up with it).
    It is at most the active base only when the checkpoint holds such a value or the active
    segment is empty; ``log_end_offset`` None means unknown but past the active base."""
    if high_watermark is not None and high_watermark <= active_base:
        return high_watermark
    if log_end_offset is not None and log_end_offset <= active_base:
        return log_end_offset
    return None


def too_recent_to_clean(segment: SegmentMeta, now_ms: int, min_compaction_lag_ms: int) -> bool:
    """A segment that ``findFirstUncleanableSegment`` stops at: its largest timestamp is newer
    than ``now - min.compaction.lag.ms`` (strict >)."""
    return segment.effective_largest_timestamp > now_ms - min_compaction_lag_ms


def find_first_uncleanable_segment(
    state: PartitionState, first_dirty_offset: int, now_ms: int, min_compaction_lag_ms: int
) -> int | None:
    """``LogCleanerManager.findFirstUncleanableSegment``: base offset of the first non-active
    segment (from the one holding ``first_dirty_offset``) whose largest timestamp is newer than
    ``now - min.compaction.lag.ms`` (strict >)."""
    for segment in non_active_segments_from(state.segments, first_dirty_offset):
        if too_recent_to_clean(segment, now_ms, min_compaction_lag_ms):
            return segment.base_offset
    return None


def cleanable_offsets(state: PartitionState, config: TopicConfig, now_ms: int) -> OffsetsToClean:
    """``LogCleanerManager.cleanableOffsets`` (docs/kafka-rules.md#cleanable-range)."""
    first_dirty, force_update = _first_dirty_offset(state)
    # Kafka always has an LSO; "None" means it does not bound below the active segment.
    candidates = [state.active_segment.base_offset]
    if state.last_stable_offset is not None:
        candidates.append(state.last_stable_offset)
    min_lag = max(config.min_compaction_lag_ms, 0)
    if min_lag > 0:
        lag_bound = find_first_uncleanable_segment(state, first_dirty, now_ms, min_lag)
        if lag_bound is not None:
            candidates.append(lag_bound)
    return OffsetsToClean(first_dirty, max(first_dirty, min(candidates)), force_update)


def max_compaction_delay(
    state: PartitionState, first_dirty_offset: int, now_ms: int, max_compaction_lag_ms: int
) -> int:
    """``LogCleanerManager.maxCompactionDelay`` (docs/kafka-rules.md#max-compaction-lag): how long past
    ``max.compaction.lag.ms`` the oldest dirty non-active segment is; 0 when not overdue.
    First-batch timestamps <= 0 (none / unknown) are ignored."""
    stamps = [
        s.first_batch_timestamp
        for s in non_active_segments_from(state.segments, first_dirty_offset)
        if s.first_batch_timestamp > 0
    ]
    earliest = min(stamps, default=LONG_MAX)
    clean_until = now_ms - max(max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


def calculate_cleanable_bytes(
    state: PartitionState, first_dirty_offset: int, uncleanable_offset: int
) -> tuple[int, int]:
    """``LogCleanerManager.calculateCleanableBytes`` -> (firstUncleanableOffset, cleanableBytes).

    The upper bound is moved down to the base of the segment containing ``uncleanable_offset``
    (or the active base), so a round never cleans part of a segment (docs/kafka-rules.md#dirty-ratio)."""
    above = non_active_segments_from(state.segments, uncleanable_offset)
    first_uncleanable = (above[0] if above else state.active_segment).base_offset
    lower = min(first_dirty_offset, first_uncleanable)
    cleanable = sum(s.size for s in log_segments(state.segments, lower, first_uncleanable))
    return first_uncleanable, cleanable


@dataclass(frozen=True)
class LogToClean:
    """``LogToClean``: byte accounting of one candidate partition (docs/kafka-rules.md#dirty-ratio)."""

    first_dirty_offset: int
    first_uncleanable_offset: int  # segment-aligned upper bound of the round
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        # Java double division: 0/0 is NaN (such logs are dropped by totalBytes == 0 first).
        if self.total_bytes == 0:
            return math.nan
        return self.cleanable_bytes / self.total_bytes


def log_to_clean(
    state: PartitionState, first_dirty_offset: int, uncleanable_offset: int, need_compaction_now: bool
) -> LogToClean:
    """``new LogToClean(log, firstDirtyOffset, uncleanableOffset, needCompactionNow)``.

    cleanBytes counts segments with base < firstDirtyOffset, which includes the segment that
    contains a mid-segment firstDirtyOffset (also counted as cleanable, as in Kafka)."""
    clean = sum(s.size for s in log_segments(state.segments, -1, first_dirty_offset))
    first_uncleanable, cleanable = calculate_cleanable_bytes(state, first_dirty_offset, uncleanable_offset)
    return LogToClean(first_dirty_offset, first_uncleanable, clean, cleanable, need_compaction_now)


def is_eligible(candidate: LogToClean, min_cleanable_dirty_ratio: float) -> bool:
    """``grabFilthiestCompactedLog`` filters (docs/kafka-rules.md#choosing-the-log): skip empty logs, then
    ``(needCompactionNow && cleanableBytes > 0) || cleanableRatio > minCleanableRatio``."""
    if candidate.total_bytes <= 0:
        return False
    if candidate.need_compaction_now and candidate.cleanable_bytes > 0:
        return True
    return candidate.cleanable_ratio > min_cleanable_dirty_ratio


def legacy_delete_horizon_ms(state: PartitionState, first_dirty_offset: int, delete_retention_ms: int) -> int:
    """``Cleaner.doClean`` step 1 (docs/kafka-rules.md#legacy-delete-horizon): mtime of the last segment in
    ``logSegments(0, firstDirtyOffset)`` minus ``delete.retention.ms``, or 0 if there is none.
    Only magic < 2 tombstones are judged by it."""
    below = log_segments(state.segments, 0, first_dirty_offset)
    return below[-1].mtime_ms - delete_retention_ms if below else 0


@dataclass(frozen=True)
class PartitionPlan:
    """The planner's verdict on one partition, for the job and the report."""

    topic: str
    partition: int
    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    first_uncleanable_offset: int  # segment-aligned upper bound (the round's upperBound)
    force_update_checkpoint: bool
    clean_bytes: int
    dirty_bytes: int  # Kafka's cleanableBytes
    cleanable_ratio: float
    max_compaction_delay_ms: int
    eligible: bool
    reason: str | None  # why not eligible; None when eligible
    legacy_delete_horizon_ms: int
    groups: tuple[tuple[int, ...], ...] = field(default=())  # base offsets per output group
    # A batch ending here is kept, empty if need be (docs/kafka-rules.md#batch-retention); None
    # for a partition the round does not clean.
    high_watermark: int | None = None

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.dirty_bytes


def _not_cleanable_reason(
    state: PartitionState, config: TopicConfig, offsets: OffsetsToClean, now_ms: int
) -> str:
    """Name the bound that left nothing cleanable (the report's wording, not Kafka's)."""
    first_dirty, bound, _ = offsets
    if not non_active_segments_from(state.segments, first_dirty):
        return REASON_ACTIVE_ONLY
    if state.last_stable_offset is not None and bound == max(first_dirty, state.last_stable_offset):
        return REASON_LSO_BOUND
    if (
        config.min_compaction_lag_ms > 0
        and find_first_uncleanable_segment(state, first_dirty, now_ms, config.min_compaction_lag_ms)
        is not None
    ):
        return REASON_LAG_BOUND
    return REASON_NOTHING_CLEANABLE


def plan_partition(
    topic: str, partition: int, state: PartitionState, config: TopicConfig, now_ms: int
) -> PartitionPlan:
    """One partition through ``grabFilthiestCompactedLog`` and the planning half of
    ``Cleaner.doClean``: offsets, byte accounting, eligibility, legacy horizon and groups."""
    offsets = cleanable_offsets(state, config, now_ms)
    delay = max_compaction_delay(state, offsets.first_dirty_offset, now_ms, config.max_compaction_lag_ms)
    candidate = log_to_clean(
        state, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset, delay > 0
    )
    eligible = config.compact and is_eligible(candidate, config.min_cleanable_dirty_ratio)
    reason = None
    if not config.compact:
        reason = REASON_NOT_COMPACTED
    elif candidate.cleanable_bytes == 0:
        reason = _not_cleanable_reason(state, config, offsets, now_ms)
    elif not eligible:
        reason = REASON_BELOW_RATIO
    groups: tuple[tuple[int, ...], ...] = ()
    if eligible:
        # Exact map => endOffset == upperBound, so doClean groups logSegments(0, upperBound).
        to_group = log_segments(state.segments, 0, candidate.first_uncleanable_offset)
        grouped = group_segments_by_size(
            to_group, config.segment_bytes, config.segment_index_bytes, candidate.first_uncleanable_offset
        )
        groups = tuple(tuple(s.base_offset for s in g) for g in grouped)
    return PartitionPlan(
        topic=topic,
        partition=partition,
        first_dirty_offset=offsets.first_dirty_offset,
        first_uncleanable_dirty_offset=offsets.first_uncleanable_dirty_offset,
        first_uncleanable_offset=candidate.first_uncleanable_offset,
        force_update_checkpoint=offsets.force_update_checkpoint,
        clean_bytes=candidate.clean_bytes,
        dirty_bytes=candidate.cleanable_bytes,
        cleanable_ratio=candidate.cleanable_ratio,
        max_compaction_delay_ms=delay,
        eligible=eligible,
        reason=reason,
        legacy_delete_horizon_ms=legacy_delete_horizon_ms(
            state, offsets.first_dirty_offset, config.delete_retention_ms
        ),
        groups=groups,
        high_watermark=state.high_watermark if eligible else None,  # read for a round only
    )
