"""Running it on a schedule, as an operator meets it end to end through `./spark-submit.sh`:

* a failed round's HTML page, in headless Chromium: the banner first, the failed partition first
  with its reason, where and how the round ran (absolute log dir, host, Spark's app id, ISO times,
  the options that decided, human sizes);
* the summary: the same table after a real round as after a dry run, every word true for its mode,
  a partition's line timed over its whole task;
* `--topics` matching nothing: exit 2 naming the topics found, the metrics untouched;
  `--allow-empty`: exit 0, and still no success for the alert;
* `--partitions` to retry exactly the partitions that failed;
* the metrics: a label per log dir, a dry run's own file, read back with Prometheus' parser;
* the command line: Spark's size suffixes, exclusive modes refused, a mistyped flag's suggestion,
  `--version` on every command.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys

import headless_chromium
import pytest
from e2ekit import LOCAL_SUBMIT, REPO, corrupt_first_batch, tree_hashes
from genkit import run_generate
from html_page import Page, expected_rows, partition_rows
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.slow, pytest.mark.spark]
NOW = 1_800_000_000_000
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _submit(logs, *args, cwd=REPO):
    cmd = [
        *LOCAL_SUBMIT,
        "--log-dir",
        str(logs),
        "--now-ms",
        str(NOW),
        *args,
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def _series(path) -> dict:
    """{(name, labels): value} of a metrics file, by Prometheus' own parser."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(open(path).read())
        for s in fam.samples
    }


def _value(series: dict, name: str, **labels) -> float:
    (value,) = [
        v for (n, ls), v in series.items() if n == name and all((k, w) in ls for k, w in labels.items())
    ]
    return value


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A dry run, then a real round with one damaged partition, then a typo, then an allowed empty
    selection, all over one log dir, with the same metrics file."""
    root = tmp_path_factory.mktemp("ops")
    logs = root / "kafka-logs"
    run_generate(
        logs,
        "--topics orders:2,users:1 --records 4000 --keys 300 --codec mixed --segment-bytes 30k --seed 7",
    )
    corrupt_first_batch(logs / "users-0")
    prom = root / "textfile" / "kafka_compaction.prom"
    prom.parent.mkdir()
    out = {"root": root, "logs": logs, "prom": prom}
    out["dry"] = _submit(logs, "--dry-run", "--metrics-file", str(prom), "--report", str(root / "dry.json"))
    out["real"] = _submit(
        "kafka-logs",
        "--metrics-file",
        str(prom),
        "--report",
        str(root / "real.json"),
        "--report-html",
        str(root / "real.html"),
        "--segment-bytes",
        "1g",
        "--max-message-bytes",
        "2m",
        "--io-max-bytes-per-second",
        "1g",
        cwd=root,
    )
    out["after_real"] = prom.read_text()
    out["hashes"] = tree_hashes(str(logs))
    out["typo"] = _submit(logs, "--topics", "ordrs", "--metrics-file", str(prom))
    out["after_typo"] = prom.read_text()
    out["allowed"] = _submit(
        logs,
        "--topics",
        "ordrs",
        "--allow-empty",
        "--metrics-file",
        str(prom),
        "--report",
        str(root / "empty.json"),
    )
    return out


def test_a_failed_rounds_page_cannot_be_missed_and_says_where_and_how_it_ran(runs):
    chromium = headless_chromium.require()
    assert runs["real"].returncode == 1, runs["real"].stderr[-3000:]  # users-0 failed, orders cleaned
    report = json.loads((runs["root"] / "real.json").read_text())
    dom = Page(headless_chromium.dump_dom(chromium, (runs["root"] / "real.html").as_uri()))
    # The banner is the page's first element in <main>, with the failed partition named.
    tags = [(t, a) for t, a in dom.elements if t in ("main", "div", "header", "h1")]
    assert tags[0][0] == "main" and tags[1] == (
        "div",
        {"id": "outcome", "class": "banner failed", "role": "alert"},
    )
    text = " ".join(dom.text)
    assert re.search(r"FAILED\s+1 of 3 partitions failed: users-0; listed first below", text)
    assert "FAILED" in next(t for t in dom.text if "Compaction round" in t)  # the tab's title too
    # The failed partition first, with its reason (the file and the byte position).
    rows = partition_rows(dom)
    assert rows == expected_rows(report)
    assert rows[0]["topic"] == "users" and rows[0]["status"] == "failed" and "byte" in rows[0]["reason"]
    assert [r["status"] for r in rows[1:]] == ["cleaned", "cleaned"]
    # Where and how: the absolute log dir (typed relative), host, Spark's app id, ISO times, options.
    assert str(runs["logs"]) in text and socket.gethostname() in text
    assert re.search(r"Spark application local-\d+", text)
    assert len(ISO.findall(text)) >= 3  # started, finished, the --now-ms clock
    options = {row[0]: row[1:] for row in dom.tables["options"]["tbody"]}
    assert options["segment.bytes"] == ["1073741824", "--segment-bytes or --config"]
    assert options["max.message.bytes"] == ["2097152", "--max-message-bytes or --config"]
    assert options["min.cleanable.dirty.ratio"] == ["0.5", "Kafka's default"]
    assert options["log.cleaner.io.max.bytes.per.second"][0] == "1.0 GiB/s"
    # Human sizes shown beside the exact counts (generated by the style from data-human).
    human = [a["data-human"] for t, a in dom.elements if t == "td" and "data-human" in a]
    assert human and all(re.fullmatch(r"[\d.,]+ (B|KiB|MiB|GiB)", h) for h in human)


def test_the_summary_speaks_the_truth_of_each_mode(runs):
    real, dry = runs["real"].stdout + runs["real"].stderr, runs["dry"].stdout + runs["dry"].stderr
    assert runs["dry"].returncode == 1  # users-0 fails its scan in the dry run too
    report = json.loads((runs["root"] / "real.json").read_text())
    # the same table after both, failed first; a round's words are of what it did
    for out, freed in ((runs["real"].stdout, "reclaimed MiB"), (runs["dry"].stdout, "reclaimable MiB")):
        lines = out.splitlines()
        head = next(i for i, line in enumerate(lines) if line.startswith("partition "))
        assert freed in lines[head]
        assert [line.split()[0] for line in lines[head + 1 : head + 4]] == [
            "users-0",
            "orders-0",
            "orders-1",
        ] or [line.split()[0] for line in lines[head + 1 : head + 4]] == ["users-0", "orders-1", "orders-0"]
        assert lines[head + 1].split()[1] == "failed"
    totals = next(line for line in real.splitlines() if "round done" in line)
    assert "reclaimed" in totals and "reclaimable" not in totals and "dry run" not in totals
    assert re.search(r"2 cleaned, 0 skipped, 1 failed", totals)
    dry_totals = next(line for line in dry.splitlines() if "dry run done" in line)
    assert (
        "MB written" not in dry_totals
        and "reclaimable" in dry_totals
        and dry_totals.endswith("nothing written")
    )
    # A partition's Kafka-style line is timed over its whole task (scan, map, rewrite).
    cleaned = [p for p in report["partitions"] if p["status"] == "cleaned"]
    assert sum(p["seconds"] for p in cleaned) > report["timings"]["taskRewriteSeconds"]
    for p in cleaned:
        assert f"processed in {p['seconds']:,.1f} seconds" in real


def test_plan_only_calls_eligible_partitions_eligible(runs, tmp_path):
    proc = _submit(runs["logs"], "--plan-only", "--report", str(tmp_path / "plan.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "plan.json").read_text())
    # users-0 still dirty (its damage needs a scan to be found); the round cleaned the others
    status = {f"{p['topic']}-{p['partition']}": p["status"] for p in report["partitions"]}
    assert status == {"users-0": "eligible", "orders-0": "skipped", "orders-1": "skipped"}
    out = proc.stdout + proc.stderr
    assert (
        "plan done" in out
        and "1 eligible, 2 skipped" in out
        and "reclaimable" not in out.split("plan done")[1]
    )
    assert "users-0: eligible (plan only): a round would take it" in out


def test_a_topics_typo_is_a_usage_error_that_names_the_topics_found(runs):
    typo = runs["typo"]
    assert typo.returncode == 2
    assert "--topics 'ordrs' matches no topic" in typo.stderr and "orders, users" in typo.stderr
    assert "--allow-empty" in typo.stderr
    assert runs["after_typo"] == runs["after_real"]  # no metrics written, no success refreshed
    assert tree_hashes(str(runs["logs"])) == runs["hashes"]


def test_an_allowed_empty_selection_exits_0_and_is_no_success(runs):
    assert runs["allowed"].returncode == 0, runs["allowed"].stderr[-3000:]
    before, after = (_series_text(t) for t in (runs["after_real"], runs["prom"].read_text()))
    name = "kafka_compaction_last_success_timestamp_seconds"
    # the real round exited 1: no success then either, and the empty run did not make one up
    assert not [k for k in after if k[0] == name] and not [k for k in before if k[0] == name]
    assert _value(after, "kafka_compaction_last_run_partitions", status="cleaned") == 0
    assert _value(after, "kafka_compaction_last_run_exit_code") == 0


def _series_text(text: str) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_metrics_carry_the_log_dir_and_a_dry_run_has_its_own_file(runs):
    prom, dry = runs["prom"], runs["prom"].parent / "kafka_compaction.dry-run.prom"
    assert sorted(os.listdir(prom.parent)) == ["kafka_compaction.dry-run.prom", "kafka_compaction.prom"]
    real_series, dry_series = _series_text(runs["after_real"]), _series(dry)
    # absolute, though typed relative
    assert {dict(k[1])["round"] for k in real_series} == {str(runs["logs"])}
    assert {dict(k[1])["mode"] for k in real_series} == {"round"}
    assert {dict(k[1])["mode"] for k in dry_series} == {"dry_run"}
    assert not set(real_series) & set(dry_series)  # one collector reads both files
    assert _value(real_series, "kafka_compaction_last_run_partitions", status="cleaned") == 2
    assert _value(dry_series, "kafka_compaction_last_run_dry_run") == 1


def test_two_log_dirs_on_one_host_write_distinct_series(runs, tmp_path):
    other = tmp_path / "other-logs"
    shutil.copytree(runs["logs"], other)
    prom = tmp_path / "other.prom"
    proc = _submit(other, "--topics", "none", "--allow-empty", "--metrics-file", str(prom))
    assert proc.returncode == 0, proc.stderr[-3000:]
    named = tmp_path / "named.prom"
    assert (
        _submit(
            other,
            "--topics",
            "none",
            "--allow-empty",
            "--metrics-file",
            str(named),
            "--metrics-name",
            "eu-west-broker-3",
        ).returncode
        == 0
    )
    mine, theirs = _series_text(runs["after_real"]), _series(prom)
    assert mine.keys().isdisjoint(theirs.keys())
    assert {dict(k[1])["round"] for k in theirs} == {str(other)}
    assert {dict(k[1])["round"] for k in _series(named)} == {"eu-west-broker-3"}


def test_partitions_selects_exactly_the_ones_named(runs, tmp_path):
    work = tmp_path / "kafka-logs"
    shutil.copytree(runs["logs"], work)
    shutil.rmtree(work / "users-0")  # retried after the damaged segment was restored from a replica
    before = tree_hashes(str(work / "orders-0"))
    proc = _submit(work, "--partitions", "orders-1", "--report", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert [(p["topic"], p["partition"]) for p in report["partitions"]] == [("orders", 1)]
    assert tree_hashes(str(work / "orders-0")) == before
    missing = _submit(work, "--partitions", "orders-1,orders-7")
    assert missing.returncode == 2 and "orders-7 not found" in missing.stderr and "orders" in missing.stderr


def test_the_command_line_of_a_mature_tool(runs):
    logs = str(runs["logs"])
    both = _submit(logs, "--dry-run", "--plan-only")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    typo = _submit(logs, "--dry-rn")
    assert typo.returncode == 2 and "did you mean --dry-run?" in typo.stderr
    size = _submit(logs, "--segment-bytes", "1q")
    assert size.returncode == 2 and "512m, 1g" in size.stderr
    for command in ("compact", "dump", "generate"):
        proc = subprocess.run(
            [sys.executable, "-m", "compaction", command, "--version"],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert proc.returncode == 0 and proc.stdout.startswith("kafka-offline-compaction "), (
            command,
            proc.stderr,
        )
