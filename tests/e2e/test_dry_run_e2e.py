"""`--dry-run` tells the truth: it scans and decides like a round, writes nothing, and reports per
partition, per topic and overall the .log bytes and records a round with the same options then
removes; the console gets the table, sorted by reclaimable bytes. One partition of the dir is cut
into ranges, the others are compacted whole, so both paths are sized. Both runs also write
`--report-html`, opened in headless Chromium with no network (tests/helpers/headless_chromium.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import headless_chromium
import pytest
from e2ekit import LOCAL_SUBMIT, REPO, tree_hashes
from html_page import Page, expected_rows, partition_rows

from compaction.cli.report_chart import AFTER_FILL, BEFORE_FILL
from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000


def _submit(log_dir: str, report: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        *LOCAL_SUBMIT,
        "--log-dir",
        log_dir,
        "--report",
        report,
        "--now-ms",
        str(NOW),
        "--segment-bytes",
        "300000",
        *args,
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)


def _log_bytes(part_dir: str) -> int:
    return sum(os.path.getsize(os.path.join(part_dir, n)) for n in os.listdir(part_dir) if n.endswith(".log"))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("dry")


@pytest.fixture(scope="module")
def rounds(root):
    import json

    log_dir = str(root / "logs")
    generate_log_dir(
        log_dir,
        topics=(("orders", 2), ("payments", 1)),
        records=5000,
        keys=300,
        codec="mixed",
        segment_bytes=100_000,
        tombstone_ratio=0.1,
        transactions=0.3,
        abort_ratio=0.3,
        idempotent=0.2,
        seed=11,
    )
    parts = sorted(d for d in os.listdir(log_dir) if os.path.isdir(os.path.join(log_dir, d)))
    before = tree_hashes(log_dir)
    sizes = {p: _log_bytes(os.path.join(log_dir, p)) for p in parts}
    # the biggest partition (several groups of 300 KB) is cut into ranges, the others whole
    ranged = ("--conf", f"spark.kafka.compaction.partitionTaskMaxBytes={max(sizes.values()) - 1}")
    dry = _submit(
        log_dir, str(root / "dry.json"), "--dry-run", *ranged, "--report-html", str(root / "dry.html")
    )
    after_dry = tree_hashes(log_dir)
    real = _submit(log_dir, str(root / "real.json"), *ranged, "--report-html", str(root / "real.html"))
    after = {p: _log_bytes(os.path.join(log_dir, p)) for p in parts}
    return (
        dry,
        json.load(open(root / "dry.json")),
        before,
        after_dry,
        real,
        json.load(open(root / "real.json")),
        sizes,
        after,
    )


def test_dry_run_writes_nothing_and_exits_0(rounds):
    dry, report, before, after_dry, *_ = rounds
    assert dry.returncode == 0, dry.stderr[-3000:]
    after_dry.pop(".compaction.lock", None)
    before.pop(".compaction.lock", None)
    assert after_dry == before
    assert {p["status"] for p in report["partitions"]} == {"eligible"}
    assert report["totals"]["eligible"] == 3 and report["totals"]["cleaned"] == 0


def test_dry_run_numbers_are_what_the_round_then_removes(rounds):
    _, dry, _, _, real_proc, real, sizes, after = rounds
    assert real_proc.returncode == 0, real_proc.stderr[-3000:]
    assert real["timings"].get("rangesSeconds") and real["timings"].get("partitionTasksSeconds")
    by_name = lambda r: {f"{p['topic']}-{p['partition']}": p for p in r["partitions"]}  # noqa: E731
    d, r = by_name(dry), by_name(real)
    assert {p["status"] for p in r.values()} == {"cleaned"}
    for name, p in d.items():
        assert p["reclaimableBytes"] == r[name]["reclaimableBytes"] == sizes[name] - after[name] > 0, name
        assert p["reclaimableRecords"] == r[name]["reclaimableRecords"] > 0, name
        assert p["dirtyBytes"] == r[name]["dirtyBytes"] > 0 and p["dirtyRatio"] == r[name]["dirtyRatio"]
    for topic, t in dry["topics"].items():
        assert t == real["topics"][topic]
        assert t["reclaimableBytes"] == sum(p["reclaimableBytes"] for p in d.values() if p["topic"] == topic)
    assert dry["totals"]["reclaimableBytes"] == sum(sizes.values()) - sum(after.values())


def test_dry_run_prints_the_table_most_reclaimable_first(rounds):
    dry, report, *_ = rounds
    lines = [line for line in dry.stdout.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.startswith("partition"))
    rows = lines[header + 1 : header + 4]
    order = sorted(report["partitions"], key=lambda p: -p["reclaimableBytes"])
    assert [row.split()[0] for row in rows] == [f"{p['topic']}-{p['partition']}" for p in order]
    assert any(line.startswith("all ") for line in lines[header:])
    assert any(line.startswith("orders (topic)") for line in lines[header:])


# --- the HTML page, in a browser --------------------------------------------------------------------


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def _pixels_near(image, colour: str, tolerance: int = 3) -> int:
    want = _rgb(colour)
    return sum(
        count
        for count, rgb in image.getcolors(maxcolors=1 << 24)
        if all(abs(a - b) <= tolerance for a, b in zip(rgb, want))
    )


def test_the_dry_runs_page_renders_offline_with_its_rows_and_bars(rounds, root):
    from PIL import Image

    chromium = headless_chromium.require()
    dry, report = rounds[0], rounds[1]
    assert dry.returncode == 0, dry.stderr[-3000:]
    url = (root / "dry.html").as_uri()
    dom = Page(headless_chromium.dump_dom(chromium, url))
    assert partition_rows(dom) == expected_rows(report)
    assert [row[0] for row in dom.tables["topics"]["tbody"]] == sorted(
        report["topics"], key=lambda t: -report["topics"][t]["reclaimableBytes"]
    )
    shot = root / "dry.png"
    headless_chromium.screenshot(chromium, url, str(shot))
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 900)
    colours = image.getcolors(maxcolors=1 << 24)
    assert len(colours) > 50 and max(colours)[0] < 0.9 * 1200 * 900  # not blank, not one flat colour
    # a bar is 14 px high and, for the largest topic, hundreds wide
    assert _pixels_near(image, BEFORE_FILL) > 2000 and _pixels_near(image, AFTER_FILL) > 500


def test_the_rounds_page_shows_what_it_read_and_wrote(rounds, root):
    chromium = headless_chromium.require()
    real_proc, real = rounds[4], rounds[5]
    assert real_proc.returncode == 0, real_proc.stderr[-3000:]
    dom = Page(headless_chromium.dump_dom(chromium, (root / "real.html").as_uri()))
    assert partition_rows(dom) == expected_rows(real)
    assert {row["status"] for row in partition_rows(dom)} == {"cleaned"}
    (head,) = dom.tables["partitions"]["thead"]
    assert "bytes read" in head and "bytes written" in head
