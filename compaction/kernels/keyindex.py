"""Exact hash tables over Arrow binary keys, in numba: key -> index lookups, and distinct keys
with their max offsets, without pyarrow's per-call hash-set build.

Keys are compared byte for byte (the hash only picks the slot), so two different keys never
merge. Open addressing with linear probing over a power-of-two slot array, at most half full.

`KeyIndex(keys)` builds once and answers `lookup(other_keys)` for many arrays (one per segment
of a rewrite); `max_by_key(keys, *value_columns)` is `group_by(key).aggregate(max)` for int64
columns. Inputs are pyarrow `binary`/`large_binary` arrays (nulls allowed: never found, never
grouped). The whole-partition offset map, over segment buffers rather than Arrow arrays, is
`keymap.KeyTable`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.keyhash import key_hash as _hash
from compaction.kernels.keymap import equal_bytes as _equal


@_njit
def _build(data, offs, valid, slots, first):
    """Insert every valid key; returns per row the index of its key's first row (-1 for null)."""
    data = borrow(data)
    mask = np.uint64(len(slots) - 1)
    n = len(offs) - 1
    out = np.empty(n, np.int64)
    for r in range(n):
        if not valid[r]:
            out[r] = -1
            continue
        s0, s1 = offs[r], offs[r + 1]
        j = _hash(data, s0, s1) & mask
        while True:
            k = slots[j]
            if k < 0:
                slots[j] = r
                first[r] = r
                out[r] = r
                break
            if _equal(data, offs[k], offs[k + 1], data, s0, s1):
                out[r] = k
                break
            j = (j + np.uint64(1)) & mask
    return out


@_njit
def _probe(tdata, toffs, slots, qdata, qoffs, qvalid):
    tdata, qdata = borrow(tdata), borrow(qdata)
    mask = np.uint64(len(slots) - 1)
    n = len(qoffs) - 1
    out = np.full(n, -1, np.int64)
    for r in range(n):
        if not qvalid[r]:
            continue
        s0, s1 = qoffs[r], qoffs[r + 1]
        j = _hash(qdata, s0, s1) & mask
        while True:
            k = slots[j]
            if k < 0:
                break
            if _equal(tdata, toffs[k], toffs[k + 1], qdata, s0, s1):
                out[r] = k
                break
            j = (j + np.uint64(1)) & mask
    return out


@_njit
def _max_into(group, values, out):
    for r in range(len(group)):
        g = group[r]
        if g >= 0 and values[r] > out[g]:
            out[g] = values[r]


def _parts(keys: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data uint8, offsets int64 rebased to the array's first row, valid bool) of a binary array."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if keys.type not in (pa.binary(), pa.large_binary()):
        keys = keys.cast(pa.binary())
    n = len(keys)
    _vbuf, obuf, dbuf = keys.buffers()[:3]
    width = np.int64 if keys.type == pa.large_binary() else np.int32
    start = keys.offset * np.dtype(width).itemsize
    offs = np.frombuffer(obuf, width, count=n + 1, offset=start).astype(np.int64)
    data = np.frombuffer(dbuf, np.uint8) if dbuf is not None and dbuf.size else np.zeros(1, np.uint8)
    if keys.null_count:
        valid = keys.is_valid().to_numpy(zero_copy_only=False)
    else:
        valid = np.ones(n, bool)
    return data, offs, valid


def _slots_for(n: int) -> np.ndarray:
    return np.full(max(8, 1 << (2 * max(n, 1) - 1).bit_length()), -1, np.int64)


class KeyIndex:
    """key -> row index of `keys` (the first row holding it), built once, probed many times."""

    def __init__(self, keys: pa.Array) -> None:
        self.data, self.offs, valid = _parts(keys)
        self.slots = _slots_for(len(self.offs) - 1)
        _build(self.data, self.offs, valid, self.slots, np.empty(len(self.offs) - 1, np.int64))

    def lookup(self, keys: pa.Array) -> np.ndarray:
        """Per row of `keys`: the row of the same key bytes in the indexed array, or -1."""
        qdata, qoffs, qvalid = _parts(keys)
        return _probe(self.data, self.offs, self.slots, qdata, qoffs, qvalid)


def max_by_key(keys: pa.Array, *values: np.ndarray) -> tuple[pa.Array, list[np.ndarray]]:
    """Distinct non-null keys (in order of first occurrence) and, per int64 column, the max of
    its values over each key's rows: pyarrow's group_by(key).aggregate(max), exact."""
    data, offs, valid = _parts(keys)
    n = len(offs) - 1
    first = np.full(n, -1, np.int64)
    group = _build(data, offs, valid, _slots_for(n), first)
    rows = np.flatnonzero(first >= 0)
    dense = np.full(n, -1, np.int64)
    dense[rows] = np.arange(len(rows))
    group = np.where(group >= 0, dense[np.maximum(group, 0)], -1)
    out = []
    for v in values:
        m = np.full(len(rows), np.iinfo(np.int64).min, np.int64)
        _max_into(group, np.ascontiguousarray(v, np.int64), m)
        out.append(m)
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    return keys.take(pa.array(rows)), out
