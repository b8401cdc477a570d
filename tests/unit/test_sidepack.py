"""compaction/kernels/sidepack.py: packing a scan's decompressed records to those that may be kept.

Property: for random segments of v2 data batches (all codecs, headers, null keys and values), a
random keep mask, the kernel and its Python reference give the same packed side and positions,
and the rebuild over the packed scan gives exactly what it gives over the whole one. A record the
packing left out cannot be rebuilt (loud layout error, never other bytes); segments with
transactional, control or legacy batches are not packed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.errors import CorruptRecordError, RebuildError
from compaction.format import batch as fb
from compaction.format.batch_build import build_batch
from compaction.format.layout import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from compaction.format.legacy import build_legacy_message_set
from compaction.kernels.buffers import BufferPool, held_bytes
from compaction.kernels.rebuild import NO_HORIZON, SRC_SIDE, rebuild_records, record_regions
from compaction.kernels.scan import scan_segment
from compaction.kernels.sidepack import FAR, pack_records, pack_records_py, pack_side, packable

_bytes = st.one_of(st.none(), st.binary(max_size=60))
_headers = st.lists(st.tuples(st.text(max_size=6), _bytes), max_size=2).map(tuple)


@st.composite
def data_batch(draw, base_offset: int):
    n = draw(st.integers(1, 10))
    records = [
        fb.Record(
            base_offset + i, 1_000 + draw(st.integers(-50, 50)), draw(_bytes), draw(_bytes), draw(_headers)
        )
        for i in range(n)
    ]
    return build_batch(records, base_offset=base_offset, codec=draw(st.integers(0, 4))), n


@st.composite
def segments(draw):
    raws, offset = [], 0
    for _ in range(draw(st.integers(1, 5))):
        raw, n = draw(data_batch(offset))
        raws.append(raw)
        offset += n
    keep = draw(st.lists(st.booleans(), min_size=offset, max_size=offset))
    return b"".join(raws), np.array(keep, dtype=bool)


def rebuild_all(scan, keep):
    """Every batch of `scan` rebuilt with `keep` in one kernel call: the per-batch outputs."""
    b, r = scan.batches, scan.records
    src, start, end = record_regions(scan)
    bounds = np.searchsorted(r.batch_index, np.arange(len(b.position) + 1))
    count = np.diff(bounds)
    first_key = np.where(count > 0, r.key_pos[np.minimum(bounds[:-1], len(r.key_pos) - 1)], -1)
    first_key = np.where(src == SRC_SIDE, first_key - scan.split, first_key)
    payload, o_start, o_end, new_base, new_max, kept, flags = rebuild_records(
        scan.file,
        scan.side,
        src,
        start,
        end,
        count,
        keep,
        bounds[:-1],
        b.base_timestamp,
        b.timestamp_type,
        b.max_timestamp,
        np.full(len(src), NO_HORIZON),
        first_key,
        r,
        scan.split,
        b.base_offset,
    )
    per_batch = [payload[s:e].tobytes() for s, e in zip(o_start, o_end, strict=True)]
    return per_batch, new_base.tolist(), new_max.tolist(), kept.tolist(), flags.tolist()


def _pack_args(scan, keep):
    idx = packable(scan)
    bounds = np.searchsorted(scan.records.batch_index, np.arange(len(scan.batches) + 1))
    return (
        scan.side,
        np.int64(scan.split),
        bounds[idx].astype(np.int64),
        bounds[idx + 1].astype(np.int64),
        keep,
        scan.records.key_pos.copy(),
        scan.records.key_len,
        scan.records.value_pos.copy(),
        scan.records.value_len,
        np.zeros(len(scan.side) + 1, np.uint8),
        True,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments())
def test_packed_scan_rebuilds_the_same_and_kernel_equals_reference(seg):
    raw, keep = seg
    scan = scan_segment(np.frombuffer(raw, dtype=np.uint8))
    if packable(scan) is not None:
        fast, ref = _pack_args(scan, keep), _pack_args(scan, keep)
        # counted only: the same bytes used, nothing written
        counted = (*_pack_args(scan, keep)[:-1], False)
        untouched = [np.array(a, copy=True) for a in counted]
        assert pack_records(*counted) == pack_records_py(*counted)
        for a, b in zip(counted, untouched, strict=True):
            np.testing.assert_array_equal(np.asarray(a), b)
        got, want = pack_records(*fast), pack_records_py(*ref)
        assert got == want and got[0] == 0 and pack_records(*counted) == got
        for a, b in zip(fast, ref, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    packed = pack_side(scan, keep)
    if packed is None:  # all plain, or all kept
        assert not len(scan.side) or keep.all()
        return
    assert len(packed.side) <= len(scan.side)
    assert held_bytes(packed.side) == len(packed.side)  # its own allocation, of exactly what it holds
    assert rebuild_all(packed, keep) == rebuild_all(scan, keep)
    dropped = ~keep & (scan.records.key_pos >= scan.split)
    last_of_batch = np.r_[scan.records.batch_index[1:] != scan.records.batch_index[:-1], True]
    assert (packed.records.key_pos[dropped & ~last_of_batch] == FAR).all()


def _mixed_segment() -> bytes:
    recs = [fb.Record(i, 100 + i, b"k%d" % (i % 3), b"v" * 50, (("h", b"x"),)) for i in range(12)]
    return b"".join(
        [
            build_batch(recs[:6], base_offset=0, codec=4),
            build_batch(recs[6:9], base_offset=6, codec=0),
            build_batch(recs[9:], base_offset=9, codec=1),
        ]
    )


def test_packing_drops_the_records_not_kept():
    scan = scan_segment(np.frombuffer(_mixed_segment(), dtype=np.uint8))
    keep = np.zeros(12, bool)
    keep[[2, 7, 10]] = True
    packed = pack_side(scan, keep)
    # Batch 0 keeps record 2 and its last (5), batch 2 keeps 10 and its last (11); the plain batch's
    # records stay where they are in the file.
    copied = [i for i in range(12) if packed.records.key_pos[i] != FAR]
    assert copied == [2, 5, 6, 7, 8, 10, 11]
    assert packed.records.key_pos[6:9].tolist() == scan.records.key_pos[6:9].tolist()
    for i in (2, 5, 10, 11):
        assert packed.key(i) == scan.key(i) and packed.value(i) == scan.value(i)
    assert len(packed.side) < len(scan.side) / 2
    assert rebuild_all(packed, keep) == rebuild_all(scan, keep)


def test_a_record_left_out_cannot_be_rebuilt():
    scan = scan_segment(np.frombuffer(_mixed_segment(), dtype=np.uint8))
    keep = np.zeros(12, bool)
    keep[2] = True
    packed = pack_side(scan, keep)
    keep[3] = True  # a decision wider than the packing's: a layout error, not other bytes
    with pytest.raises(RebuildError):
        rebuild_all(packed, keep)


def test_transactional_control_and_legacy_segments_are_not_packed():
    recs = [fb.Record(0, 1, b"k", b"v"), fb.Record(1, 2, b"k", b"w")]
    txn = build_batch(recs, codec=3, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    plain = build_batch(recs, codec=0)
    for raw in (txn, plain):
        scan = scan_segment(np.frombuffer(raw, dtype=np.uint8))
        assert packable(scan) is None and pack_side(scan, np.zeros(2, bool)) is None
    legacy = build_legacy_message_set(recs, magic=1, codec=1) + build_batch(
        [fb.Record(2, 3, b"k", b"x")], base_offset=2, codec=1
    )
    scan = scan_segment(np.frombuffer(legacy, dtype=np.uint8))
    assert len(scan.side) and packable(scan) is None


def test_columns_that_do_not_match_the_bytes_fail_naming_the_batch():
    scan = scan_segment(np.frombuffer(_mixed_segment(), dtype=np.uint8), path="/x/00.log")
    moved = dataclasses.replace(scan.records, value_pos=scan.records.value_pos + 3)
    with pytest.raises(CorruptRecordError, match="layout") as info:
        pack_side(dataclasses.replace(scan, records=moved), np.zeros(12, bool))
    compressed = scan.batches.position[scan.batches.codec != 0].tolist()
    assert info.value.path == "/x/00.log" and info.value.position in compressed


def test_a_reused_side_buffer_holds_nothing_of_the_segment_before(monkeypatch):
    """Segments decompressed one after another into the same pool buffer: each scan, packed or
    not, reads exactly what a scan into fresh memory reads, and the packed side holds none of the
    pool's bytes (it is held past the next segment's decompression)."""
    from compaction.kernels import scan_paths

    pool = BufferPool()
    monkeypatch.setattr(scan_paths, "POOL", pool)
    monkeypatch.setattr(scan_paths, "POOLED_MIN_BYTES", 0)
    big = [fb.Record(i, 100 + i, b"k%d" % i, bytes([65 + i % 26]) * 3000) for i in range(40)]
    small = [fb.Record(i, 100 + i, b"k%d" % (i % 4), b"v%d" % i, (("h", b"x"),)) for i in range(9)]
    first = build_batch(big, base_offset=0, codec=3)
    second = build_batch(small[:5], base_offset=0, codec=3) + build_batch(small[5:], base_offset=5, codec=4)
    keep = np.array([False, True, False, False, False, True, True, False, True])
    scan_a = scan_segment(np.frombuffer(first, dtype=np.uint8))
    del scan_a  # its buffers are free again
    written = {view.ctypes.data: view for _, view in pool._entries}
    scan_b = scan_segment(np.frombuffer(second, dtype=np.uint8))
    used = scan_b.side.ctypes.data
    # the same pages, the first segment's bytes past the second's end
    assert used in written and written[used][len(scan_b.side) : 120_000].any()
    monkeypatch.setattr(scan_paths, "POOLED_MIN_BYTES", 1 << 40)
    fresh = scan_segment(np.frombuffer(second, dtype=np.uint8))
    assert scan_b.side.tobytes() == fresh.side.tobytes()
    for i in range(9):
        assert scan_b.key(i) == fresh.key(i) and scan_b.value(i) == fresh.value(i)
    packed = pack_side(scan_b, keep)
    assert packed.side.ctypes.data != used and held_bytes(packed.side) == len(packed.side)
    assert rebuild_all(packed, keep) == rebuild_all(fresh, keep)


def test_the_scan_cache_counts_the_whole_buffer_a_scan_holds(monkeypatch):
    """A scan whose side is a view of a pool buffer holds all of it: the cache's bound counts the
    buffer, not the view; the packed scan holds only its own bytes and fits."""
    from compaction.kernels import scan_paths
    from compaction.steps.scan import ScanCache

    monkeypatch.setattr(scan_paths, "POOL", BufferPool())
    monkeypatch.setattr(scan_paths, "POOLED_MIN_BYTES", 0)
    scan = scan_segment(np.frombuffer(_mixed_segment(), dtype=np.uint8))
    assert held_bytes(scan.side) >= 8 << 20 > 1000 > len(scan.side)
    keep = np.zeros(12, bool)
    keep[[2, 7, 10]] = True
    packed = pack_side(scan, keep)
    cache = ScanCache(1 << 20)
    assert not cache.offer(0, 0, scan, reread=True) and cache.held == 0
    assert cache.offer(0, 0, packed, reread=True) and cache.held < 4096


# (batch attributes, records decompressed, codecs kept) -> whether the scan is offered to the cache
@pytest.mark.parametrize(
    "attributes, decompressed, codecs, expected",
    [
        ([], False, set(), True),
        ([CODEC_NONE, TIMESTAMP_TYPE_MASK], False, set(), True),  # uncompressed: columns only
        ([CODEC_LZ4], True, {"gzip", "zstd"}, False),
        ([CODEC_ZSTD], True, {"gzip", "zstd"}, True),
        ([CODEC_LZ4 | TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK], True, {"lz4"}, True),  # the codec bits only
        ([CODEC_LZ4 | TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK], True, {"zstd"}, False),
        ([CODEC_NONE, CODEC_LZ4], True, {"lz4"}, True),
        ([CODEC_NONE, CODEC_LZ4], True, {"gzip"}, False),
        ([CODEC_GZIP, CODEC_LZ4], True, {"gzip"}, True),  # what the gzip batches save is worth it
        ([CODEC_SNAPPY], True, {"gzip", "snappy", "lz4", "zstd"}, True),
        ([CODEC_SNAPPY], True, set(), False),
    ],
)
def test_which_scans_are_worth_keeping(attributes, decompressed, codecs, expected):
    from compaction.steps.scan import worth_keeping

    attrs = np.array(attributes, dtype=np.int16)
    assert worth_keeping(attrs, decompressed, frozenset(codecs)) is expected


def test_a_full_scan_cache_displaces_the_least_worth_per_byte_first():
    """Kept scans of a lower worth per byte than an offer that does not fit go, lowest first,
    until it fits, each reported; none go when they cannot make the room, nor for an offer of a
    lower density; a displaced scan is a miss."""
    from compaction.steps.scan import ScanCache

    scan = scan_segment(np.frombuffer(_mixed_segment(), dtype=np.uint8))
    n = ScanCache.footprint(scan)
    cache = ScanCache(3 * n)
    gone = []
    offer = lambda key, worth: cache.offer(0, key, scan, worth=worth, displaced=lambda g, b: gone.append(b))  # noqa: E731
    assert offer(1, 30) and offer(2, 10) and offer(3, 20) and cache.held == 3 * n
    assert not offer(4, 10) and not offer(4, 5) and not gone  # no denser than the least dense
    assert offer(4, 15) and gone == [2] and cache.held == 3 * n
    cache.max_bytes = 2 * n
    # room for one more at 2n: 4 (15) and 3 (20), both less dense than 25, go; 1 (30) stays
    assert offer(5, 25) and gone == [2, 4, 3] and cache.held == 2 * n
    assert cache.take(0, 2) is None and cache.take(0, 3) is None and cache.take(0, 1) is not None
    cache = ScanCache(3 * n)
    assert offer(1, 30) and offer(2, 10) and offer(3, 20)
    assert offer(4, 40) and gone == [2, 4, 3, 2]  # the room of one: the least dense goes, alone
    cache = ScanCache(2 * n)
    assert offer(1, 10) and offer(2, 100)
    cache.max_bytes = n  # room only by dropping both, and 2 is denser than the offer: none goes
    assert not offer(3, 50) and gone == [2, 4, 3, 2] and cache.held == 2 * n


def test_a_packed_side_takes_no_pool_buffer_far_bigger_than_itself(monkeypatch):
    """A free pool buffer many times the packed side's size (a previous segment's whole side)
    is not used for it: the scan cache would count all of it (held_bytes)."""
    from compaction.kernels import sidepack

    pool = BufferPool()
    monkeypatch.setattr(sidepack, "POOL", pool)
    monkeypatch.setattr(sidepack, "POOLED_MIN_BYTES", 0)
    scan = scan_segment(np.frombuffer(_mixed_segment(), dtype=np.uint8))
    keep = np.zeros(12, bool)
    keep[[2, 7, 10]] = True
    free = pool.take(64 << 20)
    free_at = free.ctypes.data
    del free
    packed = pack_side(scan, keep)
    assert packed.side.ctypes.data != free_at and held_bytes(packed.side) < 9 << 20
    del packed
    # one of its own size class is reused
    again = pack_side(scan, keep)
    assert held_bytes(again.side) < 9 << 20 and len(pool._entries) == 2
