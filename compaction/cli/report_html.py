"""The run report as one self-contained HTML page (`--report-html`): a pure function of the report
dict (`report.build_report`), so the page shows exactly the JSON report's numbers and, like it,
only redacted URIs.

A failed run says so first: a banner above everything, the word in the page's title, and the failed
partitions at the top of the table with their reasons. The head says where and how the run ran (the
log dirs' absolute URIs, the host, Spark's application id, the times in ISO 8601, the options and
thresholds that decided), so that a page passed on answers the questions it raises.

The page carries its own style and an inline SVG chart and references nothing else: no script, no
font, no stylesheet or image to fetch, so it opens from an archive or an air-gapped host. Every
string from the report (topic names, reasons, paths) is escaped.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from html import escape

from compaction.cli import logs
from compaction.cli.options import KAFKA_FLAGS
from compaction.cli.report_chart import AFTER_FILL, BEFORE_FILL, MAX_BARS, bar_chart, human_bytes
from compaction.steps.report import FAILED, table_order

# Failed partitions the banner names before it says "and N more".
BANNER_NAMES = 5


NO_VALUE_TEXT = "\u2013"  # a dash: no value, as opposed to a zero


@dataclass(frozen=True)
class Wording:
    """The words of one kind of run: a dry run predicts, a round reports what it did."""

    title: str
    before: str
    after: str
    freed: str
    records: str
    share_of: str  # what the freed bytes are a share of
    scanned: bool = True  # False: nothing was read, so the byte columns have no value


DRY_RUN = Wording(
    "Dry run: what a compaction round would free",
    "read by a round",
    "written by a round",
    "reclaimable bytes",
    "reclaimable records",
    "of the bytes a round reads",
)
ROUND = Wording(
    "Compaction round",
    "bytes read",
    "bytes written",
    "reclaimed bytes",
    "records removed",
    "of the bytes read",
)
PLAN_ONLY = Wording(
    "Plan only: what a round would clean",
    "read by a round",
    "written by a round",
    "reclaimable bytes",
    "reclaimable records",
    "",
    scanned=False,
)
RECOVER_ONLY = Wording(
    "Recovery only", "bytes read", "bytes written", "reclaimed bytes", "records removed", "", scanned=False
)


def wording_of(args: dict) -> Wording:
    return {
        logs.ROUND: ROUND,
        logs.DRY_RUN: DRY_RUN,
        logs.PLAN_ONLY: PLAN_ONLY,
        logs.RECOVER_ONLY: RECOVER_ONLY,
    }[logs.mode_of(args)]


def render(report: dict) -> str:
    """The page of `report` (the dict `--report` writes as JSON)."""
    words = wording_of(report.get("args") or {})
    partitions = sorted(report.get("partitions") or [], key=table_order)
    topics = sorted((report.get("topics") or {}).items(), key=lambda kv: (-kv[1]["reclaimableBytes"], kv[0]))
    totals = report.get("totals") or {}
    failed = bool(report.get("failure")) or any(e.get("status") == FAILED for e in partitions)
    order = f"failed first, then most {words.freed}" if failed else f"most {words.freed} first"
    body = "\n".join(
        (
            _banner(report, partitions, totals, words),
            _header(report, words),
            _cards(totals, words),
            _chart_section(topics, words),
            _section("Per topic", _topic_table(topics, totals, words)),
            _section(f"Per partition, {order}", _partition_table(partitions, words)),
            _section("Options and thresholds", _options_table(report.get("args") or {})),
            f"<footer>{escape(_tool(report))} &middot; report version {escape(str(report.get('version', '')))}"
            "</footer>",
        )
    )
    title = f"{'FAILED: ' if failed else ''}{words.title} \u2013 {_started(report)}"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n"
        f"<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


# --- the head of the page ------------------------------------------------------------------------


def _tool(report: dict) -> str:
    meta = report.get("metadata") or {}
    return f"{meta.get('tool', 'kafka-offline-compaction')} {meta.get('toolVersion', '')}".strip()


def iso(ms: int | None) -> str:
    """Epoch milliseconds as ISO 8601 UTC (`2026-11-28T06:40:29.123Z`)."""
    if ms is None:
        return "unknown"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{int(ms) % 1000:03d}Z"


def _started(report: dict) -> str:
    return iso((report.get("metadata") or {}).get("startedAtMs"))


def _banner(report: dict, partitions: list[dict], totals: dict, words: Wording) -> str:
    """The outcome, above everything: a failure cannot be missed, a success says what it did."""
    failure = report.get("failure")
    failed = [e for e in partitions if e.get("status") == FAILED]
    n = totals.get("partitions", len(partitions))
    if failure or failed:
        names = ", ".join(f"{e['topic']}-{e['partition']}" for e in failed[:BANNER_NAMES])
        more = f" and {len(failed) - BANNER_NAMES} more" if len(failed) > BANNER_NAMES else ""
        parts = []
        if failure:
            parts.append(f"The round failed ({failure.get('phase')}): {failure.get('reason')}.")
        if failed:
            parts.append(
                f"{len(failed)} of {n} partitions failed: {names}{more}; listed first below, with "
                "their reasons."
            )
        return (
            f'<div id="outcome" class="banner failed" role="alert"><strong>FAILED</strong> '
            f"{escape(' '.join(parts))}</div>"
        )
    done = [f"{totals[s]:,} {s}" for s in ("cleaned", "eligible", "skipped") if totals.get(s)]
    return (
        f'<div id="outcome" class="banner ok"><strong>OK</strong> {escape(words.title)}: {n:,} partitions'
        f"{escape(', ' + ', '.join(done) if done else '')}, none failed.</div>"
    )


def _header(report: dict, words: Wording) -> str:
    args = report.get("args") or {}
    meta_in = report.get("metadata") or {}
    facts = [f"started {_started(report)}"]
    if meta_in.get("finishedAtMs") is not None:
        facts.append(f"finished {iso(meta_in['finishedAtMs'])}")
    seconds = (report.get("timings") or {}).get("totalSeconds")
    if seconds is not None:
        facts.append(f"took {seconds:,.1f} s")
    if meta_in.get("host"):
        facts.append(f"host {meta_in['host']}")
    if meta_in.get("sparkAppId"):
        facts.append(f"Spark application {meta_in['sparkAppId']}")
    if args.get("now_ms") is not None:
        facts.append(f"clock {iso(args['now_ms'])} (--now-ms {args['now_ms']})")
    if args.get("topics"):
        facts.append(f"topics {args['topics']}")
    if args.get("partitions"):
        facts.append(f"partitions {', '.join(args['partitions'])}")
    meta = " &middot; ".join(escape(f) for f in facts)
    dirs = "".join(f"<li><code>{escape(str(d))}</code></li>" for d in args.get("log_dirs") or [])
    dir_list = f'<ul class="dirs" aria-label="log dirs">{dirs}</ul>\n' if dirs else ""
    return f'<header>\n<h1>{escape(words.title)}</h1>\n<p class="meta">{meta}</p>\n{dir_list}</header>'


def _card(label: str, value: str, detail: str) -> str:
    return (
        f'<div class="card"><div class="card-label">{escape(label)}</div>'
        f'<div class="card-value">{escape(value)}</div>'
        f'<div class="card-detail">{escape(detail)}</div></div>'
    )


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else NO_VALUE_TEXT


def _cards(totals: dict, words: Wording) -> str:
    counts = [f"{totals[s]:,} {s}" for s in ("eligible", "cleaned", "skipped", "failed") if totals.get(s)]
    dirty = totals.get("dirtyBytes", 0)
    cards = [
        _card("partitions", f"{totals.get('partitions', 0):,}", ", ".join(counts) or "none"),
        _card("dirty bytes", human_bytes(dirty), f"{dirty:,} bytes"),
    ]
    if words.scanned:
        freed, before = totals.get("reclaimableBytes", 0), totals.get("bytesRead", 0)
        share = f", {_share(freed, before)} {words.share_of}" if before else ""
        records = totals.get("reclaimableRecords", 0)
        cards.append(_card(words.freed, human_bytes(freed), f"{freed:,} bytes{share}"))
        cards.append(_card(words.records, f"{records:,}", f"of {totals.get('recordsRead', 0):,} records"))
    return '<section class="cards">\n' + "\n".join(cards) + "\n</section>"


def _section(heading: str, content: str) -> str:
    return f"<section>\n<h2>{escape(heading)}</h2>\n{content}\n</section>"


def _chart_section(topics: list[tuple[str, dict]], words: Wording) -> str:
    heading = "Log bytes before and after, per topic"
    if not words.scanned:
        return _section(heading, '<p class="empty">This run read no segments: no bytes to compare.</p>')
    if not topics:
        return _section(heading, '<p class="empty">No partitions in this run.</p>')
    by_size = sorted(topics, key=lambda kv: (-kv[1]["bytesRead"], kv[0]))
    groups = [(name, t["bytesRead"], t["bytesWritten"]) for name, t in by_size]
    parts = [
        f'<p class="legend"><span class="swatch before"></span>{escape(words.before)}'
        f'<span class="swatch after"></span>{escape(words.after)}</p>',
        '<p class="note">The .log bytes of the segments a round rewrites: a partition it does not clean '
        "adds none.</p>",
        f'<div class="chart-box">{bar_chart(groups)}</div>',
    ]
    if len(groups) > MAX_BARS:
        parts.append(
            f'<p class="note">The {MAX_BARS} largest of {len(groups)} topics; the table lists them all.</p>'
        )
    return _section(heading, "\n".join(parts))


# --- the tables ----------------------------------------------------------------------------------


def _td(value: int | str | None, *, num: bool = True, bytes_: bool = False) -> str:
    """A cell; a number exact with thousands separators, a byte count's human size shown after it
    (by the style, from `data-human`: the cell's text stays the exact number)."""
    if value is None:
        return f'<td class="num">{NO_VALUE_TEXT}</td>'
    if isinstance(value, str):
        return f'<td class="num">{escape(value)}</td>' if num else f"<td>{escape(value)}</td>"
    tip = f' data-human="{escape(human_bytes(value))}"' if bytes_ else ""
    return f'<td class="num"{tip}>{value:,}</td>'


def _table(table_id: str, heads: list[tuple[str, bool]], rows: list[str], foot: str = "") -> str:
    """`heads`: (label, is a number column)."""
    ths = "".join(f'<th class="num">{escape(h)}</th>' if num else f"<th>{escape(h)}</th>" for h, num in heads)
    tfoot = f"\n<tfoot>{foot}</tfoot>" if foot else ""
    return (
        f'<table id="{table_id}">\n<thead><tr>{ths}</tr></thead>\n<tbody>\n'
        + "\n".join(rows)
        + f"\n</tbody>{tfoot}\n</table>"
    )


def _scan_cells(entry: dict, words: Wording) -> str:
    """The columns a scan measures: none when the run read nothing."""
    keys = ("bytesRead", "bytesWritten", "reclaimableBytes")
    if not words.scanned:
        return _td(None) * 4
    return "".join(_td(entry.get(k), bytes_=True) for k in keys) + _td(entry.get("reclaimableRecords"))


def _scan_heads(words: Wording) -> list[tuple[str, bool]]:
    return [(words.before, True), (words.after, True), (words.freed, True), (words.records, True)]


def _topic_table(topics: list[tuple[str, dict]], totals: dict, words: Wording) -> str:
    heads = [
        ("topic", False),
        ("partitions", True),
        ("dirty bytes", True),
        *_scan_heads(words),
        ("saving", True),
    ]
    rows = [_topic_row(name, t, words) for name, t in topics]
    return _table("topics", heads, rows, _topic_row("all topics", totals, words))


def _topic_row(name: str, t: dict, words: Wording) -> str:
    saving = _share(t.get("reclaimableBytes", 0), t.get("bytesRead", 0)) if words.scanned else None
    return (
        f"<tr>{_td(name, num=False)}{_td(t.get('partitions'))}{_td(t.get('dirtyBytes'), bytes_=True)}"
        f"{_scan_cells(t, words)}{_td(saving)}</tr>"
    )


def _partition_table(partitions: list[dict], words: Wording) -> str:
    heads = [
        ("topic", False),
        ("partition", True),
        ("status", False),
        ("dirty ratio", True),
        ("dirty bytes", True),
        *_scan_heads(words),
        ("reason", False),
    ]
    rows = [_partition_row(e, words) for e in partitions]
    if not rows:
        rows = [f'<tr><td colspan="{len(heads)}" class="empty">No partitions in this run.</td></tr>']
    return _table("partitions", heads, rows)


def _partition_row(e: dict, words: Wording) -> str:
    ratio = None if e.get("dirtyRatio") is None else f"{e['dirtyRatio']:.3f}"
    status = str(e.get("status", ""))
    badge = re.sub(r"[^a-z]", "", status.lower())  # a class name, whatever the report holds
    return (
        f"<tr>{_td(str(e['topic']), num=False)}{_td(e['partition'])}"
        f'<td><span class="status {badge}">{escape(status)}</span></td>{_td(ratio)}'
        f"{_td(e.get('dirtyBytes'), bytes_=True)}{_scan_cells(e, words)}"
        f'<td class="reason">{escape(str(e.get("reason") or ""))}</td></tr>'
    )


# --- the options that decided ---------------------------------------------------------------------


def _options_table(args: dict) -> str:
    """Kafka's configs the round decided with (job-wide: a flag or --config's topic-level entries;
    the broker's server.properties; else Kafka's default), the per-topic overrides, and the job's
    own options."""
    job, broker = args.get("kafka_config") or {}, args.get("broker_config") or {}
    rows = []
    for flag, name, _, default in KAFKA_FLAGS:
        if name in job:
            value, source = job[name], f"{flag} or --config"
        elif name in broker:
            value, source = broker[name], "--config (broker)"
        else:
            value, source = default, "Kafka's default"
        rows.append((name, value, source))
    for topic, configs in sorted((args.get("topic_config") or {}).items()):
        rows += [(f"{topic}: {k}", v, "--topic-config") for k, v in sorted(configs.items())]
    rate = args.get("io_max_bytes_per_second")
    rows += [
        (
            "log.cleaner.io.max.bytes.per.second",
            "unthrottled" if rate is None else f"{human_bytes(int(rate))}/s",
            "--io-max-bytes-per-second",
        ),
        (
            "max inflated batch",
            human_bytes(args["max_inflated_batch_bytes"])
            if args.get("max_inflated_batch_bytes")
            else NO_VALUE_TEXT,
            "--max-inflated-batch-bytes",
        ),
        (
            "read / write mode",
            f"{args.get('read_mode')} / {args.get('write_mode')}",
            "--read-mode, --write-mode",
        ),
        ("tasks per core", args.get("tasks_per_core"), "--tasks-per-core"),
    ]
    if args.get("erase_keys"):
        rows.append(
            (
                "erase keys",
                args["erase_keys"],
                "--erase-keys" + (" --erase-only" if args.get("erase_only") else ""),
            )
        )
    if args.get("ignore_broker_lock"):
        rows.append(("broker lock", "ignored", "--ignore-broker-lock"))
    cells = [
        f"<tr><td><code>{escape(str(n))}</code></td><td>{escape(str(v))}</td><td>{escape(s)}</td></tr>"
        for n, v, s in rows
    ]
    return _table("options", [("setting", False), ("value", False), ("from", False)], cells)


# Our own style, inline: system fonts only (a web font would be a fetch).
STYLE = (
    f"""
:root {{ --before: {BEFORE_FILL}; --after: {AFTER_FILL}; }}"""
    + """
:root { color-scheme: light; --ink: #1c2430; --muted: #5b6776; --line: #dde3ea; --bg: #f5f7fa; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 40px; }
h1 { font-size: 22px; margin: 0 0 4px; font-weight: 650; }
h2 { font-size: 16px; margin: 28px 0 10px; font-weight: 620; }
.meta { color: var(--muted); margin: 0; }
.banner { margin: 0 0 18px; padding: 14px 18px; border-radius: 8px; font-size: 15px; }
.banner.failed { background: #b3261e; color: #fff; font-size: 17px; }
.banner.failed strong { letter-spacing: .06em; margin-right: 8px; }
.banner.ok { background: #e2f5e9; color: #17633a; }
.banner.ok strong { margin-right: 6px; }
td[data-human]::after { content: " (" attr(data-human) ")"; color: var(--muted); }
.dirs { margin: 6px 0 0; padding: 0; list-style: none; color: var(--muted); }
.dirs code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: var(--ink); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(200px, 1fr)); gap: 12px;
  margin-top: 20px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; }
.card-label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card-value { font-size: 24px; font-weight: 650; margin: 2px 0; font-variant-numeric: tabular-nums; }
.card-detail { color: var(--muted); font-size: 12.5px; font-variant-numeric: tabular-nums; }
.chart-box { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px;
  overflow-x: auto; }
.chart { display: block; max-width: 100%; height: auto; }
.chart .grid { stroke: var(--line); stroke-width: 1; }
.chart .tick { fill: var(--muted); font-size: 11px; text-anchor: middle; }
.chart .label { fill: var(--ink); font-size: 12.5px; text-anchor: end; }
.chart .value { fill: var(--muted); font-size: 11.5px; }
.legend, .note, .empty { color: var(--muted); margin: 0 0 8px; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin: 0 5px -1px 18px; }
.swatch:first-child { margin-left: 0; }
.swatch.before { background: var(--before); } .swatch.after { background: var(--after); }
table { width: 100%; border-collapse: collapse; background: #fff; border: 1px solid var(--line);
  border-radius: 8px; overflow: hidden; font-variant-numeric: tabular-nums; }
th, td { padding: 6px 10px; text-align: left; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: #eef2f6; font-weight: 600; font-size: 12.5px; color: #3a4656; vertical-align: bottom; }
tbody tr:nth-child(even) { background: #fafbfc; }
tfoot td { font-weight: 650; background: #eef2f6; }
td.num { white-space: nowrap; }
.num { text-align: right; }
td:first-child { min-width: 9em; overflow-wrap: anywhere; }  /* a 249-character topic name wraps */
.reason { color: var(--muted); min-width: 220px; overflow-wrap: anywhere; }
.status { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
  background: #e8ecf1; color: #3a4656; }
.status.eligible { background: #e3eeff; color: #174ea6; }
.status.cleaned { background: #e2f5e9; color: #17633a; }
.status.failed { background: #fde7e7; color: #a01c1c; }
.status.skipped { background: #eef0f3; color: #4a5563; }
footer { margin-top: 28px; color: var(--muted); font-size: 12px; }
@media print { body { background: #fff; } main { padding: 0; } }
"""
)
