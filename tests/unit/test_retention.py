"""Tests for compaction.policy.retention, named after the Kafka tests they mirror (Kafka's LogCleanerTest,
MemoryRecordsTest).

Scenario tests feed batch descriptors through CleanedTransactionMetadata + check_batch_retention
+ should_retain_record + filter_batch_output (the `clean_round` helper below plays the role of
Cleaner.cleanInto over one group). Expected survivors are worked out by hand in each test."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import pytest

from compaction.format.batch import CONTROL_ABORT, CONTROL_COMMIT
from compaction.policy.retention import (
    BatchInfo,
    BatchOutput,
    BatchRetention,
    batch_retention,
    check_batch_retention,
    delete_horizon_ms,
    discard_batch_records,
    filter_batch_output,
    needs_delete_horizon,
    retain_legacy_deletes,
    should_retain_record,
)
from compaction.policy.txn_state import (
    CleanedTransactionMetadata,
    LastRecord,
    last_records_of_active_producers,
)

T = 1_000_000
DAY = 86_400_000
CONTROL_LEADER_CHANGE = 2


class Txn(NamedTuple):  # AbortedTxn-like
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(frozen=True)
class TB:
    """A test batch: header + records (offset, key, value)."""

    info: BatchInfo
    records: tuple
    control_type: int | None = None


def data(base, *kvs, pid=-1, epoch=-1, txn=False, magic=2, horizon=None, ts=T):
    recs = tuple((base + i, k, v) for i, (k, v) in enumerate(kvs))
    info = BatchInfo(base, base + len(kvs) - 1, pid, epoch, txn, False, len(kvs), magic, horizon, ts)
    return TB(info, recs)


def marker(offset, pid, epoch, ctype, ts=T):
    info = BatchInfo(offset, offset, pid, epoch, True, True, 1, 2, None, ts)
    return TB(info, ((offset, b"\x00\x00\x00\x01", b"ctl"),), ctype)


class Round(NamedTuple):
    log: list
    outputs: dict  # base offset -> BatchOutput
    cleaned_index: list
    invalid: int


def offset_map_for(log, start, end, aborted):
    """Cleaner.buildOffsetMap with an exact map: aborted and control batches skipped."""
    meta = CleanedTransactionMetadata()
    meta.add_aborted(aborted)
    omap = {}
    for b in log:
        if b.info.is_control:
            meta.on_control_batch_read(b.info, b.control_type)
        elif not meta.on_batch_read(b.info):
            for o, k, _ in b.records:
                if k is not None and start <= o < end:
                    omap[k] = o
    return omap, end - 1


def clean_round(
    log,
    *,
    start,
    upper,
    now,
    aborted=(),
    last_records=None,
    high_watermark=None,
    legacy_retain=True,
    map_end=None,
):
    """One round over [start, upper); the log's high watermark is `upper` unless given."""
    if last_records is None:
        last_records = last_records_of_active_producers(b.info for b in log)
    # map_end lets a test hand cleanSegments a map wider than the round, as Kafka's tests do
    omap, latest = offset_map_for(log, start, upper if map_end is None else map_end, aborted)
    meta = CleanedTransactionMetadata(cleaned_index=[])
    meta.add_aborted(aborted)
    out, outputs, invalid = [], {}, 0
    for b in log:
        if b.info.base_offset >= upper:
            out.append(b)  # uncleanable section
            continue
        d = check_batch_retention(
            b.info,
            meta,
            control_type=b.control_type,
            last_records_of_active_producers=last_records,
            retain_empty_offset=upper if high_watermark is None else high_watermark,
            current_time_ms=now,
        )
        kept = []
        if d.retention is not BatchRetention.DELETE:
            for o, k, v in b.records:
                r = should_retain_record(
                    b.info,
                    o,
                    k,
                    v is not None,
                    discard_batch_records=d.discard_batch_records,
                    offset_map=omap,
                    map_latest_offset=latest,
                    current_time_ms=now,
                    retain_legacy_deletes=legacy_retain,
                )
                invalid += r.invalid
                if r.retain:
                    kept.append((o, k, v))
        need = needs_delete_horizon(
            b.info, any(v is None for _, _, v in kept), d.contains_marker_for_empty_txn
        )
        action = filter_batch_output(b.info, d.retention, len(kept), need)
        outputs[b.info.base_offset] = action
        if action is BatchOutput.COPY_ORIGINAL:
            out.append(b)
        elif action is BatchOutput.REBUILD:
            horizon = delete_horizon_ms(now, DAY) if need else b.info.delete_horizon_ms
            out.append(
                TB(
                    replace(b.info, records_count=len(kept), delete_horizon_ms=horizon),
                    tuple(kept),
                    b.control_type,
                )
            )
        elif action is BatchOutput.EMPTY_HEADER:
            out.append(TB(replace(b.info, records_count=0, delete_horizon_ms=None), (), None))
    return Round(out, outputs, meta.cleaned_index, invalid)


def offsets(log):
    return [o for b in log for o, _, _ in b.records]


def batch_bases(log):
    return [b.info.base_offset for b in log]


# ------------------------------------------------------------------------------------------
# CleanedTransactionMetadata (docs/kafka-rules.md#transactions)
# ------------------------------------------------------------------------------------------


def test_cleaned_transaction_metadata_aborted_then_marker():
    meta = CleanedTransactionMetadata(cleaned_index=[])
    txn = Txn(7, 10, 12, 13)
    meta.add_aborted([txn])
    assert meta.on_batch_read(BatchInfo(0, 9, 7, 0, True)) is False  # before first offset: committed
    assert meta.on_batch_read(BatchInfo(10, 11, 7, 0, True)) is True  # aborted data
    assert meta.on_control_batch_read(BatchInfo(12, 12, 7, 0, True, True), CONTROL_ABORT) is False
    assert meta.cleaned_index == [txn]


def test_cleaned_transaction_metadata_abort_without_observed_data_is_discardable():
    meta = CleanedTransactionMetadata(cleaned_index=[])
    meta.add_aborted([Txn(7, 10, 12, 13)])
    assert meta.on_control_batch_read(BatchInfo(12, 12, 7, 0, True, True), CONTROL_ABORT) is True
    assert meta.cleaned_index == []


def test_cleaned_transaction_metadata_commit_and_other_controls():
    meta = CleanedTransactionMetadata()
    commit = BatchInfo(5, 5, 3, 0, True, True)
    assert meta.on_control_batch_read(commit, CONTROL_COMMIT) is True  # no data traversed
    assert meta.on_batch_read(BatchInfo(6, 6, 3, 0, True)) is False
    assert meta.on_control_batch_read(replace(commit, base_offset=7, last_offset=7), CONTROL_COMMIT) is False
    assert meta.on_control_batch_read(BatchInfo(8, 8, -1, -1, False, True), CONTROL_LEADER_CHANGE) is False
    assert meta.on_control_batch_read(BatchInfo(9, 9, 3, 0, True, True), None) is True  # empty control batch
    assert meta.on_batch_read(BatchInfo(10, 10, 3, 0, False)) is False  # non-transactional


def test_cleaned_transaction_metadata_duplicate_entries_are_ignored_while_ongoing():
    meta = CleanedTransactionMetadata(cleaned_index=[])
    first, dup = Txn(7, 10, 12, 13), Txn(7, 10, 12, 13)
    meta.add_aborted([first])
    assert meta.on_batch_read(BatchInfo(10, 10, 7, 0, True)) is True
    meta.add_aborted([dup])  # collected again for the next source segment
    assert meta.on_batch_read(BatchInfo(11, 11, 7, 0, True)) is True
    assert meta.on_control_batch_read(BatchInfo(12, 12, 7, 0, True, True), CONTROL_ABORT) is False
    assert meta.cleaned_index == [first]  # one entry only; the duplicate was popped but not used


def test_cleaned_transaction_metadata_heap_orders_by_first_offset():
    meta = CleanedTransactionMetadata(cleaned_index=[])
    late, early = Txn(2, 20, 22, 23), Txn(1, 5, 21, 23)
    meta.add_aborted([late, early])  # out of order on purpose
    assert meta.on_batch_read(BatchInfo(5, 5, 1, 0, True)) is True
    assert meta.on_batch_read(BatchInfo(6, 6, 2, 0, True)) is False  # pid 2's txn starts at 20
    assert meta.on_batch_read(BatchInfo(20, 20, 2, 0, True)) is True


# ------------------------------------------------------------------------------------------
# Producer view (docs/kafka-rules.md#producer-state)
# ------------------------------------------------------------------------------------------


def test_last_records_of_active_producers():
    log = [
        BatchInfo(0, 2, 1, 0, False),  # idempotent producer 1
        BatchInfo(3, 3, -1, -1),  # no producer id: skipped
        BatchInfo(4, 5, 2, 0, True),  # txn producer 2, epoch 0
        BatchInfo(6, 6, 2, 0, True, True),  # its COMMIT, same epoch: metadata kept
        BatchInfo(7, 8, 1, 0, False),
        BatchInfo(9, 9, 3, 0, True),  # producer 3 data ...
        BatchInfo(10, 10, 3, 1, True, True),  # ... fenced: ABORT with bumped epoch clears metadata
    ]
    assert last_records_of_active_producers(log) == {
        1: LastRecord(8, 0),
        2: LastRecord(5, 0),
        3: LastRecord(None, 1),
    }


def test_last_records_empty_batches():
    log = [
        BatchInfo(0, 4, 1, 0, True, records_count=0),  # retained empty data batch re-creates offset 4
        BatchInfo(5, 5, 2, 3, True, True, records_count=0),  # empty control batch: not replayed
    ]
    assert last_records_of_active_producers(log) == {1: LastRecord(4, 0), 2: LastRecord(None, -1)}


def test_last_records_expiration():
    log = [
        BatchInfo(0, 0, 1, 0, False, max_timestamp=100),
        BatchInfo(1, 1, 2, 0, True, max_timestamp=100),  # open transaction never expires
        BatchInfo(2, 2, 3, 0, False, max_timestamp=150),
    ]
    # now - lastTimestamp >= 50 expires: producer 1 (100) goes, producer 3 (150 -> 49) stays
    assert last_records_of_active_producers(log, now_ms=199, producer_id_expiration_ms=50) == {
        2: LastRecord(1, 0),
        3: LastRecord(2, 0),
    }
    assert len(last_records_of_active_producers(log)) == 3  # no expiration without a clock


def test_producer_state_expires_with_the_job_clock():
    """The job's producer state (steps/ranges.producer_state, from the scan's header columns)
    applies --producer-id-expiration-ms at the round's now, and nothing without it."""
    from compaction.steps.ranges import producer_state

    table = {
        "producer_id": [1, 2],
        "producer_epoch": [0, 0],
        "base_offset": [0, 1],
        "last_offset": [0, 1],
        "attributes": [0, 0],
        "records_count": [1, 1],
        "max_timestamp": [100, 150],
    }
    assert set(producer_state([table]).last_records) == {1, 2}
    assert set(producer_state([table], 199, 50).last_records) == {2}
    assert set(producer_state([table], 199, None).last_records) == {1, 2}


# ------------------------------------------------------------------------------------------
# Batch and record decisions (docs/kafka-rules.md#batch-retention to #writing-retained-batches)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "is_control, can_discard, horizon, now, expected",
    [
        (False, True, None, T, True),  # aborted data: at once
        (False, False, None, T, False),
        (True, True, None, T, False),  # marker without horizon: not yet
        (True, True, T, T, True),  # horizon <= now
        (True, True, T + 1, T, False),
        (True, False, T - 1, T, False),
    ],
)
def test_discard_batch_records(is_control, can_discard, horizon, now, expected):
    batch = BatchInfo(0, 0, 1, 0, True, is_control, delete_horizon_ms=horizon)
    assert discard_batch_records(batch, can_discard, now) is expected


@pytest.mark.parametrize(
    "batch, last, discard, retain_at, expected",
    [
        (BatchInfo(0, 4, 1, 0), {1: LastRecord(4, 0)}, True, 100, BatchRetention.RETAIN_EMPTY),
        (BatchInfo(0, 3, 1, 0), {1: LastRecord(4, 0)}, True, 100, BatchRetention.DELETE),
        (BatchInfo(5, 5, 1, 2, True, True), {1: LastRecord(None, 2)}, True, 100, BatchRetention.RETAIN_EMPTY),
        (BatchInfo(5, 5, 1, 1, True, True), {1: LastRecord(None, 2)}, True, 100, BatchRetention.DELETE),
        (BatchInfo(5, 5, 1, 2), {1: LastRecord(None, 2)}, False, 100, BatchRetention.DELETE_EMPTY),
        (BatchInfo(0, 9, -1, -1), {}, True, 10, BatchRetention.RETAIN_EMPTY),  # ends at the high watermark
        (BatchInfo(0, 9, -1, -1), {}, True, 11, BatchRetention.DELETE),  # KAFKA-20452: not at it
        (BatchInfo(0, 9, -1, -1), {}, True, None, BatchRetention.DELETE),  # 3.9 behaviour
        (BatchInfo(0, 8, -1, -1), {}, False, 10, BatchRetention.DELETE_EMPTY),
        (BatchInfo(0, 4, -1, -1), {-1: LastRecord(4, -1)}, False, 10, BatchRetention.DELETE_EMPTY),
    ],
)
def test_batch_retention(batch, last, discard, retain_at, expected):
    got = batch_retention(
        batch,
        discard_batch_records=discard,
        last_records_of_active_producers=last,
        retain_empty_offset=retain_at,
    )
    assert got is expected


V2 = BatchInfo(0, 9)
V2_HORIZON = BatchInfo(0, 9, delete_horizon_ms=T)
V1 = BatchInfo(0, 9, magic=1)


@pytest.mark.parametrize(
    "batch, offset, key, has_value, discard, latest, legacy, expected",
    [
        (V2, 5, b"k", True, True, 9, True, (False, False)),  # discardBatchRecords
        (replace(V2, is_control=True), 5, b"k", True, False, 0, True, (True, False)),  # control kept
        (V2, 5, None, True, False, 4, True, (True, False)),  # past latestOffset: kept, even unkeyed
        (V2, 5, None, True, False, 5, True, (False, True)),  # unkeyed: dropped + invalid
        (V2, 5, b"k", True, False, 9, True, (True, False)),  # map k -> 5: latest
        (V2, 5, b"old", True, False, 9, True, (False, False)),  # map old -> 7: superseded
        (V2, 5, b"clean", True, False, 9, True, (True, False)),  # absent (-1): kept
        (V2, 5, b"k", False, False, 9, False, (True, False)),  # tombstone, no horizon yet
        (V2_HORIZON, 5, b"k", False, False, 9, True, (False, False)),  # horizon T <= now T
        (V1, 5, b"k", False, False, 9, True, (True, False)),  # legacy: segment horizon keeps
        (V1, 5, b"k", False, False, 9, False, (False, False)),  # legacy: past horizon
    ],
)
def test_should_retain_record(batch, offset, key, has_value, discard, latest, legacy, expected):
    omap = {b"k": 5, b"old": 7}
    got = should_retain_record(
        batch,
        offset,
        key,
        has_value,
        discard_batch_records=discard,
        offset_map=omap,
        map_latest_offset=latest,
        current_time_ms=T,
        retain_legacy_deletes=legacy,
    )
    assert tuple(got) == expected


def test_tombstone_kept_one_ms_before_horizon():
    got = should_retain_record(
        V2_HORIZON,
        5,
        b"k",
        False,
        discard_batch_records=False,
        offset_map={b"k": 5},
        map_latest_offset=9,
        current_time_ms=T - 1,
        retain_legacy_deletes=False,
    )
    assert got.retain


def test_retain_legacy_deletes_and_horizon_values():
    assert retain_legacy_deletes(1_001, 1_000) and not retain_legacy_deletes(1_000, 1_000)
    assert delete_horizon_ms(T, DAY) == T + 86_400_000
    assert needs_delete_horizon(V2, True, False) and needs_delete_horizon(V2, False, True)
    assert not needs_delete_horizon(V2_HORIZON, True, True) and not needs_delete_horizon(V2, False, False)
    assert needs_delete_horizon(V1, True, False)  # 4.0+: no magic condition


# MemoryRecordsTest, filterTo-level outcomes
@pytest.mark.parametrize(
    "batch, retention, kept, need, expected",
    [
        (V2, BatchRetention.RETAIN_EMPTY, 0, False, BatchOutput.EMPTY_HEADER),  # testEmptyBatchRetention
        (V2, BatchRetention.DELETE_EMPTY, 0, False, BatchOutput.DROP),  # testEmptyBatchDeletion
        (replace(V2, records_count=0), BatchRetention.RETAIN_EMPTY, 0, False, BatchOutput.EMPTY_HEADER),
        (replace(V2, records_count=0), BatchRetention.DELETE_EMPTY, 0, False, BatchOutput.DROP),
        (V2, BatchRetention.DELETE, 0, False, BatchOutput.DROP),
        (replace(V2, records_count=3), BatchRetention.DELETE_EMPTY, 3, False, BatchOutput.COPY_ORIGINAL),
        (replace(V2, records_count=3), BatchRetention.DELETE_EMPTY, 3, True, BatchOutput.REBUILD),
        # testFilterToAlreadyCompactedLog
        (
            replace(V2, records_count=3),
            BatchRetention.RETAIN_EMPTY,
            1,
            False,
            BatchOutput.REBUILD,
        ),
        (replace(V1, records_count=3), BatchRetention.DELETE_EMPTY, 3, False, BatchOutput.REBUILD),  # KIP-724
    ],
)
def test_filter_batch_output(batch, retention, kept, need, expected):
    assert filter_batch_output(batch, retention, kept, need) is expected


def test_filter_batch_output_legacy_copy_without_conversion_and_empty_legacy_error():
    assert (
        filter_batch_output(
            replace(V1, records_count=3), BatchRetention.DELETE_EMPTY, 3, False, convert_legacy_to_v2=False
        )
        is BatchOutput.COPY_ORIGINAL
    )
    with pytest.raises(ValueError):
        filter_batch_output(V1, BatchRetention.RETAIN_EMPTY, 0, False)


# ------------------------------------------------------------------------------------------
# Cleaning rounds at the decision level (Kafka's LogCleanerTest)
# ------------------------------------------------------------------------------------------


def test_basic_transaction_aware_cleaning():
    log = [
        data(0, (b"1", b"a"), (b"2", b"b"), pid=1, epoch=0, txn=True),
        data(2, (b"2", b"c"), (b"3", b"d"), pid=2, epoch=0, txn=True),
        marker(4, 1, 0, CONTROL_COMMIT),
        marker(5, 2, 0, CONTROL_ABORT),
    ]
    abort = Txn(2, 2, 5, 6)
    r = clean_round(log, start=0, upper=6, now=T, aborted=[abort])
    # committed 0,1 kept; aborted 2,3 gone (batch kept empty: producer 2's last data);
    # COMMIT kept (its data traversed); ABORT kept with its index entry
    assert offsets(r.log) == [0, 1, 4, 5]
    assert r.outputs == {
        0: BatchOutput.COPY_ORIGINAL,
        2: BatchOutput.EMPTY_HEADER,
        4: BatchOutput.COPY_ORIGINAL,
        5: BatchOutput.COPY_ORIGINAL,
    }
    assert r.cleaned_index == [abort]  # transaction index unchanged


def test_commit_marker_removal():
    log = [
        data(0, (b"1", b"a"), pid=1, epoch=0, txn=True),
        marker(1, 1, 0, CONTROL_COMMIT),
        data(2, (b"1", b"b"), pid=1, epoch=0, txn=True),
        marker(3, 1, 0, CONTROL_COMMIT),
        data(4, (b"2", b"c")),
    ]
    # round 1: key 1 at 0 superseded by 2; both COMMITs kept (their data was traversed)
    r1 = clean_round(log, start=0, upper=5, now=T)
    assert batch_bases(r1.log) == [1, 2, 3, 4]
    assert r1.outputs[0] is BatchOutput.DROP and r1.outputs[1] is BatchOutput.COPY_ORIGINAL
    # round 2 (new dirty record at 5): the first COMMIT has no data left -> gets a horizon
    r2 = clean_round([*r1.log, data(5, (b"2", b"d"))], start=5, upper=6, now=T)
    assert r2.outputs[1] is BatchOutput.REBUILD
    assert r2.log[0].info.delete_horizon_ms == T + DAY
    assert offsets(r2.log) == [1, 2, 3, 5]  # key 2 at 4 superseded by 5
    # one ms before the horizon the marker is copied verbatim; at the horizon it is removed
    early = clean_round([*r2.log, data(6, (b"3", b"e"))], start=6, upper=7, now=T + DAY - 1)
    assert early.outputs[1] is BatchOutput.COPY_ORIGINAL
    r3 = clean_round([*r2.log, data(6, (b"3", b"e"))], start=6, upper=7, now=T + DAY)
    assert r3.outputs[1] is BatchOutput.DROP
    assert offsets(r3.log) == [2, 3, 5, 6]  # second COMMIT stays: producer 1's last data at 2 is traversed


def test_abort_marker_removal():
    log = [
        data(0, (b"1", b"a"), pid=1, epoch=0, txn=True),
        marker(1, 1, 0, CONTROL_ABORT),
        data(2, (b"2", b"b")),
    ]
    abort = Txn(1, 0, 1, 2)
    # producer no longer active: aborted data removed first, ABORT kept with its entry
    r1 = clean_round(log, start=0, upper=3, now=T, aborted=[abort], last_records={})
    assert offsets(r1.log) == [1, 2] and r1.cleaned_index == [abort]
    # next round: no aborted data left -> marker discardable, gets a horizon, entry dropped
    r2 = clean_round(
        [*r1.log, data(3, (b"3", b"c"))], start=3, upper=4, now=T, aborted=r1.cleaned_index, last_records={}
    )
    assert r2.outputs[1] is BatchOutput.REBUILD and r2.cleaned_index == []
    r3 = clean_round(
        [*r2.log, data(4, (b"4", b"d"))],
        start=4,
        upper=5,
        now=T + DAY,
        aborted=r2.cleaned_index,
        last_records={},
    )
    assert offsets(r3.log) == [2, 3, 4]


def test_abort_marker_retention_with_empty_batch():
    log = [
        data(0, (b"1", b"a"), pid=1, epoch=0, txn=True),
        marker(1, 1, 0, CONTROL_ABORT),
        data(2, (b"2", b"b")),
    ]
    abort = Txn(1, 0, 1, 2)
    r1 = clean_round(log, start=0, upper=3, now=T, aborted=[abort])
    # producer 1 is active and offset 0 is its last data: empty batch + marker + entry kept
    assert r1.outputs[0] is BatchOutput.EMPTY_HEADER and r1.outputs[1] is BatchOutput.COPY_ORIGINAL
    assert r1.cleaned_index == [abort]
    late = T + 10 * DAY
    r2 = clean_round([*r1.log, data(3, (b"3", b"c"))], start=3, upper=4, now=late, aborted=r1.cleaned_index)
    assert batch_bases(r2.log) == [0, 1, 2, 3] and r2.cleaned_index == [abort]  # still kept
    # the producer moves on (new committed txn at 4, 5): empty batch released; marker kept
    # this round (the empty aborted batch was traversed), then horizon, then removed
    moved = [*r2.log, data(4, (b"5", b"e"), pid=1, epoch=0, txn=True), marker(5, 1, 0, CONTROL_COMMIT)]
    r3 = clean_round(moved, start=4, upper=6, now=late, aborted=r2.cleaned_index)
    assert r3.outputs[0] is BatchOutput.DROP and r3.cleaned_index == [abort]
    r4 = clean_round([*r3.log, data(6, (b"6", b"f"))], start=6, upper=7, now=late, aborted=r3.cleaned_index)
    assert r4.outputs[1] is BatchOutput.REBUILD and r4.cleaned_index == []
    r5 = clean_round(
        [*r4.log, data(7, (b"7", b"g"))], start=7, upper=8, now=late + DAY, aborted=r4.cleaned_index
    )
    assert 1 not in batch_bases(r5.log)


def test_clean_empty_control_batch():
    # a COMMIT with no data in the round is discardable; as producer's last epoch record it
    # stays as an empty control batch, and re-cleaning that empty batch works
    log = [marker(0, 1, 0, CONTROL_COMMIT), data(1, (b"1", b"a"))]
    r1 = clean_round(log, start=0, upper=2, now=T + DAY, last_records={1: LastRecord(None, 0)})
    assert r1.outputs[0] is BatchOutput.REBUILD  # discardable marker gets a horizon first
    r2 = clean_round(r1.log, start=0, upper=2, now=T + 3 * DAY, last_records={1: LastRecord(None, 0)})
    assert r2.outputs[0] is BatchOutput.EMPTY_HEADER and r2.log[0].info.records_count == 0
    r3 = clean_round(r2.log, start=0, upper=2, now=T + 3 * DAY, last_records={1: LastRecord(None, 0)})
    assert r3.outputs[0] is BatchOutput.EMPTY_HEADER  # empty control batch re-cleaned fine


def test_aborted_transaction_spanning_segments():
    # data in one segment, ABORT in the next; producer active: aborted batch kept empty
    log = [
        data(0, (b"1", b"a"), pid=1, epoch=0, txn=True),
        data(1, (b"2", b"b")),
        marker(2, 1, 0, CONTROL_ABORT),
    ]
    abort = Txn(1, 0, 2, 3)
    # upper bound 2: marker uncleanable; the data is still aborted per the index entry
    r1 = clean_round(log, start=0, upper=2, now=T, aborted=[abort])
    assert r1.outputs[0] is BatchOutput.EMPTY_HEADER and batch_bases(r1.log) == [0, 1, 2]
    r2 = clean_round(r1.log, start=2, upper=3, now=T, aborted=[abort])
    assert r2.outputs[2] is BatchOutput.COPY_ORIGINAL and r2.cleaned_index == [abort]


def test_committed_transaction_spanning_segments():
    log = [data(0, (b"1", b"a"), pid=1, epoch=0, txn=True), marker(1, 1, 0, CONTROL_COMMIT)]
    r1 = clean_round(log, start=0, upper=2, now=T)
    assert offsets(r1.log) == [0, 1]


def test_log_cleaner_retains_producer_last_sequence():
    # idempotent producer 1 writes key 1 twice; its last batch survives even though superseded
    log = [
        data(0, (b"1", b"a"), pid=1, epoch=0),
        data(1, (b"2", b"b")),
        data(2, (b"1", b"c"), pid=1, epoch=0),
        data(3, (b"1", b"d")),
        data(4, (b"9", b"z")),
    ]
    r = clean_round(log, start=0, upper=5, now=T)
    assert r.outputs == {
        0: BatchOutput.DROP,
        1: BatchOutput.COPY_ORIGINAL,
        2: BatchOutput.EMPTY_HEADER,
        3: BatchOutput.COPY_ORIGINAL,
        4: BatchOutput.COPY_ORIGINAL,
    }
    assert r.log[1].info.last_offset == 2  # last offset (and sequence) preserved


def test_log_cleaner_retains_last_sequence_even_if_transaction_aborted():
    log = [
        data(0, (b"1", b"a"), pid=1, epoch=0, txn=True),
        marker(1, 1, 0, CONTROL_ABORT),
        data(2, (b"2", b"b")),
    ]
    r1 = clean_round(log, start=0, upper=3, now=T, aborted=[Txn(1, 0, 1, 2)])
    assert r1.outputs[0] is BatchOutput.EMPTY_HEADER
    moved = [*r1.log, data(3, (b"3", b"c"), pid=1, epoch=0)]  # new data from the producer
    r2 = clean_round(moved, start=3, upper=4, now=T, aborted=r1.cleaned_index)
    assert r2.outputs[0] is BatchOutput.DROP  # released


def test_cleaning_with_keys_conflicting_with_txn_marker_keys():
    # a data record whose key equals a COMMIT's control key, written later, does not remove it
    ctl_key = b"\x00\x00\x00\x01"
    log = [
        data(0, (b"1", b"a"), pid=1, epoch=0, txn=True),
        marker(1, 1, 0, CONTROL_COMMIT),
        data(2, (ctl_key, b"x")),
    ]
    r = clean_round(log, start=0, upper=3, now=T)
    assert offsets(r.log) == [0, 1, 2]


def test_cleaning_with_unkeyed_messages():
    log = [data(0, (None, b"a"), (b"1", b"b")), data(2, (None, b"c"))]
    r = clean_round(log, start=0, upper=3, now=T)
    assert offsets(r.log) == [1] and r.invalid == 2
    assert r.outputs == {0: BatchOutput.REBUILD, 2: BatchOutput.EMPTY_HEADER}  # ends at the high watermark
    # Kafka 4.4+ (KAFKA-20452): with the high watermark past the round, the emptied batch goes
    # (4.0-4.3 kept the batch ending at the round's upper bound)
    r44 = clean_round(log, start=0, upper=3, now=T, high_watermark=4)
    assert r44.outputs[2] is BatchOutput.DROP


def test_clean_segments_retaining_last_empty_batch():
    # cleanSegments over [0, 2) with a map of the whole log (1 -> 2, 2 -> 3): every record of
    # the group is superseded, yet the batch ending at the high watermark 2 stays as an empty batch
    log = [data(0, (b"1", b"a")), data(1, (b"2", b"b")), data(2, (b"1", b"c")), data(3, (b"2", b"d"))]
    r = clean_round(log, start=0, upper=2, now=T, map_end=4, high_watermark=2)
    assert r.outputs == {0: BatchOutput.DROP, 1: BatchOutput.EMPTY_HEADER}
    assert batch_bases(r.log) == [1, 2, 3]  # offset 1 still marks the high watermark


def test_clean_segments_not_retaining_last_empty_batch():
    # the same with the high watermark past the cleaned range (KAFKA-20452, 4.4+): nothing stays
    log = [data(0, (b"1", b"a")), data(1, (b"2", b"b")), data(2, (b"1", b"c")), data(3, (b"2", b"d"))]
    r = clean_round(log, start=0, upper=2, now=T, map_end=4, high_watermark=4)
    assert r.outputs == {0: BatchOutput.DROP, 1: BatchOutput.DROP}
    assert batch_bases(r.log) == [2, 3]


def test_clean_tombstone():
    # a v2 tombstone with an old record timestamp is kept: the horizon is set at cleaning time
    log = [data(0, (b"1", None), ts=0), data(1, (b"2", b"v"))]
    r1 = clean_round(log, start=0, upper=2, now=T)
    assert offsets(r1.log) == [0, 1] and r1.log[0].info.delete_horizon_ms == T + DAY
    r2 = clean_round(r1.log, start=0, upper=2, now=T + DAY)
    assert offsets(r2.log) == [1]


def test_multi_pass_segment_cleaning_with_aborted_transactions():
    # pass 1 removes aborted data; markers remain until delete.retention.ms; index emptied
    log = [
        data(0, (b"1", b"a"), pid=1, epoch=0, txn=True),
        data(1, (b"2", b"b"), pid=2, epoch=0, txn=True),
        marker(2, 1, 0, CONTROL_ABORT),
        marker(3, 2, 0, CONTROL_COMMIT),
        data(4, (b"3", b"c")),
    ]
    abort = Txn(1, 0, 2, 4)
    none_active = {}
    r1 = clean_round(log, start=0, upper=5, now=T, aborted=[abort], last_records=none_active)
    assert offsets(r1.log) == [1, 2, 3, 4] and r1.cleaned_index == [abort]
    r2 = clean_round(r1.log, start=0, upper=5, now=T, aborted=r1.cleaned_index, last_records=none_active)
    assert r2.cleaned_index == [] and r2.outputs[2] is BatchOutput.REBUILD  # ABORT gets a horizon
    r3 = clean_round(
        r2.log, start=0, upper=5, now=T + DAY, aborted=r2.cleaned_index, last_records=none_active
    )
    assert offsets(r3.log) == [1, 3, 4]  # ABORT gone; COMMIT stays while its data (1) exists


def test_first_unstable_offset_is_the_earliest_transaction_without_a_marker():
    """docs/kafka-rules.md#last-stable-offset: LSO = first offset of the earliest open transaction
    (hand-worked table)."""
    from compaction.policy.txn_state import first_unstable_offset

    def data(base, pid):
        return BatchInfo(base, base + 1, producer_id=pid, producer_epoch=0, is_transactional=True)

    def marker(base, pid, n=1):
        return BatchInfo(
            base,
            base,
            producer_id=pid,
            producer_epoch=0,
            is_transactional=True,
            is_control=True,
            records_count=n,
        )

    assert first_unstable_offset([]) is None
    assert first_unstable_offset([data(0, 1), marker(2, 1)]) is None  # committed or aborted: closed
    assert first_unstable_offset([data(0, 1), data(2, 2), marker(4, 1)]) == 2  # pid 2 still open
    assert first_unstable_offset([data(0, 1), data(2, 1)]) == 0  # first offset of the open one
    # An empty (cleaned) control batch closes nothing: its transaction ended long ago.
    assert first_unstable_offset([data(0, 1), marker(2, 1, n=0)]) == 0
    assert first_unstable_offset([BatchInfo(0, 5, producer_id=3, producer_epoch=0)]) is None  # idempotent
