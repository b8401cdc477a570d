"""Unit tests of the scan and the rewrite (compaction/steps/scan.py, rewrite.py) without Spark.

`found_offsets` and `aborted_batches` are checked against tables worked out by hand (the
vectorised rules themselves in test_keep_policy.py). `scan_group` / `rewrite_unit`
run on tiny partition dirs written with
`build_batch` + `build_indexes`; the offset map that Spark would compute (`offset_map` +
`group_lookup`) is rebuilt here from `scan_group`'s rows by the same rule (max dirty offset per key,
keys with no dirty record left out) or given by hand, as Kafka's `FakeOffsetMap` tests do.

Ports of LogCleanerTest / MemoryRecordsTest cases keep the Kafka test's name. Differences that come
from our design are stated where they matter: the map is exact and unbounded, so one round covers
the whole dirty section and `map.latestOffset` is always `upper_bound - 1`.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pyarrow as pa
import pytest
from genkit import generate
from groupkit import outcomes
from reference_map import KeyLookup, found_offsets, scan_group
from synckit import record_creates_and_fsyncs

from compaction.errors import IndexFullError
from compaction.format import batch as fb
from compaction.format import compression, naming
from compaction.format.batch_build import build_batch
from compaction.format.txnindex import AbortedTxn, read_txn_index
from compaction.kernels.index_build import build_indexes, rebuild_indexes_from_log
from compaction.kernels.scan import scan_batches
from compaction.policy.keep import aborted_batches
from compaction.policy.txn_state import LastRecord
from compaction.runtime.storage import Storage
from compaction.steps.commit import Replacement, commit_partition
from compaction.steps.group import GroupSpec, SourceSegment
from compaction.steps.results import GroupResult
from compaction.steps.rewrite import rewrite_unit
from compaction.steps.scan import read_segment

NOW = 1_700_000_000_000
RETENTION = 86_400_000  # delete.retention.ms default
HUGE = 2**62  # FakeOffsetMap entries "at Long.MaxValue": every record is older


def _b(x) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    return str(x).encode()


def rec(offset: int, key, value, ts: int | None = None, headers=()) -> fb.Record:
    return fb.Record(offset, NOW - 10_000 + offset if ts is None else ts, _b(key), _b(value), tuple(headers))


def one(offset: int, key, value=None, **kw) -> bytes:
    """A single-record batch, like LogCleanerTest's `record(key, value)` appends."""
    return build_batch([rec(offset, key, value if value is not None else key)], **kw)


def tombstone(offset: int, key, **kw) -> bytes:
    return build_batch([rec(offset, key, None)], **kw)


class Log:
    """A partition dir `t-0` in tmp_path with segments written like a broker would (log + indexes)."""

    def __init__(self, tmp_path) -> None:
        self.dir = tmp_path / "t-0"
        self.dir.mkdir()
        self.path = str(self.dir)
        self.storage = Storage.local()
        self.segments: list[SourceSegment] = []

    def file(self, base: int, suffix: str = ".log", transient: str = "") -> str:
        return os.path.join(self.path, naming.segment_file_name(base, suffix) + transient)

    def segment(self, base: int, batches: list[bytes], mtime_ns: int | None = None) -> SourceSegment:
        data = b"".join(batches)
        cols = scan_batches(np.frombuffer(data, dtype=np.uint8))
        index, timeindex = build_indexes(
            cols.position, cols.size, cols.last_offset, cols.max_timestamp, base, 4096
        )
        for suffix, content in ((".log", data), (".index", index), (".timeindex", timeindex)):
            with open(self.file(base, suffix), "wb") as f:
                f.write(content)
        mtime_ns = (NOW - 60_000 + base) * 1_000_000 if mtime_ns is None else mtime_ns
        os.utime(self.file(base), ns=(mtime_ns, mtime_ns))
        seg = SourceSegment(base, len(data), mtime_ns)
        others = [s for s in self.segments if s.base_offset != base]
        self.segments = sorted([*others, seg], key=lambda s: s.base_offset)
        return seg

    def spec(
        self,
        segments,
        *,
        first_dirty: int = 0,
        upper_bound: int | None = None,
        now: int = NOW,
        aborted=(),
        last_records=None,
        gid: int = 0,
        high_watermark: int | None = None,
    ) -> GroupSpec:
        """A group of a log whose high watermark is the round's upper bound unless given."""
        if upper_bound is None:
            upper_bound = next_offset(self.read(segments[-1].base_offset), segments[-1].base_offset)
        return GroupSpec(
            group_id=gid,
            topic="t",
            partition=0,
            storage=self.storage,
            part_path=self.path,
            segments=tuple(segments),
            first_dirty_offset=first_dirty,
            upper_bound=upper_bound,
            now_ms=now,
            delete_retention_ms=RETENTION,
            legacy_delete_horizon_ms=0,
            index_interval_bytes=4096,
            aborted_txns=tuple(aborted),
            last_records=dict(last_records or {}),
            retain_empty_offset=upper_bound if high_watermark is None else high_watermark,
        )

    def read(self, base: int, transient: str = "") -> bytes:
        with open(self.file(base, ".log", transient), "rb") as f:
            return f.read()

    def swap_in(self, spec: GroupSpec) -> None:
        """Replace the group's segments by its cleaned one (the real commit protocol)."""
        replaced = tuple(s.base_offset for s in spec.segments)
        commit_partition(self.storage, self.path, [Replacement(spec.new_base, replaced)])
        gone = {s.base_offset for s in spec.segments}
        kept = [s for s in self.segments if s.base_offset not in gone]
        st = os.stat(self.file(spec.new_base))
        new = SourceSegment(spec.new_base, st.st_size, st.st_mtime_ns)
        self.segments = sorted([*kept, new], key=lambda s: s.base_offset)


def next_offset(data: bytes, base: int) -> int:
    cols = scan_batches(np.frombuffer(data, dtype=np.uint8))
    return int(cols.last_offset.max()) + 1 if len(cols.last_offset) else base


def batches_of(data: bytes) -> list[tuple[fb.BatchHeader, list[fb.Record], bytes]]:
    out, pos = [], 0
    while pos < len(data):
        header = fb.BatchHeader.unpack_from(data, pos)
        raw = data[pos : pos + header.size]
        out.append((header, fb.RecordBatch(raw).records(), raw))
        pos += header.size
    return out


def offset_map(specs: list[GroupSpec]) -> dict[bytes, int]:
    """What a whole-partition task's offset map computes for one partition: max dirty offset per key, keys
    without a dirty record left out."""
    m: dict[bytes, int] = {}
    for s in specs:
        keys, _ = scan_group(s)
        for k, d in zip(keys.column("key").to_pylist(), keys.column("dirty_offset").to_pylist()):
            if d >= 0:
                m[k] = max(m.get(k, -1), d)
    return m


def clean(specs: list[GroupSpec], m: dict) -> list[GroupResult]:
    keys = pa.array([_b(k) for k in m], pa.binary())
    latest = np.array(list(m.values()), dtype=np.int64)
    return rewrite_unit(specs, KeyLookup(keys, latest))


def cleaned_batches(log: Log, spec: GroupSpec):
    return batches_of(log.read(spec.new_base, ".cleaned"))


def kv(batches) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for _, records, _ in batches for r in records]


def keys_in_log(batches) -> list[bytes]:
    """LogTestUtils.keysInLog: keys of records with a value (tombstones excluded)."""
    return [r.key for _, records, _ in batches for r in records if r.value is not None]


# --- found_offsets -----------------------------------------------------------------------------


def test_found_offsets_absent_null_and_present():
    keys = pa.array([b"a", None, b"b", b"zz", b""], pa.binary())
    lookup = pa.array([b"b", b"a", b""], pa.binary())
    got = found_offsets(keys, lookup, np.array([7, 5, 9], dtype=np.int64))
    assert got.tolist() == [5, -1, 7, -1, 9]
    assert got.dtype == np.int64


def test_found_offsets_empty_lookup():
    keys = pa.array([b"a", None], pa.binary())
    assert found_offsets(keys, pa.array([], pa.binary()), np.array([], dtype=np.int64)).tolist() == [-1, -1]
    assert found_offsets(pa.array([], pa.binary()), pa.array([b"a"]), np.array([3])).tolist() == []


def test_found_offsets_duplicate_lookup_rows():
    # A rewrite unit spanning several groups of one partition receives the same map entry once per
    # group the key occurs in (group_lookup explodes `groups`): same key, same offset.
    keys = pa.array([b"a", b"b"], pa.binary())
    lookup = pa.array([b"a", b"b", b"a", b"a"], pa.binary())
    assert found_offsets(keys, lookup, np.array([4, 2, 4, 4])).tolist() == [4, 2]


# --- aborted_batches / scan_group -------------------------------------------------------------

PID = 7


def txn_batch(records, pid=PID, epoch=0, seq=0) -> bytes:
    return build_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )


def marker(offset: int, control_type: int, pid=PID, epoch=0) -> bytes:
    key, value = fb.control_record(control_type)
    return build_batch(
        [fb.Record(offset, NOW - 5000, key, value)],
        producer_id=pid,
        producer_epoch=epoch,
        is_transactional=True,
        is_control=True,
    )


def test_aborted_batches_flags_only_transactional_data_in_range(tmp_path):
    log = Log(tmp_path)
    seg = log.segment(
        0,
        [
            txn_batch([rec(0, "a", "x"), rec(1, "b", "x")]),  # pid 7, aborted range 0..4
            txn_batch([rec(2, "c", "x")], pid=8),  # other producer
            # idempotent, not transactional
            build_batch([rec(3, "d", "x")], producer_id=PID, producer_epoch=0, base_sequence=5),
            marker(4, fb.CONTROL_ABORT),  # control: never "aborted data"
            txn_batch([rec(5, "e", "x")], seq=6),  # after the aborted txn ended
        ],
    )
    b = read_segment(log.spec([seg]), seg).batches
    assert aborted_batches(b, (AbortedTxn(PID, 0, 4, 5),)).tolist() == [True, False, False, False, False]
    assert aborted_batches(b, ()).tolist() == [False] * 5
    both = (AbortedTxn(PID, 0, 4, 5), AbortedTxn(8, 2, 6, 7))
    assert aborted_batches(b, both).tolist() == [True, True, False, False, False]


def test_scan_group_keys_dirty_offsets_and_producers(tmp_path):
    log = Log(tmp_path)
    s0 = log.segment(
        0,
        [
            build_batch([rec(0, "a", "a0"), rec(1, "b", "b0")]),
            build_batch([rec(2, None, "unkeyed")]),
            txn_batch([rec(3, "a", "aborted"), rec(4, "c", "aborted")]),
            marker(5, fb.CONTROL_ABORT),
        ],
    )
    s1 = log.segment(6, [one(6, "a"), tombstone(7, "b"), one(8, "d")])
    spec = log.spec([s0, s1], first_dirty=7, upper_bound=9, aborted=[AbortedTxn(PID, 3, 5, 6)])
    keys, producers = scan_group(spec)
    got = sorted(
        zip(
            keys.column("key").to_pylist(),
            keys.column("max_offset").to_pylist(),
            keys.column("dirty_offset").to_pylist(),
        )
    )
    # a: clean records only (0 and 6; the aborted one at 3 does not count); b: its tombstone is
    # dirty; c: only in the aborted batch -> absent; control key and null key -> absent.
    assert got == [(b"a", 6, -1), (b"b", 7, 7), (b"d", 8, 8)]
    prod = pa.table(producers).to_pylist()
    assert [(p["producer_id"], p["base_offset"], p["last_offset"], p["records_count"]) for p in prod] == [
        (PID, 3, 4, 2),
        (PID, 5, 5, 1),
    ]


def test_scan_group_tail_segments_feed_producers_only(tmp_path):
    log = Log(tmp_path)
    s0 = log.segment(0, [one(0, "a")])
    idem = build_batch([rec(1, "a", "new")], producer_id=3, producer_epoch=1, base_sequence=0)
    tail = log.segment(1, [idem])
    spec = log.spec([s0], upper_bound=1)
    spec = GroupSpec(**{**spec.__dict__, "tail_segments": (tail,)})
    keys, producers = scan_group(spec)
    assert keys.to_pylist() == [{"key": b"a", "max_offset": 0, "dirty_offset": 0}]
    assert pa.table(producers).column("producer_id").to_pylist() == [3]


# --- rewrite_unit: output files ------------------------------------------------------------------


def test_rewrite_verbatim_copies_rebuilds_indexes_and_mtime(tmp_path):
    log = Log(tmp_path)
    b0 = build_batch([rec(0, "a", "a0"), rec(1, "b", "b0", headers=[("h", b"1"), ("n", None)])])
    b1 = build_batch([rec(2, "c", "c0", headers=[("x", b"y")])], partition_leader_epoch=3)
    b2 = one(3, "a", "a1")
    b3 = build_batch([rec(4, "d", "d0")], codec=compression.CODEC_GZIP)
    s0 = log.segment(0, [b0, b1])
    s1 = log.segment(3, [b2, b3])
    spec = log.spec([s0, s1])
    m = offset_map([spec])
    assert m == {b"a": 3, b"b": 1, b"c": 2, b"d": 4}
    (res,) = clean([spec], m)

    # b0 loses a@0: rebuilt with the original base offset and lastOffsetDelta, header kept.
    rebuilt = build_batch(
        [rec(1, "b", "b0", headers=[("h", b"1"), ("n", None)])], base_offset=0, last_offset_delta=1
    )
    data = log.read(0, ".cleaned")
    assert data == rebuilt + b1 + b2 + b3  # untouched batches byte-for-byte
    (h0, r0, _), *_ = batches_of(data)
    assert (h0.base_offset, h0.last_offset_delta, h0.records_count) == (0, 1, 1)
    assert r0[0].headers == (("h", b"1"), ("n", None))

    index, timeindex = rebuild_indexes_from_log(data, 0, 4096)
    assert open(log.file(0, ".index", ".cleaned"), "rb").read() == index
    assert open(log.file(0, ".timeindex", ".cleaned"), "rb").read() == timeindex
    for suffix in (".log", ".index", ".timeindex"):
        assert os.stat(log.file(0, suffix, ".cleaned")).st_mtime_ns == s1.mtime_ns
    assert not os.path.exists(log.file(0, ".txnindex", ".cleaned"))
    assert log.read(0) == b0 + b1 and log.read(3) == b2 + b3  # sources untouched
    assert not os.path.exists(log.file(3, ".log", ".cleaned"))  # one output per group, at its base

    assert res.group_id == 0
    assert (res.bytes_read, res.bytes_written) == (s0.size + s1.size, len(data))
    assert (res.records_read, res.records_written) == (5, 4)
    assert (res.batches_read, res.batches_written, res.invalid_records) == (4, 4, 0)


def test_rewrite_delete_horizon(tmp_path):
    log = Log(tmp_path)
    # tombstone, no horizon yet
    fresh = build_batch([rec(0, "a", "v"), rec(1, "b", None, ts=NOW - 99_000)])
    # horizon passed
    passed = build_batch([rec(2, "c", "v"), rec(3, "d", None)], delete_horizon_ms=NOW - 1)
    pending = build_batch([rec(4, "e", None)], delete_horizon_ms=NOW + 5)  # horizon still ahead
    plain = one(5, "f")
    seg = log.segment(0, [fresh, passed, pending, plain])
    spec = log.spec([seg])
    clean([spec], offset_map([spec]))
    (h0, r0, _), (h1, r1, _), (h2, _, raw2), (_, _, raw3) = cleaned_batches(log, spec)

    # Retained tombstone, no horizon: rebuilt (nothing removed), horizon = now + delete.retention.ms,
    # which becomes baseTimestamp; record timestamps unchanged.
    assert h0.delete_horizon_ms == NOW + RETENTION and h0.base_timestamp == NOW + RETENTION
    assert [(r.offset, r.key, r.value, r.timestamp) for r in r0] == [
        (0, b"a", b"v", NOW - 10_000),
        (1, b"b", None, NOW - 99_000),
    ]
    assert h0.max_timestamp == NOW - 10_000
    # Horizon passed: the tombstone goes, the batch is rebuilt and keeps its old horizon.
    assert [(r.offset, r.value) for r in r1] == [(2, b"v")]
    assert h1.delete_horizon_ms == NOW - 1 and h1.last_offset_delta == 1
    # Horizon pending: copied verbatim; plain batch too.
    assert raw2 == pending and h2.delete_horizon_ms == NOW + 5
    assert raw3 == plain


def test_rewrite_empty_batch_only_at_high_watermark(tmp_path):
    log = Log(tmp_path)
    seg = log.segment(0, [one(0, "a"), one(1, "b")])
    for high_watermark, expected in ((2, 1), (3, 0)):  # Kafka 4.4+ (KAFKA-20452): not at the upper bound
        spec = log.spec([seg], upper_bound=2, high_watermark=high_watermark)
        clean([spec], {b"a": HUGE, b"b": HUGE})
        assert len(cleaned_batches(log, spec)) == expected
    # An empty output is a 0-byte segment with 0-byte indexes (docs/kafka-rules.md#index-invariants).
    assert log.read(0, ".cleaned") == b""
    assert os.path.getsize(log.file(0, ".index", ".cleaned")) == 0
    assert os.path.getsize(log.file(0, ".timeindex", ".cleaned")) == 0


@pytest.mark.parametrize("dry_run", [False, True])
def test_rewrite_fails_a_group_whose_indexes_exceed_segment_index_bytes(tmp_path, dry_run):
    """docs/kafka-rules.md#index-room: every batch crosses a 0-byte interval, and 24 bytes hold one
    time entry before the one at close; a dry run fails the group as the round does, writing nothing."""
    log = Log(tmp_path)
    seg = log.segment(0, [one(i, f"k{i}") for i in range(6)])
    spec = dataclasses.replace(
        log.spec([seg]), index_interval_bytes=0, segment_index_bytes=24, dry_run=dry_run
    )
    with pytest.raises(IndexFullError, match=r"00000000000000000000.log: the cleaned segment's \.timeindex"):
        clean([spec], offset_map([spec]))
    # the round's .log.cleaned is the driver's to remove; a dry run never writes one
    written = {n for n in os.listdir(log.path) if n.endswith(".cleaned")}
    assert written == (set() if dry_run else {f"{0:020d}.log.cleaned"})
    roomy = dataclasses.replace(spec, segment_index_bytes=36)  # two time entries: still too few
    with pytest.raises(IndexFullError):
        clean([roomy], offset_map([roomy]))
    enough = dataclasses.replace(spec, segment_index_bytes=72)  # 9 offset and 5 time entries
    (res,) = clean([enough], offset_map([enough]))
    assert res.records_written == 6
    assert os.path.exists(log.file(0, ".index", ".cleaned")) != dry_run


def test_rewrite_aborted_data_dropped_and_abort_marker_kept_with_txn_index(tmp_path):
    """testAbortMarkerRemoval, first pass: aborted data goes at once, the ABORT marker stays (with
    its .txnindex entry, no delete horizon yet: it is not discardable while data of its txn was
    seen this round); a COMMIT with traversed data stays as is."""
    log = Log(tmp_path)
    aborted = AbortedTxn(PID, 0, 1, 2)
    seg = log.segment(
        0,
        [
            txn_batch([rec(0, "a", "aborted")]),
            marker(1, fb.CONTROL_ABORT),
            txn_batch([rec(2, "a", "committed")], pid=9),
            marker(3, fb.CONTROL_COMMIT, pid=9),
            one(4, "z"),
        ],
    )
    spec = log.spec([seg], aborted=[aborted])
    m = offset_map([spec])
    assert m == {b"a": 2, b"z": 4}
    (res,) = clean([spec], m)
    out = cleaned_batches(log, spec)
    layout = [(h.base_offset, h.is_control) for h, _, _ in out]
    assert layout == [(1, True), (2, False), (3, True), (4, False)]
    assert out[0][0].delete_horizon_ms is None  # markers are not "discardable" while their txn has data
    assert read_txn_index(open(log.file(0, ".txnindex", ".cleaned"), "rb").read()) == [aborted]
    # The aborted batch is dropped unread (DELETE): its record is not counted (CleanerStats.messagesRead).
    assert res.records_read == 4 and res.records_written == 4


# --- LogCleanerTest / MemoryRecordsTest ports ------------------------------------------------------


def _four_records_per_segment(log: Log, n_segments: int) -> list[SourceSegment]:
    return [log.segment(b, [one(o, o) for o in range(b, b + 4)]) for b in range(0, 4 * n_segments, 4)]


def test_testCleanSegments(tmp_path):
    log = Log(tmp_path)
    segs = _four_records_per_segment(log, 4)  # 4 segments; the last one plays the active segment
    group = segs[:3]
    spec = log.spec(group)  # upper bound = group's last readNextOffset (12)
    assert spec.upper_bound == 12
    removed = [1, 3, 5, 7, 9]
    (res,) = clean([spec], {k: HUGE for k in removed})
    should_remain = [str(o).encode() for o in range(12) if o not in removed]
    assert keys_in_log(cleaned_batches(log, spec)) == should_remain
    assert res.bytes_read == sum(s.size for s in group)


def test_testCleanSegmentsRetainingLastEmptyBatch(tmp_path):
    log = Log(tmp_path)
    group = _four_records_per_segment(log, 4)[:3]
    spec = log.spec(group)
    (res,) = clean([spec], {k: HUGE for k in range(16)})
    out = cleaned_batches(log, spec)
    assert keys_in_log(out) == []
    # KAFKA-17076: the batch ending at the upper bound stays as a 61-byte empty batch.
    assert len(out) == 1
    header, _records, raw = out[0]
    assert (header.last_offset, header.records_count, len(raw)) == (spec.upper_bound - 1, 0, 61)
    assert header.base_offset == 11 and header.max_timestamp == NOW - 10_000 + 11
    assert res.bytes_read == sum(s.size for s in group)
    assert (res.records_written, res.bytes_written) == (0, 61)


def test_testCleaningWithDeletes(tmp_path):
    log = Log(tmp_path)
    s0 = log.segment(0, [one(o, o) for o in range(6)])
    deletes = [0, 2, 4]
    tombstones = [tombstone(6 + i, k) for i, k in enumerate(deletes)]
    s1 = log.segment(6, tombstones + [one(o, o) for o in range(9, 12)])
    log.segment(12, [one(12, 12)])  # active
    spec = log.spec([s0, s1], upper_bound=12)
    clean([spec], offset_map([spec]))
    out = cleaned_batches(log, spec)
    keys = set(keys_in_log(out))
    assert not any(str(k).encode() in keys for k in deletes), "None of the deleted keys should still exist."
    assert keys == {b"1", b"3", b"5", b"9", b"10", b"11"}
    # First round: the tombstones themselves stay, with a delete horizon.
    stones = [(h, r) for h, rs, _ in out for r in rs if r.value is None]
    assert [r.offset for _, r in stones] == [6, 7, 8]
    assert all(h.delete_horizon_ms == NOW + RETENTION for h, _ in stones)


def test_testCleanTombstone(tmp_path):
    log = Log(tmp_path)
    # Round 1: a record with a large timestamp.
    log.segment(0, [build_batch([rec(0, "0", "0", ts=NOW + RETENTION + 10_000)])])
    log.segment(1, [])  # the active segment after roll()
    spec = log.spec(log.segments[:1], upper_bound=1)
    clean([spec], offset_map([spec]))
    log.swap_in(spec)
    # Round 2: a tombstone with a small timestamp, rolled.
    log.segment(1, [build_batch([rec(1, "0", None, ts=NOW - RETENTION - 10_000)])])
    log.segment(2, [])
    spec = log.spec(log.segments[:2], first_dirty=1, upper_bound=2)
    clean([spec], offset_map([spec]))
    log.swap_in(spec)
    first = batches_of(log.read(0))[0][0]
    assert first.last_offset == 1, "The tombstone should be retained."
    assert first.delete_horizon_ms == NOW + RETENTION  # horizon from the cleaning time, not the record's
    # Round 3: a new key, rolled; same clock: the tombstone is still within its horizon.
    log.segment(2, [build_batch([rec(2, "1", "1", ts=NOW)])])
    log.segment(3, [])
    spec = log.spec(log.segments[:2], first_dirty=2, upper_bound=3)
    clean([spec], offset_map([spec]))
    log.swap_in(spec)
    assert batches_of(log.read(0))[0][0].last_offset == 1, "The tombstone should be retained."
    # Beyond the original test: once the horizon has passed, the tombstone goes.
    spec = log.spec(log.segments[:1], first_dirty=3, upper_bound=3, now=NOW + RETENTION)
    clean([spec], offset_map([spec]))
    assert kv(cleaned_batches(log, spec)) == [(2, b"1", b"1")]


def test_testCleaningWithUnkeyedMessages(tmp_path):
    log = Log(tmp_path)
    unkeyed = [build_batch([rec(o, None, o)]) for o in range(4)]
    s0 = log.segment(0, unkeyed)
    keyed = [one(o, o) for o in range(4, 8)]
    s1 = log.segment(4, keyed)
    spec = log.spec([s0, s1])
    (res,) = clean([spec], offset_map([spec]))
    data = log.read(0, ".cleaned")
    assert all(r.key is not None for _, rs, _ in batches_of(data) for r in rs)
    assert len(data) == s0.size + s1.size - sum(map(len, unkeyed))  # expectedSizeAfterCleaning
    assert data == b"".join(keyed)
    assert res.invalid_records == 4


def test_testLogCleanerStats(tmp_path):
    log = Log(tmp_path)
    keys = [0, 1, 0, 1, 0]
    seg = log.segment(0, [one(o, k) for o, k in enumerate(keys)])
    log.segment(5, [])  # roll
    spec = log.spec([seg], first_dirty=2, upper_bound=5)
    m = offset_map([spec])
    assert m == {b"0": 4, b"1": 3}  # endOffset = map.latestOffset + 1 = 5
    (res,) = clean([spec], m)
    data = log.read(0, ".cleaned")
    assert kv(batches_of(data)) == [(3, b"1", b"1"), (4, b"0", b"0")]
    assert res.records_read == 5
    assert res.bytes_read == seg.size
    assert res.records_written == 2
    assert res.bytes_written == len(data)
    assert res.invalid_records == 0
    assert res.seconds >= 0


def test_testPartialSegmentClean_equivalent(tmp_path):
    """Kafka's test uses a 1-entry map, so it needs two rounds ([1,2,3,4] kept after the first,
    [3,4] after the second). Our map is exact and unbounded: one round gives the final answer.
    The first Kafka round is reproduced by handing over the 1-entry map {0 -> 2} with
    upper_bound = latestOffset + 1 = 3 (our map always ends at upper_bound - 1)."""
    log = Log(tmp_path)
    seg = log.segment(0, [one(o, k) for o, k in enumerate([0, 1, 0, 1, 0])])
    log.segment(5, [])
    # Kafka's first round: records above map.latestOffset (2) untouched, key 1 not in the map.
    partial = log.spec([seg], first_dirty=2, upper_bound=3)
    clean([partial], {0: 2})
    assert [r for r, _, _ in kv(cleaned_batches(log, partial))] == [1, 2, 3, 4]
    # Ours: one round, the same as Kafka's final state.
    full = log.spec([seg], first_dirty=2, upper_bound=5)
    clean([full], offset_map([full]))
    assert [r for r, _, _ in kv(cleaned_batches(log, full))] == [3, 4]


CODECS = [
    c
    for c in (
        compression.CODEC_NONE,
        compression.CODEC_GZIP,
        compression.CODEC_SNAPPY,
        compression.CODEC_LZ4,
        compression.CODEC_ZSTD,
    )
]


@pytest.mark.parametrize("codec", CODECS, ids=[compression.CODEC_NAMES[c] for c in CODECS])
def test_testFilterToAlreadyCompactedLog(tmp_path, codec):
    log = Log(tmp_path)
    # A batch with offset gaps (already compacted): base 0, records at 5, 8, 10.
    records = [rec(5, None, "a", ts=10), rec(8, "1", "b", ts=11), rec(10, None, "c", ts=12)]
    seg = log.segment(0, [build_batch(records, base_offset=0, codec=codec)])
    spec = log.spec([seg], upper_bound=100)  # RetainNonNullKeysFilter: only null keys go
    (res,) = clean([spec], {})
    ((header, kept, _),) = cleaned_batches(log, spec)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in kept] == [(8, 11, b"1", b"b")]
    # v2 keeps the first and last offsets of the original batch.
    assert (header.base_offset, header.last_offset) == (0, 10)
    assert header.codec == codec
    assert res.invalid_records == 2


def test_testFilterToPreservesProducerInfo(tmp_path):
    log = Log(tmp_path)
    plain = build_batch([rec(0, None, "a"), rec(1, "1", "b"), rec(2, None, "c")])
    idem = build_batch(
        [rec(3, None, "d"), rec(4, "4", "e"), rec(5, "5", "f")],
        producer_id=23,
        producer_epoch=5,
        base_sequence=10,
    )
    txn = build_batch(
        [rec(6, "6", "g"), rec(7, "7", "h"), rec(8, None, "i")],
        producer_id=99384,
        producer_epoch=234,
        base_sequence=15,
        is_transactional=True,
    )
    seg = log.segment(0, [plain, idem, txn])
    spec = log.spec([seg], upper_bound=100)
    clean([spec], {})
    out = cleaned_batches(log, spec)
    assert len(out) == 3
    fields = [
        (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional, h.base_offset, h.last_offset)
        for h, _, _ in out
    ]
    assert fields == [
        (-1, -1, -1, False, 0, 2),
        (23, 5, 10, False, 3, 5),  # last sequence 10 + lastOffsetDelta 2 = 12 survives
        (99384, 234, 15, True, 6, 8),
    ]
    assert [[r.offset for r in rs] for _, rs, _ in out] == [[1], [4, 5], [6, 7]]


def test_testFilterToPreservesPartitionLeaderEpoch(tmp_path):
    log = Log(tmp_path)
    seg = log.segment(
        0, [build_batch([rec(0, None, "a"), rec(1, "1", "b"), rec(2, None, "c")], partition_leader_epoch=67)]
    )
    spec = log.spec([seg], upper_bound=100)
    clean([spec], {})
    ((header, kept, _),) = cleaned_batches(log, spec)
    assert header.partition_leader_epoch == 67
    assert [r.offset for r in kept] == [1]


@pytest.mark.parametrize("codec", CODECS, ids=[compression.CODEC_NAMES[c] for c in CODECS])
def test_testFilterToPreservesLogAppendTime(tmp_path, codec):
    log = Log(tmp_path)
    append_time = NOW - 1234
    kw = dict(
        codec=codec,
        timestamp_type=fb.LOG_APPEND_TIME,
        log_append_time=append_time,
        producer_id=11,
        producer_epoch=0,
    )
    seg = log.segment(
        0,
        [
            build_batch([rec(0, None, "a", ts=10)], base_sequence=0, **kw),
            build_batch([rec(1, "1", "b", ts=11), rec(2, None, "c", ts=12)], base_sequence=1, **kw),
            build_batch(
                [rec(3, None, "d", ts=13), rec(4, "4", "e", ts=14), rec(5, "5", "f", ts=15)],
                base_sequence=3,
                **kw,
            ),
        ],
    )
    spec = log.spec([seg], upper_bound=100)
    clean([spec], {})
    out = cleaned_batches(log, spec)
    assert len(out) == 2
    for header, records, _ in out:
        assert header.codec == codec
        assert header.timestamp_type == fb.LOG_APPEND_TIME
        assert header.max_timestamp == append_time
        assert all(r.timestamp == append_time for r in records)
    assert [[r.offset for r in rs] for _, rs, _ in out] == [[1], [4, 5]]


def test_last_batch_of_active_producer_kept_empty(tmp_path):
    """testLogCleanerRetainsProducerLastSequence at this level: the producer's last batch stays as
    an empty batch (its offsets and sequence survive) even when all its records are superseded."""
    log = Log(tmp_path)
    seg = log.segment(
        0,
        [
            build_batch(
                [rec(0, "a", "1"), rec(1, "b", "1")], producer_id=1, producer_epoch=0, base_sequence=0
            ),
            one(2, "a", "2"),
            one(3, "b", "2"),
            one(4, "c", "2"),
        ],
    )
    last = {1: LastRecord(last_data_offset=1, producer_epoch=0)}
    spec = log.spec([seg], upper_bound=100, last_records=last)
    clean([spec], offset_map([spec]))
    out = cleaned_batches(log, spec)
    header, records, raw = out[0]
    assert (header.base_offset, header.last_offset, header.producer_id, header.base_sequence) == (0, 1, 1, 0)
    assert records == [] and len(raw) == 61
    assert [r for r, _, _ in kv(out)] == [2, 3, 4]


# --- the whole-partition task: its KeyTable map decides like an independent key lookup ---------


def _partition_specs(log_dir):
    from compaction.cli.options import parse_args
    from compaction.steps import plan_round

    opts = parse_args(["--log-dir", str(log_dir), "--now-ms", str(NOW), "--segment-bytes", "120000"])
    planned, _ = plan_round.discover_and_plan(opts)
    (p,) = planned
    config = plan_round.resolve_topic_config(None, plan_round.job_config(opts, p.partition_dir.topic))
    return plan_round.group_specs(p, opts, config, 0)


def _cleaned_files(log_dir) -> dict[str, bytes]:
    out = {}
    for root, _, files in os.walk(log_dir):
        for name in sorted(files):
            if name.endswith(".cleaned"):
                path = os.path.join(root, name)
                with open(path, "rb") as fh:
                    out[name] = fh.read()
                os.unlink(path)
    return out


def test_compact_partition_key_table_matches_a_key_lookup(tmp_path, monkeypatch):
    """compact_partition's offset map (KeyTable ids kept from the scan; or looked up again when
    the scan is not kept) writes exactly what the same rewrite writes with a map built
    independently from scan_group's distinct keys (KeyLookup): mixed codecs, transactions
    (committed and aborted), idempotent producers, tombstones, headers."""
    from compaction.spark import stages

    log_dir = tmp_path / "logs"
    generate(
        log_dir,
        "--topics t:1 --records 6000 --keys 700 --codec mixed --segment-bytes 60000 --tombstone-ratio 0.1"
        " --headers 1 --transactions 0.2 --abort-ratio 0.3 --idempotent 0.3 --seed 7",
    )
    specs = _partition_specs(log_dir)
    assert len(specs) > 1 and sum(len(s.segments) for s in specs) > 5
    kept_ids = stages.compact_partition(specs)
    with_ids = _cleaned_files(log_dir)
    looked_up = stages.compact_partition(specs, scan_reuse_bytes=0)
    without_cache = _cleaned_files(log_dir)
    from compaction.steps import pipeline

    real_rewrite = pipeline.rewrite_unit

    def with_key_lookup(unit_specs, _pmap, cache=None):
        m = offset_map(unit_specs)
        return real_rewrite(unit_specs, KeyLookup(pa.array(list(m), pa.binary()), np.array(list(m.values()))))

    monkeypatch.setattr(pipeline, "rewrite_unit", with_key_lookup)
    independent = stages.compact_partition(specs)
    reference = _cleaned_files(log_dir)
    assert with_ids and with_ids == without_cache == reference
    assert outcomes(kept_ids) == outcomes(looked_up) == outcomes(independent)
    assert sum(r["records_written"] for r in kept_ids) < sum(r["records_read"] for r in kept_ids)


def test_packed_scans_write_what_full_scans_write(tmp_path, monkeypatch):
    """Newest-first scan with packed decompressed records (sidepack) against no kept scans at all
    (every segment read, decompressed and walked again by the rewrite): the same bytes, on mixed
    codecs without transactions (so segments are packed: checked), tombstones and headers."""
    from compaction.spark import stages
    from compaction.steps import scan as scan_step

    log_dir = tmp_path / "logs"
    generate(
        log_dir,
        "--topics t:1 --records 8000 --keys 900 --codec mixed --segment-bytes 60000 --tombstone-ratio 0.1"
        " --headers 2 --seed 11",
    )
    specs = _partition_specs(log_dir)
    packed = []
    real_pack = scan_step.pack_side

    def counting_pack(scan, may_keep):
        out = real_pack(scan, may_keep)
        packed.append(out is not None and len(out.side) < len(scan.side))
        return out

    monkeypatch.setattr(scan_step, "pack_side", counting_pack)
    rows = stages.compact_partition(specs)
    with_packing = _cleaned_files(log_dir)
    assert sum(packed) >= 3, packed
    again = stages.compact_partition(specs, scan_reuse_bytes=0)
    assert with_packing and with_packing == _cleaned_files(log_dir)
    assert outcomes(rows) == outcomes(again)


def test_a_full_scan_cache_displaces_the_newest_scans_and_writes_the_same(tmp_path, monkeypatch):
    """A scan budget that holds some of the packed scans but not all: the oldest segments (few
    records kept, small packed scans) displace the newest kept ones, whose key ids go with them,
    and the rewrite reads those again: the same bytes as all kept and as none kept."""
    from compaction.spark import stages
    from compaction.steps import offset_map as om
    from compaction.steps import scan as scan_step

    log_dir = tmp_path / "logs"
    generate(
        log_dir,
        "--topics t:1 --records 8000 --keys 300 --codec mixed --segment-bytes 60000 --tombstone-ratio 0.1"
        " --headers 2 --seed 5",
    )
    specs = _partition_specs(log_dir)
    sizes, dropped = [], []
    real_offer, real_drop = scan_step.ScanCache.offer, om.PartitionMap.drop_ids

    def sizing_offer(self, group_id, base_offset, scan, reread=False, worth=0, displaced=None):
        sizes.append(self.footprint(scan, with_file=not reread))
        return real_offer(self, group_id, base_offset, scan, reread, worth, displaced)

    def counting_drop(self, group_id, base_offset):
        assert (group_id, base_offset) in self._ids
        dropped.append(base_offset)
        real_drop(self, group_id, base_offset)

    monkeypatch.setattr(scan_step.ScanCache, "offer", sizing_offer)
    monkeypatch.setattr(om.PartitionMap, "drop_ids", counting_drop)
    all_kept = stages.compact_partition(specs)
    everything = _cleaned_files(log_dir)
    assert len(sizes) > 5 and not dropped
    # the newest (scanned first) are packed the least: room for the oldest half only
    budget = sum(sorted(sizes)[: len(sizes) // 2])
    some_kept = stages.compact_partition(specs, scan_reuse_bytes=budget)
    some = _cleaned_files(log_dir)
    assert dropped and max(dropped) == max(seg.base_offset for s in specs for seg in s.segments)
    none_kept = stages.compact_partition(specs, scan_reuse_bytes=0)
    assert everything and everything == some == _cleaned_files(log_dir)
    assert outcomes(all_kept) == outcomes(some_kept) == outcomes(none_kept)


# --- a segment emitted a slice at a time ------------------------------------------------------


@pytest.mark.parametrize(
    ("position", "step", "cuts"),
    [
        ([], 10, [0, 0]),
        ([0], 10, [0, 1]),
        ([0, 5], 10, [0, 2]),
        ([0, 10], 10, [0, 1, 2]),
        ([0, 9, 10, 11, 25], 10, [0, 2, 4, 5]),
        ([0, 30], 10, [0, 1, 2]),
        ([100, 104, 111], 10, [0, 2, 3]),
        ([0, 1, 2, 3], 1, [0, 1, 2, 3, 4]),
    ],
)
def test_slices_cut_at_the_first_batch_past_each_step(position, step, cuts):
    from compaction.steps.emit import slices

    assert slices(np.array(position, np.int64), step) == cuts


@pytest.mark.parametrize("legacy", [None, "v0", "v1"])
def test_a_segment_emitted_in_slices_is_written_as_one(tmp_path, monkeypatch, legacy):
    """Whatever the slice size (one batch per slice up to the whole segment), the same bytes and
    rows: rebuilt, converted and verbatim batches of several slices meet in the runs of one file."""
    from compaction.spark import stages
    from compaction.steps import emit

    log_dir = tmp_path / "logs"
    generate(
        log_dir,
        "--topics t:1 --records 6000 --keys 700 --codec mixed --segment-bytes 60000 --tombstone-ratio 0.1"
        " --seed 5",
        *(["--legacy", legacy] if legacy else ["--transactions", "0.2", "--abort-ratio", "0.3"]),
    )
    specs = _partition_specs(log_dir)
    outputs, rows = [], []
    for step in (1 << 30, 1, 700, 5000):
        monkeypatch.setattr(emit, "SLICE_BYTES", step)
        rows.append(outcomes(stages.compact_partition(specs)))
        outputs.append(_cleaned_files(log_dir))
    assert outputs[0] and all(o == outputs[0] for o in outputs) and all(r == rows[0] for r in rows)
    assert sum(r["records_written"] for r in rows[0]) < sum(r["records_read"] for r in rows[0])


def test_every_cleaned_file_is_durable_when_compact_partition_returns(tmp_path, monkeypatch):
    """The rewrite syncs its groups' files together at its end (runtime/durability.py): each
    `.cleaned` file and the partition dir fsynced before the task returns, none while it writes."""
    from compaction.spark import stages

    log_dir = tmp_path / "logs"
    generate(log_dir, "--topics t:1 --records 3000 --keys 300 --codec mixed --segment-bytes 30000 --seed 3")
    specs = _partition_specs(log_dir)
    events = record_creates_and_fsyncs(monkeypatch)
    stages.compact_partition(specs)
    created = [p for kind, p in events if kind == "create" and p.endswith(".cleaned")]
    synced = [p for kind, p in events if kind == "fsync"]
    part = str(log_dir / "t-0")
    assert len(created) >= 3 * len(specs) and set(created) <= set(synced) and part in synced
    last_create = max(i for i, (kind, p) in enumerate(events) if kind == "create" and p.endswith(".cleaned"))
    first_sync = min(i for i, (kind, p) in enumerate(events) if kind == "fsync" and p.endswith(".cleaned"))
    assert first_sync > last_create  # synced together at the end, not file by file
