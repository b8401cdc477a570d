"""kernels/legacywalk.py and the legacy part of scan_segment: the compiled walk of v0/v1 messages
against its plain-Python reference and against `legacy.LegacyBatch` (the reader Kafka's rules were
written down in), golden bytes, typed errors in file order, and the compiled checksums."""

from __future__ import annotations

import ctypes
import platform
import struct
import zlib

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.errors import CorruptRecordError, CrcMismatchError, KafkaFormatError
from compaction.format.batch import Record
from compaction.format.legacy import LegacyBatch, build_legacy_message_set, encode_message
from compaction.kernels import crc
from compaction.kernels.keyhash import key_hash
from compaction.kernels.legacywalk import (
    ERR_EMPTY,
    ERR_MESSAGE,
    ERR_NESTED,
    ERR_OK,
    entry_crcs,
    region_capacity,
    walk_legacy_kernel,
    walk_legacy_py,
)
from compaction.kernels.scan import RECORD_DTYPES, scan_batches, scan_segment

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
maybe_bytes = st.none() | st.binary(max_size=20)


def u8(data) -> np.ndarray:
    return np.frombuffer(bytes(data), dtype=np.uint8)


@st.composite
def message_sets(draw):
    """A legacy log: runs of v0/v1 entries, uncompressed or wrapped (every codec), absolute
    offsets growing with gaps, v1 timestamps anywhere, LogAppendTime wrappers too."""
    out, offset = b"", draw(st.integers(0, 1 << 40))
    for _ in range(draw(st.integers(1, 5))):
        magic = draw(st.sampled_from([0, 1]))
        codec = draw(st.sampled_from([0, 0, 1, 2, 3]))
        records = []
        for _ in range(draw(st.integers(1, 4))):
            ts = -1 if magic == 0 else draw(st.integers(-1, 1 << 45))
            records.append(Record(offset, ts, draw(maybe_bytes), draw(maybe_bytes)))
            offset += 1 + draw(st.integers(0, 2))
        lat = magic == 1 and draw(st.booleans())
        kw = {"timestamp_type": 1, "log_append_time": draw(st.integers(0, 1 << 45))} if lat else {}
        out += build_legacy_message_set(records, magic, codec, **kw)
    return out


def reader_records(log: bytes) -> list[tuple]:
    """(entry position, offset, timestamp, key, value) of every record, by `LegacyBatch`."""
    b = scan_batches(u8(log))
    rows = []
    for pos, size in zip(b.position.tolist(), b.size.tolist(), strict=True):
        rows += [
            (pos, r.offset, r.timestamp, r.key, r.value)
            for r in LegacyBatch(log[pos : pos + size], pos).records()
        ]
    return rows


@PROPERTY
@given(message_sets())
def test_scan_of_legacy_logs_reads_what_the_python_reader_reads(log):
    s = scan_segment(u8(log), "legacy.log", hash_keys=True)
    got = [
        (
            int(s.batches.position[s.records.batch_index[i]]),
            int(s.records.offset[i]),
            int(s.records.timestamp[i]),
            s.key(i),
            s.value(i),
        )
        for i in range(len(s.records))
    ]
    assert got == reader_records(log)
    first = np.searchsorted(s.records.batch_index, np.arange(len(s.batches)))
    assert s.batches.base_offset.tolist() == s.records.offset[first].tolist()  # wrappers: first inner offset
    assert (
        s.batches.records_count.tolist()
        == np.bincount(s.records.batch_index, minlength=len(s.batches)).tolist()
    )
    hashes, packed, offs = s.keys
    for i in range(len(s.records)):
        key = s.key(i)
        assert bytes(packed[offs[i] : offs[i] + len(key or b"")]) == (key or b"")
        assert int(hashes[i]) == (0 if key is None else key_hash(np.frombuffer(key, np.uint8), 0, len(key)))
    uncompressed = s.batches.codec[s.records.batch_index] == 0
    assert (s.records.key_pos[uncompressed] < len(log)).all()  # keys of plain messages are read in place
    assert len(s.side) == 0 or not uncompressed.all()  # nothing copied for them


def run_kernel(buf, start, end, inner, w_off, w_magic, w_lat, w_ts):
    args = [
        np.asarray(a, dtype=dt)
        for a, dt in (
            (start, np.int64),
            (end, np.int64),
            (inner, np.bool_),
            (w_off, np.int64),
            (w_magic, np.int64),
            (w_lat, np.bool_),
            (w_ts, np.int64),
        )
    ]
    cap = region_capacity(args[0], args[1], args[2]) + 1
    cols = [np.empty(cap, dtype=dt) for dt in RECORD_DTYPES]
    k, code, pos, region = walk_legacy_kernel(u8(buf), *args, cap, *cols)
    rows = [tuple(int(c[i]) for c in cols) for i in range(k)]
    return rows, int(code), int(pos), int(region)


# bytes that make short entries look plausible: lengths, magics, attributes
soup = st.lists(
    st.sampled_from([0, 0, 0, 1, 2, 3, 4, 0x0E, 0x10, 0x12, 0x16, 0x1A, 0x80, 0xFF]), max_size=120
)


@PROPERTY
@given(
    soup,
    st.lists(st.tuples(st.integers(0, 120), st.integers(0, 120), st.booleans()), max_size=4),
    st.integers(-3, 1 << 40),
    st.integers(0, 1),
    st.booleans(),
    st.integers(-1, 1 << 40),
)
def test_kernel_and_reference_agree_on_random_regions(data, regions, w_off, w_magic, w_lat, w_ts):
    buf = bytes(data)
    start = [min(a, b) for a, b, _ in regions]
    end = [max(a, b) for a, b, _ in regions]
    inner = [i for _, _, i in regions]
    n = len(regions)
    params = (inner, [w_off] * n, [w_magic] * n, [w_lat] * n, [w_ts] * n)
    rows, code, pos, region = run_kernel(buf, start, end, *params)
    ref_rows, ref_code, ref_pos, ref_region = walk_legacy_py(u8(buf), start, end, *params)
    assert (code, pos, region) == (ref_code, ref_pos, ref_region)
    assert rows == [tuple(r) for r in ref_rows]


@PROPERTY
@given(message_sets(), st.data())
def test_kernel_and_reference_agree_on_real_messages_and_wrapper_contents(log, data):
    """Every entry as an uncompressed region, and its encoding repeated as a wrapper's content."""
    b = scan_batches(u8(log))
    start, end = b.position, b.position + b.size
    inner = data.draw(st.lists(st.booleans(), min_size=len(b), max_size=len(b)))
    params = (
        inner,
        b.last_offset,
        b.magic.astype(np.int64),
        data.draw(st.lists(st.booleans(), min_size=len(b), max_size=len(b))),
        b.max_timestamp,
    )
    rows, code, pos, region = run_kernel(log, start, end, *params)
    ref_rows, *ref_error = walk_legacy_py(u8(log), start, end, *params)
    assert [code, pos, region] == ref_error
    assert rows == [tuple(r) for r in ref_rows]


def test_golden_v0_and_v1_messages():
    """Bytes written out by hand (docs/kafka-rules.md#legacy-messages): the columns point into them."""
    v0 = (
        struct.pack(">qi", 7, 14 + 1 + 2)
        + b"\x00\x00\x00\x00"
        + b"\x00\x00"
        + struct.pack(">i", 1)
        + b"k"
        + struct.pack(">i", 2)
        + b"vv"
    )
    v1 = (
        struct.pack(">qi", 9, 22 + 0)
        + b"\x00\x00\x00\x00"
        + b"\x01\x00"
        + struct.pack(">q", 1234)
        + struct.pack(">i", -1)
        + struct.pack(">i", -1)
    )
    log = bytearray(v0 + v1)
    struct.pack_into(">I", log, 12, zlib.crc32(log[16:29]))
    struct.pack_into(">I", log, 29 + 12, zlib.crc32(log[29 + 16 :]))
    assert bytes(log[:29]) == encode_message(7, 0, 0, -1, b"k", b"vv")
    assert bytes(log[29:]) == encode_message(9, 1, 0, 1234, None, None)
    s = scan_segment(u8(log), "golden.log")
    r = s.records
    assert r.offset.tolist() == [7, 9] and r.timestamp.tolist() == [-1, 1234]
    assert r.key_pos.tolist()[0] == 22 and r.key_len.tolist() == [1, -1]
    assert r.value_pos.tolist()[0] == 27 and r.value_len.tolist() == [2, -1]
    assert len(s.side) == 0


def test_v1_wrapper_offsets_and_log_append_time_through_the_scan():
    inner = [Record(100 + 2 * i, 50 + i, b"k%d" % i, b"v") for i in range(4)]
    log = build_legacy_message_set(inner, 1, 2, timestamp_type=1, log_append_time=777)
    log += build_legacy_message_set([Record(0, 5, b"z", b"z")], 1, 1)  # wrapper offset 0: base 0
    s = scan_segment(u8(log), "w.log")
    assert s.records.offset.tolist() == [100, 102, 104, 106, 0]
    assert s.records.timestamp.tolist() == [777] * 4 + [5]
    assert s.batches.base_offset.tolist() == [100, 0] and s.batches.records_count.tolist() == [4, 1]


def test_v1_wrapper_at_offset_zero_keeps_its_relative_offsets():
    """librdkafka wrote v1 wrappers with offset 0: inner relative offsets are then absolute."""
    inner = b"".join(bytes(entry(o, 1, 0, b"k%d" % o, b"v")) for o in range(3))
    log = bytes(reseal(wrapper_of(inner, 0, magic=1)))
    assert scan_segment(u8(log), "w.log").records.offset.tolist() == [0, 1, 2]
    assert [r.offset for r in LegacyBatch(log, 0).records()] == [0, 1, 2]
    log = bytes(reseal(wrapper_of(inner, 10, magic=1)))
    assert scan_segment(u8(log), "w.log").records.offset.tolist() == [8, 9, 10]


def entry(offset: int, magic: int, attributes: int, key, value) -> bytearray:
    return bytearray(encode_message(offset, magic, attributes, 3 if magic else -1, key, value))


def reseal(raw: bytearray, pos: int = 0) -> bytearray:
    size = struct.unpack_from(">i", raw, pos + 8)[0]
    struct.pack_into(">I", raw, pos + 12, zlib.crc32(raw[pos + 16 : pos + 12 + size]))
    return raw


def wrapper_of(inner: bytes, offset: int, magic: int = 0, codec: int = 1) -> bytearray:
    from compaction.format import compression

    return entry(offset, magic, codec, None, compression.compress(codec, inner, magic))


GOOD = bytes(entry(0, 0, 0, b"a", b"1"))


def broken_key_length() -> bytearray:
    raw = entry(1, 1, 0, b"key", b"value")
    struct.pack_into(">i", raw, 26, 99)  # key length past the message
    return reseal(raw)


def leftover_bytes() -> bytearray:
    raw = entry(1, 0, 0, b"key", b"value")
    struct.pack_into(">i", raw, 18 + 4 + 3, 4)  # value shorter than the message
    return reseal(raw)


@pytest.mark.parametrize(
    "bad, message",
    [
        (broken_key_length(), "message key/value of 99 bytes runs past the end"),
        (leftover_bytes(), "1 bytes left over in a v0 message"),
        (wrapper_of(bytes(entry(5, 0, 1, None, b"x")), 5), "compressed message inside a compressed wrapper"),
        (wrapper_of(b"", 5), "compressed wrapper with no inner records"),
        (reseal(entry(5, 0, 1, None, None)), "compressed wrapper message with a null value"),
        (wrapper_of(GOOD + bytes(leftover_bytes()), 5), "inner message at byte 28 of the decompressed value"),
    ],
)
def test_malformed_messages_raise_the_readers_typed_error_at_the_entry(bad, message):
    log = GOOD + bytes(bad) + GOOD
    with pytest.raises(CorruptRecordError) as e:
        scan_segment(u8(log), "p/7.log")
    assert e.value.path == "p/7.log" and e.value.position == len(GOOD)
    assert message in str(e.value)
    with pytest.raises(CorruptRecordError) as ref:
        LegacyBatch(bytes(bad), len(GOOD), "p/7.log").records()
    assert str(e.value) == str(ref.value)


@pytest.mark.parametrize("first", ["message", "wrapper"])
def test_the_first_malformed_entry_in_the_file_is_reported(first):
    bad_message = bytes(broken_key_length())
    bad_wrapper = bytes(wrapper_of(bytes(entry(5, 0, 1, None, b"x")), 5))
    log = GOOD + (bad_message + bad_wrapper if first == "message" else bad_wrapper + bad_message)
    with pytest.raises(CorruptRecordError) as e:
        scan_segment(u8(log), "p/0.log")
    assert e.value.position == len(GOOD)
    assert ("runs past the end" if first == "message" else "inside a compressed wrapper") in str(e.value)


def test_undecompressable_wrapper_is_a_typed_error_after_an_earlier_bad_wrapper():
    bad_inner = bytes(wrapper_of(bytes(entry(5, 0, 1, None, b"x")), 5))
    garbage = reseal(entry(9, 0, 1, None, b"not gzip at all"))
    with pytest.raises(CorruptRecordError) as e:
        scan_segment(u8(GOOD + bad_inner + bytes(garbage)), "p/0.log")
    assert e.value.position == len(GOOD) and "inside a compressed wrapper" in str(e.value)
    with pytest.raises(KafkaFormatError) as e:
        scan_segment(u8(GOOD + bytes(garbage)), "p/0.log")
    assert e.value.path == "p/0.log" and e.value.position >= len(GOOD)


def test_a_legacy_crc_mismatch_names_the_entry():
    raw = bytearray(GOOD * 3)
    raw[2 * len(GOOD) - 1] ^= 0x01  # the second message's value
    with pytest.raises(CrcMismatchError) as e:
        scan_segment(u8(raw), "p/0.log")
    assert e.value.position == len(GOOD) and e.value.path == "p/0.log" and "magic v0" in str(e.value)
    assert len(scan_segment(u8(raw), "p/0.log", verify_crc=False).records) == 3


@PROPERTY
@given(message_sets(), st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=3))
def test_corrupted_legacy_logs_fail_typed_or_read_what_the_reader_reads(log, flips):
    raw = bytearray(log)
    for where, byte in flips:
        raw[min(int(where * len(raw)), len(raw) - 1)] = byte
    b = scan_batches(u8(raw))
    for pos in b.position.tolist():  # reseal, so that the walk meets the damage
        if raw[pos + 16] < 2:
            reseal(raw, pos)
    try:
        s = scan_segment(u8(raw), "bad.log", allow_trailing=True)
    except KafkaFormatError as err:
        assert err.path == "bad.log" and err.position is not None
        return
    rows = [
        (int(s.records.offset[i]), int(s.records.timestamp[i]), s.key(i), s.value(i))
        for i in range(len(s.records))
    ]
    assert rows == [r[1:] for r in reader_records(bytes(raw[: s.batches.stop_position]))]


# --- checksums in compiled code --------------------------------------------------------------------


@PROPERTY
@given(message_sets())
def test_entry_crcs_are_the_stored_ones(log):
    b = scan_batches(u8(log))
    assert entry_crcs(u8(log), b.position, b.size, b.magic).tolist() == b.crc.tolist()


@PROPERTY
@given(st.binary(max_size=300), st.integers(0, 20))
def test_compiled_checksums_and_their_table_fallbacks_match_zlib_and_crc32c(data, skip):
    buf = u8(data)
    skip = min(skip, len(data))
    n = len(data) - skip
    assert crc.crc32_at(buf, skip, n) == zlib.crc32(data[skip:])
    assert crc.crc32c_at(buf, skip, n) == crc32c.crc32c(data[skip:])
    ptr = ctypes.c_char_p(data[skip:])
    assert crc._compiled(crc._crc32_table_raw).ctypes(0, ptr, n) == zlib.crc32(data[skip:])
    assert crc._compiled(crc._crc32c_table_raw).ctypes(0xFFFFFFFF, ptr, n) ^ 0xFFFFFFFF == crc32c.crc32c(
        data[skip:]
    )


def test_the_fast_checksum_libraries_are_the_ones_called():
    """Not the compiled tables: those are for a library that stops exporting its function."""
    assert crc.IMPLEMENTATIONS["crc32"] == "crc32_gzip_refl"
    assert crc.IMPLEMENTATIONS["crc32c"] in ("_crc32c_hw_adler", "_crc32c_sw_slicing_by_8")
    if crc32c.hardware_based and platform.machine() == "x86_64":
        assert crc.IMPLEMENTATIONS["crc32c"] == "_crc32c_hw_adler"


def test_empty_regions_and_zero_capacity():
    rows, code, pos, region = run_kernel(b"", [0], [0], [False], [0], [0], [False], [0])
    assert (rows, code) == ([], ERR_OK)
    rows, code, pos, region = run_kernel(b"", [0], [0], [True], [0], [0], [False], [0])
    assert (code, region) == (ERR_EMPTY, 0)
    rows, code, pos, region = run_kernel(GOOD, [0], [len(GOOD) - 1], [False], [0], [0], [False], [0])
    assert (code, pos) == (ERR_MESSAGE, 0)
    nested = bytes(entry(5, 0, 1, None, b"x"))
    assert run_kernel(nested, [0], [len(nested)], [True], [5], [0], [False], [0])[1] == ERR_NESTED
