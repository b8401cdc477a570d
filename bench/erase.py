"""An erasing pass beside a plain compaction round on the same partition, in this process (no
Spark): the whole-partition task (stages.compact_partition) three ways,

* plain: the round's compaction (non-active segments, the active one read for producer state);
* erase + compaction: the same, `--erase-keys` with `--keys-listed` keys, the active segment
  rewritten erasing only;
* erase only: every segment its own erasing-only group (`--erase-only`),

and prints each one's wall and CPU seconds and its ratio to the plain round, plus the time to
parse and compile the key list. `--present` of the listed keys occur in the partition (taken from
its first segment), the rest are keys it does not hold (a request list: most keys live elsewhere).

    .venv/bin/python bench/erase.py [--records 200000] [--keys 50000] [--keys-listed 100000]
                                    [--present 1000] [--repeat 2]

The partition is generated once under bench/out/partition/ (bench/partition.py's layout); every
run writes `.cleaned` files next to the source and removes them (nothing is swapped in). Not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from partition import clean_up, partition_args, partition_dir, spec_for  # noqa: E402

from compaction.format.erase_keys import parse_key_file  # noqa: E402
from compaction.kernels.scan import scan_segment  # noqa: E402
from compaction.runtime.worker import prepare_worker  # noqa: E402
from compaction.settings import Settings  # noqa: E402
from compaction.spark.stages import compact_partition  # noqa: E402
from compaction.steps.erase import build_erase_set, compiled  # noqa: E402


def key_file(part: Path, listed: int, present: int) -> bytes:
    """`listed` keys in the file's hex form, up to `present` of them from the partition's first segment."""
    first = sorted(part.glob("*.log"))[0]
    scan = scan_segment(np.fromfile(first, np.uint8), str(first))
    present = list(dict.fromkeys(k for k in scan.keys_arrow().to_pylist() if k is not None))[
        : min(present, listed)
    ]
    absent = [b"absent-%016d" % i for i in range(listed - len(present))]
    return b"".join(b"hex:" + k.hex().encode() + b"\n" for k in present + absent)


def specs(part: Path, erase, erase_only: bool) -> list:
    base = spec_for(part)
    if erase is None:
        return [base]
    every = (*base.segments, *base.tail_segments)
    if erase_only:
        return [
            dataclasses.replace(
                base,
                group_id=i,
                segments=(s,),
                first_dirty_offset=0,
                upper_bound=0,
                tail_segments=(),
                erase=erase,
                erase_only=True,
            )
            for i, s in enumerate(every)
        ]
    active = dataclasses.replace(
        base, group_id=1, segments=base.tail_segments, tail_segments=(), erase=erase, erase_only=True
    )
    return [dataclasses.replace(base, tail_segments=(), erase=erase), active]


def timed(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    partition_args(ap, 200_000, 50_000, 16 << 20, 2)
    ap.add_argument("--keys-listed", type=int, default=100_000)
    ap.add_argument("--present", type=int, default=1000, help="listed keys the partition holds")
    args = ap.parse_args()
    part = partition_dir(args)
    clean_up(part)
    size = sum(f.stat().st_size for f in part.glob("*.log")) / float(1 << 20)
    text = key_file(part, args.keys_listed, args.present)
    wall, cpu, erase = timed(lambda: build_erase_set(parse_key_file(text, "keys")))
    print(f"partition {part}: {size:,.1f} MiB; {len(erase):,} listed keys parsed in {wall:.2f} s")
    wall, cpu, _ = timed(lambda: compiled(erase, "t"))
    print(f"key lookup compiled in {wall:.2f} s (once per worker and topic)")
    runs = {
        "plain": specs(part, None, False),
        "erase + compaction": specs(part, erase, False),
        "erase only": specs(part, erase, True),
    }
    worker = Settings.resolve().worker  # as a round's task gets them: this environment's knobs
    prepare_worker(worker)
    for s in runs.values():  # kernels loaded, imports done
        compact_partition(s, worker.scan_reuse_max_bytes)
        clean_up(part)
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.repeat):
        for name, s in runs.items():
            wall, cpu, rows = timed(lambda s=s: compact_partition(s, worker.scan_reuse_max_bytes))
            clean_up(part)
            assert not any(r.get("error") for r in rows), rows
            erased = sum(int(r.get("erased_records") or 0) for r in rows)
            print(
                f"  {name}: wall {wall:.2f} s, CPU {cpu:.2f} s, {size / wall:,.0f} MiB/s"
                + (f", {erased:,} records erased" if s[0].erase is not None else ""),
                flush=True,
            )
            best[name] = min(best.get(name, (wall, cpu)), (wall, cpu))
    plain = best["plain"]
    for name in ("erase + compaction", "erase only"):
        w, c = best[name]
        print(f"{name} / plain (best of {args.repeat}): wall {w / plain[0]:.2f}x, CPU {c / plain[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
