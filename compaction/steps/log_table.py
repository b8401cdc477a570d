"""Log dirs as a table: the rows of the `kafka_log` data source (`spark/datasource.py`) and of
`kafka-compaction export`, as Arrow record batches built from the scan's columns.

The columns are those of Spark's Kafka source (`key`, `value`, `topic`, `partition`, `offset`,
`timestamp`, `timestampType`, and `headers` when asked for), so a query written for one runs on
the other, then what a log holds and a broker source does not show: `leaderEpoch`,
`producerId`, `producerEpoch`, `baseSequence`, `sequence`, `isTransactional`, `isControl`.

Three steps, no Spark here:
  * `ReadOptions.parse`: the source's options, named as Spark's Kafka source names them.
  * `plan_splits`: the log dir listed (`discover.read_log_dir`), each partition's segments cut to
    the offsets and timestamps asked for (options and pushed-down `Bounds`) from file names and
    `.timeindex` tails alone, so segments outside them are never opened; one `Split` per segment,
    or per run of small ones, or per partition for the compacted state (`cut_compacted`: per
    bucket of its keys for a big one).
  * `read_split`: each segment scanned (`kernels/scan.py`: CRCs checked, records decompressed,
    typed errors naming file, byte and offset), the rows kept as masks over the record columns,
    the columns gathered into Arrow buffers (no Python object per record). With `compacted`, the
    latest record of each key, built with the job's offset map (`keymap.KeyTable` over the records
    `keep.map_masks` maps: no control record, no aborted one, none of a transaction open at the
    end), tombstoned keys left out.

Rows are in log order within a segment; the compacted state is emitted newest segment first
(within each bucket of keys).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from compaction.errors import UsageError
from compaction.format.layout import CONTROL_MASK, MAGIC_V0, MAGIC_V2, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK
from compaction.format.txnindex import AbortedTxn, read_txn_index
from compaction.kernels.headers import header_starts, walk_headers
from compaction.kernels.keymap import KeyTable
from compaction.kernels.scan import SegmentScan, _gather, scan_batches, scan_segment
from compaction.policy.cut import cut_log, parse_as_of_offsets, parse_as_of_time
from compaction.policy.keep import aborted_batches, map_masks
from compaction.runtime.segment_io import read_segment_bytes
from compaction.runtime.storage import Storage
from compaction.settings import (
    FRAME_BATCH_BYTES,
    FRAME_BATCH_ROWS,
    FRAME_COMPACTED_BUCKETS,
    FRAME_COMPACTED_SPLIT_BYTES,
    FRAME_SPLIT_BYTES,
)
from compaction.steps.discover import last_time_entry_ts, read_log_dir

EARLIEST, LATEST = -2, -1  # Spark's Kafka source's offsets JSON: -2 earliest, -1 latest
INT32_MAX = 2**31 - 1

KAFKA_FIELDS = (
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "long"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
)
HEADERS_FIELD = ("headers", "array<struct<key:string,value:binary>>")
LOG_FIELDS = (
    ("leaderEpoch", "int"),
    ("producerId", "long"),
    ("producerEpoch", "int"),
    ("baseSequence", "int"),
    ("sequence", "int"),
    ("isTransactional", "boolean"),
    ("isControl", "boolean"),
)

_ARROW_TYPES = {
    "binary": pa.binary(),
    "string": pa.string(),
    "int": pa.int32(),
    "long": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "boolean": pa.bool_(),
    HEADERS_FIELD[1]: pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
}


def fields(include_headers: bool) -> tuple[tuple[str, str], ...]:
    return KAFKA_FIELDS + ((HEADERS_FIELD,) if include_headers else ()) + LOG_FIELDS


def schema_ddl(include_headers: bool) -> str:
    """The source's schema as Spark DDL."""
    return ", ".join(f"{name} {typ}" for name, typ in fields(include_headers))


def arrow_schema(include_headers: bool, columns: tuple[str, ...] | None = None) -> pa.Schema:
    """The Arrow schema of the rows: every column, or `columns` in their order."""
    types = {name: _ARROW_TYPES[typ] for name, typ in fields(include_headers or bool(columns))}
    return pa.schema([(name, types[name]) for name in columns or types])


# Spark's names of the types where its DDL and its `DataType.simpleString()` differ.
_SIMPLE_TYPES = {"long": "bigint"}


def chosen_columns(requested: list[tuple[str, str, bool]]) -> tuple[str, ...]:
    """The columns a user-given schema asks for, as `(name, Spark simpleString type, nullable)`:
    any of the source's columns (`headers` included), in any order, each with its own type, so
    that only these are built and handed to Spark. Names match as Spark's do by default
    (`spark.sql.caseSensitive` false), whatever the case; the rows carry them as the schema spells
    them. `nullable` is false when the schema declares the column, or anything inside its type,
    NOT NULL: Spark trusts that declaration (`value IS NULL` is then planned as false and a
    tombstone count comes back 0), and every column of a log may be null (a tombstone's value, a
    key-less record's key, a v0 record's timestamp), so it is refused. Spark's file sources make a
    user's schema nullable instead; a Python source cannot."""
    ours = {name.lower(): (name, _SIMPLE_TYPES.get(typ, typ)) for name, typ in fields(True)}
    allowed = ", ".join(f"{name} {typ}" for name, typ in ours.values())
    out = []
    for name, typ, nullable in requested:
        if name.lower() not in ours:
            raise UsageError(f"schema: kafka_log has no column {name!r}; its columns: {allowed}")
        if typ != ours[name.lower()][1]:
            raise UsageError(
                f"schema: column {name} is {ours[name.lower()][1]} in kafka_log, not {typ}; its columns: {allowed}"
            )
        if not nullable:
            raise UsageError(
                f"schema: column {name} is declared NOT NULL, but kafka_log's columns may hold nulls "
                "and Spark would trust the declaration; declare it without NOT NULL"
            )
        out.append(ours[name.lower()][0])
    if len(set(out)) < len(out):
        raise UsageError(f"schema: a column named twice in {[name for name, _, _ in requested]}")
    return tuple(out)


# --- options -------------------------------------------------------------------------------------


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise UsageError(f"option {name}: expected true or false, got {raw!r}")
    return raw.strip().lower() == "true"


def _offsets_json(options: Mapping[str, str], name: str, default: int) -> tuple[int, dict]:
    """(default for every partition, {(topic, partition): offset}) of `startingOffsets` /
    `endingOffsets`: "earliest", "latest" or Spark's JSON ({"topic": {"0": 23, "1": -2}})."""
    raw = options.get(name.lower())
    if raw is None or raw.strip() in ("earliest", "latest"):
        word = (raw or "").strip()
        return (EARLIEST if word == "earliest" else LATEST if word == "latest" else default), {}
    try:
        parsed = json.loads(raw)
        out = {(str(t), int(p)): int(o) for t, parts in parsed.items() for p, o in parts.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise UsageError(
            f"option {name}: expected earliest, latest or JSON such as "
            f'{{"topic":{{"0":23,"1":-2}}}}, got {raw!r} ({exc})'
        ) from None
    for key, offset in out.items():
        if offset < EARLIEST:
            raise UsageError(f"option {name}: offset {offset} of {key[0]}-{key[1]} is below -2")
    return default, out


def _millis(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"option {name}: expected milliseconds since the epoch, got {raw!r}") from None


@dataclass(frozen=True)
class ReadOptions:
    """What the source reads, from its options (names as in Spark's Kafka source)."""

    path: str
    topics: str | None = None  # a regex matched against whole topic names
    starting: tuple[int, dict] = (EARLIEST, {})
    ending: tuple[int, dict] = (LATEST, {})
    starting_ts: int | None = None
    ending_ts: int | None = None
    include_headers: bool = False
    compacted: bool = False
    # kafka.isolation.level=read_committed: aborted records left out, rows end at the LSO
    read_committed: bool = False
    include_control: bool = False  # control records (transaction markers) as rows
    # The compacted state as of a time (epoch ms) or per-partition offsets: `policy/cut.py`.
    as_of_time: int | None = None
    as_of_offsets: dict = field(default_factory=dict)
    # minPartitions: at least this many input partitions for the compacted state (`cut_compacted`)
    min_partitions: int | None = None
    # The columns built, in this order (`chosen_columns`); None: every column of the schema.
    columns: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        opts = {k.lower(): v for k, v in options.items()}
        path = opts.get("path")
        if not path:
            raise UsageError('no log dir: load("/path/to/kafka-logs") or option path')
        pattern, listed = opts.get("subscribepattern"), opts.get("subscribe")
        if pattern and listed:
            raise UsageError("options subscribe and subscribePattern: give one of them")
        if listed:
            pattern = "|".join(re.escape(t.strip()) for t in listed.split(",") if t.strip())
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise UsageError(f"option subscribePattern: {exc}") from None
        isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
        if isolation not in ("read_committed", "read_uncommitted"):
            raise UsageError(
                f"option kafka.isolation.level: read_committed or read_uncommitted, not {isolation!r}"
            )
        out = cls(
            path=path,
            topics=pattern or None,
            starting=_offsets_json(opts, "startingOffsets", EARLIEST),
            ending=_offsets_json(opts, "endingOffsets", LATEST),
            starting_ts=_millis(opts, "startingTimestamp"),
            ending_ts=_millis(opts, "endingTimestamp"),
            include_headers=_bool(opts, "includeHeaders", False),
            compacted=_bool(opts, "compacted", False),
            read_committed=isolation == "read_committed",
            include_control=_bool(opts, "includeControl", False),
        )
        try:
            as_of_time = parse_as_of_time(opts["asoftime"]) if opts.get("asoftime") else None
            as_of_offsets = parse_as_of_offsets(opts["asofoffsets"]) if opts.get("asofoffsets") else {}
        except ValueError as exc:
            raise UsageError(f"option asOfTime/asOfOffsets: {exc}") from None
        if (as_of_time is not None or as_of_offsets) and not out.compacted:
            raise UsageError("options asOfTime and asOfOffsets cut the compacted state: add compacted=true")
        out = replace(out, as_of_time=as_of_time, as_of_offsets=as_of_offsets)
        if opts.get("minpartitions") is not None:
            raw = opts["minpartitions"]
            if not raw.strip().isdigit() or int(raw) < 1:
                raise UsageError(f"option minPartitions: expected a positive integer, got {raw!r}")
            out = replace(out, min_partitions=int(raw))
        if out.starting[0] == LATEST:
            raise UsageError("option startingOffsets: latest is not allowed for a batch read (as in Spark)")
        if out.ending[0] == EARLIEST:
            raise UsageError("option endingOffsets: earliest is not allowed for a batch read (as in Spark)")
        return out


# --- pushed-down bounds ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """What pushed-down filters say of the rows wanted (AND of them all): rows outside are not
    read. Ranges are half-open [lo, hi); None for no bound."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    offset_lo: int | None = None
    offset_hi: int | None = None
    ts_lo: int | None = None  # milliseconds
    ts_hi: int | None = None

    def narrowed(self, **kw) -> Bounds:
        """These bounds AND one more (sets intersected, ranges tightened)."""
        out = {}
        for name, value in kw.items():
            have = getattr(self, name)
            if have is None:
                out[name] = value
            elif name in ("topics", "partitions"):
                out[name] = have & value
            elif name.endswith("_lo"):
                out[name] = max(have, value)
            else:
                out[name] = min(have, value)
        return replace(self, **out)


# --- splits --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentRef:
    path: str
    base_offset: int
    size: int
    next_base_offset: int | None  # None: the partition's last (active) segment
    ts_from: int | None = None  # rows start at the first record of this segment with ts >= it
    ts_until: int | None = None  # rows end before the first record of this segment with ts >= it


@dataclass(frozen=True)
class Split:
    """One input partition: segments of one Kafka partition, read in order."""

    topic: str
    partition: int
    storage: Storage
    segments: tuple[SegmentRef, ...]
    offset_lo: int  # rows in [offset_lo, offset_hi)
    offset_hi: int
    aborted: tuple[AbortedTxn, ...] = ()
    ts_lo: int | None = None  # pushed-down timestamp range, milliseconds
    ts_hi: int | None = None
    as_of_time: int | None = None  # the compacted state's cut (policy/cut.py)
    as_of_offset: int | None = None
    # The partition's segments after `segments`: their headers alone are read, for the
    # transactions open at the log end (a marker past the rows read still ends one).
    tail: tuple[SegmentRef, ...] = ()
    # The compacted state cut by key (`cut_compacted`): this split maps and emits the keys
    # whose `key_bucket` is `bucket` of `buckets`.
    bucket: int = 0
    buckets: int = 1

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)


def _offset_range(opts: ReadOptions, bounds: Bounds, topic: str, partition: int) -> tuple[int, int]:
    start = opts.starting[1].get((topic, partition), opts.starting[0])
    end = opts.ending[1].get((topic, partition), opts.ending[0])
    lo = 0 if start == EARLIEST else start
    hi = 2**63 - 1 if end == LATEST else end
    if bounds.offset_lo is not None:
        lo = max(lo, bounds.offset_lo)
    if bounds.offset_hi is not None:
        hi = min(hi, bounds.offset_hi)
    return lo, hi


def _largest_ts(storage: Storage, seg) -> int:
    """A closed segment's largest timestamp, as Kafka loads it: its `.timeindex` tail (Kafka
    writes the segment's largest there when it rolls it); without one, from its batches."""
    ts = last_time_entry_ts(storage, seg)
    if ts >= 0:
        return ts
    data = np.frombuffer(storage.read_bytes(seg.log.path), dtype=np.uint8)
    cols = scan_batches(data)
    return int(cols.max_timestamp.max()) if len(cols) else -1


def _cut_at_timestamp(storage: Storage, segs: list, ts: int) -> int:
    """Where Kafka's offsetsForTimes(ts) lands among `segs` (in log order, the last one read in
    any case): the index of the first segment whose largest timestamp is >= ts. Every earlier
    segment holds only smaller timestamps, so the earliest record at or after ts is in it."""
    for i, seg in enumerate(segs[:-1]):
        if _largest_ts(storage, seg) >= ts:
            return i
    return len(segs) - 1


def plan_splits(opts: ReadOptions, bounds: Bounds = Bounds()) -> list[Split]:
    """The input partitions of a read: every partition of the log dir the options and `bounds`
    keep, its segments cut to their offsets and timestamps."""
    state = read_log_dir(opts.path, opts.topics)
    storage = state.storage
    splits: list[Split] = []
    for part in state.partitions:
        if bounds.topics is not None and part.topic not in bounds.topics:
            continue
        if bounds.partitions is not None and part.partition not in bounds.partitions:
            continue
        part.refuse_problems()
        segs = list(part.segments)
        lo, hi = _offset_range(opts, bounds, part.topic, part.partition)
        if not segs or lo >= hi:
            continue
        refs = [
            SegmentRef(s.log.path, s.base_offset, s.log.size, n.base_offset if n else None)
            for s, n in zip(segs, [*segs[1:], None])
        ]
        keep = [
            i
            for i, r in enumerate(refs)
            if r.base_offset < hi and (r.next_base_offset is None or r.next_base_offset > lo)
        ]
        if not keep:
            continue
        first, last = keep[0], keep[-1] + 1
        if opts.starting_ts is not None:
            first += _cut_at_timestamp(storage, segs[first:last], opts.starting_ts)
            refs[first] = replace(refs[first], ts_from=opts.starting_ts)
        if opts.ending_ts is not None:
            last = first + _cut_at_timestamp(storage, segs[first:last], opts.ending_ts) + 1
            refs[last - 1] = replace(refs[last - 1], ts_until=opts.ending_ts)
        chosen = list(range(first, last))
        if bounds.ts_lo is not None and not opts.compacted:
            # A closed segment whose largest timestamp is below the bound holds no row of it.
            chosen = [
                i
                for i in chosen
                if refs[i].next_base_offset is None
                or refs[i].ts_from is not None
                or _largest_ts(storage, segs[i]) >= bounds.ts_lo
            ]
        if not chosen:
            continue
        if opts.read_committed and not opts.compacted:
            # A read_committed consumer reads up to the last stable offset: the first offset of the
            # earliest transaction still open at the log end (Kafka's LSO), nothing at or past it.
            lso = min(open_transactions(storage, refs).values(), default=None)
            if lso is not None:
                hi = min(hi, lso)
                chosen = [i for i in chosen if refs[i].base_offset < hi]
                if lo >= hi or not chosen:
                    continue
        aborted = ()
        if opts.compacted or opts.read_committed:
            aborted = tuple(
                t
                for s in segs
                if s.txnindex is not None and s.txnindex.size
                for t in read_txn_index(storage.read_small(s.txnindex.path))
            )
        base = Split(
            part.topic,
            part.partition,
            storage,
            (),
            lo,
            hi,
            aborted,
            bounds.ts_lo,
            bounds.ts_hi,
            opts.as_of_time,
            opts.as_of_offsets.get((part.topic, part.partition)),
        )
        chosen_refs = [refs[i] for i in chosen]
        if opts.compacted:
            splits.append(replace(base, segments=tuple(chosen_refs), tail=tuple(refs[chosen[-1] + 1 :])))
        else:
            splits.extend(replace(base, segments=group) for group in _group_small(chosen_refs))
    return splits


def cut_compacted(splits: list[Split], min_partitions: int | None = None) -> list[Split]:
    """The compacted state's splits (one per Kafka partition) cut by key, so that one big
    partition keeps several cores busy: a partition over `FRAME_COMPACTED_SPLIT_BYTES` into
    `FRAME_COMPACTED_BUCKETS` splits, and more where `min_partitions` asks for more input
    partitions than that (each partition a share by its bytes, as Spark's Kafka source's
    `minPartitions` divides offset ranges). Each split scans the whole partition and maps and
    emits the keys of its bucket (`key_bucket`): the scan is repeated, the offset map, the rows
    and their transfer to Spark are shared out."""
    total = sum(s.size for s in splits) or 1
    out: list[Split] = []
    for split in splits:
        n = FRAME_COMPACTED_BUCKETS if split.size > FRAME_COMPACTED_SPLIT_BYTES else 1
        if min_partitions:
            n = max(n, -(-min_partitions * split.size // total))
        out += [replace(split, bucket=k, buckets=n) for k in range(n)] if n > 1 else [split]
    return out


def key_bucket(hashes: np.ndarray, buckets: int) -> np.ndarray:
    """The bucket of each key hash: bits the key table's regions (the top ones) and slots (the
    low ones) do not use on their own, so that a bucket's keys spread over the whole table."""
    return ((hashes >> np.uint64(24)) % np.uint64(buckets)).astype(np.int64)


def _group_small(refs: list[SegmentRef]) -> list[tuple[SegmentRef, ...]]:
    """Consecutive segments together up to `FRAME_SPLIT_BYTES`; a bigger one alone."""
    groups: list[list[SegmentRef]] = []
    size = 0
    for ref in refs:
        if groups and size + ref.size <= FRAME_SPLIT_BYTES:
            groups[-1].append(ref)
            size += ref.size
        else:
            groups.append([ref])
            size = ref.size
    return [tuple(g) for g in groups]


# --- reading -------------------------------------------------------------------------------------


def _scan(split: Split, ref: SegmentRef, hash_keys: bool = False) -> SegmentScan:
    data = (
        read_segment_bytes(split.storage, ref.path, "mmap")
        if split.storage.is_local
        else np.frombuffer(split.storage.read_bytes(ref.path), dtype=np.uint8)
    )
    # The active segment may end in a batch a broker was writing when it stopped (a broker
    # truncates it on recovery): not an error for a reader. Any other damage is.
    return scan_segment(data, ref.path, allow_trailing=ref.next_base_offset is None, hash_keys=hash_keys)


def _ts_cut(ts: np.ndarray, limit: int | None) -> int:
    """Index of the first record whose timestamp is >= limit (len(ts) when none)."""
    if limit is None:
        return len(ts)
    hit = np.flatnonzero(ts >= limit)
    return int(hit[0]) if len(hit) else len(ts)


def _row_mask(split: Split, ref: SegmentRef, scan: SegmentScan, opts: ReadOptions) -> np.ndarray:
    rec, b = scan.records, scan.batches
    mask = (rec.offset >= split.offset_lo) & (rec.offset < split.offset_hi)
    attrs = b.attributes.astype(np.int64)
    v2 = b.magic == MAGIC_V2
    if not opts.include_control:
        mask &= ~(v2 & (attrs & CONTROL_MASK != 0))[rec.batch_index]
    if opts.read_committed and split.aborted:
        mask &= ~aborted_batches(b, split.aborted)[rec.batch_index]
    if split.ts_lo is not None:
        mask &= rec.timestamp >= split.ts_lo
    if split.ts_hi is not None:
        mask &= rec.timestamp < split.ts_hi
    if ref.ts_from is not None:
        mask[: _ts_cut(rec.timestamp, ref.ts_from)] = False
    if ref.ts_until is not None:
        mask[_ts_cut(rec.timestamp, ref.ts_until) :] = False
    return mask


def read_split(split: Split, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The rows of one input partition as Arrow record batches of the source's schema."""
    if opts.compacted:
        yield from _read_compacted(split, opts)
        return
    for ref in split.segments:
        scan = _scan(split, ref)
        rows = np.flatnonzero(_row_mask(split, ref, scan, opts))
        yield from record_batches(split, scan, rows, opts.include_headers, opts.columns)
        del scan


def _read_compacted(split: Split, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The latest record of each key in [offset_lo, offset_hi) (as of the segment cut by
    `endingTimestamp`), tombstoned keys left out: the job's offset map over the records it maps
    (keyed, not control, not aborted), newest segment first so each segment's keys are final
    once it is added."""
    end, open_txns = _cut(split)
    table = KeyTable(split.size // 256 // split.buckets)
    for ref in split.segments[::-1]:
        if ref.base_offset >= end:
            continue
        scan = _scan(split, ref, hash_keys=True)
        rec, b = scan.records, scan.batches
        _, usable, _ = map_masks(b, rec, split.aborted, 0, end)
        usable &= _row_mask(split, ref, scan, replace(opts, include_control=True, read_committed=False))
        usable &= rec.offset < end
        if open_txns:  # a read_committed reader of the cut sees nothing of a transaction open there
            txn = (b.attributes.astype(np.int64) & TRANSACTIONAL_MASK) != 0
            for pid, first in open_txns.items():
                usable &= ~(txn & (b.producer_id == pid) & (b.base_offset >= first))[rec.batch_index]
        hashes, packed, packed_offs = scan.keys
        # this split's keys: every record of the others is left out of the table
        mine = (
            np.flatnonzero(key_bucket(hashes, split.buckets) == split.bucket) if split.buckets > 1 else None
        )
        ok, offset = _pick(usable, mine), _pick(rec.offset, mine)
        ids = table.assign(
            scan.file,
            scan.side,
            scan.split,
            _pick(rec.key_pos, mine),
            _pick(rec.key_len, mine),
            ok,
            ok,
            offset,
            (_pick(hashes, mine), packed, _pick(packed_offs, mine)),
        )
        latest = np.where(ids >= 0, table.latest_of(np.maximum(ids, 0)), -1)
        kept = np.flatnonzero(ok & (offset == latest) & (_pick(rec.value_len, mine) >= 0))
        rows = mine[kept] if mine is not None else kept
        yield from record_batches(split, scan, rows, opts.include_headers, opts.columns)
        del scan


def _pick(column: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    return column if rows is None else column[rows]


class _Header(NamedTuple):
    """A batch's fields `policy/cut.py` reads."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    is_transactional: bool
    is_control: bool
    records_count: int


def _headers_in_order(storage: Storage, refs, txn_only: bool = False) -> Iterator[_Header]:
    """A partition's batch headers in log order, read segment by segment as asked for; with
    `txn_only` only its transactional and control batches (all that open and end transactions)."""
    for ref in refs:
        data = (
            read_segment_bytes(storage, ref.path, "mmap")
            if storage.is_local
            else np.frombuffer(storage.read_bytes(ref.path), dtype=np.uint8)
        )
        b = scan_batches(data)
        v2 = b.magic == MAGIC_V2
        attrs = b.attributes.astype(np.int64)
        txn, ctl = v2 & (attrs & TRANSACTIONAL_MASK != 0), v2 & (attrs & CONTROL_MASK != 0)
        for i in np.flatnonzero(txn | ctl) if txn_only else range(len(b)):
            yield _Header(
                int(b.base_offset[i]),
                int(b.last_offset[i]),
                int(b.max_timestamp[i]),
                int(b.producer_id[i]),
                bool(txn[i]),
                bool(ctl[i]),
                int(b.records_count[i]),
            )


def open_transactions(storage: Storage, refs) -> dict[int, int]:
    """{producer id: first offset of its transaction open at the log end}: transactional data
    with no later COMMIT/ABORT marker of its producer (`policy/cut.py` over the whole log)."""
    return cut_log(_headers_in_order(storage, refs, txn_only=True)).open_transactions


def _cut(split: Split) -> tuple[int, dict[int, int]]:
    """(end offset, {producer id: first offset of its transaction open there}) of the state's
    cut: the log as a broker held it as of the time or offset (`policy/cut.py`), or its end."""
    if split.as_of_time is None and split.as_of_offset is None:
        return 2**63 - 1, open_transactions(split.storage, split.segments + split.tail)
    cut = cut_log(
        _headers_in_order(split.storage, split.segments),
        split.as_of_time,
        split.as_of_offset,
        split.offset_lo,
    )
    return (cut.end_offset if cut.ended_by is not None else 2**63 - 1), cut.open_transactions


def _chunks(value_len: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) row ranges of at most FRAME_BATCH_ROWS rows and ~FRAME_BATCH_BYTES of values."""
    n = len(value_len)
    if n == 0:
        return []
    ends = np.cumsum(np.maximum(value_len, 0).astype(np.int64) + 1)
    out, start = [], 0
    while start < n:
        base = ends[start - 1] if start else 0
        end = int(np.searchsorted(ends, base + FRAME_BATCH_BYTES, side="right"))
        end = min(max(end, start + 1), start + FRAME_BATCH_ROWS, n)
        out.append((start, end))
        start = end
    return out


def _binary(scan: SegmentScan, pos: np.ndarray, length: np.ndarray, typ=pa.binary()) -> pa.Array:
    data, offsets = _gather(scan.file, scan.side, scan.split, pos, length, False)
    valid = length >= 0
    n = len(length)
    nulls = int(n - np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(typ, n, buffers, null_count=nulls)


def _sequences(base_sequence: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """A record's sequence as Kafka's `DefaultRecordBatch.incrementSequence` (wraps past
    Integer.MAX_VALUE to 0); -1 where the batch has none."""
    base = base_sequence.astype(np.int64)
    seq = base + delta
    seq = np.where(seq > INT32_MAX, seq - INT32_MAX - 1, seq)
    return np.where(base < 0, -1, seq).astype(np.int32)


def _headers(scan: SegmentScan, rows: np.ndarray, v2: np.ndarray) -> pa.Array:
    rec = scan.records
    start = header_starts(rec.value_pos[rows], rec.value_len[rows])
    counts, kp, kl, vp, vl = walk_headers(scan.file, scan.side, scan.split, start, v2)
    keys = _binary(scan, kp, kl, pa.string())
    values = _binary(scan, vp, vl)
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    pairs = pa.StructArray.from_arrays([keys, values], ["key", "value"])
    return pa.ListArray.from_arrays(pa.array(offsets), pairs)


class _Chunk:
    """The fields of one chunk of rows that several columns share, each gathered when first used."""

    def __init__(self, scan: SegmentScan, r: np.ndarray) -> None:
        self.scan, self.r = scan, r

    @functools.cached_property
    def bi(self) -> np.ndarray:
        return self.scan.records.batch_index[self.r]

    @functools.cached_property
    def offset(self) -> np.ndarray:
        return self.scan.records.offset[self.r]

    @functools.cached_property
    def attrs(self) -> np.ndarray:
        return self.scan.batches.attributes[self.bi].astype(np.int64)

    @functools.cached_property
    def v2(self) -> np.ndarray:
        return self.scan.batches.magic[self.bi] == MAGIC_V2

    @functools.cached_property
    def no_ts(self) -> np.ndarray:
        return self.scan.batches.magic[self.bi] == MAGIC_V0

    def batch_field(self, name: str, dtype) -> pa.Array:
        return pa.array(getattr(self.scan.batches, name)[self.bi].astype(dtype))


def _timestamp(c: _Chunk) -> pa.Array:
    no_ts = c.no_ts
    return pa.Array.from_buffers(
        pa.timestamp("us", tz="UTC"),
        len(c.r),
        [
            pa.py_buffer(np.packbits(~no_ts, bitorder="little")) if no_ts.any() else None,
            pa.py_buffer(c.scan.records.timestamp[c.r] * 1000),
        ],
    )


# How each column is built from a chunk of rows; a read builds only the columns it returns.
_BUILD = {
    "key": lambda s, c: _binary(c.scan, c.scan.records.key_pos[c.r], c.scan.records.key_len[c.r]),
    "value": lambda s, c: _binary(c.scan, c.scan.records.value_pos[c.r], c.scan.records.value_len[c.r]),
    "topic": lambda s, c: pa.repeat(pa.scalar(s.topic, pa.string()), len(c.r)),
    "partition": lambda s, c: pa.array(np.full(len(c.r), s.partition, np.int32)),
    "offset": lambda s, c: pa.array(c.offset),
    "timestamp": lambda s, c: _timestamp(c),
    "timestampType": lambda s, c: pa.array(
        np.where(c.no_ts, -1, (c.attrs & TIMESTAMP_TYPE_MASK != 0).astype(np.int32)).astype(np.int32)
    ),
    "headers": lambda s, c: _headers(c.scan, c.r, c.v2),
    "leaderEpoch": lambda s, c: c.batch_field("partition_leader_epoch", np.int32),
    "producerId": lambda s, c: c.batch_field("producer_id", np.int64),
    "producerEpoch": lambda s, c: c.batch_field("producer_epoch", np.int32),
    "baseSequence": lambda s, c: c.batch_field("base_sequence", np.int32),
    "sequence": lambda s, c: pa.array(
        _sequences(c.scan.batches.base_sequence[c.bi], c.offset - c.scan.batches.base_offset[c.bi])
    ),
    "isTransactional": lambda s, c: pa.array(c.v2 & (c.attrs & TRANSACTIONAL_MASK != 0)),
    "isControl": lambda s, c: pa.array(c.v2 & (c.attrs & CONTROL_MASK != 0)),
}


def record_batches(
    split: Split,
    scan: SegmentScan,
    rows: np.ndarray,
    include_headers: bool,
    columns: tuple[str, ...] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows `rows` (indexes into the scan's records) as record batches of the schema, or of
    `columns` alone (the others never built)."""
    schema = arrow_schema(include_headers, columns)
    for start, end in _chunks(scan.records.value_len[rows]):
        chunk = _Chunk(scan, rows[start:end])
        yield pa.RecordBatch.from_arrays([_BUILD[name](split, chunk) for name in schema.names], schema=schema)
