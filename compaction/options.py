"""Command-line options of the compaction job, named after Kafka's configs.

A flag is the Kafka topic config with dots turned into dashes (`min.cleanable.dirty.ratio` ->
`--min-cleanable-dirty-ratio`). Job-wide values apply to every topic; `--topic-config FILE`
(JSON `{"topic": {"kafka.config.name": value}}` or a `.properties` file with
`topic.kafka.config.name=value` lines) overrides them per topic, as `kafka-configs --alter
--entity-type topics` would on a broker.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field

from compaction.segment_io import DIRECT_MIN_BYTES, READ_MODES, WRITE_MODES

LONG_MAX = 2**63 - 1

# (flag, Kafka config name, type, default) - defaults are Kafka's (spec §6).
KAFKA_FLAGS = (
    ("--min-cleanable-dirty-ratio", "min.cleanable.dirty.ratio", float, 0.5),
    ("--segment-bytes", "segment.bytes", int, 1_073_741_824),
    ("--segment-index-bytes", "segment.index.bytes", int, 10_485_760),
    ("--index-interval-bytes", "index.interval.bytes", int, 4096),
    ("--delete-retention-ms", "delete.retention.ms", int, 86_400_000),
    ("--min-compaction-lag-ms", "min.compaction.lag.ms", int, 0),
    ("--max-compaction-lag-ms", "max.compaction.lag.ms", int, LONG_MAX),
    ("--max-message-bytes", "max.message.bytes", int, 1_048_588),
    ("--cleanup-policy", "cleanup.policy", str, "compact"),
)


@dataclass
class JobOptions:
    log_dirs: list[str]
    topics: str | None = None
    now_ms: int = 0
    dry_run: bool = False
    recover_only: bool = False
    report: str | None = None
    ignore_broker_lock: bool = False
    master: str | None = None
    kafka_config: dict[str, object] = field(default_factory=dict)
    topic_config: dict[str, dict[str, object]] = field(default_factory=dict)
    tasks_per_core: int = 2
    read_mode: str = "direct"
    write_mode: str = "direct"

    def config_for(self, topic: str) -> dict[str, object]:
        """Job-wide values overridden by the topic's own (Kafka's topic > broker > default)."""
        return {**self.kafka_config, **self.topic_config.get(topic, {})}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="spark-submit.sh",
        description="Offline Kafka log compaction: one LogCleaner round over every eligible partition.",
    )
    p.add_argument("--log-dir", dest="log_dirs", action="append", required=True,
                   help="a Kafka log dir (local path, file://, s3://, hdfs://, gs://); repeatable")
    p.add_argument("--topics", help="regular expression of the topics to consider (full match)")
    p.add_argument("--now-ms", type=int, default=None,
                   help="the clock of the round in epoch ms, for reproducible runs (default: wall clock)")
    p.add_argument("--dry-run", action="store_true", help="plan and report, write nothing")
    p.add_argument("--recover-only", action="store_true",
                   help="only finish or roll back interrupted swaps, like a broker's log loading")
    p.add_argument("--report", help="write the JSON run report to this path")
    p.add_argument("--ignore-broker-lock", action="store_true",
                   help="clean even if a process holds the log dir's .lock (a live broker!)")
    p.add_argument("--topic-config", help="per-topic Kafka configs: JSON or .properties file")
    p.add_argument("--tasks-per-core", type=int, default=2, help="scan/rewrite tasks per core (default 2)")
    p.add_argument("--read-mode", choices=READ_MODES, default="direct",
                   help=f"how executors read local segments of {DIRECT_MIN_BYTES >> 20} MiB or more: direct (O_DIRECT into reused "
                        "buffers, bypassing the page cache; the default) or mmap (through the page cache, "
                        "best when the segments are cached already)")  # fmt: skip
    p.add_argument("--write-mode", choices=WRITE_MODES, default="direct",
                   help="how executors write cleaned segments on a local disk: direct (O_DIRECT from reused "
                        "staging buffers, bypassing the page cache; the default, falls back where refused) or "
                        "buffered (through the page cache)")  # fmt: skip
    for flag, name, typ, default in KAFKA_FLAGS:
        p.add_argument(flag, type=typ, default=None, help=f"Kafka's {name} (default {default})")
    return p


def parse_args(argv: list[str] | None = None) -> JobOptions:
    args = build_parser().parse_args(argv)
    kafka_config = {
        name: getattr(args, flag[2:].replace("-", "_"))
        for flag, name, _, _ in KAFKA_FLAGS
        if getattr(args, flag[2:].replace("-", "_")) is not None
    }
    return JobOptions(
        log_dirs=args.log_dirs,
        topics=args.topics,
        now_ms=args.now_ms if args.now_ms is not None else int(time.time() * 1000),
        dry_run=args.dry_run,
        recover_only=args.recover_only,
        report=args.report,
        ignore_broker_lock=args.ignore_broker_lock,
        kafka_config=kafka_config,
        topic_config=load_topic_config(args.topic_config) if args.topic_config else {},
        tasks_per_core=args.tasks_per_core,
        read_mode=args.read_mode,
        write_mode=args.write_mode,
    )


def load_topic_config(path: str) -> dict[str, dict[str, object]]:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if path.endswith(".json"):
        data = json.loads(text)
        return {topic: dict(cfg) for topic, cfg in data.items()}
    return parse_topic_properties(text)


def parse_topic_properties(text: str) -> dict[str, dict[str, object]]:
    """`orders.cleanup.policy=compact` -> {"orders": {"cleanup.policy": "compact"}}.

    Topic names may contain dots, so the config name is matched from the known Kafka names.
    """
    names = sorted((name for _, name, _, _ in KAFKA_FLAGS), key=len, reverse=True)
    out: dict[str, dict[str, object]] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        match = next((n for n in names if key.strip().endswith("." + n)), None)
        if not sep or match is None:
            raise ValueError(f"topic config line {lineno}: expected <topic>.<kafka config>=<value>: {raw!r}")
        topic = key.strip()[: -len(match) - 1]
        out.setdefault(topic, {})[match] = value.strip()
    return out
