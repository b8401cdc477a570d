"""The compiled bounds (`kernels/inflate_bounds.py`) are `compression.inflate_bound`'s, region by
region: for frames of every option the libraries write, for those frames cut, extended, with bytes
changed, and for random bytes behind each codec's magic."""

from __future__ import annotations

import lz4.frame
import numpy as np
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.format.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    LZ4_FRAME_MAGIC,
    compress,
    inflate_bound,
)
from compaction.kernels.inflate_bounds import NO_BOUND, inflate_bounds

ZSTD_MAGIC_BYTES = (0xFD2FB528).to_bytes(4, "little")
ZSTD_SKIPPABLE_BYTES = (0x184D2A53).to_bytes(4, "little")


def _lz4(data: bytes, draw) -> bytes:
    return lz4.frame.compress(
        data,
        block_size=draw(
            st.sampled_from(
                [
                    lz4.frame.BLOCKSIZE_MAX64KB,
                    lz4.frame.BLOCKSIZE_MAX256KB,
                    lz4.frame.BLOCKSIZE_MAX1MB,
                    lz4.frame.BLOCKSIZE_MAX4MB,
                ]
            )
        ),
        block_linked=draw(st.booleans()),
        store_size=draw(st.booleans()),
        block_checksum=draw(st.booleans()),
        content_checksum=draw(st.booleans()),
    )


def _zstd(data: bytes, draw) -> bytes:
    frames = b""
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            skip = draw(st.binary(max_size=20))
            frames += ZSTD_SKIPPABLE_BYTES + len(skip).to_bytes(4, "little") + skip
        z = zstandard.ZstdCompressor(
            level=draw(st.integers(1, 19)),
            write_checksum=draw(st.booleans()),
            write_content_size=draw(st.booleans()),
        )
        frames += z.compress(data)
    return frames


def _lz4_by_hand(draw) -> bytes:
    """An lz4 frame built from its fields: any FLG and BD, blocks of any size and kind."""
    flg = (
        draw(st.integers(0, 255))
        if draw(st.booleans())
        else 0x60 | draw(st.sampled_from([0, 1, 4, 5, 8, 9, 16, 29]))
    )
    bd = draw(st.integers(0, 255)) if draw(st.booleans()) else draw(st.integers(3, 7)) << 4
    frame = LZ4_FRAME_MAGIC + bytes([flg, bd])
    frame += draw(st.binary(min_size=8, max_size=8)) if flg & 0x08 else b""
    frame += draw(st.binary(min_size=4, max_size=4)) if flg & 0x01 else b""
    frame += draw(st.binary(min_size=1, max_size=1))  # HC: not checked by the walk
    for stored, size in draw(st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=5)):
        frame += (size | (stored << 31)).to_bytes(4, "little") + draw(st.binary(min_size=size, max_size=size))
        frame += draw(st.binary(min_size=4, max_size=4)) if flg & 0x10 else b""
    frame += b"\0\0\0\0"
    return frame + (draw(st.binary(min_size=4, max_size=4)) if flg & 0x04 else b"")


def _zstd_by_hand(draw) -> bytes:
    """zstd frames built from their fields: any frame header descriptor, blocks of every type."""
    frames = b""
    for _ in range(draw(st.integers(1, 2))):
        fhd = draw(st.integers(0, 255))
        single, dict_id, fcs = (fhd >> 5) & 1, fhd & 3, fhd >> 6
        header = ZSTD_MAGIC_BYTES + bytes([fhd]) + b"\x40" * (1 - single)
        header += b"\1" * (0, 1, 2, 4)[dict_id] + b"\2" * (single, 2, 4, 8)[fcs]
        kinds = st.sampled_from([0, 1, 2] * 3 + [3])  # raw, RLE, compressed; rarely the reserved one
        blocks = draw(st.lists(st.tuples(kinds, st.integers(0, 40)), min_size=1, max_size=3))
        for n, (kind, size) in enumerate(blocks):
            last = n == len(blocks) - 1
            header += (last | (kind << 1) | (size << 3)).to_bytes(3, "little")
            header += b"\7" * (1 if kind == 1 else size)
        frames += header + b"\3" * 4 * ((fhd >> 2) & 1)
    return frames


@st.composite
def payloads(draw) -> tuple[int, bytes]:
    """(codec, payload): a frame the libraries write or one built field by field, maybe broken
    after, or random bytes behind a magic."""
    codec = draw(st.sampled_from([CODEC_LZ4, CODEC_ZSTD, CODEC_SNAPPY, CODEC_GZIP, CODEC_NONE]))
    data = draw(st.binary(max_size=2000)) * draw(st.integers(1, 300))
    kind = draw(st.sampled_from(["frame", "by hand", "random"]))
    if kind == "random":
        magic = {
            CODEC_LZ4: LZ4_FRAME_MAGIC,
            CODEC_ZSTD: draw(st.sampled_from([ZSTD_MAGIC_BYTES, ZSTD_SKIPPABLE_BYTES])),
        }
        return codec, magic.get(codec, b"") + draw(st.binary(max_size=200))
    if kind == "by hand" and codec in (CODEC_LZ4, CODEC_ZSTD):
        payload = _lz4_by_hand(draw) if codec == CODEC_LZ4 else _zstd_by_hand(draw)
    elif codec == CODEC_LZ4:
        payload = _lz4(data, draw)
    elif codec == CODEC_ZSTD:
        payload = _zstd(data, draw)
    else:
        payload = compress(codec, data)
    if draw(st.booleans()):
        payload = bytearray(payload)
        for _ in range(draw(st.integers(1, 3))):
            how = draw(st.sampled_from(["cut", "extend", "flip", "header"]))
            if how == "cut" and payload:
                del payload[draw(st.integers(0, len(payload) - 1)) :]
            elif how == "extend":
                payload += draw(st.binary(min_size=1, max_size=8))
            elif how == "flip" and payload:
                payload[draw(st.integers(0, len(payload) - 1))] ^= 1 << draw(st.integers(0, 7))
            elif how == "header" and payload:  # the descriptor and first block headers
                at = draw(st.integers(0, min(len(payload), 24) - 1))
                payload[at] = draw(st.integers(0, 255))
        payload = bytes(payload)
    return codec, payload


@settings(max_examples=400, deadline=None)
@given(st.lists(payloads(), min_size=1, max_size=6), st.integers(0, 7), st.sampled_from([0, 1, 2]))
def test_the_kernel_bounds_are_inflate_bound_region_by_region(regions, gap, magic):
    buf, start, end = bytearray(), [], []
    for _, payload in regions:
        buf += b"\xa5" * gap  # what lies between regions must not be read
        start.append(len(buf))
        buf += payload
        end.append(len(buf))
    buf += b"\xa5" * gap
    got = inflate_bounds(
        np.frombuffer(bytes(buf), np.uint8),
        np.array(start),
        np.array(end),
        np.array([c for c, _ in regions]),
        magic,
    )
    want = [inflate_bound(codec, payload, magic) for codec, payload in regions]
    assert got.tolist() == [NO_BOUND if b is None else b for b in want]


def test_kafka_framed_batches_have_their_declared_bounds():
    data = b"record bytes " * 20000
    payloads = [compress(c, data) for c in (CODEC_LZ4, CODEC_ZSTD, CODEC_SNAPPY, CODEC_GZIP)]
    buf = np.frombuffer(b"".join(payloads), np.uint8)
    ends = np.cumsum([len(p) for p in payloads])
    got = inflate_bounds(
        buf,
        ends - [len(p) for p in payloads],
        ends,
        np.array([CODEC_LZ4, CODEC_ZSTD, CODEC_SNAPPY, CODEC_GZIP]),
    )
    # lz4: four 64 KiB blocks (Kafka's block size); zstd: two 128 KiB blocks; snappy: exactly
    assert got.tolist() == [4 * (64 << 10), 2 * (128 << 10), len(data), NO_BOUND]
