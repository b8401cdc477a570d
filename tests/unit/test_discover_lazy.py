"""Planning reads only what its decision needs.

`plan_round.plan_one` builds the partition state lazily (no file read under default configs beyond the
listing; largest timestamps for min.compaction.lag.ms, first batch timestamps for
max.compaction.lag.ms, the log end offset where a checkpoint / HW / open transaction needs it).
These tests check it against an eager reference that reads everything (what the planner did
before), over many checkpoints, high watermarks and configs, and that a skipped partition's files
are not opened at all.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from types import SimpleNamespace

import pyarrow.fs as pafs
import pytest
from faultkit import small_partition

from compaction.cli.options import LONG_MAX, parse_args
from compaction.errors import IndexCorruptError
from compaction.policy.plan import PartitionState, plan_partition
from compaction.policy.topic_config import resolve_topic_config
from compaction.runtime import storage as storage_module
from compaction.runtime.storage import Storage
from compaction.steps import discover, plan_round, recover, validate
from compaction.steps.discover import (
    first_batch_timestamp,
    last_time_entry_ts,
    list_partition,
    log_end_offset,
    read_log_dir,
    segment_meta,
)
from compaction.tools.generator import generate_log_dir

SEG1 = "00000000000000000010"


def _eager_plan(ld, part, opts, first_unstable=None):
    """The planner's inputs read in full: what the lazy reads must agree with."""
    config = resolve_topic_config(opts.topic_config.get(part.topic), plan_round.job_config(opts, part.topic))
    metas = tuple(segment_meta(ld.storage, s, largest_ts=True, first_batch_ts=True) for s in part.segments)
    leo = log_end_offset(ld.storage, part.segments[-1])
    start = max(ld.log_start_offsets.get(part.key, 0), metas[0].base_offset)
    hw = ld.high_watermarks.get(part.key)
    lso = min(hw, leo) if hw is not None else None
    if first_unstable is not None:
        lso = min(lso if lso is not None else leo, first_unstable)
    # the high watermark (capped at the LEO; the LEO without one) where a cleaned batch can end
    effective = min(hw, leo) if hw is not None else leo
    in_reach = effective if effective <= metas[-1].base_offset else None
    state = PartitionState(metas, start, leo, ld.cleaner_checkpoint.get(part.key), lso, in_reach)
    return plan_partition(part.topic, part.partition, state, config, opts.now_ms)


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("lazy") / "logs")
    generate_log_dir(
        root, topics=(("a", 2), ("b", 1)), records=3000, keys=200, codec="mixed", segment_bytes=8_000, seed=3
    )
    return root


def test_lazy_plan_equals_eager_plan(log_dir):
    ld = read_log_dir(log_dir)
    cases = settled = 0
    for part in ld.partitions:
        segs = part.segments
        assert len(segs) >= 4
        base = segs[-1].base_offset
        leo = log_end_offset(ld.storage, segs[-1])
        mid = segs[len(segs) // 2].base_offset
        stamps = sorted(last_time_entry_ts(ld.storage, s) for s in segs[:-1])
        firsts = sorted(t for t in (first_batch_timestamp(ld.storage, s) for s in segs[:-1]) if t > 0)
        now = stamps[-1] + 1_000
        high_ratio = ["--min-cleanable-dirty-ratio", "0.99"]
        configs = [
            [],
            ["--min-compaction-lag-ms", str(now - stamps[len(stamps) // 2])],  # cuts mid-log
            ["--min-compaction-lag-ms", str(now - stamps[0] + 1)],  # everything too recent
            ["--max-compaction-lag-ms", str(now - firsts[len(firsts) // 2]), *high_ratio],
            high_ratio,
        ]
        checkpoints = [None, 0, segs[1].base_offset + 1, mid, base, base + 1, leo, leo + 5]
        hws = [None, segs[1].base_offset, base, base + 1, leo, leo + 10]
        for extra, ckpt, hw, unstable in itertools.product(configs, checkpoints, hws, [None, mid + 1]):
            opts = parse_args(["--log-dir", log_dir, "--plan-only", "--now-ms", str(now), *extra])
            ld.cleaner_checkpoint.pop(part.key, None)
            ld.high_watermarks.pop(part.key, None)
            if ckpt is not None:
                ld.cleaner_checkpoint[part.key] = ckpt
            if hw is not None:
                ld.high_watermarks[part.key] = hw
            lazy = plan_round.plan_one(ld, part, opts, unstable)
            assert lazy.result.status != "failed", lazy.result.reason
            want = _eager_plan(ld, part, opts, unstable)
            if ckpt == part.segments[-1].base_offset:
                # Settled (checkpoint at the active base): nothing is cleanable, so the segments
                # are not stat'ed; the clean bytes and the legacy horizon (read only by a round
                # that cleans) stay unknown. Everything the report and the round use is equal.
                assert not want.eligible and want.dirty_bytes == 0 and want.cleanable_ratio == 0
                unknown = dict(clean_bytes=0, legacy_delete_horizon_ms=0)
                lazy_plan, want = (
                    dataclasses.replace(lazy.plan, **unknown),
                    dataclasses.replace(want, **unknown),
                )
                settled += 1
            else:
                lazy_plan = lazy.plan
            assert lazy_plan == want, (part.key, extra, ckpt, hw, unstable)
            assert lazy.result.reason == (None if want.eligible else want.reason)
            cases += 1
    assert cases > 1000 and settled > 50


def test_lso_at_active_base_reason_needs_the_log_end_offset(tmp_path):
    """HW above an empty-but-for-a-partial-batch active segment: the LSO (= LEO = active base)
    names the reason; the lazy plan reads the LEO for it."""
    log_dir = str(tmp_path / "logs")
    small_partition(os.path.join(log_dir, "t-0"))
    active = os.path.join(log_dir, "t-0", "00000000000000000020.log")
    with open(active, "r+b") as fh:
        fh.truncate(20)  # a partial batch only: LEO = base 20
    ld = read_log_dir(log_dir)
    part = ld.partitions[0]
    ld.cleaner_checkpoint[part.key] = 5
    ld.high_watermarks[part.key] = 100
    ratio = ["--min-cleanable-dirty-ratio", "1"]
    opts = parse_args(["--log-dir", log_dir, "--plan-only", "--now-ms", "0", *ratio])
    lazy = plan_round.plan_one(ld, part, opts)
    assert lazy.plan == _eager_plan(ld, part, opts)


def _counting_reads(monkeypatch):
    """Paths opened by discovery's local reads (`Storage.read_small`)."""
    opened = []
    real_open = storage_module.os.open

    def os_open(path, *a, **k):
        opened.append(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr(storage_module.os, "open", os_open)
    return opened


def test_skipped_partition_is_not_read_and_a_damaged_index_there_is_not_seen(tmp_path, monkeypatch):
    log_dir = str(tmp_path / "logs")
    small_partition(os.path.join(log_dir, "t-0"))
    index = os.path.join(log_dir, "t-0", SEG1 + ".index")
    data = open(index, "rb").read()
    open(index, "wb").write(data[8:16] + data[:8] + data[16:])  # goes backwards
    with open(os.path.join(log_dir, "cleaner-offset-checkpoint"), "w") as fh:
        fh.write("0\n1\nt 0 20\n")  # cleaned up to the active segment
    opened = _counting_reads(monkeypatch)
    ld = read_log_dir(log_dir)
    opened.clear()
    p = plan_round.plan_one(
        ld, ld.partitions[0], parse_args(["--log-dir", log_dir, "--plan-only", "--now-ms", "0"])
    )
    assert p.result.status == "skipped" and not p.plan.eligible, p.result
    assert opened == []
    # the same partition, dirty: it is read, and the damage is reported
    del ld.cleaner_checkpoint[("t", 0)]
    p = plan_round.plan_one(
        ld, ld.partitions[0], parse_args(["--log-dir", log_dir, "--plan-only", "--now-ms", "0"])
    )
    assert p.result.status == "failed" and "goes backwards" in p.result.reason and index in p.result.reason


def test_default_config_plan_reads_no_file(log_dir, monkeypatch):
    ld = read_log_dir(log_dir)
    part = ld.partitions[0]
    ld.cleaner_checkpoint[part.key] = part.segments[1].base_offset
    opened = _counting_reads(monkeypatch)
    p = plan_round.plan_one(
        ld,
        part,
        parse_args(
            ["--log-dir", log_dir, "--plan-only", "--now-ms", "0", "--min-cleanable-dirty-ratio", "1"]
        ),
    )
    assert not p.plan.eligible and opened == []


def test_min_lag_reads_dirty_segments_up_to_the_first_too_recent(log_dir, monkeypatch):
    ld = read_log_dir(log_dir)
    part = ld.partitions[0]
    segs = part.segments
    stamps = [last_time_entry_ts(ld.storage, s) for s in segs[:-1]]
    ld.cleaner_checkpoint[part.key] = segs[2].base_offset  # dirty from segment 2
    now = stamps[-1] + 1_000
    lag = now - stamps[4]  # segment 5 is the first too recent (strictly newer than the horizon)
    assert stamps[5] > stamps[4]
    opened = _counting_reads(monkeypatch)
    opts = parse_args(
        [
            "--log-dir",
            log_dir,
            "--plan-only",
            "--now-ms",
            str(now),
            "--min-compaction-lag-ms",
            str(lag),
            "--min-cleanable-dirty-ratio",
            "1",
        ]
    )
    p = plan_round.plan_one(ld, part, opts)
    assert not p.plan.eligible
    assert sorted(os.path.basename(x) for x in opened) == [
        discover.naming.segment_file_name(s.base_offset, ".timeindex") for s in segs[2:6]
    ]


def test_local_listing_matches_pyarrow_listing(log_dir):
    ld = read_log_dir(log_dir)
    remote = Storage(pafs.SubTreeFileSystem("/", pafs.LocalFileSystem()))
    assert not remote.is_local
    for part in ld.partitions:
        other = list_partition(remote, part.log_dir, part.path.lstrip("/"), part.topic, part.partition)
        assert len(other.segments) == len(part.segments)
        for a, b in zip(part.segments, other.segments, strict=True):
            for slot in ("log", "index", "timeindex", "txnindex"):
                fa, fb = getattr(a, slot), getattr(b, slot)
                assert (fa is None) == (fb is None)
                if fa is not None:
                    fields = lambda f: (f.name, f.size, f.mtime_ns, f.is_dir)  # noqa: E731
                    assert fields(fa) == fields(fb)


def test_recover_lists_once_and_relists_recovered_partitions(tmp_path):
    log_dir = str(tmp_path / "logs")
    small_partition(os.path.join(log_dir, "t-0"))
    small_partition(os.path.join(log_dir, "u-0"))
    stray = os.path.join(log_dir, "t-0", SEG1 + ".log.cleaned")
    open(stray, "wb").write(b"partial")
    opts = parse_args(["--log-dir", log_dir, "--now-ms", "0"])
    listed: dict = {}
    done = recover.recover(opts, listed)
    assert not os.path.exists(stray) and list(done) == [(log_dir, os.path.join(log_dir, "t-0"))]
    ld = listed[log_dir]
    assert [p.transient for p in ld.partitions] == [[], []]
    planned, dirs = plan_round.discover_and_plan(opts, listed)
    assert dirs == [ld] and [p.result.status for p in planned] == ["skipped", "skipped"]
    assert all(p.plan is not None and p.plan.eligible for p in planned)  # "eligible (plan only)" in run()


def test_recover_reports_the_seconds_its_listings_took(tmp_path, monkeypatch):
    """The report's `listSeconds`: the listings' seconds, added up over the log dirs from 0 (a
    clock that moves only as the test says, so that the figure is exact); planning, given those
    listings, lists nothing more."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    for d in dirs:
        small_partition(os.path.join(d, "t-0"))
    clock = iter([100.0, 100.25, 200.0, 200.5])
    monkeypatch.setattr(recover, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    opts = parse_args([x for d in dirs for x in ("--log-dir", d)] + ["--now-ms", "0"])
    listed: dict = {}
    timings: dict = {}
    recover.recover(opts, listed, timings)
    assert timings == {"listSeconds": 0.75} and list(listed) == dirs
    plan_round.discover_and_plan(opts, listed, timings)
    assert timings == {"listSeconds": 0.75}


def test_max_lag_default_reads_nothing_and_set_reads_first_batches(log_dir, monkeypatch):
    ld = read_log_dir(log_dir)
    part = ld.partitions[1]
    ld.cleaner_checkpoint[part.key] = part.segments[3].base_offset
    opened = _counting_reads(monkeypatch)
    opts = parse_args(
        [
            "--log-dir",
            log_dir,
            "--plan-only",
            "--now-ms",
            "0",
            "--min-cleanable-dirty-ratio",
            "1",
            "--max-compaction-lag-ms",
            str(LONG_MAX - 1),
        ]
    )
    plan_round.plan_one(ld, part, opts)
    logs = {discover.naming.segment_file_name(s.base_offset, ".log") for s in part.segments[3:-1]}
    assert {os.path.basename(x) for x in opened} == logs


def test_validate_partition_path_for_an_executor(tmp_path):
    log_dir = str(tmp_path / "logs")
    small_partition(os.path.join(log_dir, "t-0"))
    part_dir = os.path.join(log_dir, "t-0")
    validate.validate_partition_path(Storage.local(), part_dir)
    index = os.path.join(part_dir, SEG1 + ".index")
    n = os.path.getsize(index) // 8
    with open(index, "r+b") as fh:
        fh.seek((n - 1) * 8 + 4)
        fh.write((99_999).to_bytes(4, "big"))
    with pytest.raises(IndexCorruptError, match="past the end") as err:
        validate.validate_partition_path(Storage.local(), part_dir)
    assert err.value.path == index and err.value.position == (n - 1) * 8


def test_settled_partition_stats_only_back_to_a_non_empty_segment(log_dir, monkeypatch):
    """Checkpoint at the active base: the ratio is 0 without knowing the sizes, so only the
    active segment and the last non-empty non-active one are stat'ed (NaN stays NaN: an all-empty
    log is still told apart)."""

    ld = read_log_dir(log_dir)
    part = ld.partitions[0]
    base = part.segments[-1].base_offset
    opts = parse_args(["--log-dir", log_dir, "--now-ms", "1"])
    ld.cleaner_checkpoint[part.key] = base
    stats = []
    real = storage_module.LocalFile._st

    def counting(self):
        if self._stat is None and self.path.endswith(".log"):
            stats.append(self.path)
        return real(self)

    monkeypatch.setattr(storage_module.LocalFile, "_st", counting)
    p = plan_round.plan_one(ld, part, opts)
    assert p.result.status == "skipped" and p.plan.cleanable_ratio == 0.0
    assert 1 <= len(stats) <= 2 < len(part.segments), stats
    assert plan_round.sized_segments(part.segments, base - 1, 0) == range(len(part.segments))
