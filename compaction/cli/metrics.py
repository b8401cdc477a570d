"""`--metrics-file`: a round's totals and timings in Prometheus' text exposition format, for
node_exporter's textfile collector (the convention for batch jobs: gauges of the last run, a
`last_success` timestamp an alert can age). Written atomically (temp file, rename), so the
collector never reads half a file.

Every series carries two labels: `round`, which rounds it belongs to (`--metrics-name`, else the
log dirs' absolute URIs), so that rounds over other log dirs on the same host write series of their
own (node_exporter refuses two files with the same series); and `mode`, `round` or `dry_run`. A dry
run (or `--plan-only`) writes its own file (`dry_run_path`) and never the rounds' series: the last
real round's numbers and its success time stay as they were.
"""

from __future__ import annotations

import re

from compaction import __version__
from compaction.runtime.storage import Storage

PREFIX = "kafka_compaction"

_COUNTS = (
    ("bytesRead", "last_run_read_bytes", "Bytes of segments read by the last round's rewrite."),
    ("bytesWritten", "last_run_written_bytes", "Bytes of cleaned segments the last round wrote."),
    ("recordsRead", "last_run_read_records", "Records read by the last round's rewrite."),
    ("recordsWritten", "last_run_written_records", "Records the last round kept."),
    (
        "erasedRecords",
        "last_run_erased_records",
        "Records of --erase-keys' listed keys the last round removed.",
    ),
)


def round_name(args: dict) -> str:
    """The `round` label: `--metrics-name`, else the log dirs (absolute, credentials redacted)."""
    return args.get("metrics_name") or ",".join(args.get("log_dirs") or ())


def dry_run_path(path: str) -> str:
    """Where a dry run writes its metrics: `x.prom` -> `x.dry-run.prom` (still read by the collector)."""
    return path[: -len(".prom")] + ".dry-run.prom" if path.endswith(".prom") else path + ".dry-run"


def _label(value: str) -> str:
    """A label value as the text format escapes it."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(report: dict, exit_code: int, finished_s: float, previous_success_s: float | None) -> str:
    """The text file. `previous_success_s`: the last successful round's time (carried over from
    the file a failed round replaces, so an alert on its age keeps working). A round that selected
    no partition (`--allow-empty`) is no success: it cleaned nothing an alert could count on."""
    totals, timings = report["totals"], report["timings"]
    args = report.get("args", {})
    dry = "true" if args.get("dry_run") else "false"
    base = f'round="{_label(round_name(args))}",mode="{"dry_run" if dry == "true" else "round"}"'
    lines: list[str] = []

    def metric(name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {PREFIX}_{name} {help_text}")
        lines.append(f"# TYPE {PREFIX}_{name} gauge")
        for labels, v in samples:
            labels = "{" + base + ("," + labels[1:-1] if labels else "") + "}"
            lines.append(f"{PREFIX}_{name}{labels} {_num(v)}")

    metric("info", "The tool's version.", [(f'{{version="{__version__}"}}', 1)])
    metric("last_run_timestamp_seconds", "When the last round finished (Unix time).", [("", finished_s)])
    metric(
        "last_run_exit_code",
        "The last round's exit code (0 ok, 1 a partition failed, 75 the round itself failed).",
        [("", exit_code)],
    )
    metric("last_run_dry_run", "1 if the last round was a dry run.", [("", 1 if dry == "true" else 0)])
    success = finished_s if exit_code == 0 and totals["partitions"] and dry == "false" else previous_success_s
    if success is not None and dry == "false":
        metric(
            "last_success_timestamp_seconds",
            "When a round last finished with exit code 0 (Unix time).",
            [("", success)],
        )
    metric(
        "last_run_partitions",
        "Partitions of the last round by status.",
        [(f'{{status="{s}"}}', totals[s]) for s in ("cleaned", "skipped", "failed")],
    )
    for key, name, help_text in _COUNTS:
        metric(name, help_text, [("", totals.get(key, 0))])
    metric(
        "last_run_reclaimed_bytes",
        "Bytes the last round freed (read minus written).",
        [("", totals["bytesRead"] - totals["bytesWritten"])],
    )
    phases = [
        (f'{{phase="{_snake(k.removesuffix("Seconds"))}"}}', v)
        for k, v in timings.items()
        if k.endswith("Seconds")
    ]
    metric(
        "last_run_duration_seconds",
        "Seconds of each phase of the last round (total: the whole round).",
        phases,
    )
    return "\n".join(lines) + "\n"


def previous_success(text: str) -> float | None:
    m = re.search(rf"^{PREFIX}_last_success_timestamp_seconds(?:{{.*}})?\s+(\S+)\s*$", text, re.M)
    return float(m.group(1)) if m else None


def write(path: str, report: dict, exit_code: int, finished_s: float) -> None:
    if report.get("args", {}).get("dry_run"):
        path = dry_run_path(path)
    storage, local = Storage.for_uri(path)
    try:
        old = storage.read_bytes(local).decode("utf-8", "replace") if storage.exists(local) else ""
    except OSError:
        old = ""
    text = render(report, exit_code, finished_s, previous_success(old))
    storage.write_atomic(local, text.encode())


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _num(v: float) -> str:
    return repr(float(v)) if isinstance(v, float) else str(int(v))
