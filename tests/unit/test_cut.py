"""compaction.policy.cut: where a snapshot's log ends, its open transactions and its clock.
Boundary tables over real v2 batch headers (format.batch.BatchHeader), and the option parsers."""

from __future__ import annotations

import pytest

from compaction.format.batch import BatchHeader
from compaction.format.layout import CONTROL_MASK, TRANSACTIONAL_MASK
from compaction.policy.cut import BY_OFFSET, BY_TIME, cut_log, parse_as_of_offsets, parse_as_of_time, past_cut


def batch(base, last=None, ts=1000, pid=-1, txn=False, control=False, count=None):
    last = base if last is None else last
    attrs = (TRANSACTIONAL_MASK if txn or control else 0) | (CONTROL_MASK if control else 0)
    return BatchHeader(
        base,
        0,
        0,
        2,
        0,
        attrs,
        last - base,
        ts,
        ts,
        pid,
        0 if pid >= 0 else -1,
        0,
        (last - base + 1) if count is None else count,
    )


# offsets 0-1 ts 100, 2-4 ts 200, 5 ts -1 (no timestamp), 6-9 ts 300 (a gap 10..19: compacted), 20 ts 250
LOG = [batch(0, 1, ts=100), batch(2, 4, ts=200), batch(5, ts=-1), batch(6, 9, ts=300), batch(20, ts=250)]


@pytest.mark.parametrize(
    "time, offset, held, end, by",
    [
        (None, None, 5, 21, None),  # no bound: the whole log
        (99, None, 0, 0, BY_TIME),  # before the first batch: nothing held, end = log start
        (100, None, 1, 2, BY_TIME),  # T equal to a max timestamp holds that batch
        (199, None, 1, 2, BY_TIME),
        (200, None, 3, 6, BY_TIME),  # the timestamp-less batch rides along with the held ones
        (299, None, 3, 6, BY_TIME),  # ts 300 ends it; the later ts 250 batch is not held either
        (300, None, 5, 21, None),
        (10**13, None, 5, 21, None),
        (None, 0, 0, 0, BY_OFFSET),
        (None, 2, 1, 2, BY_OFFSET),  # O is exclusive: [0, 2) held
        (None, 3, 1, 2, BY_OFFSET),  # O inside batch 2-4: that batch is not held
        (None, 5, 2, 5, BY_OFFSET),
        (None, 10, 4, 10, BY_OFFSET),
        (None, 15, 4, 10, BY_OFFSET),  # O in a compacted gap: end is the last held batch's next offset
        (None, 20, 4, 10, BY_OFFSET),
        (None, 21, 5, 21, None),
        (None, 10**9, 5, 21, None),
        (200, 3, 1, 2, BY_OFFSET),  # both: the earlier wins
        (100, 10, 1, 2, BY_TIME),
    ],
)
def test_where_the_log_ends(time, offset, held, end, by):
    cut = cut_log(LOG, as_of_time_ms=time, as_of_offset=offset)
    assert (cut.held, cut.end_offset, cut.ended_by) == (held, end, by)


def test_log_start_when_nothing_held():
    assert cut_log([batch(50, ts=500)], as_of_time_ms=1, log_start_offset=42).end_offset == 42
    assert cut_log([], log_start_offset=42).end_offset == 42


def test_stops_reading_at_the_cut():
    read = []

    def gen():
        for b in LOG:
            read.append(b.base_offset)
            yield b

    cut_log(gen(), as_of_offset=5)
    assert read == [0, 2, 5]  # the first batch past the cut is read, nothing after it


# pid 7: txn 0-1, commit at 2. pid 8: txn 3, 5; abort at 7. pid 9: txn 6, no marker. 4: plain.
TXN_LOG = [
    batch(0, 1, pid=7, txn=True, ts=10),
    batch(2, pid=7, control=True, ts=11),
    batch(3, pid=8, txn=True, ts=12),
    batch(4, ts=13),
    batch(5, pid=8, txn=True, ts=14),
    batch(6, pid=9, txn=True, ts=15),
    batch(7, pid=8, control=True, ts=16),
]


@pytest.mark.parametrize(
    "offset, unstable, open_txns",
    [
        (0, None, {}),
        (1, None, {}),  # batch 0-1 not held (O inside it)
        (2, 0, {7: 0}),  # data held, commit marker not
        (3, None, {}),  # committed at the cut
        (4, 3, {8: 3}),
        (6, 3, {8: 3}),  # the producer's first batch is the txn's first offset
        (7, 3, {8: 3, 9: 6}),  # two open: the earliest bounds
        (8, 6, {9: 6}),  # 8 aborted by its marker: 9 stays open at the log end
    ],
)
def test_open_transactions_at_the_cut(offset, unstable, open_txns):
    cut = cut_log(TXN_LOG, as_of_offset=offset)
    assert (cut.first_unstable_offset, cut.open_transactions) == (unstable, open_txns)


def test_an_empty_control_batch_closes_nothing():
    log = [batch(0, pid=7, txn=True), batch(1, pid=7, control=True, count=0)]
    assert cut_log(log).first_unstable_offset == 0


@pytest.mark.parametrize(
    "time, offset, clock",
    [
        (12, None, 12),  # a time cut: T itself
        (10**12, None, 10**12),
        (None, 4, 12),  # an offset cut: the newest timestamp held
        (None, 100, 16),
        (None, 0, None),  # nothing held: unknown
    ],
)
def test_the_rounds_clock(time, offset, clock):
    assert cut_log(TXN_LOG, as_of_time_ms=time, as_of_offset=offset).clock_ms == clock


def test_clock_unknown_without_timestamps():
    assert cut_log([batch(0, ts=-1), batch(1, ts=-1)], as_of_offset=5).clock_ms is None


def test_past_cut_alone():
    assert past_cut(batch(5, 9, ts=300), as_of_offset=9) == BY_OFFSET
    assert past_cut(batch(5, 9, ts=300), as_of_offset=10) is None
    assert past_cut(batch(5, 9, ts=300), as_of_time_ms=299) == BY_TIME
    assert past_cut(batch(5, 9, ts=-1), as_of_time_ms=0) is None


@pytest.mark.parametrize(
    "text, ms",
    [
        ("0", 0),
        ("1764237600000", 1764237600000),
        ("2025-11-27T10:00:00Z", 1764237600000),
        ("2025-11-27T11:00:00+01:00", 1764237600000),
        ("2025-11-27T10:00:00.123Z", 1764237600123),
    ],
)
def test_parse_time(text, ms):
    assert parse_as_of_time(text) == ms


@pytest.mark.parametrize(
    "text, says",
    [
        ("2025-11-27T10:00:00", "no zone"),
        ("yesterday", "neither epoch"),
        ("-5", "neither epoch"),
        ("1969-12-31T23:59:59Z", "before 1970"),
    ],
)
def test_parse_time_refuses(text, says):
    with pytest.raises(ValueError, match=says):
        parse_as_of_time(text)


def test_parse_offsets():
    assert parse_as_of_offsets("orders:0=1500, my.topic-x_1:12=0") == {
        ("orders", 0): 1500,
        ("my.topic-x_1", 12): 0,
    }


@pytest.mark.parametrize(
    "text, says",
    [
        ("orders=1500", "not TOPIC:PARTITION=OFFSET"),
        ("orders:0=-1", "not TOPIC:PARTITION=OFFSET"),
        ("orders:0=1,orders:0=2", "given twice"),
        ("", "not TOPIC"),
    ],
)
def test_parse_offsets_refuses(text, says):
    with pytest.raises(ValueError, match=says):
        parse_as_of_offsets(text)
