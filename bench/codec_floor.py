"""Our stage CPU on a compressed partition against the codec floor: what decompressing every
batch of the input and compressing the kept records of the output costs with the same libraries
and levels, timed alone in the same run.

    .venv/bin/python bench/codec_floor.py --name lz4|zstd [--pairs 3]
    .venv/bin/python bench/codec_floor.py --log-dir DIR [--pairs 3] [-- spark-submit options]

`--name`: the workload of bench/kafka4_anchor.py (`produce --name NAME` first), run with its 64 MiB
`segment.bytes`. Each pair: one round through ./spark-submit.sh (local[*]) on a fresh copy, caches
dropped, its output verified (bench/e2e.py's checks); the stage CPU is the report's `taskCpuSeconds`
(CPU of every task's process, its threads included). Then the floor, in a fresh Python process of
its own, as a task runs in a fresh worker with glibc's malloc set as the worker sets it
(`keep_freed_heap`): segment by segment, the file read first (untimed), then every v2 batch
decompressed the way the scan does, into one buffer the size its framing declares (`inflate_bound`,
then `lz4_frames.lz4_frame_into` for lz4 frames and `inflate_into` for the rest: the decoders the
task calls), kept and reused as the task's side buffer is (the lz4 frames also timed through the
frame decoder, for comparison: each first every other segment); then every batch of the round's output
decompressed untimed and compressed again timed (`compress`: the codec and level the job writes).
Timed: the process's CPU around each codec call, nothing else; the minor page faults inside those
calls are counted beside it. The active segment, which a round does not touch, is left out of both.
Prints each side and their ratio per pair, then the medians. Not a test.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import kafka4_anchor  # noqa: E402
from e2e import drop_caches, scan_partition, verify  # noqa: E402

from compaction.format import compression  # noqa: E402
from compaction.format.batch import BATCH_HEADER  # noqa: E402
from compaction.format.layout import (  # noqa: E402
    CODEC_LZ4,
    COMPRESSION_CODEC_MASK,
    RECORD_BATCH_OVERHEAD,
    SIZE_OFFSET,
)
from compaction.kernels.lz4_frames import FALLBACK, lz4_frame_into  # noqa: E402
from compaction.runtime.worker import keep_freed_heap  # noqa: E402

NOW_MS = 1_795_305_600_000
LOG_OVERHEAD = SIZE_OFFSET + 4  # baseOffset and batchLength precede what batchLength counts
VERIFY_SAMPLE_BATCHES = 50


def batches(data: bytes):
    """(codec, records region, where it starts) of every compressed v2 batch of a segment's bytes."""
    view, pos = memoryview(data), 0
    while pos + RECORD_BATCH_OVERHEAD <= len(data):
        fields = BATCH_HEADER.unpack_from(data, pos)
        end = pos + LOG_OVERHEAD + fields[1]
        codec = fields[5] & COMPRESSION_CODEC_MASK
        if fields[3] == 2 and codec:
            yield codec, view[pos + RECORD_BATCH_OVERHEAD : end], pos + RECORD_BATCH_OVERHEAD
        pos = end


def segments(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.rglob("*.log") if p.parent.parent == log_dir)


def closed_segments(log_dir: Path, output: Path) -> list[Path]:
    """The segments of `log_dir` a round rewrites: all but each partition's active one (the last
    one of that partition in the round's `output`, which a round never rewrites)."""
    active = {segments(d)[-1].name for d in output.iterdir() if d.is_dir() and segments(d)}
    return [s for s in segments(log_dir) if s.name not in active]


class Meter:
    """CPU seconds and minor page faults of this process inside the timed calls only."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.faults = 0

    def time(self, call, *args):
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t = time.process_time()
        result = call(*args)
        self.seconds += time.process_time() - t
        self.faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        return result


def as_the_scan(meter: Meter, src: np.ndarray, regions: list, bounds: list, side: np.ndarray) -> None:
    """A segment's compressed batches decoded as the scan decodes them, into `side`."""
    out, at = memoryview(side), 0
    for (codec, records, lo), bound in zip(regions, bounds, strict=True):
        if bound is None:  # framing without a declared bound: the scan inflates these
            meter.time(compression.inflate, codec, records)
            continue
        got = FALLBACK
        if codec == CODEC_LZ4:  # kernels/lz4_frames.py
            got = meter.time(lz4_frame_into, src, lo, lo + len(records), side, at, bound)
        if got == FALLBACK:
            got = meter.time(compression.inflate_into, codec, records, out[at : at + bound])
        at += got


def lz4_through_the_frame_decoder(meter: Meter, src, regions: list, bounds: list, side: np.ndarray) -> None:
    """The segment's lz4 frames through the library frame decoder, for the comparison only."""
    out, at = memoryview(side), 0
    for (codec, records, _), bound in zip(regions, bounds, strict=True):
        if codec == CODEC_LZ4 and bound is not None:
            at += meter.time(compression.inflate_into, codec, records, out[at : at + bound])


def measure_floor(source: Path, output: Path) -> dict:
    """The floor, measured in this process (meant to be a fresh one: `floor`)."""
    keep_freed_heap()
    inflate, deflate, frames = Meter(), Meter(), Meter()
    side = np.empty(0, np.uint8)
    # loaded before timing, for a read-only source as the segments' bytes are, as the warm-up does
    lz4_frame_into(np.frombuffer(b"", np.uint8), 0, 0, side, 0, 0)
    for i, seg in enumerate(closed_segments(source, output)):
        data = seg.read_bytes()
        src = np.frombuffer(data, np.uint8)
        regions = list(batches(data))
        bounds = [compression.inflate_bound(codec, records) for codec, records, _ in regions]
        need = sum(b for b in bounds if b is not None)
        if need > len(side):
            # Written through once, untimed: a worker's side buffer is touched by the segments
            # before, and a first touch is not the codec's cost (bench/fresh_memory.py).
            side = np.zeros(need, np.uint8)
        # Each first every other segment: the first pass over a segment pays what the second
        # finds done (pages of the buffer the host took back, the segment's bytes into the caches).
        passes = [(as_the_scan, inflate), (lz4_through_the_frame_decoder, frames)]
        for decode, meter in passes if i % 2 else passes[::-1]:
            decode(meter, src, regions, bounds, side)
    for seg in closed_segments(output, output):
        for codec, records, _ in batches(seg.read_bytes()):
            plain = compression.decompress(codec, records)
            deflate.time(compression.compress, codec, plain)
    return {
        "inflate": inflate.seconds,
        "inflate_faults": inflate.faults,
        "deflate": deflate.seconds,
        "deflate_faults": deflate.faults,
        "lz4_frame_decoder": frames.seconds,
    }


def floor(source: Path, output: Path) -> dict:
    """`measure_floor` in a fresh Python process, so that every pair's floor starts alike."""
    proc = subprocess.run(
        [sys.executable, __file__, "--measure-floor", str(source), str(output)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"floor failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def ours(source: Path, work: Path, spark_args: list[str], before: dict) -> dict:
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
    report = json.loads(report_path.read_text())
    problems = verify(before, work, report, VERIFY_SAMPLE_BATCHES)
    if problems:
        raise SystemExit("verification failed:\n" + "\n".join(problems[:20]))
    return report


def main() -> int:
    if sys.argv[1:2] == ["--measure-floor"]:
        print(json.dumps(measure_floor(Path(sys.argv[2]), Path(sys.argv[3]))))
        return 0
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
    before = {d.name: scan_partition(d) for d in sorted(source.iterdir()) if d.is_dir()}
    print(
        "floor: a fresh process per pair; CPU inside the codec calls only (reads, the untimed "
        "decompression of the output and buffer growth outside); faults = minor page faults inside them",
        flush=True,
    )
    rows = []
    for i in range(args.pairs):
        report = ours(source, work, spark_args, before)
        f = floor(source, work)
        cpu, stages = report["timings"]["taskCpuSeconds"], report["timings"]["stagesSeconds"]
        ratio = cpu / (f["inflate"] + f["deflate"])
        rows.append((cpu, f["inflate"], f["deflate"], ratio))
        print(
            f"pair {i + 1}: our stage CPU {cpu:.2f} s (stages {stages:.2f} s wall) | floor "
            f"{f['inflate'] + f['deflate']:.2f} s (decompress {f['inflate']:.2f}, {f['inflate_faults']:,} faults "
            f"+ compress {f['deflate']:.2f}, {f['deflate_faults']:,} faults) | ours / floor {ratio:.2f}x"
            + (
                f" | those lz4 frames through the frame decoder: {f['lz4_frame_decoder']:.2f} s"
                if f["lz4_frame_decoder"]
                else ""
            ),
            flush=True,
        )
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    print(
        f"\nmedian: our stage CPU {med(0):.2f} s, floor {med(1) + med(2):.2f} s (decompress {med(1):.2f}, "
        f"compress {med(2):.2f}); ours / floor {med(3):.2f}x "
        f"(min {min(r[3] for r in rows):.2f}, max {max(r[3] for r in rows):.2f}); every round verified"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
