"""End-to-end throughput of one compaction round through ./spark-submit.sh, against the disk.

    .venv/bin/python bench/e2e.py [--gb 1] [--codec mixed] [--partitions 4] [--out bench/out/e2e]

1. Generates a log dir of ~`--gb` GB of .log files (values of 100 B to 1 KB, mixed codecs by
   default, keys drawn uniformly so that ~30% of the records survive compaction). A small sample
   is generated first to learn the on-disk bytes per record, so the size holds for any codec.
2. Scans the input with compaction.kernels.scan (key and offset of every record) for the check.
3. Measures the cold sequential read speed of the same .log files (`cat FILES > /dev/null` after
   dropping the page cache when we may; otherwise it is a warm read and says so).
4. Drops the caches again and runs ./spark-submit.sh on the dir (with a Spark event log, to see
   the time of each Spark stage).
5. Verifies the output: below each partition's uncleanable bound, exactly one record per distinct
   key, and it is the latest one of that key (all keys, an arrow join); from the bound up, every
   input record is still there; a sample of output batches decoded again with iter_batches agrees.
6. Prints input MB, end-to-end MB/s (wall time of spark-submit), MB/s excluding Spark start-up
   (plan + stages + commit from the report), their ratio to the read speed, the report's timings
   and the Spark stages.

Not a test. Exits non-zero when the job or the verification fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MB = 1e6
KEEP_FRACTION = 0.30
SAMPLE_RECORDS = 20_000
NOW_MS = 1_795_305_600_000  # 2026-11-22T00:00:00Z: a fixed clock for the round


def fresh_out_dir(out: Path) -> tuple[Path, Path, Path]:
    """(log dir, event log dir, report path) under `out`, emptied of a previous run."""
    out.mkdir(parents=True, exist_ok=True)
    log_dir, event_dir, report_path = out / "kafka-logs", out / "eventlog", out / "report.json"
    for p in (log_dir, event_dir):
        shutil.rmtree(p, ignore_errors=True)
    event_dir.mkdir()
    report_path.unlink(missing_ok=True)
    return log_dir, event_dir, report_path


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def host_cpu() -> list[int]:
    """The host's CPU time counters, in ticks: /proc/stat's first line (user, nice, system, idle,
    iowait, irq, softirq, steal); [] where there is none."""
    try:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return []


def host_window(before: list[int], after: list[int]) -> str:
    """What the host was like between two `host_cpu` readings: the share of the CPU time its
    processes wanted that the hypervisor gave to others (steal: a shared VM's "slow window"), and
    the share of all CPU time spent waiting for the disk."""
    if len(before) < 8 or len(after) < 8:
        return "host: unknown"
    user, nice, system, idle, iowait, irq, softirq, steal = (b - a for a, b in zip(before, after))
    busy = user + nice + system + irq + softirq
    total = busy + idle + iowait + steal
    hz = os.sysconf("SC_CLK_TCK")
    return (
        f"host: steal {steal / max(1, busy + steal):.0%} of the CPU wanted ({steal / hz:.1f} of "
        f"{(busy + steal) / hz:.1f} s), iowait {iowait / max(1, total):.0%}"
    )


def timings_text(tm: dict, digits: int = 1) -> str:
    """A report's `timings` on one line: seconds as seconds, counts (kernel compiles, page faults,
    segments scanned twice) as counts."""
    return ", ".join(
        f"{k.removesuffix('Seconds')} {v:.{digits}f} s" if k.endswith("Seconds") else f"{k} {v:,}"
        for k, v in tm.items()
    )


def log_files(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.glob("*/*.log"))


def read_speed(files: list[Path], streams: int = 1) -> tuple[float, bool]:
    """Bytes/s of `cat` over all files, after dropping the page cache if we may: one `cat`, or
    `streams` at once, each over a contiguous share of the files of about equal bytes (as the
    tasks of a partition cut into ranges read them)."""
    dropped = drop_caches()
    sizes = [f.stat().st_size for f in files]
    total = max(sum(sizes), 1)
    shares: list[list[str]] = [[] for _ in range(streams)]
    at = 0
    for f, n in zip(files, sizes):
        shares[min(streams - 1, int((at + n / 2) * streams / total))].append(str(f))
        at += n
    t = time.perf_counter()
    procs = [subprocess.Popen(["cat", *share], stdout=subprocess.DEVNULL) for share in shares if share]
    if any(p.wait() for p in procs):
        raise SystemExit("cat failed")
    return sum(sizes) / (time.perf_counter() - t), dropped


def keys_ratio(keep: float) -> float:
    """K/N such that uniform keys leave `keep` of N records: K/N * (1 - exp(-N/K)) = keep."""
    lo, hi = keep, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if mid * (1 - math.exp(-1 / mid)) < keep:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def run_generator(out: Path, *options: str) -> float:
    """`python -m compaction generate OUT OPTIONS...`; returns its seconds."""
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "compaction", "generate", str(out), *options]
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def generate(out: Path, topic: str, partitions: int, records: int, keys: int, args) -> float:
    # The generator's keys are b"key-" + a zero-padded id: 10 bytes unless the ids need more digits.
    key_size = max(10, len("key-") + len(str(max(0, keys - 1))))
    return run_generator(
        out,
        "--topics",
        f"{topic}:{partitions}",
        "--records",
        str(records),
        "--keys",
        str(keys),
        "--key-size",
        str(key_size),
        "--value-size",
        args.value_size,
        "--codec",
        args.codec,
        "--segment-bytes",
        str(args.segment_bytes),
        "--seed",
        str(args.seed),
    )


def bytes_per_record(args) -> float:
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        d = Path(tmp) / "logs"
        generate(
            d, "sample", 1, SAMPLE_RECORDS, max(1, int(SAMPLE_RECORDS * keys_ratio(KEEP_FRACTION))), args
        )
        return sum(f.stat().st_size for f in log_files(d)) / SAMPLE_RECORDS


def scan_partition(part_dir: Path):
    """(key, offset) of every record of the partition, as a pyarrow table, via scan_segment."""
    import pyarrow as pa

    from compaction.kernels.scan import scan_segment

    tables = []
    for f in sorted(part_dir.glob("*.log")):
        s = scan_segment(np.fromfile(f, np.uint8), str(f))
        tables.append(pa.table({"key": s.keys_arrow(), "offset": s.records.offset.copy()}))
    if not tables:
        return pa.table({"key": pa.array([], pa.binary()), "offset": pa.array([], pa.int64())})
    return pa.concat_tables(tables)


def verify(before: dict, log_dir: Path, report: dict, sample_batches: int) -> list[str]:
    """Latest-per-key below each bound (all keys), untouched tail, an iter_batches sample."""
    import pyarrow.compute as pc

    from compaction.format.segment import iter_batches

    problems: list[str] = []
    parts = {(p["topic"], p["partition"]): p for p in report.get("partitions", [])}
    kept_total = distinct_total = 0
    for name, table in sorted(before.items()):
        topic, _, part = name.rpartition("-")
        p = parts.get((topic, int(part)))
        if p is None or p["status"] != "cleaned":
            problems.append(f"{name}: not cleaned ({p and p['status']}: {p and p['reason']})")
            continue
        bound = p["firstUncleanableOffset"]
        after = scan_partition(log_dir / name)
        below_in = table.filter(pc.less(table["offset"], bound))
        expected = below_in.group_by("key").aggregate([("offset", "max")]).rename_columns(["key", "offset"])
        below_out = after.filter(pc.less(after["offset"], bound))
        distinct_total += expected.num_rows
        kept_total += below_out.num_rows
        if below_out.num_rows != expected.num_rows:
            problems.append(
                f"{name}: {below_out.num_rows} records kept below {bound}, {expected.num_rows} distinct keys"
            )
        if pc.count_distinct(below_out["key"]).as_py() != below_out.num_rows:
            problems.append(f"{name}: a key is kept twice below {bound}")
        joined = expected.join(
            below_out, "key", join_type="full outer", left_suffix="_in", right_suffix="_out"
        )
        wrong = joined.filter(
            pc.invert(pc.fill_null(pc.equal(joined["offset_in"], joined["offset_out"]), False))
        )
        if wrong.num_rows:
            problems.append(
                f"{name}: {wrong.num_rows} keys without their latest record, e.g. "
                f"{wrong.slice(0, 3).to_pylist()}"
            )
        tail_in = table.filter(pc.greater_equal(table["offset"], bound))["offset"]
        tail_out = after.filter(pc.greater_equal(after["offset"], bound))["offset"]
        if not np.array_equal(np.sort(tail_in.to_numpy()), np.sort(tail_out.to_numpy())):
            problems.append(f"{name}: records from the bound {bound} up changed")
        # An independent decode of a sample: the pure-Python reader against the expected map.
        latest = dict(zip(expected["key"].to_pylist(), expected["offset"].to_pylist()))
        seen = 0
        for f in sorted((log_dir / name).glob("*.log")):
            buf = f.read_bytes()
            for batch in iter_batches(buf, str(f)):
                for r in batch.records():
                    if r.offset < bound and latest.get(r.key) != r.offset:
                        problems.append(
                            f"{name}: iter_batches finds {r.key!r}@{r.offset}, latest is {latest.get(r.key)}"
                        )
                seen += 1
                if seen >= sample_batches:
                    break
            if seen >= sample_batches:
                break
    print(
        f"verify: {kept_total:,} records kept below the bounds == {distinct_total:,} distinct keys: "
        f"{'yes' if kept_total == distinct_total else 'NO'}; latest-per-key checked for all keys; "
        f"{sample_batches} batches per partition re-decoded with iter_batches"
    )
    return problems


def _event_lines(files: list[Path]):
    for path in files:
        if path.suffix == ".zstd":
            import io

            import zstandard

            with open(path, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as z:
                yield from io.TextIOWrapper(z, encoding="utf-8")
        else:
            with open(path) as f:
                yield from f


def spark_stages(event_dir: Path) -> list[tuple[str, str, int, float, float]]:
    """(job group, stage name, tasks, wall s, summed task run s) per completed stage, from the event log."""
    logs = sorted(
        (p for p in event_dir.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))),
        key=lambda p: p.name,
    )
    if not logs:
        return []
    group_of_stage: dict[int, str] = {}
    run_ms: dict[int, int] = {}
    stages = []
    for line in _event_lines(logs):
        ev = json.loads(line)
        kind = ev.get("Event")
        if kind == "SparkListenerJobStart":
            group = (ev.get("Properties") or {}).get("spark.jobGroup.id", "-")
            for sid in ev.get("Stage IDs", []):
                group_of_stage[sid] = group
        elif kind == "SparkListenerTaskEnd":
            sid = ev["Stage ID"]
            run_ms[sid] = run_ms.get(sid, 0) + (ev.get("Task Metrics") or {}).get("Executor Run Time", 0)
        elif kind == "SparkListenerStageCompleted":
            info = ev["Stage Info"]
            if "Completion Time" in info and "Submission Time" in info:
                sid = info["Stage ID"]
                wall = (info["Completion Time"] - info["Submission Time"]) / 1000
                stages.append(
                    (
                        sid,
                        group_of_stage.get(sid, "-"),
                        info["Stage Name"],
                        info["Number of Tasks"],
                        wall,
                        run_ms.get(sid, 0) / 1000,
                    )
                )
    return [s[1:] for s in sorted(stages)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.0, help="size of the generated .log files, GB (1e9 bytes)")
    ap.add_argument("--codec", default="mixed", choices=["none", "gzip", "snappy", "lz4", "zstd", "mixed"])
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-size", default="100:1000")
    ap.add_argument("--segment-bytes", type=int, default=16 << 20, help="generator roll size")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sample-batches", type=int, default=200, help="batches per partition for iter_batches")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "e2e")
    ap.add_argument("--keep", action="store_true", help="keep the log dir afterwards")
    args = ap.parse_args()

    log_dir, event_dir, report_path = fresh_out_dir(args.out)

    bpr = bytes_per_record(args)
    records = max(1, int(args.gb * 1e9 / args.partitions / bpr))
    keys = max(1, round(records * keys_ratio(KEEP_FRACTION)))
    gen_s = generate(log_dir, "bench", args.partitions, records, keys, args)
    files = log_files(log_dir)
    size = sum(f.stat().st_size for f in files)
    expect_kept = keys * (1 - (1 - 1 / keys) ** records) / records
    print(
        f"generated {log_dir}: {args.partitions} partitions x {records:,} records, {keys:,} keys each "
        f"(~{expect_kept:.0%} kept), values {args.value_size} B, codec {args.codec}, "
        f"{len(files)} segments, {size / MB:,.1f} MB in {gen_s:.1f} s"
    )

    t = time.perf_counter()
    before = {d.name: scan_partition(d) for d in sorted(log_dir.iterdir()) if d.is_dir()}
    print(f"scanned the input for the check in {time.perf_counter() - t:.1f} s")

    speed, cold = read_speed(files)
    print(
        f"sequential read of the same files (cat > /dev/null, "
        f"{'cold: page cache dropped' if cold else 'WARM: could not drop caches'}): {speed / MB:,.0f} MB/s"
    )

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
        "--log-dir",
        str(log_dir),
        "--report",
        str(report_path),
        "--now-ms",
        str(NOW_MS),
    ]
    print("job:", shlex.join(cmd))
    drop_caches()
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0 or not report_path.exists():
        print(f"job failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}", file=sys.stderr)
        return 1
    report = json.loads(report_path.read_text())
    tm, tot = report["timings"], report["totals"]

    problems = verify(before, log_dir, report, args.sample_batches)

    no_start = excluding_start_up(tm)
    print()
    print(
        f"input:                               {size / MB:,.1f} MB of .log ({tot['recordsRead']:,} records; "
        f"report bytesRead {tot['bytesRead'] / MB:,.1f} MB)"
    )
    print(
        f"output:                              {tot['bytesWritten'] / MB:,.1f} MB written, "
        f"{tot['recordsWritten']:,} records ({tot['recordsWritten'] / max(1, tot['recordsRead']):.1%} kept)"
    )
    print(f"cold sequential read:                {speed / MB:,.0f} MB/s{'' if cold else ' (WARM)'}")
    print(
        f"end to end (spark-submit wall {wall:.1f} s): {size / MB / wall:,.1f} MB/s = "
        f"{size / wall / speed:.3f}x read speed"
    )
    print(
        f"excl. Spark start-up (plan+stages+commit {no_start:.1f} s): {size / MB / no_start:,.1f} MB/s = "
        f"{size / no_start / speed:.3f}x read speed"
    )
    deleting = no_start + tm.get("deleteSeconds", 0)
    print(
        f"  counting the removal of the replaced segments too ({deleting:.1f} s): {size / MB / deleting:,.1f} MB/s"
    )
    warm = no_start + tm.get("workerWarmupSeconds", 0)
    print(f"  counting the Python-worker warm-up too ({warm:.1f} s): {size / MB / warm:,.1f} MB/s")
    print("report timings: " + timings_text(tm))
    print_spark_stages(event_dir)
    return finish(problems, log_dir, args.keep)


def excluding_start_up(tm: dict) -> float:
    """Seconds of the round without Spark's start-up: plan + stages + commit. The start-up (session,
    and the Python workers' warm-up: imports and compiled kernels, one tiny task per core) runs on
    a thread while the driver plans and is reported as sparkStart/workerWarmup/sparkWait. The
    commit ends with the checkpoint; the replaced segments' files are unlinked after it, as Kafka
    deletes them asynchronously (deleteSeconds, printed as a figure of its own)."""
    return max(1e-9, tm.get("planSeconds", 0) + tm.get("stagesSeconds", 0) + tm.get("commitSeconds", 0))


def print_spark_stages(event_dir) -> None:
    """The Spark stages of the run, from its event log (shared by the bench scripts)."""
    stages = spark_stages(event_dir)
    if stages:
        print("spark stages (event log): group | tasks | wall s | summed task run s | name")
        for group, name, tasks, wall_s, run_s in stages:
            print(f"  {group:<8} {tasks:>5} {wall_s:>8.1f} {run_s:>8.1f}  {name}")


def finish(problems: list[str], log_dir, keep: bool, ok: str = "verification: OK") -> int:
    """Clean up the generated input unless kept, print the verdict, return the exit code."""
    if not keep:
        shutil.rmtree(log_dir, ignore_errors=True)
    if problems:
        print("VERIFICATION FAILED:\n  " + "\n  ".join(problems[:20]), file=sys.stderr)
        return 1
    print(ok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
