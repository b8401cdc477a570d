"""How a round's partitions are laid out over Spark tasks, every rule in one place:

- which partitions are compacted whole and which are cut into ranges (`cut_into_ranges`);
- how many whole-partition tasks, and which partitions each takes (`task_count`, `pack`);
- how the ranged partitions' segments are laid over the ranges stage's tasks, and which task
  rewrites each group (`RangePlan.cut`);
- which task of the ranges stage merges which fine buckets, so that the tasks end together
  (`deal_buckets`, from each range's estimated rewrite: `rewrite_seconds`).

The bucket dealing in detail: after the scan the tasks' work differs only in what is left: the
merge and the rewrite. The rewrite of the range holding a partition's newest segments needs
nothing from the merge (no later range can hold a key's latest record), so its task starts it at
once, and it is the longest: a key's latest record is more likely a late one. The merge's buckets
go to the tasks with the least rewrite ahead of them, estimated from what each range's scan
counted:

- rewriting a range costs `READ_SECONDS` per byte read plus `KEPT_SECONDS` per byte it keeps;
- a range keeps its keys that no later range of its partition holds. For the newest range that
  is all of them; for an older one, if keys recur evenly, each of its keys is absent from the
  `after` records that follow it with probability exp(-after / K), K the partition's number of
  distinct keys, which the newest range's count gives: its `records` drew `keys` distinct ones,
  K (1 - exp(-records / K)) = keys;
- merging costs `MERGE_SECONDS` per summary row, a bucket holding 1/FINE_BUCKETS of the rows.

An estimate only decides who merges what; any dealing cleans the same bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

from compaction.steps.group import GroupSpec
from compaction.steps.ranges import FINE_BUCKETS

# --- whole partitions or ranges ----------------------------------------------------------------

# A partition of one group below this is compacted whole even when it is more than a core's share
# of the round: the ranges stage's exchange costs more than the second core saves.
RANGES_MIN_BYTES = 128 << 20

MIN_SPLIT_TASK_BYTES = 1 << 30  # below this per task, more tasks than cores cost more than they balance


def partition_bytes(specs: list[GroupSpec]) -> int:
    """The bytes a partition's task reads: every segment of its groups `specs`, tail included."""
    return sum(seg.size for s in specs for seg in (*s.segments, *s.tail_segments))


def cut_into_ranges(sizes: list[int], groups: list[int], cores: int, limit: int) -> list[bool]:
    """Per partition: cut into ranges (compaction/steps/range_task.py) or compacted whole. Cut when it
    holds more than `limit` bytes, or more than a core's share of the round (one big partition
    alone would leave the other cores idle) and either several groups or RANGES_MIN_BYTES."""
    share = sum(sizes) / max(1, cores)
    return [
        size > limit or (size > share and (n > 1 or size >= RANGES_MIN_BYTES))
        for size, n in zip(sizes, groups)
    ]


def task_count(total_bytes: int, cores: int, tasks_per_core: int) -> int:
    """Whole-partition tasks for `total_bytes` of partitions: `tasks_per_core` per core, so that
    Spark can even out partitions whose cost their bytes misjudge (codecs), but never more than
    one per core unless each holds MIN_SPLIT_TASK_BYTES: between two tasks on a core Spark spends
    the time of its result, scheduling and the worker's task set-up, in which a core would have
    compacted about that many bytes (bench/startup.py)."""
    wanted = max(1, cores) * max(1, tasks_per_core)
    return max(1, min(cores, wanted), min(wanted, total_bytes // MIN_SPLIT_TASK_BYTES))


def pack(sizes: list[int], bins: int) -> list[list[int]]:
    """Indexes of `sizes` in at most `bins` bins, biggest first into the least loaded bin (LPT);
    bins ordered by load, heaviest first, so the longest tasks start first."""
    load = [0] * max(1, min(bins, len(sizes)))
    out: list[list[int]] = [[] for _ in load]
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        j = load.index(min(load))
        out[j].append(i)
        load[j] += sizes[i]
    return [out[j] for j in sorted(range(len(out)), key=lambda j: -load[j]) if out[j]]


# --- the ranges stage -------------------------------------------------------------------------


class RangeSpec(NamedTuple):
    """One range: `scan` the spec of its segments (under its group's id), the number of its
    partition in the plan, and whether the partition's index checks run with its scan (its
    partition's first range)."""

    scan: GroupSpec
    partition: int
    validate: bool


class CutGroup(NamedTuple):
    """One output group of the ranges stage: its spec, and its range ids in log order."""

    spec: GroupSpec
    ranges: list[int]


@dataclasses.dataclass(frozen=True)
class RangePlan:
    """Who does what. `ranges` {range id: its `RangeSpec`}; `groups` {group id: its `CutGroup`};
    `partitions` {partition number: its group ids in log order}; `tasks` [the range ids each
    task scans]; `rewriter` {group id: the task that rewrites it}."""

    ranges: dict[int, RangeSpec]
    groups: dict[int, CutGroup]
    partitions: dict[int, list[int]]
    tasks: list[list[int]]
    rewriter: dict[int, int]

    @classmethod
    def cut(cls, partitions: list[list[GroupSpec]], slots: int) -> RangePlan:
        """The groups of `partitions` cut into ranges over at most `slots` tasks (every task of
        the stage runs at once): segments in log order, each to the task whose share of the
        bytes holds its middle."""
        segs = [
            (n, spec, seg) for n, specs in enumerate(partitions) for spec in specs for seg in spec.segments
        ]
        total = sum(seg.size for _, _, seg in segs)
        n_tasks = max(1, min(slots, len(segs)))
        ranges: dict[int, RangeSpec] = {}
        groups: dict[int, CutGroup] = {}
        tasks: list[list[int]] = [[] for _ in range(n_tasks)]
        held: dict[int, dict[int, int]] = {}  # group id -> {task: bytes}
        at, last = 0, None
        for n, spec, seg in segs:
            t = min(n_tasks - 1, int((at + seg.size / 2) * n_tasks / total)) if total else 0
            at += seg.size
            if last is None or last[:2] != (spec.group_id, t):
                rid = len(ranges)
                first_of_partition = spec.group_id == partitions[n][0].group_id and not groups.get(
                    spec.group_id
                )
                empty = dataclasses.replace(spec, segments=(), tail_segments=())
                ranges[rid] = RangeSpec(empty, n, first_of_partition)
                groups.setdefault(spec.group_id, CutGroup(spec, [])).ranges.append(rid)
                tasks[t].append(rid)
                last = (spec.group_id, t, rid)
            rid = last[2]
            scan = ranges[rid].scan
            tail = spec.tail_segments if seg is spec.segments[-1] else ()
            ranges[rid] = ranges[rid]._replace(
                scan=dataclasses.replace(scan, segments=(*scan.segments, seg), tail_segments=tail)
            )
            held.setdefault(spec.group_id, {})[t] = held.get(spec.group_id, {}).get(t, 0) + seg.size
        # A tie goes to the later task: its range is the newer, which keeps more of its records.
        rewriter = {g: max(by_task, key=lambda t: (by_task[t], t)) for g, by_task in held.items()}
        by_partition = {
            n: [s.group_id for s in specs if s.group_id in groups] for n, specs in enumerate(partitions)
        }
        # A task may hold no segment (one far bigger than the others' shares): it still takes its
        # part in the merge, and the task numbers the rewriters refer to stay as they are.
        return cls(ranges, groups, by_partition, tasks, rewriter)

    def ranges_of(self, group_ids: list[int]) -> list[int]:
        """The ranges of groups `group_ids` (a partition's, in log order), in log order."""
        return [r for g in group_ids for r in self.groups[g].ranges]

    def merged(self, rid: int) -> bool:
        """Whether the merge may find a key of range `rid` a later offset: a later range of its
        partition lies in another task, i.e. (the tasks' shares being contiguous in log order)
        its partition's last range does. The later ranges of its own task are scanned with it
        into one table (`ranges.scan_ranges`), so its held offsets already are theirs, and a
        range of an earlier task lies before it in the log."""
        last_group = self.partitions[self.ranges[rid].partition][-1]
        return self.holder[self.groups[last_group].ranges[-1]] != self.holder[rid]

    @functools.cached_property
    def holder(self) -> dict[int, int]:
        """{range id: the task that scans it}."""
        return {r: t for t, rids in enumerate(self.tasks) for r in rids}

    def specs_of(self, partition: int) -> list[GroupSpec]:
        """The groups of `partition`, in log order."""
        return [self.groups[g].spec for g in self.partitions[partition]]

    def partition_of(self, group_id: int) -> int:
        return self.ranges[self.groups[group_id].ranges[0]].partition


# --- the merge's buckets -------------------------------------------------------------------------

# Fitted to the per-phase timings bench/ranges.py prints for the 2 GiB single partition of
# BENCHMARKS.md: each task's rewrite of its range, what it keeps, and the merge of the summaries.
READ_SECONDS = 0.29 / (1 << 30)
KEPT_SECONDS = 0.77 / (1 << 30)
MERGE_SECONDS = 70e-9


class RangeStats(NamedTuple):
    """What a range's scan counted: its bytes, records and distinct keys."""

    bytes: int
    records: int
    keys: int


def key_universe(newest: RangeStats) -> float:
    """K with K (1 - exp(-records / K)) = keys (inf when every record had its own key)."""
    n, k = newest.records, newest.keys
    if k >= n or k <= 0:
        return math.inf
    lo, hi = float(k), float(k)
    while hi * -math.expm1(-n / hi) < k:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid * -math.expm1(-n / mid) < k else (lo, mid)
    return hi


def rewrite_seconds(partition: list[RangeStats]) -> list[float]:
    """The estimated rewrite of each range of one partition (log order)."""
    universe = key_universe(partition[-1])
    out, after = [], 0
    for r in reversed(partition):
        kept = r.keys * (math.exp(-after / universe) if after else 1.0)
        out.append(READ_SECONDS * r.bytes + KEPT_SECONDS * r.bytes * min(1.0, kept / max(r.records, 1)))
        after += r.records
    return out[::-1]


def deal(rewrite: list[float], rows: int, buckets: int) -> list[list[int]]:
    """The buckets each task merges: each bucket in turn to the task whose rewrite plus merge so
    far is least (the lower task on a tie), every bucket costing `rows / buckets` rows."""
    load = list(rewrite)
    out: list[list[int]] = [[] for _ in load]
    for b in range(buckets):
        t = min(range(len(load)), key=lambda k: (load[k], k))
        out[t].append(b)
        load[t] += MERGE_SECONDS * rows / buckets
    return out


def deal_buckets(
    plan: RangePlan, scans: dict, dead: dict, units: dict, task_of: dict, holder: dict
) -> list[list[int]]:
    """Each task's merge buckets, the same in every task: from the ranges' counts (`scans`
    {range id: its scan's status}), each range's rewrite estimated for the task that will
    rewrite it; the partitions `dead` have nothing to merge."""
    rewrite, rows = [0.0] * len(plan.tasks), 0
    for p, gids in plan.partitions.items():
        if p in dead:
            continue
        rids = plan.ranges_of(gids)
        stats = [RangeStats(*scans[r]["stats"]) for r in rids]
        whole = len(units.get(gids[0], ())) > 1  # a partition with transactions: one unit, one task
        for r, seconds in zip(rids, rewrite_seconds(stats)):
            rewrite[task_of[gids[0]] if whole else holder[r]] += seconds
        if len(rids) > 1:
            rows += sum(s.keys for s in stats)
    return deal(rewrite, rows, FINE_BUCKETS)


__all__ = [
    "MIN_SPLIT_TASK_BYTES",
    "RANGES_MIN_BYTES",
    "CutGroup",
    "RangePlan",
    "RangeSpec",
    "RangeStats",
    "cut_into_ranges",
    "deal",
    "deal_buckets",
    "key_universe",
    "pack",
    "partition_bytes",
    "rewrite_seconds",
    "task_count",
]
