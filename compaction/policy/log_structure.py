"""The invariants that make segments one Kafka log, as pure functions over the scan's columns.

Every batch and CRC of a partition dir can be valid while its segments do not fit together:
segments copied from two backups, from another replica or partition, renamed by hand. Kafka's
log relies on these (`LogSegment`, `LogLoader`, `LeaderEpochFileCache`), and so does the
cleaner, which merges records by offset across segments; a dir breaking them is refused, never
rewritten:

* a segment's first offset is at or above its base offset (the file name);
* offsets increase strictly from batch to batch, across the whole partition;
* a segment's last offset is below the next segment's base offset;
* an offset-index entry points at a batch of its own segment that holds offsets up to the
  entry's (Kafka indexes an append's last offset at its first batch's position);
* leader epochs (v2 batches; v0/v1 have none, -1 is "none" too) never decrease along the log,
  and lie within their epoch's range in `leader-epoch-checkpoint` where it lists them: epoch E
  from its start offset up to the next entry's (a segment from another replica's history shows
  up here).

Each check raises `LogStructureError` naming the file(s), the offsets and the rule. The inputs
are what the executors' scan produces anyway (`BatchColumns`, the `.index` entries) or, for the
driver's dry-run audit, the first batch header of each segment (`check_first_batches`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from compaction.errors import LogStructureError
from compaction.format.checkpoint import LEADER_EPOCH_CHECKPOINT
from compaction.format.layout import (
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    MAGIC_V2,
    OFFSET_ENTRY_SIZE,
    RECORD_BATCH_OVERHEAD,
    TIME_ENTRY_SIZE,
)

RULE_BASE = "a segment's offsets start at or above its base offset (its file name)"
RULE_NEXT = "a segment's offsets end below the next segment's base offset"
RULE_ORDER = "offsets increase from batch to batch"
RULE_INDEX = "an index entry points at a batch of its own segment"
RULE_EPOCH_ORDER = "leader epochs never decrease along the log"
RULE_EPOCH_CHECKPOINT = "batches of leader epoch E lie within E's range in leader-epoch-checkpoint"


class Batches(Protocol):
    """The columns of `kernels.scan_columns.BatchColumns` these checks read (one entry per batch)."""

    position: np.ndarray
    base_offset: np.ndarray
    last_offset: np.ndarray
    magic: np.ndarray
    partition_leader_epoch: np.ndarray


def file_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


# --- one segment -------------------------------------------------------------------------------


def check_segment_offsets(
    path: str,
    base_offset: int,
    batches: Batches,
    next_base: int | None = None,
    next_path: str | None = None,
    first_only: bool = False,
) -> None:
    """A segment's batches against its base offset, each other and the next segment's base
    (`next_base`; None: the last segment, or unknown). `first_only`: `batches` is the segment's
    first batch alone (the reason says so)."""
    first, last, pos = batches.base_offset, batches.last_offset, batches.position
    if not len(first):
        return
    name = file_name(path)
    if first[0] < base_offset:
        raise LogStructureError(
            f"{name} starts at offset {int(first[0])}, below its base offset {base_offset}",
            rule=RULE_BASE,
            path=path,
            position=int(pos[0]),
            offset=int(first[0]),
        )
    back = last < first
    back[1:] |= first[1:] <= last[:-1]
    for i in np.flatnonzero(back)[:1].tolist():
        after = f"offsets {_span(int(first[i - 1]), int(last[i - 1]))}" if i else "its own first offset"
        what = f"last offset {int(last[i])} below its first" if last[i] < first[i] else f"follows {after}"
        raise LogStructureError(
            f"batch of offsets {_span(int(first[i]), int(last[i]))} in {name}: {what}",
            rule=RULE_ORDER,
            path=path,
            position=int(pos[i]),
            offset=int(first[i]),
        )
    if next_base is not None and last[-1] >= next_base:
        i = int(np.argmax(last >= next_base))
        other = file_name(next_path) if next_path else f"the segment at {next_base}"
        head = _span(int(first[0]), int(last[0]))
        held = (
            f"offsets from {int(first[0])} (first batch: {head})"
            if first_only
            else f"offsets {int(first[0])}-{int(last[-1])}"
        )
        raise LogStructureError(
            f"{name} holds {held}, overlapping {other} from {next_base}",
            rule=RULE_NEXT,
            other_path=next_path,
            path=path,
            position=int(pos[i]),
            offset=int(first[i]),
        )


def live_index_entries(entries: np.ndarray, base_offset: int) -> np.ndarray:
    """Without the trailing (base, 0) entries of a preallocated (active) index."""
    real = np.flatnonzero((entries[:, 0] != base_offset) | (entries[:, 1] != 0))
    return entries[: int(real[-1]) + 1] if len(real) else entries[:0]


def check_index_entries(
    index_path: str, log_path: str, base_offset: int, entries: np.ndarray, batches: Batches
) -> None:
    """Offset-index `entries` (`(n, 2)` [offset, position], as read) against the batches of the
    segment they index: each entry at a batch's position, with an offset from that batch's first
    up to the segment's last (v0/v1 columns of a bare header scan carry a wrapper's last offset:
    there the floor is the previous entry's last offset + 1)."""
    entries = live_index_entries(entries, base_offset)
    if not len(entries):
        return
    pos, first, last = batches.position, batches.base_offset, batches.last_offset
    n = len(pos)
    at = np.minimum(np.searchsorted(pos, entries[:, 1]), max(n - 1, 0))
    on_batch = (pos[at] == entries[:, 1]) if n else np.zeros(len(entries), dtype=bool)
    prev_last = np.where(at > 0, last[np.maximum(at - 1, 0)] + 1, base_offset) if n else at
    floor = np.where(batches.magic[at] >= 2, first[at], prev_last) if n else at
    seg_last = int(last[-1]) if n else base_offset - 1
    bad = ~on_batch | (entries[:, 0] < floor) | (entries[:, 0] > seg_last)
    for k in np.flatnonzero(bad)[:1].tolist():
        offset, position, i = int(entries[k, 0]), int(entries[k, 1]), int(at[k])
        log = file_name(log_path)
        if not on_batch[k]:
            what = f"points at byte {position} of {log}, where no batch starts"
        elif offset > seg_last:
            what = f"lies past {log}'s last offset {seg_last}"
        else:
            span = _span(int(first[i]), int(last[i]))
            what = f"points at byte {position} of {log}, a batch of offsets {span}"
        raise LogStructureError(
            f"entry for offset {offset} {what}",
            rule=RULE_INDEX,
            other_path=log_path,
            path=index_path,
            position=k * OFFSET_ENTRY_SIZE,
            offset=offset,
        )


def check_time_index_entries(
    index_path: str, log_path: str, base_offset: int, entries: np.ndarray, batches: Batches
) -> None:
    """Time-index `entries` (`(n, 2)` [timestamp, offset], as read) name offsets of the segment
    they index: from its first batch's first offset to its last (preallocated trailing (0, base)
    entries of an active index left out)."""
    real = np.flatnonzero((entries[:, 0] != 0) | (entries[:, 1] != base_offset))
    entries = entries[: int(real[-1]) + 1] if len(real) else entries[:0]
    first, last = batches.base_offset, batches.last_offset
    if not len(entries) or not len(first):
        return
    lo, hi = int(first[0]) if batches.magic[0] >= MAGIC_V2 else base_offset, int(last[-1])
    for k in np.flatnonzero((entries[:, 1] < lo) | (entries[:, 1] > hi))[:1].tolist():
        offset = int(entries[k, 1])
        raise LogStructureError(
            f"entry for offset {offset} lies outside {file_name(log_path)}'s offsets {_span(lo, hi)}",
            rule=RULE_INDEX,
            other_path=log_path,
            path=index_path,
            position=k * TIME_ENTRY_SIZE,
            offset=offset,
        )


# --- leader epochs across the partition ----------------------------------------------------------


@dataclass(frozen=True)
class SegmentEpochs:
    """The leader-epoch runs of one segment: consecutive batches of one epoch, in log order
    (`first`/`last`: offsets of the run, `position`: byte of its first batch). Batches without an
    epoch (v0/v1, or -1) are left out."""

    path: str
    base_offset: int
    epoch: np.ndarray
    first: np.ndarray
    last: np.ndarray
    position: np.ndarray


def segment_epochs(path: str, base_offset: int, batches: Batches) -> SegmentEpochs:
    keep = np.flatnonzero((batches.magic >= MAGIC_V2) & (batches.partition_leader_epoch >= 0))
    epoch = batches.partition_leader_epoch[keep].astype(np.int64)
    starts = np.flatnonzero(np.diff(epoch, prepend=-2) != 0)
    ends = np.append(starts[1:], len(keep)).astype(np.int64) - 1
    if not len(keep):
        ends = starts
    return SegmentEpochs(
        path,
        base_offset,
        epoch[starts],
        batches.base_offset[keep[starts]].astype(np.int64),
        batches.last_offset[keep[ends]].astype(np.int64),
        batches.position[keep[starts]].astype(np.int64),
    )


_EPOCH_FIELDS = ("epoch", "first", "last", "position")


def epoch_columns(epochs: Sequence[SegmentEpochs]) -> dict[str, np.ndarray]:
    """`SegmentEpochs` of several segments as flat columns (one row per run), to ship to the
    driver; `epochs_from_columns` reverses it."""
    none = [np.empty(0, np.int64)]
    bases = [np.full(len(s.epoch), s.base_offset, np.int64) for s in epochs]
    out = {"base_offset": np.concatenate(bases or none)}
    for n in _EPOCH_FIELDS:
        out[n] = np.concatenate([getattr(s, n) for s in epochs] or none).astype(np.int64)
    return out


def epochs_from_columns(columns: dict[str, np.ndarray], path_of: Callable[[int], str]) -> list[SegmentEpochs]:
    """The `SegmentEpochs` of `epoch_columns`; `path_of(base_offset)` names each segment's file."""
    base = np.asarray(columns["base_offset"], dtype=np.int64)
    out = []
    for b in np.unique(base).tolist():
        sel = base == b
        runs = (np.asarray(columns[n], np.int64)[sel] for n in _EPOCH_FIELDS)
        out.append(SegmentEpochs(path_of(b), b, *runs))
    return out


def check_leader_epochs(
    segments: Sequence[SegmentEpochs],
    checkpoint: Sequence[tuple[int, int]] | None = None,
    checkpoint_path: str = LEADER_EPOCH_CHECKPOINT,
) -> None:
    """Leader epochs of a partition's segments (any order; sorted by base offset here) never
    decrease, and agree with `checkpoint` ((epoch, start offset) entries of
    `leader-epoch-checkpoint`; None or empty: nothing to agree with)."""
    runs = [
        (int(e), int(f), int(la), int(p), s)
        for s in sorted(segments, key=lambda s: s.base_offset)
        for e, f, la, p in zip(s.epoch, s.first, s.last, s.position)
    ]
    for (e0, _, last0, _, s0), (e1, first1, _, p1, s1) in zip(runs, runs[1:]):
        if e1 < e0:
            raise LogStructureError(
                f"{file_name(s1.path)} has leader epoch {e1} from offset {first1}, after epoch {e0} up to "
                f"offset {last0} in {file_name(s0.path)}",
                rule=RULE_EPOCH_ORDER,
                other_path=None if s0 is s1 else s0.path,
                path=s1.path,
                position=p1,
                offset=first1,
            )
    if checkpoint:
        _check_checkpoint(list(checkpoint), checkpoint_path)
        for run in runs:
            _check_run(run, list(checkpoint), checkpoint_path)


def _check_checkpoint(entries: list[tuple[int, int]], path: str) -> None:
    for (e0, s0), (e1, s1) in zip(entries, entries[1:]):
        if e1 <= e0 or s1 <= s0:  # LeaderEpochFileCache keeps both increasing
            raise LogStructureError(
                f"entry ({e1}, {s1}) follows ({e0}, {s0}): epochs and start offsets must both increase",
                rule=RULE_EPOCH_CHECKPOINT,
                path=path,
            )


def _check_run(run: tuple, entries: list[tuple[int, int]], path: str) -> None:
    """One epoch run against the checkpoint. Lenient where Kafka itself leaves gaps: data before
    the first entry's start (below the log start offset, which `truncateFromStart` moves that
    start up to, or older than the cache) and epochs after the last entry (a checkpoint not yet
    flushed when the broker stopped)."""
    epoch, first, last, position, seg = run
    starts = {e: (k, s) for k, (e, s) in enumerate(entries)}
    if last < entries[0][1]:
        return
    name, where = file_name(seg.path), {"path": seg.path, "position": position, "offset": first}
    held = f"{name} holds leader epoch {epoch} at offsets {_span(first, last)}"
    if epoch not in starts:
        last_epoch, last_start = entries[-1]
        if epoch > last_epoch and first >= last_start:
            return
        raise LogStructureError(
            f"{held}, an epoch {file_name(path)} does not list",
            rule=RULE_EPOCH_CHECKPOINT,
            other_path=path,
            **where,
        )
    k, start = starts[epoch]
    if first < start and k > 0:
        raise LogStructureError(
            f"{held}, but {file_name(path)} starts epoch {epoch} at {start}",
            rule=RULE_EPOCH_CHECKPOINT,
            other_path=path,
            **where,
        )
    if k + 1 < len(entries) and last >= entries[k + 1][1]:
        e2, s2 = entries[k + 1]
        raise LogStructureError(
            f"{held}, but {file_name(path)} starts epoch {e2} at {s2}",
            rule=RULE_EPOCH_CHECKPOINT,
            other_path=path,
            **where,
        )


# --- the dry run's audit: first batch headers only ---------------------------------------------------

FIRST_HEADER_BYTES = RECORD_BATCH_OVERHEAD  # a v0/v1 entry's offset, size, crc and magic fit in it too
_V2_HEAD = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta


@dataclass
class FirstBatches:
    """Columns of the first batch of each segment (a `Batches`); v0/v1 entries give their own
    offset for both ends (a compressed wrapper's: its last inner offset) and no epoch."""

    position: np.ndarray
    base_offset: np.ndarray
    last_offset: np.ndarray
    magic: np.ndarray
    partition_leader_epoch: np.ndarray


def first_batch(head: bytes) -> FirstBatches:
    """The first batch of a segment from its first `FIRST_HEADER_BYTES` (fewer: an empty or
    short segment, no batch)."""
    none = FirstBatches(*(np.empty(0, dtype=np.int64) for _ in range(5)))
    if len(head) < HEADER_SIZE_UP_TO_MAGIC:
        return none
    base, _, epoch, magic = _V2_HEAD.unpack_from(head)
    if magic >= MAGIC_V2:
        if len(head) < FIRST_HEADER_BYTES:
            return none
        last = base + _LAST_DELTA.unpack_from(head, LAST_OFFSET_DELTA_OFFSET)[0]
    else:
        last, epoch = base, -1
    return FirstBatches(*(np.array([v], dtype=np.int64) for v in (0, base, last, magic, epoch)))


def check_first_batches(
    paths: Sequence[str],
    bases: Sequence[int],
    heads: Sequence[bytes],
    checkpoint: Sequence[tuple[int, int]] | None = None,
    checkpoint_path: str = LEADER_EPOCH_CHECKPOINT,
) -> None:
    """What the first batch header of every segment of a partition (log order) shows: each
    segment's first batch at or above its base and below the next segment's base, and their
    leader epochs in order and within the checkpoint. A subset of what the executors' scan checks."""
    firsts = [first_batch(h) for h in heads]
    for i, (path, base, fb) in enumerate(zip(paths, bases, firsts)):
        nxt = i + 1 < len(bases)
        check_segment_offsets(
            path, base, fb, bases[i + 1] if nxt else None, paths[i + 1] if nxt else None, first_only=True
        )
    epochs = [segment_epochs(p, b, fb) for p, b, fb in zip(paths, bases, firsts)]
    check_leader_epochs(epochs, checkpoint, checkpoint_path)
