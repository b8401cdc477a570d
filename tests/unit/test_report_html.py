"""`--report-html`: the report as one page, a pure function of the report dict (no Spark, no browser;
tests/e2e/test_dry_run_e2e.py opens the page of a real run in headless Chromium)."""

from __future__ import annotations

import pytest
from html_page import BYTE_COLUMNS, Page, expected_rows, number, partition_rows

from compaction.cli.options import parse_args
from compaction.cli.report_chart import AFTER_FILL, BEFORE_FILL, axis_ticks
from compaction.cli.report_html import render
from compaction.runtime.s3 import redact_uri
from compaction.steps import report as rpt

DRY = "a round would clean it (dry run)"


def _result(
    topic, partition, read, written, *, status=rpt.ELIGIBLE, reason=DRY, ratio=0.5, log_dir="/data/kafka-logs"
) -> rpt.PartitionResult:
    r = rpt.PartitionResult(topic, partition, log_dir, status=status, reason=reason, dirtyRatio=ratio)
    r.bytesRead, r.bytesWritten, r.dirtyBytes = read, written, read // 2
    r.recordsRead, r.recordsWritten = read // 100, written // 100
    r.reclaimableBytes, r.reclaimableRecords = read - written, r.recordsRead - r.recordsWritten
    return r


def _report(results, **args) -> dict:
    args = {"dry_run": True, "now_ms": 1_800_000_000_000, "log_dirs": ["/data/kafka-logs"], **args}
    return rpt.build_report(results, args, {"totalSeconds": 4.5}, 1_764_000_000_000)


MIXED = [
    _result("orders", 0, 3_000_000, 1_000_000, ratio=0.8125),
    _result("orders", 1, 5_000_123, 4_999_000, ratio=0.2),
    _result("payments", 0, 2_500_000, 100_000, ratio=0.99),
    _result("users", 0, 0, 0, status=rpt.SKIPPED, reason="below min.cleanable.dirty.ratio", ratio=0.1),
    _result(
        "users",
        1,
        0,
        0,
        status=rpt.FAILED,
        ratio=None,
        reason="users-1/00000000000000000000.log at byte 70: corrupt batch",
    ),
]


def test_every_number_on_the_page_is_the_reports():
    report = _report(MIXED)
    page = Page(render(report))
    assert partition_rows(page) == expected_rows(report)  # most reclaimable first
    topics = page.tables["topics"]["tbody"]
    assert [r[0] for r in topics] == ["payments", "orders", "users"]  # by reclaimable bytes
    for name, count, *numbers, _saving in topics:
        t = report["topics"][name]
        assert number(count) == t["partitions"]
        assert [number(n) for n in numbers] == [t[k] for k in BYTE_COLUMNS]
    (all_row,) = page.tables["topics"]["tfoot"]
    assert [number(n) for n in all_row[1:-1]] == [report["totals"][k] for k in ("partitions", *BYTE_COLUMNS)]
    assert all_row[-1] == f"{100 * report['totals']['reclaimableBytes'] / report['totals']['bytesRead']:.1f}%"


def test_the_chart_has_a_bar_pair_per_topic_with_the_reports_bytes():
    report = _report(MIXED)
    page = Page(render(report))
    bars = [a for tag, a in page.elements if tag == "rect"]
    assert [b["fill"] for b in bars] == [BEFORE_FILL, AFTER_FILL] * 3  # orders, payments, users
    tips = "".join(page.tips)
    for name, t in report["topics"].items():
        assert f"{name}: before {t['bytesRead']:,} bytes" in tips
        assert f"{name}: after {t['bytesWritten']:,} bytes" in tips
    widths = {float(b["width"]) for b in bars}
    assert max(widths) > 0 and 0 in widths  # users read nothing: its bars are empty


def test_a_round_reports_read_written_and_reclaimed():
    page = Page(
        render(_report([_result("orders", 0, 4000, 1000, status=rpt.CLEANED, reason=None)], dry_run=False))
    )
    (head,) = page.tables["partitions"]["thead"]
    assert head[5:9] == ["bytes read", "bytes written", "reclaimed bytes", "records removed"]
    assert "Compaction round" in "".join(page.text)
    (row,) = page.tables["partitions"]["tbody"]
    assert row[2] == "cleaned" and [number(n) for n in row[4:9]] == [2000, 4000, 1000, 3000, 30]


HOSTILE_TOPIC = "<script>alert('topic')</script>"
HOSTILE_REASON = '<img src=x onerror="alert(1)"> & see https://example.invalid/x'


def test_every_string_is_escaped_and_shows_as_text():
    report = _report(
        [_result(HOSTILE_TOPIC, 0, 1000, 10, reason=HOSTILE_REASON)],
        log_dirs=["/data/<b>logs</b>"],
        topics="<i>.*",
    )
    text = render(report)
    page = Page(text)
    tags = {tag for tag, _ in page.elements}
    assert not tags & {"script", "img", "b", "i"}
    assert not any(k.startswith("on") for _, attrs in page.elements for k in attrs)
    (row,) = page.tables["partitions"]["tbody"]
    assert row[0] == HOSTILE_TOPIC and row[-1] == HOSTILE_REASON
    assert [r[0] for r in page.tables["topics"]["tbody"]] == [HOSTILE_TOPIC]
    shown = "".join(page.text)
    assert "/data/<b>logs</b>" in shown and "<i>.*" in shown
    assert "&lt;script&gt;" in text and "<script" not in text


def test_the_page_references_nothing_outside_itself():
    text = render(_report(MIXED))
    page = Page(text)
    assert "http://" not in text and "https://" not in text
    assert not {tag for tag, _ in page.elements} & {"script", "link", "img", "iframe", "object", "embed"}
    assert not any(k in ("src", "href", "srcset", "xlink:href") for _, attrs in page.elements for k in attrs)
    assert "url(" not in text and "@import" not in text
    assert text.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in text


def test_an_empty_report_is_a_page_that_says_so():
    page = Page(render(_report([])))
    assert page.tables["partitions"]["tbody"] == [["No partitions in this run."]]
    assert page.tables["topics"]["tbody"] == []
    (all_row,) = page.tables["topics"]["tfoot"]
    assert all_row[:-1] == ["all topics", "0", "0", "0", "0", "0", "0"] and all_row[-1] == "\u2013"
    assert not [a for tag, a in page.elements if tag == "rect"]


def test_a_plan_only_page_shows_no_bytes_it_did_not_read():
    report = _report([_result("orders", 0, 0, 0, reason="eligible (plan only)")], plan_only=True)
    page = Page(render(report))
    (row,) = page.tables["partitions"]["tbody"]
    assert row[4] == f"{report['partitions'][0]['dirtyBytes']:,}"
    assert row[5:9] == ["\u2013"] * 4
    assert "read no segments" in "".join(page.text)


def test_credentials_given_on_the_command_line_never_reach_the_page():
    from compaction.round import _args_echo

    secret_uri = "s3://AKIA123:s3cr3t@bucket/kafka-logs?secret_key=s3cr3t"
    opts = parse_args(
        ["--log-dir", secret_uri, "--report-html", "s3://AKIA123:s3cr3t@bucket/r.html", "--dry-run"]
    )
    entry = _result("orders", 0, 100, 10, log_dir=redact_uri(secret_uri))
    report = rpt.build_report([entry], _args_echo(opts), {}, 0)
    text = render(report)
    assert "s3cr3t" not in text and "AKIA123" not in text
    assert "s3://***@bucket/kafka-logs" in text


@pytest.mark.parametrize("peak", [1, 7, 999, 1024, 5000, 112_000_000, 3 * 2**30, 10**15])
def test_the_axis_has_round_ticks_that_cover_the_peak(peak):
    ticks = axis_ticks(peak)
    assert ticks[0] == 0 and ticks[-2] < peak <= ticks[-1] and 2 <= len(ticks) <= 7
    assert len({b - a for a, b in zip(ticks, ticks[1:])}) == 1
