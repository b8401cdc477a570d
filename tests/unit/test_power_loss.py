"""A power loss at every point of a commit (tests/helpers/powerloss.py): the swap of two cleaned
groups into a real partition, the cleaner checkpoint, the removal of the replaced segments, as the
job does them (steps/commit.py). For every operation k and every state the disk may hold after a
power loss right after it (file data only once fsynced, a name only once its directory is fsynced,
later names as any prefix), recovery (steps/recover.py) must leave a partition that our validation
and kafka-python read whole, holding exactly the records before the round or exactly those after
it, and a checkpoint that is the old or the new one. Both on a local disk and on an object store
(PUT atomic and durable, rename a copy then a delete)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
from types import SimpleNamespace

import pytest
from e2ekit import decode_partition
from faultkit import assert_loads, batch, small_partition, write_partition
from groupkit import generate, specs_for
from powerloss import Model, ObjectStoreRecording, RecordingStorage, count, lay_out, snapshot

from compaction.runtime.checkpoint_files import read_checkpoint, write_checkpoint
from compaction.runtime.storage import Storage
from compaction.spark.stages import compact_partition
from compaction.steps import report as rpt
from compaction.steps.commit import (
    Replacement,
    advance_checkpoints,
    commit,
    commit_partition,
    remove_replaced,
    remove_replaced_segments,
)
from compaction.steps.plan_round import Planned
from compaction.steps.recover import recover_partition
from compaction.steps.validate import validate_partition_path

CHECKPOINT = "cleaner-offset-checkpoint"
OLD_CHECKPOINT = {("t", 0): 0}
FIRST_DIRTY = 1  # the plan's first dirty offset: not the checkpoint's, so that writing it shows


@pytest.fixture(scope="module")
def cleaned_partition(tmp_path_factory):
    """A log dir whose partition holds two cleaned groups as `.cleaned` files (durable), its
    replacements and the checkpoint the round advances to."""
    root = tmp_path_factory.mktemp("durable")
    part = generate(
        root / "logs", "--records 600 --keys 120 --segment-bytes 12000 --codec mixed --tombstone-ratio 0.1"
    )
    log_dir = str(part.parent)
    write_checkpoint(Storage.local(), os.path.join(log_dir, CHECKPOINT), OLD_CHECKPOINT)
    before = decode_partition(str(part))
    assert_loads(str(part))
    specs = specs_for(part, 2)
    rows = compact_partition(specs)
    assert not any(r.get("error") for r in rows), rows
    replacements = [Replacement(s.new_base, tuple(x.base_offset for x in s.segments)) for s in specs]
    return log_dir, str(part), replacements, {("t", 0): specs[0].upper_bound}, before, specs, rows


def _round(storage: Storage, log_dir: str, part: str, replacements, new_checkpoint) -> None:
    """What the job does once a partition's groups are cleaned (round.py: commit, then the log
    dir's checkpoint, then the replaced segments' removal)."""
    commit_partition(storage, part, replacements, remove_old=False)
    write_checkpoint(storage, os.path.join(log_dir, CHECKPOINT), new_checkpoint)
    remove_replaced(storage, part)


@pytest.mark.parametrize("recording", [RecordingStorage, ObjectStoreRecording], ids=["local", "object-store"])
def test_a_power_loss_anywhere_in_a_commit_loses_no_record(cleaned_partition, tmp_path, recording):
    src_dir, src_part, replacements, new_checkpoint, before, _, _ = cleaned_partition
    log_dir = str(tmp_path / "logs")
    shutil.copytree(src_dir, log_dir)
    part = os.path.join(log_dir, os.path.basename(src_part))
    start = snapshot(log_dir)
    storage = recording()
    with storage.recording() if recording is RecordingStorage else contextlib.nullcontext():
        _round(storage, log_dir, part, replacements, new_checkpoint)
    after = decode_partition(part)
    assert after != before and len(after) < len(before)  # the round did clean
    ops = storage.ops
    if recording is RecordingStorage:
        assert count(ops, "fsync_dir") >= 6 and count(ops, "rename") >= 10
    model = Model(start, ops)
    images = 0
    for k, image in model.all_images():
        images += 1
        where = tmp_path / f"img-{images}"
        lay_out(image, log_dir, str(where))
        _check_recovered(
            str(where),
            os.path.join(str(where), os.path.basename(part)),
            before,
            after,
            new_checkpoint,
            f"power loss after op {k} ({ops[k - 1] if k else 'none'})",
        )
        shutil.rmtree(where)
    # Distinct states: every PUT or DELETE on an object store; locally fewer than the operations
    # (data not yet fsynced leaves the state as it was) but more than the directory fsyncs.
    assert images > (
        count(ops, "put") + count(ops, "delete")
        if recording is ObjectStoreRecording
        else count(ops, "fsync_dir")
    ), images


def _check_recovered(log_dir: str, part: str, before, after, new_checkpoint, when: str) -> None:
    local = Storage.local()
    recover_partition(local, part)
    records = decode_partition(part)
    assert records in (before, after), (
        f"{when}: {len(records)} records, before {len(before)}, after {len(after)}"
    )
    assert_loads(part)  # no transient file, CRCs, indexes as a broker writes them
    validate_partition_path(local, part)
    checkpoint = read_checkpoint(local, os.path.join(log_dir, CHECKPOINT))
    assert checkpoint in (OLD_CHECKPOINT, new_checkpoint), f"{when}: checkpoint {checkpoint}"


# --- the round's own steps around the swap: commit, checkpoint, removal (steps/commit.py) ----------


def _planned(cleaned_partition, tmp_path):
    src_dir, src_part, _, new_checkpoint, _, specs, _ = cleaned_partition
    log_dir = str(tmp_path / "logs")
    shutil.copytree(src_dir, log_dir)
    part = os.path.join(log_dir, os.path.basename(src_part))
    p = Planned(
        SimpleNamespace(storage=Storage.local(), path=log_dir),
        SimpleNamespace(path=part, key=("t", 0), topic="t", partition=0),
        rpt.PartitionResult("t", 0, log_dir, segmentsBefore=4),
        plan=SimpleNamespace(
            first_uncleanable_offset=new_checkpoint[("t", 0)],
            first_dirty_offset=FIRST_DIRTY,
            force_update_checkpoint=False,
        ),
        specs=specs,
    )
    return p, part, log_dir


def _names(part: str) -> list[str]:
    return sorted(os.listdir(part))


def test_a_cleaned_partition_is_swapped_checkpointed_then_its_old_segments_removed(
    cleaned_partition, tmp_path
):
    *_, new_checkpoint, before, _, rows = cleaned_partition
    p, part, log_dir = _planned(cleaned_partition, tmp_path)
    commit(p, {r["group_id"]: r for r in rows})
    assert p.result.status == rpt.CLEANED and p.result.groups == 2 and p.result.reason is None
    names = _names(part)
    assert [n for n in names if n.endswith(".cleaned") or n.endswith(".swap")] == []
    # kept until checkpointed
    assert any(n.endswith(".deleted") for n in names) and "compaction-commit.json" in names
    # A partition of another log dir, and one with no plan, listed first: passed over, not the end.
    elsewhere = dataclasses.replace(p, log_dir=SimpleNamespace(storage=Storage.local(), path="/elsewhere"))
    unplanned = dataclasses.replace(p, plan=None)
    advance_checkpoints([elsewhere, unplanned, p], [p.log_dir])
    assert read_checkpoint(Storage.local(), os.path.join(log_dir, CHECKPOINT)) == new_checkpoint
    remove_replaced_segments(p)
    assert not [n for n in _names(part) if n.endswith(".deleted") or n == "compaction-commit.json"]
    after = decode_partition(part)
    assert len(after) < len(before)
    assert_loads(part)


def test_a_failed_group_leaves_the_partition_and_its_checkpoint_as_they_were(cleaned_partition, tmp_path):
    *_, rows = cleaned_partition
    p, part, log_dir = _planned(cleaned_partition, tmp_path)
    live = [n for n in _names(part) if not n.endswith(".cleaned")]
    failed = {**rows[0], "error": "CorruptRecordError: x.log byte 7"}
    commit(p, {failed["group_id"]: failed, **{r["group_id"]: r for r in rows[1:]}})
    assert p.result.status == rpt.FAILED and "byte 7" in p.result.reason
    assert _names(part) == live  # the cleaned files are gone, nothing else moved
    advance_checkpoints([p], [p.log_dir])
    assert read_checkpoint(Storage.local(), os.path.join(log_dir, CHECKPOINT)) == OLD_CHECKPOINT


def test_a_partition_whose_groups_are_all_unchanged_is_skipped_untouched(cleaned_partition, tmp_path):
    *_, rows = cleaned_partition
    p, part, log_dir = _planned(cleaned_partition, tmp_path)
    p.compacting = False  # erasing only, and no listed key met
    names = _names(part)
    commit(p, {r["group_id"]: {**r, "unchanged": 1} for r in rows})
    assert p.result.status == rpt.SKIPPED and "nothing to compact" in p.result.reason
    assert _names(part) == names
    advance_checkpoints([p], [p.log_dir])  # erasing alone leaves the dirty section as it was
    assert read_checkpoint(Storage.local(), os.path.join(log_dir, CHECKPOINT)) == OLD_CHECKPOINT


@pytest.mark.parametrize(("status", "written"), [(rpt.SKIPPED, True), (rpt.FAILED, False)])
def test_an_invalid_checkpoint_is_reset_unless_the_partition_failed(
    cleaned_partition, tmp_path, status, written
):
    """Kafka resets a checkpoint outside the log to the first dirty offset it plans from."""
    p, _, log_dir = _planned(cleaned_partition, tmp_path)
    p.plan.force_update_checkpoint = True
    p.result.status = status
    advance_checkpoints([p], [p.log_dir])
    want = {("t", 0): FIRST_DIRTY} if written else OLD_CHECKPOINT
    assert read_checkpoint(Storage.local(), os.path.join(log_dir, CHECKPOINT)) == want


class _FailingDeletes(Storage):
    def delete(self, path: str, *, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Permission denied", path)


def test_replaced_segments_that_cannot_be_removed_are_left_to_the_next_run(
    cleaned_partition, tmp_path, caplog
):
    *_, rows = cleaned_partition
    p, part, _ = _planned(cleaned_partition, tmp_path)
    commit(p, {r["group_id"]: r for r in rows})
    p.log_dir = SimpleNamespace(storage=_FailingDeletes(), path=p.log_dir.path)
    with caplog.at_level(logging.WARNING, logger="compaction"):
        remove_replaced_segments(p)  # the round goes on: the data is committed
    assert "could not remove the replaced segments" in caplog.text and "Permission denied" in caplog.text
    assert any(n.endswith(".deleted") for n in _names(part))
    recover_partition(Storage.local(), part)  # the next run's recovery removes them
    assert_loads(part)


def test_recovery_logs_its_actions_and_times_its_listing(cleaned_partition, tmp_path, caplog):
    from compaction.cli.options import parse_args
    from compaction.steps.recover import recover

    p, part, log_dir = _planned(cleaned_partition, tmp_path)
    commit_partition(
        Storage.local(),
        part,
        [Replacement(s.new_base, tuple(x.base_offset for x in s.segments)) for s in p.specs],
        remove_old=False,
    )
    small_partition(os.path.join(log_dir, "t-1"))  # nothing to recover there
    stray = os.path.join(log_dir, "t-2")  # a broker's cleaner left a `.cleaned` file, no intent
    small_partition(stray)
    shutil.copy(os.path.join(stray, f"{0:020d}.log"), os.path.join(stray, f"{0:020d}.log.cleaned"))
    timings: dict[str, float] = {}
    with caplog.at_level(logging.INFO, logger="compaction"):
        done = recover(parse_args(["--log-dir", log_dir]), {}, timings)
    assert sorted(done) == [(log_dir, part), (log_dir, stray)] and done[(log_dir, part)]
    assert done[(log_dir, stray)] == [f"removed {0:020d}.log.cleaned"]
    assert f"recovery {part}: completed interrupted swap" in caplog.text
    assert 0 <= timings["listSeconds"] < 60


def test_a_broker_swap_completed_without_an_intent_replaces_every_segment_it_covers(tmp_path):
    """Kafka's LogLoader rule for `.swap` files a broker's own cleaner left: every old segment whose
    base lies below the swap's next offset goes, up to the one starting at its last offset."""
    part = str(tmp_path / "t-0")
    write_partition(part, [[batch(range(0, 9))], [batch([9])], [batch([10, 11])]], interval=4096)
    write_partition(str(tmp_path / "new"), [[batch(range(0, 10))]], interval=4096)
    for suffix in (".log", ".index", ".timeindex"):
        os.rename(tmp_path / "new" / f"{0:020d}{suffix}", os.path.join(part, f"{0:020d}{suffix}.swap"))
    report = recover_partition(Storage.local(), part)
    assert sorted(os.listdir(part)) == sorted(
        f"{b:020d}{s}" for b in (0, 10) for s in (".log", ".index", ".timeindex")
    )
    assert any("00000000000000000009.log (replaced by swap)" in a for a in report.actions), report.actions
    assert [r.offset for r in decode_partition(part)] == list(range(12))


def test_every_local_log_dir_is_locked_whatever_comes_before_it(tmp_path):
    """An object-store log dir (no lock there) listed first does not end the locking: the local
    one after it is checked for a broker and locked."""
    from compaction.cli.options import parse_args
    from compaction.errors import LockHeldError
    from compaction.steps.recover import lock_log_dirs

    local = tmp_path / "logs"
    small_partition(str(local / "t-0"))
    locks = lock_log_dirs(parse_args(["--log-dir", "mock:///logs", "--log-dir", str(local)]))
    try:
        assert [lock.path for lock in locks] == [str(local / ".compaction.lock")]
        with pytest.raises(LockHeldError, match="another compaction run"):
            lock_log_dirs(parse_args(["--log-dir", str(local)]))
    finally:
        for lock in locks:
            lock.release()
