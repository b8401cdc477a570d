"""Generated partitions and the group specs of their non-active segments, for tests that run the
rewrite (or the ranges stage) directly, without Spark."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from genkit import run_generate

from compaction.format import naming
from compaction.runtime.storage import Storage
from compaction.steps.group import GroupSpec, SourceSegment
from compaction.steps.results import MEASURED

NOW_MS = 1_795_305_600_000


def generate(out: Path, flags: str = "", *more: str) -> Path:
    """A log dir of one partition `t-0` (its path returned), the generator's `flags` on one line."""
    run_generate(out, f"--topics t:1 --seed 3 --timestamp-start {NOW_MS - 3_600_000} {flags}", *more)
    return out / "t-0"


def specs_for(
    part: Path, groups: int, first_dirty: int = 0, upper_bound: int | None = None
) -> list[GroupSpec]:
    """The non-active segments cut into `groups` groups, the active one as the last group's tail
    (with `upper_bound`, a segment's base: the segments below it, and those from it on as the
    tail)."""
    segs = []
    for f in sorted(part.glob("*.log")):
        st_ = f.stat()
        segs.append(
            SourceSegment(naming.parse_segment_file_name(f.name).base_offset, st_.st_size, st_.st_mtime_ns)
        )
    cut = len(segs) - 1 if upper_bound is None else [s.base_offset for s in segs].index(upper_bound)
    body, tail = segs[:cut], tuple(segs[cut:])
    cuts = np.array_split(np.arange(len(body)), groups)
    return [
        GroupSpec(
            group_id=10 + n,
            topic="t",
            partition=0,
            storage=Storage.local(),
            part_path=str(part),
            segments=tuple(body[i] for i in idx),
            first_dirty_offset=first_dirty,
            upper_bound=tail[0].base_offset,
            now_ms=NOW_MS,
            delete_retention_ms=60_000,
            legacy_delete_horizon_ms=0,
            index_interval_bytes=4096,
            tail_segments=tail if n == groups - 1 else (),
        )
        for n, idx in enumerate(cuts)
    ]


def outcomes(rows: list[dict]) -> list[dict]:
    """Task rows without what measures the run (`results.MEASURED`): what it read and wrote."""
    return [{k: v for k, v in r.items() if k not in MEASURED} for r in rows]
