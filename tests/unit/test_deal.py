"""The dealing of the merge's buckets among the ranges stage's tasks (compaction/steps/schedule.py):
the estimates it rests on, and that every bucket is merged exactly once."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compaction.steps.schedule import RangeStats, deal, key_universe, rewrite_seconds

GIB = 1 << 30


@pytest.mark.parametrize(
    "records, keys, expect",
    [
        (1000, 1000, math.inf),  # every record its own key: as many keys as there will ever be
        (1000, 2000, math.inf),  # more keys than records cannot be drawn: no bound either
        (1000, 0, math.inf),  # no keyed record
        (1_890_000, round(1_000_000 * -math.expm1(-1.89)), 1_000_000),  # drawn from 1M keys
        (10_000_000, 10, 10),  # a few keys, drawn over and over
    ],
)
def test_key_universe_is_the_count_the_newest_range_was_drawn_from(records, keys, expect):
    got = key_universe(RangeStats(GIB, records, keys))
    assert got == expect if math.isinf(expect) else got == pytest.approx(expect, rel=1e-3)


def test_the_newest_range_keeps_all_its_keys_and_older_ones_fewer():
    # 1M keys over 3.78M records in two ranges: the older range's keys mostly recur later.
    older, newest = RangeStats(GIB, 1_890_000, 850_000), RangeStats(GIB, 1_890_000, 850_000)
    first, last = rewrite_seconds([older, newest])
    assert first < last
    alone = rewrite_seconds([newest])[0]
    assert alone == pytest.approx(last)  # the newest range's estimate does not depend on the others


def test_ranges_of_distinct_keys_keep_everything():
    parts = [RangeStats(GIB, 1000, 1000)] * 3
    assert len(set(rewrite_seconds(parts))) == 1


@pytest.mark.parametrize(
    "rewrite, rows, expect",
    [
        ([0.3, 0.6], 1_700_000, [64, 0]),  # the merge fits in the lighter task's slack
        ([0.5, 0.5], 1_700_000, [32, 32]),  # even rewrites: alternated, the lower task first
        ([0.0, 0.0, 0.0], 0, [64, 0, 0]),  # nothing to merge: the buckets are empty, all to the first
        ([0.0, 10.0], 17_000_000, [64, 0]),
        ([0.33, 0.45], 17_000_000, [35, 29]),  # many keys: the merge (1.19 s) outweighs the gap (0.12 s)
    ],
)
def test_buckets_go_to_the_task_with_least_ahead_of_it(rewrite, rows, expect):
    assert [len(b) for b in deal(rewrite, rows, 64)] == expect


@given(st.lists(st.floats(0, 10), min_size=1, max_size=8), st.integers(0, 10**8), st.integers(1, 128))
def test_every_bucket_is_merged_by_exactly_one_task(rewrite, rows, buckets):
    dealt = deal(rewrite, rows, buckets)
    assert len(dealt) == len(rewrite)
    assert sorted(b for bs in dealt for b in bs) == list(range(buckets))
