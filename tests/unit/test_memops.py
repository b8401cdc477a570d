"""memops.memcpy_at: exact byte ranges, nothing outside them touched, read-only sources, and the
kernels that use it stay cacheable (compiled once, loaded from numba's cache). memops.prefetch:
compiles for any 1-D array and changes nothing."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from compaction.kernels.memops import (
    PREFETCH_BYTES,
    load_le32,
    load_le64,
    memcpy_at,
    prefetch,
    prefetch_ahead,
    put_be32,
    put_be64,
)


@numba.njit(cache=True)
def _copy(dst, d, src, s, n):
    memcpy_at(dst, d, src, s, n)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 4099])
@pytest.mark.parametrize("d,s", [(0, 0), (3, 0), (0, 5), (13, 29)])
def test_memcpy_at_copies_exactly_the_range(n, d, s):
    rng = np.random.default_rng(n * 100 + d + s)
    src = rng.integers(0, 256, s + n + 40, dtype=np.uint8)
    src.flags.writeable = False  # segment buffers are read-only arrays
    dst = np.full(d + n + 40, 0xAB, np.uint8)
    expected = dst.copy()
    expected[d : d + n] = src[s : s + n]
    _copy(dst, d, src, s, n)
    assert dst.tobytes() == expected.tobytes()


def test_memcpy_at_refuses_other_types():
    with pytest.raises(numba.TypingError):
        _copy(np.zeros(4, np.int64), 0, np.zeros(4, np.uint8), 0, 1)


def test_kernels_using_it_are_cacheable():
    assert _copy.stats.cache_misses or _copy.stats.cache_hits  # cache=True was honoured, no "dynamic globals"
    from compaction.kernels import rebuild

    assert rebuild._rebuild_kernel._cache.__class__.__name__ != "NullCache"


@numba.njit(cache=True)
def _gather_prefetched(values, idx, ahead):
    total = 0
    for i in range(len(idx)):
        if i + ahead < len(idx):
            prefetch(values, idx[i + ahead])
        total += np.int64(values[idx[i]])
    return total


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.uint64])
def test_prefetch_changes_nothing(dtype):
    values = np.arange(1000, dtype=dtype)
    before = values.copy()
    idx = np.random.default_rng(1).integers(0, 1000, 5000)
    expected = int(values[idx].astype(np.int64).sum())
    assert _gather_prefetched(values, idx, 16) == expected
    assert _gather_prefetched(values, idx.astype(np.int32), 3) == expected
    assert values.tobytes() == before.tobytes()
    assert _gather_prefetched.stats.cache_misses or _gather_prefetched.stats.cache_hits


def test_prefetch_refuses_other_types():
    @numba.njit
    def bad(x):
        prefetch(x, 0)

    with pytest.raises(numba.TypingError):
        bad(np.zeros((2, 2)))


@pytest.mark.parametrize(
    "ahead, pos, end, reached",
    [
        (0, 0, 0, 0),  # nothing left: no hint
        (0, 0, 1, 64),  # one line for one byte
        (0, 0, 64, 64),
        (0, 0, 65, 128),
        (0, 0, 1 << 20, PREFETCH_BYTES),  # never more than PREFETCH_BYTES ahead
        (PREFETCH_BYTES, 100, 1 << 20, PREFETCH_BYTES + 128),  # only the lines not hinted yet
        (5000, 10, 1 << 20, 5000),  # already far enough ahead
        (0, 9000, 9010, 9000),  # a step bigger than the window: no hint
        (9000, 9500, 1 << 20, 9500 + PREFETCH_BYTES),  # a small step after it: hints again
        (100, 100 + PREFETCH_BYTES, 1 << 20, 100 + 2 * PREFETCH_BYTES),  # a step of exactly the window
    ],
)
def test_prefetch_ahead_hints_each_line_once(ahead, pos, end, reached):
    buf = np.zeros(max(end, 1), dtype=np.uint8)
    assert prefetch_ahead(buf, ahead, pos, end) == reached
    assert not buf.any()


@pytest.mark.parametrize(
    "value", [0, 1, 255, 256, 2**31 - 1, -1, -(2**31), 0x0102030405060708, -(2**63), 2**63 - 1]
)
def test_big_endian_writes_are_structs(value):
    import struct

    out = np.full(12, 0xAA, dtype=np.uint8)
    put_be64(out, 2, value)
    assert out.tobytes() == b"\xaa\xaa" + struct.pack(">q", value) + b"\xaa\xaa"
    out[:] = 0xAA
    put_be32(out, 3, value)
    assert out.tobytes() == b"\xaa" * 3 + struct.pack(">I", value & 0xFFFFFFFF) + b"\xaa" * 5


@numba.njit(cache=True)
def _loads(a, i):
    return load_le64(a, i), load_le32(a, i)


@pytest.mark.parametrize("at", [0, 1, 5, 8, 13, 24])
def test_load_le_reads_little_endian_words_at_any_position(at):
    a = np.random.default_rng(at).integers(0, 256, 32, dtype=np.uint8)
    a.flags.writeable = False
    w64, w32 = _loads(a, at)
    assert (int(w64), int(w32)) == (
        int.from_bytes(a[at : at + 8].tobytes(), "little"),
        int.from_bytes(a[at : at + 4].tobytes(), "little"),
    )


def test_load_le_refuses_other_types():
    with pytest.raises(numba.TypingError):
        _loads(np.zeros(4, np.int64), 0)
