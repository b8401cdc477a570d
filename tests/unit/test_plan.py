"""Tests for compaction.policy.plan, named after the Kafka tests they mirror (Kafka's LogCleanerTest,
LogCleanerManagerTest).

Every expected value is worked out by hand in the test (comments show the arithmetic)."""

from __future__ import annotations

import math

import pytest
from cleaner_manager import grab_filthiest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.format.layout import INT32_MAX
from compaction.policy.grouping import group_segments_by_size
from compaction.policy.plan import (
    REASON_ACTIVE_ONLY,
    REASON_BELOW_RATIO,
    REASON_LAG_BOUND,
    REASON_LSO_BOUND,
    REASON_NOT_COMPACTED,
    LogToClean,
    PartitionState,
    SegmentMeta,
    cleanable_offsets,
    is_eligible,
    legacy_delete_horizon_ms,
    log_to_clean,
    max_compaction_delay,
    plan_partition,
)
from compaction.policy.topic_config import LONG_MAX, TopicConfig, resolve_topic_config

NOW = 1_400_000_000_000  # LogCleanerManagerTest's MockTime start
HOUR = 3_600_000
DAY = 86_400_000
COMPACT = TopicConfig(cleanup_policy=("compact",))


def seg(base, size=100, idx=0, tidx=0, largest=-1, first_ts=-1, mtime=0):
    return SegmentMeta(base, size, idx, tidx, largest, first_ts, mtime)


def state(segments, start=0, end=None, checkpoint=None, lso=None):
    end = segments[-1].base_offset + 1 if end is None else end
    return PartitionState(tuple(segments), start, end, checkpoint, lso)


def bases(groups):
    return [[s.base_offset for s in g] for g in groups]


# ------------------------------------------------------------------------------------------
# LogToClean (LogCleanerTest.testLogToClean*)
# ------------------------------------------------------------------------------------------

SIX = [seg(i, size=80 + i) for i in range(6)]  # sizes 80..85, the last one is active


def test_log_to_clean():
    # firstDirty = uncleanable = active base 5: every non-active byte is clean.
    ltc = log_to_clean(state(SIX), 5, 5, False)
    assert ltc.clean_bytes == 80 + 81 + 82 + 83 + 84 == 410
    assert ltc.cleanable_bytes == 0
    assert ltc.total_bytes == 410  # == log size 495 - active 85
    assert ltc.first_uncleanable_offset == 5


def test_log_to_clean_with_uncleanable_section():
    # segments [0,1] clean, [2,3] cleanable, [4,5] uncleanable
    ltc = log_to_clean(state(SIX), 2, 4, False)
    assert ltc.clean_bytes == 80 + 81 == 161
    assert ltc.cleanable_bytes == 82 + 83 == 165
    assert ltc.total_bytes == 326
    assert ltc.cleanable_ratio == 165 / 326


def test_log_to_clean_mid_segment_dirty_offset_counts_segment_twice():
    segs = [seg(0, 100), seg(10, 200), seg(20, 300), seg(30, 50)]
    ltc = log_to_clean(state(segs), 15, 30, False)
    assert ltc.clean_bytes == 100 + 200  # bases < 15: the segment holding 15 included
    assert ltc.cleanable_bytes == 200 + 300  # from the segment holding 15 up to 30
    assert ltc.cleanable_ratio == 500 / 800


def test_log_to_clean_uncleanable_offset_is_segment_aligned():
    segs = [seg(0, 100), seg(10, 200), seg(20, 300), seg(30, 50)]
    ltc = log_to_clean(state(segs), 0, 25, False)
    assert ltc.first_uncleanable_offset == 20  # base of the segment holding 25
    assert ltc.cleanable_bytes == 100 + 200


def test_log_to_clean_empty_log_has_nan_ratio_and_is_not_eligible():
    ltc = log_to_clean(state([seg(0, 0)]), 0, 0, True)
    assert ltc.total_bytes == 0 and math.isnan(ltc.cleanable_ratio)
    assert not is_eligible(ltc, 0.0)


# ------------------------------------------------------------------------------------------
# cleanableOffsets (LogCleanerManagerTest: testDirtyOffsetReset*, testCleanableOffsets*, ...)
# ------------------------------------------------------------------------------------------

EIGHT = [seg(10 * i) for i in range(8)]  # bases 0..70, active 70


def test_cleanable_offsets_for_none():
    # bounded by the LSO (= high watermark 50)
    assert cleanable_offsets(state(EIGHT, end=75, checkpoint=0, lso=50), COMPACT, NOW) == (0, 50, False)


def test_cleanable_offsets_active_segment():
    assert cleanable_offsets(state(EIGHT, end=75, checkpoint=0, lso=75), COMPACT, NOW) == (0, 70, False)
    assert cleanable_offsets(state(EIGHT, end=75, checkpoint=0, lso=None), COMPACT, NOW) == (0, 70, False)


def test_cleanable_offsets_for_time():
    lag = HOUR
    old, new = NOW - lag - 1, NOW
    segs = [seg(10 * i, largest=old if i < 4 else new) for i in range(8)]
    cfg = TopicConfig(cleanup_policy=("compact",), min_compaction_lag_ms=lag)
    # first segment whose largest timestamp is within the lag: base 40
    assert cleanable_offsets(state(segs, end=75, lso=75), cfg, NOW) == (0, 40, False)


def test_cleanable_offsets_for_short_time():
    segs = [seg(10 * i, largest=NOW - HOUR - 1) for i in range(8)]
    cfg = TopicConfig(cleanup_policy=("compact",), min_compaction_lag_ms=HOUR)
    assert cleanable_offsets(state(segs, end=75, lso=75), cfg, NOW) == (0, 70, False)


@pytest.mark.parametrize(
    "largest, mtime, bound",
    [
        (NOW - HOUR, 0, 20),  # == now - lag: not newer (strict >), cleanable
        (NOW - HOUR + 1, 0, 10),  # newer by 1 ms: uncleanable
        (-1, NOW - HOUR + 1, 10),  # unknown max timestamp: the mtime decides
        (-1, NOW - HOUR, 20),
    ],
)
def test_min_compaction_lag_boundary(largest, mtime, bound):
    segs = [seg(0, largest=0), seg(10, largest=largest, mtime=mtime), seg(20)]
    cfg = TopicConfig(cleanup_policy=("compact",), min_compaction_lag_ms=HOUR)
    assert cleanable_offsets(state(segs, end=25), cfg, NOW).first_uncleanable_dirty_offset == bound


def test_cleanable_offsets_lag_search_starts_at_dirty_segment():
    # a "new" segment below the first dirty offset must not bound the range
    segs = [seg(0, largest=NOW), seg(10, largest=0), seg(20)]
    cfg = TopicConfig(cleanup_policy=("compact",), min_compaction_lag_ms=HOUR)
    assert cleanable_offsets(state(segs, end=25, checkpoint=10), cfg, NOW) == (10, 20, False)


def test_undecided_transactional_data_not_cleanable():
    lag = HOUR
    t = NOW
    cfg = TopicConfig(cleanup_policy=("compact",), min_compaction_lag_ms=lag)
    # offsets 0..2 open transaction, rolled; LSO = first unstable offset 0
    before = state([seg(0, largest=t), seg(3)], end=3, checkpoint=0, lso=0)
    assert cleanable_offsets(before, cfg, t + lag + 1) == (0, 0, False)
    # ABORT marker at 3 (written at t + lag + 1), rolled; LSO = HW = 4
    after = state([seg(0, largest=t), seg(3, largest=t + lag + 1), seg(4)], end=4, checkpoint=0, lso=4)
    assert cleanable_offsets(after, cfg, t + lag + 1) == (0, 3, False)
    # after another lag the marker segment becomes cleanable too
    assert cleanable_offsets(after, cfg, t + 2 * (lag + 1)) == (0, 4, False)


def test_dirty_offset_reset_if_larger_than_end_offset():
    assert cleanable_offsets(state(EIGHT, end=75, checkpoint=200), COMPACT, NOW)[:2:] == (0, 70)
    assert cleanable_offsets(state(EIGHT, end=75, checkpoint=200), COMPACT, NOW).force_update_checkpoint


def test_dirty_offset_reset_if_smaller_than_start_offset():
    assert cleanable_offsets(state(EIGHT, start=10, end=75, checkpoint=0), COMPACT, NOW) == (10, 70, True)


def test_cleanable_offsets_needs_checkpoint_reset():
    segs = [seg(5 * i) for i in range(5)]  # LEO 20
    assert not cleanable_offsets(
        state(segs, start=10, end=20, checkpoint=15), COMPACT, NOW
    ).force_update_checkpoint
    assert cleanable_offsets(
        state(segs, start=20, end=20, checkpoint=15), COMPACT, NOW
    ).force_update_checkpoint
    assert cleanable_offsets(
        state(segs, start=20, end=20, checkpoint=25), COMPACT, NOW
    ).force_update_checkpoint
    # boundaries: checkpoint == LEO is valid; absent -> log start without a forced update
    assert cleanable_offsets(state(segs, start=10, end=20, checkpoint=20), COMPACT, NOW) == (20, 20, False)
    assert cleanable_offsets(state(segs, start=10, end=20), COMPACT, NOW) == (10, 20, False)


def test_log_start_offset_larger_than_active_segment_base_offset():
    # one segment (active, 3 batches of 3); log start 2; checkpoint 0 -> reset to 2
    st_ = state([seg(0, 300)], start=2, end=9, checkpoint=0)
    plan = plan_partition("foo", 0, st_, COMPACT, NOW)
    assert (plan.first_dirty_offset, plan.first_uncleanable_offset, plan.force_update_checkpoint) == (
        2,
        0,
        True,
    )
    assert plan.dirty_bytes == 0 and not plan.eligible and plan.reason == REASON_ACTIVE_ONLY


def test_dirty_offset_larger_than_active_segment_base_offset():
    plan = plan_partition("foo", 0, state([seg(0, 200)], end=6, checkpoint=3), COMPACT, NOW)
    assert plan.first_dirty_offset == 3 and not plan.eligible and plan.reason == REASON_ACTIVE_ONLY


def test_checkpoint_updated_for_invalid_offset_no_cleaning():
    segs = [seg(5 * i) for i in range(5)]
    plan = plan_partition("foo", 0, state(segs, start=20, end=20, checkpoint=15), COMPACT, NOW)
    assert plan.force_update_checkpoint and plan.first_dirty_offset == 20 and not plan.eligible


# ------------------------------------------------------------------------------------------
# maxCompactionDelay and eligibility (docs/kafka-rules.md#max-compaction-lag, #choosing-the-log)
# ------------------------------------------------------------------------------------------


def test_max_compaction_delay():
    segs = [seg(0, first_ts=5_000), seg(10, first_ts=0), seg(20, first_ts=-1), seg(30, first_ts=100)]
    st_ = state(segs, end=35)
    # cleanUntil = 10_000 - 1_000 = 9_000; earliest usable = 5_000 (0, -1 ignored; active skipped)
    assert max_compaction_delay(st_, 0, 10_000, 1_000) == 4_000
    assert max_compaction_delay(st_, 0, 6_000, 1_000) == 0  # earliest 5_000 == cleanUntil: not <
    assert max_compaction_delay(st_, 10, 10_000, 1_000) == 0  # no usable timestamp from 10 on
    assert max_compaction_delay(st_, 0, 10_000, LONG_MAX) == 0  # default lag never forces


@pytest.mark.parametrize(
    "clean, cleanable, need_now, min_ratio, expected",
    [
        (50, 50, False, 0.5, False),  # ratio 0.5 is not > 0.5
        (49, 51, False, 0.5, True),  # 0.51 > 0.5
        (99, 1, True, 0.5, True),  # forced by max.compaction.lag.ms
        (100, 0, True, 0.5, False),  # forced but nothing cleanable
        (0, 0, True, 0.0, False),  # empty log skipped
        (10, 0, False, 0.0, False),  # ratio 0 is not > 0
    ],
)
def test_is_eligible(clean, cleanable, need_now, min_ratio, expected):
    assert is_eligible(LogToClean(0, 0, clean, cleanable, need_now), min_ratio) is expected


# ------------------------------------------------------------------------------------------
# groupSegmentsBySize (LogCleanerTest.testSegmentGrouping*)
# ------------------------------------------------------------------------------------------

TEN = [seg(i, size=100, idx=1, tidx=1) for i in range(10)]  # 8 and 12 index bytes each


def test_segment_grouping():
    assert bases(group_segments_by_size(TEN, INT32_MAX, INT32_MAX, 10)) == [list(range(10))]
    assert bases(group_segments_by_size(TEN, 1, INT32_MAX, 10)) == [[i] for i in range(10)]
    assert bases(group_segments_by_size(TEN, INT32_MAX, 1, 10)) == [[i] for i in range(10)]
    # log size cap 3 x 100 + 1 (and exactly 300: the cap is inclusive) -> groups of three
    threes = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert bases(group_segments_by_size(TEN, 301, INT32_MAX, 10)) == threes
    assert bases(group_segments_by_size(TEN, 300, INT32_MAX, 10)) == threes
    assert bases(group_segments_by_size(TEN, 299, INT32_MAX, 10)) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    # offset index cap 3 x 8 + 1 = 25 (no time index entries) -> groups of three
    no_time = [seg(i, size=100, idx=1, tidx=0) for i in range(10)]
    assert bases(group_segments_by_size(no_time, INT32_MAX, 25, 10)) == threes
    # with one 12-byte time entry each, 25 bytes fit two time entries (24) -> pairs
    assert bases(group_segments_by_size(TEN, INT32_MAX, 25, 10)) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


def test_segment_grouping_sums_are_64_bit():
    # two 1.5 GiB segments: the sum overflows int32 but must still be compared exactly
    big = [seg(0, size=3 * 2**29), seg(10, size=3 * 2**29)]
    assert bases(group_segments_by_size(big, INT32_MAX, INT32_MAX, 20)) == [[0], [10]]


def test_segment_grouping_with_sparse_offsets():
    a, b = seg(0), seg(INT32_MAX - 1)  # b holds offsets MAX-1 and MAX
    # last segment's estimate = firstUncleanable - 1 = MAX; MAX - 0 <= MAX -> one group
    assert bases(group_segments_by_size([a, b], INT32_MAX, INT32_MAX, INT32_MAX + 1)) == [[0, INT32_MAX - 1]]
    # one more offset in b: estimate MAX + 1 -> split
    assert bases(group_segments_by_size([a, b], INT32_MAX, INT32_MAX, INT32_MAX + 2)) == [
        [0],
        [INT32_MAX - 1],
    ]
    # further segments group again from the new group's base
    c, d = seg(INT32_MAX + 2), seg(INT32_MAX + 4)
    assert bases(group_segments_by_size([a, b, c, d], INT32_MAX, INT32_MAX, INT32_MAX + 6)) == [
        [0],
        [INT32_MAX - 1, INT32_MAX + 2, INT32_MAX + 4],
    ]


def test_segment_grouping_with_sparse_offsets_and_empty_segments():
    step = INT32_MAX + 1  # 2^31
    first_uncleanable = 3 * step  # LEO - 1 in Kafka's test, the active base here
    full = [seg(0), seg(step), seg(2 * step), seg(3 * step)]
    # seg0 + seg1: estimate 2*step - 1 - 0 = 2^32 - 1 > MAX; seg1 + seg2: same;
    # seg2 + seg3 (last): estimate 3*step - 1 - 2*step = MAX -> merged
    assert bases(group_segments_by_size(full, INT32_MAX, INT32_MAX, first_uncleanable)) == [
        [0],
        [step],
        [2 * step, 3 * step],
    ]
    # after a clean emptied seg0 and seg1 the empty one bypasses the range check
    emptied = [seg(0, size=0), seg(step, size=0), seg(2 * step), seg(3 * step)]
    assert bases(group_segments_by_size(emptied, INT32_MAX, INT32_MAX, first_uncleanable)) == [
        [0, step],
        [2 * step, 3 * step],
    ]


def test_segment_grouping_following_load_of_zero_index():
    # seg0 holds 0 and 1; seg1 starts at MAX/2 and holds MAX/2 and MAX + 1; both indexes empty
    segs = [seg(0, idx=0), seg(INT32_MAX // 2, idx=0)]
    # the estimate (firstUncleanable - 1 = MAX + 1) is used, not the index: 2 groups
    assert bases(group_segments_by_size(segs, INT32_MAX, INT32_MAX, INT32_MAX + 2)) == [[0], [INT32_MAX // 2]]


def test_segment_grouping_oversized_singleton():
    segs = [seg(0, size=500), seg(10, size=10)]
    assert bases(group_segments_by_size(segs, 100, INT32_MAX, 20)) == [[0], [10]]
    assert group_segments_by_size([], 100, 100, 0) == []


@st.composite
def segment_lists(draw):
    n = draw(st.integers(1, 12))
    gaps = draw(st.lists(st.integers(1, 2**31 + 10), min_size=n, max_size=n))
    base, segs = draw(st.integers(0, 2**40)), []
    for gap in gaps:
        segs.append(
            seg(
                base,
                size=draw(st.integers(0, 1_000)),
                idx=draw(st.integers(0, 20)),
                tidx=draw(st.integers(0, 20)),
            )
        )
        base += gap
    return segs, base  # base = first uncleanable offset, past the last segment


@settings(max_examples=300, deadline=None)
@given(segment_lists(), st.integers(1, 3_000), st.integers(1, 400))
def test_grouping_properties(segs_and_bound, max_size, max_index):
    segs, first_uncleanable = segs_and_bound
    groups = group_segments_by_size(segs, max_size, max_index, first_uncleanable)
    # order preserved, every segment exactly once, no empty group
    assert [s for g in groups for s in g] == segs
    assert all(groups)
    for g in groups:
        if len(g) == 1:
            continue  # a singleton may exceed any cap
        assert sum(s.size for s in g) <= max_size
        assert sum(8 * s.offset_index_entries for s in g) <= max_index
        assert sum(12 * s.time_index_entries for s in g) <= max_index
        for s in g[1:]:
            if s.size:
                i = segs.index(s)
                est = segs[i + 1].base_offset - 1 if i + 1 < len(segs) else first_uncleanable - 1
                assert est - g[0].base_offset <= INT32_MAX


# ------------------------------------------------------------------------------------------
# Config resolution (docs/kafka-rules.md#configs)
# ------------------------------------------------------------------------------------------


def test_config_defaults():
    cfg = resolve_topic_config()
    assert cfg.cleanup_policy == ("delete",) and not cfg.compact
    assert cfg.min_cleanable_dirty_ratio == 0.5
    assert cfg.delete_retention_ms == 86_400_000
    assert cfg.min_compaction_lag_ms == 0
    assert cfg.max_compaction_lag_ms == 2**63 - 1
    assert cfg.segment_bytes == 1_073_741_824
    assert cfg.segment_index_bytes == 10_485_760
    assert cfg.index_interval_bytes == 4_096
    assert cfg.max_message_bytes == 1_048_588


@pytest.mark.parametrize(
    "policy, compact, delete",
    [
        ("compact", True, False),
        ("Compact, DELETE", True, True),
        ("delete", False, True),
        (["compact"], True, False),
    ],
)
def test_cleanup_policy_list(policy, compact, delete):
    cfg = resolve_topic_config({"cleanup.policy": policy})
    assert (cfg.compact, cfg.delete) == (compact, delete)


def test_config_precedence_topic_over_job_over_default():
    job = {"min.cleanable.dirty.ratio": "0.1", "segment.bytes": 1000, "cleanup.policy": "compact"}
    cfg = resolve_topic_config({"min.cleanable.dirty.ratio": 0.9, "retention.ms": "7"}, job)
    assert cfg.min_cleanable_dirty_ratio == 0.9  # topic override
    assert cfg.segment_bytes == 1000  # job-wide option
    assert cfg.compact  # job-wide option
    assert cfg.delete_retention_ms == 86_400_000  # Kafka default


@pytest.mark.parametrize(
    "name, value",
    [
        ("min.cleanable.dirty.ratio", "1.5"),
        ("max.compaction.lag.ms", 0),
        ("segment.bytes", 13),
        ("segment.index.bytes", 3),
        ("min.compaction.lag.ms", -1),
    ],
)
def test_config_rejects_out_of_range(name, value):
    with pytest.raises(ValueError):
        resolve_topic_config({name: value})


# ------------------------------------------------------------------------------------------
# plan_partition and grab_filthiest (LogCleanerTest.testCleaningBeyondMissingOffsets,
# LogCleanerManagerTest.testGrabFilthiest*)
# ------------------------------------------------------------------------------------------

FOUR = [seg(0, 100, mtime=1_000), seg(10, 100, mtime=2_000), seg(20, 100, mtime=3_000), seg(30, 10)]


def test_plan_partition_eligible_with_groups():
    plan = plan_partition("t", 0, state(FOUR, end=35), COMPACT, NOW)
    assert (plan.first_dirty_offset, plan.first_uncleanable_offset) == (0, 30)
    assert (plan.clean_bytes, plan.dirty_bytes, plan.cleanable_ratio) == (0, 300, 1.0)
    assert plan.eligible and plan.reason is None
    assert plan.groups == ((0, 10, 20),)
    assert plan.legacy_delete_horizon_ms == 0  # no segment below first dirty offset 0
    small = TopicConfig(cleanup_policy=("compact",), segment_bytes=200)
    assert plan_partition("t", 0, state(FOUR, end=35), small, NOW).groups == ((0, 10), (20,))


def test_plan_partition_below_ratio_and_legacy_horizon():
    plan = plan_partition("t", 0, state(FOUR, end=35, checkpoint=20), COMPACT, NOW)
    assert (plan.clean_bytes, plan.dirty_bytes) == (200, 100)
    assert plan.cleanable_ratio == 100 / 300
    assert not plan.eligible and plan.reason == REASON_BELOW_RATIO and plan.groups == ()
    # last segment of logSegments(0, 20) is base 10 (mtime 2_000)
    assert plan.legacy_delete_horizon_ms == 2_000 - DAY
    assert legacy_delete_horizon_ms(state(FOUR, end=35), 15, 500) == 2_000 - 500  # holds 15


def test_plan_partition_forced_by_max_compaction_lag():
    segs = [*FOUR[:2], seg(20, 100, first_ts=NOW - 5_000), FOUR[3]]
    cfg = TopicConfig(cleanup_policy=("compact",), max_compaction_lag_ms=1_000)
    plan = plan_partition("t", 0, state(segs, end=35, checkpoint=20), cfg, NOW)
    assert plan.max_compaction_delay_ms == 4_000  # (NOW - 1_000) - (NOW - 5_000)
    assert plan.eligible and plan.groups == ((0, 10, 20),)  # clean tail regrouped too


def test_plan_partition_compact_delete_leaves_retention_to_the_broker():
    """docs/kafka-rules.md#differences-from-kafka: with compact,delete Kafka 4.4's cleaner thread
    first deletes the segments past retention.ms; the job compacts every segment and deletes none."""
    segs = [seg(0, 100, largest=NOW - DAY, mtime=NOW - DAY), *FOUR[1:]]
    cfg = resolve_topic_config({"cleanup.policy": "compact,delete", "retention.ms": 1})
    assert cfg.delete
    plan = plan_partition("t", 0, state(segs, end=35), cfg, NOW)
    assert plan.eligible and plan.groups == ((0, 10, 20),)
    assert plan.first_dirty_offset == 0


def test_plan_partition_not_compacted():
    plan = plan_partition("t", 0, state(FOUR, end=35), TopicConfig(), NOW)
    assert not plan.eligible and plan.reason == REASON_NOT_COMPACTED


def test_plan_partition_reasons_for_bounds():
    assert plan_partition("t", 0, state(FOUR, end=35, lso=5), COMPACT, NOW).reason == REASON_LSO_BOUND
    cfg = TopicConfig(cleanup_policy=("compact",), min_compaction_lag_ms=HOUR)
    young = [seg(0, 100, largest=NOW), seg(10, 10)]
    assert plan_partition("t", 0, state(young, end=15), cfg, NOW).reason == REASON_LAG_BOUND


def test_cleaning_beyond_missing_offsets():
    # offset gaps between segments: 0..9, 20..29, active at 40
    segs = [seg(0, 100), seg(20, 100), seg(40, 10)]
    plan = plan_partition("t", 0, state(segs, end=45), COMPACT, NOW)
    assert plan.first_uncleanable_offset == 40  # the round ends at the active base
    assert plan.groups == ((0, 20),)
    # checkpoint inside the gap: the segment below it counts as clean and as dirty
    gap = plan_partition("t", 0, state(segs, end=45, checkpoint=15), COMPACT, NOW)
    assert (gap.first_dirty_offset, gap.clean_bytes, gap.dirty_bytes) == (15, 100, 200)


def test_grab_filthiest_compacted_log_returns_log_with_dirtiest_ratio():
    # cleanable ranges [20, 20], [20, 25], [20, 30]: a 100-byte clean segment holding 0..19,
    # n dirty 50-byte segments from 20 on, then the active segment
    def segs_for(n):
        return [seg(0, 100)] + [seg(20 + 5 * i, 50) for i in range(n)] + [seg(20 + 5 * n, 1)]

    def plans_with(cfg):
        return [
            plan_partition("wishing-well", p, state(segs_for(p), checkpoint=20), cfg, NOW) for p in range(3)
        ]

    # ratios 0/100, 50/150, 100/200: with the default 0.5 none is strictly above
    default = plans_with(COMPACT)
    assert [p.cleanable_ratio for p in default] == [0.0, 50 / 150, 0.5]
    assert grab_filthiest(default) is None
    plans = plans_with(TopicConfig(cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.05))
    assert [p.eligible for p in plans] == [False, True, True]
    assert grab_filthiest(plans).partition == 2
    # testGrabFilthiestCompactedLogIgnoresUncleanablePartitions / ...InProgressPartitions
    assert grab_filthiest(plans, frozenset({("wishing-well", 2)})).partition == 1
    assert grab_filthiest(plans, frozenset({("wishing-well", 1), ("wishing-well", 2)})) is None


# ------------------------------------------------------------------------------------------
# The rules the driver applies to a partition read only in part (steps/plan_round.py)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "checkpoint, start, end, expected",
    [
        (None, 5, 20, (5, False)),  # no checkpoint: from the log start, nothing to rewrite
        (12, 5, 20, (12, False)),
        (20, 5, 20, (20, False)),  # at the log end: still valid
        (4, 5, 20, (5, True)),  # below the log start: reset
        (21, 5, 20, (5, True)),  # beyond the log end: reset
    ],
)
def test_validated_checkpoint(checkpoint, start, end, expected):
    from compaction.policy.plan import validated_checkpoint

    assert validated_checkpoint(checkpoint, start, end) == expected


def test_too_recent_to_clean_is_strictly_newer_than_the_lag_horizon():
    from compaction.policy.plan import too_recent_to_clean

    assert too_recent_to_clean(seg(0, largest=NOW - HOUR + 1), NOW, HOUR)
    assert not too_recent_to_clean(seg(0, largest=NOW - HOUR), NOW, HOUR)
    assert too_recent_to_clean(seg(0, mtime=NOW), NOW, HOUR)  # no timestamp known: the mtime


@given(
    st.integers(0, 1_000),
    st.integers(0, 400),
    st.one_of(st.none(), st.integers(0, 1_500)),
    st.one_of(st.none(), st.integers(0, 1_500)),
)
def test_last_stable_offset_is_exact_below_the_active_base(base, beyond, hw, first_unstable):
    """With the LEO known, min(HW, LEO, first unstable) of the known terms (None: no HW and no open
    transaction); with it unknown, the same wherever the cleaner reads it: capped at the active base."""
    from compaction.policy.plan import last_stable_offset

    leo = base + beyond
    hw = None if hw is None else min(hw, leo)  # a high watermark never passes the log end
    known = [x for x in (hw, first_unstable) if x is not None]
    exact = min([leo, *known]) if known else None
    assert last_stable_offset(hw, first_unstable, leo, base) == exact
    unknown = last_stable_offset(hw, first_unstable, None, base)
    capped = base if unknown is None else min(base, unknown)
    assert capped == (base if exact is None else min(base, exact))


@pytest.mark.parametrize(
    "hw, leo, base, expected",
    [
        (40, 60, 50, 40),  # a high watermark behind the active segment: a cleaned batch may end there
        (50, 60, 50, 50),  # at the active base
        (51, 60, 50, None),  # past it: no batch of the round ends there
        (None, 60, 50, None),  # no checkpoint entry: the log end, past the active base
        (None, 50, 50, 50),  # an empty active segment: the log end is the active base
        (70, 50, 50, 50),  # a checkpoint past the log end is capped at it
        (None, None, 50, None),  # unknown log end: past the active base (the active segment holds data)
        (55, None, 50, None),
    ],
)
def test_high_watermark_in_reach(hw, leo, base, expected):
    """The high watermark the rewrite keeps an emptied batch at (Kafka 4.4+, KAFKA-20452), where it
    can matter: at or below the active base."""
    from compaction.policy.plan import high_watermark_in_reach

    assert high_watermark_in_reach(hw, leo, base) == expected
