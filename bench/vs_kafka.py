"""Our job beside Kafka's own LogCleaner, interleaved in one window (the machine's speed drifts
20-50% between windows, so only ratios measured pair by pair are quoted).

    .venv/bin/python bench/vs_kafka.py --kafka 4 --name w2g|lz4|zstd|mk [--dedupe-buffer N] [--pairs 3]
    .venv/bin/python bench/vs_kafka.py --kafka 0.9 --name w2g [--input kafka|v2] [--pairs 3] [--gb 2 --partitions 1]
    .venv/bin/python bench/vs_kafka.py --kafka 0.9 --name mk --dedupe-buffer 134217728 [--pairs 3]

`--kafka 4` (the default): Apache Kafka 4.4.0's broker and cleaner from bench/kafka4_anchor.py, on
the bytes its own Java producer wrote (`bench/kafka4_anchor.py produce --name NAME` first; the
workloads are in its WORKLOADS). One cleaner thread, `--dedupe-buffer` (Kafka's default 128 MiB)
for its offset map; the job runs with the topic's 64 MiB `segment.bytes`. Kafka's time is its
cleaner's own rounds, from its log.

`--kafka 0.9`: the legacy v0 input of Kafka 0.9.0.1, from the harness in ../shared/anchors/kafka09
(`anchor.py`): its workload NAME must have been produced first
(`python3 anchor.py --name w2g produce --bytes 2G --keys 1000000`; `mk`:
`--dedupe-buffer 134217728 produce --bytes 1G --keys 30000000 --key-min 16 --key-max 16
--val-min 8 --val-max 8`). Each pair runs, caches dropped before each:
- ours: `./spark-submit.sh` on a fresh copy of the input (`--input kafka`: the broker-written
  bytes the harness keeps, `before/kafka-logs`; `--input v2`: the same shape written by our
  generator as v2 records, `--gb` GiB over `--partitions` partitions, as bench/kafka_workload.py);
  its time is plan + stages + commit from the report (Spark start-up excluded, as Kafka's figure
  excludes the broker's), the spark-submit wall printed beside it;
- Kafka: `anchor.py measure --repeats 1 --drop-caches` (one cleaner thread; all its rounds).
Our output is verified each time: exactly the latest record of every key below the bound, the
tail untouched (bench/e2e.py's checks); with `--input kafka`, also the same record count as
Kafka's cleaner kept (its `total.end_messages`). Each pair also prints what the host was like
during each side's run (`e2e.host_window`): the share of the CPU wanted that the hypervisor gave
to other guests (steal) and the time spent waiting for the disk. Our two tasks want both cores
where Kafka's one cleaner thread wants one, so a window with steal slows us more than Kafka. Not a
test: exits non-zero when a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import kafka4_anchor  # noqa: E402
from e2e import (  # noqa: E402
    drop_caches,
    excluding_start_up,
    host_cpu,
    host_window,
    run_generator,
    scan_partition,
    timings_text,
    verify,
)

MiB = float(1 << 20)
GiB = 1 << 30
ANCHOR = REPO.parent / "shared" / "anchors" / "kafka09" / "anchor.py"
ANCHOR_DATA = Path(os.environ.get("HOME", "/root")) / ".cache" / "kafka09-anchor"
NOW_MS = 1_795_305_600_000


def v2_input(args, out: Path) -> Path:
    """Kafka's workload shape as v2 records (bench/kafka_workload.py's defaults), generated once."""
    d = out / f"v2-{args.gb:g}g-{args.partitions}p"
    if not d.exists():
        # on-disk bytes per record of this shape (24 B keys, 100-1024 B values)
        records = int(args.gb * GiB / 568.0)
        run_generator(
            d,
            "--topics",
            f"kafka:{args.partitions}",
            "--records",
            str(records // args.partitions),
            "--keys",
            str(round(1_000_000 * args.gb / 2 / args.partitions)),
            "--key-size",
            "24",
            "--value-size",
            "100:1024",
            "--codec",
            "none",
            "--segment-bytes",
            str(64 << 20),
            "--seed",
            "1",
        )
    return d


def ours(source: Path, work: Path, spark_args: list[str]) -> dict:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(source, work, ignore=shutil.ignore_patterns(".lock"))
    before = {d.name: scan_partition(d) for d in sorted(work.iterdir()) if d.is_dir()}
    report_path = work.parent / "report.json"
    subprocess.run(["sync"], check=True)
    cold = drop_caches()
    cmd = [
        "./spark-submit.sh",
        "--conf",
        "spark.ui.enabled=false",
        *spark_args,
        "--log-dir",
        str(work),
        "--report",
        str(report_path),
        "--now-ms",
        str(NOW_MS),
    ]
    t, host = time.perf_counter(), host_cpu()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall, host = time.perf_counter() - t, host_window(host, host_cpu())
    if proc.returncode != 0:
        raise SystemExit(f"job failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    report = json.loads(report_path.read_text())
    problems = verify(before, work, report, 50)
    tot = report["totals"]
    return {
        "seconds": excluding_start_up(report["timings"]),
        "wall": wall,
        "bytes": tot["bytesRead"],
        "kept": tot["recordsWritten"],
        "problems": problems,
        "cold": cold,
        "timings": report["timings"],
        "host": host,
    }


def kafka(name: str, label: str, dedupe_buffer: int | None = None, keep_after: bool = False) -> dict:
    """Kafka 0.9's cleaner over the harness's bytes, timed by the harness; `keep_after`: its
    cleaned copy left at <name>/after/kafka-logs."""
    buffer = ["--dedupe-buffer", str(dedupe_buffer)] if dedupe_buffer else []
    cmd = [
        sys.executable,
        str(ANCHOR),
        "--name",
        name,
        *buffer,
        "measure",
        "--repeats",
        "1",
        "--drop-caches",
        "--label",
        label,
        *(["--keep-after"] if keep_after else []),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"Kafka's run failed:\n{proc.stderr[-3000:]}")
    res = json.loads((ANCHOR_DATA / name / f"results-{label}" / "run-1" / "result.json").read_text())
    t = res["total"]
    # Several rounds each count what they keep: the last round's count is what the log holds.
    kept = res["rounds"][-1]["end_messages"] if res.get("rounds") else t["end_messages"]
    return {"seconds": t["elapsed_s"], "kept": kept, "rounds": t["rounds"]}


def kafka4(name: str, dedupe_buffer: int | None) -> dict:
    res = kafka4_anchor.measure(name, dedupe_buffer or kafka4_anchor.DEFAULT_DEDUPE, cold=True)
    return {"seconds": res["seconds"], "kept": res["kept"], "rounds": len(res["rounds"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kafka", choices=["4", "0.9"], default="4", help="Kafka 4.4.0 (default) or 0.9.0.1")
    ap.add_argument("--name", default="w2g", help="the harness's workload (produced beforehand)")
    ap.add_argument("--input", choices=["kafka", "v2"], default="kafka")
    ap.add_argument("--gb", type=float, default=2.0, help="--input v2: GiB of records")
    ap.add_argument("--partitions", type=int, default=1, help="--input v2: partitions")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument(
        "--dedupe-buffer",
        type=int,
        default=None,
        help="Kafka's log.cleaner.dedupe.buffer.size (Kafka 4: its default 128 MiB; the 0.9 "
        "harness's default: 512 MiB; mk: 134217728, Kafka's own default)",
    )
    ap.add_argument(
        "--spark-arg", action="append", default=[], help="extra spark-submit argument (repeatable)"
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "vs_kafka")
    args = ap.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    spark_args = [a for arg in args.spark_arg for a in arg.split(" ", 1)]
    if args.kafka == "4":
        source = kafka4_anchor.OUT / args.name / "before" / "kafka-logs"
        spark_args += ["--segment-bytes", str(kafka4_anchor.SEGMENT_BYTES), "--topics", kafka4_anchor.TOPIC]
    elif args.input == "kafka":
        source = ANCHOR_DATA / args.name / "before" / "kafka-logs"
    else:
        source = v2_input(args, args.out)
    if not source.exists():
        raise SystemExit(f"{source} is missing: produce the harness's workload first (see --help)")
    version = "4.4.0" if args.kafka == "4" else "0.9.0.1"
    print(
        f"ours on {source} ({args.input}); Kafka {version} on the harness's {args.name}; {args.pairs} pairs"
    )
    rows = []
    for i in range(args.pairs):
        o = ours(source, args.out / "run" / "kafka-logs", spark_args)
        host = host_cpu()
        if args.kafka == "4":
            k = kafka4(args.name, args.dedupe_buffer)
        else:
            k = kafka(args.name, "vs-ours", args.dedupe_buffer)
        k["host"] = host_window(host, host_cpu())
        ratio = k["seconds"] / o["seconds"]
        same = args.input != "kafka" or o["kept"] == k["kept"]
        rows.append((o, k, ratio))
        print(
            f"pair {i + 1}: ours {o['seconds']:.2f} s excl. start-up ({o['bytes'] / MiB / o['seconds']:,.0f} MiB/s; "
            f"spark-submit wall {o['wall']:.1f} s) | Kafka {k['seconds']:.2f} s in {k['rounds']} round(s) "
            f"({o['bytes'] / MiB / k['seconds']:,.0f} MiB/s of the same input) | Kafka/ours time {ratio:.2f}x, "
            f"Kafka/ours whole-run "
            f"{k['seconds'] / o['wall']:.2f}x | kept {o['kept']:,} (Kafka {k['kept']:,}) "
            f"{'OK' if not o['problems'] and same else 'MISMATCH'}",
            flush=True,
        )
        for p in o["problems"][:5]:
            print("   ", p)
        print(f"    ours' run: {o['host']}; Kafka's run (its broker's start included): {k['host']}")
        print("    ours: " + timings_text(o["timings"], 2))
    med = statistics.median(r[2] for r in rows)
    o_med = statistics.median(r[0]["bytes"] / MiB / r[0]["seconds"] for r in rows)
    k_med = statistics.median(r[0]["bytes"] / MiB / r[1]["seconds"] for r in rows)
    print(
        f"\nmedian: ours {o_med:,.0f} MiB/s excl. start-up, Kafka {k_med:,.0f} MiB/s; "
        f"Kafka/ours time ratio {med:.2f}x (min {min(r[2] for r in rows):.2f}, max {max(r[2] for r in rows):.2f})"
    )
    bad = [r for r in rows if r[0]["problems"] or (args.input == "kafka" and r[0]["kept"] != r[1]["kept"])]
    print("verification: " + ("OK" if not bad else f"{len(bad)} run(s) wrong"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
