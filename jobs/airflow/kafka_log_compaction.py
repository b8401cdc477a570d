"""Airflow DAG `kafka_log_compaction`: one offline compaction round per run, through Airflow's
`SparkSubmitOperator` configured by `compaction.airflow` (no Spark setting copied by hand).

Put this file in the DAG folder; Airflow's environment needs the `compaction` package (`pip install
--no-deps kafka-offline-compaction`: its launcher is pure Python) or this checkout (found from the
file's own place). The round runs on a Python with the job's dependencies: the `python` param, or
env KAFKA_COMPACTION_PYTHON on the workers. Trigger with the log dirs, e.g.

    airflow dags trigger kafka_log_compaction --conf '{"log_dirs": ["/data/kafka-archive"],
        "report_dir": "/data/reports", "report_html": true}'

`"report_html": true` adds the report's HTML page, `<run id>.html`, next to its JSON.

`max_active_runs=1`: two rounds must never work on the same log dirs at once (object stores have
no lock). `--now-ms` is the end of the run's data interval, so a rerun decides alike.
"""

from __future__ import annotations

import os
import sys

try:
    from compaction.airflow import DEFAULT_PARAMS, CompactionSubmitOperator
except ImportError:  # a checkout: <repo>/jobs/airflow/this file
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from compaction.airflow import DEFAULT_PARAMS, CompactionSubmitOperator

import pendulum
from airflow.sdk import DAG

with DAG(
    dag_id="kafka_log_compaction",
    description="Offline Kafka log compaction (LogCleaner rounds on Spark)",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=dict(DEFAULT_PARAMS),
    tags=["kafka", "compaction"],
):
    CompactionSubmitOperator(task_id="compact")
