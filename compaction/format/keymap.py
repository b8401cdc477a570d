"""Exact hash tables over Arrow binary keys, in numba: distinct keys with their max offsets, and
key -> index lookups, without pyarrow's per-call hash-set build.

Keys are compared byte for byte (the hash only picks the slot), so two different keys never
merge. Open addressing with linear probing over a power-of-two slot array, at most half full.

`KeyIndex(keys)` builds once and answers `lookup(other_keys)` for many arrays (one per segment
of a rewrite); `max_by_key(keys, *value_columns)` is `group_by(key).aggregate(max)` for int64
columns. Inputs are pyarrow `binary`/`large_binary` arrays (nulls allowed: never found, never
grouped).
"""

from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa


def _njit(fn):
    # Same policy as scan.py: cache compiled code, but do not fail the import where no cache
    # location is usable.
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:
        return numba.njit(cache=False, nogil=True)(fn)


@_njit
def _hash(data, start, end):
    h = np.uint64(14695981039346656037)
    for i in range(start, end):
        h = (h ^ np.uint64(data[i])) * np.uint64(1099511628211)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    return h


@_njit
def _equal(a, a0, a1, b, b0, b1):
    if a1 - a0 != b1 - b0:
        return False
    for i in range(a1 - a0):
        if a[a0 + i] != b[b0 + i]:
            return False
    return True


@_njit
def _build(data, offs, valid, slots, first):
    """Insert every valid key; returns per row the index of its key's first row (-1 for null)."""
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
    vbuf, obuf, dbuf = keys.buffers()[:3]
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


# --- KeyTable: dense key ids straight from segment buffers --------------------------------------
#
# The whole-partition task's offset map. Keys are hashed and compared where they lie (the
# segment buffer, or its decompressed `side` buffer), never gathered into an Arrow array first;
# each distinct key is copied once into an arena. Every keyed record gets the dense id of its
# key, so the rewrite reads map.get(key) as latest[id] without hashing again.
#
# A slot is one uint64: the high 32 bits of the key's hash, then id + 1 (0 = empty), so a probe
# that meets another key is almost always settled by the slot alone, without touching the arena.

_EMPTY = np.uint64(0)
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


@_njit
def _find_or_add(buf, p, kl, h, insert, slots, arena, arena_offs, n_ids, used):
    """(id or -1, n_ids, used) of the key buf[p:p+kl] of hash h; added when absent and `insert`."""
    tag = h >> _SHIFT
    mask = np.uint64(len(slots) - 1)
    j = h & mask
    while True:
        s = slots[j]
        if s == _EMPTY:
            if not insert:
                return -1, n_ids, used
            k = n_ids
            slots[j] = (tag << _SHIFT) | np.uint64(k + 1)
            arena[used : used + kl] = buf[p : p + kl]
            arena_offs[k] = used
            used += kl
            arena_offs[k + 1] = used
            return k, n_ids + 1, used
        if (s >> _SHIFT) == tag:
            k = np.int64(s & _LOW) - 1
            if _equal(arena, arena_offs[k], arena_offs[k + 1], buf, p, p + kl):
                return k, n_ids, used
        j = (j + np.uint64(1)) & mask


_BLOCK = 64  # records per software-pipelined block of _assign_kernel


@_njit
def _key_hash(file, side, split, p, kl):
    if p >= split:
        return _hash(side, p - split, p - split + kl)
    return _hash(file, p, p + kl)


@_njit
def _assign_kernel(file, side, split, key_pos, key_len, usable, dirty, offsets, slots, arena, arena_offs,
                   latest, n_ids, used, out, first):  # fmt: skip
    # Memory latency, not arithmetic, bounds a hash table this size (several MB: slots, arena,
    # latest), and each probe is a chain of dependent loads (slot -> arena offset -> key bytes).
    # So the records go through in blocks: first every record's slot is loaded, then the
    # candidate's arena offset and latest, then its key bytes, each pass issuing independent
    # loads the CPU overlaps; the final pass (the real probe, inserts included) finds them cached.
    mask = np.uint64(len(slots) - 1)
    hashes = np.zeros(_BLOCK, np.uint64)
    cand = np.full(_BLOCK, -1, np.int64)
    sink = np.uint64(0)  # keeps the warming loads from being optimised away
    n = len(key_pos)
    for start in range(first, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        for r in range(start, stop):
            kl = key_len[r]
            if kl >= 0:
                h = _key_hash(file, side, split, key_pos[r], kl)
                hashes[r - start] = h
                sink ^= slots[h & mask]
        for r in range(start, stop):
            cand[r - start] = -1
            if key_len[r] >= 0:
                h = hashes[r - start]
                s = slots[h & mask]
                if s != _EMPTY and (s >> _SHIFT) == (h >> _SHIFT):
                    k = np.int64(s & _LOW) - 1
                    cand[r - start] = k
                    sink ^= np.uint64(arena_offs[k]) ^ np.uint64(latest[k])
        for r in range(start, stop):
            k = cand[r - start]
            if k >= 0 and arena_offs[k] < arena_offs[k + 1]:
                sink ^= np.uint64(arena[arena_offs[k]])
        for r in range(start, stop):
            kl = key_len[r]
            if kl < 0:
                out[r] = -1
                continue
            p = key_pos[r]
            h = hashes[r - start]
            if usable[r] and (2 * (n_ids + 1) > len(slots) or used + kl > len(arena) or n_ids + 2 > len(arena_offs)):
                return n_ids, used, r  # may need room: the caller grows the table and resumes at r
            if p >= split:
                k, n_ids, used = _find_or_add(side, p - split, kl, h, usable[r], slots, arena, arena_offs, n_ids, used)
            else:
                k, n_ids, used = _find_or_add(file, p, kl, h, usable[r], slots, arena, arena_offs, n_ids, used)
            out[r] = k
            if k >= 0 and dirty[r] and offsets[r] > latest[k]:
                latest[k] = offsets[r]
    if sink == np.uint64(1):  # never matters; makes the warming loads observable
        hashes[0] = sink
    return n_ids, used, n


class KeyTable:
    """Distinct keys -> dense ids (order of first sight) with the latest dirty offset of each.

    `assign(...)` gives every keyed record of a segment the id of its key; records marked
    `usable` add their key when new (the others only look it up: -1 when absent), and records
    marked `dirty` raise their key's `latest` to their offset. `latest[id]` is -1 for a key seen
    only outside the dirty section. Exact: keys compare byte for byte."""

    def __init__(self) -> None:
        self.slots = np.zeros(1 << 10, np.uint64)
        self.arena = np.empty(1 << 16, np.uint8)
        self.arena_offs = np.zeros((1 << 9) + 1, np.int64)
        self._latest = np.full(1 << 9, -1, np.int64)
        self.n = 0
        self.used = 0

    @property
    def latest(self) -> np.ndarray:
        return self._latest[: self.n]

    def _grow(self, key_len: int) -> None:
        """Room for at least one more key of `key_len` bytes: slots at most half full after it."""
        if len(self.arena_offs) < self.n + 2:
            cap = 2 * len(self.arena_offs)
            self.arena_offs = np.concatenate([self.arena_offs, np.zeros(cap - len(self.arena_offs), np.int64)])
            self._latest = np.concatenate([self._latest, np.full(cap - len(self._latest), -1, np.int64)])
        if len(self.arena) < self.used + key_len:
            grown = np.empty(max(self.used + key_len, 2 * len(self.arena)), np.uint8)
            grown[: self.used] = self.arena[: self.used]
            self.arena = grown
        if 2 * (self.n + 1) > len(self.slots):
            self.slots = np.zeros(2 * len(self.slots), np.uint64)
            _reinsert(self.arena, self.arena_offs, self.n, self.slots)

    def assign(self, file, side, split, key_pos, key_len, usable, dirty, offsets) -> np.ndarray:
        """int32 id per record (-1: null key, or a non-usable record of an unknown key)."""
        n = len(key_pos)
        out = np.empty(n, np.int32)
        at = 0
        while True:
            self.n, self.used, at = _assign_kernel(file, side, split, key_pos, key_len, usable, dirty, offsets,
                                                   self.slots, self.arena, self.arena_offs, self._latest,
                                                   self.n, self.used, out, at)  # fmt: skip
            if at >= n:
                return out
            self._grow(int(key_len[at]))

    def keys_arrow(self) -> pa.Array:
        """The distinct keys in id order, zero-copy over the arena (pyarrow large_binary)."""
        n = self.n
        return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(self.arena_offs[: n + 1]),
                                                            pa.py_buffer(self.arena[: self.used])])  # fmt: skip


@_njit
def _reinsert(arena, arena_offs, n, slots):
    mask = np.uint64(len(slots) - 1)
    for k in range(n):
        h = _hash(arena, arena_offs[k], arena_offs[k + 1])
        j = h & mask
        while slots[j] != _EMPTY:
            j = (j + np.uint64(1)) & mask
        slots[j] = ((h >> _SHIFT) << _SHIFT) | np.uint64(k + 1)
