"""deploy/Dockerfile's steps, run as they are in a temporary virtualenv (no Docker daemon here):
its ARG and ENV lines, then each RUN line through bash, with the image's paths mapped into a
temp dir. The apt-get line (the image's own packages: this host has Java) and the chown to the
image's user are left out. Then: the driver JVM's class-data archive is in place, ready to map
(the warm-up rounds wrote and promoted it), no compiled kernel is left behind (they are
CPU-specific), the manifests' entry file is where they say, and the job installed by those steps
compacts a generated log dir."""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import subprocess
import sys

import pyspark
import pytest
from e2ekit import REPO, decode_partition, latest_per_key
from genkit import generate_argv

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(1800)]

SKIPPED = ("apt-get ", "chown ")  # the image's own packages and user


def dockerfile_steps(text: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(ARG defaults, [(instruction, argument)]) of a Dockerfile: continuation lines joined,
    comments dropped."""
    text = re.sub(r"\\\n", " ", text)
    args, steps = {}, []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        if instruction == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name] = value
        steps.append((instruction, rest.strip()))
    return args, steps


def test_the_images_steps_install_warm_up_and_run_the_job(tmp_path):
    _args, steps = dockerfile_steps(open(os.path.join(REPO, "deploy", "Dockerfile")).read())
    root = tmp_path / "image"
    paths = {
        "/opt/kafka-compaction": str(root / "opt"),
        "/tmp/dist": str(root / "dist"),
        "/tmp/warmup": str(root / "warmup"),
    }

    def mapped(text: str) -> str:
        for image_path, here in paths.items():
            text = text.replace(image_path, here)
        return text

    # The wheel the Dockerfile's COPY takes, built from this checkout as its comment says.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "wheel"), REPO],
        check=True,
        timeout=600,
    )
    dropped = ("PYTHONPATH", "SPARK_", "PYSPARK_", "KAFKA_COMPACTION_", "NUMBA_", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    # The image's Spark release, as this host has it: pip takes its wheel from this host's cache, so
    # the image's `--no-cache-dir` (a smaller layer) is dropped below; with it pip would download
    # and build Spark's 450 MB sdist again in the temp dir.
    env["SPARK_VERSION"] = pyspark.__version__
    ran = []
    for instruction, arg in steps:
        if instruction == "COPY":
            src, dest = arg.split()
            os.makedirs(mapped(dest), exist_ok=True)
            for wheel in glob.glob(str(root / "wheel" / os.path.basename(src))):
                os.link(wheel, os.path.join(mapped(dest), os.path.basename(wheel)))
        elif instruction == "ENV":
            for name, value in (kv.split("=", 1) for kv in shlex.split(arg)):
                env[name] = os.path.expandvars(mapped(value).replace("$PATH", env["PATH"]))
        elif instruction == "RUN" and not arg.startswith(SKIPPED):
            command = mapped(arg).replace("python3 -m venv", f"{sys.executable} -m venv", 1)
            command = command.replace(" --no-cache-dir", "")
            done = subprocess.run(
                ["bash", "-ec", command],
                env=env,
                cwd=str(tmp_path),
                capture_output=True,
                text=True,
                timeout=1500,
            )
            assert done.returncode == 0, f"RUN {arg}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            ran.append(arg)
    assert len(ran) == 3, ran  # the venv, the package's fixed path, the warm-up

    # The class-data archive was written by the first warm-up round and promoted by the second.
    cds = paths["/opt/kafka-compaction"] + "/jvm"
    assert env["KAFKA_COMPACTION_CDS_DIR"] == cds
    archives = glob.glob(os.path.join(cds, "*.jsa"))
    assert len(archives) == 1 and os.path.getsize(archives[0]) > 10 << 20, os.listdir(cds)
    assert not glob.glob(os.path.join(cds, "*.partial"))
    from compaction.cli.class_archive import has_header

    assert has_header(archives[0])
    # No compiled kernel kept in the image: neither numba's cache nor the sample's kernel store.
    assert not os.path.exists(paths["/tmp/warmup"])
    # The manifests' entry file, through the fixed path.
    app = paths["/opt/kafka-compaction"] + "/app"
    assert os.path.isfile(os.path.join(app, "job.py")) and os.path.isfile(
        os.path.join(app, "log4j2.properties")
    )
    assert os.path.realpath(app).startswith(os.path.realpath(paths["/opt/kafka-compaction"]))

    # The installed job on a sample, through the image's PATH (its kafka-compaction).
    log_dir, report = tmp_path / "sample" / "kafka-logs", tmp_path / "report.json"
    env["TMPDIR"] = str(tmp_path)
    subprocess.run(
        generate_argv(
            log_dir,
            "--topics orders:2 --records 3000 --keys 250 --codec mixed --segment-bytes 30000 --seed 5",
            command=("kafka-compaction",),
        ),
        env=env,
        check=True,
        timeout=300,
        stdout=subprocess.DEVNULL,
    )
    before = {p: decode_partition(str(log_dir / f"orders-{p}")) for p in range(2)}
    os.utime(archives[0], (1, 1))  # the launcher touches the archive it has the JVM map
    done = subprocess.run(
        [
            "kafka-compaction",
            "compact",
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            "--log-dir",
            str(log_dir),
            "--report",
            str(report),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-5000:]
    assert os.path.getmtime(archives[0]) > 1, "the round did not map the image's class-data archive"
    result = json.loads(report.read_text())
    assert [p["status"] for p in result["partitions"]] == ["cleaned", "cleaned"]
    for p in result["partitions"]:
        bound = p["firstUncleanableOffset"]
        after = decode_partition(str(log_dir / f"orders-{p['partition']}"))
        assert {r.key: r for r in after if r.offset < bound} == latest_per_key(before[p["partition"]], bound)
