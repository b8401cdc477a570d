"""A round whose Spark job really aborts, through spark-submit: every task's Python worker is
SIGKILLed as it writes its first `.timeindex.cleaned` (the test-only crash point `rewrite` with
`COMPACTION_CRASH_HOW=kill`), as the OOM killer or a lost executor would; with one attempt per task
the job aborts. The launcher's process must exit 75, having written the JSON report (every
partition `failed` with Spark's one-line reason), the HTML page and the metrics file, logged one
ERROR line saying what to do, and left every input file as it was.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from e2ekit import REPO, tree_hashes
from faultkit import submit_cmd
from test_crash_e2e import RANGES

from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000


@pytest.mark.parametrize("stage", ["partitions", "ranges"])
def test_an_aborted_spark_job_exits_75_with_the_report_written(tmp_path, stage):
    log_dir = str(tmp_path / "logs")
    generate_log_dir(
        log_dir, topics=(("t", 3),), records=600, keys=40, codec="mixed", segment_bytes=6000, seed=11
    )
    before = tree_hashes(log_dir)
    report, page, metrics = (str(tmp_path / n) for n in ("report.json", "report.html", "metrics.prom"))
    cmd = submit_cmd(
        [log_dir],
        report,
        "--now-ms",
        str(NOW),
        "--report-html",
        page,
        "--metrics-file",
        metrics,
        "--conf",
        "spark.task.maxFailures=1",
        *(RANGES if stage == "ranges" else ()),
    )
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "COMPACTION_CRASH_AT": "rewrite",
        "COMPACTION_CRASH_HOW": "kill",
    }
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr  # spark-submit joins the Python driver's stderr to its stdout
    assert proc.returncode == 75, out[-6000:]

    data = json.load(open(report))
    reason = data["failure"]["reason"]
    assert data["failure"]["phase"] == "stages"
    assert reason.startswith("the round's Spark job failed: TaskFailed: a task holding t-")
    assert "failed every attempt: SparkException: Job aborted due to stage failure" in reason
    assert "\n" not in reason and "Traceback" not in reason
    assert [(e["partition"], e["status"], e["reason"]) for e in data["partitions"]] == [
        (i, "failed", reason) for i in range(3)
    ]
    assert (data["totals"]["failed"], data["totals"]["cleaned"], data["totals"]["bytesWritten"]) == (3, 0, 0)

    prom = {
        re.sub(r'round="[^"]*",mode="round",?', "", k).replace("{}", ""): v
        for k, v in (ln.rsplit(" ", 1) for ln in open(metrics).read().splitlines() if not ln.startswith("#"))
    }
    assert prom["kafka_compaction_last_run_exit_code"] == "75"
    assert prom['kafka_compaction_last_run_partitions{status="failed"}'] == "3"
    assert "The round failed (stages)" in open(page).read()

    lines = [ln for ln in out.splitlines() if " ERROR compaction: round failed" in ln]
    assert len(lines) == 1, out[-6000:]
    assert "nothing was committed" in lines[0] and "rerun the round" in lines[0]
    assert "Py4JJavaError" not in out  # the driver's traceback, before the report was written

    after = tree_hashes(log_dir)
    assert {k: after.get(k) for k in before} == before  # every input file as it was
    assert all(k.endswith(".cleaned") for k in set(after) - set(before))
