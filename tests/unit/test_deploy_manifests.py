"""deploy/: the Kubernetes manifests (spark-operator's SparkApplication and ScheduledSparkApplication)
against the image of deploy/Dockerfile and the job: loaded with PyYAML, they run the image the
Dockerfile builds, the entry file it puts at the path they name, the job's own options and Spark
confs that exist, and the Spark release of the image. The Dockerfile's steps themselves run in
tests/e2e/test_deploy_e2e.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import tomllib
import yaml

import compaction
from compaction.cli.launcher import DRIVER_JVM_OPTIONS
from compaction.cli.options import build_parser
from compaction.settings import CONF_PREFIX, knobs

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
PACKAGE = Path(compaction.__file__).parent


def _load(name: str) -> dict:
    return yaml.safe_load((DEPLOY / "k8s" / name).read_text(encoding="utf-8"))


def _apps() -> list[tuple[str, dict]]:
    app, scheduled = _load("sparkapplication.yaml"), _load("scheduledsparkapplication.yaml")
    return [
        ("sparkapplication.yaml", app["spec"]),
        ("scheduledsparkapplication.yaml", scheduled["spec"]["template"]),
    ]


def _dockerfile_env() -> dict[str, str]:
    env = {}
    for block in re.findall(r"^ENV (.+?)(?<!\\)$", DOCKERFILE, re.M | re.S):
        for name, value in re.findall(r"([A-Z_]+)=(\S+)", block):
            env[name] = value
    return env


def test_the_manifests_are_the_operators_kinds():
    app, scheduled = _load("sparkapplication.yaml"), _load("scheduledsparkapplication.yaml")
    assert (app["apiVersion"], app["kind"]) == ("sparkoperator.k8s.io/v1beta2", "SparkApplication")
    assert (scheduled["apiVersion"], scheduled["kind"]) == (
        "sparkoperator.k8s.io/v1beta2",
        "ScheduledSparkApplication",
    )
    # Two rounds on one prefix at once would corrupt it: a schedule never overlaps its runs.
    assert scheduled["spec"]["concurrencyPolicy"] == "Forbid"
    assert scheduled["spec"]["template"] == app["spec"]  # the nightly round is the same round


@pytest.mark.parametrize("name, spec", _apps())
def test_they_run_the_image_the_dockerfile_builds(name, spec):
    assert f"-t {spec['image']} " in DOCKERFILE, (
        f"{name}: the image is not the one deploy/Dockerfile is built as"
    )
    assert spec["image"] == f"kafka-compaction:{VERSION}"
    spark = re.search(r"^ARG SPARK_VERSION=(\S+)$", DOCKERFILE, re.M).group(1)
    assert spec["sparkVersion"] == spark
    # the official image of that release
    assert re.search(r"^FROM spark:\$\{SPARK_VERSION\}-", DOCKERFILE, re.M)


@pytest.mark.parametrize("name, spec", _apps())
def test_they_name_the_entry_file_and_python_the_image_has(name, spec):
    env = _dockerfile_env()
    app_dir = "/opt/kafka-compaction/app"
    # The Dockerfile links app/ to the installed package: the manifest's file is the package's job.py.
    assert re.search(r"ln -sfn .*compaction\.__file__.* " + re.escape(app_dir) + "$", DOCKERFILE, re.M)
    assert spec["mainApplicationFile"] == f"local://{app_dir}/job.py" and (PACKAGE / "job.py").is_file()
    conf = spec["sparkConf"]
    assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == env["PYSPARK_PYTHON"]
    log4j = re.search(r"-Dlog4j2.configurationFile=file:(\S+)", conf["spark.driver.extraJavaOptions"]).group(
        1
    )
    assert log4j.startswith(app_dir + "/") and (PACKAGE / os.path.relpath(log4j, app_dir)).is_file()
    # the launcher's driver options, all of them
    assert set(DRIVER_JVM_OPTIONS.split()) <= set(conf["spark.driver.extraJavaOptions"].split())
    daemon = conf["spark.python.daemon.module"]
    assert (PACKAGE.parent / (daemon.replace(".", "/") + ".py")).is_file()


@pytest.mark.parametrize("name, spec", _apps())
def test_their_options_and_confs_exist(name, spec):
    args = build_parser().parse_args(spec["arguments"])  # an unknown option exits 2 here
    assert args.log_dirs and args.report
    known = {f.metadata["conf"] for _, f in knobs() if f.metadata.get("conf")}
    ours = {k for k in spec["sparkConf"] if k.startswith(CONF_PREFIX)}
    assert ours and ours <= known, ours - known
