"""Apache Kafka 4.4's own LogCleaner as the performance anchor, on the broker of
tests/helpers/kafka4.py (jars from Maven Central: `python tests/helpers/kafka4.py install`).

    .venv/bin/python bench/kafka4_anchor.py produce --name w2g      # once per workload
    .venv/bin/python bench/kafka4_anchor.py measure --name w2g [--dedupe-buffer N] [--drop-caches]

`produce` starts a broker with the cleaner off, creates topic `anchor` (1 partition, compacted,
64 MiB segments, `min.cleanable.dirty.ratio` 1.0 so the cleaner never picks it), writes the
workload with Kafka's Java producer (Kafka4Client's `workload`), stops it cleanly and keeps
`bench/out/kafka4/<name>/before`. `measure` copies it to a fresh run dir (dropping the page
cache), starts the broker with the cleaner on (one thread, the given dedupe buffer), lets it
settle, sets the topic's ratio to 0.01 and waits until the cleaner's checkpoint reaches the active
segment. The time is the cleaner's own: from its "Beginning cleaning of log anchor-0" line to its
statistics line, summed over its rounds (a full offset map ends a round early).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "helpers"))
sys.path.insert(0, str(REPO / "bench"))

import kafka4  # noqa: E402
from kafka4 import Broker, Script  # noqa: E402

GiB, MiB = 1 << 30, 1 << 20
OUT = REPO / "bench" / "out" / "kafka4"
TOPIC = "anchor"
SEGMENT_BYTES = 64 * MiB
# name: (key and value bytes to send, distinct keys drawn from, key sizes, value sizes, codec, text)
WORKLOADS = {
    "w2g": (2 * GiB, 1_000_000, (16, 32), (100, 1024), "none", False),  # ~2 GiB on disk
    "lz4": (int(2.2 * GiB), 1_000_000, (16, 32), (100, 1024), "lz4", True),  # text: ~1 GiB on disk
    "zstd": (4 * GiB, 1_000_000, (16, 32), (100, 1024), "zstd", True),
    "mk": (512 * MiB, 30_000_000, (16, 16), (8, 8), "none", False),  # ~21M records, ~15M keys
}
DEFAULT_DEDUPE = 128 * MiB  # Kafka's default log.cleaner.dedupe.buffer.size
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3})\]")
STATS = re.compile(r"Log cleaner thread \d+ cleaned log (\S+) \(dirty section = \[(\d+), (\d+)\]\)")
END_SIZE = re.compile(r"End size: ([\d.,]+) MB \(([\d,]+) messages\)")
START_SIZE = re.compile(r"Start size: ([\d.,]+) MB \(([\d,]+) messages\)")


def _ms(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S,%f").timestamp() * 1000


def _count(text: str) -> int:
    return int(text.replace(",", ""))  # the statistics print "%,d"


def cleaner_rounds(log: str, partition: str) -> list[dict]:
    """Each round of the cleaner on `partition` in a broker log: its time from the log4j stamps of
    its first line and of its statistics, its dirty section, and the messages it kept."""
    rounds, begin, stamp = [], None, None
    lines = log.splitlines()
    for i, line in enumerate(lines):
        m = STAMP.match(line)
        if m:
            stamp = m.group(1)
        if re.search(f"Beginning cleaning of log {re.escape(partition)}( |$)", line):
            begin = stamp
        s = STATS.search(line)
        if s and s.group(1) == partition and begin is not None:
            block = "\n".join(lines[i : i + 8])
            rounds.append(
                {
                    "seconds": (_ms(stamp) - _ms(begin)) / 1000,
                    "dirty": [int(s[2]), int(s[3])],
                    "start_messages": _count(START_SIZE.search(block).group(2)),
                    "end_messages": _count(END_SIZE.search(block).group(2)),
                }
            )
            begin = None
    return rounds


def produce(name: str) -> Path:
    nbytes, keys, key_size, value_size, codec, text = WORKLOADS[name]
    root = OUT / name / "before"
    if root.exists():
        shutil.rmtree(root)
    script = Script().topic(
        TOPIC, 1, cleanup_policy="compact", segment_bytes=SEGMENT_BYTES, min_cleanable_dirty_ratio=1.0
    )
    script.producer(
        "p", compression_type=codec, linger_ms=20, batch_size=1 << 20, acks=1, buffer_memory=64 << 20
    )
    script.workload("p", TOPIC, 0, nbytes, keys, key_size, value_size, seed=1, text=text).close("p")
    t = time.perf_counter()
    with Broker(root, {}, jvm=kafka4.BENCH_JVM) as broker:
        broker.start()
        lines = broker.run_client(script, timeout=3600)
    part = root / "kafka-logs" / f"{TOPIC}-0"
    records, sent = next(map(int, line.split("\t")[1:]) for line in lines if line.startswith("workload"))
    workload = {
        "name": name,
        "records": records,
        "key_value_bytes": sent,
        "codec": codec,
        "text": text,
        "keys": keys,
        "log_bytes": sum(p.stat().st_size for p in part.glob("*.log")),
        "segments": len(list(part.glob("*.log"))),
        "active_base": kafka4.active_segment_base(part),
        "produce_seconds": time.perf_counter() - t,
    }
    (OUT / name / "workload.json").write_text(json.dumps(workload, indent=2))
    print(json.dumps(workload))
    return root


def measure(name: str, dedupe_buffer: int = DEFAULT_DEDUPE, cold: bool = True, settle_s: float = 5.0) -> dict:
    """One run of Kafka's cleaner on a fresh copy of the workload."""
    from e2e import drop_caches

    source, run = OUT / name / "before", OUT / name / "run"
    if run.exists():
        shutil.rmtree(run)
    shutil.copytree(source, run, ignore=shutil.ignore_patterns("logs"))
    cold = drop_caches() if cold else False
    heap = f"{max(2 * GiB, dedupe_buffer + GiB) // MiB}m"
    broker = Broker(
        run,
        {
            "log.cleaner.enable": "true",
            "log.cleaner.threads": 1,
            "log.cleaner.backoff.ms": 200,
            "log.cleaner.dedupe.buffer.size": dedupe_buffer,
        },
        jvm=("-Xms" + heap, "-Xmx" + heap, *kafka4.BENCH_JVM[2:]),
        timeout=3600,
    )
    part = run / "kafka-logs" / f"{TOPIC}-0"
    try:
        broker.start()
        time.sleep(settle_s)  # the broker's start-up and JIT work do not overlap the round
        broker.run_client(Script().alter(TOPIC, min_cleanable_dirty_ratio=0.01))
        broker.wait_cleaned([(TOPIC, 0)], timeout=3600)
        log = broker.log_text()
    finally:
        broker.stop()
    rounds = cleaner_rounds(log, f"{TOPIC}-0")
    result = {
        "seconds": sum(r["seconds"] for r in rounds),
        "rounds": rounds,
        "cold": cold,
        "kept": rounds[-1]["end_messages"] if rounds else None,
        "dedupe_buffer": dedupe_buffer,
        "log_bytes_after": sum(p.stat().st_size for p in part.glob("*.log")),
    }
    shutil.rmtree(run)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["produce", "measure"])
    ap.add_argument("--name", choices=sorted(WORKLOADS), default="w2g")
    ap.add_argument("--dedupe-buffer", type=int, default=DEFAULT_DEDUPE)
    ap.add_argument("--drop-caches", action="store_true")
    args = ap.parse_args()
    kafka4.install()
    if args.command == "produce":
        produce(args.name)
    else:
        print(json.dumps(measure(args.name, args.dedupe_buffer, args.drop_caches), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
