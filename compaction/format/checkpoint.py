"""Checkpoint files (docs/kafka-rules.md#checkpoints): `cleaner-offset-checkpoint` and its siblings,
`leader-epoch-checkpoint`.

Source: `server-common/.../CheckpointFile.java` (`CheckpointWriteBuffer`, `CheckpointReadBuffer`),
`storage/.../checkpoint/OffsetCheckpointFile.java`, `LeaderEpochCheckpointFile.java`.

Wire format (UTF-8 text, `\\n` line ends as written on Linux):

    | line      | content                         | meaning                                  |
    |-----------|---------------------------------|------------------------------------------|
    | 1         | version (int)                   | 0 for every file handled here            |
    | 2         | entry count N (int)             | must equal the number of entry lines     |
    | 3 .. N+2  | entry                           | see below                                |

    offset checkpoints (per log dir: cleaner-offset-checkpoint, recovery-point-offset-checkpoint,
    log-start-offset-checkpoint, replication-offset-checkpoint):
        `<topic> <partition> <offset>`   topic string, partition int32 >= 0, offset int64
    leader-epoch-checkpoint (per partition dir):
        `<epoch> <startOffset>`          epoch int32, start offset int64

Reading mirrors `CheckpointReadBuffer.read`: an empty file is an empty checkpoint; the version must
be the expected one; every line after the count is an entry (a blank trailing line is a malformed
entry, not ignored); entry fields are split on runs of whitespace (Java `\\s+`); the number of
entries must equal the count. The broker turns any of these failures into an offline log dir, so
we refuse them with a `CheckpointError` naming the file and the line instead of guessing.

Where we are stricter than the broker (it never writes these, so nothing real is refused):
numbers must be plain ASCII decimal (Java's parseInt also accepts "+5"; we accept that too, but
not Python's "5_0" or non-ASCII digits), and a negative partition is refused.
Duplicate `(topic, partition)` lines are accepted, last one wins, like the broker's `toMap`.
A file over `CHECKPOINT_MAX_BYTES` is refused unread (the broker sets no bound: its reader holds
any length the file has).

Read and written through a `Storage` by `runtime/checkpoint_files.py`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from compaction.errors import CheckpointError

OFFSET_CHECKPOINT_VERSION = 0  # OffsetCheckpointFile.CURRENT_VERSION
LEADER_EPOCH_CHECKPOINT_VERSION = 0  # LeaderEpochCheckpointFile.CURRENT_VERSION

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
OFFSET_CHECKPOINT_NAMES = (
    CLEANER_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# An entry line is at most ~282 bytes (a topic name of 249 characters, an int32, an int64): 64 MiB
# holds a log dir of over 200,000 such partitions, or millions of leader epochs.
CHECKPOINT_MAX_BYTES = 64 << 20

# Java's BufferedReader.readLine ends a line at \n, \r or \r\n (not at the other characters
# str.splitlines knows about).
_LINE_END = re.compile(r"\r\n|\r|\n")
# Java's \s: space, \t, \n, \x0B, \f, \r (str.split() would also split on Unicode spaces).
_JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")
_JAVA_INT = re.compile(r"[+-]?[0-9]+")

TopicPartition = tuple[str, int]
E = TypeVar("E")


def _lines(text: str) -> list[str]:
    """Lines as BufferedReader.readLine returns them: a final line end does not start a new line."""
    if not text:
        return []
    lines = _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def _parse_int(field: str, low: int, high: int, what: str, path: str, line: int) -> int:
    if not _JAVA_INT.fullmatch(field):
        raise CheckpointError(f"{what} {field!r} is not an integer", path=path, line=line)
    value = int(field)
    if not low <= value <= high:
        raise CheckpointError(f"{what} {value} is out of range [{low}, {high}]", path=path, line=line)
    return value


def _split_fields(text: str, count: int, shape: str, path: str, line: int) -> list[str]:
    # Java's String.split drops trailing empty strings but keeps a leading one.
    fields = _JAVA_WHITESPACE.split(text)
    while fields and fields[-1] == "":
        fields.pop()
    if len(fields) != count:
        raise CheckpointError(
            f"malformed entry {text!r}: expected {count} fields `{shape}`, got {len(fields)}",
            path=path,
            line=line,
        )
    return fields


def _to_text(data: str | bytes, path: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointError(f"not UTF-8 text at byte {err.start}", path=path) from None


def parse_checkpoint(
    data: str | bytes,
    path: str,
    version: int,
    parse_entry: Callable[[str, str, int], E],
) -> list[E]:
    """Generic `CheckpointReadBuffer.read`. `parse_entry(line_text, path, line_number)`."""
    lines = _lines(_to_text(data, path))
    if not lines:
        return []
    found_version = _parse_int(lines[0], INT32_MIN, INT32_MAX, "version", path, 1)
    if found_version != version:
        raise CheckpointError(f"unrecognized version {found_version}, expected {version}", path=path, line=1)
    if len(lines) < 2:
        raise CheckpointError("missing entry count line", path=path, line=2)
    count = _parse_int(lines[1], INT32_MIN, INT32_MAX, "entry count", path, 2)
    entries = [parse_entry(text, path, number) for number, text in enumerate(lines[2:], start=3)]
    if len(entries) != count:
        # Point at the first line that should not be there, or just past the last line.
        line = 3 + count if len(entries) > count >= 0 else 3 + len(entries)
        raise CheckpointError(f"expected {count} entries but found {len(entries)}", path=path, line=line)
    return entries


def format_checkpoint(version: int, entry_lines: Iterable[str]) -> str:
    lines = list(entry_lines)
    return "".join(f"{line}\n" for line in [str(version), str(len(lines)), *lines])


# --- offset checkpoints: `topic partition offset` -------------------------------------------


def _parse_offset_entry(text: str, path: str, line: int) -> tuple[TopicPartition, int]:
    topic, partition, offset = _split_fields(text, 3, "topic partition offset", path, line)
    if not topic:  # a line starting with whitespace: Java's split yields an empty first field
        raise CheckpointError(f"malformed entry {text!r}: empty topic", path=path, line=line)
    return (
        (topic, _parse_int(partition, 0, INT32_MAX, "partition", path, line)),
        _parse_int(offset, INT64_MIN, INT64_MAX, "offset", path, line),
    )


def parse_offset_checkpoint(data: str | bytes, path: str = "<memory>") -> dict[TopicPartition, int]:
    """Parse any of the four per-log-dir offset checkpoints into `{(topic, partition): offset}`."""
    return dict(parse_checkpoint(data, path, OFFSET_CHECKPOINT_VERSION, _parse_offset_entry))


def format_offset_checkpoint(entries: Mapping[TopicPartition, int]) -> str:
    """The exact file content, entries sorted by (topic, partition) so output is deterministic."""
    for (topic, partition), offset in entries.items():
        if not topic or _JAVA_WHITESPACE.search(topic):
            raise ValueError(f"topic {topic!r} cannot be written to a checkpoint")
        if not 0 <= partition <= INT32_MAX or not INT64_MIN <= offset <= INT64_MAX:
            raise ValueError(f"entry {(topic, partition, offset)} is out of range")
    lines = (f"{topic} {partition} {entries[(topic, partition)]}" for topic, partition in sorted(entries))
    return format_checkpoint(OFFSET_CHECKPOINT_VERSION, lines)


# --- leader-epoch-checkpoint: `epoch startOffset` -------------------------------------------


def _parse_epoch_entry(text: str, path: str, line: int) -> tuple[int, int]:
    epoch, start_offset = _split_fields(text, 2, "epoch startOffset", path, line)
    return (
        _parse_int(epoch, INT32_MIN, INT32_MAX, "epoch", path, line),
        _parse_int(start_offset, INT64_MIN, INT64_MAX, "start offset", path, line),
    )


def parse_leader_epoch_checkpoint(data: str | bytes, path: str = "<memory>") -> list[tuple[int, int]]:
    """`[(epoch, start_offset), ...]` in file order (the order is meaningful: ascending epochs)."""
    return parse_checkpoint(data, path, LEADER_EPOCH_CHECKPOINT_VERSION, _parse_epoch_entry)


def format_leader_epoch_checkpoint(entries: Iterable[tuple[int, int]]) -> str:
    return format_checkpoint(LEADER_EPOCH_CHECKPOINT_VERSION, (f"{e} {o}" for e, o in entries))
