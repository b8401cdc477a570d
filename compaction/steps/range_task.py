"""One task of the ranges stage: partitions cut into ranges, scanned, merged and rewritten by
tasks that run at the same time and meet through the exchange (compaction/runtime/exchange.py).

The plan (`RangePlan.cut`) lays every segment of the ranged partitions, in log order, into as many
contiguous shares of equal bytes as the stage has tasks; a range is the part of one output group
that falls into one share, so a group is one range or is cut between two tasks. Each group is
rewritten by the task that holds most of its bytes (on a tie the later task: the newer range keeps
more of its records). Each task goes through three phases:

1. **scan** its ranges (compaction/steps/ranges.py `scan_range`): it keeps each range's key ids and
   latest offsets (and, within the cache budget, the scans themselves) and writes the blocks the
   others need into `scan-<range>`: SUMMARY per fine bucket, EPOCHS, PRODUCERS. Posts each
   range's error, if any, whether it holds transactional batches, and its bytes, records and keys.
2. **merge** the fine buckets dealt to it over every range of every sound partition
   (`merge_bucket`), into `found-<task>`: the ids each range must raise to a later range's
   offset. The buckets go to the tasks with the least rewrite ahead of them, estimated from the
   ranges' counts (compaction/steps/deal.py). A range of a unit of several ranges (a
   transactional partition) that another task rewrites is handed over as `ids-<range>`. Then,
   without waiting for the others' merge, the task rewrites the units that need nothing from it:
   groups of one range that is the last of its partition (no later range holds a key of it).
3. **rewrite** its other ranges (or units), once every merge is done, with their held ids, their
   latest offsets and the FOUND entries of every merge task, after checking the partition's
   leader epochs and deriving its producer state from every range's PRODUCERS, exactly as a
   whole-partition task does. A group of a partition without transactions that is cut between
   tasks is rewritten by its rewriter from the range it holds; each other range is cleaned by
   the task that holds it, into `part-<range>.log` (first, before the task's own groups, so no
   task waits on one that waits on it), and copied into the group's `.cleaned` file by the
   rewriter, before or after its own range's records: no segment is read twice, and the range
   that keeps most is not copied.

A damaged range fails its partition in every task that owns a part of it; the other partitions
go on. The rows it returns are those of a whole-partition task (`spark_stages.FUSED_FIELDS`), plus
one row of timings (`group_id` -1).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from compaction.errors import PARTITION_ERRORS, CompactionError, error_text
from compaction.format import batch as fb
from compaction.policy.log_structure import epochs_from_columns
from compaction.runtime.exchange import Exchange, PeerGone
from compaction.settings import PART_CHUNK_BYTES
from compaction.steps import deal, ranges
from compaction.steps.group import GroupSpec
from compaction.steps.rewrite import rewrite_part, rewrite_unit
from compaction.steps.scan import ScanCache, check_partition_epochs
from compaction.steps.validate import checked_alongside
from compaction.steps.writer import Discard, LogWriter, Output

# A part is appended to its group's `.cleaned` file this many bytes at a time (whole batches);
# `configure` sets it from the worker's settings.
_part_chunk_bytes = PART_CHUNK_BYTES

STATS_ROW = -1  # group_id of a task's timings row


@dataclasses.dataclass(frozen=True)
class RangePlan:
    """Who does what. `ranges` {range id: (spec of its segments, under its group's id; partition
    number; validate: the partition's index checks run with it)}; `groups` {group id: (its spec,
    its range ids in log order)}; `parts` {partition number: its group ids in log order};
    `tasks` [the range ids each task scans]; `rewriter` {group id: the task that rewrites it}."""

    ranges: dict[int, tuple[GroupSpec, int, bool]]
    groups: dict[int, tuple[GroupSpec, list[int]]]
    parts: dict[int, list[int]]
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
        ranges, groups, tasks = {}, {}, [[] for _ in range(n_tasks)]
        held: dict[int, dict[int, int]] = {}  # group id -> {task: bytes}
        at, last = 0, None
        for n, spec, seg in segs:
            t = min(n_tasks - 1, int((at + seg.size / 2) * n_tasks / total)) if total else 0
            at += seg.size
            if last is None or last[:2] != (spec.group_id, t):
                rid = len(ranges)
                first_of_part = spec.group_id == partitions[n][0].group_id and not groups.get(spec.group_id)
                ranges[rid] = (dataclasses.replace(spec, segments=(), tail_segments=()), n, first_of_part)
                groups.setdefault(spec.group_id, (spec, []))[1].append(rid)
                tasks[t].append(rid)
                last = (spec.group_id, t, rid)
            rid = last[2]
            scan = ranges[rid][0]
            tail = spec.tail_segments if seg is spec.segments[-1] else ()
            ranges[rid] = (
                dataclasses.replace(scan, segments=(*scan.segments, seg), tail_segments=tail),
                *ranges[rid][1:],
            )
            held.setdefault(spec.group_id, {})[t] = held.get(spec.group_id, {}).get(t, 0) + seg.size
        # A tie goes to the later task: its range is the newer, which keeps more of its records.
        rewriter = {g: max(by_task, key=lambda t: (by_task[t], t)) for g, by_task in held.items()}
        parts = {n: [s.group_id for s in specs if s.group_id in groups] for n, specs in enumerate(partitions)}
        # A task may hold no segment (one far bigger than the others' shares): it still takes its
        # part in the merge, and the task numbers the rewriters refer to stay as they are.
        return cls(ranges, groups, parts, tasks, rewriter)


@dataclasses.dataclass(frozen=True)
class Work:
    """Who does what once every range is scanned, the same in every task and on the driver (a
    function of the plan and of the ranges' scan statuses): `dead` {partition: the error of a
    damaged range}; `units` {first group id: its groups} of the sound partitions (a partition with
    transactions is one unit); `split` the cut groups rewritten from parts; `task_of` {group id:
    the task that rewrites it}; `holder` {range id: the task that scanned it}; `buckets` each
    task's merge buckets; `early` the units that need nothing from the merge."""

    dead: dict[int, str]
    units: dict[int, list[int]]
    split: frozenset[int]
    task_of: dict[int, int]
    holder: dict[int, int]
    buckets: list[list[int]]
    early: frozenset[int]

    @classmethod
    def of(cls, plan: RangePlan, posted: list[dict]) -> Work:
        scans = {int(r): s for status in posted for r, s in status.items()}
        dead, units, split = {}, {}, set()
        for p, gids in plan.parts.items():
            rids = _ranges_of(gids, plan)
            errors = [scans[r]["error"] for r in rids if scans[r]["error"]]
            if errors:
                dead[p] = errors[0]
            elif any(scans[r]["txn"] for r in rids):
                units[gids[0]] = gids
            else:
                units.update({g: [g] for g in gids})
                split.update(
                    g for g in gids if len(plan.groups[g][1]) > 1 and plan.groups[g][0].erase is None
                )
        holder = {r: k for k, rids in enumerate(plan.tasks) for r in rids}
        # a cut group is its own unit
        task_of = {g: plan.rewriter[first] for first, gids in units.items() for g in gids}
        buckets = _deal(plan, scans, dead, units, task_of, holder)
        early = frozenset(g for g, unit in units.items() if _needs_no_merge(unit, plan))
        return cls(dead, units, frozenset(split), task_of, holder, buckets, early)

    def rewrites(self, t: int, plan: RangePlan, early: bool) -> dict[int, list[list[int]]]:
        """{partition: its units} that task `t` rewrites, those that need no merge or the others."""
        out: dict[int, list[list[int]]] = {}
        for p, gids in plan.parts.items():
            mine = [
                self.units[g]
                for g in gids
                if g in self.units and self.task_of[g] == t and (g in self.early) == early
            ]
            if mine:
                out[p] = mine
        return out

    def parts_of(self, t: int, plan: RangePlan) -> list[int]:
        """The ranges task `t` cleans as parts of cut groups another task rewrites."""
        return [
            r
            for r in plan.tasks[t]
            if plan.ranges[r][0].group_id in self.split and self.task_of[plan.ranges[r][0].group_id] != t
        ]


def run_task(t: int, plan: RangePlan, ex: Exchange, reuse_bytes: int) -> list[dict]:
    """Task `t` of the stage: its rows (see the module docstring). A task whose peer is gone
    (`PeerGone`) stops at that wait and returns what it did: `finish` completes the rest."""
    started, cpu = time.monotonic(), time.process_time()
    cache = ScanCache(reuse_bytes) if reuse_bytes > 0 else None
    rows: list[dict] = []
    marks = {"started": started}
    held: dict[int, ranges.Held] = {}
    try:
        with ex.heartbeat(t):
            try:
                _run(t, plan, ex, cache, held, rows, marks)
            except PeerGone:
                _leave(ex, held)  # the ranges it still holds, for whichever follow-up rewrites them
                raise
    except PeerGone:
        pass
    ended = time.monotonic()
    scanned = marks.get("scanned", ended)
    # The merge, and the wait for the others' merges: what a whole-partition task spends on its map.
    map_seconds = (marks.get("posted", scanned) - scanned) + (
        marks.get("merged", ended) - marks.get("rewritten", ended)
    )
    rows.append(
        {
            "group_id": STATS_ROW,
            "scan_seconds": scanned - started,
            "map_seconds": map_seconds,
            "cpu_seconds": time.process_time() - cpu,
        }
    )
    return rows


def _run(t: int, plan: RangePlan, ex: Exchange, cache, held: dict, rows: list[dict], marks: dict) -> None:
    n_tasks = len(plan.tasks)
    status = {str(r): _scan(r, plan, ex, cache, held) for r in plan.tasks[t]}
    ex.post("scan", t, status)
    work = Work.of(plan, ex.gather("scan", n_tasks))
    marks["scanned"] = time.monotonic()
    if not ex.posted("merge", t):  # a retried task finds its merge done by the attempt before
        error = _hand_over(t, plan, ex, held, work) or _merge(t, plan, ex, work.dead, work.buckets[t])
        ex.post("merge", t, {"error": error})
    marks["posted"] = time.monotonic()
    # The units whose rewrite needs nothing from the merge go first, without waiting for it.
    for p, units in work.rewrites(t, plan, early=True).items():  # a damaged partition has no units
        rows += _rewrite(p, units, plan, ex, held, cache, work)
    marks["rewritten"] = time.monotonic()
    merge_errors = [s["error"] for s in ex.gather("merge", n_tasks) if s["error"]]
    marks["merged"] = time.monotonic()
    for r in work.parts_of(t, plan):
        _write_part(t, r, plan, ex, held, cache, merge_errors)
    for p, units in work.rewrites(t, plan, early=False).items():
        rows += _rewrite_after_merge(p, units, plan, ex, held, cache, work, merge_errors)


def _rewrite_after_merge(
    p: int,
    units: list[list[int]],
    plan: RangePlan,
    ex: Exchange,
    held: dict,
    cache,
    work: Work,
    merge_errors: list[str],
) -> list[dict]:
    if merge_errors:
        return [{"group_id": g, "error": merge_errors[0]} for unit in units for g in unit]
    return _rewrite(p, units, plan, ex, held, cache, work)


# --- what the stage's tasks left undone ------------------------------------------------------

MERGE, PART, REWRITE = "merge", "part", "rewrite"


def finish(plan: RangePlan, ex: Exchange, rows: list[dict], run) -> list[dict]:
    """The stage completed: every unit rewritten, or its error reported. `rows` are the stage's;
    what its tasks left undone (a task that stopped early: its peer was lost, or never started)
    runs through `run(kind, items)` (rows of `resume(kind, item)` for each item, one Spark task
    each on the driver), kind by kind, each finding all it reads already in the exchange. The
    rows of the damaged partitions come from here. Returns every row."""
    ex = ex.no_wait()
    work = Work.of(plan, ex.gather("scan", len(plan.tasks)))
    rows = list(rows)
    done = {r["group_id"] for r in rows}
    todo = {g: unit for g, unit in work.units.items() if not done.issuperset(unit)}
    if any(g not in work.early for g in todo):
        rows += run(MERGE, [k for k in range(len(plan.tasks)) if not ex.posted("merge", k)])
        failed = any(s["error"] for s in ex.gather("merge", len(plan.tasks)))
        parts = (
            []
            if failed
            else [
                r
                for g in todo
                if g in work.split
                for r in plan.groups[g][1]
                if r != _own_range(g, plan, work.holder) and not ex.posted(f"part-{r}", work.holder[r])
            ]
        )
        rows += run(PART, parts)
    by_task: dict[tuple[int, int], list[int]] = {}  # (rewriter, partition) -> first group ids of its units
    for g in sorted(todo):
        by_task.setdefault((work.task_of[g], plan.ranges[plan.groups[g][1][0]][1]), []).append(g)
    rows += run(REWRITE, [(t, p, gids) for (t, p), gids in sorted(by_task.items())])
    for p, gids in plan.parts.items():
        if p in work.dead:
            rows += [{"group_id": g, "error": work.dead[p]} for g in gids if g not in done]
    return rows


def resume(kind: str, item, plan: RangePlan, ex: Exchange, reuse_bytes: int) -> list[dict]:
    """One piece of what the stage's tasks left undone (`finish`), with nothing held from their
    scans: the ranges' ids come from the exchange, their segments are read and walked again."""
    ex = ex.no_wait()
    work = Work.of(plan, ex.gather("scan", len(plan.tasks)))
    cache = ScanCache(reuse_bytes) if reuse_bytes > 0 else None
    if kind == MERGE:
        ex.post("merge", item, {"error": _merge(item, plan, ex, work.dead, work.buckets[item])})
        return []
    t, p, gids = item if kind == REWRITE else (work.holder[item], None, [])
    later = [work.units[g] for g in gids if g not in work.early]
    # Every merge is posted before a part or a unit that needs one is resumed (`finish`).
    merge_errors = (
        [s["error"] for s in ex.gather("merge", len(plan.tasks)) if s["error"]]
        if kind == PART or later
        else []
    )
    if kind == PART:
        _write_part(t, item, plan, ex, {}, cache, merge_errors)
        return []
    rows = _rewrite(p, [work.units[g] for g in gids if g in work.early], plan, ex, {}, cache, work)
    return rows + (_rewrite_after_merge(p, later, plan, ex, {}, cache, work, merge_errors) if later else [])


def _scan(rid: int, plan: RangePlan, ex: Exchange, cache, held: dict) -> dict:
    spec, part, validate = plan.ranges[rid]
    try:
        scan = lambda: ranges.scan_range(rid, spec, part, cache)  # noqa: E731
        # the index checks the driver leaves to the task that reads the partition anyway
        held[rid], blocks = checked_alongside(spec.storage, spec.part_path, scan) if validate else scan()
        ex.write_blocks(f"scan-{rid}", blocks)
    except PARTITION_ERRORS as exc:
        held.pop(rid, None)
        return {"error": error_text(exc), "txn": False}
    stats = [
        sum(seg.size for seg in spec.segments),
        sum(len(ids) for ids in held[rid].ids),
        len(held[rid].latest),
    ]
    return {
        "error": None,
        "txn": any(_transactional(b) for b in blocks if b.kind == ranges.PRODUCERS),
        "stats": stats,
    }


def _transactional(block: ranges.Block) -> bool:
    attrs = ranges.from_block(block.data).column("attributes").to_numpy()
    return bool(np.any(attrs & (fb.TRANSACTIONAL_MASK | fb.CONTROL_MASK)))


def _hand_over(t: int, plan: RangePlan, ex: Exchange, held: dict, work: Work) -> str | None:
    """Write the ids of the ranges this task holds whose group another task rewrites from them
    (a part of a cut group is cleaned here instead: `_write_part`)."""
    try:
        for r in plan.tasks[t]:
            g = plan.ranges[r][0].group_id
            if r in held and work.task_of.get(g, t) != t and g not in work.split:
                _leave(ex, {r: held[r]})
    except PARTITION_ERRORS as exc:
        return error_text(exc)
    return None


def _leave(ex: Exchange, held: dict) -> None:
    """The ids of ranges `held` here, written for a task in another process to rewrite them from
    (`ids-<range>`, unless an attempt before wrote it: the same bytes)."""
    for r, h in held.items():
        if not ex.storage.exists(ex.path(f"ids-{r}")):
            ex.write_blocks(f"ids-{r}", ranges.held_blocks(r, h))


def _merge(t: int, plan: RangePlan, ex: Exchange, dead: dict, buckets: list[int]) -> str | None:
    """The fine `buckets` dealt to this task (`_deal`) of every range of the sound partitions cut
    into more than one range, one bucket at a time (what a merge holds is a fine bucket's share of
    the keys), into `found-<t>`. A partition of one range has nothing to merge."""
    try:
        live = []
        for p, gids in plan.parts.items():
            rids = _ranges_of(gids, plan)
            if p not in dead and len(rids) > 1:
                live += rids
        index = {r: ex.read_index(f"scan-{r}") for r in live}
        found = []
        for bucket in buckets:
            rows = [
                (b.range_id, b.data)
                for r in live
                for b in ex.read_blocks(f"scan-{r}", _summary_of(bucket), index[r])
            ]
            found.extend(ranges.merge_bucket(rows))
        ex.write_blocks(f"found-{t}", found)
    except PARTITION_ERRORS as exc:
        return error_text(exc)
    return None


def _deal(
    plan: RangePlan, scans: dict, dead: dict, units: dict, task_of: dict, holder: dict
) -> list[list[int]]:
    """Each task's merge buckets (compaction/steps/deal.py), the same in every task: from the
    ranges' counts, each range's rewrite estimated for the task that will rewrite it."""
    rewrite, rows = [0.0] * len(plan.tasks), 0
    for p, gids in plan.parts.items():
        if p in dead:
            continue
        rids = _ranges_of(gids, plan)
        stats = [deal.RangeStats(*scans[r]["stats"]) for r in rids]
        whole = len(units.get(gids[0], ())) > 1  # a partition with transactions: one unit, one task
        for r, seconds in zip(rids, deal.rewrite_seconds(stats)):
            rewrite[task_of[gids[0]] if whole else holder[r]] += seconds
        if len(rids) > 1:
            rows += sum(s.keys for s in stats)
    return deal.deal(rewrite, rows, ranges.FINE_BUCKETS)


def _ranges_of(gids: list[int], plan: RangePlan) -> list[int]:
    """The ranges of groups `gids` (a partition's, in log order), in log order."""
    return [r for g in gids for r in plan.groups[g][1]]


def _needs_no_merge(unit: list[int], plan: RangePlan) -> bool:
    """Whether the unit's rewrite reads nothing the merge writes: each of its groups one range
    (not cut, so no part of another task to wait for), the last of its partition (no later range
    holds a key of it, so no FOUND entry is for it)."""
    return all(len(plan.groups[g][1]) == 1 and _is_last(plan.groups[g][1][0], plan) for g in unit)


def _is_last(r: int, plan: RangePlan) -> bool:
    part = plan.ranges[r][1]
    return plan.groups[plan.parts[part][-1]][1][-1] == r


def _summary_of(bucket: int):
    return lambda ix: (ix["kind"] == ranges.SUMMARY) & (ix["bucket"] == bucket)


def _of_kind(*kinds: int):
    return lambda ix: np.isin(ix["kind"], kinds)


def _partition_state(part: int, plan: RangePlan, ex: Exchange) -> ranges.ProducerState:
    """The partition's producer state from every range's blocks, once its leader epochs check."""
    specs = [plan.groups[g][0] for g in plan.parts[part]]
    side = [
        b
        for g in plan.parts[part]
        for r in plan.groups[g][1]
        for b in ex.read_blocks(f"scan-{r}", _of_kind(ranges.PRODUCERS, ranges.EPOCHS))
    ]
    _check_epochs(specs, [b for b in side if b.kind == ranges.EPOCHS])
    return ranges.producer_state([ranges.from_block(b.data) for b in side if b.kind == ranges.PRODUCERS])


def _rewrite(
    part: int, units: list[list[int]], plan: RangePlan, ex: Exchange, held: dict, cache, work: Work
) -> list[dict]:
    """Rewrite the units (groups, log order) of partition `part` this task rewrites, after its
    leader epochs are checked and its producer state derived, once, from every range's blocks.
    `work.split`: the cut groups whose other ranges come as parts, from the task `work.holder[range]`."""
    if not units:
        return []
    try:
        state = _partition_state(part, plan, ex)
    except PARTITION_ERRORS as exc:
        return [{"group_id": g, "error": error_text(exc)} for unit in units for g in unit]
    if (
        state.first_unstable is not None
        and state.first_unstable < plan.groups[plan.parts[part][0]][0].upper_bound
    ):
        return [{"group_id": g, "first_unstable": state.first_unstable} for unit in units for g in unit]
    return [
        row
        for unit in units
        for row in _rewrite_unit(unit, state, plan, ex, held, cache, work.split, work.holder)
    ]


def _rewrite_unit(
    unit: list[int],
    state,
    plan: RangePlan,
    ex: Exchange,
    held: dict,
    cache,
    split: set,
    holder: dict[int, int],
) -> list[dict]:
    """Rewrite the groups `unit` from their ranges: held here, handed over as their ids, or
    (the other ranges of a cut group) cleaned by their holders as parts."""
    own = {g: _own_range(g, plan, holder) for g in unit if g in split}
    rids = [r for g in unit for r in ([own[g]] if g in split else plan.groups[g][1])]
    mine = {r: held[r] for r in rids if r in held}  # `_shipped` takes them from `held`
    try:
        shipped = _shipped(rids, plan, ex, held)
        unit_specs = [dataclasses.replace(plan.groups[g][0], last_records=state.last_records) for g in unit]
        return rewrite_unit(unit_specs, shipped, cache, {g: _parts(g, own[g], plan, holder, ex) for g in own})
    except PeerGone:  # waiting for a part: the unit is left to a follow-up, from these ids
        _leave(ex, mine)
        raise
    except PARTITION_ERRORS as exc:
        return [{"group_id": g, "error": error_text(exc)} for g in unit]


def _shipped(rids: list[int], plan: RangePlan, ex: Exchange, held: dict) -> ranges.ShippedMap:
    """The offset map of ranges `rids`: their ids (held here, or handed over), FOUND applied."""
    shipped = ranges.ShippedMap()
    for r in rids:
        scan_spec = plan.ranges[r][0]
        if r in held:
            shipped.hold(r, scan_spec, held.pop(r))
        else:
            shipped.add_blocks(r, scan_spec, list(ex.read_blocks(f"ids-{r}")))
    merged = [r for r in rids if not _is_last(r, plan)]  # the merge finds nothing for the others
    for k in range(len(plan.tasks)) if merged else ():
        for b in ex.read_blocks(f"found-{k}", lambda ix: np.isin(ix["range_id"], merged)):
            shipped.apply_found(b.range_id, b)
    return shipped


# --- parts of cut groups ---------------------------------------------------------------------

_PART_STATS = ("bytes_read", "records_read", "batches_read", "invalid_records")
_PART_COLUMNS = ("position", "size", "last_offset", "max_timestamp")


def _write_part(t: int, r: int, plan: RangePlan, ex: Exchange, held: dict, cache, merge_errors: list) -> None:
    """Clean range `r` (held here) into `part-<r>.log` for the task that rewrites its group, and
    post its status: the stats, or the error. Nothing is cleaned when the group will not be
    rewritten (a merge failed): its rewriter never waits for the part."""
    spec, part, _ = plan.ranges[r]
    if ex.posted(f"part-{r}", t):  # by the attempt before a retry: its reader may be reading it
        return
    status: dict = {"error": merge_errors[0] if merge_errors else None}
    try:
        if merge_errors:  # its rewriter reports the merge's error and waits for no part
            return
        state = _partition_state(part, plan, ex)
        shipped = _shipped([r], plan, ex, held)
        path = ex.path(f"part-{r}.log")
        writer = Discard(path) if spec.dry_run else LogWriter(ex.storage, path, spec.write_mode)
        out, stats = rewrite_part(
            dataclasses.replace(spec, last_records=state.last_records), shipped, writer, cache
        )
        cols = dict(zip(_PART_COLUMNS, out.columns()))
        ex.write_blocks(
            f"part-{r}",
            (
                ranges.Block(
                    r,
                    ranges.PART,
                    -1,
                    at,
                    ranges.to_block(**{n: c[at : at + ranges.BLOCK_ROWS] for n, c in cols.items()}),
                )
                for at in range(0, len(cols["size"]), ranges.BLOCK_ROWS)
            ),
        )
        status.update({n: getattr(stats, n) for n in _PART_STATS}, records=out.records)
    except PARTITION_ERRORS as exc:
        status["error"] = error_text(exc)
    finally:
        ex.post(f"part-{r}", t, status)


def _own_range(g: int, plan: RangePlan, holder: dict[int, int]) -> int:
    """The range of cut group `g` its rewriter holds (a task holds at most one range of a group:
    both are contiguous)."""
    return next(r for r in plan.groups[g][1] if holder[r] == plan.rewriter[g])


def _parts(g: int, own: int, plan: RangePlan, holder: dict[int, int], ex: Exchange):
    """`rewrite_unit`'s `parts` entry of cut group `g` rewritten from its range `own`: where that
    range's segments lie in the group, and the parts of the ranges before and after it."""
    rids = plan.groups[g][1]
    at = rids.index(own)
    lo = sum(len(plan.ranges[r][0].segments) for r in rids[:at])
    return (
        lo,
        lo + len(plan.ranges[own][0].segments),
        _appender(rids[:at], holder, ex),
        _appender(rids[at + 1 :], holder, ex),
    )


def _appender(rids: list[int], holder: dict[int, int], ex: Exchange):
    """`append(out, stats)` for `rewrite_unit`: the parts of ranges `rids`, in log order, added to
    the group's output as their holders post them."""

    def append(out: Output, stats) -> None:
        for r in rids:
            status = ex.status(f"part-{r}", holder[r])
            if status["error"]:
                raise CompactionError(status["error"])
            for n in _PART_STATS:
                setattr(stats, n, getattr(stats, n) + status[n])
            blocks = [ranges.from_block(b.data) for b in ex.read_blocks(f"part-{r}")]
            if blocks:
                cols = [
                    np.concatenate([ranges.column(b, n, np.int64) for b in blocks]) for n in _PART_COLUMNS
                ]
                _append_part(out, ex, ex.path(f"part-{r}.log"), *cols, status["records"])

    return append


def configure(part_chunk_bytes: int) -> None:
    """This worker's `WorkerSettings.part_chunk_bytes`."""
    global _part_chunk_bytes
    _part_chunk_bytes = part_chunk_bytes


def _append_part(
    out: Output, ex: Exchange, path: str, position, size, last_offset, max_timestamp, records: int
) -> None:
    """The part's bytes added to `out` whole batches at a time, at most `_part_chunk_bytes` each
    (a dry run's part has no bytes: its sizes are counted)."""
    ends = position + size
    dry = isinstance(out.writer, Discard)
    f = None if dry else ex.storage.open_input(path)
    try:
        i = 0
        while i < len(size):
            j = max(i + 1, int(np.searchsorted(ends, position[i] + _part_chunk_bytes, side="right")))
            chunk = b"" if dry else memoryview(f.read_at(int(ends[j - 1] - position[i]), int(position[i])))
            out.append_columns(
                chunk, size[i:j], last_offset[i:j], max_timestamp[i:j], records if i == 0 else 0
            )
            i = j
    finally:
        if f is not None:
            f.close()


def _check_epochs(specs: list[GroupSpec], blocks: list[ranges.Block]) -> None:
    """Leader epochs across the partition's ranges, as a whole-partition task checks them."""
    path_of = specs[0].segment_path
    runs = []
    for b in blocks:  # log order
        batch = ranges.from_block(b.data)
        runs.extend(epochs_from_columns({n: batch.column(n).to_numpy() for n in batch.schema.names}, path_of))
    check_partition_epochs(specs, runs)


__all__ = ["MERGE", "PART", "REWRITE", "STATS_ROW", "RangePlan", "Work", "finish", "resume", "run_task"]
