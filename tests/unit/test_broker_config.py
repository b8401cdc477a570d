"""Kafka's broker-level config names (a server.properties) as defaults under the topic-level ones,
resolved the way a broker resolves them; unknown names are a one-line usage error."""

import json

import pytest

from compaction.cli.options import parse_args
from compaction.policy.broker_config import BROKER_TO_TOPIC, CLEANER_SYNONYMS
from compaction.policy.topic_config import resolve_topic_config

SERVER_PROPERTIES = """\
# a broker's own file, as shipped with Kafka plus a few cleaner settings
broker.id=0
listeners=PLAINTEXT://localhost:9092
num.network.threads=3
log.dirs=/var/lib/kafka
log.retention.hours=168
log.cleaner.threads=4
log.cleaner.dedupe.buffer.size=268435456
log.cleaner.min.cleanable.ratio=0.2
log.cleaner.delete.retention.ms=1000
log.segment.bytes=4096
log.index.interval.bytes: 128
message.max.bytes=2000000
log.cleaner.io.max.bytes.per.second=5242880
producer.id.expiration.ms=3600000
"""


def resolved(opts, topic):
    return resolve_topic_config(
        opts.topic_config.get(topic), {"cleanup.policy": "compact", **opts.config_for(topic)}
    )


def test_server_properties_are_broker_defaults(tmp_path):
    (tmp_path / "server.properties").write_text(SERVER_PROPERTIES)
    opts = parse_args(["--log-dir", "x", "--config", str(tmp_path / "server.properties")])
    cfg = resolved(opts, "orders")
    assert cfg.min_cleanable_dirty_ratio == 0.2
    assert cfg.delete_retention_ms == 1000
    assert cfg.segment_bytes == 4096
    assert cfg.index_interval_bytes == 128
    assert cfg.max_message_bytes == 2_000_000
    assert cfg.min_compaction_lag_ms == 0  # not in the file: Kafka's default
    assert cfg.compact  # no log.cleanup.policy: the job's topics are compacted
    assert opts.io_max_bytes_per_second == 5242880.0
    assert opts.producer_id_expiration_ms == 3_600_000
    assert "producer.id.expiration.ms" not in opts.config_for("orders")


def test_topic_override_beats_flag_beats_broker_default_beats_kafka_default(tmp_path):
    (tmp_path / "server.properties").write_text(
        "log.cleaner.delete.retention.ms=1000\nlog.segment.bytes=4096\nlog.cleaner.min.compaction.lag.ms=5\n"
    )
    (tmp_path / "topics.json").write_text(json.dumps({"orders": {"delete.retention.ms": 7}}))
    opts = parse_args(
        [
            "--log-dir",
            "x",
            "--config",
            str(tmp_path / "server.properties"),
            "--topic-config",
            str(tmp_path / "topics.json"),
            "--segment-bytes",
            "8192",
        ]
    )
    orders, users = resolved(opts, "orders"), resolved(opts, "users")
    assert (orders.delete_retention_ms, users.delete_retention_ms) == (7, 1000)  # topic > broker
    assert orders.segment_bytes == users.segment_bytes == 8192  # flag > broker
    assert orders.min_compaction_lag_ms == 5  # broker > Kafka default
    assert orders.max_compaction_lag_ms == 2**63 - 1


def test_broker_cleanup_policy_applies_like_a_brokers(tmp_path):
    # A broker whose default policy is delete compacts only the topics whose own config says compact.
    (tmp_path / "server.properties").write_text("log.cleanup.policy=delete\n")
    (tmp_path / "topics.properties").write_text("orders.cleanup.policy=compact\n")
    opts = parse_args(
        [
            "--log-dir",
            "x",
            "--config",
            str(tmp_path / "server.properties"),
            "--topic-config",
            str(tmp_path / "topics.properties"),
        ]
    )
    assert resolved(opts, "orders").compact
    assert not resolved(opts, "users").compact


@pytest.mark.parametrize("topic_name, broker_name", sorted(CLEANER_SYNONYMS.items()))
def test_every_broker_synonym_in_topic_config_properties(tmp_path, topic_name, broker_name):
    value = {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.25"}.get(topic_name, "4096")
    (tmp_path / "t.properties").write_text(f"{broker_name}={value}\nmy.topic.retention.ms=1\n")
    opts = parse_args(["--log-dir", "x", "--topic-config", str(tmp_path / "t.properties")])
    assert opts.broker_config == {topic_name: value}
    assert opts.topic_config == {"my.topic": {"retention.ms": "1"}}  # known, not read by the cleaner
    assert BROKER_TO_TOPIC[broker_name] == topic_name


def test_broker_names_at_the_top_of_a_json_topic_config(tmp_path):
    (tmp_path / "t.json").write_text(
        json.dumps({"log.cleaner.delete.retention.ms": 5, "orders": {"segment.bytes": 9999}})
    )
    opts = parse_args(["--log-dir", "x", "--topic-config", str(tmp_path / "t.json")])
    assert resolved(opts, "users").delete_retention_ms == 5
    assert resolved(opts, "orders").segment_bytes == 9999


def test_flag_beats_the_files_io_limit(tmp_path):
    (tmp_path / "s.properties").write_text("log.cleaner.io.max.bytes.per.second=100\n")
    assert (
        parse_args(
            ["--log-dir", "x", "--config", str(tmp_path / "s.properties"), "--io-max-bytes-per-second", "2e6"]
        ).io_max_bytes_per_second
        == 2e6
    )
    (tmp_path / "s.properties").write_text("log.cleaner.io.max.bytes.per.second=1.7976931348623157E308\n")
    assert (
        parse_args(["--log-dir", "x", "--config", str(tmp_path / "s.properties")]).io_max_bytes_per_second
        is None
    )


def test_producer_id_expiration_flag_beats_the_broker_file_beats_kafkas_default(tmp_path):
    (tmp_path / "s.properties").write_text("broker.id=1\nproducer.id.expiration.ms=60000\n")
    (tmp_path / "t.json").write_text(json.dumps({"producer.id.expiration.ms": 120000}))
    (tmp_path / "bare.properties").write_text("broker.id=1\n")
    config = ["--log-dir", "x", "--config", str(tmp_path / "s.properties")]
    assert parse_args(config).producer_id_expiration_ms == 60_000
    assert parse_args([*config, "--producer-id-expiration-ms", "5"]).producer_id_expiration_ms == 5
    topic_config = ["--log-dir", "x", "--topic-config", str(tmp_path / "t.json")]
    assert parse_args(topic_config).producer_id_expiration_ms == 120_000
    bare = ["--log-dir", "x", "--config", str(tmp_path / "bare.properties")]
    assert parse_args(bare).producer_id_expiration_ms == 86_400_000


@pytest.mark.parametrize(
    "option, name, text, message",
    [
        (
            "--config",
            "s.properties",
            "log.cleaner.min.cleanable.dirty.ratio=0.1\n",
            "unknown Kafka config 'log.cleaner.min.cleanable.dirty.ratio'",
        ),
        ("--config", "s.properties", "log.segment.byte=10\n", "did you mean 'log.segment.bytes'"),
        ("--topic-config", "t.properties", "orders.delete.retention=1\n", "line 1: expected <topic>.<topic"),
        (
            "--topic-config",
            "t.json",
            '{"orders": {"delete.retension.ms": 1}}',
            "unknown topic config 'delete.re",
        ),
        ("--topic-config", "t.json", '{"retention": 1}', "'retention' is neither a topic"),
        ("--config", "s.properties", "log.cleaner.min.cleanable.ratio=2\n", "outside [0, 1]"),
        (
            "--config",
            "s.properties",
            "log.segment.bytes=big\n",
            "line 1: log.segment.bytes='big' is not an integer",
        ),
        (
            "--topic-config",
            "t.json",
            '{"orders": {"segment.bytes": 1}}',
            't.json at $["orders"]["segment.bytes"]: segment.bytes=1 is outside [14, 2147483647]',
        ),
        ("--config", "s.properties", "log.cleaner.io.max.bytes.per.second=fast\n", "is not a number"),
        (
            "--config",
            "s.properties",
            "broker.id=1\nproducer.id.expiration.ms=0\n",
            "s.properties line 2: producer.id.expiration.ms='0' is outside [1, 2147483647]",
        ),
        (
            "--config",
            "s.properties",
            "producer.id.expiration.ms=2147483648\n",
            "producer.id.expiration.ms='2147483648' is outside [1, 2147483647]",
        ),
        ("--config", "s.properties", "producer.id.expiration.ms=1d\n", "'1d' is not an integer"),
        ("--config", "missing.properties", None, "No such file"),
        ("--config", "s.json", '{"orders": {"segment.bytes": 1}}', "per-topic configs go in --topic-config"),
    ],
)
def test_bad_names_and_values_are_one_line_usage_errors(tmp_path, capsys, option, name, text, message):
    if text is not None:
        (tmp_path / name).write_text(text)
    with pytest.raises(SystemExit) as exc:
        parse_args(["--log-dir", "x", option, str(tmp_path / name)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and err.startswith("error: ")
