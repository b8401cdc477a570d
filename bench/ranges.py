"""The steps of a partition cut into ranges, in this process (no Spark): wall and CPU seconds of
each range's scan, of the merge, and of each range's rewrite, beside one whole-partition task on
the same segments. What a Spark task of each step costs at the least.

    .venv/bin/python bench/ranges.py PARTITION_DIR [--ranges 2] [--repeat 2]

PARTITION_DIR: a partition dir whose last segment is the active one (e.g. one written by
`python -m compaction generate` with bench/kafka_workload.py's options); the others are cut into
`--ranges` ranges of consecutive segments. Cleaned files are removed after each step; the input
is not changed. Not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from test_ranges import cleaned, specs_for  # noqa: E402  (the steps as the tests run them)

from compaction import ranges  # noqa: E402
from compaction.spark_stages import compact_partition  # noqa: E402


def timed(label: str, fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    print(f"  {label}: wall {time.perf_counter() - wall:.2f} s, CPU {time.process_time() - cpu:.2f} s", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", type=Path)
    ap.add_argument("--ranges", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    specs = specs_for(args.part, args.ranges)
    sizes = [sum(s.size for s in spec.segments) / (1 << 20) for spec in specs]
    print(f"{args.part}: {len(specs)} ranges of {', '.join(f'{m:,.0f}' for m in sizes)} MiB")
    compact_partition(specs_for(args.part, 1))  # kernels loaded, imports done
    cleaned(args.part)
    for run in range(args.repeat):
        print(f"run {run + 1}")
        blocks = []
        for spec in specs:
            blocks += timed(f"scan range {spec.group_id}", lambda s=spec: list(ranges.scan_range(s, 0)))
        by_bucket: dict[int, list] = {}
        for b in blocks:
            if b.kind == ranges.SUMMARY:
                by_bucket.setdefault(b.bucket, []).append((b.range_id, b.data))
        found = timed("merge", lambda: [f for rows in by_bucket.values() for f in ranges.merge_bucket(rows)])
        shipped = [b for b in blocks if b.kind in (ranges.IDS, ranges.LATEST)] + found
        for spec in specs:
            timed(f"rewrite range {spec.group_id}", lambda s=spec: ranges.rewrite_ranges([s], shipped))
        cleaned(args.part)
        timed("one whole-partition task", lambda: compact_partition(specs_for(args.part, 1)))
        cleaned(args.part)
    return 0


if __name__ == "__main__":
    sys.exit(main())
