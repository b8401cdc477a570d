"""The job on a real Spark standalone cluster on 127.0.0.1, and its speed-up from one worker to two.

    .venv/bin/python bench/cluster.py [--mb 200] [--partitions 4] [--codec mixed] [--repeat 1] [--cache cold|warm]
                                      [--affinity pinned|shared]

1. Generates a log dir (~`--mb` MB of .log, ~30% of the records survive) and scans it for the check.
2. Starts a standalone master and one worker (1 core, 2g) from the pyspark package's own
   `bin/spark-class` (the pip package has no sbin/start-master.sh), on free ports chosen at run time.
   With `--affinity pinned` (the default) each worker, and the executor and Python workers it
   starts, runs on a CPU of its own (`taskset`): a single-core machine. The worker's own
   `--cores 1` only makes one task slot; with `--affinity shared` that worker's other threads
   (read-ahead, writers, its JVM's) run on the host's other core, so one worker already uses most
   of this 2-core host.
3. Runs `./spark-submit.sh --master spark://127.0.0.1:P` on a fresh copy of the log dir (synced; the
   page cache dropped when we may, unless `--cache warm`), `--repeat`
   times, verifies each output (latest-per-key below the bound for all keys, untouched tail, checkpoint
   at the bound, exit code 0), then adds a second worker and does the same.
4. Prints the wall time of spark-submit, the time excluding Spark start-up (plan + stages + commit from
   the report) and the speed-up of two workers over one for both; beside it, the disk's own: its
   cold read of the input by 1 `cat`, then by as many at once as there are workers, each over a
   contiguous share (as the tasks of one partition cut into ranges read it), alternated 3 times
   before the cluster starts.

The executors run a Python that has the job's dependencies but NOT this repo's editable install (a
venv whose only site-packages entry is a plain path to .venv's site-packages, so the editable
finder's .pth is never run): they can only import `compaction` from the `--py-files` zip that
spark-submit.sh ships. That is what a real cluster looks like, and it is what this checks.

The master, the workers and the executors they start are killed at the end, whatever happens
(each is started in its own session and its process group is signalled). Not a test; exits non-zero
when the job or the verification fails. The test is tests/e2e/test_cluster.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MB = 1e6
NOW_MS = 1_795_305_600_000  # 2026-11-22T00:00:00Z: a fixed clock for the round


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def executor_python(root: Path) -> Path:
    """A venv with .venv's packages but without the editable install of `compaction`.

    The .pth line is a plain path, so `site` appends .venv's site-packages to sys.path without
    processing the .pth files in it (the editable finder is installed by one of those)."""
    venv = root / "exec-venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        purelib = Path(sysconfig.get_paths()["purelib"])
        target = Path(
            subprocess.run(
                [
                    str(venv / "bin" / "python"),
                    "-c",
                    "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
        (target / "main-venv-packages.pth").write_text(f"{purelib}\n")
    python = venv / "bin" / "python"
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import numba, pyarrow, pyspark, crc32c, lz4, zstandard, cramjam\n"
            "try:\n import compaction\nexcept ImportError: print('no compaction')\n"
            "else: print(compaction.__file__)",
        ],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0 or probe.stdout.strip() != "no compaction":
        raise RuntimeError(
            f"executor python {python} is not as intended: {probe.stdout!r} {probe.stderr[-2000:]!r}"
        )
    return python


class StandaloneCluster:
    """A standalone master and workers on 127.0.0.1 started with `spark-class`; a context manager
    that always kills them (and the executors they started) on exit."""

    def __init__(
        self,
        root: Path,
        worker_cores: int = 1,
        worker_memory: str = "2g",
        timeout: float = 180,
        pin: bool = False,
        fresh_temp: bool = False,
    ) -> None:
        self.root = root
        self.pin = pin
        # Each worker (and the executors and Python workers it starts) on a temp dir and Spark
        # local dirs of its own, empty when it starts: a fresh host, as a Kubernetes pod is.
        self.fresh_temp = fresh_temp
        self.root.mkdir(parents=True, exist_ok=True)
        self.spark_class = spark_home() / "bin" / "spark-class"
        self.worker_cores, self.worker_memory, self.timeout = worker_cores, worker_memory, timeout
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.port = self.webui_port = 0
        self.workers = 0

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env["SPARK_HOME"] = str(spark_home())
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        # No REST submission server: it binds the fixed port 6066 and two clusters would collide.
        env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"
        return env

    def _start(self, name: str, args: list[str], cpus: str | None = None, env: dict | None = None) -> None:
        log = self.root / f"{name}.log"
        self.logs.append(log)
        # taskset's affinity is inherited by the worker's executors and their Python workers.
        prefix = ["taskset", "-c", cpus] if cpus is not None else []
        with open(log, "wb") as out:
            self.procs.append(
                subprocess.Popen(
                    [*prefix, str(self.spark_class), *args],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**self._env(), **(env or {})},
                    cwd=self.root,
                    start_new_session=True,
                )
            )

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=5) as r:
            return json.load(r)

    def _wait(self, what: str, ok) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for p, log in zip(self.procs, self.logs, strict=True):
                if p.poll() is not None:
                    raise RuntimeError(f"{log.stem} exited with {p.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError, ValueError):
                if ok(self.state()):
                    return
            time.sleep(0.5)
        raise TimeoutError(
            f"standalone cluster: {what} not reached in {self.timeout:.0f} s (logs in {self.root})"
        )

    def start_master(self) -> None:
        self.port, self.webui_port = free_port(), free_port()
        self._start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.webui_port),
            ],
        )
        self._wait("master ALIVE", lambda s: s.get("status") == "ALIVE")

    def add_worker(self, count: int = 1) -> None:
        """Start `count` workers at once (their JVMs start in parallel), then wait for all to register
        (beside the workers alive before: a killed one does not count)."""
        alive = self.state().get("aliveworkers", 0) if self.workers else 0
        for _ in range(count):
            self.workers += 1
            work = self.root / f"worker-{self.workers}"
            work.mkdir(exist_ok=True)
            env = {}
            if self.fresh_temp:
                for var, sub in (("TMPDIR", "tmp"), ("SPARK_LOCAL_DIRS", "local")):
                    (work / sub).mkdir()
                    env[var] = str(work / sub)
            self._start(
                f"worker-{self.workers}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(self.worker_cores),
                    "--memory",
                    self.worker_memory,
                    "--work-dir",
                    str(work),
                    "--webui-port",
                    str(free_port()),
                ],
                cpus=self._worker_cpus(),
                env=env,
            )
        n = alive + count
        self._wait(f"{n} worker(s) registered", lambda s: s.get("aliveworkers", 0) >= n)

    def _worker_cpus(self) -> str | None:
        """With `pin`, worker k (and everything it starts) runs on its own `worker_cores` CPUs, as
        on a machine of that many cores; unpinned, a 1-core worker's threads beyond its task's
        (read-ahead, writers, the JVM's) run on whatever cores the host has free."""
        if not self.pin:
            return None
        ncpu = os.cpu_count() or 1
        first = (self.workers - 1) * self.worker_cores
        return ",".join(str((first + i) % ncpu) for i in range(self.worker_cores))

    def replace_lost_workers(self, want: int) -> None:
        """After a worker was killed: forget its process, wait until the master has seen it go,
        then start workers until `want` are alive."""
        kept = [(p, log) for p, log in zip(self.procs, self.logs, strict=True) if p.poll() is None]
        self.procs, self.logs = [p for p, _ in kept], [log for _, log in kept]
        live = len(self.procs) - 1  # the master is the first
        self._wait(f"{live} worker(s) alive", lambda s: s.get("aliveworkers", 0) == live)
        if live < want:
            self.add_worker(want - live)

    def stop(self) -> None:
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)  # the group: spark-class's java and the executors it forked
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # stragglers of the group (an executor ignoring TERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        try:
            self.start_master()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def submit(
    cluster: StandaloneCluster,
    python: Path,
    log_dir: Path,
    report: Path,
    *extra: str,
    event_dir: Path | None = None,
    timeout: float = 1800,
    repo: Path = REPO,
) -> tuple[int, float, str]:
    """`./spark-submit.sh --master spark://...` with the executors' python; (exit, wall s, stderr tail)."""
    cmd = [
        "./spark-submit.sh",
        "--master",
        cluster.url,
        "--conf",
        "spark.ui.enabled=false",
        # wait for every worker's executor before the first stage (standalone's default is 0%, so a
        # run could start on one executor and the speed-up would measure registration luck)
        "--conf",
        "spark.scheduler.minRegisteredResourcesRatio=1.0",
        "--conf",
        "spark.scheduler.maxRegisteredResourcesWaitingTime=120s",
        "--log-dir",
        str(log_dir),
        "--report",
        str(report),
        "--now-ms",
        str(NOW_MS),
        *extra,
    ]
    if event_dir is not None:
        cmd[1:1] = [
            "--conf",
            "spark.eventLog.enabled=true",
            "--conf",
            f"spark.eventLog.dir=file://{event_dir}",
        ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(PYSPARK_PYTHON=str(python), SPARK_LOCAL_IP="127.0.0.1")
    print("job:", shlex.join(cmd), f"(PYSPARK_PYTHON={python})", flush=True)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t
    report.with_suffix(".stdout").write_text(proc.stdout)
    report.with_suffix(".stderr").write_text(proc.stderr)
    return proc.returncode, wall, (proc.stdout[-3000:] + "\n" + proc.stderr[-6000:]).strip()


def executor_zips(cluster: StandaloneCluster) -> list[Path]:
    """The compaction.zip copies the executors fetched into their work dirs (app-*/<exec id>/)."""
    return sorted(cluster.root.glob("worker-*/app-*/*/compaction.zip"))


def check_checkpoint(log_dir: Path, report: dict) -> list[str]:
    from compaction.format.checkpoint import parse_offset_checkpoint

    path = log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return [f"{path} missing after the run"]
    cp = parse_offset_checkpoint(path.read_bytes(), str(path))
    problems = []
    for p in report.get("partitions", []):
        got = cp.get((p["topic"], p["partition"]))
        if p["status"] == "cleaned" and got != p["firstUncleanableOffset"]:
            problems.append(
                f"{p['topic']}-{p['partition']}: checkpoint {got}, bound {p['firstUncleanableOffset']}"
            )
    return problems


def main() -> int:
    sys.path.insert(0, str(REPO / "bench"))
    import e2e  # bench/e2e.py: generator sizing, the input scan and the output verification

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=200, help="size of the generated .log files, MB (1e6 bytes)")
    ap.add_argument("--codec", default="mixed", choices=["none", "gzip", "snappy", "lz4", "zstd", "mixed"])
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-size", default="100:1000")
    ap.add_argument("--segment-bytes", type=int, default=8 << 20, help="generator roll size")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2, help="measure 1..N workers (1 core, 2g each)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per worker count (median reported)")
    ap.add_argument("--sample-batches", type=int, default=50)
    ap.add_argument(
        "--cache",
        choices=["cold", "warm"],
        default="cold",
        help="each run's input read from the disk (cold) or from the page cache (warm)",
    )
    ap.add_argument(
        "--affinity",
        choices=["pinned", "shared"],
        default="pinned",
        help="pinned: each worker and its executors on a core of its own (taskset), as single-core "
        "machines, where a worker's read-ahead and writer threads share its one core; shared: every "
        "worker free to run on any of the host's cores (the driver and master are never pinned)",
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "cluster")
    ap.add_argument(
        "--repo",
        type=Path,
        default=REPO,
        help="checkout whose spark-submit.sh and compaction/ run (e.g. a `git archive HEAD` copy, "
        "to measure a commit rather than a working tree others are editing)",
    )
    args = ap.parse_args()
    if args.affinity == "pinned" and shutil.which("taskset") is None:
        ap.error("--affinity pinned needs taskset (util-linux); use --affinity shared")

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    source = args.out / "source"
    bpr = e2e.bytes_per_record(args)
    records = max(1, int(args.mb * MB / args.partitions / bpr))
    keys = max(1, round(records * e2e.keys_ratio(e2e.KEEP_FRACTION)))
    gen_s = e2e.generate(source, "bench", args.partitions, records, keys, args)
    size = sum(f.stat().st_size for f in e2e.log_files(source))
    print(
        f"generated {source}: {args.partitions} partitions x {records:,} records, {keys:,} keys each, codec "
        f"{args.codec}, {size / MB:,.1f} MB in {gen_s:.1f} s"
    )
    before = {d.name: e2e.scan_partition(d) for d in sorted(source.iterdir()) if d.is_dir()}

    python = executor_python(args.out)
    print(f"executor python: {python} (has numba/pyarrow/pyspark; `import compaction` fails without the zip)")
    # The disk's own speed-up, alternated 3 times: this VM's cold reads vary from one call to the next.
    reads = [
        (n, e2e.read_speed(e2e.log_files(source), n)[0]) for _ in range(3) for n in range(1, args.workers + 1)
    ]
    disk = {n: statistics.median(v for k, v in reads if k == n) for n in range(1, args.workers + 1)}
    print(
        "cold read of the input, medians of 3: "
        + ", ".join(f"{n} cat(s) at once {v / MB:,.0f} MB/s" for n, v in disk.items())
    )
    results: dict[int, list[tuple[float, float, dict]]] = {}
    failed = False
    with StandaloneCluster(args.out / "cluster", pin=args.affinity == "pinned") as cluster:
        print(f"master {cluster.url} (web UI :{cluster.webui_port})")
        for n in range(1, args.workers + 1):
            cluster.add_worker()
            print(f"{n} worker(s) alive: {cluster.state()['cores']} cores", flush=True)
            for i in range(args.repeat):
                run = args.out / f"run-w{n}-{i}"
                shutil.copytree(source, run / "kafka-logs")
                # The copy's dirty pages would be written back during the job, on the cores the
                # workers run on. A user's log dir is on disk, read cold; `--cache warm` leaves the
                # copy in the page cache (written back first), to tell the disk's part from the CPU's.
                if args.cache == "cold":
                    cold = e2e.drop_caches()  # synced first
                else:
                    os.sync()
                    cold = True
                report_path = run / "report.json"
                code, wall, err = submit(cluster, python, run / "kafka-logs", report_path, repo=args.repo)
                if code != 0 or not report_path.exists():
                    print(f"job failed (exit {code}):\n{err}", file=sys.stderr)
                    failed = True
                    break
                report = json.loads(report_path.read_text())
                problems = e2e.verify(before, run / "kafka-logs", report, args.sample_batches)
                problems += check_checkpoint(run / "kafka-logs", report)
                if problems:
                    print("VERIFICATION FAILED:\n  " + "\n  ".join(problems[:20]), file=sys.stderr)
                    failed = True
                tm = report["timings"]
                no_start = tm.get("planSeconds", 0) + tm.get("stagesSeconds", 0) + tm.get("commitSeconds", 0)
                results.setdefault(n, []).append((wall, no_start, tm))
                print(
                    f"  {n} worker(s), run {i + 1}"
                    f"{'' if cold else ' (page cache not dropped: not root)'}, {args.cache}: "
                    f"exit {code}, wall {wall:.1f} s, "
                    f"excl. start-up {no_start:.1f} s; "
                    + ", ".join(f"{k.removesuffix('Seconds')} {v:.1f}" for k, v in tm.items()),
                    flush=True,
                )
                shutil.rmtree(run / "kafka-logs", ignore_errors=True)
            if failed:
                break
        zips = executor_zips(cluster)
        print(f"executors fetched the --py-files zip: {len(zips)} copies, e.g. {zips[0] if zips else None}")
        if not zips:
            failed = True
    if failed or not results:
        return 1
    print()
    print(
        f"input: {size / MB:,.1f} MB, {args.partitions} partitions, codec {args.codec}; "
        f"workers of 1 core / 2g, affinity {args.affinity}"
    )
    base_wall = statistics.median(r[0] for r in results[1])
    base_ns = statistics.median(r[1] for r in results[1])
    for n, runs in sorted(results.items()):
        wall = statistics.median(r[0] for r in runs)
        ns = statistics.median(r[1] for r in runs)
        print(
            f"{n} worker(s): wall {wall:6.1f} s ({size / MB / wall:5.1f} MB/s), excl. start-up {ns:6.1f} s "
            f"({size / MB / ns:5.1f} MB/s); speed-up vs 1 worker: wall {base_wall / wall:.2f}x, "
            f"excl. start-up {base_ns / ns:.2f}x; the disk's cold read by {n} stream(s): "
            f"{disk[n] / MB:,.0f} MB/s, {disk[n] / disk[1]:.2f}x"
        )
    print("verification: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
