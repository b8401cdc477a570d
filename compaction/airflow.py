"""Airflow: the compaction round as a `SparkSubmitOperator` (apache-airflow-providers-apache-spark)
whose Spark settings come from the launcher (`launcher.operator_settings`), so none is copied by
hand, and whose job arguments come from the DAG run's params.

Imported by the DAG file (jobs/airflow/kafka_log_compaction.py) in Airflow's own environment,
which needs only this package's pure-Python launcher (no pyspark, numba, pyarrow): the round runs
on `python` (param, else env KAFKA_COMPACTION_PYTHON, else Airflow's own interpreter), a Python
with the job's dependencies.
"""

from __future__ import annotations

import os
import re
import time

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from compaction.cli import launcher

# The DAG's params: where and how. The job's Kafka options are None (Kafka's default) unless set.
DEFAULT_PARAMS: dict[str, object] = {
    "log_dirs": [],  # Kafka log dir URIs
    "report_dir": None,  # the JSON report goes to <report_dir>/<run id>.json
    "report_html": False,  # also the report's HTML page, <report_dir>/<run id>.html
    "master": "local[*]",
    "python": None,  # the job's Python (default: env KAFKA_COMPACTION_PYTHON, else Airflow's)
    "topics": None,
    "dry_run": False,
    "min_cleanable_dirty_ratio": None,
    "delete_retention_ms": None,
    "min_compaction_lag_ms": None,
    "max_compaction_lag_ms": None,
    "segment_bytes": None,
    "topic_config": None,
    "erase_keys": None,  # a key file (--erase-keys) on the host the driver runs on
    "erase_only": False,  # with erase_keys: erase, no compaction (--erase-only)
    "spark_conf": {},  # extra Spark settings, e.g. {"spark.executor.memory": "4g"}
    "extra_args": [],  # any other job options, e.g. ["--tasks-per-core", "1"]
}

_VALUE_FLAGS = ("topics", "min_cleanable_dirty_ratio", "delete_retention_ms", "min_compaction_lag_ms",
                "max_compaction_lag_ms", "segment_bytes", "topic_config", "erase_keys")  # fmt: skip


def job_args(params: dict, now_ms: int, run_id: str) -> list[str]:
    """The job's command line for one DAG run."""
    log_dirs = params.get("log_dirs") or []
    if isinstance(log_dirs, str):
        log_dirs = [log_dirs]
    if not log_dirs:
        raise ValueError("params.log_dirs is empty: give the Kafka log dirs to compact")
    args = [a for d in log_dirs for a in ("--log-dir", str(d))]
    args += ["--now-ms", str(now_ms)]
    if params.get("report_html") and not params.get("report_dir"):
        raise ValueError("params.report_html needs params.report_dir: the directory the page goes to")
    if params.get("report_dir"):
        base = f"{str(params['report_dir']).rstrip('/')}/{re.sub(r'[^A-Za-z0-9_.-]+', '_', run_id)}"
        args += ["--report", f"{base}.json"]
        if params.get("report_html"):
            args += ["--report-html", f"{base}.html"]
    for key in _VALUE_FLAGS:
        if params.get(key) is not None:
            args += ["--" + key.replace("_", "-"), str(params[key])]
    if params.get("dry_run"):
        args.append("--dry-run")
    if params.get("erase_only"):
        args.append("--erase-only")
    return args + [str(a) for a in params.get("extra_args") or []]


def now_ms_of(context) -> int:
    """The round's clock: the end of the run's data interval (a rerun of the run compacts alike)."""
    for key in ("data_interval_end", "logical_date"):
        value = context.get(key)
        if value is not None:
            return int(value.timestamp() * 1000)
    return int(time.time() * 1000)


class CompactionSubmitOperator(SparkSubmitOperator):
    """A `SparkSubmitOperator` for one compaction round, configured at run time from the params
    (`DEFAULT_PARAMS`). The master is the `master` param: the provider takes it from its
    connection only, so the hook's resolved connection gets it (the one private field touched;
    tests/e2e/test_airflow_e2e.py runs this against the installed provider)."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("name", launcher.APP_NAME)
        super().__init__(**kwargs)
        self._master: str | None = None

    def execute(self, context):
        params = {**DEFAULT_PARAMS, **(context.get("params") or {})}
        python = params.get("python") or os.environ.get("KAFKA_COMPACTION_PYTHON") or None
        self._master = str(params.get("master") or "local[*]")
        user_conf = dict(params.get("spark_conf") or {})
        settings = launcher.operator_settings(self._master, python, user_conf=user_conf)
        self.application = settings["application"]
        self.conf = {**settings["conf"], **(self.conf or {})}
        self.py_files = settings["py_files"]
        self.env_vars = {**settings["env_vars"], **(self.env_vars or {})}
        self._spark_binary = settings["spark_binary"]
        run_id = str(context.get("run_id") or "manual")
        self.application_args = job_args(params, now_ms_of(context), run_id)
        shown = re.sub(r"://[^/@\s]+@", "://***@", " ".join(self.application_args))  # no credentials in logs
        self.log.info("kafka-compaction round on %s: %s", self._master, shown)
        return super().execute(context)

    def _get_hook(self):
        hook = super()._get_hook()
        hook._connection["master"] = self._master
        return hook
