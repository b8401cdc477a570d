"""One task of the ranges stage: partitions cut into ranges, scanned, merged and rewritten by
tasks that run at the same time and meet through the exchange (compaction/exchange.py).

Each task owns some ranges (`RangePlan.tasks`) and goes through three phases:

1. **scan** its ranges (compaction/ranges.py `scan_range`): it keeps each range's key ids and
   latest offsets (and, within the cache budget, the scans themselves) and writes the blocks the
   others need into `scan-<range>`: SUMMARY per fine bucket, EPOCHS, PRODUCERS. Posts each
   range's error, if any, and whether it holds transactional batches.
2. **merge** the fine buckets dealt to it (bucket mod tasks) over every range of every sound
   partition (`merge_bucket`), into `found-<task>`: the ids each range must raise to a later
   range's offset. A range of a unit of several ranges (a transactional partition) that another
   task rewrites is handed over as `ids-<range>`.
3. **rewrite** its ranges (or units) with their held ids, their latest offsets and the FOUND
   entries of every merge task, after checking the partition's leader epochs and deriving its
   producer state from every range's PRODUCERS, exactly as a whole-partition task does.

A damaged range fails its partition in every task that owns a part of it; the other partitions
go on. The rows it returns are those of a whole-partition task (`spark_stages.FUSED_FIELDS`), plus
one row of timings (`group_id` -1).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from compaction import ranges
from compaction.errors import error_text
from compaction.exchange import Exchange
from compaction.format import batch as fb
from compaction.rewrite import GroupSpec, ScanCache, check_partition_epochs, rewrite_unit

STATS_ROW = -1  # group_id of a task's timings row


@dataclasses.dataclass(frozen=True)
class RangePlan:
    """Who does what: `ranges` {group id: (spec, partition number, validate)}, `parts` {partition
    number: its group ids in log order}, `tasks` [the group ids each task owns]."""

    ranges: dict[int, tuple[GroupSpec, int, bool]]
    parts: dict[int, list[int]]
    tasks: list[list[int]]

    @classmethod
    def cut(cls, partitions: list[list[GroupSpec]], slots: int) -> RangePlan:
        """Every group of `partitions` a range; ranges packed by bytes into at most `slots` tasks
        (biggest first into the least loaded), since every task of the stage runs at once."""
        from compaction.spark_stages import pack

        table = {s.group_id: (s, n, k == 0) for n, specs in enumerate(partitions) for k, s in enumerate(specs)}
        parts = {n: [s.group_id for s in specs] for n, specs in enumerate(partitions)}
        gids = list(table)
        sizes = [sum(seg.size for seg in table[g][0].segments) for g in gids]
        tasks = [[gids[i] for i in sorted(b)] for b in pack(sizes, max(1, min(slots, len(gids))))]
        return cls(table, parts, tasks)

    @property
    def owner(self) -> dict[int, int]:
        return {g: t for t, gids in enumerate(self.tasks) for g in gids}


def run_task(t: int, plan: RangePlan, ex: Exchange, reuse_bytes: int) -> list[dict]:
    """Task `t` of the stage: its rows (see the module docstring)."""
    started, cpu = time.monotonic(), time.process_time()
    n_tasks = len(plan.tasks)
    cache = ScanCache(reuse_bytes) if reuse_bytes > 0 else None
    held: dict[int, ranges.Held] = {}
    status = {str(g): _scan(g, plan, ex, cache, held) for g in plan.tasks[t]}
    ex.post("scan", t, status)
    scans = {int(g): s for posted in ex.gather("scan", n_tasks) for g, s in posted.items()}
    dead = {}
    for p, gids in plan.parts.items():
        errors = [scans[g]["error"] for g in gids if scans[g]["error"]]
        if errors:
            dead[p] = errors[0]
    units = {p for p, gids in plan.parts.items() if p not in dead and any(scans[g]["txn"] for g in gids)}
    scanned = time.monotonic()
    error = _hand_over(t, plan, ex, held, units) or _merge(t, plan, ex, dead)
    ex.post("merge", t, {"error": error})
    merge_errors = [s["error"] for s in ex.gather("merge", n_tasks) if s["error"]]
    merged = time.monotonic()
    rows = []
    for g in plan.tasks[t]:
        p = plan.ranges[g][1]
        if p in dead or merge_errors:
            rows.append({"group_id": g, "error": dead.get(p) or merge_errors[0]})
        elif p not in units or g == plan.parts[p][0]:
            rows.extend(_rewrite(g, plan, ex, held, cache, p in units))
        held.pop(g, None)
    rows.append({"group_id": STATS_ROW, "scan_seconds": scanned - started, "map_seconds": merged - scanned,
                 "cpu_seconds": time.process_time() - cpu})  # fmt: skip
    return rows


def _scan(gid: int, plan: RangePlan, ex: Exchange, cache, held: dict) -> dict:
    from compaction.discover import validate_partition_path

    spec, part, validate = plan.ranges[gid]
    try:
        if validate:  # the index checks the driver leaves to the task that reads the partition anyway
            validate_partition_path(spec.storage, spec.part_path)
        held[gid], blocks = ranges.scan_range(spec, part, cache)
        ex.write_blocks(f"scan-{gid}", blocks)
    except Exception as exc:  # noqa: BLE001 - reported per partition, never fatal
        held.pop(gid, None)
        return {"error": error_text(exc), "txn": False}
    return {"error": None, "txn": any(_transactional(b) for b in blocks if b.kind == ranges.PRODUCERS)}


def _transactional(block: ranges.Block) -> bool:
    attrs = ranges.from_block(block.data).column("attributes").to_numpy()
    return bool(np.any(attrs & (fb.TRANSACTIONAL_MASK | fb.CONTROL_MASK)))


def _hand_over(t: int, plan: RangePlan, ex: Exchange, held: dict, units: set) -> str | None:
    """Write the ids of the ranges this task holds for units another task rewrites."""
    owner = plan.owner
    try:
        for g in plan.tasks[t]:
            p = plan.ranges[g][1]
            if p in units and g in held and owner[plan.parts[p][0]] != t:
                ex.write_blocks(f"ids-{g}", ranges.held_blocks(plan.ranges[g][0], held[g]))
    except Exception as exc:  # noqa: BLE001 - fails every partition of the stage, never the job
        return error_text(exc)
    return None


def _merge(t: int, plan: RangePlan, ex: Exchange, dead: dict) -> str | None:
    """The fine buckets t, t + tasks, ... of every range of the sound partitions, one bucket at a
    time (what a merge holds is a fine bucket's share of the keys), into `found-<t>`."""
    try:
        live = [g for p, gids in plan.parts.items() if p not in dead for g in gids]
        index = {g: ex.read_index(f"scan-{g}") for g in live}
        found = []
        for bucket in range(t, ranges.FINE_BUCKETS, len(plan.tasks)):
            rows = [(b.range_id, b.data) for g in live
                    for b in ex.read_blocks(f"scan-{g}", _summary_of(bucket), index[g])]  # fmt: skip
            found.extend(ranges.merge_bucket(rows))
        ex.write_blocks(f"found-{t}", found)
    except Exception as exc:  # noqa: BLE001 - fails every partition of the stage, never the job
        return error_text(exc)
    return None


def _summary_of(bucket: int):
    return lambda ix: (ix["kind"] == ranges.SUMMARY) & (ix["bucket"] == bucket)


def _of_kind(*kinds: int):
    return lambda ix: np.isin(ix["kind"], kinds)


def _rewrite(gid: int, plan: RangePlan, ex: Exchange, held: dict, cache, unit: bool) -> list[dict]:
    """Rewrite the range `gid`, or, for a unit, every range of its partition (log order)."""
    part = plan.ranges[gid][1]
    gids = plan.parts[part] if unit else [gid]
    try:
        specs = [plan.ranges[g][0] for g in plan.parts[part]]
        side = [b for g in plan.parts[part]
                for b in ex.read_blocks(f"scan-{g}", _of_kind(ranges.PRODUCERS, ranges.EPOCHS))]  # fmt: skip
        _check_epochs(specs, [b for b in side if b.kind == ranges.EPOCHS])
        state = ranges.producer_state([ranges.from_block(b.data) for b in side if b.kind == ranges.PRODUCERS])
        if state.first_unstable is not None and state.first_unstable < specs[0].upper_bound:
            return [{"group_id": g, "first_unstable": state.first_unstable} for g in gids]
        unit_specs = [dataclasses.replace(plan.ranges[g][0], last_records=state.last_records) for g in gids]
        shipped = ranges.ShippedMap()
        for g, spec in zip(gids, unit_specs):
            if g in held:
                shipped.hold(spec, held[g])
            else:
                shipped.add_blocks(spec, list(ex.read_blocks(f"ids-{g}")))
            for k in range(len(plan.tasks)):
                for b in ex.read_blocks(f"found-{k}", lambda ix, g=g: ix["range_id"] == g):
                    shipped.apply_found(g, b)
        return rewrite_unit(unit_specs, shipped, cache)
    except Exception as exc:  # noqa: BLE001 - reported per partition, never fatal
        return [{"group_id": g, "error": error_text(exc)} for g in gids]


def _check_epochs(specs: list[GroupSpec], blocks: list[ranges.Block]) -> None:
    """Leader epochs across the partition's ranges, as a whole-partition task checks them."""
    from compaction.log_structure import epochs_from_columns

    path_of = specs[0].segment_path
    runs = []
    for b in blocks:  # log order
        batch = ranges.from_block(b.data)
        runs.extend(epochs_from_columns({n: batch.column(n).to_numpy() for n in batch.schema.names}, path_of))
    check_partition_epochs(specs, runs)


__all__ = ["RangePlan", "STATS_ROW", "run_task"]
