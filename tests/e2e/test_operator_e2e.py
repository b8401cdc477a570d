"""The operator's command line end to end, as a user meets it: `./spark-submit.sh` and the
installed `kafka-compaction compact` (one launcher behind both).

* every usage error exits 2 with one line, before any JVM (the checks run with no Java on the
  PATH, so a JVM start would fail differently), and leaves every file as it was;
* `--help` and `--version` need no Java;
* a real round through `kafka-compaction compact` with `--log-format json`, `--metrics-file` and a
  short progress interval: progress lines while it runs, one line per partition (a damaged one at
  ERROR), a Prometheus file, no lock file left, the result checked with kafka-python.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from e2ekit import (
    REPO,
    SUBMIT,
    cleanable_bound,
    corrupt_first_batch,
    decode_partition,
    latest_per_key,
    tree_hashes,
)
from genkit import run_generate
from prometheus_client.parser import text_string_to_metric_families

NOW = 1_800_000_000_000
CONSOLE = os.path.join(os.path.dirname(sys.executable), "kafka-compaction")


def _entry_points():
    out = [("spark-submit.sh", [SUBMIT])]
    if os.path.exists(CONSOLE):
        out.append(("kafka-compaction", [CONSOLE, "compact"]))
    out.append(("python -m compaction", [sys.executable, "-m", "compaction", "compact"]))
    return out


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("operator")
    path = root / "kafka-logs"
    run_generate(
        path,
        "--topics orders:2,users:1 --records 4000 --keys 300 --codec mixed --segment-bytes 30000 --seed 11",
    )
    return path


@pytest.fixture(scope="module")
def no_java(tmp_path_factory):
    """An environment whose PATH has the shell tools the launcher script uses, and no java."""
    bin_dir = tmp_path_factory.mktemp("nojava-bin")
    for tool in ("bash", "env", "dirname"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env.update(PATH=str(bin_dir), PYSPARK_PYTHON=sys.executable)
    return env


USAGE_ERRORS = [
    # (id, args after the entry point, words the one error line must contain)
    ("partition-dir", ["--log-dir", "{log}/orders-0"], ["partition dir, not a log dir", "--log-dir {log}"]),
    ("missing", ["--log-dir", "{log}/nope"], ["no such directory"]),
    ("empty", ["--log-dir", "{root}/empty"], ["empty, not a Kafka log dir"]),
    ("not-kafka", ["--log-dir", "{root}/notes"], ["not a Kafka log dir"]),
    ("regex", ["--log-dir", "{log}", "--topics", "orders("], ["--topics", "not a regular expression"]),
    ("ratio", ["--log-dir", "{log}", "--min-cleanable-dirty-ratio", "5"], ["min.cleanable.dirty.ratio=5.0"]),
    (
        "config-line",
        ["--log-dir", "{log}", "--topic-config", "{root}/bad.properties"],
        ["{root}/bad.properties line 1: "],
    ),
    (
        "report-dir",
        ["--log-dir", "{log}", "--report", "{root}/no/such/dir/r.json"],
        ["--report", "does not exist"],
    ),
    (
        "report-html-dir",
        ["--log-dir", "{log}", "--dry-run", "--report-html", "{root}/no/such/dir/r.html"],
        ["--report-html {root}/no/such/dir/r.html", "does not exist"],
    ),
    ("unknown-flag", ["--log-dir", "{log}", "--frobnicate"], ["unrecognized arguments: --frobnicate"]),
    ("no-java", ["--log-dir", "{log}"], ["no Java found", "JAVA_HOME"]),
]


@pytest.mark.parametrize("name, args, words", USAGE_ERRORS, ids=[u[0] for u in USAGE_ERRORS])
def test_usage_errors_exit_2_with_one_line_before_any_jvm_and_write_nothing(
    log_dir, no_java, name, args, words
):
    root = log_dir.parent
    (root / "empty").mkdir(exist_ok=True)
    (root / "notes").mkdir(exist_ok=True)
    (root / "notes" / "todo.txt").write_text("not kafka\n")
    (root / "bad.properties").write_text("orders cleanup.policy compact\n")
    before = tree_hashes(str(root))
    fill = {"log": str(log_dir), "root": str(root)}
    for label, cmd in _entry_points():
        t = time.monotonic()
        proc = subprocess.run(
            [*cmd, *(a.format(**fill) for a in args)],
            capture_output=True,
            text=True,
            env=no_java,
            cwd=REPO,
            timeout=60,
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, (label, proc.stderr)
        assert len(lines) == 1 and "error: " in lines[0], (label, proc.stderr)
        assert all(w.format(**fill) in lines[0] for w in words), (label, lines[0])
        assert "Traceback" not in proc.stderr and proc.stdout == ""
        assert time.monotonic() - t < 20, label  # no JVM was started (none could be)
    assert tree_hashes(str(root)) == before  # nothing written anywhere, no lock file


def test_help_and_version_need_no_java(no_java):
    for label, cmd in _entry_points():
        proc = subprocess.run(
            [*cmd, "--help"], capture_output=True, text=True, env=no_java, cwd=REPO, timeout=60
        )
        assert proc.returncode == 0, (label, proc.stderr)
        out = proc.stdout
        for needle in (
            "--log-dir",
            "--dry-run",
            "--report-html",
            "--metrics-file",
            "--log-format",
            "--driver-memory",
            "'--opt=value'",
            "Exit codes:",
            "Environment:",
            "JAVA_HOME",
            "SPARK_HOME",
        ):
            assert needle in out, (label, needle)
        version = subprocess.run([*cmd, "--version"], capture_output=True, text=True, env=no_java, cwd=REPO)
        assert version.returncode == 0 and version.stdout.startswith("kafka-offline-compaction "), label
    top = subprocess.run([sys.executable, "-m", "compaction", "--version"], capture_output=True, text=True)
    assert top.stdout.startswith("kafka-offline-compaction ")
    listing = subprocess.run([sys.executable, "-m", "compaction", "--help"], capture_output=True, text=True)
    assert "compact " in listing.stdout


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_round_through_kafka_compaction_compact(log_dir, tmp_path):
    work = tmp_path / "kafka-logs"
    shutil.copytree(log_dir, work)
    corrupt_first_batch(work / "users-0")
    before = {p: decode_partition(str(work / p)) for p in ("orders-0", "orders-1")}
    bounds = {p: cleanable_bound(str(work / p)) for p in ("orders-0", "orders-1")}
    damaged = tree_hashes(str(work / "users-0"))
    report, prom = tmp_path / "report.json", tmp_path / "textfile" / "kafka_compaction.prom"
    prom.parent.mkdir()
    cmd = [CONSOLE, "compact"] if os.path.exists(CONSOLE) else [sys.executable, "-m", "compaction", "compact"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "KAFKA_COMPACTION_PROGRESS_SECONDS": "0.2"}
    proc = subprocess.run(
        [
            *cmd,
            "--master=local[2]",
            "--driver-memory=1g",
            "--conf",
            "spark.ui.enabled=false",
            "--log-dir",
            str(work),
            "--now-ms",
            str(NOW),
            "--report",
            str(report),
            "--log-format",
            "json",
            "--metrics-file",
            str(prom),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=500,
    )
    assert proc.returncode == 1, proc.stderr[-4000:]  # one partition failed, the others cleaned
    # spark-submit runs the Python driver with its stderr joined to its stdout (PythonRunner)
    ours = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"time"')]
    events = {}
    for row in ours:
        events.setdefault(row.get("event"), []).append(row)
    # progress: the Spark start-up heartbeat, the UI line, task progress with totals
    assert events.get("waiting"), proc.stdout[-4000:]
    assert any(r["message"].startswith("Spark UI: ") for r in events["phase"])
    progress = events["progress"]
    assert progress[-1]["tasksDone"] == progress[-1]["tasksTotal"] > 0
    # the damaged partition's scan stopped at its damage: it never reaches its rewrite
    assert 0 < progress[-1]["workDone"] < progress[-1]["workTotal"] and progress[-1]["fraction"] == 1
    assert progress[-1]["bytesRead"] > 0 and progress[-1]["bytesWritten"] > 0
    # one line per partition, the damaged one at ERROR with the file and byte position
    parts = {f"{r['topic']}-{r['partition']}": r for r in events["partition"]}
    assert sorted(parts) == ["orders-0", "orders-1", "users-0"]
    assert parts["users-0"]["level"] == "ERROR" and "byte" in parts["users-0"]["reason"]
    assert parts["orders-0"]["level"] == parts["orders-1"]["level"] == "INFO"
    assert events["totals"][0]["failed"] == 1 and events["totals"][0]["level"] == "ERROR"
    # the result itself, decoded by kafka-python
    data = json.loads(report.read_text())
    assert sorted((p["topic"], p["partition"], p["status"]) for p in data["partitions"]) == [
        ("orders", 0, "cleaned"),
        ("orders", 1, "cleaned"),
        ("users", 0, "failed"),
    ]
    for p in data["partitions"]:
        if p["topic"] == "orders":
            name = f"orders-{p['partition']}"
            after = decode_partition(str(work / name))
            assert p["firstUncleanableOffset"] == bounds[name]
            want = latest_per_key(before[name], bounds[name])
            assert {r.key: r for r in after if r.offset < bounds[name]} == want
            assert len([r for r in after if r.offset < bounds[name]]) == len(want)
            assert [r for r in after if r.offset >= bounds[name]] == [
                r for r in before[name] if r.offset >= bounds[name]
            ]
    assert tree_hashes(str(work / "users-0")) == damaged
    assert not (work / ".compaction.lock").exists()
    # the metrics file, read by Prometheus' own parser
    families = list(text_string_to_metric_families(prom.read_text()))
    assert {s.labels["round"] for fam in families for s in fam.samples} == {str(work)}  # absolute
    samples = {
        (s.name, tuple((k, v) for k, v in s.labels.items() if k not in ("round", "mode"))): s.value
        for fam in families
        for s in fam.samples
    }
    assert samples[("kafka_compaction_last_run_exit_code", ())] == 1
    assert samples[("kafka_compaction_last_run_partitions", (("status", "cleaned"),))] == 2
    assert samples[("kafka_compaction_last_run_partitions", (("status", "failed"),))] == 1
    assert samples[("kafka_compaction_last_run_read_bytes", ())] == data["totals"]["bytesRead"]
    assert ("kafka_compaction_last_success_timestamp_seconds", ()) not in samples
    assert os.listdir(prom.parent) == ["kafka_compaction.prom"]
