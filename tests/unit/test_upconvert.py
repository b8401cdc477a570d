"""kernels/upconvert.py (kept v0/v1 messages re-encoded as v2 batches by one kernel call) against
`build_batch` and kafka-python, and the rewrite of legacy segments (messages decided vectorised,
wrappers batch by batch) against Kafka's rules applied message by message."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest
from e2ekit import SHARED_FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords
from test_legacywalk import message_sets
from test_rewrite_unit import NOW, RETENTION, Log, clean

from compaction.format import batch as fb
from compaction.format.batch_build import build_batch
from compaction.format.legacy import LegacyBatch, build_legacy_message_set
from compaction.kernels.scan import scan_batches, scan_segment
from compaction.kernels.upconvert import convert_messages, convert_messages_py

PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def u8(data) -> np.ndarray:
    return np.frombuffer(bytes(data), dtype=np.uint8)


@PROPERTY
@given(message_sets(), st.data())
def test_kernel_writes_what_build_batch_writes(log, data):
    """Messages read in place and from a wrapper's decompressed contents (the side buffer)."""
    s = scan_segment(u8(log), "legacy.log")
    n = len(s.records)
    rec = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n))), dtype=np.int64)
    lat = np.array(data.draw(st.lists(st.booleans(), min_size=len(rec), max_size=len(rec))), dtype=bool)
    horizon = np.array(
        data.draw(
            st.lists(st.sampled_from([-1, -1, 0, NOW + RETENTION]), min_size=len(rec), max_size=len(rec))
        ),
        dtype=np.int64,
    )
    got = convert_messages(s.file, s.side, s.split, rec, s.records, lat, horizon)
    want = convert_messages_py(s.file, s.side, s.split, rec, s.records, lat, horizon)
    for a, b in zip(got, want, strict=True):
        assert a.tolist() == b.tolist()
    batches = scan_batches(got[0])
    assert (
        batches.stop_position == len(got[0]) and (batches.position + batches.size).tolist() == got[1].tolist()
    )
    decoded = [(r.offset, r.key, r.value) for b in _kp_batches(got[0]) for r in b]
    assert decoded == [(int(s.records.offset[r]), s.key(r), s.value(r)) for r in rec.tolist()]


def _kp_batches(data):
    records = MemoryRecords(bytes(data))
    while records.has_next():
        yield records.next_batch()


def test_golden_v2_batch_of_a_v0_message():
    """A v0 message kept as a tombstone with a delete horizon: every header byte written out."""
    log = build_legacy_message_set([fb.Record(42, -1, b"k", None)], 0)
    s = scan_segment(u8(log), "g.log")
    data, ends, max_ts = convert_messages(
        s.file, s.side, s.split, np.array([0]), s.records, np.array([False]), np.array([1000])
    )
    expected = bytes.fromhex(
        "000000000000002a"  # baseOffset 42
        "0000003a"  # batchLength 58: 61 - 12 + the record's 9 bytes
        "ffffffff"  # partitionLeaderEpoch -1
        "02"  # magic
        + data[17:21].tobytes().hex()  # crc, checked below
        + "0040"  # attributes: delete horizon bit
        "00000000"  # lastOffsetDelta
        "00000000000003e8"  # baseTimestamp = horizon 1000
        "ffffffffffffffff"  # maxTimestamp -1
        "ffffffffffffffff"
        "ffff"
        "ffffffff"  # producer id, epoch, base sequence
        "00000001"  # recordsCount
        "10"  # record length 8
        "00"  # attributes
        "d10f"  # timestampDelta -1 - 1000 = -1001: zig-zag 2001
        "00"  # offsetDelta
        "02"
        "6b"  # key length 1, "k"
        "01"  # value length -1
        "00"  # headers
    )
    assert data.tobytes() == expected and ends.tolist() == [len(expected)] and max_ts.tolist() == [-1]
    assert fb.RecordBatch(expected).crc_valid()
    assert expected == build_batch([fb.Record(42, -1, b"k", None)], delete_horizon_ms=1000)


# --- the rewrite of legacy segments ------------------------------------------------------------------


def expected_cleaned(log: bytes, latest: dict, upper_bound: int, retain_deletes: bool) -> bytes:
    """Kafka's rules message by message (`shouldRetainRecord`, `filterTo` with KIP-724): the kept
    records of each legacy batch rebuilt as one v2 batch with `build_batch`."""
    b = scan_batches(u8(log))
    out = b""
    for pos, size in zip(b.position.tolist(), b.size.tolist(), strict=True):
        batch = LegacyBatch(log[pos : pos + size], pos)
        kept = [
            r
            for r in batch.records()
            if r.key is not None
            and r.offset >= latest.get(r.key, -1)
            and (r.value is not None or retain_deletes)
        ]
        if not kept:
            if batch.last_offset + 1 == upper_bound:
                raise ValueError("cannot keep an empty batch of a legacy magic")
            continue
        h = batch.header
        lat = h.magic == 1 and h.timestamp_type == fb.LOG_APPEND_TIME
        tomb = any(r.value is None for r in kept)
        out += build_batch(
            kept,
            codec=h.attributes & fb.COMPRESSION_CODEC_MASK,
            timestamp_type=fb.LOG_APPEND_TIME if lat else fb.CREATE_TIME,
            delete_horizon_ms=NOW + RETENTION if tomb else None,
            log_append_time=h.max_timestamp if lat else None,
        )
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_sets(), st.data(), st.booleans())
def test_rewrite_of_legacy_segments_follows_kafkas_rules_message_by_message(log, data, retain_deletes):
    s = scan_segment(u8(log), "x.log")
    keys = sorted({s.key(i) for i in range(len(s.records)) if s.key(i) is not None})
    latest = {}
    for k in keys:  # the latest offset of the key, or an older / newer one, or absent
        offsets = [int(s.records.offset[i]) for i in range(len(s.records)) if s.key(i) == k]
        choice = data.draw(st.sampled_from(["latest", "latest", "first", "absent", "beyond"]))
        if choice != "absent":
            latest[k] = {"latest": max(offsets), "first": min(offsets), "beyond": max(offsets) + 1}[choice]
    upper_bound = int(s.batches.last_offset.max()) + 1
    with tempfile.TemporaryDirectory() as tmp:
        store = Log(Path(tmp))
        seg = store.segment(int(s.batches.base_offset.min()), [log])
        spec = dataclasses.replace(
            store.spec([seg], upper_bound=upper_bound),
            legacy_delete_horizon_ms=0 if retain_deletes else NOW * 2,
        )
        try:
            want = expected_cleaned(log, latest, upper_bound, retain_deletes)
        except ValueError:
            with pytest.raises(ValueError, match="empty batch"):
                clean([spec], latest)
            return
        clean([spec], latest)
        assert store.read(spec.new_base, ".cleaned") == want


def test_a_run_of_converted_messages_is_written_between_other_batches(tmp_path):
    """Messages, a wrapper, messages: three runs, the index columns of each in order."""
    recs = [fb.Record(o, 100 + o, b"k%d" % o, b"v" * 30) for o in range(12)]
    log = (
        build_legacy_message_set(recs[:5], 1)
        + build_legacy_message_set(recs[5:8], 1, 1)
        + build_legacy_message_set(recs[8:], 0)
    )
    store = Log(tmp_path)
    seg = store.segment(0, [log])
    spec = store.spec([seg])
    row = clean([spec], {r.key: r.offset for r in recs})[0]
    cleaned = store.read(0, ".cleaned")
    assert cleaned == expected_cleaned(log, {r.key: r.offset for r in recs}, 12, True)
    assert row.records_written == 12 and row.batches_written == 10 and row.bytes_written == len(cleaned)
    b = scan_batches(u8(cleaned))
    assert b.last_offset.tolist() == [0, 1, 2, 3, 4, 7, 8, 9, 10, 11]
    assert b.max_timestamp.tolist() == [100, 101, 102, 103, 104, 107, -1, -1, -1, -1]


V09 = Path(SHARED_FIXTURES, "kafka-0.9.0.1", "kafka-logs")
V09_LOGS = sorted(p for p in V09.rglob("*.log") if p.stat().st_size > 0)


def test_v09_fixtures_present():
    assert len(V09_LOGS) >= 10


@pytest.mark.parametrize("path", V09_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_broker_written_v0_segments_are_cleaned_by_kafkas_rules(tmp_path, path):
    """Kafka 0.9.0.1's own segments (copied): the latest record of each key kept, as v2."""
    log = path.read_bytes()
    s = scan_segment(u8(log), str(path))
    latest = {}
    for i in range(len(s.records)):
        if s.key(i) is not None:
            latest[s.key(i)] = int(s.records.offset[i])
    upper_bound = int(s.batches.last_offset.max()) + 1
    store = Log(tmp_path)
    seg = store.segment(int(s.batches.base_offset.min()), [log])
    spec = store.spec([seg], upper_bound=upper_bound)
    clean([spec], latest)
    cleaned = store.read(spec.new_base, ".cleaned")
    assert cleaned == expected_cleaned(log, latest, upper_bound, True)
    assert sorted(r.key for _, recs, _ in _v2_batches(cleaned) for r in recs) == sorted(latest)


def _v2_batches(data: bytes):
    pos = 0
    while pos < len(data):
        h = fb.BatchHeader.unpack_from(data, pos)
        yield h, fb.RecordBatch(data[pos : pos + h.size]).records(), None
        pos += h.size
