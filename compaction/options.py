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
import re
import sys
import time
from dataclasses import dataclass, field

from compaction import __version__
from compaction.errors import UsageError
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
    log_format: str = "text"
    metrics_file: str | None = None

    def config_for(self, topic: str) -> dict[str, object]:
        """Job-wide values overridden by the topic's own (Kafka's topic > broker > default)."""
        return {**self.kafka_config, **self.topic_config.get(topic, {})}


# --- usage errors: one line, exit 2 ---------------------------------------------------------------


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that names the fix (`--help`), exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


VERSION = f"kafka-offline-compaction {__version__}"
LOG_FORMATS = ("text", "json")


def build_parser(prog: str = "spark-submit.sh", epilog: str | None = None) -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=prog,
        description="Offline Kafka log compaction: one LogCleaner round over every eligible partition.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=VERSION)
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
    p.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                   help="the driver's log lines: text, or json (one object a line, for log shippers)")
    p.add_argument("--metrics-file", metavar="PATH",
                   help="write the round's totals and timings in Prometheus' text format to PATH, atomically "
                        "(node_exporter's textfile collector: PATH ending in .prom in its "
                        "directory)")  # fmt: skip
    for flag, name, typ, default in KAFKA_FLAGS:
        p.add_argument(flag, type=typ, default=None, help=f"Kafka's {name} (default {default})")
    return p


def parse_args(argv: list[str] | None = None, prog: str = "spark-submit.sh") -> JobOptions:
    """The job's options, checked (`check_options`): a usage error exits 2 with one line."""
    try:
        return check_options(parse_unchecked(argv, prog))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def check_options(opts: JobOptions) -> JobOptions:
    """Raise `UsageError` for a value the round would only trip over later: a bad `--topics`
    regex, a Kafka config out of Kafka's range (job-wide or per topic). No file is touched."""
    from compaction.plan import resolve_topic_config

    if opts.topics is not None:
        try:
            re.compile(opts.topics)
        except re.error as exc:
            raise UsageError(f"--topics {opts.topics!r}: not a regular expression ({exc}); "
                             "e.g. 'orders|payments'") from None
    if opts.tasks_per_core < 1:
        raise UsageError(f"--tasks-per-core {opts.tasks_per_core}: must be at least 1")
    if opts.now_ms < 0:
        raise UsageError(f"--now-ms {opts.now_ms}: must be epoch milliseconds (>= 0)")
    try:
        _check_policy(resolve_topic_config(None, opts.kafka_config).cleanup_policy)
    except ValueError as exc:
        raise UsageError(f"{_flag_of(exc)}{exc}") from None
    for topic, cfg in opts.topic_config.items():
        try:
            _check_policy(resolve_topic_config(cfg, opts.kafka_config).cleanup_policy)
        except ValueError as exc:
            raise UsageError(f"--topic-config, topic {topic}: {exc}") from None
    return opts


def _check_policy(policy: tuple[str, ...]) -> None:
    """Kafka's `ValidList.in("compact", "delete")` for cleanup.policy."""
    bad = [p for p in policy if p not in ("compact", "delete")]
    if bad or not policy:
        raise ValueError(f"cleanup.policy={','.join(policy)} is not compact, delete or compact,delete")


def _flag_of(exc: ValueError) -> str:
    """The flag whose Kafka config name an error message starts with, as a prefix for it."""
    text = str(exc)
    for flag, name, _, _ in KAFKA_FLAGS:
        if name in text:
            return f"{flag}: "
    return ""


def parse_unchecked(argv: list[str] | None, prog: str = "spark-submit.sh") -> JobOptions:
    """The options as given (argparse's own errors, e.g. an unknown flag, exit 2 here)."""
    args = build_parser(prog).parse_args(argv)
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
        topic_config=_topic_config_file(args.topic_config) if args.topic_config else {},
        tasks_per_core=args.tasks_per_core,
        read_mode=args.read_mode,
        write_mode=args.write_mode,
        log_format=args.log_format,
        metrics_file=args.metrics_file,
    )


def _topic_config_file(path: str) -> dict[str, dict[str, object]]:
    try:
        return load_topic_config(path)
    except OSError as exc:
        raise UsageError(f"--topic-config {path}: {exc.strerror or exc}") from None
    except (ValueError, TypeError, AttributeError) as exc:
        raise UsageError(f"--topic-config {path}: {exc}") from None


def load_topic_config(path: str) -> dict[str, dict[str, object]]:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if path.endswith(".json"):
        data = json.loads(text)
        if not isinstance(data, dict) or not all(isinstance(c, dict) for c in data.values()):
            raise ValueError('expected a JSON object {"<topic>": {"<kafka config>": value}}')
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
