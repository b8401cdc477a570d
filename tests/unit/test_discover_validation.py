"""validate.validate_partition / rebuild_missing_index and plan_round.plan_one on hand-made partitions
(fast; the e2e corruption suite runs the same cases through spark-submit)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from faultkit import small_partition

from compaction.cli.options import parse_args
from compaction.errors import CrcMismatchError, IndexCorruptError, PartitionInvalid
from compaction.kernels.index_build import rebuild_indexes_from_log
from compaction.steps import plan_round
from compaction.steps.discover import read_log_dir
from compaction.steps.validate import rebuild_missing_index, validate_partition

SEG1 = "00000000000000000010"


def _part(tmp_path, name="t-0"):
    log_dir = str(tmp_path / "logs")
    positions = small_partition(os.path.join(log_dir, name))
    ld = read_log_dir(log_dir)
    return log_dir, ld, ld.partitions[0], positions


def _reload(log_dir):
    ld = read_log_dir(log_dir)
    return ld, ld.partitions[0]


def _validate(log_dir):
    ld, part = _reload(log_dir)
    validate_partition(ld.storage, part)


def test_healthy_partition_passes(tmp_path):
    _, ld, part, _ = _part(tmp_path)
    validate_partition(ld.storage, part)


def test_index_entry_past_the_log(tmp_path):
    log_dir, _, _, _ = _part(tmp_path)
    index = os.path.join(log_dir, "t-0", SEG1 + ".index")
    n = os.path.getsize(index) // 8
    with open(index, "r+b") as fh:
        fh.seek((n - 1) * 8 + 4)
        fh.write((99_999).to_bytes(4, "big"))
    with pytest.raises(IndexCorruptError, match="past the end") as err:
        _validate(log_dir)
    assert err.value.path == index and err.value.position == (n - 1) * 8


def test_index_going_backwards(tmp_path):
    log_dir, _, _, _ = _part(tmp_path)
    index = os.path.join(log_dir, "t-0", SEG1 + ".index")
    data = open(index, "rb").read()
    open(index, "wb").write(data[8:16] + data[:8] + data[16:])
    with pytest.raises(IndexCorruptError, match="goes backwards") as err:
        _validate(log_dir)
    assert err.value.position == 8


def test_preallocated_active_index_is_not_corrupt(tmp_path):
    log_dir, _, _, _ = _part(tmp_path)
    for suffix, size in ((".index", 8), (".timeindex", 12)):
        with open(os.path.join(log_dir, "t-0", "00000000000000000020" + suffix), "ab") as fh:
            fh.write(b"\0" * size * 50)
    _validate(log_dir)


def test_directory_where_a_file_is_expected(tmp_path):
    log_dir, _, _, _ = _part(tmp_path)
    path = os.path.join(log_dir, "t-0", SEG1 + ".timeindex")
    os.remove(path)
    os.mkdir(path)
    with pytest.raises(PartitionInvalid, match="is a directory"):
        _validate(log_dir)


@pytest.mark.timeout(60)  # a read of the pipe would wait for a writer for ever
@pytest.mark.parametrize("suffix", [".log", ".timeindex"])
def test_a_pipe_where_a_file_is_expected(tmp_path, suffix):
    log_dir, _, _, _ = _part(tmp_path)
    path = os.path.join(log_dir, "t-0", SEG1 + suffix)
    os.remove(path)
    os.mkfifo(path)
    with pytest.raises(PartitionInvalid, match=f"{path}: is not a regular file"):
        _validate(log_dir)


@pytest.mark.parametrize("base", ["00000000000000000000", SEG1])
def test_a_txnindex_longer_than_its_segment_holds_markers_for_is_refused_unread(tmp_path, monkeypatch, base):
    """Half a GiB of zeros (sparse) beside a segment of a few hundred bytes: entries a broker's
    load check passes at base offset 0 (lastOffset 0 is not below it). Read, they were millions
    of aborted transactions in the driver's memory and in every task's specs; refused from the
    listing's sizes, nothing is read, and the planner fails the partition with the same error."""
    log_dir, _, _, _ = _part(tmp_path)
    path = os.path.join(log_dir, "t-0", base + ".txnindex")
    with open(path, "wb") as fh:
        fh.truncate(1 << 29)
    log_bytes = os.path.getsize(os.path.join(log_dir, "t-0", base + ".log"))
    reads = []
    monkeypatch.setattr("compaction.runtime.storage.Storage.read_small", lambda *a, **k: reads.append(a))
    with pytest.raises(IndexCorruptError, match="a broker never writes it") as err:
        _validate(log_dir)
    assert err.value.path == path and err.value.position == log_bytes // 61 * 34
    assert reads == []
    ld, part = _reload(log_dir)
    planned = plan_round.plan_one(ld, part, parse_args(["--log-dir", log_dir]))
    assert (
        planned.result.status == "failed"
        and f"{path}: byte {log_bytes // 61 * 34}: " in planned.result.reason
    )


def test_rebuild_missing_index_durably_and_only_when_asked(tmp_path):
    log_dir, _, _, _ = _part(tmp_path)
    part_dir = os.path.join(log_dir, "t-0")
    os.remove(os.path.join(part_dir, SEG1 + ".index"))
    ld, part = _reload(log_dir)
    seg = part.segments[1]
    assert "would rebuild" in rebuild_missing_index(ld.storage, part, seg, 100, write=False)
    assert not os.path.exists(os.path.join(part_dir, SEG1 + ".index"))
    action = rebuild_missing_index(ld.storage, part, seg, 100, write=True)
    assert action.startswith("rebuilt missing 00000000000000000010.index")
    log = open(os.path.join(part_dir, SEG1 + ".log"), "rb").read()
    want, _ = rebuild_indexes_from_log(np.frombuffer(log, np.uint8), 10, 100)
    assert open(os.path.join(part_dir, SEG1 + ".index"), "rb").read() == want
    assert not [n for n in os.listdir(part_dir) if n.endswith(".cleaned")]


def test_rebuild_refuses_a_corrupt_log_and_writes_nothing(tmp_path):
    log_dir, _, _, positions = _part(tmp_path)
    part_dir = os.path.join(log_dir, "t-0")
    os.remove(os.path.join(part_dir, SEG1 + ".index"))
    with open(os.path.join(part_dir, SEG1 + ".log"), "r+b") as fh:
        fh.seek(int(positions[1]) + 70)
        fh.write(b"\xee")
    before = sorted(os.listdir(part_dir))
    ld, part = _reload(log_dir)
    with pytest.raises(CrcMismatchError) as err:
        rebuild_missing_index(ld.storage, part, part.segments[1], 100, write=True)
    assert err.value.position == positions[1]
    assert sorted(os.listdir(part_dir)) == before


def test_plan_one_rebuilds_only_in_partitions_it_cleans(tmp_path):
    log_dir, _, _, _ = _part(tmp_path)
    part_dir = os.path.join(log_dir, "t-0")
    os.remove(os.path.join(part_dir, SEG1 + ".index"))
    ld, part = _reload(log_dir)
    dry = plan_round.plan_one(ld, part, parse_args(["--log-dir", log_dir, "--plan-only", "--now-ms", "0"]))
    assert any("would rebuild" in a for a in dry.result.recovery)
    assert not os.path.exists(os.path.join(part_dir, SEG1 + ".index"))
    # A partition with nothing dirty is skipped and left as found.
    checkpoint = os.path.join(log_dir, "cleaner-offset-checkpoint")
    open(checkpoint, "w").write("0\n1\nt 0 20\n")
    skipped = plan_round.plan_one(*_reload(log_dir), parse_args(["--log-dir", log_dir, "--now-ms", "0"]))
    assert not skipped.plan.eligible and skipped.result.recovery == []
    assert not os.path.exists(os.path.join(part_dir, SEG1 + ".index"))
    os.remove(checkpoint)
    cleaned = plan_round.plan_one(*_reload(log_dir), parse_args(["--log-dir", log_dir, "--now-ms", "0"]))
    assert cleaned.plan.eligible and cleaned.result.status != "failed", cleaned.result.reason
    # Rebuilt in memory, its size in the plan; written only when the round commits the partition.
    assert [f.name for r in cleaned.rebuilt for f in r.files.values()] == [SEG1 + ".index"]
    assert cleaned.partition_dir.segments[1].index.size == len(cleaned.rebuilt[0].files[".index"].data)
    assert not os.path.exists(os.path.join(part_dir, SEG1 + ".index"))


def _broken_index(tmp_path) -> tuple:
    log_dir, ld, part, _ = _part(tmp_path)
    index = os.path.join(log_dir, "t-0", SEG1 + ".index")
    with open(index, "r+b") as fh:
        fh.seek(4)
        fh.write((99_999).to_bytes(4, "big"))
    return ld.storage, part.path


def test_the_checks_run_beside_the_scan_and_their_error_comes_first(tmp_path):
    """`checked_alongside`: the index checks on a thread while the work runs (the work here waits
    for them to have started, which would hang were they run before or after it); the work's
    result when they pass; their error, not the work's, when both fail."""
    import threading

    from compaction.errors import CorruptRecordError
    from compaction.steps import validate

    _, ld, part, _ = _part(tmp_path)
    storage, path = ld.storage, part.path
    started = threading.Event()
    real = validate.validate_partition_path

    def checks(*args):
        started.set()
        return real(*args)

    def scan():
        assert started.wait(10), "the checks did not run beside the work"
        return "scanned"

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validate, "validate_partition_path", checks)
        assert validate.checked_alongside(storage, path, scan) == "scanned"
    broken = _broken_index(tmp_path / "broken")
    with pytest.raises(IndexCorruptError):
        validate.checked_alongside(*broken, lambda: "scanned")

    def bad_scan():
        raise CorruptRecordError("bad batch", path="x.log")

    with pytest.raises(IndexCorruptError):
        validate.checked_alongside(*broken, bad_scan)
    with pytest.raises(CorruptRecordError):
        validate.checked_alongside(storage, path, bad_scan)
