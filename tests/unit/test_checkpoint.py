"""Checkpoint files (docs/kafka-rules.md#checkpoints, CheckpointFile / OffsetCheckpointFile /
LeaderEpochCheckpointFile)."""

import glob
import os

import pytest
from e2ekit import SHARED_FIXTURES

from compaction.errors import CheckpointError
from compaction.format.checkpoint import (
    CHECKPOINT_MAX_BYTES,
    CLEANER_OFFSET_CHECKPOINT,
    OFFSET_CHECKPOINT_NAMES,
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
)
from compaction.runtime.checkpoint_files import read_checkpoint, write_checkpoint
from compaction.runtime.storage import Storage

FIXTURES = SHARED_FIXTURES


def test_spec_example():
    text = "0\n2\norders 0 1048576\norders 3 77\n"
    assert parse_offset_checkpoint(text) == {("orders", 0): 1048576, ("orders", 3): 77}
    assert format_offset_checkpoint({("orders", 3): 77, ("orders", 0): 1048576}) == text


def test_format_is_sorted_and_exact():
    entries = {("b", 1): 5, ("a.b-c", 10): 0, ("a.b-c", 2): 2**63 - 1}
    assert format_offset_checkpoint(entries) == "0\n3\na.b-c 2 9223372036854775807\na.b-c 10 0\nb 1 5\n"
    assert format_offset_checkpoint({}) == "0\n0\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),  # empty file -> empty map
        ("0\n0\n", {}),
        ("0\n0", {}),  # no final newline (BufferedReader accepts it)
        ("0\r\n1\r\nt 0 5\r\n", {("t", 0): 5}),  # \r\n line ends
        ("0\n1\nt\t0   5\n", {("t", 0): 5}),  # \s+ separators
        ("0\n1\nt 0 5 \n", {("t", 0): 5}),  # Java split drops trailing empty fields
        ("0\n1\nt 0 -1\n", {("t", 0): -1}),  # the broker parses negative offsets (Long.parseLong)
        ("0\n1\nt +3 +5\n", {("t", 3): 5}),  # Integer.parseInt accepts a leading '+'
        ("0\n2\nt 0 1\nt 0 2\n", {("t", 0): 2}),  # duplicate: last wins (toMap)
    ],
)
def test_parse_accepts(text, expected):
    assert parse_offset_checkpoint(text) == expected
    assert parse_offset_checkpoint(text.encode()) == expected


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("1\n0\n", 1, "unrecognized version 1"),
        ("x\n0\n", 1, "not an integer"),
        ("0 \n0\n", 1, "not an integer"),
        ("0\n", 2, "missing entry count"),
        ("0\nfour\n", 2, "not an integer"),
        ("0\n2\nt 0 1\n", 4, "expected 2 entries but found 1"),  # count larger than entries
        ("0\n1\nt 0 1\nt 1 1\n", 4, "expected 1 entries but found 2"),  # trailing entry
        ("0\n1\nt 0 1\ngarbage\n", 4, "expected 3 fields"),  # trailing garbage
        ("0\n1\nt 0 1\n\n", 4, "expected 3 fields"),  # trailing blank line is an entry line
        ("0\n1\nt 0\n", 3, "expected 3 fields"),
        ("0\n1\nt 0 1 2\n", 3, "expected 3 fields"),
        ("0\n1\n t 0 1\n", 3, "expected 3 fields"),  # leading blank -> empty first field
        ("0\n1\nt x 1\n", 3, "partition 'x' is not an integer"),
        ("0\n1\nt 0 1.5\n", 3, "offset '1.5' is not an integer"),
        ("0\n1\nt 0 1_0\n", 3, "not an integer"),  # Python-only syntax
        ("0\n1\nt 0 \u0661\n", 3, "not an integer"),  # non-ASCII digit
        ("0\n1\nt -1 5\n", 3, "partition -1 is out of range"),
        ("0\n1\nt 2147483648 5\n", 3, "partition 2147483648 is out of range"),
        ("0\n1\nt 0 9223372036854775808\n", 3, "out of range"),
        ("0\n-1\n", 3, "expected -1 entries"),
    ],
)
def test_parse_rejects_with_path_and_line(text, line, words):
    with pytest.raises(CheckpointError) as err:
        parse_offset_checkpoint(text, "/data/cleaner-offset-checkpoint")
    assert err.value.line == line
    assert err.value.path == "/data/cleaner-offset-checkpoint"
    message = str(err.value)
    assert message.startswith(f"/data/cleaner-offset-checkpoint: line {line}: ")
    assert words in message


def test_non_utf8_rejected():
    with pytest.raises(CheckpointError, match="not UTF-8"):
        parse_offset_checkpoint(b"0\n1\n\xff 0 1\n", "p")


def test_format_rejects_unwritable_entries():
    for bad in ({("a b", 0): 1}, {("", 0): 1}, {("t", -1): 1}, {("t", 0): 2**63}):
        with pytest.raises(ValueError):
            format_offset_checkpoint(bad)


def test_leader_epoch_checkpoint():
    text = "0\n3\n0 0\n2 150\n5 4000\n"
    entries = parse_leader_epoch_checkpoint(text)
    assert entries == [(0, 0), (2, 150), (5, 4000)]
    assert format_leader_epoch_checkpoint(entries) == text
    with pytest.raises(CheckpointError, match=r"line 3: .*expected 2 fields"):
        parse_leader_epoch_checkpoint("0\n1\n0 0 0\n", "lec")
    with pytest.raises(CheckpointError, match="line 1"):
        parse_leader_epoch_checkpoint("1\n0\n", "lec")


def _fixture_files(name):
    return sorted(glob.glob(f"{FIXTURES}/*/*/{name}")) + sorted(glob.glob(f"{FIXTURES}/*/*/*/{name}"))


@pytest.mark.parametrize("name", OFFSET_CHECKPOINT_NAMES)
def test_fixture_offset_checkpoints_parse_and_round_trip(name):
    paths = _fixture_files(name)
    assert paths, f"no {name} in the fixtures"
    for path in paths:
        with open(path, "rb") as f:
            raw = f.read()
        entries = parse_offset_checkpoint(raw, path)
        count = int(raw.split(b"\n")[1]) if raw else 0
        assert len(entries) == count, path
        # Same entries after our (sorted) formatting; the broker's order is a hash-map order.
        assert parse_offset_checkpoint(format_offset_checkpoint(entries)) == entries
        ours = format_offset_checkpoint(entries).splitlines()[2:]
        assert sorted(raw.decode().splitlines()[2:]) == sorted(ours)


def test_fixture_known_values():
    path = f"{FIXTURES}/kafka-0.9.0.1/kafka-logs/cleaner-offset-checkpoint"
    assert parse_offset_checkpoint(open(path, "rb").read(), path) == {("compacted", 0): 2964}
    path = f"{FIXTURES}/kafka-0.9.0.1/kafka-logs/recovery-point-offset-checkpoint"
    expected = {("plain", 0): 2000, ("compacted", 0): 3000}
    assert parse_offset_checkpoint(open(path, "rb").read(), path) == expected


def test_fixture_leader_epoch_checkpoints_parse():
    paths = glob.glob(f"{FIXTURES}/*/*/*/leader-epoch-checkpoint")
    assert len(paths) > 10
    for path in paths:
        entries = parse_leader_epoch_checkpoint(open(path, "rb").read(), path)
        assert [e for e, _ in entries] == sorted(e for e, _ in entries), path


def test_write_and_read_through_storage(tmp_path):
    storage = Storage.local()
    path = str(tmp_path / "cleaner-offset-checkpoint")
    assert read_checkpoint(storage, path) == {}  # missing file -> empty
    write_checkpoint(storage, path, {("t", 1): 10, ("t", 0): 7})
    assert open(path).read() == "0\n2\nt 0 7\nt 1 10\n"
    assert read_checkpoint(storage, path) == {("t", 0): 7, ("t", 1): 10}
    write_checkpoint(storage, path, {("t", 0): 8})
    assert read_checkpoint(storage, path) == {("t", 0): 8}
    assert sorted(os.listdir(tmp_path)) == ["cleaner-offset-checkpoint"]  # no .tmp left behind


def test_read_through_storage_names_the_file(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text("0\n1\nt 0 1\nextra\n")
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(Storage.local(), str(path))
    assert err.value.path == str(path) and err.value.line == 4


@pytest.mark.parametrize("size, refused", [(CHECKPOINT_MAX_BYTES, False), (CHECKPOINT_MAX_BYTES + 1, True)])
def test_a_checkpoint_longer_than_the_bound_is_refused_unread(tmp_path, size, refused):
    """At the bound the file is read and parsed (zeros: a malformed version line); past it it is
    refused before a byte is read, as a malformed checkpoint (the round writes nothing)."""
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    with open(path, "wb") as fh:
        fh.truncate(size)
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(Storage.local(), str(path))
    said = f"{path}: byte {CHECKPOINT_MAX_BYTES}: {size} bytes, more than the {CHECKPOINT_MAX_BYTES}"
    assert (said in str(err.value)) == refused, str(err.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["pipe", "directory"])
def test_a_checkpoint_that_is_no_regular_file_is_a_checkpoint_error_naming_it(tmp_path, kind):
    path = str(tmp_path / CLEANER_OFFSET_CHECKPOINT)
    os.mkfifo(path) if kind == "pipe" else os.mkdir(path)
    with pytest.raises(CheckpointError, match=f"{path}: cannot read: not a regular file"):
        read_checkpoint(Storage.local(), path)
