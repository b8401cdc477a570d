"""Partitions whose segments are each valid but do not fit together, beside healthy ones in one
log dir: a segment of another partition dropped in, a segment renamed above its first offset, the
same segment twice, a copy under a base below its first offset (duplicated offsets), a segment
carrying another leader's epochs. kafka-python decodes every file. A dry run lists what is wrong
per partition; the round (one spark-submit) fails each of them with a reason naming the file(s),
the offsets and the rule, changes none of their bytes, and cleans the others as before."""

from __future__ import annotations

import os

import pytest
from e2ekit import decode_partition, run_job, tree_hashes
from faultkit import assert_loads, expected_after, run_driver_only
from structkit import bases, copy_segment, offsets, read_epoch_checkpoint, seg_path, set_epochs

from compaction.format.naming import segment_file_name
from compaction.policy.log_structure import RULE_BASE, RULE_EPOCH_CHECKPOINT, RULE_NEXT
from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000
TOPICS = (("foreign", 2), ("renamed", 1), ("twice", 1), ("copybelow", 1), ("epochs", 1), ("healthy", 2))


def name(base: int) -> str:
    return segment_file_name(base, ".log")


def _damage(log_dir: str) -> dict[str, tuple[str, ...]]:
    """Damaged partition -> substrings of the round's reason (names, offsets, rule)."""
    want = {}
    d = lambda p: os.path.join(log_dir, p)  # noqa: E731

    # orders-0's offsets dropped into orders-1 under base 100, inside orders-1's first segment
    src, dst = bases(d("foreign-0")), bases(d("foreign-1"))
    nxt = min(b for b in dst if b > 100)
    moved = min(b for b in src if b >= nxt)  # it overlaps foreign-1's segments from `nxt` on
    first, last = offsets(d("foreign-0"), moved)
    copy_segment(d("foreign-0"), moved, d("foreign-1"), 100)
    overlap = f"{name(100)} holds offsets {first}-{last}, overlapping {name(nxt)} from {nxt}"
    want["foreign-1"] = (seg_path(d("foreign-1"), 100), overlap, RULE_NEXT)

    # a segment renamed (with its index files) to base + 5
    b = bases(d("renamed-0"))[2]
    copy_segment(d("renamed-0"), b, d("renamed-0"), b + 5, move=True)
    want["renamed-0"] = (f"{name(b + 5)} starts at offset {b}, below its base offset {b + 5}", RULE_BASE)

    # the first segment again, under a base past the log's end (the new active segment)
    b = bases(d("twice-0"))
    again = offsets(d("twice-0"), b[-1])[1] + 10
    copy_segment(d("twice-0"), b[0], d("twice-0"), again)
    below = f"{name(again)} starts at offset 0, below its base offset {again}"
    want["twice-0"] = (seg_path(d("twice-0"), again), below, RULE_BASE)

    # a copy one offset below its first offset, same content: every offset of it twice
    b = bases(d("copybelow-0"))[2]
    first, last = offsets(d("copybelow-0"), b)
    copy_segment(d("copybelow-0"), b, d("copybelow-0"), b - 1)
    overlap = f"{name(b - 1)} holds offsets {first}-{last}, overlapping {name(b)} from {b}"
    want["copybelow-0"] = (overlap, RULE_NEXT)

    # a segment from a replica that saw the next leader earlier: whole segment in the epoch that
    # the checkpoint starts inside it
    part = d("epochs-0")
    b, (epoch, start) = next(
        (b, e)
        for b in bases(part)
        for e in read_epoch_checkpoint(part)[1:]
        if b < e[1] <= offsets(part, b)[1]
    )
    set_epochs(part, b, epoch)
    held = f"{name(b)} holds leader epoch {epoch} at offsets {b}-"
    starts = f"leader-epoch-checkpoint starts epoch {epoch} at {start}"
    want["epochs-0"] = (held, starts, RULE_EPOCH_CHECKPOINT)
    return want


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    root = tmp_path_factory.mktemp("structure")
    log_dir = str(root / "logs")
    generate_log_dir(
        log_dir,
        topics=TOPICS,
        records=3000,
        keys=300,
        codec="mixed",
        segment_bytes=30_000,
        tombstone_ratio=0.0,
        leader_epochs=4,
        seed=5,
    )
    want = _damage(log_dir)
    before = {
        p: tree_hashes(os.path.join(log_dir, p))
        for p in os.listdir(log_dir)
        if os.path.isdir(os.path.join(log_dir, p))
    }
    expected = {p: expected_after(os.path.join(log_dir, p)) for p in ("healthy-0", "healthy-1", "foreign-0")}
    dry = run_driver_only(log_dir, "--now-ms", str(NOW), "--plan-only", "--report", str(root / "dry.json"))
    dry_report = __import__("json").load(open(root / "dry.json"))
    after_dry = {p: tree_hashes(os.path.join(log_dir, p)) for p in before}
    code, report, err = run_job(log_dir, "--now-ms", str(NOW), report=str(root / "report.json"))
    after = {p: tree_hashes(os.path.join(log_dir, p)) for p in before}
    dry_run = (dry.returncode, dry_report, after_dry)
    return log_dir, want, before, expected, dry_run, (code, report, err), after


def _by_name(report):
    return {f"{p['topic']}-{p['partition']}": p for p in report["partitions"]}


def test_dry_run_lists_every_damaged_partition_and_writes_nothing(outcome):
    _, want, before, _, (code, report, after_dry), _, _ = outcome
    parts = _by_name(report)
    assert code == 1
    for p, needles in want.items():
        assert parts[p]["status"] == "failed", parts[p]
        assert needles[-1] in parts[p]["reason"], parts[p]  # the rule; offsets: from first batches only
    assert {r["reason"] for p, r in parts.items() if p not in want} == {"eligible (plan only)"}
    assert after_dry == before


def test_round_exits_1(outcome):
    _, _, _, _, _, (code, report, err), _ = outcome
    assert code == 1, err
    assert report["totals"]["failed"] == 5 and report["totals"]["cleaned"] == 3


@pytest.mark.parametrize("part", ["foreign-1", "renamed-0", "twice-0", "copybelow-0", "epochs-0"])
def test_damaged_partition_failed_with_files_offsets_rule_and_untouched(outcome, part):
    _, want, before, _, _, (_, report, _), after = outcome
    got = _by_name(report)[part]
    assert got["status"] == "failed"
    for needle in want[part]:
        assert needle in got["reason"], (needle, got["reason"])
    assert after[part] == before[part]


@pytest.mark.parametrize("part", ["healthy-0", "healthy-1", "foreign-0"])
def test_other_partitions_cleaned_as_before(outcome, part):
    log_dir, _, _, expected, _, (_, report, _), _ = outcome
    assert _by_name(report)[part]["status"] == "cleaned"
    part_dir = os.path.join(log_dir, part)
    assert decode_partition(part_dir) == expected[part]
    assert_loads(part_dir)
