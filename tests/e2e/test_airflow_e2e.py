"""The Airflow DAG `kafka_log_compaction` (jobs/airflow/) with real Airflow 3 and its Spark
provider, installed in their own venv (not the project's: `.ci/run` makes `.airflow-venv`; this
module makes it when missing; env KAFKA_COMPACTION_AIRFLOW_VENV points elsewhere).

* the DAG folder imports with zero errors in a `DagBag`, with the DAG's id, typed params with
  descriptions (Airflow refuses a run with no log dir), `max_active_runs=1`, its task a
  `SparkSubmitOperator`; without log dirs it has no schedule (no run that must fail), with them in
  its environment a daily one;
* `airflow dags test kafka_log_compaction --conf '{"log_dirs": [...], "report_dir": ...}'` compacts a
  generated log dir end to end on the master of the `spark_default` connection (the report and its
  HTML page in report_dir, the records checked with kafka-python, the round's progress lines in the
  task log). Airflow's environment has no pyspark nor numba: the round runs on this Python (env
  KAFKA_COMPACTION_PYTHON), as on a real Airflow worker;
* without that connection the task fails saying how to make it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from e2ekit import REPO, cleanable_bound, decode_partition, latest_per_key
from genkit import run_generate

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(900)]

DAG_FOLDER = os.path.join(REPO, "jobs", "airflow")
AIRFLOW_REQUIREMENTS = (
    "apache-airflow>=3,<4",
    "apache-airflow-providers-apache-spark",
    "apache-airflow-providers-standard",
)


def airflow_venv() -> str:
    venv = os.environ.get("KAFKA_COMPACTION_AIRFLOW_VENV") or os.path.join(REPO, ".airflow-venv")
    if not os.path.exists(os.path.join(venv, "bin", "airflow")):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", *AIRFLOW_REQUIREMENTS], check=True)
    return venv


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    venv = airflow_venv()
    home = tmp_path_factory.mktemp("airflow-home")
    dropped = ("AIRFLOW", "PYTHONPATH", "SPARK_", "PYSPARK_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=DAG_FOLDER,
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        KAFKA_COMPACTION_PYTHON=sys.executable,
    )
    migrate = subprocess.run(
        [os.path.join(venv, "bin", "airflow"), "db", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    return venv, env


PROBE = (
    "import json\n"
    "from airflow.dag_processing.dagbag import DagBag\n"
    "from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator\n"
    f"bag = DagBag({DAG_FOLDER!r})\n"
    "dag = bag.get_dag('kafka_log_compaction')\n"
    "def refused(conf):\n"
    "    import copy\n"
    "    params = copy.deepcopy(dag.params)\n"
    "    try:\n"
    "        params.update(conf)\n"
    "        params.validate()\n"
    "    except Exception as exc:\n"
    "        return type(exc).__name__\n"
    "print(json.dumps({'errors': {k: str(v) for k, v in bag.import_errors.items()},\n"
    "  'ids': sorted(bag.dag_ids), 'max_active_runs': dag.max_active_runs,\n"
    "  'schedule': str(dag.schedule), 'periodic': type(dag.timetable).__name__ != 'NullTimetable',\n"
    "  'schemas': {k: p.schema for k, p in dag.params.items()},\n"
    "  'described': {k: bool(p.description) for k, p in dag.params.items()},\n"
    "  'log_dirs': dag.params.get_param('log_dirs').value if dag.params.get_param('log_dirs').has_value else None,\n"
    "  'refused': {'none': refused({}), 'empty': refused({'log_dirs': []}), 'ratio': refused({'log_dirs': ['/d'],\n"
    "              'min_cleanable_dirty_ratio': 2}), 'ok': refused({'log_dirs': ['/d']})},\n"
    "  'spark': [isinstance(t, SparkSubmitOperator) for t in dag.tasks]}))\n"
)


def _probe(venv, env) -> dict:
    out = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_dag_folder_imports_with_zero_errors(airflow):
    venv, env = airflow
    got = _probe(venv, env)
    assert got["errors"] == {} and got["ids"] == ["kafka_log_compaction"]
    assert got["max_active_runs"] == 1 and got["spark"] == [True]
    assert {"log_dirs", "report_dir", "report_html", "topics", "dry_run", "archives"} <= set(got["schemas"])
    assert "master" not in got["schemas"]  # the connection's
    assert all(got["described"].values()), got["described"]
    assert all("type" in schema for schema in got["schemas"].values())
    # No log dirs configured: no schedule, and a run without them is refused before it starts.
    assert not got["periodic"] and got["log_dirs"] is None
    assert got["refused"]["none"] and got["refused"]["empty"] and got["refused"]["ratio"]
    assert got["refused"]["ok"] is None


def test_with_log_dirs_in_its_environment_the_dag_runs_daily(airflow):
    venv, env = airflow
    got = _probe(venv, {**env, "KAFKA_COMPACTION_LOG_DIRS": '["s3://kafka-archive/broker-1"]'})
    assert got["errors"] == {} and got["periodic"] and got["schedule"] == "@daily"
    assert got["log_dirs"] == ["s3://kafka-archive/broker-1"] and got["refused"]["none"] is None


def test_dags_test_compacts_a_generated_log_dir(airflow, tmp_path):
    venv, env = airflow
    log_dir, reports = tmp_path / "kafka-logs", tmp_path / "reports"
    reports.mkdir()
    run_generate(
        log_dir,
        "--topics orders:2 --records 3000 --keys 250 --codec mixed --segment-bytes 30000 --seed 3",
    )
    before = {p: decode_partition(str(log_dir / f"orders-{p}")) for p in range(2)}
    bounds = {p: cleanable_bound(str(log_dir / f"orders-{p}")) for p in range(2)}
    conf = {
        "log_dirs": [str(log_dir)],
        "report_dir": str(reports),
        "report_html": True,
        "spark_conf": {"spark.ui.enabled": "false"},
    }
    # The master is the connection's (Airflow reads AIRFLOW_CONN_<ID> as a connection).
    connection = json.dumps({"conn_type": "spark", "host": "local[1]"})
    proc = subprocess.run(
        [
            os.path.join(venv, "bin", "airflow"),
            "dags",
            "test",
            "kafka_log_compaction",
            "--conf",
            json.dumps(conf),
        ],
        env={**env, "AIRFLOW_CONN_SPARK_DEFAULT": connection},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=800,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert "state=success" in log, log[-5000:]
    assert "kafka-compaction round on local[1] (connection spark_default)" in log
    assert "spark-submit --master local[1] " in log  # the provider's own command line
    assert "compaction.progress: planned 2 partitions" in log and "tasks (0 running)" in log
    (report_path,) = reports.glob("*.json")
    report = json.loads(report_path.read_text())
    assert report_path.with_suffix(".html").read_text().startswith("<!DOCTYPE html>")
    assert [p["status"] for p in report["partitions"]] == ["cleaned", "cleaned"]
    for p in report["partitions"]:
        bound = bounds[p["partition"]]
        assert p["firstUncleanableOffset"] == bound
        after = decode_partition(str(log_dir / f"orders-{p['partition']}"))
        want = latest_per_key(before[p["partition"]], bound)
        assert {r.key: r for r in after if r.offset < bound} == want
        assert len([r for r in after if r.offset < bound]) == len(want)
        tail = [r for r in before[p["partition"]] if r.offset >= bound]
        assert [r for r in after if r.offset >= bound] == tail


def test_without_the_connection_the_task_says_how_to_make_it(airflow, tmp_path):
    venv, env = airflow
    proc = subprocess.run(
        [
            os.path.join(venv, "bin", "airflow"),
            "dags",
            "test",
            "kafka_log_compaction",
            "--conf",
            json.dumps({"log_dirs": [str(tmp_path)]}),
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert "state=success" not in log
    assert (
        "no Airflow connection 'spark_default'" in log and "airflow connections add spark_default" in log
    ), log[-5000:]
