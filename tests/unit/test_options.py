"""Job options: Kafka config names, per-topic overrides and their precedence (no Spark)."""

import json

import pytest

from compaction.cli.options import parse_args, parse_topic_properties
from compaction.policy.topic_config import resolve_topic_config


def test_flags_are_kafka_config_names_and_unset_flags_stay_unset():
    opts = parse_args(["--log-dir", "/x", "--min-cleanable-dirty-ratio", "0.2", "--delete-retention-ms", "5"])
    assert opts.kafka_config == {"min.cleanable.dirty.ratio": 0.2, "delete.retention.ms": 5}
    assert opts.log_dirs == ["/x"]


def test_log_dir_is_repeatable_and_required():
    assert parse_args(["--log-dir", "a", "--log-dir", "b"]).log_dirs == ["a", "b"]
    with pytest.raises(SystemExit) as exc:
        parse_args([])
    assert exc.value.code == 2


def test_now_ms_defaults_to_the_wall_clock_and_can_be_pinned():
    assert parse_args(["--log-dir", "x", "--now-ms", "123"]).now_ms == 123
    assert parse_args(["--log-dir", "x"]).now_ms > 1_700_000_000_000


def test_topic_properties_handle_dotted_topic_names():
    text = "# comment\nmy.topic.cleanup.policy=delete\nmy.topic.delete.retention.ms = 10\nother.segment.bytes=2048\n"
    assert parse_topic_properties(text) == (
        {},
        {
            "my.topic": {"cleanup.policy": "delete", "delete.retention.ms": "10"},
            "other": {"segment.bytes": "2048"},
        },
    )


@pytest.mark.parametrize("line", ["no-equals-sign", "topic.unknown.config=1"])
def test_topic_properties_reject_what_they_cannot_read(line):
    with pytest.raises(ValueError, match="line 1"):
        parse_topic_properties(line)


def test_topic_override_beats_job_option_beats_kafka_default(tmp_path):
    path = tmp_path / "topics.json"
    path.write_text(json.dumps({"orders": {"delete.retention.ms": 7}}))
    opts = parse_args(["--log-dir", "x", "--delete-retention-ms", "99", "--topic-config", str(path)])
    orders = resolve_topic_config(opts.topic_config.get("orders"), opts.config_for("orders"))
    users = resolve_topic_config(opts.topic_config.get("users"), opts.config_for("users"))
    assert orders.delete_retention_ms == 7
    assert users.delete_retention_ms == 99
    assert users.segment_bytes == 1_073_741_824  # Kafka's default


def test_compact_delete_policy_is_compacted():
    assert resolve_topic_config({"cleanup.policy": "Compact, Delete"}).compact
    assert not resolve_topic_config({"cleanup.policy": "delete"}).compact


def test_report_entries_equal_asdict_and_do_not_share_lists():
    from dataclasses import asdict

    from compaction.steps import report as rpt

    r = rpt.PartitionResult(
        "t", 1, "/logs", status=rpt.CLEANED, dirtyRatio=0.75, bytesRead=10, recovery=["removed a.cleaned"]
    )
    built = rpt.build_report([r], {}, {}, 0)["partitions"]
    assert built == [asdict(r)]
    built[0]["recovery"].append("x")
    assert r.recovery == ["removed a.cleaned"]


@pytest.mark.parametrize(
    "total, cores, per_core, tasks",
    [
        (0, 2, 2, 2),  # nothing to split: still one per core (and at least one)
        (0, 0, 2, 1),
        (1 << 30, 2, 2, 2),
        (2 << 30, 2, 2, 2),  # 2 GiB: one task per core; a second wave would cost more than it balances
        ((2 << 30) + (100 << 20), 2, 2, 2),  # 2 GiB of segments and their active ones
        (3 << 30, 2, 2, 3),
        (4 << 30, 2, 2, 4),
        (100 << 30, 2, 2, 4),  # never more than tasks_per_core per core
        (100 << 30, 8, 1, 8),
        (3 << 30, 4, 2, 4),
    ],
)
def test_whole_partition_tasks_split_beyond_one_per_core_only_above_a_gib_each(total, cores, per_core, tasks):
    from compaction.steps.schedule import task_count

    assert task_count(total, cores, per_core) == tasks


def test_archive_options_parse():
    opts = parse_args(
        [
            "--log-dir",
            "a",
            "--output-dir",
            "out",
            "--as-of-time",
            "2025-11-27T10:00:00Z",
            "--as-of-offset",
            "orders:0=15,orders:1=7",
        ]
    )
    assert (opts.output_dir, opts.as_of_time_ms, opts.as_of_offsets) == (
        "out",
        1764237600000,
        {"orders:0": 15, "orders:1": 7},
    )
    assert not opts.now_ms_given and parse_args(["--log-dir", "a", "--now-ms", "5"]).now_ms_given


@pytest.mark.parametrize(
    "args, says",
    [
        (["--as-of-time", "5"], "need --output-dir"),
        (["--as-of-offset", "t:0=5"], "need --output-dir"),
        (["--output-dir", "o", "--as-of-time", "2025-11-27"], "--as-of-time: '2025-11-27' has no zone"),
        (
            ["--output-dir", "o", "--as-of-offset", "t=5"],
            "--as-of-offset: 't=5' is not TOPIC:PARTITION=OFFSET",
        ),
        (["--output-dir", "o", "--dry-run"], "cannot be combined with --output-dir"),
        (["--output-dir", "o", "--recover-only"], "cannot be combined with --output-dir"),
        (["--output-dir", "a/"], "is also a --log-dir"),
    ],
)
def test_archive_usage_errors(args, says, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--log-dir", "a", *args])
    assert exc.value.code == 2 and says in capsys.readouterr().err


# --- sizes, partitions, suggestions ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("0", 0),
        ("4096", 4096),
        ("1k", 1024),
        ("1kb", 1024),
        ("512m", 512 << 20),
        ("512M", 512 << 20),
        ("1g", 1 << 30),
        ("1GB", 1 << 30),
        ("2t", 2 << 40),
        ("1p", 1 << 50),
        ("1.5k", 1536),
        (" 7b ", 7),
    ],
)
def test_sizes_take_sparks_suffixes(text, value):
    from compaction.cli.options import byte_size

    assert byte_size(text) == value


@pytest.mark.parametrize("text", ["", "g", "1x", "1 gig", "-1g", "1e3", "0x10"])
def test_a_size_that_is_not_one_is_refused(text):
    import argparse

    from compaction.cli.options import byte_size

    with pytest.raises(argparse.ArgumentTypeError, match="512m, 1g"):
        byte_size(text)


def test_partitions_are_kafkas_partition_names():
    import argparse

    from compaction.cli.options import partition_names

    assert partition_names("orders-3, my.topic-7,") == ("orders-3", "my.topic-7")
    for bad in ("orders", "orders-x", "-3", "orders-03", ","):
        with pytest.raises(argparse.ArgumentTypeError, match="<topic>-<partition>"):
            partition_names(bad)


def test_a_mistyped_flag_names_the_closest_one():
    from compaction.cli.options import suggestion

    flags = ["--dry-run", "--plan-only", "--topics", "--partitions"]
    assert suggestion("unrecognized arguments: --dry-rn", flags) == "; did you mean --dry-run?"
    assert (
        suggestion("unrecognized arguments: x --partition=orders-1", flags) == "; did you mean --partitions?"
    )
    assert suggestion("unrecognized arguments: --zzzzzz", flags) == ""
    assert suggestion("argument --topics: expected one argument", flags) == ""


# --- the run's modes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag, field, default, modes",
    [
        ("--read-mode", "read_mode", "buffered", ("buffered", "direct", "mmap")),
        ("--write-mode", "write_mode", "direct", ("direct", "buffered")),
        ("--log-format", "log_format", "text", ("text", "json")),
    ],
)
def test_each_mode_flag_takes_its_modes_and_refuses_others_with_the_choices(
    flag, field, default, modes, capsys
):
    assert getattr(parse_args(["--log-dir", "a"]), field) == default
    for mode in modes:
        assert getattr(parse_args(["--log-dir", "a", flag, mode]), field) == mode
    with pytest.raises(SystemExit) as exc:
        parse_args(["--log-dir", "a", flag, "nope"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {flag}: invalid choice: 'nope' (choose from " in err
    assert all(m in err.split("choose from", 1)[1] for m in modes) and "--help" in err


def test_producer_id_expiration_defaults_to_kafkas_day(capsys):
    assert parse_args(["--log-dir", "/x"]).producer_id_expiration_ms == 86_400_000
    opts = parse_args(["--log-dir", "/x", "--producer-id-expiration-ms", "3600000"])
    assert opts.producer_id_expiration_ms == 3_600_000
    # beyond Kafka's INT: a value longer than any log's age, so that no producer expires
    never = parse_args(["--log-dir", "/x", "--producer-id-expiration-ms", str(2**63 - 1)])
    assert never.producer_id_expiration_ms == 2**63 - 1
    with pytest.raises(SystemExit) as exc:
        parse_args(["--log-dir", "/x", "--producer-id-expiration-ms", "0"])
    assert exc.value.code == 2
    assert "--producer-id-expiration-ms must be at least 1" in capsys.readouterr().err
