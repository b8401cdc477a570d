"""Airflow DAG `kafka_log_compaction`: one offline compaction round per run, through Airflow's
`SparkSubmitOperator` configured by `compaction.airflow` (no Spark setting copied by hand).

Put this file in the DAG folder; Airflow's environment needs the `compaction` package (`pip install
--no-deps kafka-offline-compaction`: its launcher is pure Python) or this checkout (found from the
file's own place). The round runs on a Python with the job's dependencies: the `python` param, or
env KAFKA_COMPACTION_PYTHON on the workers. The Spark master is the Airflow connection's
(`spark_default`, or env KAFKA_COMPACTION_SPARK_CONN_ID), as for any SparkSubmitOperator.

Without log dirs the DAG has no schedule, so it schedules no run that must fail: trigger it with
them,

    airflow dags trigger kafka_log_compaction --conf '{"log_dirs": ["/data/kafka-archive"],
        "report_dir": "/data/reports", "report_html": true}'

or give them to the DAG processor's environment (JSON), which makes them the default and
schedules a round daily (env KAFKA_COMPACTION_SCHEDULE: another cron or preset):

    KAFKA_COMPACTION_LOG_DIRS='["s3://kafka-archive/broker-1"]'

`max_active_runs=1`: two rounds must never work on the same log dirs at once (object stores have
no lock). `--now-ms` is the end of the run's data interval, so a rerun decides alike.
"""

from __future__ import annotations

import json
import os
import sys

try:
    from compaction.airflow import PARAMS, CompactionSubmitOperator
except ImportError:  # a checkout: <repo>/jobs/airflow/this file
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from compaction.airflow import PARAMS, CompactionSubmitOperator

import pendulum
from airflow.sdk import DAG, Param

LOG_DIRS = json.loads(os.environ.get("KAFKA_COMPACTION_LOG_DIRS") or "[]")
SCHEDULE = (os.environ.get("KAFKA_COMPACTION_SCHEDULE") or "@daily") if LOG_DIRS else None
SPARK_CONN_ID = os.environ.get("KAFKA_COMPACTION_SPARK_CONN_ID") or "spark_default"

params = {name: Param(**spec) for name, spec in PARAMS.items()}
if LOG_DIRS:
    params["log_dirs"] = Param(LOG_DIRS, **PARAMS["log_dirs"])

with DAG(
    dag_id="kafka_log_compaction",
    description="Offline Kafka log compaction (LogCleaner rounds on Spark)",
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=params,
    tags=["kafka", "compaction"],
):
    CompactionSubmitOperator(task_id="compact", conn_id=SPARK_CONN_ID)
