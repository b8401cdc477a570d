"""Durable writes postponed to the end of a batch (compaction/runtime/durability.py): every file
and its directory fsynced before the batch ends, none while it runs, and at once outside one."""

from __future__ import annotations

import os

import pytest

from compaction.runtime import durability
from compaction.runtime.segment_io import SegmentWriter
from compaction.runtime.storage import Storage


@pytest.fixture
def synced(monkeypatch):
    """The paths fsynced, in order (resolved from the descriptor)."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd):
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def write_both(d):
    Storage.local().write_durable(str(d / "a.index.cleaned"), b"index")
    w = SegmentWriter(str(d / "a.log.cleaned"), "buffered")
    w.write(b"x" * 5000)
    w.close()


def test_outside_a_batch_each_file_and_its_dir_are_synced_as_written(tmp_path, synced):
    write_both(tmp_path)
    d = str(tmp_path)
    assert synced == [f"{d}/a.index.cleaned", d, f"{d}/a.log.cleaned", d]


def test_in_a_batch_nothing_is_synced_until_its_end_then_every_file_and_each_dir_once(tmp_path, synced):
    (tmp_path / "sub").mkdir()
    with durability.deferred():
        write_both(tmp_path)
        with durability.deferred():  # a nested batch joins the outer one
            Storage.local().write_durable(str(tmp_path / "sub" / "b.timeindex.cleaned"), b"t")
        assert synced == []
        assert (tmp_path / "a.log.cleaned").read_bytes() == b"x" * 5000  # written, only not yet synced
    d = str(tmp_path)
    files = [f"{d}/a.index.cleaned", f"{d}/a.log.cleaned", f"{d}/sub/b.timeindex.cleaned"]
    assert sorted(synced[:3]) == files  # the files first (from several threads), then the dirs
    assert synced[3:] == [d, f"{d}/sub"]


def test_a_failed_batch_syncs_nothing_and_the_next_write_is_synced_at_once(tmp_path, synced):
    with pytest.raises(RuntimeError):
        with durability.deferred():
            write_both(tmp_path)
            raise RuntimeError("the task failed: its .cleaned files are never committed")
    assert synced == []
    Storage.local().write_durable(str(tmp_path / "intent.json"), b"{}")
    assert synced == [f"{tmp_path}/intent.json", str(tmp_path)]
