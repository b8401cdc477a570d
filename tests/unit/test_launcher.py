"""The launcher's pure parts (argument split, Spark settings, zip freshness), the pre-flight
classification of directories, the log lines and the metrics file: no Spark, no JVM."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from prometheus_client.parser import text_string_to_metric_families

from compaction.cli import launcher, logs, metrics, preflight
from compaction.cli.options import check_options, parse_unchecked
from compaction.errors import UsageError


@pytest.fixture(autouse=True)
def _root_logger_restored():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


# --- the command line split ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, master, spark, job",
    [
        (["--log-dir", "d"], None, [], ["--log-dir", "d"]),
        (["--master", "local[2]", "--log-dir", "d"], "local[2]", [], ["--log-dir", "d"]),
        (["--master=spark://h:7077", "--log-dir=d"], "spark://h:7077", [], ["--log-dir=d"]),
        (["--driver-memory=1g", "--log-dir", "d"], None, ["--driver-memory", "1g"], ["--log-dir", "d"]),
        (
            ["--driver-memory", "1g", "--conf", "a=b", "--conf=c=d"],
            None,
            ["--driver-memory", "1g", "--conf", "a=b", "--conf", "c=d"],
            [],
        ),
        (["--verbose", "--dry-run"], None, ["--verbose"], ["--dry-run"]),
        (["--log-dir", "d", "--", "--master", "x"], None, [], ["--log-dir", "d", "--master", "x"]),
    ],
)
def test_spark_options_in_both_forms_go_to_spark_the_rest_to_the_job(argv, master, spark, job):
    cl = launcher.split_argv(argv)
    assert (cl.master, cl.spark_args, cl.job_args) == (master, spark, job)


def test_a_spark_option_without_its_value_is_a_usage_error():
    with pytest.raises(UsageError, match="--executor-memory needs a value"):
        launcher.split_argv(["--log-dir", "d", "--executor-memory"])


# --- Spark settings -----------------------------------------------------------------------------


def test_local_master_imports_the_package_dir_and_ships_no_zip(tmp_path):
    env = {"PATH": os.environ["PATH"], "KAFKA_COMPACTION_DIST_DIR": str(tmp_path)}
    s = launcher.spark_settings("local[2]", env=env)
    assert s.py_files == () and not os.listdir(tmp_path)
    assert s.conf["spark.ui.showConsoleProgress"] == "false"
    assert s.conf["spark.pyspark.python"] == sys.executable
    options = s.conf["spark.driver.extraJavaOptions"].split()
    assert f"-Dlog4j2.configurationFile=file:{launcher.LOG4J_CONFIG}" in options
    # the driver JVM never carries records: C1 only, the serial collector (cheaper in CPU)
    assert {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"} <= set(options)
    assert os.path.exists(launcher.LOG4J_CONFIG) and os.path.exists(s.application)
    assert s.env["PYTHONPATH"].split(os.pathsep)[0] == launcher.package_root()


def test_cluster_master_ships_the_zip_and_user_py_files_join_it(tmp_path):
    env = {**os.environ, "KAFKA_COMPACTION_DIST_DIR": str(tmp_path)}
    cl = launcher.split_argv(["--master", "spark://h:7077", "--py-files", "extra.zip", "--log-dir", "d"])
    cmd, run_env = launcher.submit_command(cl, env)
    assert cmd[cmd.index("--py-files") + 1] == f"{tmp_path}/compaction.zip,extra.zip"
    assert cmd.count("--py-files") == 1
    assert cmd[-3:] == [launcher.APPLICATION, "--log-dir", "d"]
    assert run_env["PYSPARK_PYTHON"] == sys.executable


def test_local_executors_fork_their_workers_from_our_daemon_unless_the_user_names_another(tmp_path):
    env = {**os.environ, "KAFKA_COMPACTION_DIST_DIR": str(tmp_path)}
    assert (
        launcher.spark_settings("local[1]", env=env).conf["spark.python.daemon.module"]
        == "compaction.spark.daemon"
    )
    # A cluster's daemon cannot import the package from the shipped zip (it reaches the workers only).
    assert "spark.python.daemon.module" not in launcher.spark_settings("spark://h:7077", env=env).conf
    cl = launcher.split_argv(["--conf", "spark.python.daemon.module=pyspark.daemon", "--log-dir", "d"])
    cmd, _ = launcher.submit_command(cl, env)
    given = [c for c in cmd if c.startswith("spark.python.daemon.module=")]
    assert given[-1] == "spark.python.daemon.module=pyspark.daemon"  # spark-submit keeps the last


def test_the_daemons_preload_loads_the_kernels_and_writes_nothing_to_stdout():
    # Its stdout carries the daemon's port to the JVM: one stray byte and no worker starts.
    from compaction.spark.warmup import warm

    warm()  # this host's cache of the kernels, where the subprocess's daemon finds it
    code = (
        "import sys; from compaction.spark import daemon; s = daemon.preload(); "
        "from compaction.kernels.rebuild import _rebuild_kernel as k; "
        "from compaction.spark.warmup import warm_best_effort; from compaction.settings import WorkerSettings; "
        "sys.stderr.write('%.3f %d %.3f %d' % (s, len(k.overloads), warm_best_effort(WorkerSettings()), "
        "'pandas' in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": launcher.package_root()},
    )
    seconds, loaded, again, pandas = done.stderr.split()[-4:]
    assert done.stdout == "" and float(seconds) > 0 and int(loaded) >= 1
    assert float(again) == 0.0  # a worker forked from the daemon does not run the tiny round again
    assert pandas == "0"  # nor the import of pandas that pyarrow would make (runtime/worker.py)


def test_on_a_host_without_the_kernels_cache_the_daemon_leaves_them_to_the_workers(tmp_path):
    """It does not know the round's store: the workers fetch the kernels from there, rather than
    the daemon compiling them all before the first worker starts."""
    code = (
        "import sys; from compaction.spark import daemon; s = daemon.preload(); "
        "from compaction.kernels.rebuild import _rebuild_kernel as k; "
        "sys.stderr.write('%.3f %d' % (s, len(k.overloads)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": launcher.package_root(), "NUMBA_CACHE_DIR": str(tmp_path)},
    )
    seconds, loaded = done.stderr.split()[-2:]
    assert done.stdout == "" and float(seconds) == 0.0 and int(loaded) == 0
    assert os.listdir(tmp_path) == []  # nothing compiled, nothing written


def test_the_launcher_imports_neither_pyspark_nor_numba():
    # It runs before every round, in front of two JVM starts: importing numba would add to each.
    code = (
        "import sys; from compaction.cli import launcher, options, preflight, class_archive; "
        "print(sorted(m for m in ('numba', 'pyspark') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": launcher.package_root()},
    )
    assert done.stdout.strip() == "[]"


def test_a_user_log4j_setting_replaces_ours():
    s = launcher.spark_settings(
        "local[1]", env=dict(os.environ), user_conf=["spark.driver.extraJavaOptions=-Dx=1"]
    )
    assert "spark.driver.extraJavaOptions" not in s.conf


def test_the_zip_is_rewritten_only_when_a_source_changes(tmp_path, monkeypatch):
    pkg = tmp_path / "src" / "compaction"
    shutil.copytree(launcher.PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(launcher, "PACKAGE_DIR", str(pkg))
    dist = tmp_path / "dist"
    zip_path = launcher.ensure_zip(str(dist))
    first = os.stat(zip_path)
    assert launcher.ensure_zip(str(dist)) == zip_path
    assert os.stat(zip_path).st_ino == first.st_ino  # not replaced
    with zipfile.ZipFile(zip_path) as zf:
        names = zf.namelist()
    assert "compaction/round.py" in names and "compaction/kernels/scan.py" in names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    (pkg / "round.py").write_text((pkg / "round.py").read_text() + "\n# changed\n")
    launcher.ensure_zip(str(dist))
    assert os.stat(zip_path).st_ino != first.st_ino
    with zipfile.ZipFile(zip_path) as zf:
        assert zf.read("compaction/round.py").endswith(b"# changed\n")
    assert sorted(os.listdir(dist)) == ["compaction.zip"]  # no temp file left


IMPORT_FROM_ZIP = "import compaction; print(compaction.__path__[0])"


def _imported_from(zip_path, cache) -> str:
    """Where `compaction` is imported from by a Python whose path is only the zip (an executor's)."""
    import subprocess

    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(zip_path), "NUMBA_CACHE_DIR": str(cache)}
    out = subprocess.run(
        [sys.executable, "-S", "-c", IMPORT_FROM_ZIP],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=str(cache),
    )
    return out.stdout.strip()


def test_an_executor_imports_the_zips_sources_from_a_copy_named_by_their_digest(tmp_path):
    """The copy's name comes from the digest `ensure_zip` writes into the zip's comment (read from
    the end of the file), not from hashing the zip; a zip without that comment is hashed."""
    import hashlib

    cache = tmp_path / "cache"
    cache.mkdir()
    zip_path = launcher.ensure_zip(str(tmp_path / "dist"))
    with zipfile.ZipFile(zip_path) as zf:
        digest = zf.comment.decode()
    copy = _imported_from(zip_path, cache)
    assert copy == str(cache / f"compaction-src-{digest[:16]}" / "compaction")
    assert _imported_from(zip_path, cache) == copy  # the next worker: the same copy, nothing extracted
    assert [p.name for p in cache.iterdir()] == [f"compaction-src-{digest[:16]}"]
    bare = tmp_path / "bare.zip"
    with zipfile.ZipFile(zip_path) as src, zipfile.ZipFile(bare, "w") as dst:
        for item in src.infolist():
            dst.writestr(item, src.read(item))
    whole = hashlib.sha256(bare.read_bytes()).hexdigest()
    assert _imported_from(bare, cache) == str(cache / f"compaction-src-{whole[:16]}" / "compaction")


def test_help_lists_spark_options_exit_codes_and_environment():
    text = launcher.help_epilog()
    for needle in (
        "--driver-memory",
        "--conf",
        "--opt=value",
        "Exit codes",
        "52",
        "JAVA_HOME",
        "PYSPARK_PYTHON",
        "SPARK_MASTER",
    ):
        assert needle in text


# --- option checks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--topics", "("], "--topics '(': not a regular expression"),
        (["--min-cleanable-dirty-ratio", "5"], "--min-cleanable-dirty-ratio: min.cleanable.dirty.ratio=5.0"),
        (["--segment-bytes", "10"], "--segment-bytes: segment.bytes=10 is outside [14, 2147483647]"),
        (["--delete-retention-ms", "-1"], "--delete-retention-ms: delete.retention.ms=-1"),
        (["--cleanup-policy", "archive"], "cleanup.policy='archive' is not compact"),
        (["--tasks-per-core", "0"], "--tasks-per-core 0"),
        (["--report", "r.json", "--report-html", "r.json"], "--report and --report-html name the same file"),
    ],
)
def test_out_of_range_options_are_usage_errors(args, message):
    with pytest.raises(UsageError) as err:
        check_options(parse_unchecked(["--log-dir", "d", *args]))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_malformed_topic_config_is_a_usage_error_naming_the_file(tmp_path):
    bad = tmp_path / "topics.properties"
    bad.write_text("orders.cleanup.policy=compact\nnot a config line\n")
    with pytest.raises(UsageError) as err:
        parse_unchecked(["--log-dir", "d", "--topic-config", str(bad)])
    assert str(err.value).startswith(f"{bad} line 2: ")
    with pytest.raises(UsageError, match="No such file"):
        parse_unchecked(["--log-dir", "d", "--topic-config", str(tmp_path / "missing.json")])


# --- what a directory is --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, entries, kind",
    [
        ("kafka-logs", [("orders-0", True)], preflight.LOG_DIR),
        ("kafka-logs", [("meta.properties", False)], preflight.LOG_DIR),  # a broker's, no topics yet
        ("kafka-logs", [("cleaner-offset-checkpoint", False), ("x", True)], preflight.LOG_DIR),
        (
            "orders-0",
            [("00000000000000000000.log", False), ("00000000000000000000.index", False)],
            preflight.PARTITION_DIR,
        ),
        ("orders-0", [("leader-epoch-checkpoint", False)], preflight.PARTITION_DIR),
        ("data", [("00000000000000000000.log", False)], preflight.OTHER),  # segments, but no partition name
        ("data", [("notes.txt", False), ("sub", True)], preflight.OTHER),
        ("data", [("orders-0-delete", True)], preflight.OTHER),  # only a deleted partition's dir
        ("data", [], preflight.EMPTY),
    ],
)
def test_log_dir_partition_dir_or_neither(name, entries, kind):
    assert preflight.classify_listing(name, entries) == kind


def test_check_log_dir_names_the_fix(tmp_path):
    (tmp_path / "logs" / "orders-3").mkdir(parents=True)
    (tmp_path / "logs" / "orders-3" / "00000000000000000000.log").write_bytes(b"")
    preflight.check_log_dir(str(tmp_path / "logs"))
    with pytest.raises(UsageError) as err:
        preflight.check_log_dir(str(tmp_path / "logs" / "orders-3"))
    assert f"partition dir, not a log dir; give its parent: --log-dir {tmp_path}/logs " in str(err.value)
    with pytest.raises(UsageError, match="no such directory"):
        preflight.check_log_dir(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="empty"):
        preflight.check_log_dir(str(tmp_path / "empty"))


def test_the_html_page_goes_where_the_round_can_write_it(tmp_path):
    (tmp_path / "logs" / "orders-0").mkdir(parents=True)
    log_dir = str(tmp_path / "logs")
    opts = parse_unchecked(["--log-dir", log_dir, "--report-html", str(tmp_path / "out" / "r.html")])
    with pytest.raises(UsageError, match=r"^--report-html .*/out/r.html: directory .*/out does not exist"):
        preflight.check_round(opts)
    opts = parse_unchecked(["--log-dir", log_dir, "--report-html", str(tmp_path)])
    with pytest.raises(UsageError, match="is a directory; give a file path"):
        preflight.check_round(opts)
    preflight.check_round(parse_unchecked(["--log-dir", log_dir, "--report-html", str(tmp_path / "r.html")]))


def test_find_java_explains_what_to_install(tmp_path):
    with pytest.raises(UsageError, match=r"no Java found.*JAVA_HOME"):
        preflight.find_java({"PATH": str(tmp_path)})
    with pytest.raises(UsageError, match="has no bin/java"):
        preflight.find_java({"JAVA_HOME": str(tmp_path), "PATH": os.environ["PATH"]})


# --- log lines ----------------------------------------------------------------------------------


def _entry(**kw):
    base = dict(
        topic="orders",
        partition=0,
        logDir="/d",
        status="cleaned",
        reason=None,
        dirtyRatio=0.75,
        firstDirtyOffset=0,
        endOffset=100,
        bytesRead=2 * 1_048_576,
        bytesWritten=1_048_576,
        recordsRead=100,
        recordsWritten=10,
        invalidRecords=0,
        seconds=1.0,
    )
    return {**base, **kw}


@pytest.mark.parametrize(
    "entry, level",
    [
        (_entry(), logging.INFO),
        (_entry(status="skipped", reason="below min.cleanable.dirty.ratio"), logging.INFO),
        (_entry(status="skipped", reason="nothing cleanable: active segment only"), logging.INFO),
        (_entry(status="skipped", reason="cleanup.policy is delete"), logging.INFO),
        (_entry(status="skipped", reason="some problem the policy does not explain"), logging.WARNING),
        (_entry(status="failed", reason="/d/orders-0/0.log: byte 61: crc"), logging.ERROR),
    ],
)
def test_a_partition_is_one_line_at_the_level_an_alert_needs(entry, level):
    stream = io.StringIO()
    logs.setup("text", stream)
    logs.log_partition(entry)
    line = stream.getvalue()
    assert line.count("\n") == 1 and f" {logging.getLevelName(level)} " in line
    assert "orders-0: " + entry["status"] in line


def test_cleaned_line_keeps_kafkas_numbers():
    line = logs.partition_line(_entry())
    assert "dirty section = [0, 100]" in line
    assert "2.0 MB of log processed in 1.0 seconds (2.0 MB/sec)" in line
    assert "50.0% size reduction (90.0% fewer messages)" in line


def test_json_format_is_one_object_per_line_with_the_fields():
    stream = io.StringIO()
    logs.setup("json", stream)
    logs.log_partition(_entry(status="failed", reason="bad\nthing"))
    logging.getLogger("x").warning("two\nlines")
    rows = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(rows) == 2
    assert rows[0]["level"] == "ERROR" and rows[0]["topic"] == "orders" and rows[0]["status"] == "failed"
    assert rows[0]["event"] == "partition" and rows[0]["reason"] == "bad\nthing"
    assert rows[1]["message"] == "two\nlines" and rows[1]["time"].endswith("Z")


def test_text_format_escapes_newlines():
    stream = io.StringIO()
    logs.setup("text", stream)
    logging.getLogger("x").error("two\nlines")
    assert stream.getvalue().count("\n") == 1


# --- metrics ------------------------------------------------------------------------------------


def _report(failed=0):
    totals = dict(
        partitions=3,
        cleaned=2 - failed,
        skipped=1,
        failed=failed,
        bytesRead=1000,
        bytesWritten=400,
        recordsRead=50,
        recordsWritten=20,
    )
    timings = {"planSeconds": 0.5, "totalSeconds": 9.25}
    return {"totals": totals, "timings": timings, "args": {"dry_run": False}}


def _samples(text, *, keep=False):
    """{(name, labels): value}; the labels every series has (`round`, `mode`) left out unless `keep`."""
    return {
        (
            s.name,
            tuple(sorted((k, v) for k, v in s.labels.items() if keep or k not in ("round", "mode"))),
        ): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_metrics_file_is_prometheus_text_with_totals_and_phases(tmp_path):
    path = tmp_path / "kafka_compaction.prom"
    metrics.write(str(path), _report(), 0, 1_700_000_000.5)
    got = _samples(path.read_text())
    assert got[("kafka_compaction_last_run_partitions", (("status", "cleaned"),))] == 2
    assert got[("kafka_compaction_last_run_reclaimed_bytes", ())] == 600
    assert got[("kafka_compaction_last_run_duration_seconds", (("phase", "total"),))] == 9.25
    assert got[("kafka_compaction_last_run_duration_seconds", (("phase", "plan"),))] == 0.5
    assert got[("kafka_compaction_last_success_timestamp_seconds", ())] == 1_700_000_000.5
    assert sorted(os.listdir(tmp_path)) == ["kafka_compaction.prom"]  # written by rename, no temp left


def test_a_failed_round_keeps_the_last_success_time(tmp_path):
    path = tmp_path / "kafka_compaction.prom"
    metrics.write(str(path), _report(), 0, 1_700_000_000.0)
    metrics.write(str(path), _report(failed=1), 1, 1_700_000_600.0)
    got = _samples(path.read_text())
    assert got[("kafka_compaction_last_run_exit_code", ())] == 1
    assert got[("kafka_compaction_last_run_timestamp_seconds", ())] == 1_700_000_600.0
    assert got[("kafka_compaction_last_success_timestamp_seconds", ())] == 1_700_000_000.0


def test_operator_settings_put_the_jobs_spark_submit_first_on_the_path():
    # what the Airflow DAG's SparkSubmitOperator gets: it runs `spark-submit` by name
    got = launcher.operator_settings(
        "local[2]", sys.executable, env=dict(os.environ), user_conf={"spark.ui.enabled": "false"}
    )
    first = got["env_vars"]["PATH"].split(os.pathsep)[0]
    assert os.access(os.path.join(first, got["spark_binary"]), os.X_OK)
    assert got["application"] == launcher.APPLICATION and got["py_files"] is None
    assert got["conf"]["spark.pyspark.driver.python"] == got["conf"]["spark.pyspark.python"] == sys.executable
    assert got["conf"]["spark.ui.enabled"] == "false"


def test_credentials_in_a_uri_never_reach_an_error_message():
    assert preflight.shown("s3://AKIA:s3cr3t@bucket/logs") == "s3://***@bucket/logs"
    assert preflight.shown("/data/kafka-logs") == "/data/kafka-logs"
    with pytest.raises(UsageError) as err:
        preflight.check_log_dir("s3://AKIA:s3cr3t@bucket/logs?scheme=http&no_such_option=1")
    assert "s3cr3t" not in str(err.value) and "AKIA" not in str(err.value)


# --- progress -----------------------------------------------------------------------------------


class _Tracker:
    """The slice of pyspark's StatusTracker the progress counter reads, driven by the test."""

    def __init__(self):
        self.jobs, self.stages = {}, {}

    def getJobInfo(self, jid):
        return self.jobs.get(jid)

    def getStageInfo(self, sid):
        return self.stages.get(sid)


class _Context:
    def __init__(self, tracker):
        self._tracker = tracker

    def statusTracker(self):
        return self._tracker


def _job(jid, stage_ids, status):
    from pyspark.status import SparkJobInfo

    return SparkJobInfo(jid, stage_ids, status)


def _stage(sid, tasks, done, active):
    from pyspark.status import SparkStageInfo

    return SparkStageInfo(sid, 0, "s", tasks, active, done, 0)


def test_progress_counts_every_job_since_it_started_also_one_that_ended_between_polls():
    from compaction.cli.progress import StageCounter

    t = _Tracker()
    t.jobs[0] = _job(0, [0], "SUCCEEDED")  # the warm-up: not the round's
    t.stages[0] = _stage(0, 2, 2, 0)
    counter = StageCounter.after_current(_Context(t))
    t.jobs[1] = _job(1, [1], "SUCCEEDED")  # started and ended before the first poll
    t.stages[1] = _stage(1, 4, 4, 0)
    t.jobs[2] = _job(2, [2, 3], "RUNNING")
    t.stages[2], t.stages[3] = _stage(2, 8, 3, 2), _stage(3, 2, 0, 0)
    assert counter.poll() == (7, 14, 2)
    t.stages[2] = _stage(2, 8, 7, 1)  # the tracker lags: the job returned, its last task not seen
    assert counter.poll(finished=True) == (14, 14, 0)


@pytest.mark.parametrize(
    "tracker, files, finished, expected",
    [
        ((0, 1, 1), dict(running=1, tasks=1), False, (0, 1, 1)),  # both agree: running
        ((0, 0, 0), dict(running=1, tasks=1), False, (0, 1, 1)),  # the tracker has not heard of the job
        ((0, 1, 0), dict(running=1, tasks=1), False, (0, 1, 1)),  # nor of the task's start
        ((0, 1, 0), dict(tasks=1, finished=1), False, (1, 1, 0)),  # nor of its start, and it ended
        ((0, 1, 1), dict(tasks=1, finished=1), False, (1, 1, 0)),  # nor of its end
        ((0, 2, 2), dict(running=1, tasks=2, finished=1), False, (1, 2, 1)),
        ((0, 2, 1), dict(running=1, tasks=1), False, (0, 2, 1)),  # one task has not beaten yet
        ((0, 1, 0), dict(tasks=1), False, (0, 1, 0)),  # an attempt failed, its retry not started yet
        ((6, 9, 2), dict(running=1, tasks=3, finished=2), False, (6, 9, 2)),  # tasks without files count
        ((0, 1, 1), dict(tasks=1, finished=1), True, (0, 1, 0)),  # every job returned: poll(finished) counts
    ],
)
def test_progress_task_counts_agree_with_what_the_executors_said(tracker, files, finished, expected):
    from compaction.cli.progress import reconcile
    from compaction.runtime.task_progress import Totals

    assert reconcile(*tracker, Totals(**files), finished) == expected


def test_progress_line_and_bar():
    from compaction.cli.progress import Reporter, Snapshot, bar, describe

    mb = 1_048_576
    s = Snapshot(
        tasks_done=0,
        tasks_total=2,
        running=2,
        elapsed=10.0,
        total_bytes=400 * mb,
        read=300 * mb,
        written=100 * mb,
        work_done=600 * mb,
        work_total=800 * mb,
        rate=40 * mb,
        work_rate=50 * mb,
    )
    assert s.fraction == 0.75 and s.eta == pytest.approx(4.0)  # 200 MB of work left at 50 MB/s
    line = describe(s, partitions=12)
    assert "0/2 tasks (2 running) for 12 partitions" in line
    assert "300.0 MB read, 100.0 MB written of 400.0 MB planned" in line
    assert "40.0 MB/s" in line and "75% done" in line and "ETA 0:00:04" in line
    assert bar(s, width=8) == "[######--]  75.0%"
    assert Snapshot(0, 2, 2, 1.0, 400 * mb, work_total=800 * mb).eta is None  # nothing done yet: no guess
    tty = io.StringIO()
    Reporter(stream=tty, tty=True).draw(s, 12)
    assert tty.getvalue().startswith("\r[") and "\n" not in tty.getvalue()  # redrawn in place
    plain = io.StringIO()
    logs.setup("json", plain)
    Reporter(stream=io.StringIO(), tty=False).draw(s, 12)
    row = json.loads(plain.getvalue())
    assert row["event"] == "progress" and row["tasksRunning"] == 2 and row["bytesTotal"] == 400 * mb
    assert row["bytesRead"] == 300 * mb and row["bytesWritten"] == 100 * mb and row["etaSeconds"] == 4.0


def test_the_launcher_tells_the_driver_when_its_output_reaches_a_terminal(monkeypatch):
    """spark-submit pipes the driver's output: only the launcher sees the user's terminal."""
    from compaction.cli.progress import TTY_ENV, Reporter

    monkeypatch.setenv(TTY_ENV, "1")
    assert Reporter(stream=io.StringIO())._tty
    monkeypatch.delenv(TTY_ENV)
    assert not Reporter(stream=io.StringIO())._tty


def test_two_log_dirs_on_one_host_write_distinct_series_and_a_name_replaces_the_dirs(tmp_path):
    one, two = _report(), _report()
    one["args"]["log_dirs"], two["args"]["log_dirs"] = ["/data/a/kafka-logs"], ["s3://bucket/b/kafka-logs"]
    a = _samples(metrics.render(one, 0, 1.0, None), keep=True)
    b = _samples(metrics.render(two, 0, 1.0, None), keep=True)
    assert not set(a) & set(b)  # node_exporter refuses a series two files both hold
    assert ("kafka_compaction_last_run_exit_code", (("mode", "round"), ("round", "/data/a/kafka-logs"))) in a
    two["args"]["metrics_name"] = 'eu "west"\\1'
    named = metrics.render(two, 0, 1.0, None)
    assert (
        "kafka_compaction_info",
        (("mode", "round"), ("round", 'eu "west"\\1'), ("version", metrics.__version__)),
    ) in _samples(named, keep=True)  # escaped in the file, read back as given


def test_a_dry_run_writes_its_own_file_and_never_the_rounds_series(tmp_path):
    path = tmp_path / "kafka_compaction.prom"
    metrics.write(str(path), _report(), 0, 1_700_000_000.0)
    before = path.read_text()
    dry = _report()
    dry["args"]["dry_run"] = True
    metrics.write(str(path), dry, 0, 1_700_000_600.0)
    assert path.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["kafka_compaction.dry-run.prom", "kafka_compaction.prom"]
    got = _samples((tmp_path / "kafka_compaction.dry-run.prom").read_text(), keep=True)
    assert {dict(labels)["mode"] for _, labels in got} == {"dry_run"}
    assert not any(name == "kafka_compaction_last_success_timestamp_seconds" for name, _ in got)
    assert not set(got) & set(_samples(before, keep=True))  # one collector reads both files


def test_a_round_that_selected_nothing_is_no_success(tmp_path):
    path = tmp_path / "kafka_compaction.prom"
    metrics.write(str(path), _report(), 0, 1_700_000_000.0)
    empty = _report()
    empty["totals"].update(partitions=0, cleaned=0, skipped=0)
    metrics.write(str(path), empty, 0, 1_700_000_600.0)  # --allow-empty, exit 0
    got = _samples(path.read_text())
    assert got[("kafka_compaction_last_success_timestamp_seconds", ())] == 1_700_000_000.0
    assert got[("kafka_compaction_last_run_timestamp_seconds", ())] == 1_700_000_600.0
