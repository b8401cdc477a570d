"""The hash of a record key (64-bit FNV-1a over its bytes, then a murmur3 finaliser so that the top
bits, which pick the key table's region, are as mixed as the low ones), and `hash_keys`, which
copies the keys of a run of records into one packed buffer and hashes them: run by the scan over
each chunk of a segment it has just walked, while the chunk is in the CPU cache (a separate pass
over a whole segment waited for memory at every key), or by `keymap.KeyTable.assign` over the
keys of a segment the scan did not hash.
"""

from __future__ import annotations

import numpy as np

from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.memops import copy_bytes


@_njit
def key_hash(data, start, end):
    h = np.uint64(14695981039346656037)
    for i in range(start, end):
        h = (h ^ np.uint64(data[i])) * np.uint64(1099511628211)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    return h


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
