"""Our stage CPU on a compressed partition against the codec floor: what decompressing every
batch of the input and compressing the kept records of the output costs with the same libraries
and levels, timed alone in the same run.

    .venv/bin/python bench/codec_floor.py --name lz4|zstd [--pairs 3]
    .venv/bin/python bench/codec_floor.py --log-dir DIR [--pairs 3] [-- spark-submit options]

`--name`: the workload of bench/kafka4_anchor.py (`produce --name NAME` first), run with its
64 MiB `segment.bytes`. Each pair: one round through ./spark-submit.sh (local[*]) on a fresh copy,
caches dropped (the stage CPU is the report's `taskCpuSeconds`: CPU of every task's process,
its threads included); then, in this process, the floor: every v2 batch of the input's
segments decompressed (`format/compression.decompress`), and every batch of the round's output
decompressed untimed and compressed again timed (`format/compression.compress`: the codec and
level the job writes). Prints each side and their ratio per pair, then the medians. Not a test.
"""

from __future__ import annotations

import argparse
import json
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
from e2e import drop_caches  # noqa: E402

from compaction.format import compression  # noqa: E402
from compaction.format.batch import BATCH_HEADER  # noqa: E402
from compaction.format.layout import COMPRESSION_CODEC_MASK, RECORD_BATCH_OVERHEAD, SIZE_OFFSET  # noqa: E402

NOW_MS = 1_795_305_600_000
LOG_OVERHEAD = SIZE_OFFSET + 4  # baseOffset and batchLength precede what batchLength counts


def batches(path: Path):
    """(codec, records region) of every v2 batch of a segment file."""
    data = path.read_bytes()
    view, pos = memoryview(data), 0
    while pos + RECORD_BATCH_OVERHEAD <= len(data):
        fields = BATCH_HEADER.unpack_from(data, pos)
        end = pos + LOG_OVERHEAD + fields[1]
        if fields[3] == 2:
            yield fields[5] & COMPRESSION_CODEC_MASK, view[pos + RECORD_BATCH_OVERHEAD : end]
        pos = end


def segments(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.rglob("*.log") if p.parent.parent == log_dir)


def floor(source: Path, output: Path, active: set[str]) -> tuple[float, float]:
    """CPU seconds to decompress the input's batches, and to compress the output's records again
    (the active segment, which the round does not touch, excluded from both)."""
    inflate = deflate = 0.0
    for seg in segments(source):
        if seg.name in active:
            continue
        for codec, records in batches(seg):
            if codec:
                t = time.process_time()
                compression.decompress(codec, records)
                inflate += time.process_time() - t
    for seg in segments(output):
        if seg.name in active:
            continue
        for codec, records in batches(seg):
            if codec:
                plain = compression.decompress(codec, records)
                t = time.process_time()
                compression.compress(codec, plain)
                deflate += time.process_time() - t
    return inflate, deflate


def ours(source: Path, work: Path, spark_args: list[str]) -> dict:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(source, work, ignore=shutil.ignore_patterns(".lock"))
    report_path = work.parent / "report.json"
    subprocess.run(["sync"], check=True)
    drop_caches()
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
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"job failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(report_path.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", help="a bench/kafka4_anchor.py workload")
    ap.add_argument("--log-dir", type=Path, help="or any log dir")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "codec_floor")
    ap.add_argument("spark_args", nargs="*")
    args = ap.parse_args()
    if args.name:
        source = kafka4_anchor.OUT / args.name / "before" / "kafka-logs"
        spark_args = ["--segment-bytes", str(kafka4_anchor.SEGMENT_BYTES), "--topics", kafka4_anchor.TOPIC]
    elif args.log_dir:
        source, spark_args = args.log_dir, []
    else:
        raise SystemExit("--name or --log-dir")
    spark_args += args.spark_args
    if not source.exists():
        raise SystemExit(f"{source} is missing (bench/kafka4_anchor.py produce --name {args.name})")
    work = args.out / "run" / "kafka-logs"
    rows = []
    for i in range(args.pairs):
        report = ours(source, work, spark_args)
        # The active segment of each partition: the last one, which a round never rewrites.
        active = {segments(d)[-1].name for d in work.iterdir() if d.is_dir() and segments(d)}
        inflate, deflate = floor(source, work, active)
        cpu, stages = report["timings"]["taskCpuSeconds"], report["timings"]["stagesSeconds"]
        ratio = cpu / (inflate + deflate)
        rows.append((cpu, inflate, deflate, ratio))
        print(
            f"pair {i + 1}: our stage CPU {cpu:.2f} s (stages {stages:.2f} s wall) | floor "
            f"{inflate + deflate:.2f} s (decompress {inflate:.2f} + compress {deflate:.2f}) | ours / floor "
            f"{ratio:.2f}x",
            flush=True,
        )
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    print(
        f"\nmedian: our stage CPU {med(0):.2f} s, floor {med(1) + med(2):.2f} s; ours / floor {med(3):.2f}x "
        f"(min {min(r[3] for r in rows):.2f}, max {max(r[3] for r in rows):.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
