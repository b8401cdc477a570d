"""kernels/keymap.py and keyindex.py: the numba hash tables against plain-Python dict references.

`KeyTable` is the whole-partition offset map: keys are read where they lie (a segment buffer or
its `side` buffer, addressed by combined positions), every keyed record gets the id of its key
(one id per distinct key), and `latest_of(id)` is the max dirty offset of the key (-1 when the
key has no dirty record). Ids are compared with the reference's up to renaming."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.kernels.keyindex import KeyIndex, max_by_key
from compaction.kernels.keymap import KeyTable


def _layout(keys: list[bytes | None], in_side: list[bool]):
    """Put each key in `file` or `side` (combined addressing, as SegmentScan does), with junk
    bytes between keys so that a wrong position or length cannot compare equal by accident."""
    file, side = bytearray(b"\xee"), bytearray(b"\xdd\xdd")
    pos, lens = [], []
    for k, s in zip(keys, in_side):
        if k is None:
            pos.append(0)
            lens.append(-1)
            continue
        buf = side if s else file
        pos.append(len(buf))
        lens.append(len(k))
        buf += k + b"\xff"
    split = len(file)
    pos = [p + split if s and ln >= 0 else p for p, s, ln in zip(pos, in_side, lens)]
    return (
        np.frombuffer(bytes(file), np.uint8),
        np.frombuffer(bytes(side), np.uint8),
        split,
        np.array(pos, np.int64),
        np.array(lens, np.int32),
    )


def _reference(calls):
    """Plain-Python KeyTable: ids per call, then (keys in id order, latest per id)."""
    ids: dict[bytes, int] = {}
    latest: list[int] = []
    outs = []
    for keys, usable, dirty, offsets in calls:
        out = []
        for k, u, d, o in zip(keys, usable, dirty, offsets):
            if k is None:
                out.append(-1)
                continue
            if k not in ids and u:
                ids[k] = len(ids)
                latest.append(-1)
            i = ids.get(k, -1)
            out.append(i)
            if i >= 0 and d:
                latest[i] = max(latest[i], o)
        outs.append(out)
    return outs, list(ids), latest


def _prehashed(file, side, split, pos, lens):
    """The keys packed and hashed as the scan does it in passing (keyhash.hash_keys)."""
    from compaction.kernels.keyhash import hash_keys

    n = len(pos)
    packed, offs, hashes = (
        np.empty(max(1, int(np.maximum(lens, 0).sum())), np.uint8),
        np.empty(n + 1, np.int64),
        np.empty(n, np.uint64),
    )
    end = hash_keys(file, side, split, pos, lens, 0, n, packed, offs, hashes, 0)
    return hashes, packed[:end], offs


def _run(calls, sides, expected_keys=0, prehashed=False):
    table = KeyTable(expected_keys)
    outs = []
    for (keys, usable, dirty, offsets), in_side in zip(calls, sides):
        file, side, split, pos, lens = _layout(keys, in_side)
        hashed = _prehashed(file, side, split, pos, lens) if prehashed else None
        got = table.assign(
            file,
            side,
            split,
            pos,
            lens,
            np.array(usable, bool),
            np.array(dirty, bool),
            np.array(offsets, np.int64),
            hashed,
        )
        outs.append(got.tolist())
    return table, outs


def _check(table, outs, calls):
    """Our ids equal the reference's up to a one-to-one renaming; same keys, same latest."""
    ref_outs, ref_keys, ref_latest = _reference(calls)
    rename: dict[int, int] = {}
    for ours, ref in zip(outs, ref_outs):
        assert [o < 0 for o in ours] == [r < 0 for r in ref]
        for o, r in zip(ours, ref):
            if r >= 0:
                assert rename.setdefault(r, o) == o
    assert len(set(rename.values())) == len(rename) == len(table)
    keys, latest = table.items()
    assert dict(zip(keys, latest.tolist())) == dict(zip(ref_keys, ref_latest))
    for r, o in rename.items():
        assert table.latest_of(np.array([o]))[0] == ref_latest[r]


def test_worked_example():
    # Two segments. "a" twice in the first (max dirty offset 3), "b" only clean (latest -1),
    # a null key, a control-like record (not usable) of an unknown key "z" (-1, not added) and
    # of the known key "a" (found, but it does not raise a's latest).
    calls = [
        ([b"a", b"b", None, b"a", b"z"], [1, 1, 0, 1, 0], [1, 0, 0, 1, 0], [0, 1, 2, 3, 4]),
        ([b"c", b"a", b"a"], [1, 0, 1], [1, 0, 1], [5, 9, 6]),
    ]
    table, outs = _run(calls, [[0, 1, 0, 1, 0], [1, 0, 1]])
    a, b, c = outs[0][0], outs[0][1], outs[1][0]
    assert outs == [[a, b, -1, a, -1], [c, a, a]] and len({a, b, c}) == 3
    assert table.latest_of(np.array([a, b, c])).tolist() == [6, -1, 5]  # offset 9: not usable, not dirty
    assert table.items()[0] == [b"a", b"b", b"c"] and table.mapped() == 2
    _check(table, outs, calls)


def test_empty_key_is_a_key_and_null_is_not():
    calls = [([b"", None, b""], [1, 1, 1], [1, 1, 1], [4, 5, 7])]
    table, outs = _run(calls, [[0, 0, 1]])
    assert outs[0][1] == -1 and outs[0][0] == outs[0][2] >= 0
    _check(table, outs, calls)


@pytest.mark.parametrize(
    ("expected_keys", "region_keys", "grows"),
    [(0, 8192, True), (1024 * 16, 1024, True), (8192 * 16, 8192, False)],
)
def test_growth_keeps_ids_and_latest(monkeypatch, expected_keys, region_keys, grows):
    # 20,000 distinct keys: 1 region, or 16 regions sized for 1,024 keys each, grow slots, arena
    # and id space several times; 16 regions sized for the 8,192 keys a region may hold do not.
    monkeypatch.setattr(KeyTable, "REGION_KEYS", region_keys)
    n = 20_000
    keys = [b"k%d" % (i * 7919 % n) + b"x" * (i % 37) for i in range(n)]
    calls = [
        (keys[i : i + 3000], [1] * 3000, [i % 2] * 3000, list(range(i, i + 3000))) for i in range(0, n, 3000)
    ]
    calls = [(k, u[: len(k)], d[: len(k)], o[: len(k)]) for k, u, d, o in calls]
    initial = KeyTable(expected_keys)
    table, outs = _run(calls, [[j % 3 == 0 for j in range(len(c[0]))] for c in calls], expected_keys)
    assert table.regions == max(1, expected_keys // region_keys)
    sizes = [(t.n_slots, t.cap, t.arena_cap) for t in (initial, table)]
    assert (sizes[0] != sizes[1]) == grows
    _check(table, outs, calls)


def _segments_of_20k_keys() -> list:
    """Five calls of 4,000 records over 20,000 distinct keys (of varied lengths)."""
    n = 20_000
    keys = [b"k%d" % (i * 7919 % n) + b"y" * (i % 23) for i in range(n)]
    return [
        (keys[i : i + 4000], [1] * 4000, [i % 3 != 0] * 4000, list(range(i, i + 4000)))
        for i in range(0, n, 4000)
    ]


def _assign_each(table: KeyTable, calls, outs: list) -> list[int]:
    """`calls` assigned one after the other (keys in the segment buffer); the table's `cap` after each."""
    caps = []
    for keys_, usable, dirty, offsets in calls:
        file, side, split, pos, lens = _layout(keys_, [0] * len(keys_))
        outs.append(
            table.assign(
                file,
                side,
                split,
                pos,
                lens,
                np.array(usable, bool),
                np.array(dirty, bool),
                np.array(offsets, np.int64),
            ).tolist()
        )
        caps.append(table.cap)
    return caps


@pytest.mark.parametrize("reserve", [0, 5_000, 20_000, 100_000])
def test_reserve_between_segments_keeps_ids_and_latest(reserve):
    # A map sized (`reserve`) once it has keys in it: the ids given before stay valid, later
    # segments find the keys, and a big enough reserve means no further growth.
    calls = _segments_of_20k_keys()
    table, outs = _run(calls[:1], [[0] * 4000])
    table.reserve(reserve)
    assert table.cap * table.regions >= reserve and table.n_slots >= 2 * table.cap
    sized = (table.cap, table.n_slots, table.arena_cap)
    _assign_each(table, calls[1:], outs)
    assert ((table.cap, table.n_slots, table.arena_cap) == sized) == (reserve >= 20_000)
    _check(table, outs, calls)


@pytest.mark.parametrize("expected", [0, 30_000])
def test_an_expected_size_is_reached_in_one_growth_and_costs_nothing_while_there_is_room(expected):
    # The scan projects the key count after each segment (`expect`): a table that fills grows
    # there at once, not by doublings; a projection the keys never reach allocates nothing.
    calls = _segments_of_20k_keys()
    table, outs = _run(calls[:1], [[0] * 4000])
    table.expect(expected)
    first = (table.cap, table.n_slots, table.arena_cap)
    caps = _assign_each(table, calls[1:], outs)
    assert table.cap > first[0]  # 4,000 keys' room, filled
    grown = sorted(set(caps) - {first[0]})
    if expected:
        assert grown == [table.cap] and table.cap * table.regions >= expected
    else:
        assert len(grown) > 1  # doubled more than once
    _check(table, outs, calls)
    roomy, _ = _run(calls[:1], [[0] * 4000])
    roomy.expect(10**7)
    assert (roomy.cap, roomy.n_slots) == first[:2] and roomy.slots.size == first[1] * roomy.regions


_key = st.one_of(st.none(), st.binary(max_size=6))
_record = st.tuples(_key, st.booleans(), st.booleans(), st.booleans())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_record, max_size=40), max_size=4), st.sampled_from([0, 8192 * 4]))
def test_matches_the_dict_reference(segments, expected_keys):
    calls, sides, offset = [], [], 0
    for seg in segments:
        keys = [r[0] for r in seg]
        usable = [r[1] for r in seg]
        dirty = [r[1] and r[2] for r in seg]  # only usable records are dirty (keep.map_masks)
        offsets = list(range(offset, offset + len(seg)))
        offset += len(seg)
        calls.append((keys, usable, dirty, offsets))
        sides.append([r[3] for r in seg])
    table, outs = _run(calls, sides, expected_keys)
    _check(table, outs, calls)
    # Keys the scan already packed and hashed: the same ids, keys and latest offsets.
    pre, pre_outs = _run(calls, sides, expected_keys, prehashed=True)
    assert pre_outs == outs and pre.items()[0] == table.items()[0]
    assert pre.items()[1].tolist() == table.items()[1].tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(_key, max_size=30), st.lists(_key, max_size=30))
def test_key_index_and_max_by_key_match_dicts(indexed, queries):
    index = KeyIndex(pa.array(indexed, pa.binary()))
    first = {}
    for i, k in enumerate(indexed):
        if k is not None:
            first.setdefault(k, i)
    assert index.lookup(pa.array(queries, pa.binary())).tolist() == [first.get(q, -1) for q in queries]
    values = np.arange(len(indexed), dtype=np.int64)[::-1].copy()
    keys, (maxes,) = max_by_key(pa.array(indexed, pa.binary()), values)
    want = {}
    for k, v in zip(indexed, values.tolist()):
        if k is not None:
            want[k] = max(want.get(k, v), v)
    assert dict(zip(keys.to_pylist(), maxes.tolist())) == want
    assert keys.to_pylist() == list(want)
