"""File and directory names of a Kafka log dir (docs/kafka-rules.md#file-names).

Source: `storage/.../log/LogFileUtils.java` (`filenamePrefixFromOffset`, `offsetFromFileName`),
`UnifiedLog.parseTopicPartitionName` / `LocalLog` (deleted, future and stray dir names).

Segment file name
-----------------

    <base offset, decimal, zero-padded to 20 digits><suffix>[<transient suffix>]

    | part              | values                                                      |
    |-------------------|-------------------------------------------------------------|
    | base offset       | 20 ASCII digits, 0 .. 2**63-1 (a Java long)                 |
    | suffix            | .log  .index  .timeindex  .txnindex  .snapshot              |
    | transient suffix  | .cleaned (cleaner output), .swap (being swapped in),        |
    |                   | .deleted (scheduled for async delete), or nothing           |

    e.g. `00000000000000012345.log`, `00000000000000000000.index.swap`.

Partition directory name
------------------------

    <topic>-<partition>          topic: [a-zA-Z0-9._-]{1,249}, partition: non-negative int32

The topic may itself contain `-` and `.`, so the partition is the text after the *last* `-`.
Directories ending in `-delete`, `-future` or `-stray` (`<topic>-<p>.<uuid>-delete`, ...) are
partitions being deleted / moved between log dirs / left over after a KRaft reassignment; they are
not live partitions and are never compacted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from compaction.errors import SegmentNameError

OFFSET_DIGITS = 20
MAX_OFFSET = 2**63 - 1  # a Java long
MAX_PARTITION = 2**31 - 1  # a Java int
MAX_TOPIC_LENGTH = 249  # org.apache.kafka.common.internals.Topic.MAX_NAME_LENGTH

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
# A segment's own files (`LogSegment`), which a replacement swaps; with the producer snapshot, every
# file named by a base offset.
SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
SEGMENT_SUFFIXES = (*SEGMENT_FILE_SUFFIXES, SNAPSHOT_SUFFIX)

# A partition dir's other files (with format/checkpoint.py's LEADER_EPOCH_CHECKPOINT): the
# broker's, and the intent of a commit of ours in progress (steps/commit.py).
PARTITION_METADATA = "partition.metadata"
COMMIT_INTENT_FILE = "compaction-commit.json"

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TRANSIENT_SUFFIXES = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
NON_PARTITION_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)

_DIGITS = re.compile(r"[0-9]{20}")
_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
# Canonical decimal only: the broker never writes "topic-01" or "topic-+1" (Integer.toString).
_PARTITION = re.compile(r"0|[1-9][0-9]*")


class SegmentFileName(NamedTuple):
    base_offset: int
    suffix: str  # one of SEGMENT_SUFFIXES
    transient: str | None  # one of TRANSIENT_SUFFIXES or None

    @property
    def name(self) -> str:
        return segment_file_name(self.base_offset, self.suffix, self.transient)


def offset_prefix(base_offset: int) -> str:
    """`LogFileUtils.filenamePrefixFromOffset`: 20-digit zero-padded decimal."""
    if not 0 <= base_offset <= MAX_OFFSET:
        raise SegmentNameError(f"base offset {base_offset} is not in [0, 2**63-1]")
    return f"{base_offset:0{OFFSET_DIGITS}d}"


def segment_file_name(base_offset: int, suffix: str = LOG_SUFFIX, transient: str | None = None) -> str:
    if suffix not in SEGMENT_SUFFIXES:
        raise SegmentNameError(f"unknown segment file suffix {suffix!r}")
    if transient is not None and transient not in TRANSIENT_SUFFIXES:
        raise SegmentNameError(f"unknown transient suffix {transient!r}")
    return offset_prefix(base_offset) + suffix + (transient or "")


def parse_segment_file_name(name: str) -> SegmentFileName:
    """Split `00000000000000000042.index.swap` into (42, '.index', '.swap').

    Stricter than `LogFileUtils.offsetFromFileName` (which parses any number before the first
    dot): the prefix must be exactly 20 digits, because anything else was not written by a
    broker and must not be mistaken for a segment.
    """
    prefix, dot, rest = name.partition(".")
    if not _DIGITS.fullmatch(prefix):
        raise SegmentNameError(
            f"{name!r} is not a segment file name: the part before the first '.' must be "
            f"exactly {OFFSET_DIGITS} digits, got {prefix!r}"
        )
    base_offset = int(prefix)
    if base_offset > MAX_OFFSET:
        raise SegmentNameError(f"{name!r}: base offset {base_offset} does not fit a Java long")
    ext = dot + rest
    transient = next((t for t in TRANSIENT_SUFFIXES if ext.endswith(t)), None)
    suffix = ext[: len(ext) - len(transient)] if transient else ext
    if suffix not in SEGMENT_SUFFIXES:
        raise SegmentNameError(
            f"{name!r}: unknown suffix {ext!r} (expected one of {', '.join(SEGMENT_SUFFIXES)}, "
            f"optionally followed by one of {', '.join(TRANSIENT_SUFFIXES)})"
        )
    return SegmentFileName(base_offset, suffix, transient)


def is_segment_file_name(name: str) -> bool:
    try:
        parse_segment_file_name(name)
    except SegmentNameError:
        return False
    return True


# KRaft's metadata log is trimmed by snapshots, never by the log cleaner.
INTERNAL_TOPICS_NOT_CLEANED = frozenset({"__cluster_metadata"})


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """`'my.topic-12'` -> `('my.topic', 12)`; None for anything that is not a live partition dir.

    None for: `-delete`/`-future`/`-stray` dirs, no `-`, an empty topic, a topic with characters
    Kafka does not allow, a topic named `.` or `..`, a non-canonical or out-of-range partition.
    """
    if name.endswith(NON_PARTITION_DIR_SUFFIXES):
        return None
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not _PARTITION.fullmatch(partition):
        return None
    if len(topic) > MAX_TOPIC_LENGTH or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        return None
    number = int(partition)
    if number > MAX_PARTITION:
        return None
    return topic, number


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def list_partition_segments(names: Iterable[str]) -> dict[int, dict[str, str]]:
    """Group a partition dir's file names by base offset (test-only: the job lists through Storage).

    Returns `{base_offset: {full_suffix: file_name}}` ordered by base offset, where `full_suffix`
    is e.g. `'.log'`, `'.index'`, `'.log.cleaned'`, `'.snapshot'`. Names that are not segment files
    (`leader-epoch-checkpoint`, `partition.metadata`, KRaft `*.checkpoint`, ...) are left out.
    """
    groups: dict[int, dict[str, str]] = {}
    for name in names:
        try:
            parsed = parse_segment_file_name(name)
        except SegmentNameError:
            continue
        groups.setdefault(parsed.base_offset, {})[parsed.suffix + (parsed.transient or "")] = name
    return {base: groups[base] for base in sorted(groups)}
