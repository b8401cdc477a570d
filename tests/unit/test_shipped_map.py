"""The offset map a range's rewrite reads (`ranges.ShippedMap`): from the ids and latest offsets a
task holds, or from their IDS and LATEST blocks (`ranges.held_blocks`) when another task scanned
the range, with the merge's FOUND entries applied. Both must answer map[key] per record exactly."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from groupkit import NOW_MS

from compaction.errors import CorruptRecordError
from compaction.runtime.exchange import Block, Exchange, from_block, to_block
from compaction.runtime.storage import Storage
from compaction.steps.group import GroupSpec, SourceSegment
from compaction.steps.ranges import BLOCK_ROWS, FOUND, IDS, LATEST, Held, ShippedMap, held_blocks


def spec_of(bases: list[int], group_id: int = 5) -> GroupSpec:
    return GroupSpec(
        group_id=group_id,
        topic="t",
        partition=0,
        storage=Storage.local(),
        part_path="/logs/t-0",
        segments=tuple(SourceSegment(b, 1, 0) for b in bases),
        first_dirty_offset=0,
        upper_bound=bases[-1] + 1,
        now_ms=NOW_MS,
        delete_retention_ms=0,
        legacy_delete_horizon_ms=0,
        index_interval_bytes=4096,
    )


def scan_of(n_records: int) -> SimpleNamespace:
    """What `found` reads of a segment's scan: its record count."""
    return SimpleNamespace(records=SimpleNamespace(offset=np.arange(n_records, dtype=np.int64)))


def answers(shipped: ShippedMap, spec: GroupSpec, held: Held) -> list[np.ndarray]:
    return [
        shipped.found(spec, seg, scan_of(len(ids))) for seg, ids in zip(spec.segments, held.ids, strict=True)
    ]


def expected(held: Held) -> list[np.ndarray]:
    """map[key] per record: the latest offset of the record's id, -1 for a record without one
    (id -1 reads the -1 put after the last id's)."""
    padded = np.append(held.latest, -1).astype(np.int64)
    return [padded[ids] for ids in held.ids]


def test_found_is_the_latest_offset_of_each_records_key_id():
    # Key 0 twice (the first id: a table read one slot off gives it key 1's offset), a record
    # without a key (-1) and every other id once.
    held = Held([np.array([0, -1, 1, 0, 2], np.int32), np.array([2, 2, -1], np.int32)], np.array([7, 3, 40]))
    spec = spec_of([0, 5])
    shipped = ShippedMap()
    shipped.hold(1, spec, held)
    got = answers(shipped, spec, held)
    assert [g.tolist() for g in got] == [[7, -1, 3, 7, 40], [40, 40, -1]]


def test_found_entries_replace_the_ranges_latest_offsets_of_their_ids():
    held = Held([np.array([0, 1, 2, -1, 1], np.int32)], np.array([4, 6, 8]))
    spec = spec_of([0])
    shipped = ShippedMap()
    shipped.hold(3, spec, held)
    # A later range holds keys 0 and 2: the merge found their latest there.
    shipped.apply_found(3, Block(3, FOUND, -1, 0, to_block(id=np.array([0, 2], np.int32), latest=[90, 95])))
    assert shipped.found(spec, spec.segments[0], scan_of(5)).tolist() == [90, 6, 95, -1, 6]
    assert held.latest.tolist() == [4, 6, 8]  # the task's own copy is not changed under it


def test_a_range_without_keys_maps_every_record_to_none():
    held = Held([np.array([-1, -1, -1], np.int32), np.zeros(0, np.int32)], np.zeros(0, np.int64))
    spec = spec_of([10, 13])
    shipped = ShippedMap()
    shipped.hold(0, spec, held)
    assert [g.tolist() for g in answers(shipped, spec, held)] == [[-1, -1, -1], []]


def test_a_segment_whose_record_count_differs_from_its_scan_is_an_error_naming_it():
    held = Held([np.array([0, 1], np.int32)], np.array([1, 2]))
    spec = spec_of([40])
    shipped = ShippedMap()
    shipped.hold(0, spec, held)
    with pytest.raises(CorruptRecordError, match="segment has 3 records, its scan had 2") as err:
        shipped.found(spec, spec.segments[0], scan_of(3))
    assert "00000000000000000040.log" in str(err.value)


# Records per segment of a held range: none, one, a block's worth, one past it and more, and a
# range of several segments whose ids span blocks; the range's keys likewise, none to two blocks.
HELD_SHAPES = {
    "one empty segment": ([0], 0),
    "one record": ([1], 1),
    "a block of ids": ([BLOCK_ROWS], 3),
    "a block and one": ([BLOCK_ROWS + 1], 5),
    "three segments, the middle one in three blocks": ([4, 2 * BLOCK_ROWS + 7, 0], BLOCK_ROWS + 2),
    "two segments of a block and one each": ([BLOCK_ROWS + 1, BLOCK_ROWS + 1], 2 * BLOCK_ROWS + 1),
}


@pytest.mark.parametrize("shape", sorted(HELD_SHAPES))
def test_held_blocks_hand_a_range_over_exactly(tmp_path, shape):
    """A range's ids and latest offsets written as blocks to the exchange and read back by another
    task map every record as the task that holds them does, each block at most BLOCK_ROWS rows
    (a block stays a few MB whatever the range)."""
    sizes, n_keys = HELD_SHAPES[shape]
    rng = np.random.default_rng(len(sizes) * 1000 + n_keys)
    # Each segment's ids start with the first and last key (when it holds any), so that a block
    # read at the wrong place or into the wrong segment changes the answers.
    ids = []
    for n in sizes:
        seg = rng.integers(-1, n_keys, n, dtype=np.int32) if n_keys else np.full(n, -1, np.int32)
        seg[: min(n, 2)] = [0, n_keys - 1][: min(n, 2)] if n_keys else -1
        ids.append(seg)
    held = Held(ids, rng.permutation(n_keys).astype(np.int64) * 3 + 1)
    spec = spec_of([100 * k for k in range(len(sizes))])

    (tmp_path / "exchange").mkdir()
    ex = Exchange(Storage.local(), str(tmp_path / "exchange"))
    ex.write_blocks("ids-2", held_blocks(2, held))
    blocks = list(ex.read_blocks("ids-2"))
    assert all(b.range_id == 2 and b.kind in (IDS, LATEST) for b in blocks)
    rows = [from_block(b.data).num_rows for b in blocks]
    assert all(r <= BLOCK_ROWS for r in rows)
    assert sum(r for b, r in zip(blocks, rows, strict=True) if b.kind == IDS) == sum(sizes)
    assert sum(r for b, r in zip(blocks, rows, strict=True) if b.kind == LATEST) == n_keys

    from_exchange = ShippedMap()
    from_exchange.add_blocks(2, spec, blocks[::-1])  # blocks carry their order: `seq`, not their place
    held_here = ShippedMap()
    held_here.hold(2, spec, held)
    for got, mine, want in zip(
        answers(from_exchange, spec, held), answers(held_here, spec, held), expected(held)
    ):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(mine, want)
