"""A round that fails as a whole still reports (compaction/round.py): a Spark job that really aborts
(a local SparkContext whose Python workers are killed at a test crash point), a commit that fails
for one partition (the storage's rename refused), and a failure during planning. Each gives exit
code 75, the report's `failure`, every partition not committed `failed` with a one-line reason,
the committed ones `cleaned`, totals and metrics that agree, and one ERROR line saying what to do.
"""

from __future__ import annotations

import json
import logging
import os
import re

import pytest
from e2ekit import tree_hashes

from compaction import round as rnd
from compaction.cli.options import parse_args
from compaction.errors import PartitionInvalid
from compaction.format.checkpoint import parse_offset_checkpoint
from compaction.runtime.storage import Storage
from compaction.spark.failure import MAX_CHARS, one_line
from compaction.steps import plan_round
from compaction.tools.generator import generate_log_dir

NOW = 1_800_000_000_000
PARTS = ("t-0", "t-1", "t-2")


@pytest.fixture(scope="module")
def conf(spark):
    """The SparkContext's conf, which the round reads its knobs from: no warm-up (not the point)."""
    conf = spark.sparkContext._conf
    conf.set("spark.kafka.compaction.warmup", "false")
    yield conf
    conf._jconf.remove("spark.kafka.compaction.warmup")


def _log_dir(tmp_path) -> str:
    log_dir = str(tmp_path / "logs")
    generate_log_dir(
        log_dir, topics=(("t", 3),), records=600, keys=40, codec="mixed", segment_bytes=6000, seed=7
    )
    return log_dir


def _inputs_unchanged(log_dir: str, before: dict) -> None:
    """Every file the round found is as it was; nothing new but `.cleaned` files."""
    after = tree_hashes(log_dir)
    assert {k: after.get(k) for k in before} == before
    assert all(k.endswith(".cleaned") for k in set(after) - set(before)), sorted(set(after) - set(before))


def _round(log_dir: str, tmp_path, caplog, *extra: str) -> tuple[int, dict, list[logging.LogRecord]]:
    """`run` then the outputs `main` writes (report, page, metrics, log lines)."""
    opts = parse_args(
        [
            "--log-dir",
            log_dir,
            "--now-ms",
            str(NOW),
            "--report",
            str(tmp_path / "r.json"),
            "--report-html",
            str(tmp_path / "r.html"),
            "--metrics-file",
            str(tmp_path / "m.prom"),
            *extra,
        ]
    )
    code, report = rnd.run(opts)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="compaction"):
        rnd._write_outputs(opts, report, code)
    return code, report, list(caplog.records)


def _metrics(tmp_path) -> dict[str, float]:
    lines = (tmp_path / "m.prom").read_text().splitlines()
    rows = (ln.rsplit(" ", 1) for ln in lines if not ln.startswith("#"))
    # without the labels every series has (the round's log dirs, the mode)
    return {re.sub(r'round="[^"]*",mode="[^"]*",?', "", k).replace("{}", ""): float(v) for k, v in rows}


def _one_round_failed_line(records: list[logging.LogRecord], phase: str) -> str:
    failed = [
        r.getMessage() for r in records if r.levelno == logging.ERROR and "round failed" in r.getMessage()
    ]
    assert len(failed) == 1, failed
    assert failed[0].startswith(f"round failed ({phase}): ") and "rerun the round" in failed[0]
    return failed[0]


@pytest.mark.spark
def test_an_aborted_spark_job_fails_every_partition_and_the_round(conf, spark, tmp_path, caplog):
    log_dir = _log_dir(tmp_path)
    before = tree_hashes(log_dir)
    sc = spark.sparkContext
    # The workers' environment (a new one gets its own Python daemon): each rewrite task's worker
    # kills itself, and a local master gives a task no second attempt, so the job aborts.
    sc.environment.update({"COMPACTION_CRASH_AT": "rewrite", "COMPACTION_CRASH_HOW": "kill"})
    try:
        code, report, records = _round(log_dir, tmp_path, caplog)
    finally:
        for name in ("COMPACTION_CRASH_AT", "COMPACTION_CRASH_HOW"):
            sc.environment.pop(name)
    assert code == rnd.EXIT_ROUND_FAILED == 75
    failure = report["failure"]
    assert failure["phase"] == "stages"
    # The partitions of the task whose attempts all failed are named first, then Spark's line.
    held = re.match(
        r"the round's Spark job failed: TaskFailed: a task holding (.+?) failed every attempt: "
        r"SparkException: Job aborted",
        failure["reason"],
    )
    assert held and set(held.group(1).split(", ")) <= set(PARTS), failure["reason"]
    assert "Python worker exited unexpectedly" in failure["reason"]
    assert "\n" not in failure["reason"] and len(failure["reason"]) < MAX_CHARS + 40
    got = {f"{e['topic']}-{e['partition']}": e for e in report["partitions"]}
    assert sorted(got) == list(PARTS)
    assert {(e["status"], e["reason"]) for e in got.values()} == {("failed", failure["reason"])}
    assert report["totals"]["failed"] == 3 and report["totals"]["cleaned"] == 0
    assert report["totals"]["bytesRead"] == report["totals"]["bytesWritten"] == 0
    _inputs_unchanged(log_dir, before)  # no checkpoint written either: it was not there before
    m = _metrics(tmp_path)
    assert m["kafka_compaction_last_run_exit_code"] == 75
    assert m['kafka_compaction_last_run_partitions{status="failed"}'] == 3
    assert "kafka_compaction_last_success_timestamp_seconds" not in m
    assert "The round failed (stages)" in (tmp_path / "r.html").read_text()
    line = _one_round_failed_line(records, "stages")
    assert "nothing was committed: the 3 partition(s)" in line
    assert sc.parallelize([1, 2]).count() == 2  # a context the round did not start is not stopped

    # The next round (nothing injected) removes what the aborted one left, and cleans all three.
    code, report, _ = _round(log_dir, tmp_path, caplog)
    assert code == 0 and report["failure"] is None
    assert {e["status"] for e in report["partitions"]} == {"cleaned"}


@pytest.mark.spark
def test_a_failed_commit_keeps_the_committed_partitions_cleaned(conf, tmp_path, caplog, monkeypatch):
    log_dir = _log_dir(tmp_path)
    rename = Storage.rename

    def refuse_t1_swap(self, src, dst, **kw):
        if "/t-1/" in src and dst.endswith(".swap"):
            raise OSError(5, "Input/output error", dst)
        return rename(self, src, dst, **kw)

    monkeypatch.setattr(Storage, "rename", refuse_t1_swap)
    code, report, records = _round(log_dir, tmp_path, caplog)
    monkeypatch.undo()
    assert code == rnd.EXIT_ROUND_FAILED
    assert report["failure"]["phase"] == "commit"
    assert report["failure"]["reason"].startswith("the commit of t-1 failed: OSError: [Errno 5] Input/output")
    got = {f"{e['topic']}-{e['partition']}": e for e in report["partitions"]}
    assert got["t-1"]["status"] == "failed" and got["t-1"]["reason"].startswith("its commit failed: OSError")
    assert got["t-0"]["status"] == got["t-2"]["status"] == "cleaned"
    totals = report["totals"]
    assert (totals["cleaned"], totals["failed"]) == (2, 1)
    assert totals["bytesRead"] == got["t-0"]["bytesRead"] + got["t-2"]["bytesRead"] > 0
    with open(os.path.join(log_dir, "cleaner-offset-checkpoint"), "rb") as fh:
        checkpoint = parse_offset_checkpoint(fh.read())
    assert checkpoint == {("t", 0): got["t-0"]["endOffset"], ("t", 2): got["t-2"]["endOffset"]}
    m = _metrics(tmp_path)
    assert m["kafka_compaction_last_run_exit_code"] == 75
    assert m['kafka_compaction_last_run_partitions{status="cleaned"}'] == 2
    assert m["kafka_compaction_last_run_read_bytes"] == totals["bytesRead"]
    assert "2 partition(s) were committed (cleaned), 1 failed" in _one_round_failed_line(records, "commit")

    code, report, _ = _round(log_dir, tmp_path, caplog)  # the rerun: recovery, then t-1 cleaned
    assert code == 0
    assert {f"{e['topic']}-{e['partition']}": e["status"] for e in report["partitions"]}["t-1"] == "cleaned"


def test_a_failure_while_planning_is_reported(tmp_path, caplog, monkeypatch):
    log_dir = _log_dir(tmp_path)

    def unreachable(*args, **kwargs):
        raise OSError(110, "Connection timed out")

    monkeypatch.setattr(rnd, "discover_and_plan", unreachable)
    code, report, records = _round(log_dir, tmp_path, caplog, "--recover-only")
    assert code == rnd.EXIT_ROUND_FAILED
    reason = "recovery or planning failed: TimeoutError: [Errno 110] Connection timed out"
    assert report["failure"] == {"phase": "planning", "reason": reason}
    assert report["partitions"] == [] and report["totals"]["partitions"] == 0
    assert "nothing was compacted" in _one_round_failed_line(records, "planning")


@pytest.mark.parametrize(
    "exc, line",
    [
        (OSError(28, "No space left on device"), "OSError: [Errno 28] No space left on device"),
        (RuntimeError("first line\n  Traceback (most recent call last):\n  ..."), "RuntimeError: first line"),
        (RuntimeError("\n\n  indented first line  \nsecond"), "RuntimeError: indented first line"),
        (RuntimeError(), "RuntimeError"),
        (RuntimeError("x" * 2000), "RuntimeError: " + "x" * (MAX_CHARS - len("RuntimeError: ") - 3) + "..."),
    ],
)
def test_one_line(exc, line):
    assert one_line(exc) == line


def test_the_launchers_help_lists_the_round_failed_code():
    from compaction.cli import launcher

    assert rnd.EXIT_ROUND_FAILED in dict(launcher.EXIT_CODES)
    assert f"  {rnd.EXIT_ROUND_FAILED:<6} the round itself failed" in launcher.help_epilog()


def _planning_raises(monkeypatch, exc: Exception, partition: int = 1) -> None:
    """Planning partition `t-<partition>` raises `exc`; the others plan as they would."""
    real = plan_round.plan_partition

    def plan_partition(topic, part, *args, **kwargs):
        if part == partition:
            raise exc
        return real(topic, part, *args, **kwargs)

    monkeypatch.setattr(plan_round, "plan_partition", plan_partition)


def _round_logged(log_dir: str, tmp_path, caplog, *extra: str) -> tuple[int, dict, list[logging.LogRecord]]:
    """`_round`, with the records the round logged while it ran (not only its outputs')."""
    with caplog.at_level(logging.INFO, logger="compaction"):
        opts = parse_args(
            ["--log-dir", log_dir, "--now-ms", str(NOW), "--report", str(tmp_path / "r.json"), *extra]
        )
        code, report = rnd.run(opts)
        during = list(caplog.records)
        rnd._write_outputs(opts, report, code)
    return code, report, during


def test_an_unexpected_error_while_planning_fails_the_round_with_its_traceback(tmp_path, caplog, monkeypatch):
    log_dir = _log_dir(tmp_path)
    before = tree_hashes(log_dir)
    _planning_raises(monkeypatch, ValueError("a bug in planning"))  # not a typed error: a bug
    code, report, records = _round_logged(log_dir, tmp_path, caplog, "--recover-only")
    assert code == rnd.EXIT_ROUND_FAILED
    assert report["failure"]["phase"] == "planning"
    assert "ValueError: a bug in planning" in report["failure"]["reason"]
    (bug,) = [r for r in records if r.levelno == logging.ERROR and r.exc_info]
    assert bug.exc_info[0] is ValueError
    assert "in plan_partition" in logging.Formatter().formatException(bug.exc_info)  # where the bug is
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["failure"] == report["failure"]  # the report is written all the same
    assert tree_hashes(log_dir) == before


def test_an_expected_error_while_planning_fails_only_its_partition(tmp_path, caplog, monkeypatch):
    log_dir = _log_dir(tmp_path)
    _planning_raises(monkeypatch, PartitionInvalid("t-1: a damaged index"))
    code, report, records = _round_logged(log_dir, tmp_path, caplog, "--recover-only")
    assert report["failure"] is None
    status = {f"{e['topic']}-{e['partition']}": (e["status"], e["reason"]) for e in report["partitions"]}
    assert status["t-1"] == ("failed", "t-1: a damaged index")
    assert status["t-0"][0] != "failed" and status["t-2"][0] != "failed"
    assert code == rnd.EXIT_FAILED
    assert not [r for r in records if r.exc_info]  # an expected error is reported, not a bug's traceback


@pytest.mark.spark
def test_an_unexpected_error_in_a_task_fails_the_round_with_its_traceback(conf, spark, tmp_path, caplog):
    log_dir = _log_dir(tmp_path)
    before = tree_hashes(log_dir)
    sc = spark.sparkContext
    # Every rewrite raises an AssertionError, as a bug would (runtime/faults.py): no partition's
    # error handling may take it for a damaged partition.
    sc.environment.update({"COMPACTION_CRASH_AT": "rewrite", "COMPACTION_CRASH_HOW": "raise"})
    try:
        code, report, records = _round_logged(log_dir, tmp_path, caplog)
    finally:
        for name in ("COMPACTION_CRASH_AT", "COMPACTION_CRASH_HOW"):
            sc.environment.pop(name)
    assert code == rnd.EXIT_ROUND_FAILED
    assert report["failure"]["phase"] == "stages"
    assert {e["status"] for e in report["partitions"]} == {"failed"}
    traces = [r.getMessage() for r in records if r.levelno == logging.ERROR and "Traceback" in r.getMessage()]
    assert len(traces) == 1 and "AssertionError: crash point rewrite" in traces[0], traces
    assert json.loads((tmp_path / "r.json").read_text())["failure"] == report["failure"]
    _inputs_unchanged(log_dir, before)
