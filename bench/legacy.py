"""CPU seconds per GiB of the scan, the offset map and the rewrite of one partition's segments, in
this process, no Spark: made for legacy (v0/v1) input such as the Kafka 0.9 broker-written
partitions of `../shared/anchors/kafka09` (copy a few segments first: this writes `.cleaned` files
next to them, then removes them).

    .venv/bin/python bench/legacy.py PARTITION_DIR [--repeat 3]

All `.log` files of PARTITION_DIR but the last are cleaned as one group (the last is the active
one). Per run it prints the CPU (user + sys of this process) of: `scan_segment` over every segment
alone (CRCs, the walk, the keys hashed), then the whole-partition task's phases: `scan_partition`
(the scan again, plus the key table) and `rewrite_unit` (decide and write, from the kept scans),
each as seconds and as CPU-s per GiB of .log.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compaction.steps.group import CLEANED, GroupSpec  # noqa: E402
from compaction.steps.rewrite import rewrite_unit  # noqa: E402
from compaction.steps.scan import ScanCache, read_segment, scan_partition  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from partition import spec_for  # noqa: E402  (all segments but the active one as one group)

GiB = float(1 << 30)


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def run(spec: GroupSpec) -> tuple[float, float, float, dict]:
    """(scan CPU-s, scan + map CPU-s, rewrite CPU-s, the rewrite's result): `scan_segment` of
    every segment alone, then the whole-partition task's two phases as `compact_partition` runs
    them (`scan_partition` keeping the scans in a ScanCache, `rewrite_unit` from it)."""
    t = cpu()
    for seg in spec.segments:
        read_segment(spec, seg)
    scan_s = cpu() - t
    t = cpu()
    cache = ScanCache(1 << 30)
    pmap, _ = scan_partition([spec], cache)
    map_s = cpu() - t
    t = cpu()
    row = rewrite_unit([spec], pmap, cache)[0]
    rewrite_s = cpu() - t
    return scan_s, map_s, rewrite_s, row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    spec = spec_for(args.part)
    gib = sum(s.size for s in spec.segments) / GiB
    print(f"{args.part}: {len(spec.segments)} segments, {gib * 1024:,.1f} MiB cleaned (+ active)")
    for _ in range(args.repeat):
        for f in args.part.glob("*" + CLEANED):
            f.unlink()
        wall = time.perf_counter()
        scan_s, map_s, rewrite_s, row = run(spec)
        wall = time.perf_counter() - wall
        out = sorted(args.part.glob("*.log" + CLEANED))
        print(
            f"scan alone {scan_s:.2f} s ({scan_s / gib:.1f} CPU-s/GiB); task: scan + map {map_s:.2f} s "
            f"({map_s / gib:.1f}), "
            f"rewrite {rewrite_s:.2f} s ({rewrite_s / gib:.1f}); wall {wall:.2f} s; "
            f"{row.records_written:,}/{row.records_read:,} records, "
            f"{row.bytes_written / (1 << 20):,.1f} MiB written, {len(out)} file(s)"
        )
        for f in args.part.glob("*" + CLEANED):
            f.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
