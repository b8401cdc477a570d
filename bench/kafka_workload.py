"""The workload Kafka 0.9.0.1's LogCleaner was measured on (one thread, ../shared/anchors/kafka09),
through ./spark-submit.sh on this machine.

    .venv/bin/python bench/kafka_workload.py [--gb 2] [--codec none] [--partitions 4]

Workload (Kafka's measurement): v2 records, 1,000,000 distinct keys, values of 100-1024 bytes,
64 MiB segments, uncompressed, ~72% of the bytes removed, 2 GiB. Here:
- `--gb` GiB (2**30 bytes) of uncompressed v2 records, split over `--partitions` partitions (4 by
  default: 2 tasks per core on 2 cores) of one topic; the 1M keys are split evenly over them
  (`--keys` total), keys drawn uniformly, so that the same key-to-record ratio as one 2 GiB
  partition holds in each (~3.6 records per key, ~73% of the records and bytes removed).
- Keys: our generator writes fixed-size keys (b'key-' + zero-padded id), so every key is 24 bytes
  (the middle of Kafka's 16-32); values uniform in 100-1024 bytes.
- No checkpoint: every partition is fully dirty. The last segment of each partition is the
  active one and is not cleaned (as in Kafka).
- `--codec` (none, lz4, zstd, snappy, gzip) writes the SAME records (count, keys, values) with that
  codec: the input is then smaller on disk; MiB/s is given both on disk bytes and on the
  uncompressed-equivalent bytes of the `none` workload.

Prints MiB/s excluding Spark start-up (plan + stages + commit from the report) beside the cold
sequential read speed of the same files measured in this run, the report's timings and per-stage
task seconds (scan / map / rewrite / CPU), and verifies the output with bench/e2e.py's checks
(latest-per-key for all keys below the bound, tail untouched, an iter_batches sample).
Not a test. Exits non-zero when the job or the verification fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from e2e import (  # noqa: E402 (bench/ joins sys.path above)
    NOW_MS,
    drop_caches,
    excluding_start_up,
    finish,
    fresh_out_dir,
    log_files,
    print_spark_stages,
    read_speed,
    run_generator,
    scan_partition,
    timings_text,
    verify,
)
from tree_memory import TreeMemory  # noqa: E402

MiB = float(1 << 20)
GiB = 1 << 30
SAMPLE_RECORDS = 20_000


def generate(out: Path, partitions: int, records: int, keys: int, codec: str, args) -> float:
    return run_generator(
        out,
        "--topics",
        f"kafka:{partitions}",
        "--records",
        str(records),
        "--keys",
        str(keys),
        "--key-size",
        str(args.key_size),
        "--value-size",
        args.value_size,
        "--codec",
        codec,
        "--segment-bytes",
        str(args.segment_bytes),
        "--seed",
        str(args.seed),
    )


def bytes_per_record(args) -> float:
    """On-disk bytes per record of the uncompressed workload (learned from a small sample)."""
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        d = Path(tmp) / "logs"
        generate(d, 1, SAMPLE_RECORDS, SAMPLE_RECORDS, "none", args)
        return sum(f.stat().st_size for f in log_files(d)) / SAMPLE_RECORDS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=2.0, help="GiB of uncompressed v2 records (default 2)")
    ap.add_argument("--codec", default="none", choices=["none", "lz4", "zstd", "snappy", "gzip"])
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--keys", type=int, default=1_000_000, help="distinct keys in all (per 2 GiB: scaled)")
    ap.add_argument("--key-size", type=int, default=24)
    ap.add_argument("--value-size", default="100:1024")
    ap.add_argument("--segment-bytes", type=int, default=64 << 20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sample-batches", type=int, default=200, help="batches per partition for iter_batches")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "kafka_workload")
    ap.add_argument("--keep", action="store_true", help="keep the log dir afterwards")
    ap.add_argument("--spark-conf", action="append", default=[], help="extra --conf K=V for the job")
    ap.add_argument("--read-mode", help="the job's --read-mode (default: the job's default)")
    ap.add_argument(
        "--driver-memory", help="spark-submit --driver-memory (local mode: the executors' JVM too)"
    )
    args = ap.parse_args()

    log_dir, event_dir, report_path = fresh_out_dir(args.out)

    # Kafka's ratio: 1M keys per 2 GiB; scale the keys with --gb so the removed fraction holds.
    bpr = bytes_per_record(args)
    total_records = int(args.gb * GiB / bpr)
    records = max(1, total_records // args.partitions)
    keys = max(1, round(args.keys * (args.gb / 2.0) / args.partitions))
    uncompressed_equiv = records * args.partitions * bpr
    gen_s = generate(log_dir, args.partitions, records, keys, args.codec, args)
    files = log_files(log_dir)
    size = sum(f.stat().st_size for f in files)
    print(f"load average before: {os.getloadavg()}")
    print(
        f"generated {log_dir}: {args.partitions} partitions x {records:,} records, {keys:,} keys each "
        f"({keys * args.partitions:,} in all), keys {args.key_size} B, values {args.value_size} B, "
        f"codec {args.codec}, {len(files)} segments of <= {args.segment_bytes / MiB:.0f} MiB, "
        f"{size / MiB:,.1f} MiB on disk (uncompressed equivalent {uncompressed_equiv / MiB:,.1f} MiB) "
        f"in {gen_s:.1f} s"
    )

    t = time.perf_counter()
    before = {d.name: scan_partition(d) for d in sorted(log_dir.iterdir()) if d.is_dir()}
    print(f"scanned the input for the check in {time.perf_counter() - t:.1f} s")

    speed, cold = read_speed(files)
    how = "cold: page cache dropped" if cold else "WARM: could not drop caches"
    print(f"sequential read of the same files (cat > /dev/null, {how}): {speed / MiB:,.0f} MiB/s")

    cmd = [
        "./spark-submit.sh",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.eventLog.enabled=true",
        "--conf",
        f"spark.eventLog.dir=file://{event_dir}",
        "--conf",
        "spark.eventLog.compress=false",
    ]
    for kv in args.spark_conf:
        cmd += ["--conf", kv]
    if args.driver_memory:
        cmd += ["--driver-memory", args.driver_memory]
    cmd += ["--log-dir", str(log_dir), "--report", str(report_path), "--now-ms", str(NOW_MS)]
    if args.read_mode:
        cmd += ["--read-mode", args.read_mode]
    print("job:", shlex.join(cmd))
    drop_caches()
    load_start = os.getloadavg()
    t = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
        mem = TreeMemory(child.pid, interval=0.1).start()
        child.wait()
        mem.stop()
        err.seek(0)
        proc = subprocess.CompletedProcess(cmd, child.returncode, "", err.read().decode(errors="replace"))
    wall = time.perf_counter() - t
    load_end = os.getloadavg()
    if proc.returncode != 0 or not report_path.exists():
        print(f"job failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}", file=sys.stderr)
        return 1
    report = json.loads(report_path.read_text())
    tm, tot = report["timings"], report["totals"]

    problems = verify(before, log_dir, report, args.sample_batches)

    no_start = excluding_start_up(tm)
    removed = 1 - tot["bytesWritten"] / max(1, tot["bytesRead"])
    print()
    print(
        f"load average at job start / end:     {load_start[0]:.2f} / {load_end[0]:.2f} "
        f"(1 min; {os.cpu_count()} cores)"
    )
    print(
        f"input:                               {size / MiB:,.1f} MiB of .log, codec {args.codec} "
        f"({tot['recordsRead']:,} records read; "
        f"report bytesRead {tot['bytesRead'] / MiB:,.1f} MiB)"
    )
    print(
        f"output:                              {tot['bytesWritten'] / MiB:,.1f} MiB written, "
        f"{tot['recordsWritten']:,} records; {removed:.1%} of the cleaned bytes removed"
    )
    print(f"cold sequential read:                {speed / MiB:,.0f} MiB/s{'' if cold else ' (WARM)'}")
    print(f"end to end (spark-submit wall {wall:.1f} s): {size / MiB / wall:,.1f} MiB/s")
    print(
        f"peak RSS (VmHWM, sampled every 0.1 s): largest Python worker {mem.max_worker_hwm() / MiB:,.0f} MiB, "
        f"largest Python process {mem.max_hwm('python') / MiB:,.0f} MiB, "
        f"largest JVM {mem.max_hwm('java') / MiB:,.0f} MiB"
        f"{f' with --driver-memory {args.driver_memory}' if args.driver_memory else ''}"
    )
    print(
        f"excl. Spark start-up (plan+stages+commit {no_start:.1f} s): {size / MiB / no_start:,.1f} MiB/s "
        f"= {size / no_start / speed:.3f}x cold read speed; target 570 MiB/s "
        f"({size / MiB / no_start / 570:.2f}x of it)"
    )
    if args.codec != "none":
        print(f"  on uncompressed-equivalent bytes:  {uncompressed_equiv / MiB / no_start:,.1f} MiB/s")
    deleting = no_start + tm.get("deleteSeconds", 0)
    print(
        f"  counting the removal of the replaced segments too ({deleting:.1f} s): {size / MiB / deleting:,.1f} MiB/s"
    )
    warm = no_start + tm.get("workerWarmupSeconds", 0)
    print(f"  counting the Python-worker warm-up too ({warm:.1f} s): {size / MiB / warm:,.1f} MiB/s")
    print("report timings: " + timings_text(tm))
    names = ("taskScanSeconds", "taskMapSeconds", "taskRewriteSeconds", "taskCpuSeconds")
    task = {k[4:].removesuffix("Seconds").lower(): tm[k] for k in names if k in tm}
    if task:
        print("task seconds (summed over tasks): " + ", ".join(f"{k} {v:.1f}" for k, v in task.items()))
        if "taskCpuSeconds" in tm:
            print(f"  CPU-s per GiB read: {tm['taskCpuSeconds'] / (tot['bytesRead'] / GiB):.2f}")
    print_spark_stages(event_dir)
    return finish(problems, log_dir, args.keep)


if __name__ == "__main__":
    sys.exit(main())
