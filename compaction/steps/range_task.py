"""One task of the ranges stage: partitions cut into ranges, scanned, merged and rewritten by
tasks that run at the same time and meet through the exchange (compaction/runtime/exchange.py).

The plan (compaction/steps/schedule.py `RangePlan.cut`) lays every segment of the ranged
partitions, in log order, into as many contiguous shares of equal bytes as the stage has tasks; a
range is the stretch of one output group that falls into one share, so a group is one range or
is cut between two tasks. Each group is rewritten by the task that holds most of its bytes (on a
tie the later task: the newer range keeps more of its records). Each task goes through three phases:

1. **scan** its ranges, those of one partition together (compaction/steps/ranges.py
   `scan_ranges`): it keeps each range's key ids and latest offsets (and, within the cache
   budget, the scans themselves) and writes the blocks the others need into `scan-<range>`:
   SUMMARY per fine bucket, EPOCHS, PRODUCERS. Posts each range's error, if any, whether it
   holds transactional batches, and its bytes, records and keys.
2. **merge** the fine buckets dealt to it over every range of every sound partition
   (`merge_bucket`), into `found-<task>`: the ids each range must raise to a later range's
   offset. The buckets go to the tasks with the least rewrite ahead of them, estimated from the
   ranges' counts (`schedule.deal_buckets`). A range of a unit of several ranges (a
   transactional partition) that another task rewrites is handed over as `ids-<range>`. Then,
   without waiting for the others' merge, the task rewrites the units that need nothing from it:
   groups of one range that is the last of its partition (no later range holds a key of it).
3. **rewrite** its other ranges (or units), once every merge is done, with their held ids, their
   latest offsets and the FOUND entries of every merge task, after checking the partition's
   leader epochs and deriving its producer state from every range's PRODUCERS, exactly as a
   whole-partition task does. A group of a partition without transactions that is cut between
   tasks is rewritten by its rewriter from the range it holds; each other range is cleaned by
   the task that holds it, as a piece, into `piece-<range>.log` (first, before the task's own
   groups, so no task waits on one that waits on it), and copied into the group's `.cleaned` file by the
   rewriter, before or after its own range's records: no segment is read twice, and the range
   that keeps most is not copied.

A damaged range fails its partition in every task that owns a part of it; the other partitions
go on. A task returns a `GroupResult` per group it rewrites, as a whole-partition task does
(compaction/steps/pipeline.py, whose steps it takes), and its `TaskTimings`.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from compaction.errors import PARTITION_ERRORS, CompactionError, error_text
from compaction.policy.log_structure import epochs_from_columns
from compaction.runtime import durability
from compaction.runtime.exchange import Exchange, PeerGone
from compaction.settings import PART_CHUNK_BYTES, SCAN_REUSE_CODECS
from compaction.steps import pipeline, ranges
from compaction.steps.group import GroupSpec
from compaction.steps.results import GroupResult, TaskTimings, failed, unstable
from compaction.steps.rewrite import PieceSpec, RewriteStats, rewrite_piece, rewrite_unit
from compaction.steps.scan import ScanCache
from compaction.steps.schedule import RangePlan, deal_buckets
from compaction.steps.writer import Discard, LogWriter, Output

# A piece is appended to its group's `.cleaned` file this many bytes at a time (whole batches);
# `configure` sets it from the worker's settings.
_piece_chunk_bytes = PART_CHUNK_BYTES


@dataclasses.dataclass(frozen=True)
class Work:
    """Who does what once every range is scanned, the same in every task and on the driver (a
    function of the plan and of the ranges' scan statuses): `dead` {partition: the error of a
    damaged range}; `units` {first group id: its groups} of the sound partitions (a partition with
    transactions is one unit); `split` the cut groups rewritten from pieces; `task_of` {group id:
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
        for partition, gids in plan.partitions.items():
            rids = plan.ranges_of(gids)
            errors = [scans[r]["error"] for r in rids if scans[r]["error"]]
            if errors:
                dead[partition] = errors[0]
            elif any(scans[r]["txn"] for r in rids):
                units[gids[0]] = gids
            else:
                units.update({g: [g] for g in gids})
                split.update(
                    g for g in gids if len(plan.groups[g].ranges) > 1 and plan.groups[g].spec.erase is None
                )
        holder = plan.holder
        # a cut group is its own unit
        task_of = {g: plan.rewriter[first] for first, gids in units.items() for g in gids}
        buckets = deal_buckets(plan, scans, dead, units, task_of, holder)
        early = frozenset(g for g, unit in units.items() if _needs_no_merge(unit, plan))
        return cls(dead, units, frozenset(split), task_of, holder, buckets, early)

    def rewrites(self, t: int, plan: RangePlan, early: bool) -> dict[int, list[list[int]]]:
        """{partition: its units} that task `t` rewrites, those that need no merge or the others."""
        out: dict[int, list[list[int]]] = {}
        for partition, gids in plan.partitions.items():
            mine = [
                self.units[g]
                for g in gids
                if g in self.units and self.task_of[g] == t and (g in self.early) == early
            ]
            if mine:
                out[partition] = mine
        return out

    def pieces_of(self, t: int, plan: RangePlan) -> list[int]:
        """The ranges task `t` cleans as pieces of cut groups another task rewrites."""
        return [
            r
            for r in plan.tasks[t]
            if plan.ranges[r].scan.group_id in self.split and self.task_of[plan.ranges[r].scan.group_id] != t
        ]


@dataclasses.dataclass
class _Task:
    """What a task works with: the plan, the exchange, its scan cache, and the ranges it holds
    from its own scans (`held`: none in a follow-up, which reads them from the exchange)."""

    plan: RangePlan
    ex: Exchange
    cache: ScanCache | None
    held: dict[int, ranges.Held] = dataclasses.field(default_factory=dict)


def run_task(
    t: int, plan: RangePlan, ex: Exchange, reuse_bytes: int, codecs: frozenset[str] = SCAN_REUSE_CODECS
) -> list[GroupResult | TaskTimings]:
    """Task `t` of the stage: a result per group it rewrote, then its timings (see the module
    docstring). A task whose peer is gone (`PeerGone`) stops at that wait and returns what it
    did: `finish` completes the rest."""
    clock = pipeline.TaskClock()
    task = _Task(plan, ex, pipeline.scan_cache(reuse_bytes, codecs))
    results: list[GroupResult] = []
    marks: dict[str, float] = {}
    try:
        with ex.heartbeat(t):
            try:
                _run(t, task, results, marks)
            except PeerGone:
                _leave(ex, task.held)  # the ranges it still holds, for whichever follow-up rewrites them
                raise
    except PeerGone:
        pass
    return [*results, _timings(clock, marks)]


def _timings(clock: pipeline.TaskClock, marks: dict[str, float]) -> TaskTimings:
    """The task's timings from the times its phases ended (`_run`; a phase not reached ends now)."""
    ended = time.monotonic()
    scanned = marks.get("scanned", ended)
    # The merge, and the wait for the others' merges: what a whole-partition task spends on its map.
    map_seconds = (marks.get("posted", scanned) - scanned) + (
        marks.get("merged", ended) - marks.get("rewritten", ended)
    )
    return clock.timings(scanned - clock.started, map_seconds)


def _run(t: int, task: _Task, results: list[GroupResult], marks: dict[str, float]) -> None:
    """The task's phases, in order, `results` and `marks` filled as they end."""
    plan = task.plan
    work = _scan_phase(t, task)
    marks["scanned"] = time.monotonic()
    _merge_phase(t, task, work)
    marks["posted"] = time.monotonic()
    early = work.rewrites(t, plan, early=True)  # a damaged partition has no units
    pieces, later = work.pieces_of(t, plan), work.rewrites(t, plan, early=False)
    # The units whose rewrite needs nothing from the merge go first, without waiting for it,
    # unless the task cleans pieces: a piece is cleaned once every merge is known to have
    # succeeded, and its group's rewriter waits for it.
    before, after = ({}, early) if pieces else (early, {})
    for partition, units in before.items():
        results += _rewrite(partition, units, task, work)
    marks["rewritten"] = time.monotonic()
    # A task with nothing left that reads the merge (a partition's last task, mostly) ends here.
    merge_errors = _merge_errors(task) if pieces or later else []
    marks["merged"] = time.monotonic()
    for r in pieces:
        _write_piece(t, r, task, merge_errors)
    for partition, units in after.items():
        results += _rewrite(partition, units, task, work)
    for partition, units in later.items():
        results += _rewrite_after_merge(partition, units, task, work, merge_errors)


def _scan_phase(t: int, task: _Task) -> Work:
    """Scan the task's ranges, post their statuses, and wait for every task's."""
    status = {
        r: s
        for run in _runs_of_partitions(task.plan.tasks[t], task.plan)
        for r, s in _scan(run, task).items()
    }
    task.ex.post("scan", t, status)
    return Work.of(task.plan, task.ex.gather("scan", len(task.plan.tasks)))


def _merge_phase(t: int, task: _Task, work: Work) -> None:
    """Hand over the ranges others rewrite, merge the task's buckets, post the error if any."""
    if task.ex.posted("merge", t):  # a retried task finds its merge done by the attempt before
        return
    error = _hand_over(t, task, work) or _merge(t, task, work.dead, work.buckets[t])
    task.ex.post("merge", t, {"error": error})


def _merge_errors(task: _Task) -> list[str]:
    """The errors of every task's merge, once all are posted."""
    return [s["error"] for s in task.ex.gather("merge", len(task.plan.tasks)) if s["error"]]


def _rewrite_after_merge(
    partition: int, units: list[list[int]], task: _Task, work: Work, merge_errors: list[str]
) -> list[GroupResult]:
    if merge_errors:
        return failed((g for unit in units for g in unit), merge_errors[0])
    return _rewrite(partition, units, task, work)


# --- what the stage's tasks left undone ------------------------------------------------------

MERGE, PIECE, REWRITE = "merge", "piece", "rewrite"


def finish(plan: RangePlan, ex: Exchange, rows: list[dict], run) -> list[dict]:
    """The stage completed: every unit rewritten, or its error reported. `rows` are the stage's
    (Spark rows, compaction/steps/results.py); what its tasks left undone (a task that stopped
    early: its peer was lost, or never started) runs through `run(kind, items)` (rows of
    `resume(kind, item)` for each item, one Spark task each on the driver), kind by kind, each
    finding all it reads already in the exchange. The rows of the damaged partitions come from
    here. Returns every row."""
    ex = ex.no_wait()
    work = Work.of(plan, ex.gather("scan", len(plan.tasks)))
    rows = list(rows)
    done = {r["group_id"] for r in rows}
    todo = {g: unit for g, unit in work.units.items() if not done.issuperset(unit)}
    if any(g not in work.early for g in todo):
        rows += run(MERGE, [k for k in range(len(plan.tasks)) if not ex.posted("merge", k)])
        merge_failed = any(s["error"] for s in ex.gather("merge", len(plan.tasks)))
        pieces = (
            []
            if merge_failed
            else [
                r
                for g in todo
                if g in work.split
                for r in plan.groups[g].ranges
                if r != _own_range(g, plan, work.holder) and not ex.posted(f"piece-{r}", work.holder[r])
            ]
        )
        rows += run(PIECE, pieces)
    by_task: dict[tuple[int, int], list[int]] = {}  # (rewriter, partition) -> first group ids of its units
    for g in sorted(todo):
        by_task.setdefault((work.task_of[g], plan.partition_of(g)), []).append(g)
    rows += run(REWRITE, [(t, partition, gids) for (t, partition), gids in sorted(by_task.items())])
    for partition, gids in plan.partitions.items():
        if partition in work.dead:
            rows += [r.row() for r in failed((g for g in gids if g not in done), work.dead[partition])]
    return rows


def resume(
    kind: str,
    item,
    plan: RangePlan,
    ex: Exchange,
    reuse_bytes: int,
    codecs: frozenset[str] = SCAN_REUSE_CODECS,
) -> list[GroupResult]:
    """One piece of work the stage's tasks left undone (`finish`), with nothing held from their
    scans: the ranges' ids come from the exchange, their segments are read and walked again."""
    task = _Task(plan, ex.no_wait(), pipeline.scan_cache(reuse_bytes, codecs))
    work = Work.of(plan, task.ex.gather("scan", len(plan.tasks)))
    if kind == MERGE:
        task.ex.post("merge", item, {"error": _merge(item, task, work.dead, work.buckets[item])})
        return []
    t, partition, gids = item if kind == REWRITE else (work.holder[item], None, [])
    later = [work.units[g] for g in gids if g not in work.early]
    # Every merge is posted before a piece or a unit that needs one is resumed (`finish`).
    merge_errors = _merge_errors(task) if kind == PIECE or later else []
    if kind == PIECE:
        _write_piece(t, item, task, merge_errors)
        return []
    results = _rewrite(partition, [work.units[g] for g in gids if g in work.early], task, work)
    return results + (_rewrite_after_merge(partition, later, task, work, merge_errors) if later else [])


# --- scan, hand-over, merge --------------------------------------------------------------------


def _scan(rids: list[int], task: _Task) -> dict[str, dict]:
    """Scan the consecutive ranges `rids` of one partition together (`ranges.scan_ranges`) into
    `task.held` and each one's blocks into `scan-<rid>`; {rid: its status}."""
    specs = [task.plan.ranges[r].scan for r in rids]
    partition = task.plan.ranges[rids[0]].partition
    validate = any(task.plan.ranges[r].validate for r in rids)
    held = task.held
    try:
        scan = lambda: ranges.scan_ranges(rids, specs, partition, task.cache)  # noqa: E731
        scanned = pipeline.checked_scan(specs[0], validate, scan)
        for rid, (held[rid], blocks) in zip(rids, scanned, strict=True):
            task.ex.write_blocks(f"scan-{rid}", blocks)
    except PARTITION_ERRORS as exc:
        for rid in rids:
            held.pop(rid, None)
        return {str(rid): {"error": error_text(exc), "txn": False} for rid in rids}
    status = {}
    for rid, spec, (_, blocks) in zip(rids, specs, scanned, strict=True):
        status[str(rid)] = {
            "error": None,
            "txn": any(_transactional(b) for b in blocks if b.kind == ranges.PRODUCERS),
            "stats": [
                sum(seg.size for seg in spec.segments),
                sum(len(ids) for ids in held[rid].ids),
                len(held[rid].latest),
            ],
        }
    return status


def _runs_of_partitions(rids: list[int], plan: RangePlan) -> list[list[int]]:
    """`rids` (log order) cut where the partition changes: the ranges scanned together."""
    runs: list[list[int]] = []
    for r in rids:
        if runs and plan.ranges[runs[-1][-1]].partition == plan.ranges[r].partition:
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


def _transactional(block: ranges.Block) -> bool:
    return ranges.crosses_groups(ranges.from_block(block.data).column("attributes").to_numpy())


def _hand_over(t: int, task: _Task, work: Work) -> str | None:
    """Write the ids of the ranges this task holds whose group another task rewrites from them
    (a piece of a cut group is cleaned here instead: `_write_piece`)."""
    try:
        for r in task.plan.tasks[t]:
            g = task.plan.ranges[r].scan.group_id
            if r in task.held and work.task_of.get(g, t) != t and g not in work.split:
                _leave(task.ex, {r: task.held[r]})
    except PARTITION_ERRORS as exc:
        return error_text(exc)
    return None


def _leave(ex: Exchange, held: dict) -> None:
    """The ids of ranges `held` here, written for a task in another process to rewrite them from
    (`ids-<range>`, unless an attempt before wrote it: the same bytes)."""
    for r, h in held.items():
        if not ex.storage.exists(ex.path(f"ids-{r}")):
            ex.write_blocks(f"ids-{r}", ranges.held_blocks(r, h))


def _merge(t: int, task: _Task, dead: dict, buckets: list[int]) -> str | None:
    """The fine `buckets` dealt to this task (`schedule.deal_buckets`) of every range of the sound
    partitions cut into more than one range, one bucket at a time (what a merge holds is a fine
    bucket's share of the keys), into `found-<t>`. A partition of one range has nothing to merge."""
    plan, ex = task.plan, task.ex
    try:
        live = []
        for partition, gids in plan.partitions.items():
            rids = plan.ranges_of(gids)
            if partition not in dead and len(rids) > 1:
                live += rids
        index = {r: ex.read_index(f"scan-{r}") for r in live}
        found = []
        for bucket in buckets:
            blocks = [
                (b.range_id, b.data)
                for r in live
                for b in ex.read_blocks(f"scan-{r}", _summary_of(bucket), index[r])
            ]
            found.extend(ranges.merge_bucket(blocks))
        ex.write_blocks(f"found-{t}", found)
    except PARTITION_ERRORS as exc:
        return error_text(exc)
    return None


def _needs_no_merge(unit: list[int], plan: RangePlan) -> bool:
    """Whether the unit's rewrite reads nothing the merge writes: each of its groups one range
    (not cut, so no piece of another task to wait for) that no later range of another task
    follows (`RangePlan.merged`: no FOUND entry is ever for it). Every group of a partition's
    last task is such a unit, so that task rewrites them all while the others merge."""
    return all(len(plan.groups[g].ranges) == 1 and not plan.merged(plan.groups[g].ranges[0]) for g in unit)


def _summary_of(bucket: int):
    return lambda ix: (ix["kind"] == ranges.SUMMARY) & (ix["bucket"] == bucket)


def _of_kind(*kinds: int):
    return lambda ix: np.isin(ix["kind"], kinds)


# --- the rewrite -------------------------------------------------------------------------------


def _partition_state(partition: int, task: _Task) -> tuple[list[GroupSpec], ranges.ProducerState]:
    """The groups of `partition` and its producer state from every range's blocks, once its leader
    epochs check (`pipeline.checked_state`, as a whole-partition task)."""
    specs = task.plan.specs_of(partition)
    side = [
        b
        for r in task.plan.ranges_of(task.plan.partitions[partition])
        for b in task.ex.read_blocks(f"scan-{r}", _of_kind(ranges.PRODUCERS, ranges.EPOCHS))
    ]
    epochs = _epoch_runs(specs, [b for b in side if b.kind == ranges.EPOCHS])
    producers = [ranges.from_block(b.data) for b in side if b.kind == ranges.PRODUCERS]
    return specs, pipeline.checked_state(specs, epochs, producers)


def _epoch_runs(specs: list[GroupSpec], blocks: list[ranges.Block]) -> list:
    """The leader-epoch runs of the partition's ranges' EPOCHS `blocks` (log order)."""
    path_of = specs[0].segment_path
    runs = []
    for b in blocks:  # log order
        batch = ranges.from_block(b.data)
        runs.extend(epochs_from_columns({n: batch.column(n).to_numpy() for n in batch.schema.names}, path_of))
    return runs


def _rewrite(partition: int, units: list[list[int]], task: _Task, work: Work) -> list[GroupResult]:
    """Rewrite the units (groups, log order) of `partition` this task rewrites, after its
    leader epochs are checked and its producer state derived, once, from every range's blocks.
    `work.split`: the cut groups whose other ranges come as pieces, from the task `work.holder[range]`."""
    if not units:
        return []
    group_ids = [g for unit in units for g in unit]
    try:
        specs, state = _partition_state(partition, task)
    except PARTITION_ERRORS as exc:
        return failed(group_ids, error_text(exc))
    first_unstable = pipeline.open_transaction(state, specs)
    if first_unstable is not None:
        return unstable(group_ids, first_unstable)
    # The units' files made durable together at the end (runtime/durability.py), as a whole
    # partition's are, not unit by unit; a unit that stops at a `PeerGone` lets no row out.
    with durability.deferred():
        return [row for unit in units for row in _rewrite_unit(unit, state, task, work)]


def _rewrite_unit(unit: list[int], state: ranges.ProducerState, task: _Task, work: Work) -> list[GroupResult]:
    """Rewrite the groups `unit` from their ranges: held here, handed over as their ids, or
    (the other ranges of a cut group) cleaned by their holders as pieces."""
    plan, ex, held = task.plan, task.ex, task.held
    own = {g: _own_range(g, plan, work.holder) for g in unit if g in work.split}
    rids = [r for g in unit for r in ([own[g]] if g in own else plan.groups[g].ranges)]
    mine = {r: held[r] for r in rids if r in held}  # `_shipped` takes them from `held`
    try:
        shipped = _shipped(rids, task)
        specs = pipeline.with_state([plan.groups[g].spec for g in unit], state)
        pieces = {g: _piece_spec(g, own[g], plan, work.holder, ex) for g in own}
        return rewrite_unit(specs, shipped, task.cache, pieces)
    except PeerGone:  # waiting for a piece: the unit is left to a follow-up, from these ids
        _leave(ex, mine)
        raise
    except PARTITION_ERRORS as exc:
        return failed(unit, error_text(exc))


def _shipped(rids: list[int], task: _Task) -> ranges.ShippedMap:
    """The offset map of ranges `rids`: their ids (held here, or handed over), FOUND applied."""
    plan, ex, held = task.plan, task.ex, task.held
    shipped = ranges.ShippedMap()
    for r in rids:
        scan_spec = plan.ranges[r].scan
        if r in held:
            shipped.hold(r, scan_spec, held.pop(r))
        else:
            shipped.add_blocks(r, scan_spec, list(ex.read_blocks(f"ids-{r}")))
    merged = [r for r in rids if plan.merged(r)]  # the merge finds nothing for the others
    for k in range(len(plan.tasks)) if merged else ():
        for b in ex.read_blocks(f"found-{k}", lambda ix: np.isin(ix["range_id"], merged)):
            shipped.apply_found(b.range_id, b)
    return shipped


# --- pieces of cut groups ----------------------------------------------------------------------

_PIECE_STATS = ("bytes_read", "records_read", "batches_read", "invalid_records", "segments_rescanned")
_PIECE_COLUMNS = ("position", "size", "last_offset", "max_timestamp")


def _write_piece(t: int, r: int, task: _Task, merge_errors: list) -> None:
    """Clean range `r` (held here) into `piece-<r>.log` for the task that rewrites its group, and
    post its status: the stats, or the error. Nothing is cleaned when the group will not be
    rewritten (a merge failed): its rewriter never waits for the piece."""
    ex = task.ex
    spec, partition, _ = task.plan.ranges[r]
    if ex.posted(f"piece-{r}", t):  # by the attempt before a retry: its reader may be reading it
        return
    status: dict = {"error": merge_errors[0] if merge_errors else None}
    try:
        if merge_errors:  # its rewriter reports the merge's error and waits for no piece
            return
        _, state = _partition_state(partition, task)
        shipped = _shipped([r], task)
        path = ex.path(f"piece-{r}.log")
        writer = Discard(path) if spec.dry_run else LogWriter(ex.storage, path, spec.write_mode)
        out, stats = rewrite_piece(pipeline.with_state([spec], state)[0], shipped, writer, task.cache)
        ex.write_blocks(f"piece-{r}", _piece_blocks(r, out))
        status.update({n: getattr(stats, n) for n in _PIECE_STATS}, records=out.records)
    except PARTITION_ERRORS as exc:
        status["error"] = error_text(exc)
    finally:
        ex.post(f"piece-{r}", t, status)


def _piece_blocks(r: int, out: Output):
    """The PIECE blocks of range `r`'s cleaned batches: where each lies in `piece-<r>.log`."""
    cols = dict(zip(_PIECE_COLUMNS, out.columns()))
    return (
        ranges.Block(
            r,
            ranges.PIECE,
            -1,
            at,
            ranges.to_block(**{n: c[at : at + ranges.BLOCK_ROWS] for n, c in cols.items()}),
        )
        for at in range(0, len(cols["size"]), ranges.BLOCK_ROWS)
    )


def _own_range(g: int, plan: RangePlan, holder: dict[int, int]) -> int:
    """The range of cut group `g` its rewriter holds (a task holds at most one range of a group:
    both are contiguous)."""
    return next(r for r in plan.groups[g].ranges if holder[r] == plan.rewriter[g])


def _piece_spec(g: int, own: int, plan: RangePlan, holder: dict[int, int], ex: Exchange) -> PieceSpec:
    """How cut group `g` is rewritten from its range `own`: where that range's segments lie in
    the group, and the pieces of the ranges before and after it."""
    rids = plan.groups[g].ranges
    at = rids.index(own)
    lo = sum(len(plan.ranges[r].scan.segments) for r in rids[:at])
    return PieceSpec(
        lo,
        lo + len(plan.ranges[own].scan.segments),
        _appender(rids[:at], holder, ex),
        _appender(rids[at + 1 :], holder, ex),
    )


def _appender(rids: list[int], holder: dict[int, int], ex: Exchange):
    """`append(out, stats)` for a `PieceSpec`: the pieces of ranges `rids`, in log order, added to
    the group's output as their holders post them."""

    def append(out: Output, stats: RewriteStats) -> None:
        for r in rids:
            status = ex.status(f"piece-{r}", holder[r])
            if status["error"]:
                raise CompactionError(status["error"])
            for n in _PIECE_STATS:
                setattr(stats, n, getattr(stats, n) + status[n])
            blocks = [ranges.from_block(b.data) for b in ex.read_blocks(f"piece-{r}")]
            if blocks:
                cols = [
                    np.concatenate([ranges.column(b, n, np.int64) for b in blocks]) for n in _PIECE_COLUMNS
                ]
                _append_piece(out, ex, ex.path(f"piece-{r}.log"), *cols, status["records"])

    return append


def configure(part_chunk_bytes: int) -> None:
    """This worker's `WorkerSettings.part_chunk_bytes`."""
    global _piece_chunk_bytes
    _piece_chunk_bytes = part_chunk_bytes


def _append_piece(
    out: Output, ex: Exchange, path: str, position, size, last_offset, max_timestamp, records: int
) -> None:
    """The piece's bytes added to `out` whole batches at a time, at most `_piece_chunk_bytes` each
    (a dry run's piece has no bytes: its sizes are counted)."""
    ends = position + size
    dry = isinstance(out.writer, Discard)
    f = None if dry else ex.storage.open_input(path)
    try:
        i = 0
        while i < len(size):
            j = max(i + 1, int(np.searchsorted(ends, position[i] + _piece_chunk_bytes, side="right")))
            chunk = b"" if dry else memoryview(f.read_at(int(ends[j - 1] - position[i]), int(position[i])))
            out.append_columns(
                chunk, size[i:j], last_offset[i:j], max_timestamp[i:j], records if i == 0 else 0
            )
            i = j
    finally:
        if f is not None:
            f.close()


__all__ = ["MERGE", "PIECE", "REWRITE", "RangePlan", "Work", "finish", "resume", "run_task"]
