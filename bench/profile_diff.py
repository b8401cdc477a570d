"""Where two sets of cProfile files differ: own time per function, summed over each set's files,
largest difference first. For the profiles the benches write (`bench/ranges.py --profile DIR`,
`KAFKA_COMPACTION_PROFILE_DIR=DIR` for whole-partition tasks); cProfile sees only each task's
main thread (read-ahead and writer threads are not in it, their waits are: `acquire`).

    .venv/bin/python bench/profile_diff.py A.prof [A2.prof ...] --vs B.prof [B2.prof ...] [--top 25]

Not a test.
"""

from __future__ import annotations

import argparse
import pstats
from collections import Counter
from pathlib import Path


def own_times(paths: list[Path]) -> Counter:
    """{module file:function: own seconds} summed over the files."""
    total: Counter = Counter()
    for path in paths:
        for (file, _line, name), (_cc, _nc, own, _cum, _callers) in pstats.Stats(str(path)).stats.items():
            total[f"{Path(file).name}:{name}"] += own
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", nargs="+", type=Path)
    ap.add_argument("--vs", nargs="+", type=Path, required=True)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    a, b = own_times(args.a), own_times(args.vs)
    rows = sorted(set(a) | set(b), key=lambda k: -abs(a[k] - b[k]))
    print(f"{'function':<60} {'A s':>7} {'B s':>7} {'A - B':>7}")
    for k in rows[: args.top]:
        print(f"{k[:60]:<60} {a[k]:7.3f} {b[k]:7.3f} {a[k] - b[k]:7.3f}")
    print(
        f"{'all functions':<60} {sum(a.values()):7.3f} {sum(b.values()):7.3f} "
        f"{sum(a.values()) - sum(b.values()):7.3f}"
    )


if __name__ == "__main__":
    main()
