"""A round on a fresh host against the same round on a warm one, pair by pair.

    .venv/bin/python bench/cold_start.py LOG_DIR [LOG_DIR ...] [--pairs 3]

For each LOG_DIR (e.g. /work/benchdata/v2-2g-1p, the 2 GiB single partition of bench/vs_kafka.py,
or `sample`: the quick start's sample log dir, generated here), one round through this checkout's
./spark-submit.sh (local[*]) on a fresh copy of the log dir, the page cache dropped before each
(bench/startup.py `run`), three ways, alternated pair by pair:

- warm: the temp dir of the runs before (numba's cache of the compiled kernels in it) and the
  driver JVM's class-data archive of the runs before;
- fresh-temp: an empty temp dir (TMPDIR), as a new executor's: the kernels come from the job's
  store (`.kafka-compaction-kernels` beside the log dir, filled by the first run, which starts
  with an empty temp dir and an empty store, compiles, and is printed but not counted);
- fresh-host: an empty temp dir and no class-data archive yet (an empty KAFKA_COMPACTION_CDS_DIR):
  the driver JVM writes its archive at exit, as on the first run in a new container.

Prints per run the spark-submit wall, the report's round, Spark's start, the Python workers'
warm-up, the kernels they compiled (numba's compile events) and the stages; then the medians and
each side's extra wall over the warm run of its pair. Also, in this process: the time to build
the executors' zip of the package from scratch (what a cluster master's first run adds; a local
master ships none), and the time a worker on an empty host takes to bring the kernels from the
store (read, check, unpack).
Not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from startup import FIGURES, run  # noqa: E402

from compaction.settings import KERNEL_CACHE_NAME  # noqa: E402

SIDES = ("warm", "fresh-temp", "fresh-host")
# README's quick start
SAMPLE = [
    "--records",
    "50000",
    "--keys",
    "2000",
    "--codec",
    "mixed",
    "--segment-bytes",
    "1000000",
]


def sample(work: Path) -> Path:
    d = work / "sample-src" / "kafka-logs"
    if not d.exists():
        subprocess.run(
            [sys.executable, "-m", "compaction", "generate", str(d), *SAMPLE],
            cwd=REPO,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return d


def side_env(side: str, work: Path, i: int) -> list[str]:
    if side == "warm":
        return [f"TMPDIR={work / 'tmp-warm'}"]
    fresh = work / f"tmp-{side}-{i}"
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    env = [f"TMPDIR={fresh}"]
    if side == "fresh-host":
        env.append(f"KAFKA_COMPACTION_CDS_DIR={fresh / 'jvm'}")
    return env


def zip_build_seconds(n: int = 5) -> float:
    from compaction.cli.launcher import ensure_zip

    times = []
    for _ in range(n):
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            ensure_zip(d)
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def fetch_seconds(store: Path, n: int = 5) -> tuple[float, int]:
    """What a fresh host's worker spends bringing the kernels from the store (read, check, unpack
    into an empty NUMBA_CACHE_DIR), in this process: median seconds, archive bytes."""
    from compaction.kernels import cache
    from compaction.runtime import kernel_store

    times = []
    for _ in range(n):
        with tempfile.TemporaryDirectory() as d:
            os.environ["NUMBA_CACHE_DIR"] = d
            kernel_store._fetched.clear()
            t = time.perf_counter()
            outcome = kernel_store.fetch(str(store))
            times.append(time.perf_counter() - t)
            if outcome != "fetched":
                raise SystemExit(f"fetch from {store}: {outcome}")
    os.environ.pop("NUMBA_CACHE_DIR")
    return statistics.median(times), (store / cache.current_key().archive_name).stat().st_size


def bench(source: Path, pairs: int, work: Path) -> None:
    logs = work / "run" / "kafka-logs"  # its store: work/run/.kafka-compaction-kernels, kept across runs
    for d in (work / "tmp-warm", logs.parent / KERNEL_CACHE_NAME):
        shutil.rmtree(d, ignore_errors=True)
    (work / "tmp-warm").mkdir(parents=True)
    print(f"== {source}", flush=True)
    # The first run of a release: an empty temp dir and an empty store. It compiles, fills the
    # store and the warm temp dir; not counted.
    r = run(REPO, side_env("warm", work, 0), source, logs)
    print(
        "first run, nothing cached: " + ", ".join(f"{k.replace('Seconds', '')} {r[k]:.2f}" for k in FIGURES),
        flush=True,
    )
    runs: dict[str, list[dict]] = {s: [] for s in SIDES}
    for i in range(1, pairs + 1):
        for side in SIDES:
            r = run(REPO, side_env(side, work, i), source, logs)
            runs[side].append(r)
            print(
                f"pair {i} {side:<10}: "
                + ", ".join(f"{k.replace('Seconds', '')} {r[k]:.2f}" for k in FIGURES),
                flush=True,
            )
            if side != "warm":
                shutil.rmtree(work / f"tmp-{side}-{i}", ignore_errors=True)
    for side, rs in runs.items():
        print(
            f"median {side:<10}: "
            + ", ".join(
                f"{k.replace('Seconds', '')} {statistics.median(r[k] for r in rs):.2f}" for k in FIGURES
            )
        )
    seconds, size = fetch_seconds(logs.parent / KERNEL_CACHE_NAME)
    print(
        f"the kernels fetched from the store onto an empty host: {seconds:.3f} s ({size} bytes, median of 5)"
    )
    for side in SIDES[1:]:
        extra = [f["wall"] - w["wall"] for w, f in zip(runs["warm"], runs[side])]
        print(
            f"{side} - warm, wall, pair by pair: {', '.join(f'{x:+.2f}' for x in extra)} s "
            f"(median {statistics.median(extra):+.2f} s)"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log_dirs", nargs="+", help="log dirs, or `sample` for the quick start's")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "out" / "cold_start")
    args = ap.parse_args()
    print(f"executors' zip built from scratch: {zip_build_seconds():.3f} s (median of 5)", flush=True)
    for name in args.log_dirs:
        source = sample(args.work) if name == "sample" else Path(name).resolve()
        bench(source, args.pairs, args.work / ("sample" if name == "sample" else source.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
