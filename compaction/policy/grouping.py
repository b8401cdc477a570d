"""Grouping of a round's segments into output segments: ``Cleaner.groupSegmentsBySize``
(docs/kafka-rules.md#grouping)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from compaction.format.layout import INT32_MAX

if TYPE_CHECKING:
    from compaction.policy.plan import SegmentMeta


def group_segments_by_size(
    segments: Sequence[SegmentMeta], max_size: int, max_index_size: int, first_uncleanable_offset: int
) -> list[list[SegmentMeta]]:
    """``Cleaner.groupSegmentsBySize`` (docs/kafka-rules.md#grouping): greedy, in order; a segment joins the
    open group while the log bytes, each index's bytes and the offset range (<= Int.MaxValue from the
    group's first base, skipped for empty segments) stay within bounds. Python ints are exact,
    which matches Kafka's 64-bit sums."""
    groups: list[list[SegmentMeta]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_bytes = segments[i].size
        index_bytes = segments[i].offset_index_bytes
        time_index_bytes = segments[i].time_index_bytes
        i += 1
        while i < len(segments) and _fits(
            segments,
            i,
            group[0],
            log_bytes,
            index_bytes,
            time_index_bytes,
            max_size,
            max_index_size,
            first_uncleanable_offset,
        ):
            log_bytes += segments[i].size
            index_bytes += segments[i].offset_index_bytes
            time_index_bytes += segments[i].time_index_bytes
            group.append(segments[i])
            i += 1
        groups.append(group)
    return groups


def _fits(
    segments: Sequence[SegmentMeta],
    i: int,
    first: SegmentMeta,
    log_bytes: int,
    index_bytes: int,
    time_index_bytes: int,
    max_size: int,
    max_index_size: int,
    first_uncleanable_offset: int,
) -> bool:
    candidate = segments[i]
    if log_bytes + candidate.size > max_size:
        return False
    if index_bytes + candidate.offset_index_bytes > max_index_size:
        return False
    if time_index_bytes + candidate.time_index_bytes > max_index_size:
        return False
    # An empty segment adds no offsets; skipping the check avoids leaving one behind every 2^31.
    if candidate.size == 0:
        return True
    last = _estimated_last_offset(segments, i, first_uncleanable_offset)
    return last - first.base_offset <= INT32_MAX


def _estimated_last_offset(segments: Sequence[SegmentMeta], i: int, first_uncleanable_offset: int) -> int:
    """``Cleaner.lastOffsetForFirstSegment``: next segment's base - 1, or, for the last segment of
    the list, ``firstUncleanableOffset - 1`` (cheap upper bounds instead of reading the log)."""
    if i + 1 < len(segments):
        return segments[i + 1].base_offset - 1
    return first_uncleanable_offset - 1
