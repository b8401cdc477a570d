"""The five codecs: round trips, Kafka's framing details, variants real producers write, errors."""

import gzip
import os
import struct

import cramjam
import lz4.frame
import pytest
import zstandard

from compaction.errors import CorruptRecordError, UnsupportedCodecError
from compaction.format.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NAMES,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    compress,
    decompress,
    xxh32,
)

# Compressible and incompressible data that spans several 32 KiB / 64 KiB blocks.
PAYLOADS = [b"", b"x", b"hello kafka " * 20000, os.urandom(150_000)]


@pytest.mark.parametrize("codec", sorted(CODEC_NAMES))
@pytest.mark.parametrize("magic", [0, 1, 2])
@pytest.mark.parametrize("data", PAYLOADS, ids=["empty", "one", "text", "random"])
def test_round_trip(codec, magic, data):
    if codec == CODEC_ZSTD and magic < 2:
        pytest.skip("zstd is illegal for magic < 2 (tested below)")
    assert decompress(codec, memoryview(compress(codec, data, magic)), magic) == data


def test_gzip_is_a_single_rfc1952_member_with_mtime_zero():
    out = compress(CODEC_GZIP, b"abc" * 100)
    assert out[:4] == b"\x1f\x8b\x08\x00" and out[4:8] == b"\x00\x00\x00\x00"
    assert gzip.decompress(out) == b"abc" * 100


def test_gzip_reader_accepts_concatenated_members():
    assert decompress(CODEC_GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


def test_snappy_writes_xerial_framing_in_32k_chunks():
    data = os.urandom(XERIAL_BLOCK_SIZE * 2 + 10)
    out = compress(CODEC_SNAPPY, data)
    assert out[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    pos, chunks = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        chunks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert [len(c) for c in chunks] == [XERIAL_BLOCK_SIZE, XERIAL_BLOCK_SIZE, 10]
    assert b"".join(chunks) == data


def test_snappy_reader_accepts_a_bare_raw_block():
    raw = bytes(cramjam.snappy.compress_raw(b"plain snappy block"))
    assert decompress(CODEC_SNAPPY, raw) == b"plain snappy block"


def test_snappy_reader_accepts_concatenated_xerial_streams():
    joined = compress(CODEC_SNAPPY, b"first,") + compress(CODEC_SNAPPY, b"second")
    assert decompress(CODEC_SNAPPY, joined) == b"first,second"


def test_snappy_official_framing_is_not_accepted():
    framed = bytes(cramjam.snappy.compress(b"official framing"))  # "sNaPpY" stream format
    with pytest.raises(CorruptRecordError):
        decompress(CODEC_SNAPPY, framed)


def test_lz4_frame_header_matches_kafkas_writer():
    out = compress(CODEC_LZ4, b"abc" * 1000)
    assert out[:4] == b"\x04\x22\x4d\x18"
    assert out[4] == 0x60  # version 01, independent blocks, no checksums, no content size
    assert out[5] == 0x40  # 64 KiB max block
    assert out[6] == (xxh32(out[4:6]) >> 8) & 0xFF
    assert lz4.frame.decompress(out) == b"abc" * 1000


def test_lz4_magic_v0_uses_the_broken_header_checksum():
    out = compress(CODEC_LZ4, b"abc" * 1000, magic=0)
    assert out[6] == (xxh32(out[:6]) >> 8) & 0xFF  # over magic+FLG+BD (Kafka 0.8/0.9)
    assert out[6] != (xxh32(out[4:6]) >> 8) & 0xFF
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(out)  # a strict reader rejects it ...
    assert decompress(CODEC_LZ4, out, magic=0) == b"abc" * 1000  # ... Kafka's v0 reader does not


def test_lz4_reader_accepts_a_content_size_field():
    frame = lz4.frame.compress(b"sized" * 100, block_linked=False, store_size=True)
    assert decompress(CODEC_LZ4, frame) == b"sized" * 100


def test_lz4_dependent_blocks_are_rejected_like_kafka():
    frame = bytearray(compress(CODEC_LZ4, b"linked" * 100))
    frame[4] &= ~0x20  # clear FLG block independence, fix up the header checksum
    frame[6] = (xxh32(bytes(frame[4:6])) >> 8) & 0xFF
    linked = bytes(frame)
    with pytest.raises(CorruptRecordError, match="Dependent block"):
        decompress(CODEC_LZ4, linked)


def test_xxh32_known_values():
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF


def test_zstd_frame_without_content_size_decodes():
    frame = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(b"streamed" * 1000)
    assert decompress(CODEC_ZSTD, frame) == b"streamed" * 1000


def test_zstd_streaming_frame_from_compressobj():
    cobj = zstandard.ZstdCompressor(level=3).compressobj()
    frame = cobj.compress(b"chunk" * 5000) + cobj.flush()
    assert decompress(CODEC_ZSTD, frame) == b"chunk" * 5000


def test_zstd_concatenated_frames_decode_like_zstd_input_stream():
    one = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(b"a" * 700)
    two = zstandard.ZstdCompressor(level=1).compress(b"b" * 90)
    assert decompress(CODEC_ZSTD, one + two) == b"a" * 700 + b"b" * 90


def test_zstd_truncated_frame_is_an_error_not_fewer_bytes():
    frame = zstandard.ZstdCompressor(level=3).compress(bytes(range(256)) * 64)
    for cut in (1, 5, len(frame) // 2):
        with pytest.raises(CorruptRecordError, match="truncated"):
            decompress(CODEC_ZSTD, frame[:-cut], path="/p/0.log", position=7)


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_is_illegal_for_legacy_magic(magic):
    with pytest.raises(UnsupportedCodecError):
        compress(CODEC_ZSTD, b"x", magic)
    with pytest.raises(UnsupportedCodecError):
        decompress(CODEC_ZSTD, b"x", magic)


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec):
    with pytest.raises(UnsupportedCodecError):
        compress(codec, b"x")
    with pytest.raises(UnsupportedCodecError, match="unknown compression codec"):
        decompress(codec, b"x", path="seg.log", position=7)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_garbage_is_a_corrupt_record_error_with_location(codec):
    with pytest.raises(CorruptRecordError) as info:
        decompress(
            codec,
            b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x05garbage"
            if codec == CODEC_SNAPPY
            else b"garbage bytes",
            path="seg.log",
            position=99,
        )
    assert info.value.path == "seg.log" and info.value.position == 99


def test_none_is_identity():
    assert decompress(CODEC_NONE, memoryview(b"abc")) == b"abc"
    assert compress(CODEC_NONE, b"abc") == b"abc"
