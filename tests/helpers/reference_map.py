"""The offset map built the plain way, for tests: pyarrow's group_by over every usable record
of a group (`scan_group`), and lookups through a hash index of its keys (`KeyLookup`). The job
builds the same map with `keymap.KeyTable` (whole partitions) or `compaction/steps/ranges.py`; tests
compare what the rewrite writes with either."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from compaction.kernels.keyindex import KeyIndex
from compaction.kernels.scan import SegmentScan
from compaction.policy.keep import map_masks
from compaction.steps.group import GroupSpec, SourceSegment
from compaction.steps.scan import ScanCache, producer_batches, read_segment, tail_producers


def scan_group(spec: GroupSpec, cache: ScanCache | None = None) -> tuple[pa.Table, pa.Table]:
    """Distinct keys of the group with `max_offset` and `dirty_offset` (-1 when not dirty), and
    the headers of its producer batches (plus those of `tail_segments`). With `cache`, the
    segments' scans are offered to it for `rewrite_unit`."""
    tables, producers = [], tail_producers(spec)
    for seg in spec.segments:
        scan = read_segment(spec, seg)
        if cache is not None:
            cache.offer(spec.group_id, seg.base_offset, scan)
        producers.append(producer_batches(scan.batches))
        rec = scan.records
        _, usable, dirty = map_masks(
            scan.batches, scan.records, spec.aborted_txns, spec.first_dirty_offset, spec.upper_bound
        )
        keys = scan.keys_arrow().filter(pa.array(usable))
        tables.append(
            pa.table(
                {
                    "key": keys,
                    "max_offset": pa.array(rec.offset[usable]),
                    "dirty_offset": pa.array(np.where(dirty, rec.offset, -1)[usable]),
                }
            )
        )
    prod = pa.concat_tables([pa.table(p) for p in producers]) if producers else None
    if not tables:
        empty = pa.table(
            {
                "key": pa.array([], pa.binary()),
                "max_offset": pa.array([], pa.int64()),
                "dirty_offset": pa.array([], pa.int64()),
            }
        )
        return empty, prod
    agg = pa.concat_tables(tables).group_by("key").aggregate([("max_offset", "max"), ("dirty_offset", "max")])
    keys = agg.select(["key", "max_offset_max", "dirty_offset_max"])
    return keys.rename_columns(["key", "max_offset", "dirty_offset"]), prod


def found_offsets(keys: pa.Array, lookup_keys: pa.Array, lookup_latest: np.ndarray) -> np.ndarray:
    """map.get(key) for every record key: the latest offset, or -1 when absent (or null key)."""
    if len(lookup_keys) == 0:
        return np.full(len(keys), -1, dtype=np.int64)
    pos = _key_index(lookup_keys).lookup(keys)
    return np.where(pos >= 0, np.asarray(lookup_latest, dtype=np.int64)[np.maximum(pos, 0)], -1)


_INDEX_CACHE: list = []  # [(lookup_keys, KeyIndex)]: built once per map, not once per segment


def _key_index(lookup_keys: pa.Array) -> KeyIndex:
    if _INDEX_CACHE and _INDEX_CACHE[0][0] is lookup_keys:
        return _INDEX_CACHE[0][1]
    index = KeyIndex(lookup_keys)
    _INDEX_CACHE[:] = [(lookup_keys, index)]
    return index


class KeyLookup:
    """The map as parallel arrays (an `OffsetMap`): distinct keys and their latest offsets."""

    hashes_keys = False  # looks keys up by their bytes (scan.keys_arrow)
    verified = False  # nothing scanned the segments before the rewrite

    def __init__(self, keys: pa.Array, latest: np.ndarray) -> None:
        self.keys, self.latest = keys, latest

    def found(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray:
        return found_offsets(scan.keys_arrow(), self.keys, self.latest)
