"""The JSON run report and Kafka-style log lines.

The report follows the shape of dbt's run_results.json (metadata, args, elapsed, one result
per unit of work) with Kafka's own cleaner numbers per partition (spec §8).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields

from compaction import __version__


CLEANED, SKIPPED, FAILED = "cleaned", "skipped", "failed"
MB = 1_048_576
REPORT_VERSION = 1


@dataclass
class PartitionResult:
    topic: str
    partition: int
    logDir: str
    status: str = SKIPPED
    reason: str | None = None
    dirtyRatio: float | None = None
    firstDirtyOffset: int | None = None
    firstUncleanableOffset: int | None = None
    endOffset: int | None = None
    bytesRead: int = 0
    bytesWritten: int = 0
    recordsRead: int = 0
    recordsWritten: int = 0
    invalidRecords: int = 0
    segmentsBefore: int = 0
    segmentsAfter: int = 0
    groups: int = 0
    seconds: float = 0.0
    recovery: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def build_report(results: list[PartitionResult], args: dict, timings: dict, started_ms: int) -> dict:
    totals = {
        "partitions": len(results),
        "cleaned": sum(r.status == CLEANED for r in results),
        "skipped": sum(r.status == SKIPPED for r in results),
        "failed": sum(r.status == FAILED for r in results),
        "bytesRead": sum(r.bytesRead for r in results),
        "bytesWritten": sum(r.bytesWritten for r in results),
        "recordsRead": sum(r.recordsRead for r in results),
        "recordsWritten": sum(r.recordsWritten for r in results),
    }
    return {
        "version": REPORT_VERSION,
        "metadata": {"tool": "kafka-offline-compaction", "toolVersion": __version__, "startedAtMs": started_ms},
        "args": args,
        "timings": timings,
        "totals": totals,
        "partitions": [_entry(r) for r in results],
    }


_FIELDS = tuple(f.name for f in fields(PartitionResult))


def _entry(r: PartitionResult) -> dict:
    """`asdict(r)` without its recursive deep copy (one field is a list of strings): 10x faster at
    10,000 partitions, where the report was a sixth of a dry run's time."""
    out = {name: getattr(r, name) for name in _FIELDS}
    out["recovery"] = list(r.recovery)
    return out


def dumps(report: dict) -> str:
    return json.dumps(report, indent=2, sort_keys=False) + "\n"
