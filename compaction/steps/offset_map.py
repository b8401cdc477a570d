"""The offset map: for every record of a segment, the latest offset of its key in the map.

`OffsetMap` is what the rewrite asks of any map; `PartitionMap` is the one a whole-partition task
builds from its scan (`scan.scan_partition`), `Unmapped` the one of a partition that is only
erased. A range task's map is `ranges.ShippedMap`; `erase.ErasingMap` wraps any of them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from compaction.kernels.keymap import KeyTable
from compaction.kernels.scan import SegmentScan
from compaction.policy.keep import map_masks
from compaction.steps.group import GroupSpec, SourceSegment


class OffsetMap(Protocol):
    """What the rewrite asks of the offset map: for every record of a segment, the latest offset
    of its key (`found`; -1 when the key is absent from the map or the record has no key).
    `keep_records` keeps a keyed record below the bound iff its offset >= found. `hashes_keys`:
    whether `found` reads the scan's key hashes (a rewrite's scan then hashes the keys);
    `verified`: this round's scan checked every segment's CRCs before the map was built (the
    rewrite's scan then does not again)."""

    hashes_keys: bool
    verified: bool

    def found(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray: ...


class PartitionMap:
    """The offset map of a whole partition built in one task (an `OffsetMap`): a `KeyTable` over
    the usable records of all its groups. The key ids of segments whose scan the task keeps for
    the rewrite are kept too, so those records are not hashed a second time."""

    hashes_keys = True  # the segments it did not keep are looked up by key
    verified = True  # scan_partition read every segment first

    def __init__(self, expected_keys: int = 0) -> None:
        self.table = KeyTable(expected_keys)
        self._ids: dict[tuple[int, int], np.ndarray] = {}

    def add(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray:
        """Add the segment's records; returns their key ids (for `keep_ids`, `latest`)."""
        _, usable, dirty = map_masks(
            scan.batches, scan.records, spec.aborted_txns, spec.first_dirty_offset, spec.upper_bound
        )
        return self._assign(scan, usable, dirty)

    def keep_ids(self, spec: GroupSpec, seg: SourceSegment, ids: np.ndarray) -> None:
        """Hold the ids `add` gave the segment for its rewrite (`found`), which then hashes none."""
        small = len(self.table) + self.table.regions < 2**31  # 4 bytes a record while they fit
        self._ids[(spec.group_id, seg.base_offset)] = ids.astype(np.int32) if small else ids

    def take_ids(self, spec: GroupSpec, seg: SourceSegment) -> np.ndarray:
        """The ids `keep_ids` held for the segment (given up)."""
        return self._ids.pop((spec.group_id, seg.base_offset))

    def drop_ids(self, group_id: int, base_offset: int) -> None:
        """Give up the ids `keep_ids` held for the segment (its rewrite hashes its keys again)."""
        self._ids.pop((group_id, base_offset), None)

    def latest(self, ids: np.ndarray) -> np.ndarray:
        """map.get(key) per record from its key id (-1: no id)."""
        return np.where(ids >= 0, self.table.latest_of(np.maximum(ids, 0)), -1)

    def _assign(self, scan: SegmentScan, usable: np.ndarray, dirty: np.ndarray) -> np.ndarray:
        r = scan.records
        return self.table.assign(
            scan.file, scan.side, scan.split, r.key_pos, r.key_len, usable, dirty, r.offset, scan.keys
        )

    def found(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray:
        ids = self._ids.pop((spec.group_id, seg.base_offset), None)
        if ids is None:  # not kept: look the keys up (never adds one)
            none = np.zeros(len(scan.records.offset), dtype=bool)
            ids = self._assign(scan, none, none)
        return self.latest(ids)


class Unmapped:
    """The offset map of a partition that is only erased (`GroupSpec.erase_only`): no key is
    mapped (every answer -1), so its scan hashes and stores no key; `ErasingMap` adds the erasing."""

    hashes_keys = False
    verified = True  # scan_partition read every segment first

    def add(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray:
        return np.full(len(scan.records.offset), -1, np.int64)

    def keep_ids(self, spec: GroupSpec, seg: SourceSegment, ids: np.ndarray) -> None:
        pass

    def drop_ids(self, group_id: int, base_offset: int) -> None:
        pass

    def latest(self, ids: np.ndarray) -> np.ndarray:
        return np.full(len(ids), -1, np.int64)

    def found(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray:
        return np.full(len(scan.records.offset), -1, np.int64)
