"""Offset checkpoint files (format/checkpoint.py) read and written through a `Storage`.

Durability: `write_checkpoint` writes `<file>.tmp`, fsyncs, renames over the file and fsyncs the
dir (`CheckpointFile.write` + `Utils.atomicMoveWithFallback`) through `Storage.write_atomic`.
"""

from __future__ import annotations

from collections.abc import Mapping

from compaction.format.checkpoint import TopicPartition, format_offset_checkpoint, parse_offset_checkpoint
from compaction.runtime.faults import crash_point
from compaction.runtime.storage import Storage


def read_checkpoint(storage: Storage, path: str) -> dict[TopicPartition, int]:
    """Read an offset checkpoint; a missing file is an empty checkpoint (the broker creates it empty)."""
    if not storage.exists(path):
        return {}
    return parse_offset_checkpoint(storage.read_bytes(path), path)


def write_checkpoint(storage: Storage, path: str, entries: Mapping[TopicPartition, int]) -> None:
    """Replace an offset checkpoint atomically and durably (tmp + fsync + rename + dir fsync)."""
    crash_point("checkpoint")
    storage.write_atomic(path, format_offset_checkpoint(entries).encode("utf-8"))
    crash_point("checkpointed")
