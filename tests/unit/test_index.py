"""Segment indexes (docs/kafka-rules.md#txnindex, #offset-index to #index-invariants): formats, lookup, sanity
checks, the entry rule."""

import glob
import os
import struct

import index_oracle
import numpy as np
import pytest
from e2ekit import SHARED_FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.errors import CorruptRecordError, IndexCorruptError, IndexFullError
from compaction.format.index import (
    lookup_offset,
    lookup_timestamp,
    read_offset_index,
    read_time_index,
    sanity_check_offset_index,
    sanity_check_time_index,
    write_offset_index,
    write_time_index,
)
from compaction.format.layout import ABORTED_TXN_SIZE, RECORD_BATCH_OVERHEAD
from compaction.format.txnindex import (
    AbortedTxn,
    check_txn_index_size,
    read_txn_index,
    sanity_check_txn_index,
    write_txn_index,
)
from compaction.kernels.index_build import (
    build_indexes,
    check_index_room,
    index_entries,
    index_entries_py,
    index_full_at,
    index_room,
    rebuild_indexes_from_log,
)

FIXTURES = SHARED_FIXTURES


# --- formats -------------------------------------------------------------------------------------


def test_offset_index_bytes():
    data = write_offset_index([(1005, 0), (1010, 4200)], base_offset=1000)
    assert data == bytes.fromhex("00000005 00000000 0000000a 00001068".replace(" ", ""))
    assert read_offset_index(data, 1000).tolist() == [[1005, 0], [1010, 4200]]


def test_time_index_bytes():
    data = write_time_index([(1700000000000, 1000), (1700000000001, 1003)], base_offset=1000)
    assert data == struct.pack(">qi", 1700000000000, 0) + struct.pack(">qi", 1700000000001, 3)
    assert len(data) == 24
    assert read_time_index(data, 1000).tolist() == [[1700000000000, 1000], [1700000000001, 1003]]


def test_txn_index_bytes():
    txns = [AbortedTxn(7, 100, 120, 121), AbortedTxn(2**62, 130, 131, 125)]
    data = write_txn_index(txns)
    assert len(data) == 68
    assert data[:2] == b"\x00\x00"  # version 0
    assert data[:34] == struct.pack(">hqqqq", 0, 7, 100, 120, 121)
    assert read_txn_index(data) == txns
    assert read_txn_index(b"") == []


def test_reads_ignore_a_partial_tail_like_the_broker():
    # entries = floor(length / entrySize) (AbstractIndex); the sanity checks report the tail.
    data = write_offset_index([(5, 0)], 0) + b"\x00\x00\x00"
    assert read_offset_index(data, 0).tolist() == [[5, 0]]
    with pytest.raises(IndexCorruptError, match="not a multiple of 8"):
        sanity_check_offset_index(data, 0, "x.index")


@pytest.mark.parametrize(
    "entries",
    [
        [(5, 0), (5, 10)],  # equal offsets
        [(6, 0), (5, 10)],  # decreasing
        [(-1, 0)],  # below base
        [(2**31, 0)],  # relative offset overflow
        [(1, -1)],  # negative position
    ],
)
def test_write_offset_index_rejects(entries):
    with pytest.raises(IndexCorruptError):
        write_offset_index(entries, 0)


@pytest.mark.parametrize(
    "entries",
    [
        [(10, 0), (10, 1)],  # timestamps must strictly increase
        [(10, 5), (11, 4)],  # offsets must not decrease
        [(10, -1)],
    ],
)
def test_write_time_index_rejects(entries):
    with pytest.raises(IndexCorruptError):
        write_time_index(entries, 0)


def test_write_txn_index_rejects_non_increasing_last_offset():
    with pytest.raises(IndexCorruptError):
        write_txn_index([AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 1, 5, 6)])


# --- lookup (OffsetIndex.lookup / TimeIndex.lookup) ----------------------------------------------

OFFSETS = read_offset_index(write_offset_index([(110, 0), (120, 4100), (130, 8300)], 100), 100)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (0, (100, 0)),  # below every entry -> (baseOffset, 0)
        (100, (100, 0)),
        (109, (100, 0)),
        (110, (110, 0)),
        (119, (110, 0)),
        (120, (120, 4100)),
        (129, (120, 4100)),
        (130, (130, 8300)),
        (2**62, (130, 8300)),
    ],
)
def test_lookup_offset_floor(target, expected):
    assert lookup_offset(OFFSETS, target, 100) == expected


def test_lookup_empty_index():
    empty = read_offset_index(b"", 42)
    assert lookup_offset(empty, 1000, 42) == (42, 0)
    assert lookup_timestamp(read_time_index(b"", 42), 1000, 42) == (-1, 42)


def test_lookup_timestamp_floor():
    times = read_time_index(write_time_index([(1000, 5), (2000, 9)], 0), 0)
    assert lookup_timestamp(times, 999, 0) == (-1, 0)
    assert lookup_timestamp(times, 1000, 0) == (1000, 5)
    assert lookup_timestamp(times, 1999, 0) == (1000, 5)
    assert lookup_timestamp(times, 5000, 0) == (2000, 9)


@given(st.lists(st.integers(0, 10_000), unique=True, max_size=50), st.integers(-10, 10_100))
def test_lookup_offset_matches_a_sorted_model(offsets, target):
    # OffsetIndexTest.randomLookupTest: compare with a plain sorted-list model.
    offsets = sorted(offsets)
    entries = np.array([[o, i * 10] for i, o in enumerate(offsets)], dtype=np.int64).reshape(-1, 2)
    below = [(o, i * 10) for i, o in enumerate(offsets) if o <= target]
    assert lookup_offset(entries, target, -5 if not offsets else min(offsets) - 1) == (
        below[-1] if below else (-5 if not offsets else min(offsets) - 1, 0)
    )


# --- sanity checks (docs/kafka-rules.md#broker-load-checks; strict: #index-invariants) ------------


def test_sanity_checks_accept_good_and_empty_files():
    sanity_check_offset_index(b"", 0, strict=True)
    sanity_check_time_index(b"", 0, strict=True)
    sanity_check_txn_index(b"", 0, strict=True)
    sanity_check_offset_index(write_offset_index([(3, 0), (9, 100)], 0), 0, strict=True)
    sanity_check_time_index(write_time_index([(3, 0), (9, 0)], 0), 0, strict=True)


def test_offset_index_sanity_last_offset_below_base():
    # A negative relative offset can only come from a damaged file.
    data = struct.pack(">ii", -1, 0)
    with pytest.raises(IndexCorruptError, match="below the base offset") as err:
        sanity_check_offset_index(data, 100, "s.index")
    assert err.value.path == "s.index" and err.value.position == 0


def test_offset_index_sanity_strict_catches_what_the_broker_does_not():
    data = struct.pack(">ii", 5, 0) + struct.pack(">ii", 3, 10)
    sanity_check_offset_index(data, 0)  # the broker only looks at the last entry
    with pytest.raises(IndexCorruptError, match="offset 3 does not follow 5") as err:
        sanity_check_offset_index(data, 0, "s.index", strict=True)
    assert err.value.position == 8


def test_preallocated_zero_tail_is_read_as_entries():
    # docs/kafka-rules.md#index-file-size: an untrimmed index is wrong - its zero tail reads as (base, 0)
    # entries.
    data = write_offset_index([(3, 0)], 0) + bytes(16)
    assert read_offset_index(data, 0).tolist() == [[3, 0], [0, 0], [0, 0]]
    with pytest.raises(IndexCorruptError):
        sanity_check_offset_index(data, 0, strict=True)


def test_time_index_sanity():
    with pytest.raises(IndexCorruptError, match="below the first timestamp"):
        sanity_check_time_index(struct.pack(">qi", 10, 0) + struct.pack(">qi", 5, 1), 0)
    with pytest.raises(IndexCorruptError, match="below the base offset"):
        sanity_check_time_index(struct.pack(">qi", 10, -2), 0)
    with pytest.raises(IndexCorruptError, match="multiple of 12"):
        sanity_check_time_index(struct.pack(">qi", 10, 0) + b"\x00", 0)
    with pytest.raises(IndexCorruptError, match="timestamp"):
        entries = [(10, 0), (12, 1), (11, 2), (13, 3)]
        sanity_check_time_index(b"".join(struct.pack(">qi", *e) for e in entries), 0, strict=True)


def test_txn_index_sanity():
    good = write_txn_index([AbortedTxn(1, 100, 105, 106)])
    sanity_check_txn_index(good, 100)
    with pytest.raises(IndexCorruptError, match="below the base offset") as err:
        sanity_check_txn_index(good, 106, "s.txnindex")
    assert err.value.offset == 105 and err.value.position == 0
    with pytest.raises(IndexCorruptError):
        sanity_check_txn_index(good + b"\x00", 100, strict=True)


@pytest.mark.parametrize(
    "size, log_bytes, refused",
    [
        (0, 0, False),
        (34, 60, True),  # a segment smaller than one batch holds no ABORT marker
        (34, 61, False),  # one marker at the most: one entry
        (68, 121, True),
        (68, 122, False),
        (34 * 1000, 61 * 1000 - 1, True),
        (34 * 1000, 61 * 1000, False),
        (35, 122, False),  # a partial entry past whole ones is the broker's to ignore, as the readers do
        (1 << 29, 12_345_678, True),  # half a GiB of zeros beside a 12 MB segment
    ],
)
def test_a_txnindex_holds_at_most_one_entry_per_marker_its_segment_can_hold(size, log_bytes, refused):
    if not refused:
        check_txn_index_size(size, log_bytes, "s.txnindex")
        return
    with pytest.raises(IndexCorruptError, match="a broker never writes it") as err:
        check_txn_index_size(size, log_bytes, "s.txnindex")
    assert err.value.path == "s.txnindex"
    assert err.value.position == (log_bytes // RECORD_BATCH_OVERHEAD) * ABORTED_TXN_SIZE
    assert f"{size} bytes ({size // ABORTED_TXN_SIZE} aborted transactions)" in str(err.value)


# --- the entry rule on hand-made batch lists ----------------------------------------------------


def _batches(sizes, last_offsets, max_timestamps):
    sizes = np.asarray(sizes, np.int64)
    positions = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else sizes
    return positions, sizes, np.asarray(last_offsets, np.int64), np.asarray(max_timestamps, np.int64)


def _both(batches, base, interval):
    """Run the compiled kernel and the reference; assert they agree; return plain lists."""
    off, tim = index_entries(*batches, base, interval)
    ref_off, ref_tim = index_entries_py(*batches, base, interval)
    assert off.tolist() == [list(e) for e in ref_off]
    assert tim.tolist() == [list(e) for e in ref_tim]
    return [tuple(e) for e in off.tolist()], [tuple(e) for e in tim.tolist()]


HAND_CASES = [
    pytest.param(
        # interval 100, five 60-byte batches at 0, 60, 120, 180, 240.
        # bytes-before: 0, 60, 120(>100: entry at batch 2, reset), 60, 120(>100: entry at batch 4).
        # max so far: (1000,4) (1000,4) (1200,14) (1200,14) (1300,24); final (1300,24) already there.
        [60] * 5,
        [4, 9, 14, 19, 24],
        [1000, 900, 1200, 1100, 1300],
        0,
        100,
        [(14, 120), (24, 240)],
        [(1200, 14), (1300, 24)],
        id="worked-example",
    ),
    pytest.param(
        # Strict '>': 50-byte batches reach exactly 100 before batch 2 (no entry), 150 before batch 3.
        [50] * 5,
        [0, 1, 2, 3, 4],
        [-1] * 5,
        0,
        100,
        [(3, 150)],
        [],
        id="strictly-greater-than-interval",
    ),
    pytest.param(
        # 51-byte batches: 102 > 100 before batch 2 -> entry; then 51, 102 -> entry at batch 4.
        [51] * 5,
        [0, 1, 2, 3, 4],
        [-1] * 5,
        0,
        100,
        [(2, 102), (4, 204)],
        [],
        id="one-byte-over",
    ),
    pytest.param(
        # A single batch never gets an offset entry; the time index gets the final entry only.
        [5000],
        [49],
        [7],
        0,
        4096,
        [],
        [(7, 49)],
        id="single-batch-final-time-entry",
    ),
    pytest.param(
        # Max timestamp in an early batch: the entry at batch 2 repeats (500, 0) -> not appended.
        [20, 20, 20],
        [0, 1, 2],
        [500, 100, 400],
        0,
        10,
        [(1, 20), (2, 40)],
        [(500, 0)],
        id="time-entry-only-when-greater",
    ),
    pytest.param(
        # Equal max timestamps keep the first batch reaching it (strict '>' on update).
        [20, 20, 20],
        [0, 1, 2],
        [300, 300, 300],
        0,
        10,
        [(1, 20), (2, 40)],
        [(300, 0)],
        id="first-batch-reaching-the-max",
    ),
    pytest.param(
        # v0 data (-1 everywhere): never a time entry; timestamp 0 is indexed (0 > -1).
        [20, 20, 20],
        [0, 1, 2],
        [-1, -1, 0],
        0,
        10,
        [(1, 20), (2, 40)],
        [(0, 2)],
        id="no-timestamp-then-zero",
    ),
    pytest.param(
        # Cleaned segment: base 1000, first batch ends at 1050 (earlier records removed),
        # batches of many records: the entry uses the batch's LAST offset and its START position.
        [3000, 3000, 3000],
        [1050, 1099, 1200],
        [10, 30, 20],
        1000,
        4096,
        [(1200, 6000)],
        [(30, 1099)],
        id="cleaned-segment-last-offset-start-position",
    ),
    pytest.param(
        # Interval 0: every batch after the first gets an entry.
        [1, 1, 1],
        [0, 1, 2],
        [5, 6, 7],
        0,
        0,
        [(1, 1), (2, 2)],
        [(6, 1), (7, 2)],
        id="interval-zero",
    ),
    pytest.param([], [], [], 0, 4096, [], [], id="empty-segment"),
]


@pytest.mark.parametrize(
    ("sizes", "last_offsets", "max_ts", "base", "interval", "want_off", "want_time"), HAND_CASES
)
def test_entry_rule_hand_cases(sizes, last_offsets, max_ts, base, interval, want_off, want_time):
    batches = _batches(sizes, last_offsets, max_ts)
    off, tim = _both(batches, base, interval)
    assert off == want_off
    assert tim == want_time
    index_bytes, time_bytes = build_indexes(*batches, base, interval)
    assert index_bytes == write_offset_index(want_off, base)
    assert time_bytes == write_time_index(want_time, base)
    assert len(index_bytes) == 8 * len(want_off) and len(time_bytes) == 12 * len(want_time)  # trimmed


def test_entry_rule_rejects_non_increasing_offsets():
    batches = _batches([10, 10, 10], [5, 6, 6], [-1, -1, -1])
    with pytest.raises(IndexCorruptError, match="does not follow") as err:
        index_entries(*batches, 0, 0)
    assert err.value.position == 20 and err.value.offset == 6
    with pytest.raises(IndexCorruptError):
        index_entries_py(*batches, 0, 0)


def test_relative_offset_overflow_is_refused():
    batches = _batches([10, 10], [0, 2**31], [-1, -1])
    with pytest.raises(IndexCorruptError, match="int32"):
        build_indexes(*batches, 0, 0)


# --- compiled kernel == reference, and the index invariants (docs/kafka-rules.md#index-invariants) ----------

batch_lists = st.lists(
    st.tuples(
        st.integers(1, 600),  # batch size
        st.integers(1, 5),  # records in the batch (offset step)
        st.one_of(st.just(-1), st.integers(0, 50), st.integers(-1, 2**62)),  # max timestamp
    ),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(batch_lists, st.integers(0, 2**40), st.integers(0, 2**20), st.sampled_from([0, 1, 100, 500, 4096]))
def test_kernel_matches_reference_and_invariants(raw, base, gap, interval):
    sizes = [s for s, _, _ in raw]
    last_offsets = list(np.cumsum([n for _, n, _ in raw]) + base + (gap % 1000) - 1) if raw else []
    max_ts = [t for _, _, t in raw]
    batches = _batches(sizes, last_offsets, max_ts)
    off, tim = _both(batches, base, interval)
    positions, _sizes_a, last_a, ts_a = batches

    # Offset index: strictly increasing; every position is a batch start; every batch starting
    # before P ends before O; O is that batch's last offset.
    starts = {int(p): i for i, p in enumerate(positions)}
    for o, p in off:
        i = starts[p]
        assert last_a[i] == o
        assert all(last_a[:i] < o)
    assert all(a[0] < b[0] for a, b in zip(off, off[1:]))
    # Time index: strictly increasing timestamps, last entry = segment max timestamp at the first
    # batch that reaches it; every batch with a larger timestamp lies after the entry's batch.
    assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(tim, tim[1:]))
    if len(ts_a) and ts_a.max() > -1:
        first = int(np.argmax(ts_a))
        assert tim[-1] == (int(ts_a.max()), int(last_a[first]))
    else:
        assert tim == []
    for t, o in tim:
        assert all(ts_a[last_a <= o] <= t)
    # Round trip through bytes and the strict sanity checks.
    index_bytes, time_bytes = build_indexes(*batches, base, interval)
    sanity_check_offset_index(index_bytes, base, strict=True)
    sanity_check_time_index(time_bytes, base, strict=True)
    assert read_offset_index(index_bytes, base).tolist() == [list(e) for e in off]
    assert read_time_index(time_bytes, base).tolist() == [list(e) for e in tim]


@settings(max_examples=100, deadline=None)
@given(batch_lists, st.integers(0, 30_000))
def test_lookup_then_scan_finds_the_target(raw, target_pick):
    # The reader's contract (LogSegment.translateOffset): from the looked-up position, the first
    # batch with lastOffset >= target is the batch that holds the target.
    sizes = [s for s, _, _ in raw]
    last_offsets = list(np.cumsum([n for _, n, _ in raw]) - 1) if raw else []
    batches = _batches(sizes, last_offsets, [t for _, _, t in raw])
    off, _ = index_entries(*batches, 0, 100)
    positions, _, last_a, _ = batches
    if not len(last_a):
        return
    target = target_pick % (int(last_a[-1]) + 1)
    _, position = lookup_offset(off, target, 0)
    after = np.flatnonzero((positions >= position) & (last_a >= target))
    assert int(after[0]) == int(np.flatnonzero(last_a >= target)[0])


def test_kernel_is_fast_enough():
    # Millions of batches per run: the compiled loop must not be the bottleneck.
    import time

    n = 2_000_000
    sizes = np.full(n, 1000, np.int64)
    batches = (
        np.arange(n, dtype=np.int64) * 1000,
        sizes,
        np.arange(n, dtype=np.int64) * 10 + 9,
        np.arange(n, dtype=np.int64) % 1_000_000,
    )
    index_entries(*[b[:10] for b in batches], 0, 4096)  # compile / load from cache
    start = time.perf_counter()
    off, _tim = index_entries(*batches, 0, 4096)
    assert time.perf_counter() - start < 2.0
    assert len(off) == (n - 1) // 5  # an entry every 5th 1000-byte batch (4000 !> 4096, 5000 > 4096)


# --- rebuild from real broker logs --------------------------------------------------------------
#
# Which fixture segments have broker-written index files: only `kafka-0.9.0.1/` (Kafka 0.9.0.1,
# magic v0). The four public folders (brokers 2.1 - 3.4) committed no .index/.timeindex at all
# (ABSENT_IN_SNAPSHOT.txt): their active segments' indexes were 10 MiB preallocated files.
#
# How those brokers' files can differ from what `build_indexes` (4.1+, per batch) produces:
#  1. Kafka < 4.1 adds at most one entry per *append call* (LogSegment.append on a whole
#     MemoryRecords), not per batch. A leader's append is one produce request for the partition
#     (usually one batch), a follower's append is a whole fetch response (many batches): then the
#     old broker indexes only the first batch of the chunk that crosses the interval, with the
#     chunk's largest offset. 0.9.0.1 additionally used the chunk's *first* offset
#     (`index.append(firstOffset, position)`); identical for single-message chunks.
#  2. The active segment's index files are preallocated (10 MiB of zeros) while the broker runs
#     and trimmed on clean shutdown / roll; an untrimmed file reads trailing zeros as entries.
#  3. 0.9 had no .timeindex (added in 0.10.1); for v0 data a modern broker's time index is empty.
#  4. The active segment has no final time entry until it is rolled or closed
# (docs/kafka-rules.md#closing-a-segment). For the 0.9.0.1 data none of these changes anything: `plain-0` was
# produced one message per request (so per-append == per-batch and first == last offset), the broker shut down
# cleanly (indexes trimmed), and every `compacted-0` segment is smaller than interval + one batch (0-byte
# index). So every broker index here must equal ours byte for byte, and the test asserts that.


def _broker_indexed_segments():
    out = []
    for index_path in sorted(glob.glob(f"{FIXTURES}/*/*/*/*.index")):
        log_path = index_path[: -len(".index")] + ".log"
        if os.path.exists(log_path):
            out.append((index_path, log_path))
    return out


BROKER_SEGMENTS = _broker_indexed_segments()
# Where a difference is expected, with the reason (see above). Empty for the current fixtures.
EXPECTED_DIFFERENCES: dict[str, str] = {}


def test_fixture_inventory():
    # Guards the comment above: if fixtures with newer broker indexes are added, revisit it.
    folders = {p.split("/")[len(FIXTURES.split("/"))] for p, _ in BROKER_SEGMENTS}
    assert folders == {"kafka-0.9.0.1"}
    assert len(BROKER_SEGMENTS) == 17
    assert glob.glob(f"{FIXTURES}/*/*/*/*.timeindex") == []


@pytest.mark.parametrize(
    ("index_path", "log_path"), BROKER_SEGMENTS, ids=[p.split(FIXTURES)[1] for p, _ in BROKER_SEGMENTS]
)
def test_rebuild_matches_broker_index(index_path, log_path):
    base = int(os.path.basename(log_path)[:20])
    with open(log_path, "rb") as f:
        log = f.read()
    with open(index_path, "rb") as f:
        broker_index = f.read()
    ours_index, ours_time = rebuild_indexes_from_log(log, base)
    sanity_check_offset_index(broker_index, base, index_path, strict=True)
    timeindex_path = index_path[: -len(".index")] + ".timeindex"
    if index_path in EXPECTED_DIFFERENCES:  # pragma: no cover - none today
        pytest.skip(EXPECTED_DIFFERENCES[index_path])
    assert ours_index == broker_index, (
        read_offset_index(ours_index, base),
        read_offset_index(broker_index, base),
    )
    if os.path.exists(timeindex_path):  # pragma: no cover - no fixture has one today
        assert ours_time == open(timeindex_path, "rb").read()
    else:
        assert ours_time == b""  # magic v0: no timestamps, and 0.9 wrote no .timeindex


def test_plain_fixture_entries_by_hand():
    # First segment of plain-0: 112 single-message v0 batches; the broker's entries, decoded.
    path = f"{FIXTURES}/kafka-0.9.0.1/kafka-logs/plain-0/00000000000000000000"
    ours, _ = rebuild_indexes_from_log(open(path + ".log", "rb").read(), 0)
    assert read_offset_index(ours, 0).tolist() == [[34, 4132], [61, 8239], [88, 12421]]


V2_LOGS = sorted(p for p in glob.glob(f"{FIXTURES}/*/*/*/*.log") if "kafka-0.9.0.1" not in p)


def test_rebuild_v2_fixture_segments_are_consistent():
    # No broker index to compare with (not committed); check the index invariants
    # (docs/kafka-rules.md#index-invariants) instead, against an independent decode of the batch headers with
    # kafka-python.
    from kafka.record.default_records import DefaultRecordBatch

    assert len(V2_LOGS) > 100  # most are empty segments of idle __consumer_offsets partitions
    checked = 0
    for path in V2_LOGS:
        base = int(os.path.basename(path)[:20])
        log = open(path, "rb").read()
        index_bytes, time_bytes = rebuild_indexes_from_log(log, base)
        sanity_check_offset_index(index_bytes, base, path, strict=True)
        sanity_check_time_index(time_bytes, base, path, strict=True)
        starts, lasts, max_ts, pos = {}, [], [], 0
        while pos + 61 <= len(log):
            length = struct.unpack_from(">i", log, pos + 8)[0]
            if log[pos + 16] != 2 or pos + 12 + length > len(log):
                break
            batch = DefaultRecordBatch(log[pos : pos + 12 + length])
            starts[pos] = len(lasts)
            lasts.append(batch.base_offset + batch.last_offset_delta)
            max_ts.append(batch.max_timestamp)
            pos += 12 + length
        assert pos == len(log), path  # every fixture segment decodes to its end
        for o, p in read_offset_index(index_bytes, base).tolist():
            assert lasts[starts[p]] == o and all(x < o for x in lasts[: starts[p]])
        times = read_time_index(time_bytes, base).tolist()
        if max_ts and max(max_ts) > -1:
            assert times[-1] == [max(max_ts), lasts[max_ts.index(max(max_ts))]], path
            checked += 1
    nonempty = [p for p in V2_LOGS if os.path.getsize(p)]
    assert checked == len(nonempty) == 27


ALL_LOGS = sorted(glob.glob(f"{FIXTURES}/*/*/*/*.log"))


def test_the_oracle_writes_the_broker_index_files():
    # tests/helpers/index_oracle.py, checked once against a real broker's bytes (0.9.0.1, v0).
    assert BROKER_SEGMENTS
    for index_path, log_path in BROKER_SEGMENTS:
        base = int(os.path.basename(log_path)[:20])
        index, timeindex = index_oracle.index_files(open(log_path, "rb").read(), base)
        assert index == open(index_path, "rb").read(), index_path
        assert timeindex == b""  # v0: no timestamps


@pytest.mark.parametrize("interval", [0, 100, 4096])
def test_rebuild_equals_the_independent_oracle_on_every_fixture_segment(interval):
    assert len(ALL_LOGS) > 100
    entries = 0
    for path in ALL_LOGS:
        base = int(os.path.basename(path)[:20])
        log = open(path, "rb").read()
        want = index_oracle.index_files(log, base, interval)
        assert rebuild_indexes_from_log(log, base, interval) == want, path
        entries += len(want[0]) // 8 + len(want[1]) // 12
    assert entries > 50  # the fixtures exercise the rule, not only empty segments


def test_rebuild_refuses_a_partial_tail_unless_allowed():
    path = f"{FIXTURES}/kafka-0.9.0.1/kafka-logs/plain-0/00000000000000000000.log"
    log = open(path, "rb").read()
    full, _ = rebuild_indexes_from_log(log, 0)
    with pytest.raises(CorruptRecordError) as err:
        rebuild_indexes_from_log(log[:-5], 0, path=path)
    assert err.value.path == path and err.value.position == 16015  # start of the last message
    # Like LogSegment.recover: index the valid prefix (the last message is not indexed anyway).
    prefix, _ = rebuild_indexes_from_log(log[:-5], 0, allow_trailing=True)
    assert prefix == full


# --- room in a cleaned segment's indexes (docs/kafka-rules.md#index-room) ----------------------------


@pytest.mark.parametrize(
    ("segment_index_bytes", "room"),
    [(64, (8, 4)), (71, (8, 4)), (72, (9, 5)), (24, (3, 1)), (10_485_760, (1_310_720, 873_812))],
)
def test_index_room(segment_index_bytes, room):
    assert index_room(segment_index_bytes) == room


# Batches of 200 bytes, interval 100: every batch after the first crosses the interval.
# segment.index.bytes 64: 8 offset entries, 4 time entries before the one at close.
@pytest.mark.parametrize(
    ("n", "timestamps", "want"),
    [
        (5, "rising", None),  # 4 crossings, 4 time entries, the 5th at close: the file's 5 slots
        (6, "rising", (".timeindex", 5)),  # the 5th crossing finds the time index full
        (6, "flat", None),  # one time entry: only the offset index fills
        (9, "flat", None),  # 8 crossings: 8 offset entries, the file's 8 slots
        (10, "flat", (".index", 9)),
        (10, "none", (".index", 9)),  # no timestamp (-1): the time index stays empty
    ],
)
def test_index_full_at_boundaries(n, timestamps, want):
    ts = {"rising": list(range(10, 10 + n)), "flat": [7] * n, "none": [-1] * n}[timestamps]
    assert index_full_at([200] * n, ts, 100, 64) == want
    batches = _batches([200] * n, list(range(n)), ts)
    off, tim = build_indexes(*batches, 0, 100)
    if want is None:
        check_index_room(batches, len(off), len(tim), 100, 64, "x.log")
        assert len(off) <= 64 and len(tim) <= 60  # what Kafka's files would hold
    else:
        with pytest.raises(
            IndexFullError, match=rf"x.log: the cleaned segment's \{want[0]} .* at byte {200 * want[1]}"
        ):
            check_index_room(batches, len(off), len(tim), 100, 64, "x.log")


@settings(max_examples=300, deadline=None)
@given(batch_lists, st.sampled_from([0, 100, 500]), st.sampled_from([8, 24, 36, 64, 100, 4096]))
def test_check_index_room_fast_path_agrees_with_the_walk(raw, interval, segment_index_bytes):
    sizes = [s for s, _, _ in raw]
    last_offsets = list(np.cumsum([n for _, n, _ in raw]) - 1) if raw else []
    batches = _batches(sizes, last_offsets, [t for _, _, t in raw])
    off, tim = build_indexes(*batches, 0, interval)
    full = index_full_at(batches[1], batches[3], interval, segment_index_bytes)
    try:
        check_index_room(batches, len(off), len(tim), interval, segment_index_bytes, "x.log")
    except IndexFullError:
        assert full is not None
    else:
        assert full is None
        max_offsets, max_times = index_room(segment_index_bytes)
        assert len(off) // 8 <= max_offsets and len(tim) // 12 <= max_times + 1
