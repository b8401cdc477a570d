"""The whole-partition offset map: `KeyTable`, an exact hash table in numba from the keys of
segment buffers to key ids and the latest dirty offset of each (layout below).

Keys are compared byte for byte (the hash only picks the slot), so two different keys never
merge. Lookups over Arrow arrays (`KeyIndex`, `max_by_key`) are in `keyindex`.
"""

from __future__ import annotations

import numpy as np

from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.keyhash import hash_keys
from compaction.kernels.keyhash import key_hash as _hash
from compaction.kernels.memops import load_le64, memcpy_at, prefetch


@_njit
def equal_bytes(a, a0, a1, b, b0, b1):
    """a[a0:a1] == b[b0:b1], 8 bytes at a time (the last word of a key of 8 bytes or more overlaps
    the one before it)."""
    n = a1 - a0
    if n != b1 - b0:
        return False
    if n < 8:
        for i in range(n):
            if a[a0 + i] != b[b0 + i]:
                return False
        return True
    for i in range(0, n - 8, 8):
        if load_le64(a, a0 + i) != load_le64(b, b0 + i):
            return False
    return load_le64(a, a1 - 8) == load_le64(b, b1 - 8)


# --- KeyTable: key ids straight from segment buffers, radix-partitioned ------------------------
#
# The whole-partition task's offset map. Keys are hashed and compared where they lie (the
# segment buffer, or its decompressed `side` buffer), never gathered into an Arrow array first;
# each distinct key is copied once into an arena. Every keyed record gets the id of its key, so
# the rewrite reads map.get(key) as latest[id] without hashing again.
#
# Memory latency, not arithmetic, is what a table of a few hundred thousand keys costs: one
# table of several MB (slots, arena, latest) costs a chain of cache misses per record. So the
# table is cut into P sub-tables by the top bits of the key hash, sized so that one sub-table
# stays in the CPU cache, and a segment's records are first bucketed by sub-table (two
# sequential passes), then probed one sub-table at a time, their key bytes copied into a
# bucket-ordered staging buffer so that the probe reads them sequentially too.
#
# Layout: P regions of equal capacity in flat arrays (all grow together, hashes are uniform):
# slots (S per region; uint64 = high 32 bits of the hash | local id + 1, 0 = empty), arena
# (A bytes per region), offs (C + 1 arena offsets per region), latest (C per region). A key's id
# is local id << log2(P) | region: stable when the regions grow.

_EMPTY = np.uint64(0)
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)
_GROW_SLOTS, _GROW_ARENA, _GROW_IDS = 1, 2, 4


@_njit
def _region_of(h, log_p):
    return np.int64(h >> np.uint64(64 - log_p)) if log_p > 0 else np.int64(0)


@_njit
def _region_counts(key_len, hashes, log_p, rec_starts, byte_starts):
    """Pass 1, over keys packed and hashed in record order (`keyhash.hash_keys`, by the scan or by
    `assign`): records and key bytes per region (as starts: prefix sums, entry p = totals)."""
    p = 1 << log_p
    for r in range(len(key_len)):
        kl = key_len[r]
        if kl < 0:
            continue
        t = _region_of(hashes[r], log_p)
        rec_starts[t + 1] += 1
        byte_starts[t + 1] += kl
    for t in range(p):
        rec_starts[t + 1] += rec_starts[t]
        byte_starts[t + 1] += byte_starts[t]


@_njit
def _distribute(
    packed,
    packed_offs,
    key_len,
    usable,
    dirty,
    offsets,
    log_p,
    hashes,
    rec_starts,
    byte_starts,
    pos_of,
    h_ord,
    flags_ord,
    off_ord,
    stage_offs,
    stage,
):
    """Pass 2, in record order (reads sequential, writes in one stream per region): each keyed
    record's hash, flags, offset and key bytes, laid out region by region; pos_of[r] = where
    record r went (a sequential write: the probe's ids come back to record order by a gather,
    `_ids_in_record_order`)."""
    p = 1 << log_p
    fill_rec = rec_starts[:p].copy()
    fill_bytes = byte_starts[:p].copy()
    for r in range(len(key_len)):
        kl = key_len[r]
        if kl < 0:
            continue
        h = hashes[r]
        t = _region_of(h, log_p)
        i = fill_rec[t]
        fill_rec[t] = i + 1
        pos_of[r] = i
        h_ord[i] = h
        flags_ord[i] = (1 if usable[r] else 0) | (2 if dirty[r] else 0)
        off_ord[i] = offsets[r]
        o = fill_bytes[t]
        fill_bytes[t] = o + kl
        stage_offs[i] = o
        memcpy_at(stage, o, packed, packed_offs[r], kl)
    stage_offs[rec_starts[p]] = byte_starts[p]


_AHEAD = 16  # records ahead: each probe is a chain of dependent loads (slot, id's key offset,
# key bytes, latest offset), which the CPU cannot overlap across records by itself


@_njit
def _prefetch_probe(i, h_ord, log_p, slots, n_slots, arena, arena_cap, offs, cap, latest):
    """Prefetch, in three stages, what the probe of record i + _AHEAD, + _AHEAD/2 and + _AHEAD/4
    will read: its first slot; then, the slot being cached by now, the key offset and latest
    offset of the id found there; then its key bytes. Only hints: a slot filled or moved since
    costs a miss, never a wrong answer."""
    mask = np.int64(n_slots - 1)
    h = h_ord[i + _AHEAD]
    prefetch(slots, _region_of(h, log_p) * n_slots + np.int64(h & np.uint64(mask)))
    h = h_ord[i + _AHEAD // 2]
    t = _region_of(h, log_p)
    s = slots[t * n_slots + np.int64(h & np.uint64(mask))]
    if s != _EMPTY:
        c = np.int64(s & _LOW) - 1
        prefetch(offs, t * (cap + 1) + c)
        prefetch(latest, t * cap + c)
    h = h_ord[i + _AHEAD // 4]
    t = _region_of(h, log_p)
    s = slots[t * n_slots + np.int64(h & np.uint64(mask))]
    if s != _EMPTY and (s >> _SHIFT) == (h >> _SHIFT):
        prefetch(arena, t * arena_cap + offs[t * (cap + 1) + np.int64(s & _LOW) - 1])


@_njit
def _probe_regions(
    counts,
    h_ord,
    stage,
    stage_offs,
    flags_ord,
    off_ord,
    log_p,
    slots,
    n_slots,
    arena,
    arena_cap,
    offs,
    cap,
    latest,
    count,
    used,
    id_ord,
    first,
):
    """Probe (and insert into) each region for the ordered records from position `first` on,
    id_ord[i] = the id found (-1: absent and not added). Written in probe order: a scatter into
    record order here cost a cache miss per record that the probe's loads waited behind (the
    store buffer fills). Returns (position reached, what must grow): the caller grows the regions
    and resumes."""
    h_ord, stage, slots, arena, offs, latest = (
        borrow(h_ord),
        borrow(stage),
        borrow(slots),
        borrow(arena),
        borrow(offs),
        borrow(latest),
    )
    p = 1 << log_p
    mask = np.int64(n_slots - 1)  # int64 indexes throughout: uint64 + int64 is float64 in numba
    keyed = counts[p]
    t = 0
    for i in range(first, keyed):
        while counts[t + 1] <= i:
            t += 1
        if i + _AHEAD < keyed:
            _prefetch_probe(i, h_ord, log_p, slots, n_slots, arena, arena_cap, offs, cap, latest)
        h = h_ord[i]
        s0, s1 = stage_offs[i], stage_offs[i + 1]
        kl = s1 - s0
        base_s, base_a, base_o, base_l = t * n_slots, t * arena_cap, t * (cap + 1), t * cap
        j = np.int64(h & np.uint64(mask))
        tag = h >> _SHIFT
        k = np.int64(-1)
        while True:
            s = slots[base_s + j]
            if s == _EMPTY:
                break
            if (s >> _SHIFT) == tag:
                c = np.int64(s & _LOW) - 1
                a0, a1 = base_a + offs[base_o + c], base_a + offs[base_o + c + 1]
                if equal_bytes(arena, a0, a1, stage, s0, s1):
                    k = c
                    break
            j = (j + 1) & mask
        if k < 0:
            if not flags_ord[i] & 1:
                id_ord[i] = -1
                continue
            grow = 0
            if 2 * (count[t] + 1) > n_slots:
                grow |= _GROW_SLOTS
            if used[t] + kl > arena_cap:
                grow |= _GROW_ARENA
            if count[t] + 1 > cap:
                grow |= _GROW_IDS
            if grow:
                return i, grow
            k = count[t]
            count[t] = k + 1
            slots[base_s + j] = (tag << _SHIFT) | np.uint64(k + 1)
            a = used[t]
            memcpy_at(arena, base_a + a, stage, s0, kl)
            offs[base_o + k] = a
            offs[base_o + k + 1] = a + kl
            used[t] = a + kl
        id_ord[i] = (k << log_p) | t
        if flags_ord[i] & 2 and off_ord[i] > latest[base_l + k]:
            latest[base_l + k] = off_ord[i]
    return keyed, 0


class KeyTable:
    """Distinct keys -> ids with the latest dirty offset of each (see the layout above).

    `assign(...)` gives every keyed record of a segment the id of its key; records marked
    `usable` add their key when new (the others only look it up: -1 when absent), and records
    marked `dirty` raise their key's latest offset to their offset (`latest_of(ids)`; -1 for a
    key seen only outside the dirty section). Exact: keys compare byte for byte.
    `expected_keys` only sizes the regions (a cache-sized region holds ~8,192 keys)."""

    REGION_KEYS = 8192
    MAX_REGIONS = 1024
    MIN_IDS = 1024
    ARENA_BYTES_PER_KEY = 32  # a guess: the arena grows when keys are longer

    def __init__(self, expected_keys: int = 0) -> None:
        regions = max(1, min(self.MAX_REGIONS, expected_keys // self.REGION_KEYS))
        self.log_p = regions.bit_length() - 1
        p = 1 << self.log_p
        self._work: dict[str, np.ndarray] = {}
        # Sized for the keys expected, up to a region's share (growing costs a copy of every
        # region and a rehash of every key); grown together as needed.
        # The price when the guess errs high (PartitionMap guesses a key per 256 B of log): slots
        # and latest offsets never filled, 24 B a guessed key first-touched (~100 MB at the 1 GiB
        # whole-partition task limit; a partition of Kafka's workload, 244k keys: 24 MB, not 6).
        share = max(1, expected_keys // p)
        self.cap = max(self.MIN_IDS, min(self.REGION_KEYS, 1 << (share - 1).bit_length()))
        self.n_slots, self.arena_cap = 2 * self.cap, self.ARENA_BYTES_PER_KEY * self.cap
        self.slots = np.zeros(p * self.n_slots, np.uint64)
        self.arena = np.empty(p * self.arena_cap, np.uint8)
        self.offs = np.zeros(p * (self.cap + 1), np.int64)
        self.latest = np.full(p * self.cap, -1, np.int64)
        self.count = np.zeros(p, np.int64)
        self.used = np.zeros(p, np.int64)
        self.expected = 0  # where the next growth goes (`expect`)

    @property
    def regions(self) -> int:
        return 1 << self.log_p

    def __len__(self) -> int:
        return int(self.count.sum())

    def assign(self, file, side, split, key_pos, key_len, usable, dirty, offsets, hashed=None) -> np.ndarray:
        """int64 id per record (-1: null key, or a non-usable record of an unknown key).
        `hashed`: the records' keys already packed and hashed by the scan, (hashes, packed,
        packed_offs) as `keyhash.hash_keys` leaves them; otherwise they are copied and hashed here."""
        n = len(key_pos)
        p = self.regions
        out = np.empty(n, np.int64)
        rec_starts = np.zeros(p + 1, np.int64)
        byte_starts = np.zeros(p + 1, np.int64)
        if hashed is not None:
            hashes, packed, packed_offs = hashed
        else:
            hashes = self._scratch("hashes", n, np.uint64)
            key_bytes = int(np.maximum(key_len, 0).sum())
            packed = self._scratch("packed", max(1, key_bytes), np.uint8)
            packed_offs = self._scratch("poffs", n + 1, np.int64)
            hash_keys(file, side, split, key_pos, key_len, 0, n, packed, packed_offs, hashes, 0)
        _region_counts(key_len, hashes, self.log_p, rec_starts, byte_starts)
        keyed = int(rec_starts[p])
        pos_of, off_ord = self._scratch("pos_of", n, np.int64), self._scratch("off", keyed, np.int64)
        id_ord = self._scratch("id_ord", keyed, np.int64)
        stage_offs = self._scratch("stage_offs", keyed + 1, np.int64)
        h_ord, flags_ord = self._scratch("h", keyed, np.uint64), self._scratch("flags", keyed, np.uint8)
        stage = self._scratch("stage", max(1, int(byte_starts[p])), np.uint8)
        _distribute(
            packed,
            packed_offs,
            key_len,
            usable,
            dirty,
            offsets,
            self.log_p,
            hashes,
            rec_starts,
            byte_starts,
            pos_of,
            h_ord,
            flags_ord,
            off_ord,
            stage_offs,
            stage,
        )
        at = 0
        while True:
            at, grow = _probe_regions(
                rec_starts,
                h_ord,
                stage,
                stage_offs,
                flags_ord,
                off_ord,
                self.log_p,
                self.slots,
                self.n_slots,
                self.arena,
                self.arena_cap,
                self.offs,
                self.cap,
                self.latest,
                self.count,
                self.used,
                id_ord,
                at,
            )
            if not grow:
                _ids_in_record_order(key_len, pos_of, id_ord, out)
                return out
            self._grow(grow, int(stage_offs[at + 1] - stage_offs[at]))

    def _scratch(self, name: str, n: int, dtype) -> np.ndarray:
        """A per-table work array of at least n elements, reused from segment to segment (fresh
        pages cost a fault each; a segment's columns are tens of MB)."""
        have = self._work.get(name)
        if have is None or len(have) < n:
            have = self._work[name] = np.empty(max(n, 2 * len(have) if have is not None else n), dtype)
        return have[:n]

    def reserve(self, keys: int) -> None:
        """Room for `keys` keys in all, made in one step: a table that will hold many times its
        first guess grows once, while it is small, instead of doubling (a copy of every region and
        a rehash of every key) each time it fills."""
        share = -(-keys // self.regions)
        if share <= self.cap:
            return
        cap = share + share // 8
        held = int(self.count.sum())
        per_key = int(self.used.sum()) // held + 1 if held else self.ARENA_BYTES_PER_KEY
        self._resize(
            cap, 1 << (2 * cap - 1).bit_length(), max(self.arena_cap, per_key * cap + per_key * cap // 4)
        )

    def expect(self, keys: int) -> None:
        """The keys the table is projected to hold in all (from the records added so far): when
        it fills, it grows there in one step (`reserve`) rather than doubling, each doubling a
        copy of every region and a rehash of every key; a projection that overshoots costs nothing
        while the table has room (a log whose keys repeat across segments never fills it)."""
        self.expected = keys

    def _grow(self, what: int, key_len: int) -> None:
        if -(-self.expected // self.regions) > self.cap:
            self.reserve(self.expected)  # what still lacks room is doubled when probed again
            return
        cap = 2 * self.cap if what & _GROW_IDS else self.cap
        n_slots = 2 * self.n_slots if what & _GROW_SLOTS else self.n_slots
        arena_cap = (
            max(2 * self.arena_cap, self.arena_cap + key_len) if what & _GROW_ARENA else self.arena_cap
        )
        self._resize(cap, n_slots, arena_cap)

    def _resize(self, cap: int, n_slots: int, arena_cap: int) -> None:
        p = self.regions
        if arena_cap > self.arena_cap:
            arena = np.empty(p * arena_cap, np.uint8)
            _copy_regions(self.arena, self.arena_cap, arena, arena_cap, self.used)
            self.arena, self.arena_cap = arena, arena_cap
        if cap > self.cap:
            offs = np.zeros(p * (cap + 1), np.int64)
            _copy_regions(self.offs, self.cap + 1, offs, cap + 1, self.count + 1)
            latest = np.full(p * cap, -1, np.int64)
            _copy_regions(self.latest, self.cap, latest, cap, self.count)
            self.offs, self.latest, self.cap = offs, latest, cap
        if n_slots > self.n_slots:
            slots = np.zeros(p * n_slots, np.uint64)
            _reinsert(self.log_p, self.arena, self.arena_cap, self.offs, self.cap, self.count, slots, n_slots)
            self.slots, self.n_slots = slots, n_slots

    def latest_of(self, ids: np.ndarray) -> np.ndarray:
        """The latest dirty offset of each id (ids must be >= 0)."""
        ids = ids.astype(np.int64, copy=False)
        region = ids & (self.regions - 1)
        return self.latest[region * self.cap + (ids >> self.log_p)]

    def mapped(self) -> int:
        """Keys with a dirty record (latest offset >= 0)."""
        return sum(
            int(np.count_nonzero(self.latest[t * self.cap : t * self.cap + int(self.count[t])] >= 0))
            for t in range(self.regions)
        )

    def dense_starts(self) -> np.ndarray:
        """Where each region's keys start in the dense numbering (`dense_ids`, `export`)."""
        return np.concatenate([[0], np.cumsum(self.count)]).astype(np.int64)

    def dense_ids(self, ids: np.ndarray) -> np.ndarray:
        """Ids renumbered 0..len-1, region by region in order of first sight (-1 stays -1): the
        row of each key in `export`."""
        ids = ids.astype(np.int64, copy=False)
        starts = self.dense_starts()
        dense = starts[ids & (self.regions - 1)] + (ids >> self.log_p)
        return np.where(ids >= 0, dense, -1)

    def export(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(arena, starts, stops, latest): every key in dense id order, key i the bytes
        arena[starts[i]:stops[i]] of the table's own arena (not copied: in a ranges task a fresh
        copy of the range's keys cost more than hashing them and laying them out by bucket), its
        latest dirty offset latest[i]."""
        starts, stops, latest = [], [], []
        for t in range(self.regions):
            n = int(self.count[t])
            if not n:
                continue
            o = self.offs[t * (self.cap + 1) : t * (self.cap + 1) + n + 1] + t * self.arena_cap
            starts.append(o[:-1])
            stops.append(o[1:])
            latest.append(self.latest[t * self.cap : t * self.cap + n])
        none = np.empty(0, np.int64)
        return (self.arena, *(np.concatenate(c) if c else none for c in (starts, stops, latest)))

    def items(self) -> tuple[list[bytes], np.ndarray]:
        """(keys, latest offsets), region by region, each in order of first sight."""
        keys, latest = [], []
        for t in range(self.regions):
            a, o = t * self.arena_cap, t * (self.cap + 1)
            for k in range(int(self.count[t])):
                keys.append(self.arena[a + self.offs[o + k] : a + self.offs[o + k + 1]].tobytes())
            latest.append(self.latest[t * self.cap : t * self.cap + int(self.count[t])])
        return keys, np.concatenate(latest) if latest else np.empty(0, np.int64)


@_njit
def _ids_in_record_order(key_len, pos_of, id_ord, out):
    """out[r] = the id probed for record r (-1 for a null key): a gather, whose independent loads
    overlap where the stores of a scatter queued behind one another."""
    for r in range(len(key_len)):
        out[r] = id_ord[pos_of[r]] if key_len[r] >= 0 else -1


@_njit
def _copy_regions(src, src_cap, dst, dst_cap, lengths):
    for t in range(len(lengths)):
        n = lengths[t]
        dst[t * dst_cap : t * dst_cap + n] = src[t * src_cap : t * src_cap + n]


@_njit
def _reinsert(log_p, arena, arena_cap, offs, cap, count, slots, n_slots):
    arena = borrow(arena)
    mask = np.int64(n_slots - 1)
    for t in range(1 << log_p):
        for k in range(count[t]):
            o = t * (cap + 1) + k
            h = _hash(arena, t * arena_cap + offs[o], t * arena_cap + offs[o + 1])
            j = np.int64(h & np.uint64(mask))
            while slots[t * n_slots + j] != _EMPTY:
                j = (j + 1) & mask
            slots[t * n_slots + j] = ((h >> _SHIFT) << _SHIFT) | np.uint64(k + 1)
