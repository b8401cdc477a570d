"""The hash of a record key, and `hash_keys`, which copies the keys of a run of records into one
packed buffer and hashes them: run by the scan over each chunk of a segment it has just walked,
while the chunk is in the CPU cache (a separate pass over a whole segment waited for memory at
every key), or by `keymap.KeyTable.assign` over the keys of a segment the scan did not hash.

The hash reads a key 8 bytes at a time (`memops.load_le64`), each word merged into the state as
XXH64 merges its 8-byte lanes, the length in the seed, and ends with murmur3's 64-bit finaliser,
so that the top bits (which pick the key table's region and the slot tag) are as mixed as the low
ones (which pick the slot and the merge bucket). A key of n >= 8 bytes is its words at 0, 8, ...
below n - 8, then the word at n - 8 (overlapping the one before: the words of two keys of one
length are equal only if their bytes are); shorter keys are one word of their bytes. The tables
compare keys byte for byte, so the hash only needs to spread keys, never to tell them apart; a
byte-at-a-time hash would wait for a multiply per byte, several times this per key.
Every process of a round (scans, range summaries' buckets, the merge) hashes with this one
function; nothing hashed is kept between rounds. `key_hash_reference` states it in plain Python
(the tests hold the kernel to it).
"""

from __future__ import annotations

import numpy as np

from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.memops import copy_bytes, load_le32, load_le64

# XXH64's primes, murmur3's finaliser constants
_P1, _P2, _P4, _P5 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
_F1, _F2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53
P1, P2, P4, P5 = np.uint64(_P1), np.uint64(_P2), np.uint64(_P4), np.uint64(_P5)
F1, F2 = np.uint64(_F1), np.uint64(_F2)
_R31, _R33, _R27, _R37 = np.uint64(31), np.uint64(33), np.uint64(27), np.uint64(37)
_B8, _B16, _B32 = np.uint64(8), np.uint64(16), np.uint64(32)


@_njit
def _merge(acc, w):
    k = w * P2
    k = ((k << _R31) | (k >> _R33)) * P1
    acc ^= k
    return ((acc << _R27) | (acc >> _R37)) * P1 + P4


@_njit
def key_hash(data, start, end):
    n = end - start
    acc = P5 + np.uint64(n)
    if n >= 8:
        last = end - 8
        pos = start
        while pos < last:
            acc = _merge(acc, load_le64(data, pos))
            pos += 8
        w = load_le64(data, last)
    elif n >= 4:
        w = load_le32(data, start) | (load_le32(data, end - 4) << _B32)
    elif n > 0:
        w = (
            np.uint64(data[start])
            | (np.uint64(data[start + n // 2]) << _B8)
            | (np.uint64(data[end - 1]) << _B16)
        )
    else:
        w = np.uint64(0)
    acc = _merge(acc, w)
    acc ^= acc >> _R33
    acc *= F1
    acc ^= acc >> _R33
    acc *= F2
    acc ^= acc >> _R33
    return acc


_M64 = (1 << 64) - 1


def key_hash_reference(key: bytes) -> int:
    """`key_hash` of `key`, in plain Python (the statement the kernel is tested against)."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (64 - r))) & _M64

    def merge(acc: int, w: int) -> int:
        acc ^= rotl(w * _P2 & _M64, 31) * _P1 & _M64
        return (rotl(acc, 27) * _P1 + _P4) & _M64

    def word(at: int, size: int) -> int:
        return int.from_bytes(key[at : at + size], "little")

    n = len(key)
    acc = (_P5 + n) & _M64
    if n >= 8:
        words = [word(at, 8) for at in range(0, n - 8, 8)] + [word(n - 8, 8)]
    elif n >= 4:
        words = [word(0, 4) | word(n - 4, 4) << 32]
    elif n:
        words = [key[0] | key[n // 2] << 8 | key[n - 1] << 16]
    else:
        words = [0]
    for w in words:
        acc = merge(acc, w)
    for mult in (_F1, _F2):
        acc = (acc ^ acc >> 33) * mult & _M64
    return acc ^ acc >> 33


@_njit
def hash_keys(file, side, split, key_pos, key_len, first, last, packed, packed_offs, hashes, o):
    """Records [first, last): each key (key_len >= 0) copied to packed[o:] from its combined
    position (>= split: in `side`) and hashed; packed_offs[r] = where record r's key starts (null
    keys: zero bytes, hash 0). Returns the end of the packed bytes."""
    file, side, packed = borrow(file), borrow(side), borrow(packed)
    for r in range(first, last):
        packed_offs[r] = o
        kl = key_len[r]
        if kl < 0:
            hashes[r] = 0
            continue
        copy_bytes(file, side, split, key_pos[r], kl, packed, o)
        hashes[r] = key_hash(packed, o, o + kl)
        o += kl
    packed_offs[last] = o
    return o
