"""CPU and wall of one whole-partition task (stages.compact_partition) in this process, no
Spark: the unit of work of the job's one Spark stage, measured without its scheduling.

    .venv/bin/python bench/partition.py [--records 947755] [--keys 250000] [--codec none]
                                        [--repeat 3] [--cold] [--idle S] [--read-mode direct|mmap]
                                        [--profile cprofile|none]

Defaults are one partition of bench/kafka_workload.py (512 MiB of v2 records, 24-byte keys,
values of 100-1024 bytes, 64 MiB segments). The partition is generated once under
bench/out/partition/<params> and reused; every run writes `.cleaned` files next to the source and
removes them afterwards (nothing is swapped in). `--cold` drops the page cache before each run
(needs root), as the job meets its input. Prints per run: wall, CPU (user + sys), MiB/s of .log
read per wall second and per CPU second, and the task's own scan / map / rewrite split.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import pstats
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from e2e import drop_caches, run_generator  # noqa: E402

from compaction.format import naming  # noqa: E402
from compaction.runtime.storage import Storage  # noqa: E402
from compaction.runtime.worker import prepare_worker  # noqa: E402
from compaction.settings import READ_MODES, Settings  # noqa: E402
from compaction.spark.stages import compact_partition  # noqa: E402
from compaction.steps.group import CLEANED, GroupSpec, SourceSegment  # noqa: E402

NOW_MS = 1_795_305_600_000
MiB = float(1 << 20)


def partition_dir(args) -> Path:
    name = f"{args.codec}-{args.records}-{args.keys}-{args.key_size}-{args.value_size.replace(':', '_')}"
    log_dir = REPO / "bench" / "out" / "partition" / name
    if not log_dir.exists():
        run_generator(
            log_dir,
            "--topics",
            "t:1",
            "--records",
            str(args.records),
            "--keys",
            str(args.keys),
            "--key-size",
            str(args.key_size),
            "--value-size",
            args.value_size,
            "--codec",
            args.codec,
            "--segment-bytes",
            str(args.segment_bytes),
            "--seed",
            "1",
        )
    return log_dir / "t-0"


def spec_for(part: Path) -> GroupSpec:
    """All non-active segments as one group (they fit in segment.bytes 1 GiB), the active one as tail."""
    logs = sorted(part.glob("*.log"))
    segs = []
    for f in logs:
        st = f.stat()
        segs.append(
            SourceSegment(naming.parse_segment_file_name(f.name).base_offset, st.st_size, st.st_mtime_ns)
        )
    return GroupSpec(
        group_id=0,
        topic="t",
        partition=0,
        storage=Storage.local(),
        part_path=str(part),
        segments=tuple(segs[:-1]),
        first_dirty_offset=0,
        upper_bound=segs[-1].base_offset,
        now_ms=NOW_MS,
        delete_retention_ms=86_400_000,
        legacy_delete_horizon_ms=0,
        index_interval_bytes=4096,
        tail_segments=(segs[-1],),
    )


def clean_up(part: Path) -> None:
    for f in part.glob("*" + CLEANED):
        f.unlink()


def partition_args(
    ap: argparse.ArgumentParser, records: int, keys: int, segment_bytes: int, repeat: int
) -> None:
    """The options of the generated partition (`partition_dir`), with these defaults, and --repeat."""
    ap.add_argument("--records", type=int, default=records)
    ap.add_argument("--keys", type=int, default=keys)
    ap.add_argument("--key-size", type=int, default=24)
    ap.add_argument("--value-size", default="100:1024")
    ap.add_argument("--codec", default="none")
    ap.add_argument("--segment-bytes", type=int, default=segment_bytes)
    ap.add_argument("--repeat", type=int, default=repeat)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    partition_args(ap, 947_755, 250_000, 64 << 20, 3)
    ap.add_argument("--cold", action="store_true", help="drop the page cache before each run")
    ap.add_argument("--profile", default="none", choices=["none", "cprofile"])
    ap.add_argument(
        "--idle",
        type=float,
        default=0.0,
        help="seconds to wait before each run (after --cold's drop): the job meets its input "
        "after Spark's start-up, by when this VM has handed the freed memory back",
    )
    ap.add_argument("--read-mode", default="direct", choices=READ_MODES)
    ap.add_argument(
        "--part",
        type=Path,
        help="an existing partition dir to use instead (its last segment is the active one)",
    )
    args = ap.parse_args()

    part = args.part or partition_dir(args)
    clean_up(part)
    spec = dataclasses.replace(spec_for(part), read_mode=args.read_mode)
    size = sum(s.size for s in spec.segments)
    print(f"partition {part}: {len(spec.segments)} segments, {size / MiB:,.1f} MiB cleaned (+ active)")
    worker = Settings.resolve().worker  # as a round's task gets them: this environment's knobs
    prepare_worker(worker)
    compact_partition([spec], worker.scan_reuse_max_bytes)  # numba cache load, imports
    clean_up(part)
    for _ in range(args.repeat):
        cold = drop_caches() if args.cold else False
        time.sleep(args.idle)
        prof = cProfile.Profile() if args.profile == "cprofile" else None
        u0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        if prof:
            prof.enable()
        row = compact_partition([spec], worker.scan_reuse_max_bytes)[0]
        if prof:
            prof.disable()
        wall, u1 = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF)
        user, system = u1.ru_utime - u0.ru_utime, u1.ru_stime - u0.ru_stime
        cpu = user + system
        faults = f"{u1.ru_minflt - u0.ru_minflt:,} minor faults, user {user:.2f} s, sys {system:.2f} s"
        clean_up(part)
        if row.get("error"):
            print(row["error"], file=sys.stderr)
            return 1
        print(
            f"{'cold' if cold else 'warm'}: {wall:.2f} s wall, {cpu:.2f} s CPU -> {size / MiB / wall:,.0f} MiB/s wall, "
            f"{size / MiB / cpu:,.0f} MiB/s per CPU-s; "
            f"scan {row['scan_seconds']:.2f} s, map {row['map_seconds']:.2f} s, "
            f"rest {wall - row['scan_seconds'] - row['map_seconds']:.2f} s; "
            f"wrote {row['bytes_written'] / MiB:,.1f} MiB, "
            f"{row['records_written']:,}/{row['records_read']:,} records; {faults}"
        )
        if prof:
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
