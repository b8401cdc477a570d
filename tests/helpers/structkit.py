"""Structural damage to healthy partition dirs, the way people and scripts assemble archives:
segments duplicated, dropped, renamed, truncated, moved between partitions, index files swapped,
batches from another leader's history. Every byte and CRC stays valid."""

from __future__ import annotations

import os
import shutil

import numpy as np

from compaction.format.naming import segment_file_name
from compaction.kernels.scan import scan_batches

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
EPOCH_AT = 12  # partitionLeaderEpoch: outside the v2 CRC (a broker stamps it on append)


def bases(part_dir: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(part_dir) if n.endswith(".log"))


def seg_path(part_dir: str, base: int, suffix: str = ".log") -> str:
    return os.path.join(part_dir, segment_file_name(base, suffix))


def columns(part_dir: str, base: int):
    with open(seg_path(part_dir, base), "rb") as fh:
        return scan_batches(np.frombuffer(fh.read(), dtype=np.uint8))


def offsets(part_dir: str, base: int) -> tuple[int, int]:
    """(first, last) offset of a segment."""
    cols = columns(part_dir, base)
    return int(cols.base_offset[0]), int(cols.last_offset[-1])


def _files(part_dir: str, base: int) -> list[str]:
    return [s for s in SEGMENT_SUFFIXES if os.path.exists(seg_path(part_dir, base, s))]


def copy_segment(src_dir: str, base: int, dst_dir: str, new_base: int, *, move: bool = False) -> None:
    """The segment's .log and index files under `new_base` in `dst_dir` (index files copied as they
    are: their entries stay relative to the old base, as a hand copy leaves them)."""
    for s in _files(src_dir, base):
        (shutil.move if move else shutil.copy2)(seg_path(src_dir, base, s), seg_path(dst_dir, new_base, s))


def drop_segment(part_dir: str, base: int) -> None:
    for s in _files(part_dir, base):
        os.remove(seg_path(part_dir, base, s))


def truncate_at_batch(part_dir: str, base: int, keep_batches: int) -> None:
    """The segment's .log cut after its first `keep_batches` batches (its index files as they were)."""
    cols = columns(part_dir, base)
    end = int(cols.position[keep_batches]) if keep_batches < len(cols.position) else None
    if end is not None:
        os.truncate(seg_path(part_dir, base), end)


def swap_indexes(part_dir: str, a: int, b: int) -> None:
    for s in (".index", ".timeindex"):
        pa_, pb = seg_path(part_dir, a, s), seg_path(part_dir, b, s)
        os.rename(pa_, pa_ + ".swaptmp")
        os.rename(pb, pa_)
        os.rename(pa_ + ".swaptmp", pb)


def set_epochs(part_dir: str, base: int, epoch: int, first_batches: int | None = None) -> None:
    """Stamp leader epoch `epoch` on the segment's (first `first_batches`) v2 batches."""
    cols = columns(part_dir, base)
    with open(seg_path(part_dir, base), "r+b") as fh:
        for pos in cols.position[:first_batches].tolist():
            fh.seek(pos + EPOCH_AT)
            fh.write(epoch.to_bytes(4, "big", signed=True))


def read_epoch_checkpoint(part_dir: str) -> list[tuple[int, int]]:
    lines = open(os.path.join(part_dir, "leader-epoch-checkpoint")).read().split("\n")
    return [tuple(map(int, line.split())) for line in lines[2:] if line.strip()]
