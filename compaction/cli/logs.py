"""The driver's log lines: one line per event, text or JSON (`--log-format`).

Every record is one line (Airflow and log shippers split on newlines), a partition's result is
one record at the level an alert needs (failed: ERROR, skipped for a reason that is not Kafka's
policy: WARNING), and in JSON each line carries the record's structured fields (`extra={"fields":
{...}}`) next to its message.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from compaction.settings import LogFormat
from compaction.steps import report as rpt

log = logging.getLogger("compaction")

MB = 1_048_576
TEXT_FORMAT = "[%(asctime)s] %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", ...fields}` per line (ECS-like names)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class OneLineFormatter(logging.Formatter):
    """The text format, with any newline of a message (or traceback) escaped: one record, one line."""

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace("\n", "\\n").replace("\t", " ")


def setup(log_format: LogFormat = "text", stream=None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else OneLineFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per closed gateway connection


# Reasons a partition is skipped by Kafka's own rules (the cleaner would skip it too): INFO.
POLICY_REASONS = (
    "cleanup.policy is delete",
    "nothing cleanable",
    "below min.cleanable.dirty.ratio",
    "eligible (plan only)",
    "eligible (recover only)",
)


def level_of(entry: dict) -> int:
    if entry["status"] == rpt.FAILED:
        return logging.ERROR
    if entry["status"] == rpt.SKIPPED and not str(entry.get("reason") or "").startswith(POLICY_REASONS):
        return logging.WARNING
    return logging.INFO


def partition_line(e: dict) -> str:
    """One line per partition; a cleaned one in the words of Kafka's `CleanerThread.recordStats`."""
    return _partition_line(e) + _erased(e)


def _erased(e: dict) -> str:
    """--erase-keys: the counts (never a key)."""
    if e.get("erasedRecords") is None:
        return ""
    return (
        f"; erased {e['erasedRecords']} records ({e['erasedBytes']} key+value bytes) of "
        f"{e['eraseKeysFound']} listed keys, {e['eraseKeysNotFound']} listed keys not found"
    )


def _partition_line(e: dict) -> str:
    name = f"{e['topic']}-{e['partition']}"
    ratio = "" if e.get("dirtyRatio") is None else f", dirty ratio {e['dirtyRatio']:.3f}"
    if e["status"] == rpt.ELIGIBLE and str(e.get("reason") or "").endswith(("(plan only)", "(recover only)")):
        return f"{name}: {e['reason']}: a round would take it{ratio}: {e['dirtyBytes'] / MB:,.1f} MB dirty"
    if e["status"] == rpt.ELIGIBLE:
        return (
            f"{name}: eligible, a round would clean it{ratio}: {e['dirtyBytes'] / MB:,.1f} MB dirty, "
            f"{e['reclaimableBytes'] / MB:,.1f} MB and {e['reclaimableRecords']} records reclaimable"
        )
    if e["status"] != rpt.CLEANED:
        return f"{name}: {e['status']} ({e.get('reason') or 'no reason given'}){ratio}"
    read_mb, written_mb = e["bytesRead"] / MB, e["bytesWritten"] / MB
    secs = max(float(e.get("seconds") or 0.0), 1e-9)
    size_cut = 100 * (1 - e["bytesWritten"] / e["bytesRead"]) if e["bytesRead"] else 0.0
    msg_cut = 100 * (1 - e["recordsWritten"] / e["recordsRead"]) if e["recordsRead"] else 0.0
    invalid = f"; {e['invalidRecords']} invalid messages dropped" if e.get("invalidRecords") else ""
    return (
        f"{name}: cleaned (dirty section = [{e['firstDirtyOffset']}, {e['endOffset']}]{ratio}): "
        f"{read_mb:,.1f} MB of log processed in {secs:,.1f} seconds ({read_mb / secs:,.1f} MB/sec); "
        f"start size {read_mb:,.1f} MB ({e['recordsRead']} messages), end size {written_mb:,.1f} MB "
        f"({e['recordsWritten']} messages): {size_cut:.1f}% size reduction ({msg_cut:.1f}% fewer "
        f"messages){invalid}"
    )


_FIELDS = (
    "topic",
    "partition",
    "logDir",
    "status",
    "reason",
    "dirtyRatio",
    "dirtyBytes",
    "bytesRead",
    "bytesWritten",
    "recordsRead",
    "recordsWritten",
    "invalidRecords",
    "reclaimableBytes",
    "reclaimableRecords",
    "seconds",
    "erasedRecords",
    "erasedBytes",
    "eraseKeysFound",
    "eraseKeysNotFound",
)


def log_partition(entry: dict) -> None:
    fields = {"event": "partition", **{k: entry.get(k) for k in _FIELDS}}
    log.log(level_of(entry), partition_line(entry), extra={"fields": fields})


ROUND, DRY_RUN, PLAN_ONLY, RECOVER_ONLY = "round", "dry run", "plan", "recovery"


def mode_of(args: dict) -> str:
    """What kind of run a report's `args` describe, in the words of its summary."""
    if args.get("plan_only"):
        return PLAN_ONLY
    if args.get("dry_run"):
        return DRY_RUN
    return RECOVER_ONLY if args.get("recover_only") else ROUND


def totals_line(totals: dict, seconds: float | None, mode: str = ROUND) -> str:
    """The summary, every word true for the mode: a round cleaned and reclaimed; a dry run found
    eligible and reclaimable, and wrote nothing; a plan did not scan, so it knows no reclaimable bytes."""
    took = "" if seconds is None else f" in {seconds:,.1f} s"
    mb = lambda key: f"{totals.get(key, 0) / MB:,.1f}"  # noqa: E731
    counts = f"{totals['partitions']} partitions"
    failed = f"{totals['skipped']} skipped, {totals['failed']} failed"
    if mode == ROUND:
        return (
            f"round done{took}: {counts}, {totals['cleaned']} cleaned, {failed}; {mb('bytesRead')} MB read, "
            f"{mb('bytesWritten')} MB written, {mb('reclaimableBytes')} MB reclaimed"
        )
    eligible = f"{counts}, {totals.get('eligible', 0)} eligible, {failed}"
    if mode == DRY_RUN:
        return (
            f"dry run done{took}: {eligible}; {mb('dirtyBytes')} MB dirty, {mb('reclaimableBytes')} MB "
            f"and {totals.get('reclaimableRecords', 0)} records reclaimable; nothing written"
        )
    if mode == PLAN_ONLY:
        return (
            f"plan done{took}: {eligible}; {mb('dirtyBytes')} MB dirty (not scanned: --dry-run measures what a "
            "round would free); nothing written"
        )
    return (
        f"recovery done{took}: {counts}, {totals.get('eligible', 0)} eligible (not compacted: "
        f"--recover-only), {failed}"
    )


def log_totals(totals: dict, seconds: float | None, mode: str = ROUND) -> None:
    level = logging.ERROR if totals["failed"] else logging.INFO
    log.log(
        level,
        totals_line(totals, seconds, mode),
        extra={"fields": {"event": "totals", "mode": mode, **totals}},
    )


# What an operator does after a failed round, by the phase it failed in.
_AFTER_FAILURE = {
    "planning": "nothing was compacted; rerun the round once the cause is fixed",
    "stages": (
        "nothing was committed: the {failed} partition(s) it was cleaning are reported failed and "
        "their segments are unchanged; rerun the round (it first removes the .cleaned files left "
        "behind); if it fails alike again, the partition at fault is among those the failed task "
        "held (named in the cause): --topics leaves it out"
    ),
    "commit": (
        "{cleaned} partition(s) were committed (cleaned), {failed} failed; rerun the round: its "
        "recovery first completes or rolls back each interrupted swap (--recover-only does only "
        "that, without cleaning; a broker loading the dir recovers it too)"
    ),
}


def log_round_failure(failure: dict, totals: dict) -> None:
    """The one line that says the round failed as a whole, why, and what to do."""
    then = _AFTER_FAILURE[failure["phase"]].format(**totals)
    log.error(
        "round failed (%s): %s; %s",
        failure["phase"],
        failure["reason"],
        then,
        extra={"fields": {"event": "round_failed", **failure}},
    )
