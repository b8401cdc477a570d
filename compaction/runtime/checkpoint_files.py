"""Offset checkpoint files (format/checkpoint.py) read and written through a `Storage`.

Durability: `write_checkpoint` writes `<file>.tmp`, fsyncs, renames over the file and fsyncs the
dir (`CheckpointFile.write` + `Utils.atomicMoveWithFallback`) through `Storage.write_atomic`.
"""

from __future__ import annotations

from collections.abc import Mapping

from compaction.errors import CheckpointError, FileTooLargeError
from compaction.format.checkpoint import (
    CHECKPOINT_MAX_BYTES,
    TopicPartition,
    format_offset_checkpoint,
    parse_offset_checkpoint,
)
from compaction.runtime.faults import crash_point
from compaction.runtime.storage import Bound, Storage

CHECKPOINT_FILE = Bound(CHECKPOINT_MAX_BYTES, "a checkpoint file may hold here (CHECKPOINT_MAX_BYTES)")


def read_checkpoint(storage: Storage, path: str) -> dict[TopicPartition, int]:
    """Read an offset checkpoint; a missing file is an empty checkpoint (the broker creates it empty)."""
    if not storage.exists(path):
        return {}
    try:
        data = read_checkpoint_bytes(storage, path)
    except FileTooLargeError as exc:  # a malformed checkpoint, as far as the round is concerned
        raise CheckpointError(exc.message, path=path, position=exc.position) from exc
    except OSError as exc:  # a directory, a pipe, a failing disk: the broker takes the dir offline
        raise CheckpointError(f"cannot read: {exc.strerror or exc}", path=path) from exc
    return parse_offset_checkpoint(data, path)


def read_checkpoint_bytes(storage: Storage, path: str) -> bytes:
    """A checkpoint file's bytes (any of them, `leader-epoch-checkpoint` too), refused unread when
    longer than `CHECKPOINT_MAX_BYTES` (`FileTooLargeError`)."""
    return storage.read_small(path, bound=CHECKPOINT_FILE)


def write_checkpoint(storage: Storage, path: str, entries: Mapping[TopicPartition, int]) -> None:
    """Replace an offset checkpoint atomically and durably (tmp + fsync + rename + dir fsync)."""
    crash_point("checkpoint")
    storage.write_atomic(path, format_offset_checkpoint(entries).encode("utf-8"))
    crash_point("checkpointed")
