"""Segment and partition-dir names (docs/kafka-rules.md#file-names, LogFileUtils,
UnifiedLog.parseTopicPartitionName)."""

import pytest

from compaction.errors import SegmentNameError
from compaction.format.naming import (
    SegmentFileName,
    is_segment_file_name,
    list_partition_segments,
    parse_partition_dir_name,
    parse_segment_file_name,
    segment_file_name,
)


@pytest.mark.parametrize(
    ("base", "suffix", "transient", "name"),
    [
        (0, ".log", None, "00000000000000000000.log"),
        (12345, ".index", None, "00000000000000012345.index"),
        (2**63 - 1, ".timeindex", None, "09223372036854775807.timeindex"),
        (7, ".txnindex", ".swap", "00000000000000000007.txnindex.swap"),
        (7, ".log", ".cleaned", "00000000000000000007.log.cleaned"),
        (7, ".snapshot", ".deleted", "00000000000000000007.snapshot.deleted"),
    ],
)
def test_segment_names_round_trip(base, suffix, transient, name):
    assert segment_file_name(base, suffix, transient) == name
    parsed = parse_segment_file_name(name)
    assert parsed == SegmentFileName(base, suffix, transient)
    assert parsed == (base, suffix, transient)  # a plain tuple too
    assert parsed.name == name


@pytest.mark.parametrize(
    "name",
    [
        "0000000000000000000.log",  # 19 digits
        "000000000000000000000.log",  # 21 digits
        "0000000000000000000a.log",
        "leader-epoch-checkpoint",
        "partition.metadata",
        "00000000000000000000-0000000000.checkpoint",  # KRaft snapshot
        "00000000000000000000.checkpoint",
        "00000000000000000000.log.tmp",
        "00000000000000000000",
        "00000000000000000000.",
        "99999999999999999999.log",  # > Long.MAX_VALUE
        "00000000000000000000.cleaned",  # transient suffix without a segment suffix
    ],
)
def test_bad_segment_names(name):
    with pytest.raises(SegmentNameError) as err:
        parse_segment_file_name(name)
    assert repr(name) in str(err.value)
    assert not is_segment_file_name(name)
    assert isinstance(err.value, ValueError)


def test_not_20_digits_message_is_clear():
    with pytest.raises(SegmentNameError, match="exactly 20 digits"):
        parse_segment_file_name("123.log")


@pytest.mark.parametrize(
    "bad", [(-1, ".log", None), (2**63, ".log", None), (0, ".foo", None), (0, ".log", ".bak")]
)
def test_segment_file_name_rejects(bad):
    with pytest.raises(SegmentNameError):
        segment_file_name(*bad)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("my.topic-12", ("my.topic", 12)),
        ("orders-0", ("orders", 0)),
        ("a-b-c-3", ("a-b-c", 3)),
        ("__consumer_offsets-49", ("__consumer_offsets", 49)),
        ("__cluster_metadata-0", ("__cluster_metadata", 0)),
        (
            "_confluent-controlcenter-5-1-2-1-error-topic-0",
            ("_confluent-controlcenter-5-1-2-1-error-topic", 0),
        ),
        ("t-2147483647", ("t", 2**31 - 1)),
        ("x" * 249 + "-1", ("x" * 249, 1)),
        # not partitions
        ("orders-0.0123456789abcdef0123456789abcdef-delete", None),
        ("orders-0.0123456789abcdef0123456789abcdef-future", None),
        ("orders-0.0123456789abcdef0123456789abcdef-stray", None),
        ("orders-0-delete", None),
        ("orders", None),
        ("orders-", None),
        ("-3", None),
        ("orders-x", None),
        ("orders--1", ("orders-", 1)),  # '-' is a legal topic character; partition after the last '-'
        ("orders-01", None),  # non-canonical, a broker never writes it
        ("orders-+1", None),
        ("orders-2147483648", None),
        ("or ders-1", None),
        ("orders/x-1", None),
        (".-1", None),
        ("..-1", None),
        ("x" * 250 + "-1", None),
        ("lost+found", None),
        ("bootstrap.checkpoint", None),
    ],
)
def test_partition_dir_names(name, expected):
    assert parse_partition_dir_name(name) == expected


def test_list_partition_segments_groups_by_base_offset():
    names = [
        "00000000000000000100.log",
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "00000000000000000100.index.swap",
        "00000000000000000100.log.swap",
        "00000000000000000050.snapshot",
        "leader-epoch-checkpoint",
        "partition.metadata",
    ]
    groups = list_partition_segments(names)
    assert list(groups) == [0, 50, 100]
    assert groups[0] == {
        ".log": "00000000000000000000.log",
        ".index": "00000000000000000000.index",
        ".timeindex": "00000000000000000000.timeindex",
    }
    assert groups[50] == {".snapshot": "00000000000000000050.snapshot"}
    assert groups[100] == {
        ".log": "00000000000000000100.log",
        ".index.swap": "00000000000000000100.index.swap",
        ".log.swap": "00000000000000000100.log.swap",
    }
