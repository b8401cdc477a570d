"""compaction/kernels/rebuild.py: the numba re-encoder and its Python reference against build_batch.

Property: for random v2 batches (codecs, headers, null keys/values, negative timestamp deltas,
LogAppendTime, existing and new delete horizons, producer fields, offset gaps, forced
lastOffsetDelta), several per segment, scanned with scan_segment and rebuilt in one kernel call
with a random keep mask, `header_for` + `seal` over the kernel's payload gives exactly the bytes
`build_batch` gives for the retained records decoded by `RecordBatch.records()`; the plain-Python
reference returns the same arrays as the kernel. Input batches may use over-long (non-canonical)
varints, which Kafka's reader accepts and its writer never produces.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.errors import RebuildError
from compaction.format import batch as fb
from compaction.format import compression
from compaction.format.batch_build import _seal, build_batch
from compaction.kernels.rebuild import (
    NEEDS_FALLBACK,
    NO_HORIZON,
    SRC_FILE,
    SRC_SIDE,
    header_for,
    headers_for,
    rebuild_records,
    rebuild_records_py,
    record_regions,
    seal,
    seal_plain,
)
from compaction.kernels.rebuild_kernels import _valid_utf8
from compaction.kernels.scan import scan_segment

# --- random batches ------------------------------------------------------------------------------

_bytes = st.one_of(st.none(), st.binary(max_size=40))
_headers = st.lists(st.tuples(st.text(max_size=8), _bytes), max_size=3).map(tuple)


@st.composite
def batch_specs(draw):
    n = draw(st.integers(1, 12))
    base_offset = draw(st.integers(0, 2**40))
    gaps = draw(st.lists(st.integers(1, 300), min_size=n - 1, max_size=n - 1))
    offsets = [base_offset + draw(st.integers(0, 5))]
    for g in gaps:
        offsets.append(offsets[-1] + g)
    t0 = draw(st.integers(-(2**40), 2**45))
    stamps = [t0 + draw(st.integers(-(10**9), 10**9)) for _ in range(n)]  # negative deltas too
    records = [
        fb.Record(o, t, draw(_bytes), draw(_bytes), draw(_headers))
        for o, t in zip(offsets, stamps, strict=True)
    ]
    ts_type = draw(st.sampled_from([fb.CREATE_TIME, fb.LOG_APPEND_TIME]))
    pid = draw(st.sampled_from([-1, draw(st.integers(0, 2**40))]))
    control = draw(st.booleans())
    kw = dict(
        base_offset=base_offset,
        codec=draw(st.integers(0, 4)),
        timestamp_type=ts_type,
        producer_id=pid,
        producer_epoch=-1 if pid < 0 else draw(st.integers(0, 300)),
        base_sequence=-1 if pid < 0 else draw(st.integers(0, 2**31 - 1)),
        is_transactional=pid >= 0 and draw(st.booleans()),
        is_control=control,
        partition_leader_epoch=draw(st.integers(-1, 2**31 - 1)),
        delete_horizon_ms=draw(st.one_of(st.none(), st.integers(0, 2**45))),
        last_offset_delta=offsets[-1] - base_offset + draw(st.sampled_from([0, 0, 1, 7])),
        log_append_time=draw(st.integers(0, 2**45)) if ts_type == fb.LOG_APPEND_TIME else None,
    )
    keep = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    new_horizon = draw(st.one_of(st.none(), st.integers(0, 2**45)))
    return records, kw, keep, new_horizon


def expected_rebuild(raw: bytes, keep: list[bool], new_horizon: int | None) -> bytes | None:
    """What `emit._rebuild` does for a batch the kernel leaves out: build_batch over the decoded retained
    records."""
    batch = fb.RecordBatch(raw)
    h = batch.header
    records = [r for r, k in zip(batch.records(), keep, strict=True) if k]
    if not records:
        return None
    return build_batch(
        records,
        base_offset=h.base_offset,
        codec=h.codec,
        timestamp_type=h.timestamp_type,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        partition_leader_epoch=h.partition_leader_epoch,
        delete_horizon_ms=new_horizon if new_horizon is not None else h.delete_horizon_ms,
        last_offset_delta=h.last_offset_delta,
        log_append_time=h.max_timestamp if h.timestamp_type == fb.LOG_APPEND_TIME else None,
    )


def run_both(segment: bytes, keeps: list[list[bool]], horizons: list[int | None], room: int = 0):
    """Scan the segment, rebuild every batch in one call with the kernel and the reference."""
    scan = scan_segment(np.frombuffer(segment, dtype=np.uint8))
    b, r = scan.batches, scan.records
    src, start, end = record_regions(scan)
    bounds = np.searchsorted(r.batch_index, np.arange(len(b.position) + 1))
    count = np.diff(bounds)
    keep = np.concatenate([np.asarray(k, dtype=bool) for k in keeps]) if keeps else np.zeros(0, bool)
    assert len(keep) == len(r.offset)
    eff = [
        h
        if h is not None
        else (int(b.base_timestamp[i]) if int(b.attributes[i]) & fb.DELETE_HORIZON_MASK else NO_HORIZON)
        for i, h in enumerate(horizons)
    ]
    first_key = np.where(
        count > 0,
        r.key_pos[np.minimum(bounds[:-1], max(len(r.key_pos) - 1, 0))] if len(r.key_pos) else -1,
        -1,
    )
    first_key = np.where(src == SRC_SIDE, first_key - scan.split, first_key)
    args = (
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
        np.asarray(eff, dtype=np.int64),
        first_key,
        r,
        scan.split,
        b.base_offset,
    )
    fast = rebuild_records(*args, room=room)
    ref = rebuild_records_py(*args, room=room)
    return scan, fast, ref, eff


def sealed(scan, fast, eff, i) -> bytes | None:
    payload, out_start, out_end, new_base, new_max, kept, _ = fast
    if kept[i] == 0:
        return None
    b = scan.batches
    header = header_for(
        base_offset=int(b.base_offset[i]),
        partition_leader_epoch=int(b.partition_leader_epoch[i]),
        attributes=int(b.attributes[i]),
        last_offset_delta=int(b.last_offset[i] - b.base_offset[i]),
        base_timestamp=int(new_base[i]),
        max_timestamp=int(new_max[i]),
        producer_id=int(b.producer_id[i]),
        producer_epoch=int(b.producer_epoch[i]),
        base_sequence=int(b.base_sequence[i]),
        records_count=int(kept[i]),
        horizon=eff[i],
    )
    codec = int(b.attributes[i]) & fb.COMPRESSION_CODEC_MASK
    head, body = seal(header, payload[out_start[i] : out_end[i]], codec)
    return bytes(head) + bytes(body)


def assert_same(fast, ref) -> None:
    for a, e in zip(fast, ref, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.lists(batch_specs(), min_size=1, max_size=4))
def test_kernel_and_reference_equal_build_batch(specs):
    raws = [build_batch(records, **kw) for records, kw, _, _ in specs]
    scan, fast, ref, eff = run_both(b"".join(raws), [s[2] for s in specs], [s[3] for s in specs])
    assert_same(fast, ref)
    assert not fast[6].any()  # every header key came from a str: valid UTF-8
    for i, (raw, (_, _, keep, horizon)) in enumerate(zip(raws, specs, strict=True)):
        assert sealed(scan, fast, eff, i) == expected_rebuild(raw, keep, horizon)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.lists(batch_specs(), min_size=1, max_size=4))
def test_batches_sealed_in_the_room_before_their_records_equal_build_batch(specs):
    """rebuild_records(room=61) + seal_plain: each uncompressed kept batch is whole in the buffer."""
    raws = [build_batch(records, **kw) for records, kw, _, _ in specs]
    room = fb.RECORD_BATCH_OVERHEAD
    scan, fast, ref, eff = run_both(b"".join(raws), [s[2] for s in specs], [s[3] for s in specs], room)
    assert_same(fast[1:], ref[1:])  # the room's bytes are the kernel's to leave as they are
    payload, o_start, o_end, new_base, new_max, kept, _ = fast
    assert all(payload[a:e].tobytes() == ref[0][a:e].tobytes() for a, e in zip(o_start, o_end, strict=True))
    assert list(o_start) == list(np.concatenate([[0], o_end[:-1]]) + room)
    b = scan.batches
    plain = np.array(
        [i for i in range(len(raws)) if kept[i] and not b.attributes[i] & fb.COMPRESSION_CODEC_MASK],
        dtype=np.int64,
    )
    headers = headers_for(
        base_offset=b.base_offset[plain],
        partition_leader_epoch=b.partition_leader_epoch[plain],
        attributes=b.attributes[plain].astype(np.int64),
        last_offset_delta=(b.last_offset - b.base_offset)[plain],
        base_timestamp=new_base[plain],
        max_timestamp=new_max[plain],
        producer_id=b.producer_id[plain],
        producer_epoch=b.producer_epoch[plain],
        base_sequence=b.base_sequence[plain],
        records_count=kept[plain],
        horizon=np.asarray(eff, np.int64)[plain],
    )
    data = payload.copy()
    seal_plain(headers, data, o_start[plain], o_end[plain])
    for i in plain.tolist():
        whole = data[o_start[i] - room : o_end[i]].tobytes()
        assert whole == sealed(scan, fast, eff, i) == expected_rebuild(raws[i], specs[i][2], specs[i][3])


# --- input written with over-long varints --------------------------------------------------------


def _varint(v: int, pad: int, bits: int = 32) -> bytes:
    z = ((v << 1) ^ (v >> (bits - 1))) & ((1 << bits) - 1)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    limit = 5 if bits == 32 else 10
    for _ in range(min(pad, limit - len(out))):  # 0x80 continuation bytes carrying zeros
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def padded_record(rec: fb.Record, base_offset: int, base_ts: int, pads, raw_header_keys=None) -> bytes:
    pad = iter(pads)
    body = bytearray(b"\x07")  # record attributes: Kafka ignores them; the rebuild writes 0
    body += _varint(rec.timestamp - base_ts, next(pad), 64)
    body += _varint(rec.offset - base_offset, next(pad))
    for data in (rec.key, rec.value):
        body += _varint(-1 if data is None else len(data), next(pad)) + (data or b"")
    body += _varint(len(rec.headers), next(pad))
    for j, (name, value) in enumerate(rec.headers):
        key = raw_header_keys[j] if raw_header_keys else name.encode()
        body += _varint(len(key), next(pad)) + key
        body += _varint(-1 if value is None else len(value), next(pad)) + (value or b"")
    return _varint(len(body), next(pad)) + bytes(body)


def plain_batch(records: list[fb.Record], payload: bytes, base_offset: int, base_ts: int) -> bytes:
    header = fb.BatchHeader(
        base_offset,
        0,
        -1,
        2,
        0,
        0,
        records[-1].offset - base_offset,
        base_ts,
        max(r.timestamp for r in records),
        -1,
        -1,
        -1,
        len(records),
    )
    return _seal(header, payload)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_specs(), st.lists(st.integers(0, 3), min_size=200, max_size=200), st.integers(0, 4))
def test_non_canonical_varints_are_rewritten_shortest(spec, pads, codec):
    records, kw, keep, horizon = spec
    base_offset, base_ts = kw["base_offset"], records[0].timestamp
    pad = iter(pads * 10)
    payload = b"".join(
        padded_record(r, base_offset, base_ts, [next(pad) for _ in range(30)]) for r in records
    )
    raw = plain_batch(records, payload, base_offset, base_ts)
    if codec:  # same records, compressed: the regions then live in the side buffer
        h = fb.BatchHeader.unpack_from(raw)
        h.attributes = codec
        raw = _seal(h, compression.compress(codec, payload))
    scan, fast, ref, eff = run_both(raw, [keep], [horizon])
    assert_same(fast, ref)
    assert sealed(scan, fast, eff, 0) == expected_rebuild(raw, keep, horizon)


def test_invalid_utf8_header_key_asks_for_fallback():
    recs = [fb.Record(10, 1000, b"k", b"v", (("x", b"1"),)), fb.Record(11, 1001, b"k2", None, (("y", None),))]
    payload = padded_record(recs[0], 10, 1000, [0] * 30, [b"\xff\xfe"])
    payload += padded_record(recs[1], 10, 1000, [0] * 30)
    raw = plain_batch(recs, payload, 10, 1000)
    _, fast, ref, _ = run_both(raw, [[True, True]], [None])
    assert fast[6][0] == NEEDS_FALLBACK and ref[6][0] == NEEDS_FALLBACK
    _, fast, ref, _ = run_both(raw, [[False, True]], [None])  # the bad key is not retained
    assert fast[6][0] == 0 and ref[6][0] == 0


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=12))
def test_valid_utf8_matches_python(data):
    try:
        data.decode("utf-8")
        ok = True
    except UnicodeDecodeError:
        ok = False
    buf = np.frombuffer(b"\x00" + data + b"\xe0", dtype=np.uint8)  # bytes around must not be read
    assert _valid_utf8(buf, 1, len(data)) == ok


def test_layout_mismatch_raises():
    raw = build_batch([fb.Record(0, 5, b"a", b"b"), fb.Record(1, 6, b"c", b"d")])
    scan = scan_segment(np.frombuffer(raw, dtype=np.uint8))
    src, start, end = record_regions(scan)
    assert src.tolist() == [SRC_FILE] and start.tolist() == [61] and end.tolist() == [len(raw)]
    common = (np.ones(2, bool), [0], [5], [0], [6], [NO_HORIZON])
    cols = (scan.records, scan.split, [0])
    for fn in (rebuild_records, rebuild_records_py):
        with pytest.raises(RebuildError):  # one record too few: bytes left at the end
            fn(scan.file, scan.side, src, start, end, [1], *common, [-1], *cols)
        with pytest.raises(RebuildError):  # wrong first key position
            fn(scan.file, scan.side, src, start, end, [2], *common, [70], *cols)
    # Columns that do not match the bytes (the kernel reads records where they say).
    for field, delta in (("value_pos", 1), ("value_pos", -1), ("key_pos", -60)):
        moved = dataclasses.replace(scan.records, **{field: getattr(scan.records, field) + delta})
        with pytest.raises(RebuildError):
            rebuild_records(scan.file, scan.side, src, start, end, [2], *common, [-1], moved, scan.split, [0])
