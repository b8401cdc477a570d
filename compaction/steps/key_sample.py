"""A partition's newest records, sampled on the driver before the ranges stage is cut.

Rewriting a range costs more the more of its records it keeps, and a range keeps more the newer
it is (no later record supersedes its keys). How much more depends on the partition's number of
distinct keys, which only a scan counts. The driver reads the last `SAMPLE_BYTES` of the newest
segment that will be cleaned, from the offset-index entry at or before that point, decodes its
batches in plain Python and counts their records and distinct keys: what
`schedule.key_universe` needs to estimate the partition's keys, and the codec that prices a kept
byte (`schedule.KEPT_WEIGHT`). A few milliseconds per partition; an estimate only decides where the
ranges are cut, never what is kept. Anything unreadable gives no sample (the cut is then by bytes
alone) and is left for the scan to report.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from compaction.format.batch import BatchHeader, RecordBatch, decode_records
from compaction.format.index import read_offset_index
from compaction.format.layout import OFFSET_ENTRY_SIZE, RECORD_BATCH_OVERHEAD
from compaction.steps.group import GroupSpec

SAMPLE_BYTES = 2 << 20
# Enough records that the count of repeated keys says something (a sample with none says only
# that the partition has many more keys than the sample has records).
MIN_RECORDS = 256


class KeySample(NamedTuple):
    """What a partition's newest `bytes` held: `records` data records, `keys` distinct keys among
    them, and `codec` the codec of most of those bytes."""

    bytes: int
    records: int
    keys: int
    codec: int


def sample_position(index: bytes, base_offset: int, size: int, want: int) -> int | None:
    """The position of the last offset-index entry at or before `size - want` (0 when the
    segment is no longer than `want`); None when the index has no such entry."""
    if size <= want:
        return 0
    entries = read_offset_index(index[: len(index) - len(index) % OFFSET_ENTRY_SIZE], base_offset)
    positions = entries[:, 1]
    at = positions[(positions > 0) & (positions <= size - want)]
    return int(at.max()) if len(at) else None


def count_keys(data: bytes, path: str, at: int) -> KeySample:
    """The records, distinct keys and main codec of the whole batches of `data` (read from byte
    `at` of `path`)."""
    view = memoryview(data)
    pos, records, seen, by_codec = 0, 0, set(), Counter()
    while pos + RECORD_BATCH_OVERHEAD <= len(view):
        size = BatchHeader.unpack_from(view, pos).size
        if pos + size > len(view):
            break  # the read ended inside this batch
        batch = RecordBatch(view[pos : pos + size], at + pos, path)
        if not batch.header.is_control:
            for r in decode_records(batch.records_payload(), batch.header):
                records += 1
                seen.add(r.key)
        by_codec[batch.header.codec] += size
        pos += size
    codec = by_codec.most_common(1)[0][0] if by_codec else 0
    return KeySample(pos, records, len(seen), codec)


def sample_partition(specs: list[GroupSpec], want: int = SAMPLE_BYTES) -> KeySample | None:
    """The sample of a partition's newest cleaned segment (its groups `specs`, in log order);
    None where it cannot be read or holds too few records to say anything."""
    spec = specs[-1]
    seg = spec.segments[-1]
    try:
        storage = spec.storage
        index = storage.read_small(spec.segment_path(seg.base_offset, ".index"))
        at = sample_position(index, seg.base_offset, seg.size, want)
        if at is None:
            return None
        path = spec.segment_path(seg.base_offset)
        found = count_keys(storage.read_small(path, at, seg.size - at), path, at)
    except Exception:
        return None
    return found if found.records >= MIN_RECORDS else None


__all__ = ["MIN_RECORDS", "SAMPLE_BYTES", "KeySample", "count_keys", "sample_partition", "sample_position"]
