"""The recipe for a cluster of docs/deployment.md, from a wheel alone: build the wheel, install it with
venv-pack into a fresh venv, pack that venv for the workers' Python (`--python-prefix`), and run
the installed `kafka-compaction compact` against a standalone cluster (a master and two 1-core
workers on 127.0.0.1, bench/cluster.py) with `--archives env.tar.gz#environment`.

Nothing of the checkout is on the path of the launcher, the driver or the executors: the job runs
from what the wheel installed, the executors on the packed environment, linked to a Python of
another prefix than the one the venv was built from.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from e2ekit import REPO, cleanable_bound, decode_partition, latest_per_key
from genkit import generate_argv

_spec = importlib.util.spec_from_file_location("bench_cluster", os.path.join(REPO, "bench", "cluster.py"))
standalone = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(standalone)

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(900)]

VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
DISTRO_PREFIX = "/usr"  # the workers' Python: the distribution's, when the venv is not built from it
NOW = 1_800_000_000_000


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(REPO, name), src / name)
    shutil.copytree(
        os.path.join(REPO, "compaction"), src / "compaction", ignore=shutil.ignore_patterns("__pycache__")
    )
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"), str(src)])
    (path,) = (root / "dist").glob("kafka_offline_compaction-*.whl")
    return path


def test_the_wheel_installs_one_top_level_package_with_the_launcher_and_the_application(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"compaction"}
    for needed in (
        "compaction/job.py",
        "compaction/cli/launcher.py",
        "compaction/log4j2.properties",
        "compaction/round.py",
        "compaction/kernels/scan.py",
    ):
        assert needed in names
    assert "kafka-compaction = compaction.__main__:main" in entry_points


def _base_python() -> str:
    """The `bin/python` of the interpreter this venv was made from (venv-pack's --python-prefix
    rewrites the venv's link to exactly that name); `bin/pythonX.Y` where the distribution has no
    unversioned name (Debian)."""
    for name in ("python", f"python{VERSION}"):
        python = os.path.join(sys.base_prefix, "bin", name)
        if os.path.exists(python):
            return python
    raise AssertionError(f"no python in {sys.base_prefix}/bin")


def _worker_prefix(root: Path) -> str:
    """The prefix of the workers' Python: the distribution's when it is of this version and not the
    one the venv is built from; else (a venv built from the distribution's Python, as on CI's Debian)
    the build's Python under another prefix, a tree of links, so that the packed environment still
    has to be relinked to a Python the build machine's paths do not name."""
    build = os.path.realpath(os.path.join(sys.base_prefix, "bin", f"python{VERSION}"))
    distro = os.path.join(DISTRO_PREFIX, "bin", f"python{VERSION}")
    if os.path.exists(distro) and os.path.realpath(distro) != build:
        return DISTRO_PREFIX
    prefix = root / "worker-python"
    (prefix / "bin").mkdir(parents=True)
    os.symlink(build, prefix / "bin" / f"python{VERSION}")
    for name in ("lib", "lib64"):  # the standard library, found from the executable's prefix
        if os.path.isdir(os.path.join(sys.base_prefix, name)):
            os.symlink(os.path.join(sys.base_prefix, name), prefix / name)
    return str(prefix)


@pytest.fixture(scope="module")
def packed(wheel, tmp_path_factory):
    root = tmp_path_factory.mktemp("ship")
    worker_prefix = _worker_prefix(root)
    worker_python = os.path.join(worker_prefix, "bin", f"python{VERSION}")
    venv = root / "ship"
    _run([_base_python(), "-m", "venv", str(venv)])
    _run([str(venv / "bin" / "pip"), "install", "-q", str(wheel), "venv-pack"])
    archive = root / "env.tar.gz"
    _run(
        [
            str(venv / "bin" / "venv-pack"),
            "-q",
            "-p",
            str(venv),
            "--python-prefix",
            worker_prefix,
            "--exclude",
            "lib/python*/site-packages/pyspark/*",
            "--compress-level",
            "1",
            "-o",
            str(archive),
        ]
    )
    return venv, archive, worker_python


def test_the_packed_environment_links_the_workers_python_not_the_build_machines(packed):
    _, archive, worker_python = packed
    with tarfile.open(archive) as tf:
        links = {m.name: m.linkname for m in tf.getmembers() if m.issym() and m.name.startswith("bin/python")}
        names = set(tf.getnames())
    assert links["bin/python"] == worker_python
    assert not any(t.startswith(sys.base_prefix) for t in links.values() if os.path.isabs(t))
    assert any(n.endswith("site-packages/compaction/job.py") for n in names)
    assert not any("site-packages/pyspark/" in n for n in names)  # the workers' Spark brings its own


def test_a_round_on_a_standalone_cluster_from_the_wheel_alone(packed, tmp_path):
    venv, archive, _ = packed
    log_dir = tmp_path / "kafka-logs"
    _run(
        generate_argv(
            log_dir,
            "--topics orders:2 --records 3000 --keys 400 --codec mixed --segment-bytes 40000 --seed 5",
        ),
        cwd=REPO,
    )
    before = {p: decode_partition(str(log_dir / f"orders-{p}")) for p in range(2)}
    bounds = {p: cleanable_bound(str(log_dir / f"orders-{p}")) for p in range(2)}
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_", "PYTHON"))}
    env.update(
        PYSPARK_PYTHON="./environment/bin/python",
        SPARK_LOCAL_IP="127.0.0.1",
        KAFKA_COMPACTION_DIST_DIR=str(tmp_path / "dist"),
        SPARK_APP_NAME="compaction-ship-check",
    )
    with standalone.StandaloneCluster(tmp_path / "spark", timeout=120) as cluster:
        cluster.add_worker(2)
        proc = subprocess.run(
            [
                str(venv / "bin" / "kafka-compaction"),
                "compact",
                "--master",
                cluster.url,
                f"--archives={archive}#environment",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.scheduler.minRegisteredResourcesRatio=1.0",
                # the package is installed in the executors' Python: their daemon can preload it (README)
                "--conf",
                "spark.python.daemon.module=compaction.spark.daemon",
                "--log-dir",
                str(log_dir),
                "--report",
                str(report),
                "--now-ms",
                str(NOW),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=600,
        )
        unpacked = sorted(cluster.root.glob("worker-*/app-*/*/environment/bin/python"))
        apps = cluster.state().get("completedapps", [])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {p.parts[-6] for p in unpacked} == {"worker-1", "worker-2"}, unpacked  # both used the archive
    # the launcher's --name
    assert [(a["state"], a["name"]) for a in apps] == [("FINISHED", "compaction-ship-check")]
    data = json.loads(report.read_text())
    assert [p["status"] for p in data["partitions"]] == ["cleaned", "cleaned"]
    for p in data["partitions"]:
        after = decode_partition(str(log_dir / f"orders-{p['partition']}"))
        bound = bounds[p["partition"]]
        assert p["firstUncleanableOffset"] == bound
        want = latest_per_key(before[p["partition"]], bound)
        assert {r.key: r for r in after if r.offset < bound} == want
        assert len([r for r in after if r.offset < bound]) == len(want)
        assert [r for r in after if r.offset >= bound] == [
            r for r in before[p["partition"]] if r.offset >= bound
        ]
    # the driver ran the installed package, not a checkout's
    assert str(Path(REPO) / "compaction") not in proc.stdout + proc.stderr
