"""kernels/scan.py: numba kernels vs the plain-Python reference vs kafka-python (an independent decoder),
real broker data, and typed errors with byte positions for corrupt input."""

from __future__ import annotations

import os
import struct
import sys
import tempfile
import types
from pathlib import Path

import cramjam
import crc32c
import numpy as np
import pyarrow as pa
import pytest
from e2ekit import SHARED_FIXTURES
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from compaction.errors import (
    CorruptRecordError,
    CrcMismatchError,
    KafkaFormatError,
    TruncatedBatchError,
    UnsupportedCodecError,
)
from compaction.kernels import scan_paths
from compaction.kernels.scan import (
    BATCH_FIELDS,
    ERR_BAD_VARINT,
    ERR_COUNT_MISMATCH,
    ERR_NEGATIVE_LENGTH,
    ERR_OK,
    ERR_RECORD_SIZE,
    ERR_TRUNCATED,
    RECORD_FIELDS,
    STOP_CORRUPT,
    STOP_END,
    STOP_PARTIAL,
    gather_keys,
    scan_batches,
    scan_batches_py,
    scan_segment,
    walk_records,
    walk_records_py,
)
from compaction.runtime.storage import Storage
from compaction.steps.scan import batch_headers

FIXTURES = Path(SHARED_FIXTURES)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# kafka-python needs python-snappy for snappy; give it raw snappy blocks from cramjam (the xerial
# framing around them stays kafka-python's own code).
import kafka.codec as _kafka_codec  # noqa: E402

if not _kafka_codec.has_snappy():
    _kafka_codec.snappy = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
    )

# ... and the xxhash package to re-patch v0 LZ4 frames' header checksum (the 0.9.0.1 fixtures). Our
# xxh32 only computes that one byte; liblz4 verifies it, so a wrong value fails loudly, never silently.
if _kafka_codec.xxhash is None:
    from compaction.format.compression import xxh32 as _xxh32

    _kafka_codec.xxhash = types.SimpleNamespace(
        xxh32=lambda b: types.SimpleNamespace(digest=lambda: struct.pack(">I", _xxh32(bytes(b))))
    )

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------------------------------
# building logs with kafka-python (so the test data is not produced by the code under test)
# --------------------------------------------------------------------------------------------------


def kp_batch(base_offset, records, codec=0, *, log_append_time=None, producer=(-1, -1, -1)) -> bytes:
    """records: [(offset_delta, timestamp, key, value, headers)] -> one v2 batch."""
    builder = DefaultRecordBatchBuilder(2, codec, False, *producer, batch_size=1 << 30)
    for delta, ts, key, value, headers in records:
        builder.append(delta, ts, key, value, headers)
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base_offset)
    if log_append_time is not None:  # broker-assigned: attribute bit 3 and maxTimestamp, new CRC
        attrs = struct.unpack_from(">h", raw, 21)[0] | 0x08
        struct.pack_into(">h", raw, 21, attrs)
        struct.pack_into(">q", raw, 35, log_append_time)
        reseal(raw)
    return bytes(raw)


def reseal(raw: bytearray, pos: int = 0) -> None:
    size = struct.unpack_from(">i", raw, pos + 8)[0] + 12
    struct.pack_into(">I", raw, pos + 17, crc32c.crc32c(bytes(raw[pos + 21 : pos + size])))


def empty_batch(base_offset: int, last_delta: int, max_ts: int) -> bytes:
    """A 61-byte batch with no records, as the cleaner leaves behind (docs/kafka-rules.md#batch-v2-header)."""
    raw = bytearray(
        struct.pack(">qiibIhiqqqhii", base_offset, 49, -1, 2, 0, 0, last_delta, -1, max_ts, -1, -1, -1, 0)
    )
    reseal(raw)
    return bytes(raw)


def kp_decode(log: bytes) -> list[tuple]:
    """(offset, timestamp, key, value) of every record, by kafka-python."""
    out = []
    records = MemoryRecords(log)
    while records.has_next():
        batch = records.next_batch()
        for r in batch:
            ts = -1 if r.timestamp is None else r.timestamp  # v0: kafka-python None, Kafka NO_TIMESTAMP
            out.append((r.offset, ts, r.key, r.value))
    return out


def u8(data) -> np.ndarray:
    return np.frombuffer(bytes(data), dtype=np.uint8)


def assert_batches_equal(a, b) -> None:
    for f in BATCH_FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype, f
        np.testing.assert_array_equal(x, y, err_msg=f)
    assert (a.stop_position, a.stop_reason) == (b.stop_position, b.stop_reason)


def assert_records_equal(a, b) -> None:
    for f in RECORD_FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype, f
        np.testing.assert_array_equal(x, y, err_msg=f)
    assert (a.error_code, a.error_position, a.error_batch) == (b.error_code, b.error_position, b.error_batch)


def walk_args(batches):
    """walk_records arguments for every v2 batch of `batches`, records read in place."""
    v2 = np.flatnonzero(batches.magic == 2)
    return (
        batches.position[v2] + 61,
        batches.position[v2] + batches.size[v2],
        batches.base_offset[v2],
        batches.base_timestamp[v2],
        batches.timestamp_type[v2],
        batches.max_timestamp[v2],
        batches.records_count[v2],
    )


def seg_decode(s) -> list[tuple]:
    r = s.records
    return [(int(r.offset[i]), int(r.timestamp[i]), s.key(i), s.value(i)) for i in range(len(r))]


# --------------------------------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------------------------------

maybe_bytes = st.none() | st.binary(max_size=24)
headers = st.lists(st.tuples(st.text(max_size=4), maybe_bytes), max_size=3)
# offset deltas grow (gaps allowed, like a compacted batch); timestamps anywhere, deltas may be negative
record_lists = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 1 << 45), maybe_bytes, maybe_bytes, headers),
    min_size=1,
    max_size=8,
)


@st.composite
def batches_st(draw, codecs=(0,)):
    base = draw(st.integers(0, 1 << 50))
    kind = draw(st.sampled_from(["records", "records", "records", "empty"]))
    if kind == "empty":
        return empty_batch(base, draw(st.integers(0, 100)), draw(st.integers(-1, 1 << 45)))
    raw = draw(record_lists)
    delta, records = 0, []
    for gap, ts, key, value, hdrs in raw:
        records.append((delta, ts, key, value, hdrs))
        delta += 1 + gap
    lat = draw(st.none() | st.integers(0, 1 << 45))
    codec = draw(st.sampled_from(codecs))
    return kp_batch(base, records, codec, log_append_time=lat)


logs = st.lists(batches_st(), max_size=6).map(b"".join)


# --------------------------------------------------------------------------------------------------
# numba == reference == kafka-python on valid logs
# --------------------------------------------------------------------------------------------------


@PROPERTY
@given(logs)
def test_valid_logs_numba_reference_and_kafka_python_agree(log):
    buf = u8(log)
    nb, py = scan_batches(buf), scan_batches_py(buf)
    assert_batches_equal(nb, py)
    assert nb.stop_reason == STOP_END and nb.stop_position == len(log)
    rn, rp = walk_records(buf, *walk_args(nb)), walk_records_py(buf, *walk_args(nb))
    assert_records_equal(rn, rp)
    assert rn.error_code == ERR_OK
    s = scan_segment(buf, "valid.log")
    assert seg_decode(s) == kp_decode(log)
    # without recordsCount the region is read to its end: same records
    rn_nocount = walk_records(buf, *walk_args(nb)[:6])
    assert_records_equal(rn_nocount, rn)


def assert_keys_hashed(s) -> None:
    """`s.keys` holds every record's key (at its packed_offs entry) and keyhash's hash of it."""
    from compaction.kernels.keyhash import key_hash

    hashes, packed, offs = s.keys
    assert len(hashes) == len(s.records) and len(offs) == len(s.records) + 1
    for i in range(len(s.records)):
        key = s.key(i)
        assert bytes(packed[offs[i] : offs[i] + len(key or b"")]) == (key or b"")
        assert int(hashes[i]) == (0 if key is None else key_hash(np.frombuffer(key, np.uint8), 0, len(key)))


@PROPERTY
@given(logs, st.sampled_from([1, 64, 200, 1 << 20]))
def test_chunked_crc_and_walk_equal_one_walk_and_keys_hash_in_passing(log, chunk):
    """scan_segment checks CRCs and walks ~CHUNK_BYTES of batches at a time, and packs and hashes
    the keys as it goes: the same records as one walk_records over every batch, and the keys and
    hashes that keyhash gives for them one by one."""
    buf = u8(log)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scan_paths, "CHUNK_BYTES", chunk)
        s = scan_segment(buf, "chunks.log", hash_keys=True)
    assert_records_equal(s.records, walk_records(buf, *walk_args(scan_batches(buf))))
    assert_keys_hashed(s)


@PROPERTY
@given(
    st.lists(batches_st(codecs=(0, 1, 2, 3, 4)), min_size=1, max_size=6).map(b"".join),
    st.sampled_from([1, 64, 200, 1 << 20]),
    st.sampled_from([0, 1, scan_paths.SIDE_FIRST_RATIO]),
)
def test_compressed_batches_are_walked_and_hashed_chunk_by_chunk(log, chunk, first_ratio):
    """The decompressed records are walked ~CHUNK_BYTES at a time as they are written into the
    side buffer, which grows when it is first made too small for them (`first_ratio`): the same
    records as one scan does, in batch order with the plain batches' ones, and their keys hashed
    in passing."""
    buf = u8(log)
    whole = scan_segment(buf, "packed.log")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scan_paths, "CHUNK_BYTES", chunk)
        mp.setattr(scan_paths, "SIDE_FIRST_RATIO", first_ratio)
        s = scan_segment(buf, "packed.log", hash_keys=True)
    assert_records_equal(s.records, whole.records)
    assert seg_decode(s) == kp_decode(log)
    assert_keys_hashed(s)


@pytest.mark.parametrize("first_ratio", [0, 1])
def test_a_side_buffer_made_too_small_grows_keeping_what_it_holds(monkeypatch, first_ratio):
    """Batches of every codec decompressed straight into a side buffer first made smaller than
    they declare (lz4: a 64 KiB block each): it grows, and the records decoded before are intact."""
    log = b"".join(
        kp_batch(i * 10, [(j, 1, b"k%d" % j, b"v%d" % i * 20, []) for j in range(5)], codec)
        for i, codec in enumerate([3, 4, 3, 1, 2, 4])
    )
    monkeypatch.setattr(scan_paths, "SIDE_FIRST_RATIO", first_ratio)
    s = scan_segment(u8(log), "p.log", hash_keys=True)
    assert seg_decode(s) == kp_decode(log)
    assert_keys_hashed(s)


def test_keys_are_hashed_in_passing_for_every_kind_of_batch():
    from compaction.format.batch import Record
    from compaction.format.legacy import build_legacy_message_set

    plain = kp_batch(0, [(0, 1, b"a", b"1", [])])
    packed = kp_batch(1, [(i, 1, b"b", b"value " * 20, []) for i in range(50)], CODECS["gzip"])
    legacy = build_legacy_message_set([Record(51, 1, b"c", b"2"), Record(52, 1, None, b"3")], magic=1)
    wrapper = build_legacy_message_set(
        [Record(53 + i, 1, b"d%d" % i, b"4" * 40) for i in range(9)], 0, CODECS["gzip"]
    )
    mixed = scan_segment(u8(plain + packed), hash_keys=True)
    assert mixed.batches.codec.tolist() == [0, CODECS["gzip"]]
    assert_keys_hashed(mixed)
    every = scan_segment(u8(plain + packed + legacy + wrapper), hash_keys=True)
    assert every.batches.magic.tolist() == [2, 2, 1, 1, 0]
    assert len(every.records) == 62
    assert_keys_hashed(every)
    assert scan_segment(u8(plain)).keys is None


def test_a_crc_mismatch_in_a_later_chunk_wins_over_a_bad_record_before_it(monkeypatch):
    """As when every CRC was checked before any walk: the CRC error, wherever it is, is raised."""
    bad = bytearray(ONE)
    bad[61] = 0x7F  # the first record's length varint: now runs past the batch
    reseal(bad)
    raw = bytearray(bytes(bad) + TWO * 50)
    raw[-2] ^= 0xFF  # the last batch's CRC no longer matches
    monkeypatch.setattr(scan_paths, "CHUNK_BYTES", 100)
    with pytest.raises(CrcMismatchError) as e:
        scan_segment(u8(raw), "p/0.log")
    assert e.value.position == len(bad) + 49 * len(TWO)
    with pytest.raises(CorruptRecordError) as e:
        scan_segment(u8(raw), "p/0.log", verify_crc=False)
    assert e.value.position is not None and e.value.position < len(bad)


@PROPERTY
@given(st.lists(batches_st(codecs=(1, 2, 3, 4)), min_size=1, max_size=4).map(b"".join))
def test_compressed_logs_match_kafka_python(log):
    s = scan_segment(u8(log), "packed.log")
    assert seg_decode(s) == kp_decode(log)


@pytest.mark.parametrize("codec", list(CODECS))
def test_each_codec_matches_kafka_python_and_mixes_with_plain_batches(codec):
    c = CODECS[codec]
    big = [(i, 1_700_000_000_000 + i, b"key-%d" % (i % 7), b"value " * 20, [("h", b"v")]) for i in range(300)]
    log = (
        kp_batch(0, big[:100], 0)
        + kp_batch(100, [(d - 100, *rest) for d, *rest in big[100:200]], c)
        + empty_batch(200, 5, 17)
        + kp_batch(206, [(d - 200, *rest) for d, *rest in big[200:]], c, log_append_time=42)
    )
    s = scan_segment(u8(log), f"{codec}.log")
    assert (s.batches.codec == np.array([0, c, 0, c])).all()
    expected = kp_decode(log)
    assert len(expected) == 300
    assert seg_decode(s) == expected
    assert (len(s.side) > 0) == (c != 0)
    assert s.key_in_side.tolist() == [False] * 100 + [c != 0] * 200
    assert s.records.batch_index.tolist() == [0] * 100 + [1] * 100 + [3] * 100


# --------------------------------------------------------------------------------------------------
# numba == reference on truncated / corrupted / random bytes (errors are values, never crashes)
# --------------------------------------------------------------------------------------------------


@PROPERTY
@given(logs, st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=4), st.floats(0, 1))
def test_corrupted_and_truncated_logs_agree(log, flips, cut):
    assume(log)
    raw = bytearray(log)
    for where, byte in flips:
        raw[min(int(where * len(raw)), len(raw) - 1)] = byte
    raw = bytes(raw[: int(cut * len(raw)) if cut < 0.9 else len(raw)])
    buf = u8(raw)
    nb, py = scan_batches(buf), scan_batches_py(buf)
    assert_batches_equal(nb, py)
    args = walk_args(nb)
    assert_records_equal(walk_records(buf, *args), walk_records_py(buf, *args))
    assert_records_equal(walk_records(buf, *args[:6]), walk_records_py(buf, *args[:6]))
    for verify in (True, False):
        try:
            scan_segment(buf, "broken.log", verify_crc=verify, allow_trailing=True)
        except KafkaFormatError as err:  # typed, placed
            assert err.path == "broken.log" and err.position is not None


@PROPERTY
@given(
    logs,
    st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=2),
    st.floats(0, 1),
    st.integers(1, 300),
)
def test_batch_headers_read_in_chunks_are_the_whole_files(log, flips, cut, chunk):
    """A file's batch headers read a chunk at a time (`steps.scan.batch_headers`: batches cut by
    a chunk's end, longer than a chunk, a partial batch or a corrupt header anywhere) are those of
    the whole file in one buffer, to the stop position and reason."""
    raw = bytearray(log)
    for where, byte in flips:
        if raw:
            raw[min(int(where * len(raw)), len(raw) - 1)] = byte
    raw = bytes(raw[: int(cut * len(raw)) if cut < 0.9 else len(raw)])
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "00000000000000000000.log")
        with open(path, "wb") as fh:
            fh.write(raw)
        assert_batches_equal(batch_headers(Storage.local(), path, chunk), scan_batches(u8(raw)))


# byte soup biased towards varint-significant values, so that short valid-looking records appear
soup = st.lists(st.sampled_from([0, 1, 2, 3, 4, 6, 0x0C, 0x14, 0x7F, 0x80, 0x81, 0xFF, 0xFE]), max_size=80)


@PROPERTY
@given(soup, st.none() | st.integers(0, 6), st.integers(-(1 << 62), 1 << 62), st.integers(0, 1))
def test_random_record_regions_agree(data, count, base_ts, ts_type):
    buf = u8(bytes(data))
    args = ([0], [len(data)], [1 << 40], [base_ts], [ts_type], [7])
    counts = () if count is None else ([count],)
    assert_records_equal(walk_records(buf, *args, *counts), walk_records_py(buf, *args, *counts))


def varint(v: int, bits: int = 32) -> bytes:
    z = ((v << 1) ^ (v >> (bits - 1))) & ((1 << bits) - 1)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def record(ts_delta=0, off_delta=0, key=b"k", value=b"v", hdr=b"\x00", raw_key=None, length_adjust=0):
    body = b"\x00" + varint(ts_delta, 64) + varint(off_delta)
    body += raw_key if raw_key is not None else (varint(-1) if key is None else varint(len(key)) + key)
    body += varint(-1) if value is None else varint(len(value)) + value
    body += hdr
    return varint(len(body) + length_adjust) + body


def walk_one(region: bytes, count=None, base_ts=1000, ts_type=0, max_ts=7):
    buf = u8(region)
    args = ([0], [len(region)], [500], [base_ts], [ts_type], [max_ts])
    counts = () if count is None else ([count],)
    nb, py = walk_records(buf, *args, *counts), walk_records_py(buf, *args, *counts)
    assert_records_equal(nb, py)
    return nb


def test_varint_extremes_match_kafka_semantics():
    # int64 timestamp deltas at the extremes, int32 offset delta at the maximum
    r = walk_one(
        record(ts_delta=-(1 << 63), off_delta=(1 << 31) - 1) + record(ts_delta=(1 << 63) - 1), base_ts=0
    )
    assert r.error_code == ERR_OK
    assert r.timestamp.tolist() == [-(1 << 63), (1 << 63) - 1]
    assert r.offset.tolist() == [500 + (1 << 31) - 1, 500]
    # timestamp arithmetic wraps like Java's long
    r = walk_one(record(ts_delta=(1 << 63) - 1), base_ts=1)
    assert r.timestamp.tolist() == [-(1 << 63)]
    # a 6-byte int varint is rejected (Kafka: illegalVarintException)
    r = walk_one(b"\x80\x80\x80\x80\x80\x00")
    assert (r.error_code, r.error_position) == (ERR_BAD_VARINT, 0)
    # a 5th varint byte contributes only its low bits (Java int shift): 0x70 << 28 drops bits 32..34
    r = walk_one(b"\x90\x80\x80\x80\x70" + record()[1:])  # 16 = zig-zag(8)
    assert r.error_code == ERR_OK and len(r) == 1
    # LogAppendTime: every record reports maxTimestamp
    r = walk_one(record(ts_delta=5) + record(ts_delta=-5), ts_type=1, max_ts=99)
    assert r.timestamp.tolist() == [99, 99]


def test_record_errors_are_codes_with_positions():
    good = record()
    assert walk_one(good + good, count=2).error_code == ERR_OK
    r = walk_one(good + good, count=1)
    assert (r.error_code, r.error_position, len(r)) == (ERR_COUNT_MISMATCH, len(good), 1)
    r = walk_one(good + good, count=3)
    assert (r.error_code, r.error_position, len(r)) == (ERR_TRUNCATED, 2 * len(good), 2)
    r = walk_one(good + record(raw_key=varint(-2)))
    assert (r.error_code, r.error_position) == (ERR_NEGATIVE_LENGTH, len(good))
    r = walk_one(good + record(value=None, hdr=varint(-1)))
    assert (r.error_code, r.error_position) == (ERR_NEGATIVE_LENGTH, len(good))
    r = walk_one(record(length_adjust=1) + good)  # declared length one byte too long
    assert (r.error_code, r.error_position) == (ERR_RECORD_SIZE, 0)
    r = walk_one(record(hdr=varint(1) + varint(3) + b"ab"))  # header key runs past the record
    assert r.error_code == ERR_RECORD_SIZE
    r = walk_one(good[:-1])
    assert (r.error_code, r.error_position) == (ERR_TRUNCATED, 0)
    # headers with a null value and a present one are skipped
    r = walk_one(record(hdr=varint(2) + varint(1) + b"a" + varint(-1) + varint(0) + varint(2) + b"xy"))
    assert r.error_code == ERR_OK and r.key_len.tolist() == [1]


# --------------------------------------------------------------------------------------------------
# typed errors from scan_segment
# --------------------------------------------------------------------------------------------------

ONE = kp_batch(10, [(0, 1, b"a", b"1", []), (1, 2, b"b", b"2", [])])
TWO = kp_batch(12, [(0, 3, b"c", b"3", [])])


def test_crc_mismatch_names_the_batch():
    raw = bytearray(ONE + TWO)
    raw[len(ONE) + len(TWO) - 2] ^= 0xFF  # the value byte of the second batch's record
    with pytest.raises(CrcMismatchError) as e:
        scan_segment(u8(raw), "p/0.log")
    assert e.value.position == len(ONE) and e.value.offset == 12 and e.value.path == "p/0.log"
    assert f"p/0.log: byte {len(ONE)}" in str(e.value)
    scan_segment(u8(raw), "p/0.log", verify_crc=False)  # the records themselves still parse
    # the leader epoch is not covered by the CRC (docs/kafka-rules.md#crc)
    raw = bytearray(ONE)
    struct.pack_into(">i", raw, 12, 77)
    assert scan_segment(u8(raw)).batches.partition_leader_epoch.tolist() == [77]


@pytest.mark.parametrize(
    "tail, reason, error",
    [
        (struct.pack(">qi", 5, 13) + b"\x00" * 20, STOP_CORRUPT, CorruptRecordError),  # size < 14
        (struct.pack(">qiib", 5, 60, 0, 3) + b"\x00" * 60, STOP_CORRUPT, CorruptRecordError),  # magic 3
        (struct.pack(">qiib", 5, 40, 0, 2) + b"\x00" * 40, STOP_CORRUPT, CorruptRecordError),  # v2 < 61
        (struct.pack(">qiib", 5, 100, 0, 2) + b"\x00" * 30, STOP_PARTIAL, TruncatedBatchError),
        (b"\x00" * 11, STOP_PARTIAL, TruncatedBatchError),
        (struct.pack(">qi", 5, 100) + b"\x02", STOP_PARTIAL, TruncatedBatchError),  # < 17 bytes
    ],
)
def test_bad_entries_stop_the_scan_with_a_reason(tail, reason, error):
    buf = u8(ONE + tail)
    b = scan_batches(buf)
    assert_batches_equal(b, scan_batches_py(buf))
    assert (len(b), b.stop_position, b.stop_reason) == (1, len(ONE), reason)
    with pytest.raises(error) as e:
        scan_segment(buf, "x.log")
    assert e.value.position == len(ONE)
    if reason == STOP_PARTIAL:
        assert len(scan_segment(buf, "x.log", allow_trailing=True).records) == 2


def test_record_count_mismatch_raises_with_position():
    raw = bytearray(ONE)
    struct.pack_into(">i", raw, 57, 1)  # declares 1 record, holds 2
    reseal(raw)
    with pytest.raises(CorruptRecordError, match="incorrect declared batch size") as e:
        scan_segment(u8(raw), "c.log")
    first_len = ONE[61] // 2 + 1  # 1-byte length varint + body
    assert e.value.position == 61 + first_len and e.value.offset == 10


def test_errors_inside_compressed_batches_name_the_batch():
    packed = kp_batch(20, [(i, 5, b"key", b"x" * 200, []) for i in range(20)], codec=1)
    assert struct.unpack_from(">h", packed, 21)[0] & 7 == 1
    raw = bytearray(ONE + packed)
    struct.pack_into(">i", raw, len(ONE) + 57, 19)
    reseal(raw, len(ONE))
    with pytest.raises(CorruptRecordError, match="of the decompressed records") as e:
        scan_segment(u8(raw), "z.log")
    assert e.value.position == len(ONE)
    raw = bytearray(ONE + packed)
    raw[len(ONE) + 61 + 12] ^= 0x55  # garble the deflate stream, keep the CRC valid
    reseal(raw, len(ONE))
    with pytest.raises(CorruptRecordError) as e:
        scan_segment(u8(raw), "z.log")
    assert e.value.position == len(ONE)


def test_unknown_codec_is_unsupported():
    raw = bytearray(ONE)
    struct.pack_into(">h", raw, 21, 5)
    reseal(raw)
    with pytest.raises(UnsupportedCodecError) as e:
        scan_segment(u8(raw), "u.log")
    assert e.value.position == 0


def test_scan_a_byte_range():
    log = ONE + TWO + ONE
    s = scan_segment(u8(log), start=len(ONE), end=len(ONE) + len(TWO))
    assert s.batches.position.tolist() == [len(ONE)]
    assert seg_decode(s) == [(12, 3, b"c", b"3")]


# --------------------------------------------------------------------------------------------------
# keys -> Arrow -> group_by(key).max(offset)
# --------------------------------------------------------------------------------------------------


@PROPERTY
@given(
    st.lists(
        st.tuples(st.none() | st.sampled_from([b"", b"a", b"bb", b"k" * 30]), st.booleans()),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([0, 3]),
    st.booleans(),
)
def test_keys_to_arrow_latest_offset_per_key(rows, codec, large):
    half = len(rows) // 2
    recs = [(i, 1, k, b"v" * 50 if big else None, []) for i, (k, big) in enumerate(rows)]
    log = kp_batch(1000, recs[:half], 0) if half else b""
    log += kp_batch(1000 + half, [(d - half, *r) for d, *r in recs[half:]], codec)
    s = scan_segment(u8(log))
    keys = s.keys_arrow(large=large)
    assert keys.to_pylist() == [k for k, _ in rows]
    table = pa.table({"key": keys, "offset": s.records.offset})
    got = {
        r["key"]: r["offset_max"] for r in table.group_by("key").aggregate([("offset", "max")]).to_pylist()
    }
    want: dict = {}
    for i, (k, _) in enumerate(rows):
        want[k] = 1000 + i
    assert got == want


def test_gather_keys_plain_buffer():
    buf = u8(b"..abc.de")
    data, offsets = gather_keys(buf, [2, 0, 6, 3], [3, -1, 2, 0])
    assert data.tobytes() == b"abcde" and offsets.dtype == np.int32
    assert offsets.tolist() == [0, 3, 3, 5, 5]
    arr = pa.Array.from_buffers(pa.binary(), 4, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    assert arr.to_pylist() == [b"abc", b"", b"de", b""]
    data, offsets = gather_keys(buf, [2], [3], large=True)
    assert offsets.dtype == np.int64
    with pytest.raises(ValueError):
        gather_keys(buf, [6], [5])


# --------------------------------------------------------------------------------------------------
# real broker data: same records as kafka-python
# --------------------------------------------------------------------------------------------------

REAL_LOGS = sorted(p for p in FIXTURES.rglob("*.log") if p.stat().st_size > 0)


def test_fixtures_present():
    assert len(REAL_LOGS) > 50


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_real_kafka_segments_match_kafka_python(path):
    data = path.read_bytes()
    s = scan_segment(np.fromfile(path, dtype=np.uint8), str(path))
    assert s.batches.stop_reason == STOP_END
    expected = kp_decode(data)
    assert len(s.records) == len(expected)
    assert seg_decode(s) == expected
    if (s.batches.magic == 2).all():
        assert_batches_equal(s.batches, scan_batches_py(u8(data)))


def test_numba_cache_dir_not_writable(tmp_path):
    """With an unusable NUMBA_CACHE_DIR the module still imports and the kernels still run."""
    import subprocess

    code = (
        "import numpy as np; from compaction.kernels import scan; "
        f"print(len(scan.scan_batches(np.frombuffer(bytes.fromhex({ONE.hex()!r}), np.uint8))))"
    )
    env = {"NUMBA_CACHE_DIR": "/proc/not-writable", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


@pytest.mark.parametrize("magic, legacy_codec", [(0, 0), (0, 1), (1, 0), (1, 3)])
def test_segment_mixing_legacy_compressed_and_plain_batches(magic, legacy_codec):
    """A segment upgraded in place: v0/v1 entries, then v2 compressed and plain batches. Legacy keys
    and decompressed v2 records share the side buffer; kafka-python decodes the same records."""
    from compaction.format.batch import Record
    from compaction.format.legacy import build_legacy_message_set

    old = [Record(o, -1 if magic == 0 else 1000 + o, b"old-%d" % (o % 3), b"x" * 30) for o in range(5)]
    log = build_legacy_message_set(old, magic, legacy_codec)
    log += kp_batch(5, [(i, 2000 + i, b"new-%d" % (i % 3), b"y" * 200, []) for i in range(10)], codec=4)
    log += kp_batch(15, [(0, 3000, None, b"z", [])])
    s = scan_segment(u8(log), "mixed.log")
    assert seg_decode(s) == kp_decode(log)
    assert s.records.offset.tolist() == list(range(16))
    legacy_rows = s.batches.magic < 2
    assert s.batches.base_offset[legacy_rows].min() == 0  # wrappers report their first inner offset
    assert s.keys_arrow().to_pylist() == [s.key(i) for i in range(16)]
