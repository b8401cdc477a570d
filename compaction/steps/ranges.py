"""A partition cut into ranges: the functions of blocks with which the ranges stage's tasks
(compaction/steps/range_task.py) give every range the partition-wide offset map of its own keys,
without any task holding the partition's key set.

A range is consecutive segments of one output group (log order): a group is one range or is
cut into several, so that the ranges of a round spread evenly over the tasks.

1. `scan_ranges`: a task's ranges of one partition scanned newest first into one `KeyTable`
   (exactly as a whole-partition task scans, `scan.scan_segments`), which gives each record the
   id of its key; each range numbers its own keys densely. Kept by its task (`Held`): the ids per
   segment and the latest dirty offset per id (over the task's ranges from this one on).
   Handed to the others: SUMMARY blocks (one per fine bucket: the range's keys whose hash falls
   in it, with their latest dirty offset in the range), EPOCHS and PRODUCERS.
2. `merge_bucket`: one fine bucket's SUMMARY blocks of every range of every partition, merged by
   (partition, key) in a table over the blocks' own bytes: the partition-wide latest dirty
   offset of each key.
   Out: FOUND blocks, per range, for the keys whose latest lies outside the range (a later range
   holds the key), the only entries the range's own latest offsets lack.
3. The rewrite: the range's latest offsets with its FOUND entries applied are map[key] by key id
   (`ShippedMap`), so no key is hashed or looked up twice.

Block layout: an Arrow IPC stream of one record batch (`exchange.to_block` / `from_block`):
    SUMMARY   key binary, latest int64 (-1: no dirty record in the range), id int32, part int32
    IDS       id int32 per record of one segment (-1: null key, or a key not in the table); only
              for a unit of a partition with transactions, handed to the task that rewrites it
              (`held_blocks`)
    LATEST    latest int64 per key id (a slice: `seq` is its first id); likewise
    FOUND     id int32, latest int64
    PRODUCERS the columns of `scan.producer_batches`
    EPOCHS    the leader-epoch runs of the range's segments (`log_structure.epoch_columns`), for
              the check across the partition (`scan.check_partition_epochs`)
    PIECE     position, size, last_offset, max_timestamp int64 per batch of a
              range's cleaned bytes (`piece-<range>.log`), made by the task that holds the range
              for the task that rewrites its group (`rewrite.rewrite_piece`)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from compaction.errors import CorruptRecordError
from compaction.format import batch as fb
from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.keyhash import key_hash
from compaction.kernels.keymap import KeyTable, equal_bytes
from compaction.kernels.memops import memcpy_at, put_be32
from compaction.kernels.scan import SegmentScan
from compaction.policy.log_structure import epoch_columns
from compaction.policy.txn_state import first_unstable_offset, last_records_of_active_producers
from compaction.runtime.exchange import Block, from_block, to_block
from compaction.steps.group import GroupSpec, SourceSegment
from compaction.steps.scan import scan_segments, tail_producers

SUMMARY, IDS, LATEST, FOUND, PRODUCERS, EPOCHS, PIECE = range(7)
# Rows (ids) or keys per block: blocks stay a few MB whatever the range, so that reading one
# never means holding a range's whole key set.
BLOCK_ROWS = 1 << 20
# A range's keys are cut by hash into this many fine buckets; a merging task takes one bucket of
# every range at a time, so what it holds is 1/64 of the keys whatever the number of tasks.
FINE_BUCKETS = 64


def column(batch: pa.RecordBatch, name: str, dtype) -> np.ndarray:
    return batch.column(name).to_numpy(zero_copy_only=False).astype(dtype, copy=False)


@_njit
def _hashes(data, starts, stops, out):
    data = borrow(data)
    for i in range(len(out)):
        out[i] = key_hash(data, starts[i], stops[i])


def bucket_of(data: np.ndarray, starts: np.ndarray, stops: np.ndarray, buckets: int) -> np.ndarray:
    """The merge bucket of each key (bytes `data[starts[i]:stops[i]]`): its hash mod `buckets`,
    the same in every range, so that every range sends a key to the same bucket."""
    h = np.empty(len(starts), np.uint64)
    _hashes(data, starts, stops, h)
    return (h % np.uint64(max(1, buckets))).astype(np.int64)


def _binary(data: np.ndarray, offs: np.ndarray) -> pa.Array:
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(offs) - 1, [None, pa.py_buffer(offs), pa.py_buffer(data)]
    )


# --- 1. scan --------------------------------------------------------------------------------


class Held(NamedTuple):
    """What a ranges task keeps of a range it scanned, for its rewrite: each record's dense key id
    per segment (-1: no key, or not in the table) and the range's latest dirty offset per id."""

    ids: list[np.ndarray]
    latest: np.ndarray


def scan_ranges(
    rids: list[int], specs: list[GroupSpec], partition: int, cache=None, buckets: int = FINE_BUCKETS
) -> list[tuple[Held, list[Block]]]:
    """Scan the consecutive ranges `rids` of one partition (log order; `specs` their segments) in
    one pass newest first into one `KeyTable`, exactly as a whole-partition task scans
    (`scan.scan_segments`; `cache` keeps the scans for the rewrite). Per range: what the task
    holds of it, and the blocks it hands the other tasks: SUMMARY per bucket, EPOCHS, PRODUCERS.
    `partition` numbers the ranges' partition in the round: keys of different partitions never
    merge.

    One table for a task's ranges, not one per range: a range's kept scan then holds only the
    records no later range of the task supersedes (a partition of many small groups would
    otherwise keep most of each segment's records, overflow the cache and be decompressed
    twice), and each key is hashed into one table. A range holds its own keys, numbered densely
    (`local_ids`), each with its latest dirty offset over the task's ranges from it on (a true
    offset of the key, so the merge's maximum is unchanged); it ships only those whose latest
    is not in a later range of these (the others need no FOUND entry)."""
    epochs: list = []
    pmap, headers = scan_segments(specs, cache, keep_ids=True, epochs=epochs)
    table: KeyTable = pmap.table
    dense = [[table.dense_ids(pmap.take_ids(spec, seg)) for seg in spec.segments] for spec in specs]
    arena, starts, stops, latest = table.export()
    del pmap, table  # the key bytes live on in `arena` until the summaries are built
    out, at = [], 0
    for n, (rid, spec, seg_ids) in enumerate(zip(rids, specs, dense, strict=True)):
        keys, ids = local_ids(seg_ids, len(latest))
        held = Held(ids, latest[keys])
        # A key whose latest lies in a later range of these is left out of the range's summary:
        # every record of it in the range is below that offset, dropped whatever the merge finds.
        rows = (
            None
            if n + 1 == len(specs)
            else np.flatnonzero(held.latest < specs[n + 1].segments[0].base_offset)
        )
        ship = keys if rows is None else keys[rows]
        blocks = list(
            _summaries(rid, partition, arena, starts[ship], stops[ship], latest[ship], buckets, rows)
        )
        own = {seg.base_offset for seg in spec.segments}
        range_epochs = [e for e in epochs if e.base_offset in own]
        producers = tail_producers(spec, range_epochs) + headers[at : at + len(spec.segments)]
        at += len(spec.segments)
        blocks.append(Block(rid, EPOCHS, -1, 0, to_block(**epoch_columns(range_epochs))))
        produced = pa.concat_tables([pa.table(p) for p in producers]) if producers else None
        if produced is not None and produced.num_rows:
            cols = {c: produced.column(c).combine_chunks() for c in produced.column_names}
            blocks.append(Block(rid, PRODUCERS, -1, 0, to_block(**cols)))
        out.append((held, blocks))
    return out


def local_ids(seg_ids: list[np.ndarray], n_keys: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """A range's own numbering of the keys of a table of `n_keys` keys shared with other ranges:
    `seg_ids` the table's dense ids of the range's records per segment (-1: none). Returns the
    table ids of the range's keys, ascending (their bytes then lie in the table's arena in
    order), and per segment each record's row among them (int32; -1 stays -1)."""
    present = np.zeros(n_keys, bool)
    for d in seg_ids:
        present[d[d >= 0]] = True
    keys = np.flatnonzero(present)
    rank = np.full(n_keys + 1, -1, np.int32)  # rank[-1]: -1, for the records without an id
    rank[keys] = np.arange(len(keys), dtype=np.int32)
    return keys, [rank[d] for d in seg_ids]


def held_blocks(rid: int, held: Held) -> Iterator[Block]:
    """A held range as IDS and LATEST blocks for the task that rewrites its group (none: empty)."""
    for i, ids in enumerate(held.ids):
        for at in range(0, len(ids), BLOCK_ROWS):
            yield Block(
                rid, IDS, -1, i * (1 << 20) + at // BLOCK_ROWS, to_block(id=ids[at : at + BLOCK_ROWS])
            )
    for at in range(0, len(held.latest), BLOCK_ROWS):
        yield Block(rid, LATEST, -1, at, to_block(latest=held.latest[at : at + BLOCK_ROWS]))


def _summaries(
    rid: int, partition: int, data, starts, stops, latest, buckets: int, rows: np.ndarray | None = None
) -> Iterator[Block]:
    """The SUMMARY blocks of the keys data[starts[i]:stops[i]], whose ids in the range are
    `rows` (None: 0, 1, ...)."""
    bucket = bucket_of(data, starts, stops, buckets)
    n = len(bucket)
    order, ends = np.empty(n, np.int64), np.zeros(buckets + 1, np.int64)
    size = int(stops.sum() - starts.sum())  # no array of lengths: fresh memory costs more than the sums
    keys, key_offs, key_latest = np.empty(size, np.uint8), np.empty(n + 1, np.int64), np.empty(n, np.int64)
    _by_bucket(data, starts, stops, latest, bucket, order, ends, keys, key_offs, key_latest)
    keys, ids = _binary(keys, key_offs), (order if rows is None else rows[order]).astype(np.int32)
    for b in range(buckets):
        for at in range(int(ends[b]), int(ends[b + 1]), BLOCK_ROWS):
            to = min(at + BLOCK_ROWS, int(ends[b + 1]))
            yield Block(
                rid,
                SUMMARY,
                b,
                at,
                to_block(
                    key=keys.slice(at, to - at),
                    latest=key_latest[at:to],
                    id=ids[at:to],
                    part=np.full(to - at, partition, np.int32),
                ),
            )


@_njit
def _by_bucket(data, starts, stops, latest, bucket, order, ends, keys, key_offs, key_latest):
    """The keys (bytes data[starts[i]:stops[i]], latest offset latest[i]) laid out bucket by
    bucket, each bucket's in their order (a counting sort: the keys are read in order and written
    in one stream per bucket, where a permutation of them read a random key at every step):
    position j holds key order[j], its bytes keys[key_offs[j]:key_offs[j + 1]] and its latest
    offset key_latest[j]; bucket b holds positions ends[b] to ends[b + 1]."""
    data, keys = borrow(data), borrow(keys)
    n, buckets = len(bucket), len(ends) - 1
    firsts = np.zeros(buckets + 1, np.int64)  # byte starts of the buckets
    for i in range(n):
        ends[bucket[i] + 1] += 1
        firsts[bucket[i] + 1] += stops[i] - starts[i]
    for b in range(buckets):
        ends[b + 1] += ends[b]
        firsts[b + 1] += firsts[b]
    at, byte_at = ends[:buckets].copy(), firsts[:buckets].copy()
    for i in range(n):
        b = bucket[i]
        j, o, k = at[b], byte_at[b], stops[i] - starts[i]
        order[j] = i
        key_offs[j] = o
        key_latest[j] = latest[i]
        memcpy_at(keys, o, data, starts[i], k)
        at[b], byte_at[b] = j + 1, o + k
    key_offs[n] = firsts[buckets]


# --- 2. merge -------------------------------------------------------------------------------


def merge_bucket(blocks: list[tuple[int, bytes]]) -> Iterator[Block]:
    """FOUND blocks from one bucket's (range_id, SUMMARY block)s: for each range, its keys whose
    partition-wide latest dirty offset is above the range's own."""
    if not blocks:
        return
    batches = [from_block(b) for _, b in blocks]
    ranges = np.concatenate([np.full(b.num_rows, r, np.int64) for (r, _), b in zip(blocks, batches)])
    latest = np.concatenate([column(b, "latest", np.int64) for b in batches])
    ids = np.concatenate([column(b, "id", np.int32) for b in batches])
    part = np.concatenate([column(b, "part", np.int32) for b in batches])
    final = _latest_by_key([b.column("key") for b in batches], part, latest)
    changed = final > latest
    for r in np.unique(ranges[changed]).tolist():
        sel = changed & (ranges == r)
        yield Block(int(r), FOUND, -1, 0, to_block(id=ids[sel], latest=final[sel]))


def _latest_by_key(keys: list[pa.Array], part: np.ndarray, latest: np.ndarray) -> np.ndarray:
    """Per row: the max `latest` over the rows of the same (part, key)."""
    data, offs = _flat(keys)
    n = len(latest)
    if n > CACHED_MERGE_ROWS:
        return _latest_by_key_table(data, offs, part, latest)
    slots = np.zeros(1 << max(4, (2 * n).bit_length()), np.uint64)  # at most half full
    out, rep = np.empty(n, np.int64), np.empty(n, np.int64)
    _max_by_key(data, offs, part, latest, slots, rep, out)
    return out


def _latest_by_key_table(
    data: np.ndarray, offs: np.ndarray, part: np.ndarray, latest: np.ndarray
) -> np.ndarray:
    """`_latest_by_key` for a bucket too big for the CPU cache: in a `KeyTable`, which probes its
    cache-sized regions one at a time. The partition number is prefixed to the key bytes, so that
    one table serves every partition of the bucket."""
    n = len(latest)
    if np.any(part != part[0]) if n else False:
        data, offs = _prefixed(data, offs, part)
    table = KeyTable(n)
    ids = table.assign(
        data,
        np.empty(0, np.uint8),
        len(data),
        offs[:-1].copy(),
        np.diff(offs),
        np.ones(n, bool),
        latest >= 0,
        latest,
    )
    return table.latest_of(ids)


def _prefixed(data: np.ndarray, offs: np.ndarray, part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.diff(offs)
    new_offs = np.concatenate([[0], np.cumsum(lengths + 4)]).astype(np.int64)
    out = np.empty(int(new_offs[-1]), np.uint8)
    _prefix(data, offs, part.astype(np.int32), out, new_offs)
    return out, new_offs


@_njit
def _prefix(data, offs, part, out, new_offs):
    data, out = borrow(data), borrow(out)
    for i in range(len(offs) - 1):
        o = new_offs[i]
        put_be32(out, o, part[i])
        memcpy_at(out, o + 4, data, offs[i], offs[i + 1] - offs[i])


def _flat(keys: list[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """The binary arrays' bytes end to end, and the offsets of the keys in them (read from the
    arrays' buffers: a cast would import pyarrow.compute in every task)."""
    datas, offsets, at = [], [np.zeros(1, np.int64)], 0
    for k in keys:
        width = np.int64 if pa.types.is_large_binary(k.type) else np.int32
        _, offs_buf, data_buf = k.buffers()
        o = np.frombuffer(offs_buf, width, count=len(k) + 1, offset=k.offset * np.dtype(width).itemsize)
        o = o.astype(np.int64, copy=False)
        if data_buf is not None:
            datas.append(np.frombuffer(data_buf, np.uint8)[o[0] : o[-1]])
        offsets.append(o[1:] - o[0] + at)
        at += int(o[-1] - o[0])
    return (np.concatenate(datas) if datas else np.empty(0, np.uint8)), np.concatenate(offsets)


# Buckets of up to this many rows are merged in one table over the rows' own bytes (slots, key
# bytes and offsets stay in the CPU cache); bigger ones in a `KeyTable`, whose radix-partitioned
# probe costs more per row but does not wait for memory at every row (100M keys, ~2.3M rows a
# bucket: the plain table for every bucket would make the merge phases several times longer;
# bench/keys.py, BENCHMARKS.md).
CACHED_MERGE_ROWS = 1 << 19
# A slot of the merge's table: the top bits of the key's hash above a row number + 1 (0: empty).
_TAG = np.uint64(40)
_ROW = np.uint64((1 << 40) - 1)
_EMPTY = np.uint64(0)
_PART_MIX = np.uint64(0x9E3779B97F4A7C15)  # the partition number folded into the hash


@_njit
def _max_by_key(data, offs, part, latest, slots, rep, out):
    """out[i] = the max latest[j] over the rows j with row i's partition and key bytes: an open
    addressing table of row numbers, the keys compared where they lie (a bucket's rows are a
    few MB: one pass, no copy of any key). The slot comes from hash bits above the merge
    bucket's, which every key of a bucket shares."""
    data = borrow(data)
    mask = np.uint64(len(slots) - 1)
    for i in range(len(latest)):
        h = key_hash(data, offs[i], offs[i + 1]) ^ (np.uint64(part[i]) * _PART_MIX)
        j = (h >> np.uint64(8)) & mask
        tag = h >> _TAG
        while True:
            s = slots[j]
            if s == _EMPTY:
                slots[j] = (tag << _TAG) | np.uint64(i + 1)
                rep[i], out[i] = i, latest[i]
                break
            k = np.int64(s & _ROW) - 1
            if (
                (s >> _TAG) == tag
                and part[k] == part[i]
                and equal_bytes(data, offs[k], offs[k + 1], data, offs[i], offs[i + 1])
            ):
                rep[i] = k
                if latest[i] > out[k]:
                    out[k] = latest[i]
                break
            j = (j + np.uint64(1)) & mask
    for i in range(len(latest)):
        out[i] = out[rep[i]]


# --- 3. rewrite -----------------------------------------------------------------------------


class ShippedMap:
    """map[key] per record of ranges' segments (an `OffsetMap`), from the key ids their scans
    gave each record and the latest offset of each id (the range's own, with the FOUND entries
    of the merge applied). Ids are per range; a group's segments may come from several ranges."""

    hashes_keys = False  # the rewrite's scan need not hash keys: ids come from the scan
    verified = True  # the range's scan checked the CRCs

    def __init__(self) -> None:
        self._ids: dict[tuple[int, int], tuple[int, np.ndarray]] = {}
        self._latest: dict[int, np.ndarray] = {}

    def hold(self, rid: int, spec: GroupSpec, held: Held) -> None:
        """Range `rid`: the segments of `spec` (its group's id), with their ids and latest offsets."""
        self._latest[rid] = held.latest.copy()
        for seg, ids in zip(spec.segments, held.ids):
            self._ids[(spec.group_id, seg.base_offset)] = (rid, ids)

    def add_blocks(self, rid: int, spec: GroupSpec, blocks: list[Block]) -> None:
        """A range held by another task, from its IDS and LATEST blocks (`held_blocks`)."""
        by_kind: dict[int, list[Block]] = {}
        for b in sorted(blocks, key=lambda b: b.seq):
            by_kind.setdefault(b.kind, []).append(b)
        latest = np.concatenate(
            [column(from_block(b.data), "latest", np.int64) for b in by_kind.get(LATEST, [])]
            or [np.empty(0, np.int64)]
        )
        parts: dict[int, list[np.ndarray]] = {}
        for b in by_kind.get(IDS, []):
            parts.setdefault(b.seq >> 20, []).append(column(from_block(b.data), "id", np.int32))
        ids = [np.concatenate(parts.get(i, [np.empty(0, np.int32)])) for i in range(len(spec.segments))]
        self.hold(rid, spec, Held(ids, latest))

    def apply_found(self, rid: int, block: Block) -> None:
        """The merge's FOUND entries for the range: ids whose key a later range holds."""
        f = from_block(block.data)
        self._latest[rid][column(f, "id", np.int64)] = column(f, "latest", np.int64)

    def found(self, spec: GroupSpec, seg: SourceSegment, scan: SegmentScan) -> np.ndarray:
        rid, ids = self._ids.pop((spec.group_id, seg.base_offset))
        if len(ids) != len(scan.records.offset):  # the bytes were checked for size; this is paranoia
            raise CorruptRecordError(
                f"segment has {len(scan.records.offset)} records, its scan had {len(ids)}",
                path=spec.segment_path(seg.base_offset),
            )
        latest = self._latest[rid]
        return np.where(ids >= 0, latest[np.maximum(ids, 0)] if len(latest) else -1, -1)


# --- producer state (driver side, and whole-partition tasks) ---------------------------------


class HeaderRow:
    """A producer batch header as `txn_state.last_records_of_active_producers` and
    `first_unstable_offset` read it."""

    __slots__ = (
        "base_offset",
        "is_control",
        "is_transactional",
        "last_offset",
        "max_timestamp",
        "producer_epoch",
        "producer_id",
        "records_count",
    )

    def __init__(self, pid, epoch, base, last, attrs, count, max_ts) -> None:
        self.producer_id, self.producer_epoch, self.base_offset, self.last_offset = pid, epoch, base, last
        self.is_transactional = bool(attrs & fb.TRANSACTIONAL_MASK)
        self.is_control = bool(attrs & fb.CONTROL_MASK)
        self.records_count, self.max_timestamp = count, max_ts


HEADER_COLUMNS = (
    "producer_id",
    "producer_epoch",
    "base_offset",
    "last_offset",
    "attributes",
    "records_count",
    "max_timestamp",
)


def header_rows(tables: list) -> list[HeaderRow]:
    """Producer batch headers (tables or record batches of `HEADER_COLUMNS`) in log order."""
    tables = [pa.table(t) if isinstance(t, dict) else t for t in tables]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return []
    cols = [
        np.concatenate([t.column(n).to_numpy(zero_copy_only=False) for t in tables]).tolist()
        for n in HEADER_COLUMNS
    ]
    return sorted((HeaderRow(*row) for row in zip(*cols)), key=lambda r: r.base_offset)


class ProducerState(NamedTuple):
    first_unstable: int | None  # an open transaction's first offset (the broker's LSO), if any
    last_records: dict  # txn_state.last_records_of_active_producers


def producer_state(
    tables: list, now_ms: int | None = None, producer_id_expiration_ms: int | None = None
) -> ProducerState:
    rows = header_rows(tables)
    return ProducerState(
        first_unstable_offset(rows), last_records_of_active_producers(rows, now_ms, producer_id_expiration_ms)
    )


def crosses_groups(attributes: np.ndarray) -> bool:
    """Whether transaction state crosses groups, from producer batch headers' `attributes` (a
    range's, every range of a partition's in turn): a transactional or control batch. A partition
    with one is rewritten as one unit: which transactions are aborted or still hold data carries
    from group to group (`CleanedTransactionMetadata`)."""
    return bool(np.any(attributes & (fb.TRANSACTIONAL_MASK | fb.CONTROL_MASK)))
