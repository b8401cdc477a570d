"""Airflow: the compaction round as a `SparkSubmitOperator` (apache-airflow-providers-apache-spark)
whose Spark settings come from the launcher (`launcher.operator_settings`), so none is copied by
hand, and whose job arguments come from the DAG run's params.

The Spark master is the operator's Airflow connection's (`conn_id`, default `spark_default`), as
for any `SparkSubmitOperator`: the provider's hook passes it to spark-submit, and this module reads
the same connection (Airflow's public `Connection.get`) only to set the launcher's settings for it
(a local master runs the package's own worker daemon, a cluster gets the package as a zip).

Imported by the DAG file (jobs/airflow/kafka_log_compaction.py) in Airflow's own environment,
which needs only this package's pure-Python launcher (no pyspark, numba, pyarrow): the round runs
on `python` (param, else env KAFKA_COMPACTION_PYTHON, else Airflow's own interpreter), a Python
with the job's dependencies. `PARAMS` are JSON-schema specs the DAG turns into Airflow `Param`s,
so Airflow checks a run's conf against them before the task starts.
"""

from __future__ import annotations

import os
import re
import time

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from compaction.cli import launcher

_TEXT = ["null", "string"]
_MS = {"default": None, "type": ["null", "integer"], "minimum": 0}

# The DAG's params: where and how. The job's Kafka options are None (Kafka's default) unless set.
PARAMS: dict[str, dict] = {
    "log_dirs": {
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "minItems": 1,
        "description": "The Kafka log dirs to compact: local paths or URIs (s3://bucket/prefix, "
        "hdfs://..., gs://...), each a directory a broker's log.dirs named.",
    },
    "report_dir": {
        "default": None,
        "type": _TEXT,
        "description": "Where each run's JSON report goes, as <report_dir>/<run id>.json (a path on the "
        "driver's host, or a URI).",
    },
    "report_html": {
        "default": False,
        "type": "boolean",
        "description": "Also write the report's HTML page, <report_dir>/<run id>.html.",
    },
    "python": {
        "default": None,
        "type": _TEXT,
        "description": "The driver's Python, with the job's dependencies (default: env "
        "KAFKA_COMPACTION_PYTHON on the Airflow worker, else Airflow's own).",
    },
    "executor_python": {
        "default": None,
        "type": _TEXT,
        "description": "The executors' Python when it is not the driver's: e.g. "
        "./environment/bin/python from a packed virtualenv given in archives.",
    },
    "archives": {
        "default": None,
        "type": _TEXT,
        "description": "Spark's spark.archives: a packed virtualenv for the executors, e.g. "
        "hdfs:///envs/kafka-compaction.tar.gz#environment (docs/deployment.md).",
    },
    "topics": {
        "default": None,
        "type": _TEXT,
        "description": "A regex of the topics to consider (full match).",
    },
    "dry_run": {
        "default": False,
        "type": "boolean",
        "description": "Plan and size what a round would free; write nothing.",
    },
    "min_cleanable_dirty_ratio": {
        "default": None,
        "type": ["null", "number"],
        "minimum": 0,
        "maximum": 1,
        "description": "Kafka's min.cleanable.dirty.ratio (default 0.5).",
    },
    "delete_retention_ms": {**_MS, "description": "Kafka's delete.retention.ms (default 86400000)."},
    "min_compaction_lag_ms": {**_MS, "description": "Kafka's min.compaction.lag.ms (default 0)."},
    "max_compaction_lag_ms": {**_MS, "description": "Kafka's max.compaction.lag.ms (default Long.MAX)."},
    "segment_bytes": {
        "default": None,
        "type": ["null", "integer"],
        "minimum": 14,
        "description": "Kafka's segment.bytes (default 1073741824).",
    },
    "topic_config": {
        "default": None,
        "type": _TEXT,
        "description": "A per-topic config file (--topic-config) on the driver's host.",
    },
    "erase_keys": {
        "default": None,
        "type": _TEXT,
        "description": "A key file (--erase-keys): every record of its keys is removed; a path on "
        "the driver's host or a URI.",
    },
    "erase_only": {
        "default": False,
        "type": "boolean",
        "description": "With erase_keys: erase only, no compaction (--erase-only).",
    },
    "purge_noncurrent_versions": {
        "default": False,
        "type": "boolean",
        "description": "On a versioned S3 bucket: delete the old versions of the "
        "replaced segment objects (--purge-noncurrent-versions).",
    },
    "spark_conf": {
        "default": {},
        "type": "object",
        "additionalProperties": {"type": ["string", "number", "boolean"]},
        "description": 'More Spark settings, e.g. {"spark.executor.memory": "4g"}.',
    },
    "extra_args": {
        "default": [],
        "type": "array",
        "items": {"type": "string"},
        "description": 'Any other job options, e.g. ["--tasks-per-core", "1"].',
    },
}
DEFAULT_PARAMS: dict[str, object] = {
    "log_dirs": [],
    **{k: v["default"] for k, v in PARAMS.items() if "default" in v},
}

_VALUE_FLAGS = (
    "topics",
    "min_cleanable_dirty_ratio",
    "delete_retention_ms",
    "min_compaction_lag_ms",
    "max_compaction_lag_ms",
    "segment_bytes",
    "topic_config",
    "erase_keys",
)
_SWITCHES = ("dry_run", "erase_only", "purge_noncurrent_versions")


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
    args += ["--" + key.replace("_", "-") for key in _SWITCHES if params.get(key)]
    return args + [str(a) for a in params.get("extra_args") or []]


def now_ms_of(context) -> int:
    """The round's clock: the end of the run's data interval (a rerun of the run compacts alike)."""
    for key in ("data_interval_end", "logical_date"):
        value = context.get(key)
        if value is not None:
            return int(value.timestamp() * 1000)
    return int(time.time() * 1000)


def connection_master(conn_type: str | None, host: str | None, port: int | None) -> str:
    """The master a Spark connection names, read as the provider's hook reads it (its connection
    docs): a `spark` connection's host is the master URL (`local[*]`, `yarn`, `spark://h`,
    `k8s://https://h`) unless it is a bare host with a port; any other type is the scheme."""
    if conn_type == "spark" and host and ("://" in host or not port):
        master = host
    else:
        master = f"{conn_type}://{host or ''}"
    return f"{master}:{port}" if port else master


class CompactionSubmitOperator(SparkSubmitOperator):
    """A `SparkSubmitOperator` for one compaction round, configured at run time from the params
    (`PARAMS`). The master (and deploy mode) are its connection's, `conn_id`."""

    def __init__(self, *, conn_id: str = "spark_default", **kwargs) -> None:
        kwargs.setdefault("name", launcher.APP_NAME)
        super().__init__(conn_id=conn_id, **kwargs)
        self.spark_conn_id = conn_id

    def execute(self, context):
        params = {**DEFAULT_PARAMS, **(context.get("params") or {})}
        python = params.get("python") or os.environ.get("KAFKA_COMPACTION_PYTHON") or None
        master, deploy_mode = self._spark_connection()
        user_conf = {k: str(v) for k, v in (params.get("spark_conf") or {}).items()}
        if params.get("archives"):
            user_conf["spark.archives"] = str(params["archives"])
        settings = launcher.operator_settings(
            master,
            python,
            user_conf=user_conf,
            deploy_mode=deploy_mode,
            executor_python=params.get("executor_python") or None,
        )
        self.application = settings["application"]
        self.conf = {**settings["conf"], **(self.conf or {})}
        self.py_files = settings["py_files"]
        self.env_vars = {**settings["env_vars"], **(self.env_vars or {})}
        self._spark_binary = settings["spark_binary"]
        run_id = str(context.get("run_id") or "manual")
        self.application_args = job_args(params, now_ms_of(context), run_id)
        shown = re.sub(r"://[^/@\s]+@", "://***@", " ".join(self.application_args))  # no credentials in logs
        self.log.info("kafka-compaction round on %s (connection %s): %s", master, self.spark_conn_id, shown)
        return super().execute(context)

    def _spark_connection(self) -> tuple[str, str | None]:
        """(master, deploy mode) of the operator's connection; a missing connection is an error
        that says how to make it (the provider would fall back to yarn)."""
        from airflow.sdk import Connection

        try:
            conn = Connection.get(self.spark_conn_id)
        except Exception as exc:
            raise ValueError(
                f"no Airflow connection {self.spark_conn_id!r} ({exc}): it names the Spark master; create it, e.g. "
                f"airflow connections add {self.spark_conn_id} --conn-type spark --conn-host 'local[*]' "
                "(or yarn, spark://host:7077, k8s://https://host:443)"
            ) from None
        extra = conn.extra_dejson or {}
        return connection_master(conn.conn_type, conn.host, conn.port), extra.get("deploy-mode")
