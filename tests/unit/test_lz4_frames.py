"""kernels/lz4_frames.py: LZ4 frames decoded block by block in place, against the library frame
decoder (`compression.inflate`). Whatever the kernel decodes, the library decodes to the same
bytes; whatever it does not take (FALLBACK) is left to the library, never decided corrupt."""

from __future__ import annotations

import os
import random

import lz4.block
import lz4.frame
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.format.compression import CODEC_LZ4, CorruptRecordError, inflate, xxh32
from compaction.format.layout import MAGIC_V2
from compaction.kernels.lz4_frames import FALLBACK, IMPLEMENTATION, _xxh32_short, lz4_frame_into

KIB = 1024


def java_frame(
    data: bytes, block: int = 64 * KIB, stored: tuple[int, ...] = (), content_size: bool = False
) -> bytes:
    """A frame laid out as Kafka's Java producer (`Lz4BlockOutputStream`) writes one: FLG 0x60
    (0x68 with the content size, as librdkafka), BD for `block`, HC, independent blocks (the
    indexes in `stored` written as they are), the end mark."""
    flg = 0x60 | (0x08 if content_size else 0)
    bd = {64 * KIB: 4, 256 * KIB: 5, KIB * KIB: 6, 4 * KIB * KIB: 7}[block] << 4
    descriptor = bytes([flg, bd]) + (len(data).to_bytes(8, "little") if content_size else b"")
    out = [b"\x04\x22\x4d\x18", descriptor, bytes([(xxh32(descriptor) >> 8) & 0xFF])]
    for i in range(0, max(len(data), 1), block):
        chunk = data[i : i + block]
        if not chunk:
            break
        packed = lz4.block.compress(chunk, store_size=False)
        if i // block in stored or len(packed) >= len(chunk):
            out += [(len(chunk) | 0x80000000).to_bytes(4, "little"), chunk]
        else:
            out += [len(packed).to_bytes(4, "little"), packed]
    out.append(b"\x00\x00\x00\x00")
    return b"".join(out)


def decode(frame: bytes, room: int | None = None, pad: int = 3) -> tuple[int, bytes]:
    """(what the kernel returned, the bytes it wrote), the frame placed `pad` bytes into a buffer
    and decoded `pad` bytes into the output, as the scan places them."""
    src = np.frombuffer(b"\xee" * pad + frame + b"\xee" * pad, np.uint8)
    room = len(inflate(CODEC_LZ4, frame)[0]) if room is None else room
    out = np.full(room + 2 * pad, 0xEE, np.uint8)
    got = lz4_frame_into(src, pad, pad + len(frame), out, pad, room)
    assert (out[:pad] == 0xEE).all() and (out[pad + room :] == 0xEE).all(), "wrote outside its room"
    return got, out[pad : pad + max(got, 0)].tobytes()


def text(n: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    words = [b"order", b"customer", b"status", b"shipped", b"42", b"EUR", b"{", b"}", b'"id":']
    return b" ".join(rng.choice(words) for _ in range(n // 5))[:n]


def test_the_block_decoder_is_liblz4s():
    assert IMPLEMENTATION == "LZ4_decompress_safe"


@pytest.mark.parametrize(
    "data, kwargs",
    [
        (text(1_000_000), {}),  # 16 blocks of Kafka's 64 KiB
        (text(200_000), {"block": 256 * KIB}),
        (text(3_000_000), {"block": KIB * KIB}),
        (text(5_000_000), {"block": 4 * KIB * KIB}),
        (os.urandom(150_000), {}),  # incompressible: every block stored as is
        (text(300_000), {"stored": (1, 3)}),  # stored blocks among compressed ones
        (text(100_000), {"content_size": True}),  # librdkafka's FLG
        (text(64 * KIB), {}),  # exactly one full block
        (text(64 * KIB + 1), {}),  # a block of one byte after it
        (b"x", {}),
        (b"", {}),  # the end mark right after the header
    ],
)
def test_frames_as_producers_write_them_decode_as_the_library_decodes_them(data, kwargs):
    frame = java_frame(data, **kwargs)
    assert inflate(CODEC_LZ4, frame) == [data]
    assert decode(frame) == (len(data), data)


@pytest.mark.parametrize("store_size", [False, True])
def test_the_rewrites_own_frames_decode(store_size):
    data = text(700_000, seed=4)
    frame = lz4.frame.compress(
        data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, store_size=store_size
    )
    assert decode(frame) == (len(data), data)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"block_checksum": True},  # checksums: the library checks them
        {"content_checksum": True},
        {"block_linked": True},  # dependent blocks: Kafka refuses them, the library says so
    ],
)
def test_frames_with_what_the_kernel_does_not_check_fall_back(kwargs):
    options = {"block_size": lz4.frame.BLOCKSIZE_MAX64KB, "block_linked": False, "content_checksum": False}
    frame = lz4.frame.compress(text(200_000), **{**options, **kwargs})
    assert decode(frame, room=300_000)[0] == FALLBACK


def _with(frame: bytes, at: int, value: int) -> bytes:
    return frame[:at] + bytes([value]) + frame[at + 1 :]


GOOD = java_frame(text(150_000, seed=9))
SIZED = java_frame(text(150_000, seed=9), content_size=True)


@pytest.mark.parametrize(
    "frame, room",
    [
        (GOOD[:-1], 150_000),  # cut inside the end mark
        (GOOD[:-4], 150_000),  # no end mark
        (GOOD[:40], 150_000),  # cut inside a block
        (GOOD[:7], 150_000),  # the header alone
        (GOOD[:6], 150_000),  # cut before HC
        (GOOD + b"\x00", 150_000),  # a byte after the end mark
        (GOOD + GOOD, 300_000),  # two frames: the library path reads what follows
        (_with(GOOD, 6, GOOD[6] ^ 1), 150_000),  # a wrong HC
        (_with(GOOD, 4, 0x20), 150_000),  # version 00
        (_with(GOOD, 5, 0x30), 150_000),  # BD of no block size (3 << 4)
        (_with(SIZED, 7, SIZED[7] ^ 1), 150_000),  # a content size that is not what it holds (HC wrong too)
        (GOOD, 149_999),  # one byte less room than it decodes to
        (b"\x00" * 16, 150_000),  # no magic
    ],
)
def test_a_frame_that_is_not_exactly_well_formed_falls_back(frame, room):
    assert decode(frame, room=room)[0] == FALLBACK


def test_a_content_size_that_disagrees_falls_back_even_with_a_correct_hc():
    data = text(100_000)
    descriptor = bytes([0x68, 0x40]) + (len(data) + 1).to_bytes(8, "little")
    header = b"\x04\x22\x4d\x18" + descriptor + bytes([(xxh32(descriptor) >> 8) & 0xFF])
    frame = header + java_frame(data)[7:]
    assert decode(frame, room=200_000)[0] == FALLBACK


def test_room_exactly_what_it_decodes_to_is_enough():
    assert decode(GOOD, room=150_000) == (150_000, text(150_000, seed=9))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_frames_decode_as_the_library_decodes_them_or_fall_back(data):
    frame = bytearray(java_frame(text(200_000, seed=3), stored=(1,)))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(frame) - 1))
        frame[at] = data.draw(st.integers(0, 255))
    frame = bytes(frame)
    got, out = decode(frame, room=300_000)
    try:
        expected = b"".join(inflate(CODEC_LZ4, frame, MAGIC_V2))
    except CorruptRecordError:
        expected = None
    if got != FALLBACK:
        assert out == expected


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=15))
def test_the_kernels_xxhash_is_the_formats(data):
    assert _xxh32_short(np.frombuffer(data + b"\x00", np.uint8), 0, len(data)) == xxh32(data)
