"""The JSON run report and Kafka-style log lines.

The report follows the shape of dbt's run_results.json (metadata, args, elapsed, one result
per unit of work) with Kafka's own cleaner numbers per partition (docs/kafka-rules.md#cleaner-stats).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields

from compaction import __version__

CLEANED, SKIPPED, FAILED = "cleaned", "skipped", "failed"
ELIGIBLE = "eligible"  # a dry run's verdict: a round would clean it (sizes as it would write them)
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
    dirtyBytes: int = 0  # Kafka's cleanable bytes: the dirty section the round reads
    reclaimableBytes: int = 0  # .log bytes the round frees (bytesRead - bytesWritten)
    reclaimableRecords: int = 0
    segmentsBefore: int = 0
    segmentsAfter: int = 0
    groups: int = 0
    seconds: float = 0.0
    # --erase-keys (None otherwise): records and key+value bytes of listed keys removed, and how
    # many of the keys that apply to the topic were met in the partition or not (counts only).
    erasedRecords: int | None = None
    erasedBytes: int | None = None
    eraseKeysFound: int | None = None
    eraseKeysNotFound: int | None = None
    recovery: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class RoundFailure:
    """The round failed as a whole: in which phase (`planning`, `stages`, `commit`) and why (one
    line). The partitions it was working on are reported `failed` with the same reason."""

    phase: str
    reason: str


def build_report(
    results: list[PartitionResult],
    args: dict,
    timings: dict,
    started_ms: int,
    failure: RoundFailure | None = None,
    where: dict | None = None,
) -> dict:
    """`where`: metadata of the run's place (`host`, `sparkAppId`, `finishedAtMs`)."""
    totals = {
        "partitions": len(results),
        "cleaned": sum(r.status == CLEANED for r in results),
        "skipped": sum(r.status == SKIPPED for r in results),
        "failed": sum(r.status == FAILED for r in results),
        "bytesRead": sum(r.bytesRead for r in results),
        "bytesWritten": sum(r.bytesWritten for r in results),
        "recordsRead": sum(r.recordsRead for r in results),
        "recordsWritten": sum(r.recordsWritten for r in results),
        "eligible": sum(r.status == ELIGIBLE for r in results),
        "dirtyBytes": sum(r.dirtyBytes for r in results),
        "reclaimableBytes": sum(r.reclaimableBytes for r in results),
        "reclaimableRecords": sum(r.reclaimableRecords for r in results),
        "erasedRecords": sum(r.erasedRecords or 0 for r in results),
        "erasedBytes": sum(r.erasedBytes or 0 for r in results),
    }
    return {
        "version": REPORT_VERSION,
        "metadata": {
            "tool": "kafka-offline-compaction",
            "toolVersion": __version__,
            "startedAtMs": started_ms,
            **(where or {}),
        },
        "args": args,
        "timings": timings,
        "failure": failure and {"phase": failure.phase, "reason": failure.reason},
        "totals": totals,
        "topics": topic_totals(results),
        "partitions": [_entry(r) for r in results],
    }


_TOPIC_SUMS = ("dirtyBytes", "bytesRead", "bytesWritten", "reclaimableBytes", "reclaimableRecords")


def topic_totals(results: list[PartitionResult]) -> dict[str, dict]:
    """Per topic: partitions and the sums of the byte and record counts (what a round frees where)."""
    out: dict[str, dict] = {}
    for r in results:
        t = out.setdefault(r.topic, {"partitions": 0, **dict.fromkeys(_TOPIC_SUMS, 0)})
        t["partitions"] += 1
        for name in _TOPIC_SUMS:
            t[name] += getattr(r, name)
    return out


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f}"


def table_order(e: dict) -> tuple:
    """Failed partitions first, then the most reclaimed (or reclaimable) bytes first."""
    return e["status"] != FAILED, -e["reclaimableBytes"], e["topic"], e["partition"]


def reclaim_table(report: dict) -> str:
    """The console's table after any run: per partition (failed ones first, then the most bytes
    freed) its dirty ratio and bytes and what the round freed (a dry run: would free; a plan,
    which scans nothing, knows only the dirty bytes), then per topic and overall."""
    args = report.get("args", {})
    freed = (
        ()
        if args.get("plan_only") or args.get("recover_only")
        else (
            ("reclaimable MiB", "reclaimable records")
            if args.get("dry_run")
            else ("reclaimed MiB", "records removed")
        )
    )
    rows = [("partition", "status", "dirty ratio", "dirty MiB", *freed)]

    def sizes(e: dict) -> tuple:
        return (_mib(e["dirtyBytes"]), _mib(e["reclaimableBytes"]), f"{e['reclaimableRecords']:,}")[
            : 1 + len(freed)
        ]

    for e in sorted(report["partitions"], key=table_order):
        ratio = "-" if e["dirtyRatio"] is None else f"{e['dirtyRatio']:.3f}"
        rows.append((f"{e['topic']}-{e['partition']}", e["status"], ratio, *sizes(e)))
    for topic, t in sorted(report["topics"].items(), key=lambda kv: -kv[1]["reclaimableBytes"]):
        rows.append((f"{topic} (topic)", f"{t['partitions']} partitions", "", *sizes(t)))
    tot = report["totals"]
    rows.append(("all", f"{tot['partitions']} partitions", "", *sizes(tot)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in rows
    )


_FIELDS = tuple(f.name for f in fields(PartitionResult))


def _entry(r: PartitionResult) -> dict:
    """`asdict(r)` without its recursive deep copy (one field is a list of strings): at 10,000
    partitions that copy made the report a large share of a dry run (bench/plan_scale.py)."""
    out = {name: getattr(r, name) for name in _FIELDS}
    out["recovery"] = list(r.recovery)
    return out


def dumps(report: dict) -> str:
    return json.dumps(report, indent=2, sort_keys=False) + "\n"
