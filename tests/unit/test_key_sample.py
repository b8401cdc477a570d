"""Where the ranges stage cuts a partition: the driver's sample of its newest keys
(compaction/steps/key_sample.py) and the segment weights it gives (compaction/steps/schedule.py
`segment_weights`, `RangePlan.cut`)."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import pytest
from groupkit import generate, specs_for
from hypothesis import given
from hypothesis import strategies as st

from compaction.format import batch as fb
from compaction.format import compression
from compaction.format.batch_build import build_batch
from compaction.steps.group import SourceSegment
from compaction.steps.key_sample import MIN_RECORDS, count_keys, sample_partition, sample_position
from compaction.steps.schedule import KEPT_WEIGHT, KeepModel, RangePlan, keep_model, segment_weights

MiB = 1 << 20


def _index(*positions: int) -> bytes:
    """An offset index whose entries are at `positions` (relative offsets 1, 2, ...)."""
    return b"".join((i + 1).to_bytes(4, "big") + p.to_bytes(4, "big") for i, p in enumerate(positions))


@pytest.mark.parametrize(
    "positions, size, want, expect",
    [
        ((4096, 8192, 12288), 10_000, 20_000, 0),  # the segment is shorter than the sample: all of it
        ((4096, 8192, 12288), 20_000, 10_000, 8192),  # the last entry at or before size - want
        ((4096, 8192, 12288), 18_192, 10_000, 8192),  # exactly at it
        ((4096, 8192, 12288), 18_191, 10_000, 4096),
        ((8192,), 12_000, 5_000, None),  # no entry early enough
        ((), 12_000, 5_000, None),  # no entry at all
        ((4096, 8192, 0, 0), 20_000, 10_000, 8192),  # a preallocated index's zero entries are no positions
    ],
)
def test_the_sample_starts_at_an_index_entry_before_the_segments_last_bytes(positions, size, want, expect):
    assert sample_position(_index(*positions) + b"\0\0", 1000, size, want) == expect


def _batches(keys: list[bytes], codec: int, per_batch: int = 50) -> bytes:
    out = b""
    for at in range(0, len(keys), per_batch):
        records = [
            fb.Record(at + i, 1_700_000_000_000, k, b"v" * 30)
            for i, k in enumerate(keys[at : at + per_batch])
        ]
        out += build_batch(records, base_offset=at, codec=codec)
    return out


@pytest.mark.parametrize("codec", [compression.CODEC_NONE, compression.CODEC_LZ4, compression.CODEC_ZSTD])
def test_count_keys_counts_records_distinct_keys_and_the_codec(codec):
    rng = random.Random(1)
    keys = [b"key-%d" % rng.randrange(300) for _ in range(1000)]
    data = _batches(keys, codec)
    got = count_keys(data + data[:100], "/p/0.log", 4096)  # a batch cut off by the read's end is left out
    assert got.records == 1000 and got.keys == len(set(keys)) and got.codec == codec
    assert got.bytes == len(data)


def test_a_partition_is_sampled_from_its_newest_cleaned_segment(tmp_path):
    part = generate(tmp_path / "logs", "--records 6000 --keys 500 --codec lz4 --segment-bytes 200000")
    specs = specs_for(part, 2)
    found = sample_partition(specs, want=64 << 10)
    assert found is not None and found.records >= MIN_RECORDS and found.codec == compression.CODEC_LZ4
    assert found.keys <= min(found.records, 500)
    # A sample longer than the segment: every record of it.
    whole = sample_partition(specs, want=1 << 30)
    newest = specs[-1].segments[-1]
    assert whole.records == newest.next_base_offset - newest.base_offset


def test_an_unreadable_or_tiny_sample_gives_none(tmp_path):
    part = generate(tmp_path / "logs", "--records 6000 --keys 500 --segment-bytes 200000")
    specs = specs_for(part, 1)
    newest = specs[-1].segments[-1]
    index = Path(specs[-1].segment_path(newest.base_offset, ".index"))
    index.unlink()  # no index: nothing to start from
    assert sample_partition(specs) is None
    tiny = dataclasses.replace(specs[-1], segments=(dataclasses.replace(newest, size=0),))
    assert sample_partition([tiny]) is None


# --- the weights ----------------------------------------------------------------------------------


def _segments(n: int, records: int, size: int = 64 * MiB) -> list[SourceSegment]:
    return [SourceSegment(i * records, size, 0, (i + 1) * records) for i in range(n)]


def test_without_a_model_or_with_unbounded_keys_a_segment_weighs_its_bytes():
    segs = _segments(8, 100_000)
    assert segment_weights(segs, None) == [64.0 * MiB] * 8
    every = segment_weights(segs, KeepModel(math.inf, 0.5))
    assert every == [64.0 * MiB * 1.5] * 8  # every record kept everywhere: the same weight each


@pytest.mark.parametrize(
    "universe, newest_share, oldest_share",
    [
        # 1M keys over 8 x 500k records: the newest segment keeps 1M (1 - e^-0.5) / 500k of its records
        (1_000_000, 2 * -math.expm1(-0.5), 2 * math.exp(-3.5) * -math.expm1(-0.5)),
        (100, 100 / 500_000, 0.0),  # a few keys: their latest records are in the newest segment
    ],
)
def test_newer_segments_keep_more(universe, newest_share, oldest_share):
    w = segment_weights(_segments(8, 500_000), KeepModel(universe, 1.0))
    assert w == sorted(w)
    assert w[-1] == pytest.approx(64 * MiB * (1 + newest_share))
    assert w[0] == pytest.approx(64 * MiB * (1 + oldest_share), abs=1.0)


def test_keep_model_prices_a_kept_byte_by_the_codec():
    assert keep_model(0, 0, 4) is None
    m = keep_model(13_284, 13_194, compression.CODEC_ZSTD)
    assert m.kept_weight == KEPT_WEIGHT[compression.CODEC_ZSTD]
    assert 0.8e6 < m.universe < 1.2e6  # ~90 repeats among 13k draws: about a million keys
    assert keep_model(1000, 1000, compression.CODEC_NONE).universe == math.inf


def _plan_shares(model: KeepModel | None, n: int = 16, tasks: int = 2) -> list[int]:
    part = specs_for_segments(_segments(n, 500_000))
    plan = RangePlan.cut([part], tasks, [model])
    return [
        sum(seg.size for r in rids for seg in plan.ranges[r].scan.segments) // (64 * MiB)
        for rids in plan.tasks
    ]


def specs_for_segments(segs: list[SourceSegment]):
    from compaction.runtime.storage import Storage
    from compaction.steps.group import GroupSpec

    return [
        GroupSpec(
            group_id=i,
            topic="t",
            partition=0,
            storage=Storage.local(),
            part_path="/x",
            segments=(seg,),
            first_dirty_offset=0,
            upper_bound=segs[-1].next_base_offset,
            now_ms=0,
            delete_retention_ms=0,
            legacy_delete_horizon_ms=0,
            index_interval_bytes=4096,
        )
        for i, seg in enumerate(segs)
    ]


def test_the_cut_gives_the_older_task_more_segments_where_the_newer_keeps_more():
    assert _plan_shares(None) == [8, 8]
    assert _plan_shares(KeepModel(math.inf, 1.0)) == [8, 8]
    shares = _plan_shares(KeepModel(1_000_000, 2.0))
    assert shares[0] > shares[1] and sum(shares) == 16


@given(
    n=st.integers(1, 40),
    tasks=st.integers(1, 6),
    universe=st.one_of(st.just(math.inf), st.floats(1, 1e9)),
    weight=st.floats(0, 5),
)
def test_any_weighted_cut_covers_every_segment_once_in_log_order(n, tasks, universe, weight):
    part = specs_for_segments(_segments(n, 1000))
    plan = RangePlan.cut([part], tasks, [KeepModel(universe, weight)])
    scanned = [seg.base_offset for rids in plan.tasks for r in rids for seg in plan.ranges[r].scan.segments]
    assert scanned == [s.base_offset for s in _segments(n, 1000)]
