"""The whole run, start-up included: one round through a checkout's ./spark-submit.sh against
another's (or the same with other environment variables), alternated pair by pair on fresh copies
of one log dir with the page cache dropped before each run.

    .venv/bin/python bench/startup.py LOG_DIR [--pairs 3] [--warmup 1] [--b-checkout DIR]
        [--b-env K=V ...] [--a-env K=V ...] [--job-args "--segment-bytes 67108864"]
        [--a-args "--read-mode direct"] [--b-args ...]

A is this checkout's ./spark-submit.sh, B the one of `--b-checkout` (default this one too), each
with its `--*-env` variables (e.g. `--b-env KAFKA_COMPACTION_CDS_DIR=off`: B without the driver
JVM's class-data archive). LOG_DIR is copied before each run and not changed (e.g. the 2 GiB
single partition bench/vs_kafka.py keeps in bench/out/vs_kafka/v2-2g-1p). Per run: the
spark-submit wall, the report's round (`totalSeconds`: Spark's start-up and warm-up, the plan,
the stages, the commit and the deletion of the replaced files), the CPU of every task
(`taskCpuSeconds`) and the rest, outside the report (the launcher, the JVMs' start and stop, the
driver's imports). `--job-args`: more options of the job, for both sides (e.g. Kafka's 64 MiB
`segment.bytes` of bench/vs_kafka.py's topics, where the job's default is 1 GiB); `--a-args`,
`--b-args`: options of one side only (e.g. `--a-args "--read-mode direct"`). Prints the
medians and the ratios B/A of the walls, the whole CPU, the stages and the task CPU and its system
time, pair by pair, with the tasks' page faults beside them. `cpu`: the user and system seconds of
spark-submit and of every process it waited for (the launcher, the JVMs, the driver's and the
workers' Python), as the kernel accounts them. Each run must clean every partition. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from e2e import drop_caches  # noqa: E402

# Measured around the spark-submit process (`run`); the others are the report's own timings.
MEASURED = ("wall", "cpu", "round", "outside")
FIGURES = (
    *MEASURED,
    "sparkStartSeconds",
    "workerWarmupSeconds",
    "workerKernelCompiles",
    "stagesSeconds",
    "taskCpuSeconds",
    "taskSystemSeconds",
    "taskMinorFaults",
    "deleteSeconds",
)


def run(checkout: Path, env_pairs: list[str], source: Path, work: Path, job_args: tuple = ()) -> dict:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(source, work, ignore=shutil.ignore_patterns(".lock"))
    report = work.parent / f"{work.name}.report.json"
    drop_caches()
    env = {**os.environ, **dict(kv.split("=", 1) for kv in env_pairs)}
    env.pop("PYSPARK_PYTHON", None)  # each checkout runs on its own .venv
    cmd = [
        str(checkout / "spark-submit.sh"),
        "--conf",
        "spark.ui.enabled=false",
        "--log-dir",
        str(work),
        "--report",
        str(report),
        *job_args,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    data = json.loads(report.read_text()) if report.exists() else {}
    statuses = {p["status"] for p in data.get("partitions", [])}
    if proc.returncode != 0 or statuses != {"cleaned"}:
        raise SystemExit(f"{checkout}: exit {proc.returncode}, partitions {statuses}:\n{proc.stderr[-3000:]}")
    tm = data["timings"]
    return {
        "wall": wall,
        "cpu": cpu,
        "round": tm["totalSeconds"],
        "outside": wall - tm["totalSeconds"],
        **{k: tm.get(k, 0.0) for k in FIGURES if k not in MEASURED},
    }


def _figure(name: str, v: float, unit: str) -> str:
    """One figure of a run: seconds with their `unit`, counts (compiles, page faults) as counts."""
    if name in ("workerKernelCompiles", "taskMinorFaults"):
        return f"{name} {v:,.0f}"
    return f"{name.replace('Seconds', '')} {v:.2f}{unit}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log_dir", type=Path)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="runs of each side first, not counted (numba's cache, the JVM's archive)",
    )
    ap.add_argument("--b-checkout", type=Path, default=REPO)
    ap.add_argument("--a-env", action="append", default=[])
    ap.add_argument("--b-env", action="append", default=[])
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "out" / "startup")
    ap.add_argument("--job-args", default="", help="more options of the job, for both sides")
    ap.add_argument("--a-args", default="", help="more options of the job, for side A only")
    ap.add_argument("--b-args", default="", help="more options of the job, for side B only")
    args = ap.parse_args()
    job_args = tuple(args.job_args.split())
    args.work.mkdir(parents=True, exist_ok=True)
    sides = {
        "A": (REPO, args.a_env, job_args + tuple(args.a_args.split())),
        "B": (args.b_checkout.resolve(), args.b_env, job_args + tuple(args.b_args.split())),
    }
    for name, (checkout, env, side_args) in sides.items():
        print(f"{name}: {' '.join(env)} {checkout}/spark-submit.sh {' '.join(side_args)}".strip(), flush=True)
    for _ in range(args.warmup):
        for checkout, env, side_args in sides.values():
            run(checkout, env, args.log_dir, args.work / "logs", side_args)
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    for i in range(1, args.pairs + 1):
        for name, (checkout, env, side_args) in sides.items():
            r = run(checkout, env, args.log_dir, args.work / "logs", side_args)
            runs[name].append(r)
            print(
                f"pair {i} {name}: " + ", ".join(_figure(k, r[k], "") for k in FIGURES),
                flush=True,
            )
    for name, rs in runs.items():
        print(
            f"median {name}: "
            + ", ".join(_figure(k, statistics.median(r[k] for r in rs), " s") for k in FIGURES)
        )
    for figure in ("wall", "cpu", "stagesSeconds", "taskCpuSeconds", "taskSystemSeconds"):
        ratios = [b[figure] / a[figure] for a, b in zip(runs["A"], runs["B"]) if a[figure] > 0]
        if ratios:
            print(
                f"{figure.replace('Seconds', '')} B/A pair by pair: median {statistics.median(ratios):.2f}x "
                f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
            )
    shutil.rmtree(args.work / "logs", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
