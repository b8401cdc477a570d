"""The Airflow DAG's params -> the job's command line (`compaction.airflow.job_args`), without
Airflow: its one import from Airflow is stubbed here (tests/e2e/test_airflow_e2e.py runs the DAG with
the real provider)."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

import compaction

STUBBED = (
    "airflow",
    "airflow.providers",
    "airflow.providers.apache",
    "airflow.providers.apache.spark",
    "airflow.providers.apache.spark.operators",
)


@pytest.fixture
def dag_args(monkeypatch):
    for name in STUBBED:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    operators = types.ModuleType("airflow.providers.apache.spark.operators.spark_submit")
    operators.SparkSubmitOperator = type("SparkSubmitOperator", (), {})
    monkeypatch.setitem(sys.modules, operators.__name__, operators)
    monkeypatch.delitem(sys.modules, "compaction.airflow", raising=False)
    monkeypatch.setattr(compaction, "airflow", None, raising=False)
    module = importlib.import_module("compaction.airflow")
    yield module
    sys.modules.pop("compaction.airflow", None)  # the stubbed import must not outlive the test


def test_report_html_puts_the_page_next_to_the_json_report(dag_args):
    params = {
        **dag_args.DEFAULT_PARAMS,
        "log_dirs": ["/data/logs"],
        "report_dir": "/data/reports/",
        "report_html": True,
        "dry_run": True,
    }
    args = dag_args.job_args(params, 5, "manual__2026-01-01T00:00:00+00:00")
    run = "/data/reports/manual__2026-01-01T00_00_00_00_00"
    assert args[args.index("--report") + 1] == f"{run}.json"
    assert args[args.index("--report-html") + 1] == f"{run}.html"
    assert "--dry-run" in args


def test_no_page_unless_asked_and_never_without_a_report_dir(dag_args):
    params = {**dag_args.DEFAULT_PARAMS, "log_dirs": ["/data/logs"], "report_dir": "/data/reports"}
    assert "--report-html" not in dag_args.job_args(params, 5, "r")
    with pytest.raises(ValueError, match=r"report_html needs params\.report_dir"):
        dag_args.job_args({**params, "report_dir": None, "report_html": True}, 5, "r")


def test_erase_params_pass_the_key_file(dag_args):
    params = {
        **dag_args.DEFAULT_PARAMS,
        "log_dirs": ["/d"],
        "erase_keys": "s3://b/keys.txt",
        "erase_only": True,
    }
    args = dag_args.job_args(params, 5, "r")
    assert args[args.index("--erase-keys") + 1] == "s3://b/keys.txt" and "--erase-only" in args
    assert "--erase-keys" not in dag_args.job_args({**dag_args.DEFAULT_PARAMS, "log_dirs": ["/d"]}, 5, "r")


@pytest.mark.parametrize(
    "conn_type, host, port, master",
    [
        ("spark", "local[*]", None, "local[*]"),
        ("spark", "yarn", None, "yarn"),
        ("spark", "spark://master", 7077, "spark://master:7077"),
        ("spark", "master", 7077, "spark://master:7077"),  # a bare host with a port: the type is the scheme
        ("spark", "k8s://https://api.internal", 443, "k8s://https://api.internal:443"),
        ("k8s", "https://api.internal", None, "k8s://https://api.internal"),
    ],
)
def test_the_master_is_read_from_the_connection_as_the_provider_reads_it(
    dag_args, conn_type, host, port, master
):
    assert dag_args.connection_master(conn_type, host, port) == master


def test_every_param_is_typed_and_described(dag_args):
    for name, spec in dag_args.PARAMS.items():
        assert spec.get("type") and spec.get("description"), name
    assert "default" not in dag_args.PARAMS["log_dirs"] and dag_args.PARAMS["log_dirs"]["minItems"] == 1
    assert "master" not in dag_args.PARAMS  # the connection's


def test_the_purge_param_passes_the_option(dag_args):
    params = {
        **dag_args.DEFAULT_PARAMS,
        "log_dirs": ["s3://b/l"],
        "erase_keys": "k",
        "purge_noncurrent_versions": True,
    }
    assert "--purge-noncurrent-versions" in dag_args.job_args(params, 5, "r")
