"""Typed errors: every error the package raises on purpose, all under `CompactionError`. Every
error about bytes names the file and the byte position in it.

Kafka's reader raises `CorruptRecordException` / `InvalidRecordException` with a message; we keep
the same distinctions but carry the path, the byte position and, where known, the offset, so the
run report can tell an operator exactly where a partition is damaged.

What fails one partition and what fails the round (`PARTITION_ERRORS`): a `CompactionError` (bad
input, a partition we will not touch) or an `OSError` of the storage fails its partition alone,
which is reported `failed` with the error's text and left as found. Any other exception is a bug:
it fails the round (exit 75), with its traceback in the log and the round's report written all
the same (`round.py`).

Not here: signals that are not failures, each beside the code that raises and catches it:
`exchange.PeerGone` (a task stops early, nothing failed), `kernels/cache.py` `CacheRejected` (an
archive of the kernel cache not used: a miss, `runtime/kernel_store.py`), `compression._OverLimit`
and `scan_reference._PyRecordError` (turned into typed errors where they are caught).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Unpack

# A run's exit codes (`round.main`): every partition done; some partition failed; a usage error,
# a held lock or a malformed checkpoint, nothing written; 75 (sysexits' EX_TEMPFAIL, "try again
# later"): the round itself failed. 75 is not one of Spark's own exit codes (0-3, 10-17, 50-58,
# 101, 124, 127), nor Python's (1) or a signal's (128+).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ROUND_FAILED = 0, 1, 2, 75


class Where(TypedDict, total=False):
    """Where a format error is: the keyword arguments every `KafkaFormatError` takes."""

    path: str
    position: int | None
    offset: int | None


class CompactionError(Exception):
    """Base of every error this package raises on purpose."""


class KafkaFormatError(CompactionError):
    """Bytes that do not follow Kafka's on-disk format."""

    def __init__(
        self,
        message: str,
        *,
        path: str = "<memory>",
        position: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.position = position
        self.offset = offset
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path if self.position is None else f"{self.path}: byte {self.position}"
        at_offset = "" if self.offset is None else f" (offset {self.offset})"
        return f"{where}: {self.message}{at_offset}"

    def __reduce__(
        self,
    ) -> tuple[Any, ...]:  # keep the attributes when the error crosses a process (Spark tasks)
        return (_rebuild, (type(self), self.message, self.path, self.position, self.offset, self.__dict__))


def _rebuild(
    cls: type[KafkaFormatError],
    message: str,
    path: str,
    position: int | None,
    offset: int | None,
    state: dict[str, Any],
) -> KafkaFormatError:
    err = cls.__new__(cls)
    KafkaFormatError.__init__(err, message, path=path, position=position, offset=offset)
    err.__dict__.update(state)
    return err


class CorruptRecordError(KafkaFormatError):
    """A malformed batch or record: bad size, bad magic, varints past the end, wrong record count."""


class CrcMismatchError(KafkaFormatError):
    """The stored checksum does not match the bytes."""

    def __init__(self, message: str, *, expected: int, actual: int, **where: Unpack[Where]) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(f"{message} (stored crc {expected}, computed {actual})", **where)


class TruncatedBatchError(KafkaFormatError):
    """A batch whose declared size runs past the end of the file (a partial trailing batch)."""

    def __init__(self, message: str, *, available: int, needed: int, **where: Unpack[Where]) -> None:
        self.available = available
        self.needed = needed
        super().__init__(f"{message} ({needed} bytes declared, {available} available)", **where)


class UnsupportedCodecError(KafkaFormatError):
    """A compression codec id Kafka does not define (or zstd in a legacy message)."""


class InflateLimitError(KafkaFormatError):
    """A compressed batch whose records inflate past the round's bound on one batch
    (`settings.MAX_INFLATED_BATCH_BYTES`): `codec` its codec's name, `limit` the bound."""

    def __init__(self, message: str, *, codec: str, limit: int, **where: Unpack[Where]) -> None:
        self.codec = codec
        self.limit = limit
        super().__init__(message, **where)


class FileTooLargeError(KafkaFormatError):
    """A file longer than the most its kind may hold (`limit`): a segment file or index past the
    int32 size a broker loads (`layout.FILE_MAX_BYTES`), a checkpoint past
    `checkpoint.CHECKPOINT_MAX_BYTES`. Refused before it is read: what a task holds never follows
    a length the input claims. `position` is the limit, the first byte that would not be read."""

    def __init__(self, what: str, *, size: int, limit: int, **where: Unpack[Where]) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"{size} bytes, more than the {limit} {what}", **where)


class IndexCorruptError(KafkaFormatError):
    """An .index/.timeindex/.txnindex that fails the broker's sanity checks."""


class LogStructureError(KafkaFormatError):
    """Segments (or their index files, or the leader-epoch checkpoint) that are each well formed
    but do not fit together as one Kafka log: offsets below a segment's base, overlapping the next
    segment, going backwards, index entries outside their segment, leader epochs going back.
    `rule` names the invariant; `other_path` the second file involved, when there is one."""

    def __init__(
        self, message: str, *, rule: str, other_path: str | None = None, **where: Unpack[Where]
    ) -> None:
        self.rule = rule
        self.other_path = other_path
        super().__init__(f"{message} [{rule}]", **where)


class CheckpointError(KafkaFormatError):
    """A malformed checkpoint file (cleaner-offset-checkpoint and its siblings)."""

    def __init__(self, message: str, *, line: int | None = None, **where: Unpack[Where]) -> None:
        self.line = line
        text = message if line is None else f"line {line}: {message}"
        super().__init__(text, **where)


class DiskFullError(CompactionError):
    """The disk (or quota) filled while a partition's cleaned segments were written: `path` the
    file being written, `needed` the bytes the partition's cleaned segments may need (the segments
    they replace), `free` the bytes free on its filesystem then (None where unknown)."""

    def __init__(self, message: str, path: str = "", needed: int = 0, free: int | None = None) -> None:
        self.path, self.needed, self.free = path, needed, free
        super().__init__(message)


class UsageError(CompactionError):
    """The command line or the environment cannot run a round: a missing or non-Kafka dir, a bad
    option value, no Java. Found before anything is written; the message says how to fix it."""


class DecodeError(CompactionError):
    """A coordinator record (`__consumer_offsets`, `__transaction_state`) whose bytes do not follow
    its schema (too short, bad length, unknown version): format/coordinator.py."""


class UnknownRecordType(DecodeError):
    """A `__consumer_offsets` record whose key type no schema knows."""

    def __init__(self, record_type: int) -> None:
        self.record_type = record_type
        super().__init__(f"unknown record type {record_type}")


class SegmentNameError(CompactionError, ValueError):
    """A file name that is not `<20 digits><known suffix>[<transient suffix>]`."""


class ConfigError(CompactionError, ValueError):
    """A config file or value the job cannot use (unknown name, bad value); one line, exit 2."""


class KeyFileError(UsageError):
    """A malformed line of the key file: names the file, the line and its byte position."""

    def __init__(self, path: str, line: int, position: int, message: str) -> None:
        self.path, self.line, self.position = path, line, position
        super().__init__(f"--erase-keys {path}: line {line} (byte {position}): {message}")


class EraseError(KafkaFormatError):
    """A listed key that cannot be erased without breaking the log (fails its partition)."""


class RebuildError(CompactionError):
    """The rebuild kernel could not re-encode a region: `code` (kernels/rebuild_kernels.py
    `ERR_NAMES`, its `name`), batch `index`, byte `position`."""

    def __init__(self, code: int, index: int, position: int, name: str = "malformed record") -> None:
        super().__init__(f"rebuild error {code} ({name}) in batch {index} at byte {position}")
        self.code, self.index, self.position = code, index, position


class IndexFullError(CompactionError):
    """A cleaned segment whose `.index` or `.timeindex` needs more entries than `segment.index.bytes`
    holds: Kafka's cleaner fails on the same group (an append to a full index) and marks the
    partition uncleanable; the job fails the partition and leaves it as found."""


class PartitionInvalid(CompactionError):
    """A partition dir we will not touch: unknown files, no segment, a broken index."""


class LockHeldError(CompactionError):
    """A log dir lock is held by someone else (another compaction run or a running broker)."""


class ExchangeError(CompactionError):
    """A peer's file or marker is missing or unreadable."""


class NoExecutors(CompactionError):
    """The cluster had no executor for the round's jobs (`spark/watchdog.py`)."""


class TaskFailed(CompactionError):
    """A Spark job aborted by a task that failed every attempt, with the partitions that task held:
    the one to look at (or leave out with `--topics`) when a rerun fails the same way."""


# What fails one partition, not the round (module docstring).
PARTITION_ERRORS = (CompactionError, OSError)


def error_text(exc: BaseException) -> str:
    """What a partition's report says of an error raised while compacting it: our own errors as
    they are (they name the file and position), anything else with its type and a short trace."""
    if isinstance(exc, CompactionError):
        return str(exc)
    import traceback

    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
