"""Zig-zag varints: boundary table, known bytes, errors, hypothesis round trips."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compaction.errors import CorruptRecordError
from compaction.format.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    encode_varint,
    encode_varlong,
    read_varint,
    read_varlong,
    size_of_varint,
    size_of_varlong,
)

# (value, encoded bytes) pinned by hand from the zig-zag + LEB128 rules (docs/kafka-rules.md#varints).
KNOWN = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-64, b"\x7f"),
    (63, b"\x7e"),
    (64, b"\x80\x01"),
    (-65, b"\x81\x01"),
    (10, b"\x14"),
    (INT32_MAX, b"\xfe\xff\xff\xff\x0f"),
    (INT32_MIN, b"\xff\xff\xff\xff\x0f"),
]


@pytest.mark.parametrize(("value", "encoded"), KNOWN)
def test_known_varint_bytes(value, encoded):
    assert encode_varint(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))


def _boundaries():
    """Zig-zag value z needs k bytes for z < 2^(7k): test the signed values around each step."""
    for k in range(1, 10):
        edge = 1 << (7 * k)
        for z in (edge - 1, edge, edge + 1):
            # z even <-> non-negative value z/2, z odd <-> negative -(z+1)/2
            yield z // 2 if z % 2 == 0 else -(z + 1) // 2, k if z < edge else k + 1


@pytest.mark.parametrize(("value", "size"), list(_boundaries()))
def test_varlong_length_boundaries(value, size):
    encoded = encode_varlong(value)
    assert len(encoded) == size == size_of_varlong(value)
    assert read_varlong(encoded, 0) == (value, size)
    if INT32_MIN <= value <= INT32_MAX:
        assert encode_varint(value) == encoded
        assert size_of_varint(value) == size


@pytest.mark.parametrize("value", [INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX - 1])
def test_int64_extremes(value):
    encoded = encode_varlong(value)
    assert len(encoded) == 10
    assert read_varlong(encoded, 0) == (value, 10)


@pytest.mark.parametrize("value", [INT32_MIN - 1, INT32_MAX + 1])
def test_varint_rejects_out_of_range(value):
    with pytest.raises(ValueError):
        encode_varint(value)


def test_varlong_rejects_out_of_range():
    with pytest.raises(ValueError):
        encode_varlong(INT64_MAX + 1)


def test_read_at_an_offset_inside_a_buffer():
    buf = b"\xaa\xbb" + encode_varint(-300) + b"\xcc"
    assert read_varint(buf, 2) == (-300, 4)


@pytest.mark.parametrize("buf", [b"", b"\x80", b"\xff\xff"])
def test_truncated_varint_is_corrupt(buf):
    with pytest.raises(CorruptRecordError):
        read_varint(buf, 0)


def test_too_long_varint_is_corrupt():
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        read_varint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        read_varlong(b"\x80" * 10 + b"\x01", 0)


@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint_round_trip(value):
    encoded = encode_varint(value)
    assert read_varint(encoded + b"junk", 0) == (value, len(encoded))


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value):
    encoded = encode_varlong(value)
    assert read_varlong(encoded, 0) == (value, len(encoded))
