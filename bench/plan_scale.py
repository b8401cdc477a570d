"""The driver's fixed cost (recovery, discovery, planning) at 10,000 partitions x
100 segments, measured without Spark.

Builds (once; `--keep` reuses it) a log dir of N partitions x S tiny but valid segments: one v2
batch of 10 records per `.log`, an empty `.index` (a broker writes no entry below
index.interval.bytes) and a one-entry `.timeindex`, written with os-level calls from one process
per core. Then runs the job's driver in-process with `--plan-only` (compaction.round.run: lock check,
discovery, validation, planning; no Spark is started: a plan-only run never reaches the stages)
and prints recovery/list/plan seconds, files read and listed, and the cost per partition and segment.

`--clean-fraction F` writes a cleaner-offset-checkpoint (removed afterwards) at the active segment's
base for that fraction of the partitions: the steady state of a log dir cleaned before, where those
partitions are skipped (0, the default, is a first run: every partition is dirty and eligible, and
its index files are checked). `--drop-caches` runs cold (needs root).

    .venv/bin/python bench/plan_scale.py --partitions 1000 --segments 100
    .venv/bin/python bench/plan_scale.py --keep            # 10,000 x 100, reusing the dir if built
    .venv/bin/python bench/plan_scale.py --keep --clean-fraction 0.9 --drop-caches
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from compaction.format.batch import Record
from compaction.format.batch_build import build_batch
from compaction.format.index import write_time_index
from compaction.format.naming import segment_file_name

RECORDS_PER_SEGMENT = 10
T0 = 1_600_000_000_000  # old enough that every segment is past any lag


def _template() -> tuple[bytes, bytes]:
    recs = [Record(i, T0 + i, b"key-%d" % (i % 5), b"value-%d" % i) for i in range(RECORDS_PER_SEGMENT)]
    batch = build_batch(recs, base_offset=0)
    return batch, write_time_index([(T0 + RECORDS_PER_SEGMENT - 1, RECORDS_PER_SEGMENT - 1)], 0)


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if data:
            os.write(fd, data)
    finally:
        os.close(fd)


def _make_partitions(args: tuple[str, int, int, int]) -> int:
    root, first, last, segments = args
    batch, _ = _template()
    tail = batch[8:]  # base offset sits outside the CRC: patch it per segment
    for p in range(first, last):
        d = os.path.join(root, f"topic{p % 10}-{p // 10}")
        os.mkdir(d)
        for s in range(segments):
            base = s * RECORDS_PER_SEGMENT
            stem = os.path.join(d, segment_file_name(base, ".log")[:-4])
            _write(stem + ".log", base.to_bytes(8, "big") + tail)
            _write(stem + ".index", b"")
            # relative offset of the last record, timestamp of the last record
            _write(
                stem + ".timeindex",
                (T0 + RECORDS_PER_SEGMENT - 1).to_bytes(8, "big")
                + (RECORDS_PER_SEGMENT - 1).to_bytes(4, "big"),
            )
    return last - first


def build(root: str, partitions: int, segments: int, workers: int) -> float:
    t = time.monotonic()
    os.makedirs(root)
    step = max(1, partitions // (workers * 8))
    chunks = [(root, a, min(a + step, partitions), segments) for a in range(0, partitions, step)]
    with ProcessPoolExecutor(workers) as pool:
        done = sum(pool.map(_make_partitions, chunks))
    assert done == partitions
    with open(os.path.join(root, "meta.json"), "w") as f:
        json.dump({"partitions": partitions, "segments": segments}, f)
    return time.monotonic() - t


class _Counts:
    """Counts Storage calls made during the run (thread-safe: discovery may use threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.n = {"read_bytes": 0, "list_dir": 0, "exists": 0, "info": 0, "local_reads": 0, "local_lists": 0}

    def install(self):
        from compaction.runtime.storage import Storage

        counted = {"read_bytes": "read_bytes", "list_dir": "list_dir", "exists": "exists", "info": "info"}
        counted |= {"read_small": "local_reads", "scan_dir": "local_lists"}  # os.open/pread, os.scandir
        saved = {name: getattr(Storage, name) for name in counted}

        def wrap(name, fn):
            def count(*a, **k):
                with self.lock:
                    self.n[name] += 1
                return fn(*a, **k)

            return count

        for name, fn in saved.items():
            setattr(Storage, name, wrap(counted[name], fn))

        def restore():
            for name, fn in saved.items():
                setattr(Storage, name, fn)

        return restore


def write_checkpoint(root: str, partitions: int, segments: int, fraction: float) -> int:
    """cleaner-offset-checkpoint at the active base for the first `fraction` of the partitions."""
    active = (segments - 1) * RECORDS_PER_SEGMENT
    names = [(f"topic{p % 10}", p // 10) for p in range(round(partitions * fraction))]
    with open(os.path.join(root, "cleaner-offset-checkpoint"), "w") as f:
        f.write(f"0\n{len(names)}\n" + "".join(f"{t} {n} {active}\n" for t, n in names))
    return len(names)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--segments", type=int, default=100)
    ap.add_argument("--dir", default=None, help="default: bench/out/plan_scale/<P>x<S>")
    ap.add_argument("--keep", action="store_true", help="reuse the dir if built; keep it afterwards")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="processes building the dir")
    ap.add_argument("--repeat", type=int, default=1, help="timed plan-only runs (first may be cold-cache)")
    ap.add_argument("--drop-caches", action="store_true", help="try to drop the page cache before each run")
    ap.add_argument(
        "--as-round",
        action="store_true",
        help="plan as a real (not dry) round: index checks left to the tasks; no Spark, nothing written",
    )
    ap.add_argument(
        "--clean-fraction",
        type=float,
        default=0.0,
        help="fraction of partitions checkpointed at their active base (skipped)",
    )
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    root = args.dir or os.path.join(here, "out", "plan_scale", f"{args.partitions}x{args.segments}")
    meta = os.path.join(root, "meta.json")
    built = False
    if os.path.exists(root) and not (args.keep and os.path.exists(meta)):
        shutil.rmtree(root)
    if not os.path.exists(root):
        secs = build(root, args.partitions, args.segments, args.workers)
        built = True
        files = args.partitions * args.segments * 3
        du = subprocess.run(["du", "-sh", root], capture_output=True, text=True).stdout.split()[0]
        print(
            f"built {args.partitions:,} partitions x {args.segments} segments ({files:,} files) in "
            f"{secs:.1f} s ({files / secs:,.0f} files/s), {du} on disk: {root}"
        )
    else:
        print(f"reusing {root}")

    from compaction.cli.options import parse_args
    from compaction.round import run

    segs = args.partitions * args.segments
    ckpt_path = os.path.join(root, "cleaner-offset-checkpoint")
    clean = 0
    if args.clean_fraction:
        clean = write_checkpoint(root, args.partitions, args.segments, args.clean_fraction)
    for i in range(args.repeat):
        if args.drop_caches:
            subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], capture_output=True)
        counts = _Counts()
        restore = counts.install()
        t = time.monotonic()
        try:
            if args.as_round:
                code, report = _plan_as_round(root)
            else:
                code, report = run(parse_args(["--log-dir", root, "--plan-only"]))
        finally:
            restore()
            if i == args.repeat - 1 and os.path.exists(ckpt_path):
                os.remove(ckpt_path)
        wall = time.monotonic() - t
        tm = report["timings"]
        statuses: dict[str, int] = {}
        for r in report["partitions"]:
            k = f"{r['status']}: {r['reason']}"
            statuses[k] = statuses.get(k, 0) + 1
        plan = tm.get("planSeconds", 0.0)
        print(
            json.dumps(
                {
                    "run": i + 1,
                    "partitions": args.partitions,
                    "segments_per_partition": args.segments,
                    "checkpointed_clean": clean,
                    "cold": args.drop_caches,
                    "exit": code,
                    "statuses": statuses,
                    "wall_seconds": round(wall, 2),
                    "recoverySeconds": round(tm.get("recoverySeconds", 0.0), 3),
                    "listSeconds": round(tm.get("listSeconds", 0.0), 2),
                    "planSeconds (discovery+validation+plan)": round(plan, 2),
                    "storage_calls": counts.n,
                    "ms_per_partition": round(plan * 1000 / args.partitions, 3),
                    "us_per_segment": round(plan * 1e6 / segs, 1),
                    "threads": os.environ.get("KAFKA_COMPACTION_DISCOVERY_THREADS", "default"),
                }
            )
        )
    if not args.keep:
        shutil.rmtree(root)
    elif built:
        print(f"kept {root}")
    return 0


def _plan_as_round(root: str) -> tuple[int, dict]:
    """The driver's planning as a real round does it (plan_round.discover_and_plan without --dry-run:
    the index checks of the partitions to clean are left to their tasks), stopped before Spark;
    nothing is written (every segment of the bench dir has its .index)."""
    from compaction.cli.options import parse_args
    from compaction.round import discover_and_plan
    from compaction.settings import Settings
    from compaction.steps.discover import use_threads

    use_threads(Settings.resolve().threads)  # as `run` does
    timings: dict[str, float] = {}
    t = time.monotonic()
    planned, _ = discover_and_plan(parse_args(["--log-dir", root]), None, timings)
    timings["planSeconds"] = time.monotonic() - t
    parts = [
        {
            "status": p.result.status if p.plan is None or not p.plan.eligible else "eligible",
            "reason": p.result.reason or "",
        }
        for p in planned
    ]
    return 0, {"timings": timings, "partitions": parts}


if __name__ == "__main__":
    sys.exit(main())
