"""Command-line options of the compaction job, named after Kafka's configs.

A flag is the Kafka topic config with dots turned into dashes (`min.cleanable.dirty.ratio` ->
`--min-cleanable-dirty-ratio`). Job-wide values apply to every topic; `--topic-config FILE`
(JSON `{"topic": {"kafka.config.name": value}}` or a `.properties` file with
`topic.kafka.config.name=value` lines) overrides them per topic, as `kafka-configs --alter
--entity-type topics` would on a broker.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import re
import sys
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

from compaction import __version__
from compaction.errors import ConfigError, UsageError
from compaction.format.erase_keys import KEY_FILE_FORMAT
from compaction.format.naming import parse_partition_dir_name
from compaction.policy.broker_config import (
    BROKER_TO_TOPIC,
    BROKER_WIDE,
    IO_MAX_BYTES_PER_SECOND,
    PRODUCER_ID_EXPIRATION_MS,
    TOPIC_CONFIGS,
    check_topic_config,
    checked_value,
    parse_properties,
    split_job_config,
)
from compaction.policy.cut import parse_as_of_offsets, parse_as_of_time
from compaction.policy.topic_config import excerpt, resolve_topic_config
from compaction.settings import (
    DIRECT_MIN_BYTES,
    LOG_FORMATS,
    MAX_INFLATED_BATCH_BYTES,
    READ_MODES,
    WRITE_MODES,
    JobOptions,
)
from compaction.settings import (
    PRODUCER_ID_EXPIRATION_MS as DEFAULT_PRODUCER_ID_EXPIRATION_MS,
)

LONG_MAX = 2**63 - 1

T = TypeVar("T")
M = TypeVar("M", bound=str)

# Spark's size suffixes (JavaUtils.byteStringAs): binary multiples, case-insensitive.
SIZE_SUFFIXES = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "p": 1 << 50,
    "pb": 1 << 50,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.I)


def byte_size(text: str) -> int:
    """`1g` -> 1073741824, `512m`, `64k`, `1048576`: a byte count as Spark writes one (an argparse
    type: a bad value is argparse's usage error)."""
    m = _SIZE.fullmatch(str(text))
    mult = SIZE_SUFFIXES.get(m.group(2).lower()) if m else None
    if m is None or mult is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size: a number of bytes, or with a suffix k, m, g, t (e.g. 512m, 1g)"
        )
    return int(float(m.group(1)) * mult) if "." in m.group(1) else int(m.group(1)) * mult


def config_size(text: str) -> int:
    """`byte_size` for a flag that sets a Kafka config: a plain integer, a negative one included,
    is taken as it is, so that the config's own range check names the config and its range."""
    try:
        return int(str(text).strip())
    except ValueError:
        return byte_size(text)


def byte_rate(text: str) -> float:
    """Bytes per second: a plain number (`1e6`, as Kafka's config takes it) or a size (`20m`)."""
    try:
        return float(text)
    except ValueError:
        return float(byte_size(text))


def partition_names(text: str) -> tuple[str, ...]:
    """`orders-3,orders-7` -> ('orders-3', 'orders-7'): partition dir names, as Kafka's tools print
    them."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if parse_partition_dir_name(n) is None]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"{(bad or [text])[0]!r} is not a partition: give <topic>-<partition> "
            "names, comma-separated (e.g. orders-3,orders-7)"
        )
    return names


# (flag, Kafka config name, type, default) - defaults are Kafka's (docs/kafka-rules.md#configs).
KAFKA_FLAGS = (
    ("--min-cleanable-dirty-ratio", "min.cleanable.dirty.ratio", float, 0.5),
    ("--segment-bytes", "segment.bytes", config_size, 1_073_741_824),
    ("--segment-index-bytes", "segment.index.bytes", config_size, 10_485_760),
    ("--index-interval-bytes", "index.interval.bytes", config_size, 4096),
    ("--delete-retention-ms", "delete.retention.ms", int, 86_400_000),
    ("--min-compaction-lag-ms", "min.compaction.lag.ms", int, 0),
    ("--max-compaction-lag-ms", "max.compaction.lag.ms", int, LONG_MAX),
    ("--max-message-bytes", "max.message.bytes", config_size, 1_048_588),
    ("--cleanup-policy", "cleanup.policy", str, "compact"),
)


# --- usage errors: one line, exit 2 ---------------------------------------------------------------


def suggestion(message: str, known: list[str]) -> str:
    """`; did you mean --dry-run?` for an unknown flag in argparse's `message`, or ''."""
    if not message.startswith("unrecognized arguments:"):
        return ""
    for arg in message.split(":", 1)[1].split():
        flag = arg.split("=", 1)[0]
        if flag.startswith("--"):
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
            if close:
                return f"; did you mean {close[0]}?"
    return ""


class SuggestingParser(argparse.ArgumentParser):
    """argparse, naming the closest known flag when one is mistyped (its sub-commands' too)."""

    def known_flags(self) -> list[str]:
        flags = [o for o in self._option_string_actions if o.startswith("--")]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    flags += [o for o in sub._option_string_actions if o.startswith("--")]
        return flags

    def error(self, message: str) -> NoReturn:
        super().error(message + suggestion(message, self.known_flags()))


class OneLineParser(SuggestingParser):
    """argparse, but a usage error is one line that names the fix (`--help`), exit code 2."""

    def error(self, message: str) -> NoReturn:
        message += suggestion(message, self.known_flags())
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


VERSION = f"kafka-offline-compaction {__version__}"


def build_parser(prog: str = "spark-submit.sh", epilog: str | None = None) -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=prog,
        description="Offline Kafka log compaction: one LogCleaner round over every eligible partition.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=VERSION)
    p.add_argument(
        "--log-dir",
        dest="log_dirs",
        action="append",
        required=True,
        help="a Kafka log dir (local path, file://, s3:// or s3a://; hdfs://, gs:// untested); repeatable",
    )
    p.add_argument(
        "--topics",
        help="regular expression of the topics to consider (full match); one that "
        "matches no topic is a usage error (exit 2) naming those found",
    )
    p.add_argument(
        "--partitions",
        type=partition_names,
        metavar="LIST",
        help="only these partitions, as <topic>-<partition> names, comma-separated (e.g. "
        "orders-3,orders-7: the ones a round reported failed); with --topics, both must match",
    )
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="a selection (--topics, --partitions) that matches no partition is fine: exit 0 "
        "instead of a usage error",
    )
    p.add_argument(
        "--now-ms",
        type=int,
        default=None,
        help="the clock of the round in epoch ms, for reproducible runs (default: wall clock)",
    )
    modes = p.add_mutually_exclusive_group()  # at most one mode: argparse refuses two (exit 2)
    modes.add_argument(
        "--dry-run",
        action="store_true",
        help="run the round's scan and decisions and report what it would free (exact: the "
        "bytes and records a round with the same options removes), write nothing",
    )
    modes.add_argument(
        "--plan-only",
        action="store_true",
        help="plan and report from the listing alone (no Spark: ratios, dirty bytes, the "
        "structure audit), write nothing",
    )
    modes.add_argument(
        "--recover-only",
        action="store_true",
        help="only finish or roll back interrupted swaps, like a broker's log loading",
    )
    p.add_argument("--report", help="write the JSON run report to this path")
    p.add_argument(
        "--report-html",
        metavar="PATH",
        help="write the run report as one self-contained HTML page to PATH (tables per partition "
        "and topic, a chart of log bytes before/after per topic; opens with no network)",
    )
    p.add_argument(
        "--ignore-broker-lock",
        action="store_true",
        help="clean even if a process holds the log dir's .lock (a live broker!)",
    )
    p.add_argument("--topic-config", help="per-topic Kafka configs: JSON or .properties file")
    p.add_argument(
        "--config",
        dest="config_file",
        metavar="FILE",
        help="a broker's server.properties (its log.cleaner.*, log.segment.bytes, ... are the "
        "defaults under the flags and --topic-config), or topic configs for every topic",
    )
    p.add_argument(
        "--io-max-bytes-per-second",
        type=byte_rate,
        default=None,
        metavar="RATE",
        help="Kafka's log.cleaner.io.max.bytes.per.second: bytes read + written per second by "
        "all the job's tasks on one host, e.g. 50m (default: unthrottled)",
    )
    p.add_argument(
        "--max-inflated-batch-bytes",
        type=byte_size,
        default=MAX_INFLATED_BATCH_BYTES,
        metavar="SIZE",
        help="the most bytes one compressed batch's records may inflate to; a batch beyond it "
        f"fails its partition (default {MAX_INFLATED_BATCH_BYTES}: 1 GiB)",
    )
    p.add_argument(
        "--producer-id-expiration-ms",
        type=int,
        default=None,
        metavar="MS",
        help="the broker's producer.id.expiration.ms: a producer idle that long before --now-ms (no "
        "open transaction) is expired, so its last batch is not kept for it, as on a broker "
        "(default: --config's producer.id.expiration.ms, else Kafka's "
        f"{DEFAULT_PRODUCER_ID_EXPIRATION_MS}: one day; a value beyond the log's age expires none)",
    )
    p.add_argument("--tasks-per-core", type=int, default=2, help="scan/rewrite tasks per core (default 2)")
    p.add_argument(
        "--read-mode",
        choices=READ_MODES,
        default="buffered",
        help="how executors read local segments: buffered (through the page cache with "
        "read-ahead; the rewrite finds what the scan read and drops it from the cache; "
        f"the default), direct (O_DIRECT for segments of {DIRECT_MIN_BYTES >> 20} MiB or more, "
        "bypassing the page cache: each segment read from the disk twice) or mmap "
        "(through the page cache without a copy, best when the segments are cached already)",
    )
    p.add_argument(
        "--write-mode",
        choices=WRITE_MODES,
        default="direct",
        help="how executors write cleaned segments on a local disk: direct (O_DIRECT from reused "
        "staging buffers, bypassing the page cache; the default, falls back where refused) or "
        "buffered (through the page cache)",
    )
    p.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="the driver's log lines: text, or json (one object a line, for log shippers)",
    )
    p.add_argument(
        "--metrics-file",
        metavar="PATH",
        help="write the round's totals and timings in Prometheus' text format to PATH, atomically "
        "(node_exporter's textfile collector: PATH ending in .prom in its "
        "directory); a dry run writes its own file beside it, PATH with .dry-run before "
        ".prom, and never touches the rounds' series",
    )
    p.add_argument(
        "--metrics-name",
        metavar="NAME",
        help="the value of the series' `round` label in --metrics-file (default: the log dirs' "
        "absolute URIs), so that rounds over other log dirs on the host write distinct series",
    )
    p.add_argument(
        "--erase-keys",
        metavar="FILE",  # a path or a URI (s3://...), read by the driver
        help="remove every record of the listed keys from every segment of the selected "
        "partitions, the active one included (" + KEY_FILE_FORMAT + ")",
    )
    p.add_argument(
        "--erase-only",
        action="store_true",
        help="with --erase-keys: erase only, no compaction (no dirty-ratio decision, the "
        "checkpoint untouched)",
    )
    p.add_argument(
        "--output-dir",
        metavar="URI",
        help="write a compacted copy of the selected partitions to this log dir (local or any "
        "store --log-dir takes), every segment cleaned, the last one included; the "
        "--log-dir sources are only read (docs/archives.md)",
    )
    p.add_argument(
        "--as-of-time",
        metavar="TIME",
        help="with --output-dir: each partition as its broker held it at TIME (ISO-8601 with a "
        "zone, or epoch ms): the log ends before the first batch stamped later",
    )
    p.add_argument(
        "--as-of-offset",
        metavar="TOPIC:PARTITION=OFFSET,...",
        help="with --output-dir: those partitions' logs end at OFFSET (exclusive, a log end "
        "offset: the batches whose last offset is below it)",
    )
    p.add_argument(
        "--purge-noncurrent-versions",
        action="store_true",
        help="on a versioned S3 bucket: after the round, delete the noncurrent versions (and delete "
        "markers) of the selected partitions' segment objects, what this round and earlier ones "
        "replaced, and nothing else, so that their space is freed and erased records are in no "
        "version; required with --erase-keys there",
    )
    for flag, name, typ, default in KAFKA_FLAGS:
        size = " (k, m, g suffixes as Spark's)" if typ in (byte_size, config_size) else ""
        p.add_argument(flag, type=typ, default=None, help=f"Kafka's {name} (default {default}){size}")
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
    regex, a Kafka config out of Kafka's range (job-wide, broker-wide or per topic). No file is
    touched."""
    if opts.topics is not None:
        try:
            re.compile(opts.topics)
        except re.error as exc:
            raise UsageError(
                f"--topics {opts.topics!r}: not a regular expression ({exc}); e.g. 'orders|payments'"
            ) from None
    if opts.tasks_per_core < 1:
        raise UsageError(f"--tasks-per-core {opts.tasks_per_core}: must be at least 1")
    if opts.now_ms < 0:
        raise UsageError(f"--now-ms {opts.now_ms}: must be epoch milliseconds (>= 0)")
    _check_erase(opts)
    _check_archive(opts)
    if opts.report_html and opts.report_html == opts.report:
        raise UsageError(
            "--report and --report-html name the same file; give the page its own path (e.g. report.html)"
        )
    try:
        _check_values(opts)
    except ConfigError as exc:
        raise UsageError(f"{_flag_of(exc)}{exc}") from None
    return opts


def _check_erase(opts: JobOptions) -> None:
    """--erase-keys: the file parses (a malformed line names the file, line and byte), and the
    combinations that cannot be right are refused."""
    if opts.erase_only and not opts.erase_keys:
        raise UsageError("--erase-only needs --erase-keys FILE")
    if not opts.erase_keys:
        return
    if opts.ignore_broker_lock:
        # Erasing rewrites the active segment, which a running broker appends to: never under one.
        raise UsageError(
            "--erase-keys cannot be combined with --ignore-broker-lock: erasing rewrites the "
            "active segment; stop the broker first"
        )
    from compaction.steps.erase import load_erase_set  # numpy, pyarrow: only when erasing

    load_erase_set(opts.erase_keys)


def _check_archive(opts: JobOptions) -> None:
    """--output-dir and the cut: the combinations that cannot be right."""
    if not opts.output_dir:
        if opts.as_of_time_ms is not None or opts.as_of_offsets:
            raise UsageError(
                "--as-of-time and --as-of-offset need --output-dir URI: a snapshot is written "
                "as a copy, never over its source"
            )
        return
    for flag, given in (
        ("--dry-run/--plan-only", opts.dry_run),
        ("--recover-only", opts.recover_only),
        ("--ignore-broker-lock", opts.ignore_broker_lock),
    ):
        if given:
            raise UsageError(
                f"{flag} cannot be combined with --output-dir (the sources are only read; "
                "run without --output-dir to plan a round in place)"
            )
    if opts.output_dir.rstrip("/") in (d.rstrip("/") for d in opts.log_dirs):
        raise UsageError(f"--output-dir {opts.output_dir} is also a --log-dir: the copy goes to a new place")


def _flag_of(exc: Exception) -> str:
    """The flag of a job-wide value an error names (the value came from the command line)."""
    text = str(exc)
    if text.startswith("topic "):
        return ""
    for flag, name, _, _ in KAFKA_FLAGS:
        if name in text:
            return f"{flag}: "
    return ""


def parse_unchecked(argv: list[str] | None, prog: str = "spark-submit.sh") -> JobOptions:
    """The options as given, config files read (argparse's own errors, e.g. an unknown flag, exit 2
    here; an unreadable or malformed config file is a `UsageError`)."""
    args = build_parser(prog).parse_args(argv)
    try:
        broker, job_file, topic_config = _config_files(args)
    except OSError as exc:
        raise UsageError(f"{exc.filename or ''}: {exc.strerror or exc}") from None
    except ValueError as exc:  # ConfigError, JSON syntax
        raise UsageError(str(exc)) from None
    kafka_config = job_file | {
        name: getattr(args, flag[2:].replace("-", "_"))
        for flag, name, _, _ in KAFKA_FLAGS
        if getattr(args, flag[2:].replace("-", "_")) is not None
    }
    io_max = args.io_max_bytes_per_second
    if io_max is None and IO_MAX_BYTES_PER_SECOND in broker:
        try:
            io_max = float(str(broker[IO_MAX_BYTES_PER_SECOND]).strip())
        except ValueError:
            raise UsageError(
                f"{IO_MAX_BYTES_PER_SECOND}={broker[IO_MAX_BYTES_PER_SECOND]!r} is not a number"
            ) from None
    if io_max is not None and io_max <= 0:
        raise UsageError(f"the I/O limit must be positive bytes per second, not {io_max}")
    as_of_time = _parsed("--as-of-time", parse_as_of_time, args.as_of_time)
    as_of = _parsed("--as-of-offset", parse_as_of_offsets, args.as_of_offset) or {}
    if args.producer_id_expiration_ms is not None and args.producer_id_expiration_ms < 1:
        raise UsageError(
            f"--producer-id-expiration-ms must be at least 1, not {args.producer_id_expiration_ms}"
        )
    expiration = args.producer_id_expiration_ms
    if expiration is None:
        expiration = int(str(broker.get(PRODUCER_ID_EXPIRATION_MS, DEFAULT_PRODUCER_ID_EXPIRATION_MS)))
    if args.max_inflated_batch_bytes <= 0:
        raise UsageError(f"--max-inflated-batch-bytes must be positive, not {args.max_inflated_batch_bytes}")
    return JobOptions(
        log_dirs=args.log_dirs,
        topics=args.topics,
        now_ms=args.now_ms if args.now_ms is not None else int(time.time() * 1000),
        now_ms_given=args.now_ms is not None,
        dry_run=args.dry_run or args.plan_only,
        plan_only=args.plan_only,
        recover_only=args.recover_only,
        report=args.report,
        report_html=args.report_html,
        ignore_broker_lock=args.ignore_broker_lock,
        kafka_config=kafka_config,
        topic_config=topic_config,
        tasks_per_core=args.tasks_per_core,
        read_mode=_one_of(READ_MODES, args.read_mode),
        write_mode=_one_of(WRITE_MODES, args.write_mode),
        broker_config={k: v for k, v in broker.items() if k not in BROKER_WIDE},
        io_max_bytes_per_second=io_max if io_max is not None and io_max < 1.7e308 else None,  # Double.MAX
        log_format=_one_of(LOG_FORMATS, args.log_format),
        metrics_file=args.metrics_file,
        erase_keys=args.erase_keys,
        erase_only=args.erase_only,
        max_inflated_batch_bytes=args.max_inflated_batch_bytes,
        producer_id_expiration_ms=expiration,
        output_dir=args.output_dir,
        as_of_time_ms=as_of_time,
        as_of_offsets={f"{t}:{p}": o for (t, p), o in as_of.items()},
        purge_noncurrent_versions=args.purge_noncurrent_versions,
        partitions=args.partitions,
        allow_empty=args.allow_empty,
        metrics_name=args.metrics_name,
    )


def _one_of(modes: tuple[M, ...], value: str) -> M:
    """`value` as the mode of `modes` it names, typed as that mode (argparse's `choices` refused
    any other with its own message)."""
    return modes[modes.index(value)]


def _parsed(flag: str, parse: Callable[[str], T], text: str | None) -> T | None:
    try:
        return None if text is None else parse(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


# --- config files: --config (broker-wide) and --topic-config (per topic) ---------------------------


def _config_files(
    args: argparse.Namespace,
) -> tuple[dict[str, object], dict[str, object], dict[str, dict[str, object]]]:
    """(broker defaults, job-wide topic values, per-topic overrides) from --config and --topic-config."""
    broker: dict[str, object] = {}
    job: dict[str, object] = {}
    if args.config_file:
        path = args.config_file
        text = _read_text(path)
        if path.endswith(".json"):
            entries = _load_json_object(path, text)
            nested = next((k for k, v in entries.items() if isinstance(v, dict)), None)
            if nested is not None:
                raise ConfigError(
                    f"{path} at {_json_path(nested)}: {excerpt(nested)} holds an object: "
                    "per-topic configs go in --topic-config"
                )
            where = {k: f" at {_json_path(k)}" for k in entries}
        else:
            lines = parse_properties(text, path)
            entries = {key: value for _, key, value in lines}
            where = {key: f" line {lineno}" for lineno, key, _ in lines}
        broker, job = split_job_config(entries, path, where)
    topics: dict[str, dict[str, object]] = {}
    if args.topic_config:
        topic_broker, topics = load_topic_config(args.topic_config)
        broker = {**broker, **topic_broker}
    return broker, job, topics


def _read_text(path: str) -> str:
    """A config file's text: UTF-8, as Kafka reads its properties files since Java 9."""
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path} line {line}: not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r})"
        ) from None


def _load_json_object(path: str, text: str) -> dict:
    """The JSON object of a config file; `ConfigError` with the line and column of a syntax error."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} line {exc.lineno} column {exc.colno}: not JSON: {exc.msg}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not a config: JSON nested too deep") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise ConfigError(f"{path}: not JSON: {excerpt(str(exc))}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, not {type(data).__name__}")
    return data


def _json_path(*keys: str) -> str:
    """A JSONPath of an entry, e.g. `$["orders"]["segment.bytes"]` (names quoted as JSON, cut)."""
    return "$" + "".join(f"[{_quoted_key(k)}]" for k in keys)


def _quoted_key(key: str) -> str:
    text = json.dumps(key)
    return text if len(text) <= 80 else text[:80] + f"...({len(key)} characters)"


def _entry_at(topic: str, name: str) -> str:
    return f" at {_json_path(topic, name)}"


def load_topic_config(path: str) -> tuple[dict[str, object], dict[str, dict[str, object]]]:
    """(broker defaults, per-topic overrides) of a --topic-config file.

    Per-topic entries are topic-level names; an entry that is a whole broker-level name (a JSON
    top-level key with a plain value, or a `.properties` line `log.cleaner.delete.retention.ms=...`)
    is a broker default for every topic.
    """
    text = _read_text(path)
    if not path.endswith(".json"):
        return parse_topic_properties(text, path)
    data = _load_json_object(path, text)
    broker_entries = {k: v for k, v in data.items() if not isinstance(v, dict)}
    unknown = set(broker_entries) - set(BROKER_TO_TOPIC) - BROKER_WIDE
    if unknown:
        name = next(k for k in broker_entries if k in unknown)
        raise ConfigError(
            f"{path} at {_json_path(name)}: {excerpt(name)} is neither a topic (an object of "
            "configs) nor a broker config"
        )
    broker, _ = split_job_config(broker_entries, path, {k: f" at {_json_path(k)}" for k in broker_entries})
    topics = {topic: dict(cfg) for topic, cfg in data.items() if isinstance(cfg, dict)}
    for topic, cfg in topics.items():
        check_topic_config(topic, cfg, path, functools.partial(_entry_at, topic))
    return broker, topics


def parse_topic_properties(
    text: str,
    source: str = "topic config",
) -> tuple[dict[str, object], dict[str, dict[str, object]]]:
    """`orders.cleanup.policy=compact` -> ({}, {"orders": {"cleanup.policy": "compact"}}).

    Topic names may contain dots, so the config name is matched from Kafka's topic config names
    (longest first). A line whose whole key is a broker-level name (`log.segment.bytes=...`) is a
    broker default; a topic literally named `log` is then written in the JSON form.
    """
    names = sorted(TOPIC_CONFIGS, key=len, reverse=True)
    broker_entries: dict[str, object] = {}
    out: dict[str, dict[str, object]] = {}
    lines = parse_properties(text, source)
    for lineno, key, value in lines:
        if key in BROKER_TO_TOPIC or key in BROKER_WIDE:
            broker_entries[key] = value
            continue
        match = next((n for n in names if key.endswith("." + n)), None)
        if match is None:
            raise ConfigError(
                f"{source} line {lineno}: expected <topic>.<topic config>=<value> or a broker "
                f"config (log.cleaner.*, log.segment.bytes, ...): {excerpt(key)}"
            )
        out.setdefault(key[: -len(match) - 1], {})[match] = checked_value(
            match, value, f"{source} line {lineno}", key
        )
    broker, _ = split_job_config(broker_entries, source, {k: f" line {n}" for n, k, _ in lines})
    return broker, out


def _check_values(opts: JobOptions) -> None:
    """Resolve every configured topic (and the job-wide defaults) once, so a bad value is a usage
    error now, not a failure after Spark started."""
    for topic in [None, *opts.topic_config]:
        try:
            resolve_topic_config(
                opts.topic_config.get(topic) if topic else None,
                {"cleanup.policy": "compact", **opts.config_for(topic or "")},
            )
        except (ValueError, TypeError) as exc:
            where = f"topic {topic!r}: " if topic else ""
            raise ConfigError(f"{where}{exc}") from None
