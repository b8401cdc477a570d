"""compaction/settings.py: where each tunable comes from (command line > Spark conf > environment >
default), and the "Settings" table of docs/configuration.md lists every one of them."""

from __future__ import annotations

import os
import re
from types import SimpleNamespace

import pytest

from compaction.cli import launcher
from compaction.errors import UsageError
from compaction.settings import (
    CACHE_MAX_BYTES,
    COMPRESSION_CODECS,
    DIRECT_MIN_BYTES,
    PARTITION_TASK_MAX_BYTES,
    SCAN_REUSE_CODECS,
    SCAN_REUSE_MAX_BYTES,
    Settings,
    WorkerSettings,
    default_discovery_threads,
    knobs,
)

CONFIG_DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "configuration.md")
RATE = "KAFKA_COMPACTION_IO_MAX_BYTES_PER_SECOND"
CONF_RATE = "spark.executorEnv." + RATE
TASK_BYTES = "spark.kafka.compaction.partitionTaskMaxBytes"


def test_defaults_without_options_conf_or_environment():
    s = Settings.resolve(None, None, {})
    assert s == Settings()
    assert s.worker == WorkerSettings(
        SCAN_REUSE_MAX_BYTES, SCAN_REUSE_CODECS, CACHE_MAX_BYTES, DIRECT_MIN_BYTES, None, None, None
    )
    assert SCAN_REUSE_CODECS == {"gzip", "snappy", "lz4", "zstd"}
    assert (s.partition_task_max_bytes, s.exchange_dir, s.warmup) == (PARTITION_TASK_MAX_BYTES, None, True)
    assert (s.progress_seconds, s.discovery_threads, s.spark_master) == (5.0, None, None)
    assert s.threads == default_discovery_threads()


# (option, Spark conf, environment) -> the throttle's rate: the first one set wins, empty is unset
@pytest.mark.parametrize(
    "option, conf, env, expected",
    [
        (None, None, None, None),
        (None, None, "", None),
        (None, None, "7e6", 7e6),
        (None, "", "7e6", 7e6),
        (None, "3e6", "7e6", 3e6),
        (None, "3e6", None, 3e6),
        (1e6, "3e6", "7e6", 1e6),
        (1e6, None, None, 1e6),
    ],
)
def test_option_over_spark_conf_over_environment(option, conf, env, expected):
    args = SimpleNamespace(io_max_bytes_per_second=option)
    spark_conf = {} if conf is None else {CONF_RATE: conf}
    environ = {} if env is None else {RATE: env}
    assert Settings.resolve(args, spark_conf, environ).worker.io_max_bytes_per_second == expected


@pytest.mark.parametrize(
    "conf, env, expected",
    [
        (None, None, None),
        (None, "/mnt/a", "/mnt/a"),
        ("/mnt/b", "/mnt/a", "/mnt/b"),
        ("", "/mnt/a", "/mnt/a"),
    ],
)
def test_executor_env_conf_over_the_drivers_environment(conf, env, expected):
    name = "KAFKA_COMPACTION_IO_THROTTLE_FILE"
    spark_conf = {} if conf is None else {"spark.executorEnv." + name: conf}
    environ = {} if env is None else {name: env}
    assert Settings.resolve(None, spark_conf, environ).worker.io_throttle_file == expected


@pytest.mark.parametrize(
    "name, field, value, expected",
    [
        ("KAFKA_COMPACTION_SCAN_REUSE_MAX_BYTES", "scan_reuse_max_bytes", "0", 0),
        ("KAFKA_COMPACTION_SCAN_REUSE_CODECS", "scan_reuse_codecs", "gzip,zstd", {"gzip", "zstd"}),
        ("KAFKA_COMPACTION_CACHE_MAX_BYTES", "cache_max_bytes", "1024", 1024),
        ("KAFKA_COMPACTION_DIRECT_MIN_BYTES", "direct_min_bytes", "4096", 4096),
        ("KAFKA_COMPACTION_CODEC_THREADS", "codec_threads", "1", 1),
    ],
)
def test_the_executors_memory_and_disk_knobs_are_spark_confs_too(name, field, value, expected):
    """In cluster deploy mode the driver's environment is the cluster manager's: a `--conf` reaches
    it (and every executor) where an exported variable does not."""
    conf = Settings.resolve(None, {"spark.executorEnv." + name: value}, {name: "7"}).worker
    assert getattr(conf, field) == expected
    assert getattr(Settings.resolve(None, {}, {name: value}).worker, field) == expected


@pytest.mark.parametrize(
    "conf, expected",
    [(None, PARTITION_TASK_MAX_BYTES), ("", PARTITION_TASK_MAX_BYTES), ("0", 0), ("268435456", 1 << 28)],
)
def test_spark_conf_knobs(conf, expected):
    spark_conf = {} if conf is None else {TASK_BYTES: conf}
    assert Settings.resolve(None, spark_conf, {}).partition_task_max_bytes == expected


@pytest.mark.parametrize(
    "value, expected", [("false", False), ("FALSE", False), ("true", True), ("no", True)]
)
def test_only_false_turns_the_warm_up_off(value, expected):
    assert Settings.resolve(None, {"spark.kafka.compaction.warmup": value}, {}).warmup is expected


def test_spark_conf_knobs_keep_their_default_before_the_session_is_up():
    environ = {"KAFKA_COMPACTION_SCAN_REUSE_MAX_BYTES": "0", "KAFKA_COMPACTION_DISCOVERY_THREADS": "0"}
    early = Settings.resolve(None, None, environ)
    assert early.partition_task_max_bytes == PARTITION_TASK_MAX_BYTES
    assert early.worker.scan_reuse_max_bytes == 0 and early.threads == 1  # 0 threads: serial
    later = early.with_spark_conf({TASK_BYTES: "5", "spark.kafka.compaction.exchangeDir": "s3://b/x"})
    assert (later.partition_task_max_bytes, later.exchange_dir) == (5, "s3://b/x")
    assert later.worker == early.worker and later.threads == 1  # the environment as it was at the start


@pytest.mark.parametrize("submitted, expected", [(None, "spark://h:7077"), ("1", None)])
def test_spark_master_only_for_a_round_the_launcher_did_not_start(submitted, expected):
    environ = {"SPARK_MASTER": "spark://h:7077"}
    if submitted:
        environ["SPARK_HOME_SUBMITTED"] = submitted
    assert Settings.resolve(None, None, environ).spark_master == expected


def test_the_settings_name_the_codecs_as_the_codec_layer_does():
    """settings.py sits below format/ and cannot import its names: the two lists must agree."""
    from compaction.format.compression import CODEC_NAMES

    assert set(COMPRESSION_CODECS) == set(CODEC_NAMES.values()) - {"none"}


# KAFKA_COMPACTION_SCAN_REUSE_CODECS -> the codecs whose decompressed records a kept scan holds
@pytest.mark.parametrize(
    "text, expected",
    [
        ("gzip,zstd", {"gzip", "zstd"}),
        (" ZSTD , gzip ,", {"gzip", "zstd"}),
        ("lz4", {"lz4"}),
        ("none", set()),
        ("none,snappy", {"snappy"}),
        ("", SCAN_REUSE_CODECS),  # empty is unset
        ("gzip,brotli", UsageError),
        ("lz4;zstd", UsageError),
    ],
)
def test_the_codecs_whose_scans_are_kept(text, expected):
    environ = {"KAFKA_COMPACTION_SCAN_REUSE_CODECS": text}
    if expected is UsageError:
        with pytest.raises(UsageError, match=f"KAFKA_COMPACTION_SCAN_REUSE_CODECS={text!r}"):
            Settings.resolve(None, None, environ)
    else:
        assert Settings.resolve(None, None, environ).worker.scan_reuse_codecs == expected


def test_a_value_that_does_not_parse_names_its_source():
    with pytest.raises(UsageError, match="environment variable KAFKA_COMPACTION_DIRECT_MIN_BYTES='8M'"):
        Settings.resolve(None, None, {"KAFKA_COMPACTION_DIRECT_MIN_BYTES": "8M"})
    with pytest.raises(UsageError, match=f"--conf {TASK_BYTES}='1g'"):
        Settings.resolve(None, {TASK_BYTES: "1g"}, {})


def test_only_its_own_variables_are_kept():
    s = Settings.resolve(
        None, None, {"AWS_SECRET_ACCESS_KEY": "x", "KAFKA_COMPACTION_PROGRESS_SECONDS": "0.5"}
    )
    assert dict(s.environ) == {"KAFKA_COMPACTION_PROGRESS_SECONDS": "0.5"}
    assert s.progress_seconds == 0.5


def test_the_worker_settings_travel_with_a_task():
    import pickle

    w = Settings.resolve(None, {CONF_RATE: "1e6"}, {"KAFKA_COMPACTION_PROFILE_DIR": "/p"}).worker
    assert pickle.loads(pickle.dumps(w)) == w


# --- the Settings table ----------------------------------------------------------------------------


def _settings_table() -> dict[str, str]:
    """{first cell: the whole row} of the table in docs/configuration.md's "## Settings" section."""
    with open(CONFIG_DOC, encoding="utf-8") as fh:
        text = fh.read()
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and cells[0] not in ("name", "---"):
            rows[re.sub(r"`([^`]+)`.*", r"\1", cells[0])] = line
    return rows


def test_every_setting_is_in_the_settings_table_with_its_sources():
    rows = _settings_table()
    for name, f in knobs():
        assert name in rows, f"docs/configuration.md, ## Settings: no row for {name!r} ({f.metadata['doc']})"
        for source in ("option", "conf", "env"):
            if f.metadata[source]:
                assert f.metadata[source] in rows[name], (
                    f"docs/configuration.md, ## Settings, {name}: {f.metadata[source]}"
                )
    unknown = {n for n in rows if n.islower()} - {n for n, _ in knobs()}
    assert not unknown, f"docs/configuration.md, ## Settings lists what Settings does not hold: {unknown}"


def test_the_launchers_environment_is_in_the_readme_table():
    table = "\n".join(_settings_table().values())
    for name, _ in launcher.ENVIRONMENT:
        assert f"`{name}`" in table, name
    assert "`KAFKA_COMPACTION_PYTHON`" in table  # the Airflow operator's
