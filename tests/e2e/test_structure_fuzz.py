"""Structural fuzz (beside the byte fuzz of test_reader_fuzz.py): random operations on healthy
generated partitions - a segment duplicated, dropped, renamed, truncated at a batch boundary,
moved to another partition, two segments' index files swapped, a segment restamped with a newer
leader's epoch - then one round, in process, on real Spark. Every byte and CRC stays valid.

Each partition is then either cleaned exactly (its records as kafka-python decodes them: the
latest per key below the active segment, all from it on; indexes as a broker would rebuild them)
or failed with a reason naming a file of that partition and every file's sha256 unchanged; and
never cleaned from an inconsistent log: an operation that always breaks the log (duplicate,
rename, move in, index swap, restamp) must fail its partition, one that always leaves a
consistent log (drop, move out) must clean it. Truncation may do either (an index entry past
the cut fails it).

KAFKA_COMPACTION_FUZZ_SEEDS (default 10) rounds of PARTITIONS partitions, one operation each; every
fourth round in the v1 message format of Kafka 0.10 (no leader epochs: no restamping); every third
round cuts every partition into ranges (compaction/steps/ranges.py: scan per group, leader epochs
checked on the driver) instead of compacting it whole in one task."""

from __future__ import annotations

import os
import random

import pytest
from e2ekit import decode_partition, tree_hashes
from faultkit import assert_loads, expected_after
from structkit import (
    bases,
    columns,
    copy_segment,
    drop_segment,
    offsets,
    seg_path,
    set_epochs,
    swap_indexes,
    truncate_at_batch,
)

from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.spark]

NOW = 1_800_000_000_000
PARTITIONS = 7
SEEDS = int(os.environ.get("KAFKA_COMPACTION_FUZZ_SEEDS", "10"))
FAIL, CLEAN, EITHER = "failed", "cleaned", "either"
OPERATIONS = ("duplicate", "drop", "rename", "truncate", "move", "swap_indexes", "restamp")


def _duplicate(rng, part, segs, _):
    """A segment's files copied under another free base: past the log's end, inside its own
    offsets, or just below its base (inside the previous segment's)."""
    b = rng.choice(segs)
    first, last = offsets(part, b)
    choices = [offsets(part, segs[-1])[1] + rng.randint(1, 50), rng.randint(first + 1, last + 1), b - 1]
    new = rng.choice([c for c in choices if c >= 0 and c not in segs])
    copy_segment(part, b, part, new)
    return {part: FAIL}


def _drop(rng, part, segs, _):
    drop_segment(part, rng.choice(segs))
    return {part: CLEAN}


def _rename(rng, part, segs, _):
    """A segment other than the first renamed (with its index files) a few offsets up or down."""
    i = rng.randrange(1, len(segs))
    new = segs[i] + rng.choice([-1, 1]) * rng.randint(1, 5)
    if new in segs:
        return {}
    copy_segment(part, segs[i], part, new, move=True)
    return {part: FAIL}


def _truncate(rng, part, segs, _):
    b = rng.choice(segs)
    n = len(columns(part, b).position)
    if n < 2:
        return {}
    truncate_at_batch(part, b, rng.randrange(1, n))
    return {part: EITHER}


def _move(rng, part, segs, others):
    """A segment of this partition moved into another partition under its own base name (one
    more offset up if that name is taken there)."""
    dst = rng.choice(others)
    b = rng.choice(segs[1:-1] or segs)
    new = b if b not in bases(dst) else b + 1
    if new in bases(dst):
        return {}
    copy_segment(part, b, dst, new, move=True)
    return {part: CLEAN, dst: EITHER}


def _swap_indexes(rng, part, segs, _):
    a, b = rng.sample(segs, 2)
    same = all(
        open(seg_path(part, a, s), "rb").read() == open(seg_path(part, b, s), "rb").read()
        for s in (".index", ".timeindex")
    )
    swap_indexes(part, a, b)
    return {part: CLEAN if same else FAIL}


def _restamp(rng, part, segs, _):
    """A segment other than the last restamped with an epoch newer than every later one."""
    b = rng.choice(segs[:-1])
    set_epochs(part, b, max(int(columns(part, x).partition_leader_epoch.max()) for x in segs) + 1)
    return {part: FAIL}


DAMAGE = {
    "duplicate": _duplicate,
    "drop": _drop,
    "rename": _rename,
    "truncate": _truncate,
    "move": _move,
    "swap_indexes": _swap_indexes,
    "restamp": _restamp,
}


def _damage(log_dir: str, rng: random.Random, operations=OPERATIONS) -> dict[str, tuple[str, str]]:
    """One random operation per partition (a partition another's move lands in takes no more);
    -> {partition dir name: (operation, expected outcome)} for the partitions touched."""
    names = sorted(n for n in os.listdir(log_dir) if os.path.isdir(os.path.join(log_dir, n)))
    done: dict[str, tuple[str, str]] = {}
    for name in names:
        if name in done:
            continue
        op = rng.choice(operations)
        part = os.path.join(log_dir, name)
        others = [os.path.join(log_dir, n) for n in names if n != name and n not in done]
        if op == "move" and not others:
            continue
        outcome = DAMAGE[op](rng, part, bases(part), others)
        for path, expect in outcome.items():
            done[os.path.basename(path)] = (op, expect)
    return done


@pytest.fixture(scope="module")
def conf(spark):
    """The SparkContext's conf, which the round reads its knobs from (as spark-submit's --conf
    sets them): no warm-up here, one per round is not the point."""
    conf = spark.sparkContext._conf
    conf.set("spark.kafka.compaction.warmup", "false")
    yield conf
    conf._jconf.remove("spark.kafka.compaction.warmup")


@pytest.mark.parametrize("seed", range(SEEDS))
def test_structural_damage_fails_or_cleans_exactly(conf, tmp_path, seed):
    from compaction.cli.options import parse_args
    from compaction.round import run

    log_dir = str(tmp_path / "logs")
    legacy = seed % 4 == 3
    generate_log_dir(
        log_dir,
        topics=(("fuzz", PARTITIONS),),
        records=700,
        keys=120,
        codec="gzip" if legacy else "mixed",
        legacy="v1" if legacy else None,
        batch_records=(1, 12),
        segment_bytes=7_000,
        index_interval_bytes=1024,
        tombstone_ratio=0.0,
        leader_epochs=3,
        seed=1000 + seed,
    )
    rng = random.Random(seed)
    damaged = _damage(log_dir, rng, [op for op in OPERATIONS if not (legacy and op == "restamp")])
    parts = sorted(n for n in os.listdir(log_dir) if os.path.isdir(os.path.join(log_dir, n)))
    before = {p: tree_hashes(os.path.join(log_dir, p)) for p in parts}
    expected = {p: expected_after(os.path.join(log_dir, p)) for p in parts}
    ranged = seed % 3 == 2
    conf.set("spark.kafka.compaction.partitionTaskMaxBytes", "1" if ranged else str(1 << 30))
    try:
        code, report = run(parse_args(["--log-dir", log_dir, "--now-ms", str(NOW)]))
    finally:
        conf._jconf.remove("spark.kafka.compaction.partitionTaskMaxBytes")
    assert ("rangesSeconds" in report["timings"]) == ranged  # the ranges path ran
    got = {f"{r['topic']}-{r['partition']}": r for r in report["partitions"]}
    for p in parts:
        op, expect = damaged.get(p, ("none", CLEAN))
        r, part_dir = got[p], os.path.join(log_dir, p)
        where = (seed, p, op, r["status"], r["reason"])
        assert r["status"] in (FAIL, CLEAN), where
        if expect != EITHER:
            assert r["status"] == expect, where
        if r["status"] == FAIL:
            assert part_dir + "/" in r["reason"], where  # names a file of the partition
            assert tree_hashes(part_dir) == before[p], where
        else:
            assert decode_partition(part_dir) == expected[p], where
            assert_loads(part_dir)
    assert code == (1 if any(r["status"] == FAIL for r in got.values()) else 0)
