"""kernels/keyhash.py: `key_hash` (8 bytes a step) equals its plain-Python statement for keys of
every length at any position, spreads keys evenly over the bits the tables use (the top bits pick
a key table's region, the low ones its slot and the merge bucket), and `hash_keys` packs and
hashes as the kernel hashes one key; keymap.equal_bytes (8 bytes a step) is bytes equality."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.kernels.keyhash import hash_keys, key_hash, key_hash_reference
from compaction.kernels.keymap import equal_bytes


@numba.njit
def _hash_all(data, offs, out):
    for i in range(len(out)):
        out[i] = key_hash(data, offs[i], offs[i + 1])


def _hashes(keys: list[bytes]) -> np.ndarray:
    data = np.frombuffer(b"".join(keys) + b"\0", np.uint8)
    offs = np.concatenate([[0], np.cumsum([len(k) for k in keys])]).astype(np.int64)
    out = np.empty(len(keys), np.uint64)
    _hash_all(data, offs, out)
    return out


@pytest.mark.parametrize("n", range(65))
def test_every_length_hashes_as_the_reference_at_any_position(n):
    rng = np.random.default_rng(n)
    for lead in (0, 1, 3, 7):
        key = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        # junk around the key: a word read past its end or before its start changes the hash
        buf = np.frombuffer(
            rng.integers(0, 256, lead, dtype=np.uint8).tobytes() + key + b"\xa5" * 9, np.uint8
        )
        assert int(key_hash(buf, lead, lead + n)) == key_hash_reference(key)


def test_lengths_and_single_bytes_hash_apart():
    # the length is in the seed: keys of zero bytes that differ in length only
    assert key_hash_reference(b"") != key_hash_reference(b"\0")
    assert key_hash_reference(b"\0" * 8) != key_hash_reference(b"\0" * 9)
    assert len({key_hash_reference(bytes([b])) for b in range(256)}) == 256


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_key_hashes_as_the_reference(key):
    assert int(_hashes([key])[0]) == key_hash_reference(key)


def _chi2(bins: np.ndarray, n_bins: int) -> float:
    counts = np.bincount(bins.astype(np.int64), minlength=n_bins)
    expected = len(bins) / n_bins
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize(
    "make",
    [
        lambda i: b"key-%020d" % i,  # the benches' keys: one counter, fixed width
        lambda i: i.to_bytes(8, "little"),  # ids that differ in their low bytes only
        lambda i: (i << 40).to_bytes(8, "little"),  # ... or in their high bytes only
        lambda i: b"user-%d" % i,  # short and of varying length
    ],
)
def test_keys_spread_evenly_over_top_and_low_bits(make):
    n, bits = 1 << 16, 8
    h = _hashes([make(i) for i in range(n)])
    # chi-square of 256 bins, 255 degrees of freedom: mean 255, sd ~22.6; 400 is ~6 sd out
    for name, bins in {
        "top": h >> np.uint64(64 - bits),
        "low": h & np.uint64((1 << bits) - 1),
        "tag": (h >> np.uint64(32)) & np.uint64((1 << bits) - 1),
        "mid": (h >> np.uint64(8)) & np.uint64((1 << bits) - 1),
    }.items():
        assert _chi2(bins, 1 << bits) < 400, name
    assert len(np.unique(h)) == n  # no 64-bit collision among these


def test_one_flipped_bit_changes_half_the_hash_bits():
    rng = np.random.default_rng(7)
    flips = []
    for n in (1, 3, 5, 8, 13, 24, 40):
        for _ in range(40):
            key = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            bit = int(rng.integers(0, 8 * n))
            other = bytearray(key)
            other[bit // 8] ^= 1 << (bit % 8)
            flips.append(bin(key_hash_reference(bytes(key)) ^ key_hash_reference(bytes(other))).count("1"))
    assert 30 < np.mean(flips) < 34 and min(flips) >= 10


def test_hash_keys_packs_and_hashes_each_key():
    keys = [b"", None, b"abc", b"0123456789abcdef", None, b"x" * 33]
    file = bytearray(b"\xee")
    side = bytearray(b"\xdd")
    pos, lens = [], []
    for i, k in enumerate(keys):
        if k is None:
            pos.append(0)
            lens.append(-1)
            continue
        buf = side if i % 2 else file
        pos.append(len(buf))
        lens.append(len(k))
        buf += k + b"\xff"
    split = len(file)
    pos = [p + split if i % 2 and ln >= 0 else p for i, (p, ln) in enumerate(zip(pos, lens))]
    n = len(keys)
    packed, offs, hashes = np.empty(64, np.uint8), np.empty(n + 1, np.int64), np.empty(n, np.uint64)
    end = hash_keys(
        np.frombuffer(bytes(file), np.uint8),
        np.frombuffer(bytes(side), np.uint8),
        split,
        np.array(pos, np.int64),
        np.array(lens, np.int32),
        0,
        n,
        packed,
        offs,
        hashes,
        0,
    )
    assert packed[:end].tobytes() == b"".join(k for k in keys if k is not None)
    for i, k in enumerate(keys):
        assert packed[offs[i] : offs[i + 1]].tobytes() == (k or b"")
        assert int(hashes[i]) == (0 if k is None else key_hash_reference(k))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.data())
def test_equal_bytes_is_bytes_equality(key, data):
    other = bytearray(key)
    if key and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(key) - 1))
        other[at] ^= data.draw(st.integers(1, 255))
    if data.draw(st.booleans()):
        other = other[: data.draw(st.integers(0, len(other)))]
    a = np.frombuffer(b"\x01" + key + b"\x02", np.uint8)
    b = np.frombuffer(b"\x03\x04" + bytes(other) + b"\x05", np.uint8)
    assert equal_bytes(a, 1, 1 + len(key), b, 2, 2 + len(other)) == (key == bytes(other))
