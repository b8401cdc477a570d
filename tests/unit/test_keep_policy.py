"""compaction/policy/keep.py against its scalar twins in compaction/policy/retention.py.

Each vectorised rule decides every record or batch of a segment at once; its twin decides one at
a time, as Kafka's cleaner does. The property tests generate segments as a broker writes them
(plain, idempotent and transactional v2 batches with COMMIT/ABORT markers and the aborted
transactions' index entries, v0/v1 messages and compressed wrappers; null keys, tombstones,
delete horizons around the current time, offset gaps) and hold the columns' answer to the twin's,
record by record and batch by batch. A few hand-made tables pin the boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.format import batch as fb
from compaction.format.batch import CONTROL_ABORT, CONTROL_COMMIT
from compaction.format.txnindex import AbortedTxn
from compaction.policy import keep as pk
from compaction.policy.retention import (
    BatchInfo,
    BatchOutput,
    BatchRetention,
    check_batch_retention,
    filter_batch_output,
    is_last_of_producer,
    needs_delete_horizon,
    should_map_record,
    should_retain_deletes,
    should_retain_record,
)
from compaction.policy.txn_state import CleanedTransactionMetadata, LastRecord

NOW = 1_000_000
RETENTION = 500  # delete.retention.ms
KEYS = (None, b"", b"a", b"b", b"c")
# What a segment's next batch is (transactions and their markers twice as likely: they need a pair).
WHAT = ("plain", "idempotent", "txn", "txn", "commit", "commit", "abort", "abort", "message", "wrapper")
MARKER_KEY = fb.control_record(CONTROL_COMMIT)[0]  # a data key may hold the same bytes as a marker's
BOTH = 2**63 - 1  # an offset range holding every offset


@dataclass
class Batch:
    info: BatchInfo
    records: list[tuple[int, bytes | None, bool]]  # (offset, key, has a value)
    codec: int = 0
    control_type: int | None = None


@dataclass
class Segment:
    batches: list[Batch]
    aborted: tuple[AbortedTxn, ...]

    @property
    def records(self):
        return [(i, r) for i, b in enumerate(self.batches) for r in b.records]

    def columns(self):
        """(batch columns, record columns) as `kernels.scan` produces them."""
        infos = [b.info for b in self.batches]

        def col(values, dtype):
            return np.array(list(values), dtype=dtype)

        attrs = [
            b.codec
            | (fb.TRANSACTIONAL_MASK if b.info.is_transactional else 0)
            | (fb.CONTROL_MASK if b.info.is_control else 0)
            | (fb.DELETE_HORIZON_MASK if b.info.delete_horizon_ms is not None else 0)
            for b in self.batches
        ]
        batches = SimpleNamespace(
            position=col(range(len(infos)), np.int64),
            base_offset=col((i.base_offset for i in infos), np.int64),
            last_offset=col((i.last_offset for i in infos), np.int64),
            magic=col((i.magic for i in infos), np.int8),
            attributes=col(attrs, np.int16),
            # A v2 batch's delete horizon is its base timestamp; otherwise any time before now.
            base_timestamp=col(
                (NOW - 7 if i.delete_horizon_ms is None else i.delete_horizon_ms for i in infos), np.int64
            ),
            max_timestamp=col((i.max_timestamp for i in infos), np.int64),
            producer_id=col((i.producer_id for i in infos), np.int64),
            producer_epoch=col((i.producer_epoch for i in infos), np.int16),
        )
        recs = self.records
        records = SimpleNamespace(
            batch_index=col((i for i, _ in recs), np.int32),
            offset=col((o for _, (o, _, _) in recs), np.int64),
            key_len=col((-1 if k is None else len(k) for _, (_, k, _) in recs), np.int32),
            value_len=col((3 if v else -1 for _, (_, _, v) in recs), np.int32),
        )
        return batches, records


@st.composite
def segments(draw) -> Segment:
    """A segment as a broker writes it: each producer's transactions end with a marker, the
    aborted ones with an index entry; a producer in a transaction writes only transactional data."""
    offset = draw(st.integers(0, 3))
    open_txns: dict[int, int] = {}  # producer -> first offset of its open transaction
    batches, aborted = [], []
    for _ in range(draw(st.integers(0, 12))):
        what = draw(st.sampled_from(WHAT))
        pid = draw(st.integers(0, 1))
        if (what in ("commit", "abort") and pid not in open_txns) or (
            what == "idempotent" and pid in open_txns
        ):
            what = "txn"
        horizon = draw(st.one_of(st.none(), st.integers(NOW - 2, NOW + 2)))
        ts = draw(st.integers(NOW - 100, NOW))
        if what in ("commit", "abort"):
            first = open_txns.pop(pid)
            ctype = CONTROL_ABORT if what == "abort" else CONTROL_COMMIT
            if what == "abort":
                aborted.append(AbortedTxn(pid, first, offset, offset))
            info = BatchInfo(offset, offset, pid, 0, True, True, 1, 2, horizon, ts)
            batches.append(Batch(info, [(offset, fb.control_record(ctype)[0], True)], control_type=ctype))
            offset += 1 + draw(st.integers(0, 1))
            continue
        legacy = what in ("message", "wrapper")
        n = 1 if what == "message" else draw(st.integers(1, 4))
        records, o = [], offset
        for _ in range(n):
            records.append((o, draw(st.sampled_from(KEYS)), draw(st.booleans())))
            o += 1 + draw(st.integers(0, 1))  # a gap: a record an earlier clean dropped
        last = records[-1][0] + (0 if legacy else draw(st.integers(0, 1)))
        if what == "txn":
            open_txns.setdefault(pid, offset)
        producer = pid if what in ("idempotent", "txn") else -1
        magic = draw(st.sampled_from([0, 1])) if legacy else 2
        info = BatchInfo(
            offset,
            last,
            producer,
            0 if producer >= 0 else -1,
            what == "txn",
            False,
            n,
            magic,
            None if legacy else horizon,
            ts,
        )
        batches.append(Batch(info, records, codec=1 if what == "wrapper" else 0))
        offset = last + 1 + draw(st.integers(0, 1))
    return Segment(batches, tuple(aborted))


def offsets_of(seg: Segment) -> st.SearchStrategy[int]:
    end = seg.batches[-1].info.last_offset + 2 if seg.batches else 3
    return st.integers(0, end)


@st.composite
def segment_and_map(draw):
    """A segment, an offset map of its keys (some absent), and the round's upper bound."""
    seg = draw(segments())
    omap = draw(st.dictionaries(st.sampled_from(KEYS[1:]), offsets_of(seg)))
    if draw(st.booleans()):  # a data key with a COMMIT marker's bytes, later than some markers
        omap[MARKER_KEY] = draw(offsets_of(seg))
    return seg, omap, draw(offsets_of(seg))


@st.composite
def last_records(draw, seg: Segment) -> dict[int, LastRecord]:
    """Active producers' last records, often naming a batch of the segment."""
    lasts = [b.info.last_offset for b in seg.batches] or [0]
    offset = st.one_of(st.none(), st.sampled_from(lasts), st.integers(0, lasts[-1] + 1))
    return draw(st.dictionaries(st.integers(0, 2), st.builds(LastRecord, offset, st.integers(0, 1))))


def found_for(seg: Segment, omap: dict) -> np.ndarray:
    """map.get(key) per record, -1 for a null or absent key (what an `OffsetMap` answers)."""
    return np.array([-1 if k is None else omap.get(k, -1) for _, (_, k, _) in seg.records], np.int64)


def batch_columns(**columns) -> SimpleNamespace:
    """Per-batch columns (`keep.BatchArrays`, those a rule reads) from lists, as int64 arrays: the
    boundary tables' batches."""
    return SimpleNamespace(**{name: np.array(values, dtype=np.int64) for name, values in columns.items()})


# --- batch_view -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(segments())
def test_batch_view_reads_the_header_the_rules_read(seg):
    b, _ = seg.columns()
    for i, batch in enumerate(seg.batches):
        view, info = pk.batch_view(b, i, batch.info.records_count), batch.info
        for name in (
            "base_offset",
            "last_offset",
            "next_offset",
            "producer_id",
            "producer_epoch",
            "is_transactional",
            "is_control",
            "records_count",
            "magic",
            "delete_horizon_ms",
            "max_timestamp",
        ):
            assert getattr(view, name) == getattr(info, name), (i, name)


# A legacy (v0/v1) message's attribute bits above the codec and timestamp type mean nothing:
# Kafka's legacy batches are never transactional or control and carry no delete horizon, whatever
# those bits hold. (magic, attributes) -> (is_transactional, is_control, delete_horizon_ms)
HEADER_BITS = [
    (0, 0x70, False, False, None),
    (1, 0x70, False, False, None),
    (1, 0x7B, False, False, None),
    (2, 0x00, False, False, None),
    (2, fb.TRANSACTIONAL_MASK, True, False, None),
    (2, fb.TRANSACTIONAL_MASK | fb.CONTROL_MASK, True, True, None),
    (2, fb.DELETE_HORIZON_MASK, False, False, 1234),
]


@pytest.mark.parametrize(("magic", "attrs", "transactional", "control", "horizon"), HEADER_BITS)
def test_batch_view_header_bits_by_magic(magic, attrs, transactional, control, horizon):
    b = batch_columns(
        position=[0],
        magic=[magic],
        attributes=[attrs],
        base_offset=[0],
        last_offset=[0],
        base_timestamp=[1234],
        max_timestamp=[1234],
        producer_id=[-1],
        producer_epoch=[-1],
    )
    view = pk.batch_view(b, 0, 1)
    assert (view.is_transactional, view.is_control, view.delete_horizon_ms) == (
        transactional,
        control,
        horizon,
    )


# --- the offset map's input: map_masks, aborted_batches ---------------------------------------


# Producer 7 aborted [10, 20] (its marker at 20). Only its transactional data batches in that
# range are aborted data: not its non-transactional ones (as Kafka's CleanedTransactionMetadata
# reads them), not control batches, not other producers'. (producer, base offset, attributes, aborted)
ABORTED_RANGE = [
    (7, 9, fb.TRANSACTIONAL_MASK, False),
    (7, 10, fb.TRANSACTIONAL_MASK, True),
    (7, 15, 0, False),
    (7, 15, fb.TRANSACTIONAL_MASK | 1, True),
    (8, 15, fb.TRANSACTIONAL_MASK, False),
    (7, 20, fb.TRANSACTIONAL_MASK | fb.CONTROL_MASK, False),
    (7, 21, fb.TRANSACTIONAL_MASK, False),
]


def test_aborted_batches_boundaries():
    b = batch_columns(
        position=list(range(len(ABORTED_RANGE))),
        producer_id=[p for p, _, _, _ in ABORTED_RANGE],
        base_offset=[o for _, o, _, _ in ABORTED_RANGE],
        attributes=[a for _, _, a, _ in ABORTED_RANGE],
    )
    aborted = (AbortedTxn(7, 10, 20, 10),)
    assert pk.aborted_batches(b, aborted).tolist() == [e for _, _, _, e in ABORTED_RANGE]
    assert pk.aborted_batches(b, ()).tolist() == [False] * len(ABORTED_RANGE)


@settings(max_examples=300, deadline=None)
@given(segments(), st.data())
def test_map_masks_and_aborted_batches_match_build_offset_map(seg, data):
    """Kafka's buildOffsetMap replayed batch by batch (`CleanedTransactionMetadata` tells aborted
    data, `should_map_record` which records go into the map) against the segment's masks."""
    first_dirty = data.draw(offsets_of(seg))
    upper = data.draw(st.integers(first_dirty, first_dirty + 30))
    b, rec = seg.columns()
    txn = CleanedTransactionMetadata()
    txn.add_aborted(seg.aborted)
    aborted, control, usable, dirty = [], [], [], []
    for batch in seg.batches:
        if batch.info.is_control:
            txn.on_control_batch_read(batch.info, batch.control_type)
            is_aborted = False
        else:
            is_aborted = txn.on_batch_read(batch.info)
        aborted.append(is_aborted)
        for offset, key, _ in batch.records:
            control.append(batch.info.is_control)
            usable.append(should_map_record(batch.info, offset, key, is_aborted, 0, BOTH))
            dirty.append(should_map_record(batch.info, offset, key, is_aborted, first_dirty, upper))
    assert pk.aborted_batches(b, seg.aborted).tolist() == aborted
    got = pk.map_masks(b, rec, seg.aborted, first_dirty, upper)
    assert [m.tolist() for m in got] == [control, usable, dirty]


# --- records: keep_records, retain_deletes, may_keep ------------------------------------------


def retained(seg: Segment, omap: dict, map_latest: int, retain_legacy: bool) -> list[tuple[bool, bool]]:
    """(keep, invalid) of `should_retain_record` for every record of the segment."""
    out = []
    for batch in seg.batches:
        for offset, key, has_value in batch.records:
            d = should_retain_record(
                batch.info,
                offset,
                key,
                has_value,
                discard_batch_records=False,
                offset_map=omap,
                map_latest_offset=map_latest,
                current_time_ms=NOW,
                retain_legacy_deletes=retain_legacy,
            )
            out.append((d.retain, d.invalid))
    return out


def vector_keep(seg: Segment, omap: dict, map_latest: int, retain_legacy: bool):
    b, rec = seg.columns()
    v2 = b.magic >= 2
    has_horizon = v2 & ((b.attributes.astype(np.int64) & fb.DELETE_HORIZON_MASK) != 0)
    retain = pk.retain_deletes(v2, has_horizon, b.base_timestamp, NOW, retain_legacy)
    keep, invalid = pk.keep_records(
        rec.offset, rec.key_len, rec.value_len, found_for(seg, omap), map_latest, retain[rec.batch_index]
    )
    return retain, keep, invalid


@settings(max_examples=300, deadline=None)
@given(segment_and_map(), st.booleans())
def test_keep_records_matches_should_retain_record(case, retain_legacy):
    """Record retention of every data batch's records (control batches keep theirs whole and are
    decided batch by batch)."""
    seg, omap, upper = case
    retain, keep, invalid = vector_keep(seg, omap, upper - 1, retain_legacy)
    assert retain.tolist() == [should_retain_deletes(b.info, NOW, retain_legacy) for b in seg.batches]
    want = retained(seg, omap, upper - 1, retain_legacy)
    data = [not seg.batches[i].info.is_control for i, _ in seg.records]
    got = list(zip(keep.tolist(), invalid.tolist(), strict=True))
    assert [g for g, d in zip(got, data) if d] == [w for w, d in zip(want, data) if d]


@settings(max_examples=300, deadline=None)
@given(segment_and_map())
def test_may_keep_is_should_retain_record_with_every_delete_kept(case):
    """`may_keep`: what `should_retain_record` keeps of a record that has a value, whatever the
    record holds; so nothing `keep_records` keeps is left out of a packed scan."""
    seg, omap, upper = case
    _b, rec = seg.columns()
    got = pk.may_keep(rec, found_for(seg, omap), upper)
    want = []
    for batch in seg.batches:
        for offset, key, _ in batch.records:
            d = should_retain_record(
                batch.info,
                offset,
                key,
                True,
                discard_batch_records=False,
                offset_map=omap,
                map_latest_offset=upper - 1,
                current_time_ms=NOW,
                retain_legacy_deletes=False,
            )
            want.append(d.retain)
    data = [not seg.batches[i].info.is_control for i, _ in seg.records]
    assert [g for g, d in zip(got.tolist(), data) if d] == [w for w, d in zip(want, data) if d]
    for retain_legacy in (False, True):
        _, keep, _ = vector_keep(seg, omap, upper - 1, retain_legacy)
        assert not (keep & ~got).any()


# (offset, key_len, value_len, found, map_latest_offset, retain_deletes) -> (keep, invalid)
KEEP_TABLE = [
    pytest.param(11, -1, 3, -1, 10, False, True, False, id="beyond-map-unkeyed-kept"),
    pytest.param(11, 1, 1, 20, 10, False, True, False, id="beyond-map-older-than-found-kept"),
    pytest.param(11, 1, -1, 11, 10, False, True, False, id="beyond-map-tombstone-kept"),
    pytest.param(10, -1, 1, -1, 10, True, False, True, id="at-map-latest-null-key-invalid"),
    pytest.param(3, -1, 1, -1, 10, True, False, True, id="null-key-invalid"),
    pytest.param(5, 1, 1, 5, 10, False, True, False, id="offset-equals-found"),
    pytest.param(4, 1, 1, 5, 10, True, False, False, id="offset-below-found"),
    pytest.param(6, 1, 1, 5, 10, False, True, False, id="offset-above-found"),
    pytest.param(0, 1, 1, -1, 10, False, True, False, id="absent-key"),
    pytest.param(5, 1, -1, 5, 10, True, True, False, id="tombstone-retain-deletes"),
    pytest.param(5, 1, -1, 5, 10, False, False, False, id="tombstone-deletes-expired"),
    pytest.param(4, 1, -1, 5, 10, True, False, False, id="superseded-tombstone"),
    pytest.param(5, 1, 0, 5, 10, False, True, False, id="empty-value-is-not-a-tombstone"),
    pytest.param(5, 0, 1, 5, 10, False, True, False, id="empty-key-is-a-key"),
]


@pytest.mark.parametrize(
    ("offset", "key_len", "value_len", "found", "latest", "retain", "keep", "invalid"), KEEP_TABLE
)
def test_keep_records_boundaries(offset, key_len, value_len, found, latest, retain, keep, invalid):
    cols = (np.array([offset]), np.array([key_len]), np.array([value_len]), np.array([found]))
    k, inv = pk.keep_records(*cols, latest, retain)
    assert (bool(k[0]), bool(inv[0])) == (keep, invalid)


@pytest.mark.parametrize(
    "offset,key_len,found,expected",
    [
        (10, 3, 10, True),  # the latest record of its key
        (9, 3, 10, False),  # an older one
        (9, 3, -1, True),  # a key absent from the map (clean section, or not usable)
        (9, -1, -1, False),  # no key: dropped, below the bound
        (19, 3, 25, False),  # below the bound (upper bound 20), older
        (20, 3, 25, True),  # at the bound: beyond the map, kept whatever its key
        (21, -1, -1, True),  # beyond the bound even without a key
    ],
)
def test_may_keep_boundaries(offset, key_len, found, expected):
    for value_len in (5, -1):  # a value or a tombstone: may_keep does not look
        rec = SimpleNamespace(
            offset=np.array([offset]),
            key_len=np.array([key_len], np.int32),
            value_len=np.array([value_len], np.int32),
        )
        assert bool(pk.may_keep(rec, np.array([found]), 20)[0]) == expected


# --- batches: last_data_batches, decide_fast + decide_batch, decide_erase_only ----------------


@settings(max_examples=300, deadline=None)
@given(segments().flatmap(lambda seg: st.tuples(st.just(seg), last_records(seg))))
def test_last_data_batches_matches_is_last_of_producer(case):
    seg, lasts = case
    b, _ = seg.columns()
    got = pk.last_data_batches(lasts, b.producer_id, b.last_offset).tolist()
    for i, batch in enumerate(seg.batches):
        if not batch.info.is_control:
            assert got[i] == is_last_of_producer(batch.info, lasts), i


# (producer id, last offset) of a batch -> whether it holds its producer's last data offset, for
# producers 5 (last 10), 9 (last 20) and 11 (no data batch): the lowest and highest ids, ids
# between, below and above them, and offsets either side of the last.
LAST_OF_PRODUCER = [
    (5, 10, True),
    (9, 20, True),
    (9, 19, False),
    (9, 21, False),
    (5, 20, False),
    (11, 20, False),
    (7, 10, False),
    (3, 10, False),
    (12, 20, False),
    (-1, 10, False),
]


def test_last_data_batches_boundaries():
    lasts = {9: LastRecord(20, 0), 5: LastRecord(10, 1), 11: LastRecord(None, 0)}
    pid = np.array([p for p, _, _ in LAST_OF_PRODUCER], dtype=np.int64)
    last = np.array([o for _, o, _ in LAST_OF_PRODUCER], dtype=np.int64)
    assert pk.last_data_batches(lasts, pid, last).tolist() == [e for _, _, e in LAST_OF_PRODUCER]
    assert pk.last_data_batches({}, pid, last).tolist() == [False] * len(pid)


def per_batch(seg: Segment, omap: dict, upper: int, lasts: dict, retain_last: bool, retain_legacy: bool):
    """(output, records kept, needs a new horizon) of every batch, one at a time as the cleaner
    decides them: check_batch_retention, should_retain_record per record, filter_batch_output
    ("raise" where Kafka throws)."""
    txn = CleanedTransactionMetadata()
    txn.add_aborted(seg.aborted)
    out = []
    for batch in seg.batches:
        d = check_batch_retention(
            batch.info,
            txn,
            control_type=batch.control_type,
            last_records_of_active_producers=lasts,
            retain_empty_offset=upper if retain_last else None,
            current_time_ms=NOW,
        )
        if d.retention is BatchRetention.DELETE:
            out.append((BatchOutput.DROP, 0, False))
            continue
        rules = dict(
            discard_batch_records=d.discard_batch_records,
            offset_map=omap,
            map_latest_offset=upper - 1,
            current_time_ms=NOW,
            retain_legacy_deletes=retain_legacy,
        )
        kept = [r for r in batch.records if should_retain_record(batch.info, *r, **rules).retain]
        tombstones = any(not has_value for _, _, has_value in kept)
        need = bool(kept) and needs_delete_horizon(batch.info, tombstones, d.contains_marker_for_empty_txn)
        try:
            output = filter_batch_output(batch.info, d.retention, len(kept), need)
        except ValueError:
            output = "raise"
        out.append((output, len(kept), need))
    return out


def kind_of(batch: Batch, output) -> int | str:
    """The writer's kind for `filter_batch_output`'s answer on this batch."""
    if output == "raise":
        return output
    legacy = batch.info.magic < 2
    rebuilt = pk.REBUILD_V2 if not legacy else pk.CONVERT if batch.codec == 0 else pk.REBUILD_WRAPPER
    return {
        BatchOutput.DROP: pk.DROP,
        BatchOutput.COPY_ORIGINAL: pk.COPY,
        BatchOutput.REBUILD: rebuilt,
        BatchOutput.EMPTY_HEADER: pk.EMPTY,
    }[output]


@settings(max_examples=400, deadline=None)
@given(
    segment_and_map().flatmap(lambda c: st.tuples(st.just(c), last_records(c[0]))),
    st.booleans(),
    st.booleans(),
)
def test_segment_decisions_match_the_per_batch_rules(case, retain_last, retain_legacy):
    """The rewrite's decision for a segment (`keep_records` over all records, `decide_fast` over
    all batches, `decide_batch` for those it leaves to the per-batch path, in log order) against
    the cleaner's rules applied one batch and one record at a time. Also shows that the batches
    decided at once never move the transaction state the per-batch path reads."""
    (seg, omap, upper), lasts = case
    check_segment_decisions(seg, omap, upper, lasts, retain_last, retain_legacy)


def check_segment_decisions(
    seg: Segment, omap: dict, upper: int, lasts: dict, retain_last: bool, retain_legacy: bool
):
    b, rec = seg.columns()
    nb = len(seg.batches)
    _, keep, _ = vector_keep(seg, omap, upper - 1, retain_legacy)
    count = np.bincount(rec.batch_index, minlength=nb)
    n_keep = np.bincount(rec.batch_index[keep], minlength=nb)
    n_tomb = np.bincount(rec.batch_index[keep & (rec.value_len < 0)], minlength=nb)
    has_horizon = (b.magic >= 2) & ((b.attributes.astype(np.int64) & fb.DELETE_HORIZON_MASK) != 0)
    kind, need, fast = pk.decide_fast(
        b, count, n_keep, n_tomb, has_horizon, lasts, upper if retain_last else None
    )
    got = [(int(kind[i]), int(n_keep[i]), bool(need[i])) if fast[i] else None for i in range(nb)]
    txn = CleanedTransactionMetadata()
    txn.add_aborted(seg.aborted)
    for i in np.flatnonzero(~fast).tolist():
        view = pk.batch_view(b, i, int(count[i]))
        d = check_batch_retention(
            view,
            txn,
            control_type=seg.batches[i].control_type,
            last_records_of_active_producers=lasts,
            retain_empty_offset=upper if retain_last else None,
            current_time_ms=NOW,
        )
        if d.retention is BatchRetention.DELETE:
            got[i] = (pk.DROP, 0, False)
            continue
        try:
            k, n_kept, horizon = pk.decide_batch(view, d, int(n_keep[i]), int(n_tomb[i]), NOW + RETENTION)
        except ValueError:
            got[i] = "raise"
            continue
        assert horizon in (pk.NO_NEW_HORIZON, NOW + RETENTION)
        got[i] = (k, n_kept, horizon != pk.NO_NEW_HORIZON)
    want = per_batch(seg, omap, upper, lasts, retain_last, retain_legacy)
    for i, (batch, (output, n_kept, need_horizon)) in enumerate(zip(seg.batches, want, strict=True)):
        expected = kind_of(batch, output)
        if expected == "raise":
            assert got[i] == "raise", (i, batch)
        elif expected == pk.DROP:  # a dropped batch's counts are never read
            assert got[i][0] == pk.DROP, (i, batch, got[i])
        else:
            assert got[i] == (expected, n_kept, need_horizon), (i, batch)


# Batches of the per-batch path that keep no record yet stay as an empty batch: the decision must
# say 0 records kept and no new delete horizon (Kafka sets one only on a batch it rebuilds with
# records). (segment, active producers' last records, upper bound of the round).
KEEPS_NOTHING = {
    # aborted data, discarded, kept empty as its producer's last data batch
    "aborted last data batch": (
        Segment(
            [
                Batch(BatchInfo(0, 0, 0, 0, True, False, 1, 2, None, NOW), [(0, b"a", True)]),
                Batch(
                    BatchInfo(1, 1, 0, 0, True, True, 1, 2, None, NOW),
                    [(1, fb.control_record(CONTROL_ABORT)[0], True)],
                    control_type=CONTROL_ABORT,
                ),
            ],
            (AbortedTxn(0, 0, 1, 1),),
        ),
        {0: LastRecord(0, 0)},
        3,
    ),
    # an empty control batch (a marker an earlier clean emptied), discardable, with no delete
    # horizon, kept empty at the round's upper bound
    "empty marker at the upper bound": (
        Segment([Batch(BatchInfo(0, 0, 0, 0, True, True, 0, 2, None, NOW), [], control_type=None)], ()),
        {},
        1,
    ),
}


@pytest.mark.parametrize("case", KEEPS_NOTHING.values(), ids=KEEPS_NOTHING.keys())
def test_a_batch_kept_empty_keeps_no_record_and_gets_no_horizon(case):
    seg, lasts, upper = case
    assert per_batch(seg, {}, upper, lasts, True, True)[0][0] is BatchOutput.EMPTY_HEADER
    check_segment_decisions(seg, {}, upper, lasts, True, True)


@settings(max_examples=300, deadline=None)
@given(segments(), st.data())
def test_decide_erase_only_is_filter_to_without_conversion(seg, data):
    """Erasing without compaction is `filter_batch_output` with the legacy conversion off (a batch
    with nothing erased stays byte for byte, v0/v1 included) and the batch kept empty only where
    `retain_empty` says so; control batches are never touched. A v0/v1 batch is never kept empty
    (Kafka cannot write one; `rewrite._erase_segment` refuses the one case that would need it): it
    is dropped."""
    b, _ = seg.columns()
    count = np.array([b_.info.records_count for b_ in seg.batches], np.int64)
    n_keep = np.array([data.draw(st.integers(0, int(c))) for c in count], np.int64)
    retain = np.array([data.draw(st.booleans()) for _ in seg.batches], bool)
    got = pk.decide_erase_only(b, count, n_keep, retain).tolist() if len(seg.batches) else []
    for i, batch in enumerate(seg.batches):
        if batch.info.is_control:
            assert got[i] == pk.COPY
            continue
        v2 = batch.info.magic >= 2
        retention = BatchRetention.RETAIN_EMPTY if retain[i] and v2 else BatchRetention.DELETE_EMPTY
        output = filter_batch_output(batch.info, retention, int(n_keep[i]), False, convert_legacy_to_v2=False)
        if output is BatchOutput.REBUILD:
            assert got[i] == (pk.REBUILD_V2 if v2 else pk.REBUILD_WRAPPER), i
        else:
            assert got[i] == kind_of(batch, output), i


def test_decide_plain_keeps_the_emptied_last_batch_of_producer_zero():
    # Producer id 0 is a real producer (ids start at 0); only -1 means "no producer". An emptied
    # batch that is its producer's last data batch stays as an empty batch (Kafka keeps the
    # producer's sequence state); any other emptied batch goes.
    b = batch_columns(producer_id=[0, 0, -1], last_offset=[4, 9, 14])
    zeros = np.zeros(3, dtype=np.int64)
    kind, need_horizon = pk.decide_plain(
        b, np.full(3, 5), zeros, zeros, np.zeros(3, dtype=bool), {0: LastRecord(9, 0)}, None
    )
    assert kind.tolist() == [pk.DROP, pk.EMPTY, pk.DROP]
    assert need_horizon.tolist() == [False, False, False]
