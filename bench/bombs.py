"""The largest Python worker's memory on decompression bombs, at the default bound.

Builds a log dir of four partitions, each with one crafted batch (CRC right) in a middle segment:
a 134 KB zstd batch inflating to 4 GiB, a 35 KB zstd batch inflating to 1 GiB, a 1 MB gzip batch
inflating to 1 GiB (all under `max.message.bytes` 1 MiB + 12), and a 2 MB gzip batch inflating
to 2 GiB (over it), runs one round through spark-submit (`local[2]`, `--max-message-bytes` at its
default) and prints each partition's status and the largest VmHWM of PySpark's daemon and
workers, sampled from /proc (bench/tree_memory.py). Linux only. Not a test (the bound is tested
by tests/e2e/test_hostile_e2e.py with a small one).

    python bench/bombs.py [--out DIR] [--max-inflated-batch-bytes N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "helpers"))
sys.path.insert(0, HERE)

from bombkit import bomb_batch  # noqa: E402
from faultkit import batch, write_partition  # noqa: E402
from tree_memory import TreeMemory  # noqa: E402

from compaction.format.layout import CODEC_GZIP, CODEC_ZSTD  # noqa: E402

MiB = 1 << 20
BOMBS = [
    ("zstd4g-0", CODEC_ZSTD, 4 << 30),
    ("zstd1g-0", CODEC_ZSTD, 1 << 30),
    ("gzip1g-0", CODEC_GZIP, 1 << 30),
    ("gzip2g-0", CODEC_GZIP, 2 << 30),
]


def build(log_dir: str) -> None:
    for name, codec, inflated in BOMBS:
        middle = [
            batch(range(10, 12)),
            bomb_batch(codec, inflated, base_offset=12, timestamp=1_700_000_000_012),
            batch(range(13, 15)),
        ]
        write_partition(
            os.path.join(log_dir, name),
            [[batch(range(o, o + 2)) for o in range(0, 10, 2)], middle, [batch([15, 16])]],
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "out", "bombs"))
    ap.add_argument("--max-inflated-batch-bytes", type=int, default=None)
    args = ap.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    log_dir, report = os.path.join(args.out, "logs"), os.path.join(args.out, "report.json")
    build(log_dir)
    cmd = [
        os.path.join(REPO, "spark-submit.sh"),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--log-dir",
        log_dir,
        "--report",
        report,
        "--now-ms",
        "1800000000000",
    ]
    if args.max_inflated_batch_bytes:
        cmd += ["--max-inflated-batch-bytes", str(args.max_inflated_batch_bytes)]
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    memory = TreeMemory(proc.pid, interval=0.05).start()
    proc.wait()
    memory.stop()
    for p in json.load(open(report))["partitions"]:
        print(f"{p['topic']}-{p['partition']}: {p['status']}: {p.get('reason')}")
    print(
        f"exit {proc.returncode}; largest Python worker VmHWM {memory.max_worker_hwm() / MiB:.0f} MiB "
        f"({len(memory.workers)} daemon and worker processes); largest JVM {memory.max_hwm('java') / MiB:.0f} MiB"
    )


if __name__ == "__main__":
    main()
