"""The log-structure invariants (compaction/policy/log_structure.py) as pure functions: boundary tables,
a property test over random well-formed logs and their mutations, and first-batch headers from
real batch bytes (v2 and legacy)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.errors import LogStructureError
from compaction.format import batch as fb
from compaction.format.batch_build import build_batch
from compaction.format.legacy import build_legacy_message_set
from compaction.format.naming import segment_file_name
from compaction.policy.log_structure import (
    RULE_BASE,
    RULE_EPOCH_CHECKPOINT,
    RULE_EPOCH_ORDER,
    RULE_INDEX,
    RULE_NEXT,
    RULE_ORDER,
    check_first_batches,
    check_index_entries,
    check_leader_epochs,
    check_segment_offsets,
    check_time_index_entries,
    first_batch,
    segment_epochs,
)

DIR = "/logs/orders-1"


def path(base: int) -> str:
    return f"{DIR}/{segment_file_name(base, '.log')}"


def batches(spans, epochs=None, magic=2, sizes=None):
    """Batch columns for batches of offsets `spans` [(first, last), ...], laid out back to back."""
    n = len(spans)
    sizes = sizes or [100] * n
    return SimpleNamespace(
        position=np.cumsum([0, *sizes[:-1]]).astype(np.int64) if n else np.empty(0, np.int64),
        base_offset=np.array([a for a, _ in spans], dtype=np.int64),
        last_offset=np.array([b for _, b in spans], dtype=np.int64),
        magic=np.full(n, magic, dtype=np.int64),
        partition_leader_epoch=np.array(epochs if epochs is not None else [0] * n, dtype=np.int64),
    )


def raises(rule, fn, *args, **kw) -> LogStructureError:
    with pytest.raises(LogStructureError) as err:
        fn(*args, **kw)
    assert err.value.rule == rule and rule in str(err.value)
    return err.value


# --- one segment: base, order, next base ---------------------------------------------------------


@pytest.mark.parametrize(
    "base, spans, next_base, rule",
    [
        (100, [(100, 104), (105, 110)], 111, None),  # tight everywhere
        (100, [(130, 134), (140, 150)], 200, None),  # gaps are fine (a compacted log has them)
        (100, [], 100, None),  # an empty segment
        (100, [(99, 104)], None, RULE_BASE),  # first offset one below the base
        (100, [(100, 104), (104, 110)], None, RULE_ORDER),  # a shared offset
        (100, [(100, 104), (101, 103)], None, RULE_ORDER),  # backwards
        (100, [(100, 104), (110, 108)], None, RULE_ORDER),  # last below first in a batch
        (100, [(100, 104), (105, 110)], 110, RULE_NEXT),  # last offset = next base
        (100, [(100, 104), (105, 110)], None, None),  # the last segment: no next base
    ],
)
def test_segment_offsets_table(base, spans, next_base, rule):
    args = (path(base), base, batches(spans), next_base, path(next_base) if next_base is not None else None)
    if rule is None:
        check_segment_offsets(*args)
    else:
        raises(rule, check_segment_offsets, *args)


def test_overlap_reason_names_both_files_the_offsets_and_the_byte():
    cols = batches([(4817, 6000), (6001, 8990)])
    err = raises(RULE_NEXT, check_segment_offsets, path(100), 100, cols, 4603, path(4603))
    assert str(err).startswith(
        f"{DIR}/00000000000000000100.log: byte 0: 00000000000000000100.log holds offsets 4817-8990, "
        "overlapping 00000000000000004603.log from 4603 [a segment's offsets end below the next segment's "
        "base"
    )
    assert (err.path, err.position, err.offset, err.other_path) == (path(100), 0, 4817, path(4603))
    again = pickle.loads(pickle.dumps(err))  # errors cross from Spark tasks to the driver
    assert (str(again), again.rule, again.other_path) == (str(err), err.rule, err.other_path)


def test_base_above_first_offset_reason():
    err = raises(RULE_BASE, check_segment_offsets, path(4608), 4608, batches([(4603, 4700)]), None)
    assert "00000000000000004608.log starts at offset 4603, below its base offset 4608" in str(err)


def test_order_reason_names_the_batch_and_its_predecessor():
    err = raises(RULE_ORDER, check_segment_offsets, path(0), 0, batches([(0, 9), (10, 19), (15, 30)]))
    assert "batch of offsets 15-30 in 00000000000000000000.log: follows offsets 10-19" in str(err)
    assert (err.position, err.offset) == (200, 15)


# --- index entries ------------------------------------------------------------------------------


SEG = batches([(100, 104), (105, 110), (111, 111), (112, 120)])  # positions 0, 100, 200, 300


@pytest.mark.parametrize(
    "entries, message",
    [
        ([(104, 0), (111, 200), (120, 300)], None),  # per batch: the batch's last offset
        ([(110, 0), (120, 200)], None),  # per append (older brokers): the append's last offset
        ([(104, 0), (111, 200), (100, 0), (100, 0)], None),  # preallocated tail of an active index
        ([(104, 0), (112, 250)], "points at byte 250 of 00000000000000000100.log, where no batch starts"),
        ([(104, 0), (121, 300)], "lies past 00000000000000000100.log's last offset 120"),
        ([(104, 0), (110, 200)], "points at byte 200 of 00000000000000000100.log, a batch of offsets 111"),
        ([(104, 400)], "where no batch starts"),  # past the last batch
    ],
)
def test_index_entries_table(entries, message):
    args = (f"{DIR}/00000000000000000100.index", path(100), 100, np.array(entries, dtype=np.int64), SEG)
    if message is None:
        check_index_entries(*args)
    else:
        err = raises(RULE_INDEX, check_index_entries, *args)
        assert message in str(err) and err.other_path == path(100)
        assert err.position == 8 * next(i for i, e in enumerate(entries) if e[0] == err.offset)


def test_index_entries_of_legacy_entries_use_the_previous_entry_as_floor():
    # A bare header scan gives a compressed v0/v1 wrapper's own (last inner) offset for both ends;
    # Kafka 0.9 indexed the message set's first offset.
    legacy = batches([(104, 104), (110, 110)], magic=0)
    check_index_entries("x.index", path(100), 100, np.array([[100, 0], [105, 100]], dtype=np.int64), legacy)
    raises(
        RULE_INDEX,
        check_index_entries,
        "x.index",
        path(100),
        100,
        np.array([[104, 100]], dtype=np.int64),
        legacy,
    )


def test_index_entries_in_an_empty_segment():
    raises(
        RULE_INDEX,
        check_index_entries,
        "x.index",
        path(100),
        100,
        np.array([[104, 10]], dtype=np.int64),
        batches([]),
    )
    check_index_entries("x.index", path(100), 100, np.array([[100, 0]], dtype=np.int64), batches([]))


@pytest.mark.parametrize(
    "entries, ok",
    [
        ([(5, 104), (9, 120)], True),
        ([(5, 99), (9, 120)], False),
        ([(9, 121)], False),
        ([(5, 104), (0, 100), (0, 100)], True),
    ],
)
def test_time_index_entries_table(entries, ok):
    args = ("x.timeindex", path(100), 100, np.array(entries, dtype=np.int64), SEG)
    if ok:
        check_time_index_entries(*args)
    else:
        err = raises(RULE_INDEX, check_time_index_entries, *args)
        assert "outside 00000000000000000100.log's offsets 100-120" in str(err)


# --- leader epochs ------------------------------------------------------------------------------


def seg_epochs(base, spans, epochs, magic=2):
    return segment_epochs(path(base), base, batches(spans, epochs, magic))


def test_epoch_runs_of_a_segment():
    s = seg_epochs(0, [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)], [-1, 3, 3, 4, 4])
    assert s.epoch.tolist() == [3, 4] and s.first.tolist() == [2, 6] and s.last.tolist() == [5, 9]
    assert s.position.tolist() == [100, 300]
    assert len(seg_epochs(0, [(0, 1)], [7], magic=1).epoch) == 0  # v0/v1: no epochs
    assert len(seg_epochs(0, [], []).epoch) == 0


def test_epochs_may_stay_or_grow_across_segments_in_any_order_given():
    check_leader_epochs([seg_epochs(10, [(10, 19)], [2]), seg_epochs(0, [(0, 4), (5, 9)], [1, 2])])


def test_epoch_going_back_across_segments_names_both_files():
    segs = [seg_epochs(0, [(0, 9)], [5]), seg_epochs(10, [(10, 12), (13, 19)], [5, 3])]
    err = raises(RULE_EPOCH_ORDER, check_leader_epochs, segs)
    assert "00000000000000000010.log has leader epoch 3 from offset 13, after epoch 5 up to offset 12" in (
        str(err)
    )
    segs = [seg_epochs(0, [(0, 9)], [5]), seg_epochs(10, [(10, 19)], [4])]
    err = raises(RULE_EPOCH_ORDER, check_leader_epochs, segs)
    assert "in 00000000000000000000.log" in str(err) and err.other_path == path(0)


def test_epoch_order_ignores_batches_without_an_epoch():
    check_leader_epochs([seg_epochs(0, [(0, 4), (5, 9), (10, 14)], [4, -1, 5])])


CKPT = [(1, 20), (3, 100), (4, 250)]


@pytest.mark.parametrize(
    "spans, epochs, message",
    [
        ([(20, 99), (100, 249), (250, 300)], [1, 3, 4], None),
        ([(100, 249), (300, 400)], [3, 6], None),  # epoch 6 newer than the file: not flushed yet
        ([(0, 10)], [0], None),  # below the first entry's start: under the log start offset
        ([(10, 30)], [1], None),  # the first entry's start moved up to the log start offset
        (
            [(20, 99), (100, 150)],
            [1, 1],
            "at offsets 20-150, but leader-epoch-checkpoint starts epoch 3 at 100",
        ),
        ([(90, 120)], [3], "epoch 3 at offsets 90-120, but leader-epoch-checkpoint starts epoch 3 at 100"),
        ([(150, 160)], [2], "epoch 2 at offsets 150-160, an epoch leader-epoch-checkpoint does not list"),
        ([(200, 260)], [6], "an epoch leader-epoch-checkpoint does not list"),  # newer, before the last start
    ],
)
def test_epochs_against_the_checkpoint(spans, epochs, message):
    segs = [seg_epochs(0, spans, epochs)]
    if message is None:
        check_leader_epochs(segs, CKPT, f"{DIR}/leader-epoch-checkpoint")
    else:
        err = raises(RULE_EPOCH_CHECKPOINT, check_leader_epochs, segs, CKPT, f"{DIR}/leader-epoch-checkpoint")
        assert message in str(err) and err.other_path == f"{DIR}/leader-epoch-checkpoint"


def test_an_empty_or_missing_checkpoint_says_nothing_and_a_disordered_one_is_refused():
    segs = [seg_epochs(0, [(0, 9)], [7])]
    check_leader_epochs(segs, [])
    check_leader_epochs(segs, None)
    raises(RULE_EPOCH_CHECKPOINT, check_leader_epochs, segs, [(1, 0), (1, 5)])
    raises(RULE_EPOCH_CHECKPOINT, check_leader_epochs, segs, [(1, 5), (2, 5)])


# --- property: well-formed logs pass, each kind of damage is found -------------------------------


@st.composite
def logs(draw):
    """A well-formed partition: batches of random lengths and gaps, cut into segments whose
    base lies anywhere between the previous segment's end and their first offset."""
    n = draw(st.integers(2, 30))
    spans, at = [], draw(st.integers(0, 1000))
    for _ in range(n):
        at += draw(st.integers(0, 5))
        length = draw(st.integers(1, 8))
        spans.append((at, at + length - 1))
        at += length
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=min(5, n - 1))))
    parts = [spans[a:b] for a, b in zip([0, *cuts], [*cuts, n])]
    bases, prev_end = [], -1
    for p in parts:
        bases.append(draw(st.integers(prev_end + 1, p[0][0])))
        prev_end = p[-1][1]
    epochs = np.sort(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))).tolist()
    return parts, bases, epochs


def check_log(parts, bases, epochs):
    k, segs = 0, []
    for i, (p, base) in enumerate(zip(parts, bases)):
        nxt = bases[i + 1] if i + 1 < len(bases) else None
        cols = batches(p, epochs[k : k + len(p)])
        check_segment_offsets(path(base), base, cols, nxt, path(nxt) if nxt is not None else None)
        check_index_entries(
            path(base)[:-4] + ".index",
            path(base),
            base,
            np.stack([cols.last_offset, cols.position], axis=1),
            cols,
        )
        segs.append(segment_epochs(path(base), base, cols))
        k += len(p)
    checkpoint = [(e, first) for e, first in zip(epochs, [a for p in parts for a, _ in p])]
    dedup = [c for i, c in enumerate(checkpoint) if i == 0 or c[0] != checkpoint[i - 1][0]]
    check_leader_epochs(segs, dedup)


@settings(max_examples=200, deadline=None)
@given(logs(), st.data())
def test_well_formed_logs_pass_and_damage_is_found(log, data):
    parts, bases, epochs = log
    check_log(parts, bases, epochs)
    damage = data.draw(st.sampled_from(["base_up", "base_down", "epoch_back", "swap"]))
    i = data.draw(st.integers(0, len(parts) - 1))
    if damage == "base_up":  # renamed above its first offset
        bases[i] = parts[i][0][0] + 1
    elif damage == "base_down" and i > 0:  # renamed at or below the previous segment's last offset
        bases[i] = parts[i - 1][-1][1] - data.draw(st.integers(0, 3))
    elif damage == "epoch_back" and epochs[-2] > 0:  # the last batch from an older leader
        epochs[-1] = epochs[-2] - 1
    elif damage == "swap" and len(parts[i]) > 1:  # two batches out of order
        parts[i][0], parts[i][1] = parts[i][1], parts[i][0]
    else:
        return
    with pytest.raises(LogStructureError):
        check_log(parts, bases, epochs)


# --- first batch headers (the dry run's audit) from real bytes -----------------------------------


def v2(first, last, epoch=0):
    recs = [fb.Record(o, 1_700_000_000_000, b"k", b"v") for o in range(first, last + 1)]
    return build_batch(recs, partition_leader_epoch=epoch)


def test_first_batch_of_v2_and_legacy_bytes():
    fbt = first_batch(v2(40, 44, epoch=7)[:61])
    fields = lambda f: (f.base_offset[0], f.last_offset[0], f.magic[0], f.partition_leader_epoch[0])  # noqa: E731
    assert fields(fbt) == (40, 44, 2, 7)
    legacy = build_legacy_message_set([fb.Record(o, 1, b"k", b"v") for o in (40, 41)], magic=1, codec=1)
    fbt = first_batch(legacy[:61])
    assert fields(fbt) == (41, 41, 1, -1)
    assert len(first_batch(b"").base_offset) == 0 and len(first_batch(v2(0, 0)[:30]).base_offset) == 0


def test_first_batches_find_the_cases_a_dry_run_can_see():
    paths = [path(0), path(100), path(4603)]
    ok = [v2(0, 9, 0), v2(100, 120, 1), v2(4603, 4700, 2)]
    check_first_batches(paths, [0, 100, 4603], [h[:61] for h in ok], [(0, 0), (1, 100), (2, 4603)])
    foreign = [v2(0, 9), v2(4817, 4900), v2(4603, 4700)]  # another partition's segment dropped in at 100
    err = raises(RULE_NEXT, check_first_batches, paths, [0, 100, 4603], [h[:61] for h in foreign])
    assert (
        "00000000000000000100.log holds offsets from 4817 (first batch: 4817-4900), overlapping "
        "00000000000000004603.log from 4603"
    ) in str(err)
    raises(RULE_BASE, check_first_batches, paths[:2], [0, 105], [h[:61] for h in ok[:2]])
    older = [v2(0, 9, 3), v2(100, 120, 1), ok[2]]
    raises(RULE_EPOCH_ORDER, check_first_batches, paths, [0, 100, 4603], older)
    raises(
        RULE_EPOCH_CHECKPOINT,
        check_first_batches,
        paths,
        [0, 100, 4603],
        [h[:61] for h in ok],
        [(0, 0), (1, 100), (2, 5000)],
    )


# --- the driver's checks on a partition dir: index offsets against the next base, first batches --


def _partition(tmp_path):
    from compaction.tools.generator import generate_log_dir

    generate_log_dir(
        str(tmp_path),
        topics=(("t", 1),),
        records=3000,
        keys=100,
        segment_bytes=20_000,
        index_interval_bytes=1024,
        leader_epochs=3,
        seed=3,
    )
    return str(tmp_path / "t-0")


def _listed(tmp_path):
    from compaction.steps.discover import read_log_dir

    ld = read_log_dir(str(tmp_path))
    return ld.storage, ld.partitions[0]


def test_an_index_reaching_the_next_segment_fails_the_dry_run_checks(tmp_path):
    from structkit import bases, swap_indexes

    from compaction.steps.validate import validate_contents

    part = _partition(tmp_path)
    validate_contents(*_listed(tmp_path), index_bounds=True)
    b = bases(part)
    swap_indexes(part, b[1], b[3])  # a later segment's index (more offsets) on an earlier one
    validate_contents(*_listed(tmp_path))  # a round leaves it to the scan (tests/e2e/test_structure_fuzz.py)
    err = raises(RULE_INDEX, validate_contents, *_listed(tmp_path), index_bounds=True)
    at = next(i for i in (1, 3) if err.path == f"{part}/{segment_file_name(b[i], '.index')}")
    assert f"lies at or past the next segment's base offset {b[at + 1]}" in str(err)


def test_audit_structure_reads_first_batches_and_the_epoch_checkpoint(tmp_path):
    from structkit import bases, copy_segment, set_epochs

    from compaction.steps.validate import audit_structure

    part = _partition(tmp_path)
    audit_structure(*_listed(tmp_path))
    b = bases(part)
    set_epochs(part, b[-1], 0)  # the active segment from an older leader's history
    raises(RULE_EPOCH_ORDER, audit_structure, *_listed(tmp_path))
    set_epochs(part, b[-1], 2)
    copy_segment(part, b[2], part, b[2] + 3, move=True)
    err = raises(RULE_BASE, audit_structure, *_listed(tmp_path))
    assert f"{segment_file_name(b[2] + 3, '.log')} starts at offset {b[2]}" in str(err)
