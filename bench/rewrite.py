"""Throughput of the rewrite step alone (rewrite.rewrite_unit), no Spark, on one generated partition.

    .venv/bin/python bench/rewrite.py [--records 1021668] [--keys 319565] [--codec mixed] [--repeat 2]
                                      [--profile cprofile|none]

Defaults mirror one partition of bench/e2e.py (1 GB / 4 partitions: ~260 MB of .log, ~31% of the
records kept). The log dir is generated once under bench/out/rewrite/<params> and reused. The
offset map is computed the way a whole-partition task would (scan_group rows -> max dirty offset per key),
outside the timed part. Every non-active segment forms one output group (segment.bytes 1 GB), as
in the e2e run. Prints MB read per second of rewrite_unit on one core (one Python thread), and
the peak RSS growth of the process during the rewrite.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "helpers"))  # the plain offset map the tests use

from reference_map import KeyLookup, scan_group  # noqa: E402

from compaction.format import naming  # noqa: E402
from compaction.runtime.storage import Storage  # noqa: E402
from compaction.steps.group import CLEANED, GroupSpec, SourceSegment  # noqa: E402
from compaction.steps.rewrite import rewrite_unit  # noqa: E402

NOW_MS = 1_795_305_600_000


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_021_668)
    ap.add_argument("--keys", type=int, default=319_565)
    ap.add_argument("--codec", default="mixed")
    ap.add_argument("--value-size", default="100:1000")
    ap.add_argument("--segment-bytes", type=int, default=16 << 20)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--profile", default="none", choices=["none", "cprofile"])
    args = ap.parse_args()

    name = f"{args.codec}-{args.records}-{args.keys}-{args.value_size.replace(':', '_')}"
    out = REPO / "bench" / "out" / "rewrite" / name
    log_dir = out / "logs"
    if not log_dir.exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "compaction",
                "generate",
                str(log_dir),
                "--topics",
                "t:1",
                "--records",
                str(args.records),
                "--keys",
                str(args.keys),
                "--value-size",
                args.value_size,
                "--codec",
                args.codec,
                "--segment-bytes",
                str(args.segment_bytes),
                "--seed",
                "1",
            ],
            check=True,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
        )
    part = log_dir / "t-0"
    for f in part.glob("*" + CLEANED):
        f.unlink()
    logs = sorted(part.glob("*.log"))
    bases = [naming.parse_segment_file_name(f.name).base_offset for f in logs]
    stats = [f.stat() for f in logs]
    segs = [SourceSegment(b, st.st_size, st.st_mtime_ns) for b, st in zip(bases, stats, strict=True)]
    cleanable, active = segs[:-1], segs[-1]
    spec = GroupSpec(
        group_id=0,
        topic="t",
        partition=0,
        storage=Storage.local(),
        part_path=str(part),
        segments=tuple(cleanable),
        first_dirty_offset=0,
        upper_bound=active.base_offset,
        now_ms=NOW_MS,
        delete_retention_ms=86_400_000,
        legacy_delete_horizon_ms=0,
        index_interval_bytes=4096,
    )
    t = time.perf_counter()
    keys, _ = scan_group(spec)
    dirty = keys.filter(pa.compute.greater_equal(keys["dirty_offset"], 0))
    lookup_keys, lookup_latest = dirty["key"].combine_chunks(), dirty["dirty_offset"].to_numpy()
    map_s = time.perf_counter() - t
    size = sum(s.size for s in cleanable)
    print(
        f"input: {size / 1e6:.1f} MB in {len(cleanable)} segments (+ active), {len(lookup_keys):,} keys; "
        f"scan_group + map {map_s:.2f} s"
    )
    # warm-up: numba compile/cache load, page cache
    rewrite_unit([spec], KeyLookup(lookup_keys, lookup_latest))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(args.repeat):
        load = os.getloadavg()[0]
        prof = cProfile.Profile() if args.profile == "cprofile" else None
        t = time.perf_counter()
        cpu = time.process_time()
        if prof:
            prof.enable()
        res = rewrite_unit([spec], KeyLookup(lookup_keys, lookup_latest))[0]
        if prof:
            prof.disable()
        wall, cpu = time.perf_counter() - t, time.process_time() - cpu
        print(
            f"rewrite_unit: {wall:.2f} s wall, {cpu:.2f} s cpu -> {size / 1e6 / wall:.0f} MB/s wall, "
            f"{size / 1e6 / cpu:.0f} MB/s per cpu-second; wrote {res.bytes_written / 1e6:.1f} MB, "
            f"{res.records_written:,}/{res.records_read:,} records; load avg {load:.1f}"
        )
        if prof:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS {rss1 / 1024:.0f} MB (after warm-up {rss0 / 1024:.0f} MB)")
    for f in part.glob("*" + CLEANED):
        f.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
