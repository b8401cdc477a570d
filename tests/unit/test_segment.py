"""Segment iteration per docs/kafka-rules.md#log-file-parsing: mixed formats, positions, trailing bytes,
corruption."""

import struct

import pytest

from compaction.errors import CorruptRecordError, CrcMismatchError, TruncatedBatchError
from compaction.format.batch import Record, RecordBatch
from compaction.format.batch_build import build_batch, build_empty_batch
from compaction.format.legacy import LegacyBatch, build_legacy_message_set
from compaction.format.segment import SegmentReader, iter_batches

PATH = "/data/t-0/00000000000000000000.log"


def _segment():
    parts = [
        build_legacy_message_set([Record(0, 1, b"a", b"1"), Record(1, 2, b"b", b"2")], 0),
        build_legacy_message_set([Record(2, 3, b"c", b"3"), Record(3, 4, b"d", b"4")], 1, codec=1),
        build_batch([Record(4, 5, b"e", b"5"), Record(6, 6, b"f", None)], codec=3),
    ]
    parts.append(build_empty_batch(RecordBatch(parts[-1]).header))
    return b"".join(parts), parts


def test_mixed_formats_positions_and_records():
    buf, parts = _segment()
    reader = SegmentReader(buf, PATH)
    batches = list(reader)
    assert [type(b) for b in batches] == [LegacyBatch, LegacyBatch, LegacyBatch, RecordBatch, RecordBatch]
    assert [b.magic for b in batches] == [0, 0, 1, 2, 2]
    positions = [b.position for b in batches]
    assert positions[0] == 0 and positions[3] == len(parts[0]) + len(parts[1])
    assert all(b.path == PATH for b in batches)
    offsets = [r.offset for b in batches for r in b.records()]
    assert offsets == [0, 1, 2, 3, 4, 6]
    assert reader.trailing_bytes == 0 and reader.stop_position == len(buf)


def test_start_and_end_window():
    buf, parts = _segment()
    start = len(parts[0]) + len(parts[1])
    got = list(iter_batches(buf, PATH, start=start, end=start + len(parts[2])))
    assert len(got) == 1 and got[0].position == start and got[0].header.base_offset == 4


@pytest.mark.parametrize("cut", [1, 11, 12, 16, 17, 40])
def test_partial_trailing_batch_is_reported(cut):
    buf, parts = _segment()
    last = len(buf) - len(parts[-1])
    truncated = buf[: last + cut]
    reader = SegmentReader(truncated, PATH)
    assert len(list(reader)) == 4
    assert reader.trailing_bytes == cut and reader.trailing_position == last
    with pytest.raises(TruncatedBatchError) as info:
        list(iter_batches(truncated, PATH, allow_trailing=False))
    err = info.value
    assert (err.path, err.position, err.available) == (PATH, last, cut)
    assert err.needed == (61 if cut >= 12 else 12)


def test_flipped_byte_is_a_crc_mismatch_with_path_and_position():
    buf, parts = _segment()
    pos = len(parts[0]) + len(parts[1]) + 70  # inside the records of the v2 lz4 batch
    bad = bytearray(buf)
    bad[pos] ^= 0x01
    with pytest.raises(CrcMismatchError) as info:
        list(iter_batches(bytes(bad), PATH))
    err = info.value
    assert (err.path, err.position, err.offset) == (PATH, len(parts[0]) + len(parts[1]), 4)
    assert f"{PATH}: byte {err.position}" in str(err)
    # Without verification the batch is still yielded; its own check says it is bad.
    batches = list(iter_batches(bytes(bad), PATH, verify_crc=False))
    assert not batches[3].crc_valid()


def test_flipped_byte_in_legacy_message():
    buf, _ = _segment()
    bad = bytearray(buf)
    bad[20] ^= 0x80  # inside the first v0 message (28 bytes long)
    with pytest.raises(CrcMismatchError) as info:
        list(iter_batches(bytes(bad), PATH))
    assert info.value.position == 0


@pytest.mark.parametrize("size", [0, 13, -5])
def test_size_below_14_is_corrupt(size):
    buf, parts = _segment()
    bad = bytearray(buf)
    struct.pack_into(">i", bad, len(parts[0]) + 8, size)  # the size field of the third entry
    with pytest.raises(CorruptRecordError, match="smaller than the minimum") as info:
        list(iter_batches(bytes(bad), PATH))
    assert info.value.position == len(parts[0]) and info.value.path == PATH


@pytest.mark.parametrize("magic", [3, -1, 0x7F])
def test_bad_magic_is_corrupt(magic):
    buf, _ = _segment()
    bad = bytearray(buf)
    bad[16] = magic & 0xFF
    with pytest.raises(CorruptRecordError, match="invalid magic") as info:
        list(iter_batches(bytes(bad), PATH))
    assert info.value.position == 0


def test_v2_batch_smaller_than_its_header_is_corrupt():
    tiny = struct.pack(">qiib", 0, 30, -1, 2) + b"\x00" * 25  # size 30 >= 14 but < 49
    with pytest.raises(CorruptRecordError, match="smaller than the 61-byte"):
        list(iter_batches(tiny, PATH))


def test_empty_buffer_and_memoryview_input():
    assert list(iter_batches(b"")) == []
    buf, _ = _segment()
    assert len(list(iter_batches(memoryview(bytearray(buf))))) == 5
