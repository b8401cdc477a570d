"""Kafka config names: which topic configs the job knows, their broker-level synonyms, and how a
broker resolves a topic's value from both (`LogConfig.fromProps` over `KafkaConfig`'s defaults).

A broker takes a topic's value from, in order: the topic's own override (`kafka-configs --alter
--entity-type topics`), the broker's synonym in `server.properties` (`log.cleaner.delete.retention.ms`
for `delete.retention.ms`, `log.segment.bytes` for `segment.bytes`, ...), then Kafka's default. The
job puts its command-line flags (topic-level names applied to every topic) between the two: a flag
says "this round, for all topics", which is what a broker-wide setting says, only more explicitly.

Names are checked: a name Kafka does not have in the cleaner's namespaces (topic configs and the
broker's `log.*` configs) is an error, so a typo never silently falls back to a default. Other broker
configs (`broker.id`, `listeners`, `num.io.threads`, ...) are read past: a user's whole
`server.properties` is accepted as it is.
"""

from __future__ import annotations

from collections.abc import Callable

from compaction.errors import ConfigError
from compaction.policy.topic_config import INT_MAX, excerpt, parse_config_value, parse_double, parse_int

# Topic-level name -> its broker-level synonym (docs/kafka-rules.md#configs; ServerTopicConfigSynonyms), for
# the configs the cleaner reads.
CLEANER_SYNONYMS = {
    "cleanup.policy": "log.cleanup.policy",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "max.message.bytes": "message.max.bytes",
}
BROKER_TO_TOPIC = {broker: topic for topic, broker in CLEANER_SYNONYMS.items()}

# The broker's cleaner I/O throttle (CleanerConfig): bytes read + written per second by all cleaner
# threads of a broker; here by all tasks of the job on one host (--io-max-bytes-per-second).
IO_MAX_BYTES_PER_SECOND = "log.cleaner.io.max.bytes.per.second"

# The broker's producer expiry (TransactionLogConfig, an INT of at least 1): a producer with no open
# transaction whose last batch is this old is dropped from producer state, and with it the last
# batch the cleaner keeps for it (docs/kafka-rules.md#producer-state).
PRODUCER_ID_EXPIRATION_MS = "producer.id.expiration.ms"

# Broker-wide configs that are not synonyms of a topic config: kept under their own names.
BROKER_WIDE = frozenset({IO_MAX_BYTES_PER_SECOND, PRODUCER_ID_EXPIRATION_MS})

# Every topic-level config of Kafka 2.x-4.x (TopicConfig). Those the cleaner does not read are accepted
# and ignored, as a broker's cleaner ignores them.
TOPIC_CONFIGS = frozenset(CLEANER_SYNONYMS) | {
    "compression.type",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.zstd.level",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "message.downconversion.enable",
    "message.format.version",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms",
    "message.timestamp.type",
    "min.insync.replicas",
    "preallocate",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.storage.enable",
    "retention.bytes",
    "retention.ms",
    "segment.jitter.ms",
    "segment.ms",
    "unclean.leader.election.enable",
}

# Every broker `log.*` config of Kafka 2.x-4.x (ServerLogConfigs, CleanerConfig). Those the cleaner
# does not read are accepted and ignored (log.cleaner.threads, dedupe buffer sizes: this job has its
# own parallelism and an exact offset map; log.cleaner.enable: running the job is the decision).
BROKER_LOG_CONFIGS = (
    frozenset(BROKER_TO_TOPIC)
    | {IO_MAX_BYTES_PER_SECOND}
    | {
        "log.dir",
        "log.dirs",
        "log.roll.ms",
        "log.roll.hours",
        "log.roll.jitter.ms",
        "log.roll.jitter.hours",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.retention.bytes",
        "log.retention.check.interval.ms",
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.backoff.ms",
        "log.cleaner.enable",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.flush.scheduler.interval.ms",
        "log.flush.offset.checkpoint.interval.ms",
        "log.flush.start.offset.checkpoint.interval.ms",
        "log.segment.delete.delay.ms",
        "log.preallocate",
        "log.message.format.version",
        "log.message.timestamp.type",
        "log.message.timestamp.difference.max.ms",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "log.message.downconversion.enable",
        "log.local.retention.ms",
        "log.local.retention.bytes",
        "log.initial.task.delay.ms",
        "log.dir.failure.timeout.ms",
    }
)


def split_job_config(
    entries: dict[str, object], source: str, where: dict[str, str] | None = None
) -> tuple[dict[str, object], dict[str, object]]:
    """A job-wide config (a `server.properties`, or topic-level names for every topic) split into
    (broker defaults, job-wide topic values), both keyed by topic-level names, every value the
    cleaner reads checked as Kafka checks it.

    `log.cleaner.io.max.bytes.per.second` and `producer.id.expiration.ms` are returned among the
    broker defaults under their own names.
    Raises `ConfigError` naming `source`, the entry's place in it (`where[name]`: " line 3", a
    JSON path) and the name, for an unknown cleaner-namespace name or a value Kafka refuses.
    """
    broker: dict[str, object] = {}
    job: dict[str, object] = {}
    for name, value in entries.items():
        at = f"{source}{(where or {}).get(name, '')}"
        if name in BROKER_TO_TOPIC:
            broker[BROKER_TO_TOPIC[name]] = checked_value(BROKER_TO_TOPIC[name], value, at, name)
        elif name == IO_MAX_BYTES_PER_SECOND:
            broker[name] = _check_rate(value, at)
        elif name == PRODUCER_ID_EXPIRATION_MS:
            try:
                broker[name] = parse_int(name, value, 1, INT_MAX)
            except ValueError as exc:
                raise ConfigError(f"{at}: {exc}") from None
        elif name in TOPIC_CONFIGS:
            job[name] = checked_value(name, value, at, name)
        elif name.startswith("log.") and name not in BROKER_LOG_CONFIGS:
            raise ConfigError(f"{at}: unknown Kafka config {excerpt(name)}{_did_you_mean(name)}")
        # any other name configures another part of a broker (listeners, replication, security)
    return broker, job


def checked_value(name: str, value: object, at: str, key: str) -> object:
    """`value` of the topic-level config `name`, written as `key` at `at` (file and place), as the
    file gave it; `ConfigError` saying where when Kafka would refuse it."""
    try:
        parse_config_value(name, value, key)
    except ValueError as exc:
        raise ConfigError(f"{at}: {exc}") from None
    return value


def _check_rate(value: object, at: str) -> object:
    """`log.cleaner.io.max.bytes.per.second`: Kafka's DOUBLE, and a rate is positive."""
    try:
        rate = parse_double(value, IO_MAX_BYTES_PER_SECOND)
    except ValueError as exc:
        raise ConfigError(f"{at}: {exc}") from None
    if not rate > 0:  # NaN too
        raise ConfigError(f"{at}: {IO_MAX_BYTES_PER_SECOND}={excerpt(value)} is not a positive rate")
    return value


def check_topic_config(
    topic: str, entries: dict[str, object], source: str, path: Callable[[str], str] | None = None
) -> None:
    """A topic's configs: known names, values Kafka takes. `path(name)` gives an entry's place
    (a JSON path)."""
    for name, value in entries.items():
        at = f"{source}{path(name) if path else ''}"
        if name not in TOPIC_CONFIGS:
            hint = _did_you_mean(name)
            raise ConfigError(f"{at}: topic {excerpt(topic)}: unknown topic config {excerpt(name)}{hint}")
        checked_value(name, value, at, name)


def _did_you_mean(name: str) -> str:
    import difflib

    if len(name) > 100:  # no config name is near
        return ""
    close = difflib.get_close_matches(name, sorted(TOPIC_CONFIGS | BROKER_LOG_CONFIGS), n=1, cutoff=0.8)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_properties(text: str, source: str) -> list[tuple[int, str, str]]:
    """`key=value` / `key: value` lines of a Java properties file (comments `#`/`!`, blank lines
    skipped) as (line number, key, value). Line continuations and escapes are not used by Kafka's
    config names or the values the cleaner reads, and are refused rather than misread."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0 or line.endswith("\\"):
            raise ConfigError(f"{source} line {lineno}: expected <name>=<value>: {excerpt(raw)}")
        out.append((lineno, line[:cut].strip(), line[cut + 1 :].strip()))
    return out
