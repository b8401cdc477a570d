"""RecordBatch v2: pinned Kafka CRCs, header layout, rebuild rules, control/empty batches,
corruption, kafka-python interop both ways, hypothesis round trips."""

import struct

import kafka_python_shims
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from compaction.errors import CorruptRecordError, CrcMismatchError
from compaction.format import layout as L
from compaction.format.batch import (
    BATCH_HEADER,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    LOG_APPEND_TIME,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    Record,
    RecordBatch,
    control_record,
    parse_end_txn_marker,
)
from compaction.format.batch_build import build_batch, build_empty_batch
from compaction.format.crc import crc32c

kafka_python_shims.install()
CODECS = [0, 1, 2, 3, 4]

# MemoryRecordsTest.testChecksum (apache/kafka clients tests): MemoryRecords.withRecords(magic,
# compression, SimpleRecord(283843L, "key1", "value1"), SimpleRecord(1234L, "key2", "value2")),
# i.e. offsets 0 and 1, CreateTime, no producer. The expected CRCs are hard-coded there.
CHECKSUM_RECORDS = [Record(0, 283843, b"key1", b"value1"), Record(1, 1234, b"key2", b"value2")]


def test_header_layout_constants():
    assert BATCH_HEADER.size == RECORD_BATCH_OVERHEAD == 61
    assert (L.LENGTH_OFFSET, L.PARTITION_LEADER_EPOCH_OFFSET, L.MAGIC_OFFSET, L.CRC_OFFSET) == (8, 12, 16, 17)
    assert (L.ATTRIBUTES_OFFSET, L.LAST_OFFSET_DELTA_OFFSET, L.BASE_TIMESTAMP_OFFSET) == (21, 23, 27)
    assert (L.MAX_TIMESTAMP_OFFSET, L.PRODUCER_ID_OFFSET, L.PRODUCER_EPOCH_OFFSET) == (35, 43, 51)
    assert (L.BASE_SEQUENCE_OFFSET, L.RECORDS_COUNT_OFFSET) == (53, 57)


def test_kafka_memory_records_checksum_v2_uncompressed():
    raw = build_batch(CHECKSUM_RECORDS)
    assert RecordBatch(raw).header.crc == 3851219455


def test_kafka_memory_records_checksum_v2_lz4():
    # The v2 records (38 bytes) do not shrink under LZ4, so lz4-java stores the block raw
    # (size | 0x80000000); liblz4's frame writer does the same, hence the CRC is reproducible.
    raw = build_batch(CHECKSUM_RECORDS, codec=3)
    assert RecordBatch(raw).header.crc == 2745969314


def test_batch_fields_and_crc_range():
    raw = build_batch(
        [Record(100, 1000, b"k", b"v"), Record(105, 900, None, None)],
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
        partition_leader_epoch=4,
    )
    h = RecordBatch(raw).header
    assert (h.base_offset, h.last_offset_delta, h.last_offset, h.next_offset) == (100, 5, 105, 106)
    assert (h.base_timestamp, h.max_timestamp, h.records_count) == (1000, 1000, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (7, 3, 11, 4)
    assert h.size == len(raw) and h.batch_length == len(raw) - 12 and h.has_producer_id
    assert raw[21] == 0  # flags live in byte 22
    assert h.crc == crc32c(raw[21:])
    # The partition leader epoch is outside the CRC: the broker may rewrite it.
    patched = bytearray(raw)
    patched[12:16] = struct.pack(">i", 99)
    assert RecordBatch(patched).crc_valid()


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"codec": 2}, 0x02),
        ({"timestamp_type": LOG_APPEND_TIME, "log_append_time": 5}, 0x08),
        ({"is_transactional": True, "producer_id": 1, "producer_epoch": 0, "base_sequence": 0}, 0x10),
        ({"is_control": True, "producer_id": 1, "producer_epoch": 0}, 0x20),
        ({"delete_horizon_ms": 10}, 0x40),
    ],
)
def test_attribute_bits_in_byte_22(kwargs, flag):
    raw = build_batch([Record(0, 1, b"k", b"v")], **kwargs)
    assert raw[22] == flag and raw[21] == 0


def test_record_bytes_with_null_key_value_and_headers():
    raw = build_batch([Record(0, 10, None, None, (("h", None),))])
    # length, attr, tsDelta 0, offDelta 0, key -1, value -1, 1 header: "h" (len 1), value -1
    assert raw[61:] == bytes([0x12, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x02]) + b"h" + b"\x01"
    assert RecordBatch(raw).records() == [Record(0, 10, None, None, (("h", None),))]


def test_zero_length_key_is_not_null():
    rec = RecordBatch(build_batch([Record(0, 0, b"", b"")])).records()[0]
    assert rec.key == b"" and rec.value == b""


def test_commit_marker_is_78_bytes_as_the_broker_writes_it():
    key, value = control_record(CONTROL_COMMIT, coordinator_epoch=9)
    assert key == b"\x00\x00\x00\x01" and value == b"\x00\x00\x00\x00\x00\x09"
    raw = build_batch(
        [Record(42, 1700, key, value)],
        producer_id=5,
        producer_epoch=2,
        is_transactional=True,
        is_control=True,
    )
    assert len(raw) == 78 and struct.unpack_from(">i", raw, 8)[0] == 66 and raw[22] == 0x30
    assert raw[61:] == bytes([0x20, 0, 0, 0, 0x08]) + key + b"\x0c" + value + b"\x00"
    batch = RecordBatch(raw)
    assert batch.control_type() == CONTROL_COMMIT
    assert parse_end_txn_marker(batch.records()[0].value) == (0, 9)
    abort_key, _ = control_record(CONTROL_ABORT)
    assert abort_key == b"\x00\x00\x00\x00"


def test_control_type_of_non_control_batch_is_none():
    assert RecordBatch(build_batch([Record(0, 0, b"k", b"v")])).control_type() is None


def test_rebuild_rules_of_filter_to():
    # Original batch covered 10..15; records 11 and 14 survive, with a tombstone -> horizon.
    horizon = 2_000_000
    kept = [Record(11, 1000, b"a", None), Record(14, 1500, b"b", b"x")]
    raw = build_batch(
        kept,
        base_offset=10,
        last_offset_delta=5,
        delete_horizon_ms=horizon,
        producer_id=3,
        producer_epoch=1,
        base_sequence=20,
        partition_leader_epoch=8,
    )
    batch = RecordBatch(raw)
    h = batch.header
    assert (h.base_offset, h.last_offset, h.base_sequence) == (10, 15, 20)
    assert h.has_delete_horizon and h.delete_horizon_ms == horizon == h.base_timestamp
    assert h.max_timestamp == 1500 and h.records_count == 2
    assert batch.records() == kept  # deltas relative to the horizon decode back to the originals
    assert raw[61 + 2] != 0  # timestampDelta is negative and multi-byte now


def test_log_append_time_batch_reports_max_timestamp_for_every_record():
    raw = build_batch(
        [Record(0, 1, b"a", b"1"), Record(1, 2, b"b", b"2")],
        timestamp_type=LOG_APPEND_TIME,
        log_append_time=777,
    )
    batch = RecordBatch(raw)
    assert batch.header.max_timestamp == 777 and batch.header.timestamp_type == LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [777, 777]


def test_empty_batch_per_spec_section_10():
    original = RecordBatch(
        build_batch(
            [Record(50, 5000, b"k", None), Record(53, 6000, b"k2", b"v")],
            codec=1,
            delete_horizon_ms=9999,
            producer_id=4,
            producer_epoch=2,
            base_sequence=7,
            partition_leader_epoch=3,
            is_transactional=True,
        )
    ).header
    raw = build_empty_batch(original)
    assert len(raw) == 61
    e = RecordBatch(raw)
    h = e.header
    assert (h.base_offset, h.batch_length, h.partition_leader_epoch, h.magic) == (50, 49, 3, 2)
    assert raw[21:23] == b"\x00\x10"  # codec none, horizon cleared, transactional kept
    assert (h.last_offset_delta, h.base_timestamp, h.max_timestamp) == (3, -1, 6000)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (4, 2, 7, 0)
    assert e.crc_valid() and e.records() == []


def test_builder_rejects_what_kafka_rejects():
    rec = [Record(0, 0, b"k", b"v")]
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        build_batch(rec, is_transactional=True)  # no producer id
    with pytest.raises(ValueError):
        build_batch(rec, producer_id=1, producer_epoch=0)  # no sequence
    with pytest.raises(ValueError):
        build_batch(rec, timestamp_type=LOG_APPEND_TIME)  # no append time
    with pytest.raises(ValueError):
        build_batch([Record(5, 0, None, b"a"), Record(5, 0, None, b"b")])  # offsets must increase
    with pytest.raises(ValueError):
        build_batch([Record(0, 0, None, b"a"), Record(3, 0, None, b"b")], last_offset_delta=2)


def _reseal(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


def test_bytes_left_after_records_count_are_corrupt():
    raw = bytearray(build_batch([Record(0, 0, b"k", b"v"), Record(1, 0, b"k", b"v")]))
    struct.pack_into(">i", raw, 57, 1)  # claim one record, two are present
    batch = RecordBatch(_reseal(raw), position=4096, path="/x/00.log")
    assert batch.crc_valid()
    with pytest.raises(CorruptRecordError, match="Incorrect declared batch size") as info:
        batch.records()
    assert info.value.path == "/x/00.log" and info.value.position == 4096


def test_too_many_declared_records_are_corrupt():
    raw = bytearray(build_batch([Record(0, 0, b"k", b"v")]))
    struct.pack_into(">i", raw, 57, 2)
    with pytest.raises(CorruptRecordError):
        RecordBatch(_reseal(raw)).records()


def test_record_length_mismatch_is_corrupt():
    raw = bytearray(build_batch([Record(0, 0, b"k", b"v")]))
    raw[61] += 2  # record claims 1 more byte than it has (zig-zag: +2 = +1)
    raw += b"\x00"
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    with pytest.raises(CorruptRecordError):
        RecordBatch(_reseal(raw)).records()


def test_crc_mismatch_names_path_position_and_offset():
    raw = bytearray(build_batch([Record(70, 0, b"k", b"v")]))
    raw[-1] ^= 0xFF
    batch = RecordBatch(raw, position=123, path="p.log")
    assert not batch.crc_valid()
    with pytest.raises(CrcMismatchError) as info:
        batch.ensure_valid()
    err = info.value
    assert (err.path, err.position, err.offset) == ("p.log", 123, 70)
    assert "p.log: byte 123" in str(err)


def test_short_or_wrong_magic_buffer_is_corrupt():
    with pytest.raises(CorruptRecordError):
        RecordBatch(b"\x00" * 60)
    raw = bytearray(build_batch([Record(0, 0, b"k", b"v")]))
    raw[16] = 1
    with pytest.raises(CorruptRecordError):
        RecordBatch(raw)


# --- kafka-python interop ----------------------------------------------------------------------

INTEROP_RECORDS = [
    Record(0, 1_600_000_000_000, b"key-0", b"value-0", (("h1", b"v1"), ("h2", None))),
    Record(1, 1_600_000_000_500, None, b"no key"),
    Record(2, 1_599_999_999_000, b"tombstone", None),
    Record(3, 1_600_000_001_000, b"", b"x" * 5000, (("empty", b""),)),
]


def _kafka_python_build(records, codec, producer=(-1, -1, -1)):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 20,
    )
    for r in records:
        assert builder.append(r.offset, r.timestamp, r.key, r.value, list(r.headers)) is not None
    return bytes(builder.build())


def _as_records(kp_batch):
    return [
        Record(
            r.offset,
            r.timestamp,
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            tuple((k, None if v is None else bytes(v)) for k, v in r.headers),
        )
        for r in kp_batch
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_what_kafka_python_writes(codec):
    raw = _kafka_python_build(INTEROP_RECORDS, codec, producer=(9, 1, 100))
    batch = RecordBatch(raw)
    assert batch.crc_valid() and batch.header.codec == codec
    assert (batch.header.producer_id, batch.header.base_sequence) == (9, 100)
    assert batch.records() == INTEROP_RECORDS


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_what_we_write(codec):
    raw = build_batch(INTEROP_RECORDS, codec=codec, producer_id=9, producer_epoch=1, base_sequence=100)
    kp = DefaultRecordBatch(bytearray(raw))
    assert kp.validate_crc()
    assert (kp.compression_type, kp.producer_id, kp.base_sequence) == (codec, 9, 100)
    assert _as_records(kp) == INTEROP_RECORDS


def test_kafka_python_reads_our_horizon_and_log_append_time_batches():
    raw = build_batch(
        INTEROP_RECORDS,
        base_offset=0,
        last_offset_delta=9,
        delete_horizon_ms=1_700_000_000_000,
        timestamp_type=LOG_APPEND_TIME,
        log_append_time=1_650_000_000_000,
    )
    kp = DefaultRecordBatch(bytearray(raw))
    assert kp.validate_crc() and kp.last_offset_delta == 9
    assert [r.timestamp for r in kp] == [1_650_000_000_000] * 4


# --- hypothesis round trips --------------------------------------------------------------------

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=64))
_headers = st.lists(st.tuples(st.text(max_size=8), _bytes_or_none), max_size=3).map(tuple)


@st.composite
def batches(draw):
    n = draw(st.integers(1, 12))
    base = draw(st.integers(0, 2**40))
    gaps = draw(st.lists(st.integers(1, 1000), min_size=n - 1, max_size=n - 1))
    offsets = [base]
    for g in gaps:
        offsets.append(offsets[-1] + g)
    ts0 = draw(st.integers(10**6, 2**41))  # Kafka timestamps are >= 0 (or -1 = none)
    records = [
        Record(
            o,
            ts0 + draw(st.integers(-(10**6), 10**6)),
            draw(_bytes_or_none),
            draw(_bytes_or_none),
            draw(_headers),
        )
        for o in offsets
    ]
    kwargs = {
        "codec": draw(st.sampled_from(CODECS)),
        "partition_leader_epoch": draw(st.integers(-1, 2**31 - 1)),
    }
    if draw(st.booleans()):
        kwargs.update(
            producer_id=draw(st.integers(0, 2**62)),
            producer_epoch=draw(st.integers(0, 32767)),
            base_sequence=draw(st.integers(0, 2**31 - 1)),
            is_transactional=draw(st.booleans()),
        )
    if draw(st.booleans()):
        kwargs["delete_horizon_ms"] = draw(st.integers(0, 2**42))
    if draw(st.booleans()):
        kwargs.update(timestamp_type=LOG_APPEND_TIME, log_append_time=draw(st.integers(0, 2**42)))
    if draw(st.booleans()):
        kwargs["last_offset_delta"] = offsets[-1] - base + draw(st.integers(0, 50))
    return records, kwargs


@settings(max_examples=200, deadline=None)
@given(batches())
def test_build_parse_round_trip(case):
    records, kwargs = case
    raw = build_batch(records, **kwargs)
    batch = RecordBatch(raw)
    h = batch.header
    assert batch.crc_valid() and h.size == len(raw)
    assert h.codec == kwargs["codec"] and h.records_count == len(records)
    assert (
        h.last_offset
        == kwargs.get("last_offset_delta", records[-1].offset - records[0].offset) + h.base_offset
    )
    assert h.delete_horizon_ms == kwargs.get("delete_horizon_ms")
    log_append = kwargs.get("timestamp_type") == LOG_APPEND_TIME
    expected = [
        Record(r.offset, kwargs["log_append_time"] if log_append else r.timestamp, r.key, r.value, r.headers)
        for r in records
    ]
    assert batch.records() == expected
    assert h.max_timestamp == (kwargs["log_append_time"] if log_append else max(r.timestamp for r in records))
    # kafka-python agrees on every record (it ignores the horizon bit, which is fine: same base).
    assert _as_records(DefaultRecordBatch(bytearray(raw))) == expected
    empty = RecordBatch(build_empty_batch(h))
    assert (
        empty.crc_valid()
        and empty.header.last_offset == h.last_offset
        and not empty.header.has_delete_horizon
    )


def test_batch_header_round_trips_through_pack():
    raw = build_batch([Record(3, 4, b"k", b"v")], partition_leader_epoch=2)
    h = BatchHeader.unpack_from(raw)
    assert h.pack() == raw[:61]
