"""The ranges stage without Spark: its tasks (compaction/steps/range_task.py) as processes of this
machine, meeting through an exchange directory exactly as the Spark stage's tasks do, beside one
whole-partition task on the same segments. Per task: wall and CPU seconds of its scan, merge (the
wait for the others included) and rewrite phases. What the Spark stage costs at the least.

    .venv/bin/python bench/ranges.py PARTITION_DIR [--ranges 2] [--tasks 2] [--repeat 2] [--drop-caches]
                                    [--profile DIR]

PARTITION_DIR: a partition dir whose last segment is the active one (e.g. one written by
`python -m compaction generate` with bench/kafka_workload.py's options); the others are cut into
`--ranges` ranges of consecutive segments. Cleaned files are removed after each run; the input is
not changed. `--drop-caches`: the page cache dropped before the stage and before the whole-partition
task (their files read from the disk, as in a round). `--profile DIR`: each task's cProfile of the
last run in DIR/task-<t>.prof, the whole-partition task's in DIR/whole.prof. The tasks and the
whole-partition task each run in a process forked from this one, which loaded the kernels on the
first segment only. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import multiprocessing
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path[:0] = [str(REPO / "tests" / "unit"), str(REPO / "tests" / "helpers"), str(REPO / "bench")]

from e2e import drop_caches  # noqa: E402
from test_ranges import cleaned, specs_for  # noqa: E402  (the specs as the tests cut them)

from compaction.runtime.exchange import Exchange  # noqa: E402
from compaction.runtime.storage import Storage  # noqa: E402
from compaction.runtime.worker import prepare_worker  # noqa: E402
from compaction.settings import Settings  # noqa: E402
from compaction.spark.stages import compact_partition  # noqa: E402
from compaction.steps.range_task import run_task  # noqa: E402
from compaction.steps.results import STATS_ROW, as_rows  # noqa: E402
from compaction.steps.schedule import RangePlan  # noqa: E402


def _task(args) -> tuple[float, dict, int]:
    t, plan, root, profile = args
    prepare_worker(WORKER)
    started, faults = time.perf_counter(), _minor_faults()
    with _profiled(profile / f"task-{t}.prof" if profile else None):
        out = as_rows(run_task(t, plan, Exchange(Storage.local(), root), WORKER.scan_reuse_max_bytes))
    errors = [r["error"] for r in out if r.get("error")]
    if errors:
        raise SystemExit(errors[0])
    stats = next(r for r in out if r["group_id"] == STATS_ROW)
    return time.perf_counter() - started, stats, _minor_faults() - faults


def _minor_faults() -> int:
    """Page faults of this process so far that read nothing from the disk: mostly first touches
    of fresh memory."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _whole(part: Path, profile: Path | None) -> tuple[float, float, int]:
    wall, cpu, faults = time.perf_counter(), time.process_time(), _minor_faults()
    with _profiled(profile / "whole.prof" if profile else None):
        compact_partition(specs_for(part, 1), WORKER.scan_reuse_max_bytes)
    return time.perf_counter() - wall, time.process_time() - cpu, _minor_faults() - faults


@contextlib.contextmanager
def _profiled(path: Path | None):
    """A cProfile of the block written to `path` (nothing when None)."""
    if path is None:
        yield
        return
    prof = cProfile.Profile(time.thread_time)  # CPU of the task thread: waits and other load excluded
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        prof.dump_stats(path)


WORKER = Settings.resolve().worker  # as a round's tasks get them: this environment's knobs


def stage(part: Path, n_ranges: int, tasks: int, profile: Path | None = None) -> None:
    plan = RangePlan.cut([specs_for(part, n_ranges)], tasks)
    with tempfile.TemporaryDirectory(prefix="bench-exchange-") as root:
        started = time.perf_counter()
        with multiprocessing.get_context("fork").Pool(len(plan.tasks)) as pool:
            outs = pool.map(_task, [(t, plan, root, profile) for t in range(len(plan.tasks))])
        wall = time.perf_counter() - started
    for t, (seconds, st, faults) in enumerate(outs):
        print(
            f"  task {t} ({len(plan.tasks[t])} ranges): {seconds:.2f} s; scan {st['scan_seconds']:.2f}, "
            f"merge {st['map_seconds']:.2f}, rewrite {seconds - st['scan_seconds'] - st['map_seconds']:.2f}; "
            f"CPU {st['cpu_seconds']:.2f} s; {faults:,} minor page faults",
            flush=True,
        )
    print(f"  stage: wall {wall:.2f} s (processes started in it)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", type=Path)
    ap.add_argument("--ranges", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--profile", type=Path, help="a directory for each task's cProfile (`task-<t>.prof`)")
    args = ap.parse_args()
    cold = (lambda: drop_caches()) if args.drop_caches else (lambda: None)
    specs = specs_for(args.part, args.ranges)
    sizes = [sum(s.size for s in spec.segments) / (1 << 20) for spec in specs]
    print(
        f"{args.part}: {len(specs)} ranges of {', '.join(f'{m:,.0f}' for m in sizes)} MiB, {args.tasks} tasks"
    )
    prepare_worker(WORKER)
    # Kernels loaded and imports done before the fork, on the first segment only: a child forked
    # from a process whose heap a whole partition's run grew pays for it (its first task's CPU
    # is well above that of the same task in the parent).
    whole = specs_for(args.part, 1)[0]
    compact_partition(
        [
            dataclasses.replace(
                whole,
                segments=whole.segments[:1],
                tail_segments=(),
                upper_bound=whole.segments[1].base_offset,
            )
        ],
        WORKER.scan_reuse_max_bytes,
    )
    cleaned(args.part)
    for run in range(args.repeat):
        print(f"run {run + 1}")
        cold()
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
        stage(args.part, args.ranges, args.tasks, args.profile)
        cleaned(args.part)
        cold()
        with multiprocessing.get_context("fork").Pool(1) as pool:  # forked as the stage's tasks are
            wall, cpu, faults = pool.apply(_whole, (args.part, args.profile))
        print(
            f"  one whole-partition task: wall {wall:.2f} s, CPU {cpu:.2f} s; {faults:,} minor page faults",
            flush=True,
        )
        cleaned(args.part)
    return 0


if __name__ == "__main__":
    sys.exit(main())
