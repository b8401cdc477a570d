"""format/layout.py: the offsets, sizes and masks agree with every codec's struct.Struct (golden bytes
with a distinct value in each field), with the numpy views of the same headers, and with kafka-python
(an independent implementation)."""

from __future__ import annotations

import numpy as np
from kafka.record.default_records import DefaultRecordBase
from kafka.record.legacy_records import LegacyRecordBase

from compaction.format import batch as fb
from compaction.format import compression, index, layout, legacy, segment, txnindex
from compaction.format.batch_build import build_batch
from compaction.format.layout import (
    ATTRIBUTE_FLAGS_OFFSET,
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CRC_COVERED_FROM,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LEGACY_ATTRIBUTES_OFFSET,
    LEGACY_CRC_OFFSET,
    LEGACY_KEY_LENGTH_OFFSET_V0,
    LEGACY_KEY_LENGTH_OFFSET_V1,
    LEGACY_LENGTH_SIZE,
    LEGACY_MAGIC_OFFSET,
    LEGACY_TIMESTAMP_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
)
from compaction.kernels.rebuild import HEADER_DTYPE

# (offset, width, value): a distinct byte pattern per field, so a field read at the wrong offset or
# width cannot match.
V2_FIELDS = {
    "base_offset": (BASE_OFFSET_OFFSET, 8, 0x0102030405060708),
    "batch_length": (LENGTH_OFFSET, 4, 0x11121314),
    "partition_leader_epoch": (PARTITION_LEADER_EPOCH_OFFSET, 4, 0x21222324),
    "magic": (MAGIC_OFFSET, 1, 2),
    "crc": (CRC_OFFSET, 4, 0x31323334),
    "attributes": (ATTRIBUTES_OFFSET, 2, 0x4142),
    "last_offset_delta": (LAST_OFFSET_DELTA_OFFSET, 4, 0x51525354),
    "base_timestamp": (BASE_TIMESTAMP_OFFSET, 8, 0x6162636465666768),
    "max_timestamp": (MAX_TIMESTAMP_OFFSET, 8, 0x7172737475767778),
    "producer_id": (PRODUCER_ID_OFFSET, 8, 0x0A0B0C0D0E0F1011),
    "producer_epoch": (PRODUCER_EPOCH_OFFSET, 2, 0x1A1B),
    "base_sequence": (BASE_SEQUENCE_OFFSET, 4, 0x2A2B2C2D),
    "records_count": (RECORDS_COUNT_OFFSET, 4, 0x3A3B3C3D),
}
V2_GOLDEN = bytes.fromhex(
    "0102030405060708"
    "11121314"
    "21222324"
    "02"
    "31323334"
    "4142"
    "51525354"
    "6162636465666768"
    "7172737475767778"
    "0a0b0c0d0e0f1011"
    "1a1b"
    "2a2b2c2d"
    "3a3b3c3d"
)


def test_v2_header_struct_puts_each_field_at_its_layout_offset():
    raw = fb.BATCH_HEADER.pack(*(value for _, _, value in V2_FIELDS.values()))
    assert raw == V2_GOLDEN and len(raw) == fb.BATCH_HEADER.size == RECORD_BATCH_OVERHEAD
    for name, (offset, width, value) in V2_FIELDS.items():
        assert raw[offset : offset + width] == value.to_bytes(width, "big"), name
    assert RECORD_BATCH_OVERHEAD == RECORDS_COUNT_OFFSET + 4
    assert ATTRIBUTE_FLAGS_OFFSET == ATTRIBUTES_OFFSET + 1  # the low byte of the int16
    assert CRC_COVERED_FROM == CRC_OFFSET + 4 == ATTRIBUTES_OFFSET


def test_v2_header_numpy_view_matches_the_layout():
    assert HEADER_DTYPE.itemsize == RECORD_BATCH_OVERHEAD
    for name, (offset, width, _) in V2_FIELDS.items():
        dtype, at = HEADER_DTYPE.fields[name][:2]
        assert (at, dtype.itemsize) == (offset, width), name
    row = np.frombuffer(V2_GOLDEN, HEADER_DTYPE)[0]
    assert all(int(row[name]) == value for name, (_, _, value) in V2_FIELDS.items())


def test_built_batch_reads_back_at_layout_offsets():
    raw = build_batch(
        [fb.Record(100, 1000, b"k", b"v"), fb.Record(105, 900, None, None)],
        codec=1,
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
        is_transactional=True,
        partition_leader_epoch=5,
        delete_horizon_ms=2000,
    )
    h = fb.RecordBatch(raw).header
    at = lambda offset, width: int.from_bytes(raw[offset : offset + width], "big", signed=True)  # noqa: E731
    assert (at(BASE_OFFSET_OFFSET, 8), at(LENGTH_OFFSET, 4), at(PARTITION_LEADER_EPOCH_OFFSET, 4)) == (
        h.base_offset,
        len(raw) - LOG_OVERHEAD,
        5,
    )
    assert (at(LAST_OFFSET_DELTA_OFFSET, 4), at(BASE_TIMESTAMP_OFFSET, 8), at(MAX_TIMESTAMP_OFFSET, 8)) == (
        h.last_offset_delta,
        h.base_timestamp,
        h.max_timestamp,
    )
    assert (at(PRODUCER_ID_OFFSET, 8), at(PRODUCER_EPOCH_OFFSET, 2), at(BASE_SEQUENCE_OFFSET, 4)) == (
        7,
        3,
        11,
    )
    assert at(RECORDS_COUNT_OFFSET, 4) == 2 and raw[MAGIC_OFFSET] == layout.MAGIC_V2
    flags = raw[ATTRIBUTE_FLAGS_OFFSET]
    assert flags & layout.COMPRESSION_CODEC_MASK == compression.CODEC_GZIP
    assert flags & layout.TRANSACTIONAL_MASK and flags & layout.DELETE_HORIZON_MASK
    assert not flags & (layout.CONTROL_MASK | layout.TIMESTAMP_TYPE_MASK)
    assert fb.RecordBatch(raw).crc_valid()


def test_legacy_structs_put_each_field_at_its_layout_offset():
    fields = (0x0102030405060708, 0x11121314, 0x31323334, 1, 0x41)
    raw = legacy.MESSAGE_HEADER_V1.pack(*fields, 0x6162636465666768)
    assert (
        raw[:8] == fields[0].to_bytes(8, "big")
        and raw[layout.SIZE_OFFSET : LOG_OVERHEAD] == b"\x11\x12\x13\x14"
    )
    assert raw[LEGACY_CRC_OFFSET : LEGACY_CRC_OFFSET + 4] == b"\x31\x32\x33\x34"
    assert raw[LEGACY_MAGIC_OFFSET] == 1 and raw[LEGACY_ATTRIBUTES_OFFSET] == 0x41
    assert raw[LEGACY_TIMESTAMP_OFFSET : LEGACY_TIMESTAMP_OFFSET + 8] == bytes.fromhex("6162636465666768")
    assert legacy.MESSAGE_HEADER_V0.size == LEGACY_KEY_LENGTH_OFFSET_V0
    assert legacy.MESSAGE_HEADER_V1.size == LEGACY_KEY_LENGTH_OFFSET_V1
    assert legacy.LOG_ENTRY_HEADER.size == segment.ENTRY_PREFIX.size == LOG_OVERHEAD
    assert legacy.LENGTH_FIELD.size == LEGACY_LENGTH_SIZE
    for magic, header in ((0, legacy.MESSAGE_HEADER_V0), (1, legacy.MESSAGE_HEADER_V1)):
        assert legacy.RECORD_OVERHEAD[magic] == header.size - LOG_OVERHEAD + 2 * LEGACY_LENGTH_SIZE


def test_encoded_legacy_message_keys_start_after_their_length():
    for magic, key_at in ((0, LEGACY_KEY_LENGTH_OFFSET_V0), (1, LEGACY_KEY_LENGTH_OFFSET_V1)):
        raw = legacy.encode_message(9, magic, 0, 1234, b"abc", b"xyz")
        assert int.from_bytes(raw[key_at : key_at + LEGACY_LENGTH_SIZE], "big") == 3
        assert raw[key_at + LEGACY_LENGTH_SIZE : key_at + LEGACY_LENGTH_SIZE + 3] == b"abc"
        assert len(raw) == LOG_OVERHEAD + legacy.RECORD_OVERHEAD[magic] + 6


def test_index_entry_structs_and_dtypes_match_the_layout():
    assert index.OFFSET_ENTRY.size == index.OFFSET_ENTRY_DTYPE.itemsize == layout.OFFSET_ENTRY_SIZE
    assert index.TIME_ENTRY.size == index.TIME_ENTRY_DTYPE.itemsize == layout.TIME_ENTRY_SIZE
    assert txnindex.ABORTED_TXN.size == layout.ABORTED_TXN_SIZE


def test_layout_agrees_with_kafka_python():
    d, lg = DefaultRecordBase, LegacyRecordBase
    assert (d.ATTRIBUTES_OFFSET, d.CRC_OFFSET, d.AFTER_LEN_OFFSET) == (
        ATTRIBUTES_OFFSET,
        CRC_OFFSET,
        LOG_OVERHEAD,
    )
    assert d.HEADER_STRUCT.size == RECORD_BATCH_OVERHEAD
    assert (d.CODEC_MASK, d.TIMESTAMP_TYPE_MASK) == (
        layout.COMPRESSION_CODEC_MASK,
        layout.TIMESTAMP_TYPE_MASK,
    )
    assert (d.TRANSACTIONAL_MASK, d.CONTROL_MASK) == (layout.TRANSACTIONAL_MASK, layout.CONTROL_MASK)
    assert (d.CODEC_NONE, d.CODEC_GZIP, d.CODEC_SNAPPY, d.CODEC_LZ4, d.CODEC_ZSTD) == (
        layout.CODEC_NONE,
        layout.CODEC_GZIP,
        layout.CODEC_SNAPPY,
        layout.CODEC_LZ4,
        layout.CODEC_ZSTD,
    )
    assert (d.CREATE_TIME, d.LOG_APPEND_TIME) == (layout.CREATE_TIME, layout.LOG_APPEND_TIME)
    assert (lg.CRC_OFFSET, lg.MAGIC_OFFSET, lg.LOG_OVERHEAD) == (
        LEGACY_CRC_OFFSET,
        LEGACY_MAGIC_OFFSET,
        LOG_OVERHEAD,
    )
    assert (lg.KEY_OFFSET_V0, lg.KEY_OFFSET_V1) == (LEGACY_KEY_LENGTH_OFFSET_V0, LEGACY_KEY_LENGTH_OFFSET_V1)
    assert (lg.RECORD_OVERHEAD_V0, lg.RECORD_OVERHEAD_V1) == (
        layout.RECORD_OVERHEAD_V0,
        layout.RECORD_OVERHEAD_V1,
    )
    assert lg.HEADER_STRUCT_V1.size == LEGACY_TIMESTAMP_OFFSET + 8
