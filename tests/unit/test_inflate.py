"""Bounded inflating: decompression bombs of every codec are refused at the bound with a typed
error naming the codec, the bound, the file and the byte position, within bounded memory (the
peak RSS of a fresh process, measured); batches under the bound inflate exactly, in pieces when
they are big; the size check against max.message.bytes comes before any inflating."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import cramjam
import lz4.frame
import numpy as np
import pytest
import zstandard
from bombkit import BOMBS, MiB, bomb_batch, gzip_bomb, lz4_bomb, zstd_bomb
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.errors import CorruptRecordError, InflateLimitError
from compaction.format import compression
from compaction.format.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NAMES,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    PIECE_BYTES,
    compress,
    decompress,
    inflate,
    inflate_bound,
    inflate_into,
)
from compaction.kernels.scan import scan_segment

HELPERS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "helpers")


@pytest.mark.parametrize("codec", sorted(BOMBS), ids=lambda c: CODEC_NAMES[c])
def test_a_bomb_stops_at_the_bound_with_codec_bound_file_and_position(codec):
    data = BOMBS[codec](64 * MiB)
    with pytest.raises(InflateLimitError) as err:
        inflate(codec, data, path="t-0/00000000000000000000.log", position=1234, limit=8 * MiB)
    e = err.value
    assert (e.codec, e.limit, e.path, e.position) == (
        CODEC_NAMES[codec],
        8 * MiB,
        "t-0/00000000000000000000.log",
        1234,
    )
    assert str(e).startswith(
        f"t-0/00000000000000000000.log: byte 1234: {CODEC_NAMES[codec]} records of {len(data)} "
    )
    assert "more than 8388608 bytes (--max-inflated-batch-bytes)" in str(e)


@pytest.mark.parametrize("codec", sorted(BOMBS), ids=lambda c: CODEC_NAMES[c])
@pytest.mark.parametrize("size", [PIECE_BYTES, PIECE_BYTES + (64 << 10)])
def test_at_the_bound_a_big_batch_inflates_exactly_in_pieces(codec, size):
    pieces = inflate(codec, BOMBS[codec](size), limit=size)
    assert sum(len(p) for p in pieces) == size
    assert all(len(p) <= PIECE_BYTES for p in pieces)
    assert not any(np.frombuffer(p, np.uint8).any() for p in pieces)
    with pytest.raises(InflateLimitError):
        inflate(codec, BOMBS[codec](size), limit=size - 1)


@pytest.mark.parametrize(
    "codec", [CODEC_ZSTD, CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY], ids=lambda c: CODEC_NAMES[c]
)
def test_big_batches_of_real_data_inflate_the_same_through_pieces(codec):
    rng = np.random.default_rng(5)
    data = rng.integers(0, 16, 40 * MiB, dtype=np.uint8).tobytes()  # ~2:1, two pieces
    assert decompress(codec, compress(codec, data)) == data


def test_a_bomb_inflates_no_further_than_the_bound_in_memory():
    """A fresh process inflates a 1 GiB bomb of each codec under a 64 MiB bound: its peak RSS
    grows by about the bound, not by the bomb (without the bound: >= 1 GiB)."""
    script = textwrap.dedent(f"""
        import resource, sys
        sys.path.insert(0, {HELPERS!r})
        from bombkit import BOMBS
        from compaction.errors import InflateLimitError
        from compaction.format.compression import inflate
        codec = int(sys.argv[1])
        data = BOMBS[codec](1 << 30)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            inflate(codec, data, limit=64 << 20)
        except InflateLimitError:
            pass
        else:
            raise SystemExit("not refused")
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
    """)
    for codec in sorted(BOMBS):
        out = subprocess.run(
            [sys.executable, "-c", script, str(codec)], capture_output=True, text=True, check=True
        )
        grown = int(out.stdout) * 1024
        # the bound + one 32 MiB piece + the libraries' buffers
        assert grown < 64 * MiB + PIECE_BYTES + 40 * MiB, (CODEC_NAMES[codec], grown)


@pytest.mark.parametrize(
    "codec, cut", [(CODEC_GZIP, 9), (CODEC_LZ4, 9), (CODEC_ZSTD, 3)], ids=["gzip", "lz4", "zstd"]
)
def test_a_truncated_big_batch_is_corrupt_not_short(codec, cut):
    data = {CODEC_GZIP: gzip_bomb, CODEC_LZ4: lz4_bomb, CODEC_ZSTD: zstd_bomb}[codec](2 * PIECE_BYTES)
    with pytest.raises(CorruptRecordError):
        inflate(codec, data[:-cut], limit=4 * PIECE_BYTES)


def test_a_zstd_bomb_with_trailing_garbage_is_corrupt():
    with pytest.raises(CorruptRecordError):
        inflate(CODEC_ZSTD, zstd_bomb(2 * PIECE_BYTES) + b"garbage!", limit=4 * PIECE_BYTES)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(max_size=3000), st.integers(1, 19), st.booleans(), st.booleans()),
        min_size=1,
        max_size=3,
    ),
    st.integers(1, 400),
)
def test_zstd_bound_covers_what_frames_regenerate(frames, repeat):
    """The block-header walk's bound is at least the output, for frames of any level, with or
    without content size and checksum, one after the other."""
    payload, out = b"", b""
    for data, level, checksum, size in frames:
        data = data * repeat
        z = zstandard.ZstdCompressor(level=level, write_checksum=checksum, write_content_size=size)
        payload += z.compress(data)
        out += data
    bound = compression._zstd_bound(memoryview(payload))
    assert bound is not None and bound >= len(out)
    assert decompress(CODEC_ZSTD, payload, limit=max(len(out), 1)) == out


@settings(max_examples=60, deadline=None)
@given(
    st.binary(max_size=3000),
    st.integers(1, 400),
    st.sampled_from(
        [
            lz4.frame.BLOCKSIZE_MAX64KB,
            lz4.frame.BLOCKSIZE_MAX256KB,
            lz4.frame.BLOCKSIZE_MAX1MB,
            lz4.frame.BLOCKSIZE_MAX4MB,
        ]
    ),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_lz4_bound_covers_what_a_frame_regenerates(
    data, repeat, block_size, linked, size, block_sum, content_sum
):
    """The block-header walk's bound is at least the output, for frames of any block size, with
    or without content size and checksums; the frame decompressed into a buffer of that size is
    the data."""
    data *= repeat
    frame = lz4.frame.compress(
        data,
        block_size=block_size,
        block_linked=linked,
        store_size=size,
        block_checksum=block_sum,
        content_checksum=content_sum,
    )
    bound = inflate_bound(CODEC_LZ4, frame)
    # liblz4 marks a frame of one block independent whatever it was asked for
    if not frame[4] & compression.LZ4_FLG_BLOCK_INDEPENDENT:
        # Kafka's reader refuses dependent blocks (liblz4 reads them): no bound, refused
        assert bound is None
        with pytest.raises(CorruptRecordError, match="Dependent block"):
            inflate_into(CODEC_LZ4, frame, np.zeros(len(data) + 1, np.uint8))
        return
    assert bound is not None and bound >= len(data)
    out = np.zeros(bound, np.uint8)
    assert out[: inflate_into(CODEC_LZ4, frame, out)].tobytes() == data == decompress(CODEC_LZ4, frame)


def test_a_bound_is_declared_only_by_framing_that_ends_exactly_at_the_end():
    data = b"record bytes " * 5000
    lz4_frame, zstd_frame = compress(CODEC_LZ4, data), compress(CODEC_ZSTD, data)
    assert inflate_bound(CODEC_LZ4, lz4_frame) == 64 << 10  # one compressed 64 KiB block
    assert inflate_bound(CODEC_SNAPPY, compress(CODEC_SNAPPY, data)) == len(data)  # declared exactly
    for codec, payload in [
        (CODEC_LZ4, lz4_frame + lz4_frame),  # Kafka's reader stops after the first frame
        (CODEC_LZ4, lz4_frame + b"x"),
        (CODEC_LZ4, lz4_frame[:-1]),
        (CODEC_ZSTD, zstd_frame + b"x"),
        (CODEC_ZSTD, zstd_frame[:-1]),
        (CODEC_GZIP, compress(CODEC_GZIP, data)),  # deflate declares nothing
        (CODEC_SNAPPY, bytes(cramjam.snappy.compress_raw(data))),  # a bare raw block
    ]:
        assert inflate_bound(codec, payload) is None, CODEC_NAMES[codec]
    assert inflate_bound(CODEC_LZ4, compress(CODEC_LZ4, data, magic=0), magic=0) is None


@pytest.mark.parametrize("codec", [CODEC_ZSTD, CODEC_LZ4, CODEC_SNAPPY], ids=lambda c: CODEC_NAMES[c])
def test_inflating_into_a_buffer_is_exact_and_never_writes_past_it(codec):
    data = bytes(range(256)) * 3000 + b"tail"
    payload = compress(codec, data)
    bound = inflate_bound(codec, payload)
    out = np.full(bound + 16, 7, np.uint8)
    assert out[: inflate_into(codec, payload, out[:bound])].tobytes() == data
    assert (out[bound:] == 7).all()
    short = np.full(len(data), 7, np.uint8)
    with pytest.raises(CorruptRecordError, match="past the 768003 bytes their framing declares") as err:
        inflate_into(codec, payload, short[:-1], path="t-0/x.log", position=61)
    assert (err.value.path, err.value.position) == ("t-0/x.log", 61)
    assert short[-1] == 7
    with pytest.raises(CorruptRecordError):  # cut short
        inflate_into(codec, payload[:-5], out)


@pytest.mark.parametrize("codec", [CODEC_ZSTD, CODEC_LZ4, CODEC_SNAPPY], ids=lambda c: CODEC_NAMES[c])
def test_a_bomb_inflated_into_a_buffer_stops_at_the_limit(codec):
    """A bomb whose framing declares more than the buffer: refused by `inflate` at the limit, typed."""
    bomb = BOMBS[codec](64 * MiB)
    assert inflate_bound(codec, bomb) >= 64 * MiB
    with pytest.raises(InflateLimitError):
        inflate_into(codec, bomb, np.empty(MiB, np.uint8), limit=8 * MiB)
    with pytest.raises(CorruptRecordError, match="past the"):
        inflate_into(codec, bomb, np.empty(MiB, np.uint8), limit=64 * MiB)


def test_the_size_check_comes_before_inflating(monkeypatch):
    segment = bomb_batch(CODEC_ZSTD, 4 << 30)
    monkeypatch.setattr(compression, "inflate", lambda *a, **k: pytest.fail("inflated"))
    with pytest.raises(CorruptRecordError, match=r"larger than max\.message\.bytes 1000"):
        scan_segment(np.frombuffer(segment, np.uint8), "t-0/x.log", max_batch_bytes=1000)


def test_scan_segment_refuses_a_bomb_naming_the_batch():
    segment = bomb_batch(CODEC_LZ4, 2 * PIECE_BYTES, base_offset=0) + bomb_batch(
        CODEC_ZSTD, 4 << 30, base_offset=1
    )
    with pytest.raises(InflateLimitError) as err:
        scan_segment(np.frombuffer(segment, np.uint8), "t-0/x.log", inflate_limit=3 * PIECE_BYTES)
    first = len(bomb_batch(CODEC_LZ4, 2 * PIECE_BYTES))
    assert (err.value.path, err.value.position, err.value.codec, err.value.offset) == (
        "t-0/x.log",
        first,
        "zstd",
        1,
    )


@pytest.mark.timeout(60)  # ~1 s; a copy of the rest of the batch per member takes hours
def test_many_small_gzip_members_with_padding_inflate_in_linear_time():
    """A big batch of 60,000 tiny members, zero padding between them: each is read once (the
    input is handed to a member a few KiB at a time, not the rest of the batch each time)."""
    from isal import igzip

    member = igzip.compress(b"abc" * 10)
    data = (member + b"\0" * 5) * 60_000 + member
    assert len(data) * compression.DEFLATE_MAX_RATIO > PIECE_BYTES  # the piecewise path
    assert decompress(CODEC_GZIP, data) == b"abc" * 10 * 60_001
    assert decompress(CODEC_GZIP, igzip.compress(b"") * 40_000) == b""
