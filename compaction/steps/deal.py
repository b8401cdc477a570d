"""Which task of the ranges stage merges which fine buckets, so that the tasks end together.

After the scan the tasks' work differs only in what is left: the merge and the rewrite. The
rewrite of the range holding a partition's newest segments needs nothing from the merge (no later
range can hold a key's latest record), so its task starts it at once, and it is the longest: a
key's latest record is more likely a late one. The merge's buckets go to the tasks with the least
rewrite ahead of them, estimated from what each range's scan counted:

- rewriting a range costs `READ_SECONDS` per byte read plus `KEPT_SECONDS` per byte it keeps;
- a range keeps its keys that no later range of its partition holds. For the newest range that
  is all of them; for an older one, if keys recur evenly, each of its keys is absent from the
  `after` records that follow it with probability exp(-after / K), K the partition's number of
  distinct keys, which the newest range's count gives: its `records` drew `keys` distinct ones,
  K (1 - exp(-records / K)) = keys;
- merging costs `MERGE_SECONDS` per summary row, a bucket holding 1/FINE_BUCKETS of the rows.

An estimate only decides who merges what; any dealing cleans the same bytes.
"""

from __future__ import annotations

import math
from typing import NamedTuple

# From the per-phase timings of `bench/ranges.py bench/out/vs_kafka/v2-2g-1p/kafka-0 --tasks 2` (the
# partition bench/vs_kafka.py --input v2 --gb 2 --partitions 1 generates):
# each task's rewrite of 1 GiB keeping ~70 or ~470 MiB, and the merge of ~1.7M summary rows.
READ_SECONDS = 0.29 / (1 << 30)
KEPT_SECONDS = 0.77 / (1 << 30)
MERGE_SECONDS = 70e-9


class RangeStats(NamedTuple):
    """What a range's scan counted: its bytes, records and distinct keys."""

    bytes: int
    records: int
    keys: int


def key_universe(newest: RangeStats) -> float:
    """K with K (1 - exp(-records / K)) = keys (inf when every record had its own key)."""
    n, k = newest.records, newest.keys
    if k >= n or k <= 0:
        return math.inf
    lo, hi = float(k), float(k)
    while hi * -math.expm1(-n / hi) < k:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid * -math.expm1(-n / mid) < k else (lo, mid)
    return hi


def rewrite_seconds(partition: list[RangeStats]) -> list[float]:
    """The estimated rewrite of each range of one partition (log order)."""
    universe = key_universe(partition[-1])
    out, after = [], 0
    for r in reversed(partition):
        kept = r.keys * (math.exp(-after / universe) if after else 1.0)
        out.append(READ_SECONDS * r.bytes + KEPT_SECONDS * r.bytes * min(1.0, kept / max(r.records, 1)))
        after += r.records
    return out[::-1]


def deal(rewrite: list[float], rows: int, buckets: int) -> list[list[int]]:
    """The buckets each task merges: each bucket in turn to the task whose rewrite plus merge so
    far is least (the lower task on a tie), every bucket costing `rows / buckets` rows."""
    load = list(rewrite)
    out: list[list[int]] = [[] for _ in load]
    for b in range(buckets):
        t = min(range(len(load)), key=lambda k: (load[k], k))
        out[t].append(b)
        load[t] += MERGE_SECONDS * rows / buckets
    return out


__all__ = ["RangeStats", "deal", "key_universe", "rewrite_seconds"]
