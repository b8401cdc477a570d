"""compaction/steps/snapshot.py: a partition copied up to its cut into a staging dir, promoted
under its marker. On generated partitions (transactions, several segments, leader epochs)."""

from __future__ import annotations

import json
import os

import pytest

from compaction.format.checkpoint import parse_leader_epoch_checkpoint
from compaction.format.segment import iter_batches
from compaction.format.txnindex import read_txn_index
from compaction.kernels.index_build import rebuild_indexes_from_log
from compaction.runtime.storage import Storage
from compaction.steps.discover import read_log_dir
from compaction.steps.snapshot import marker_for, promote, read_markers, stage_partition
from compaction.tools.generator import generate_log_dir


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("snapshot")
    generate_log_dir(
        str(root / "src"),
        topics=(("t", 1),),
        records=1200,
        keys=50,
        codec="mixed",
        batch_records=(1, 8),
        segment_bytes=9000,
        transactions=0.5,
        abort_ratio=0.5,
        txn_producers=3,
        leader_epochs=4,
        seed=3,
    )
    (part,) = read_log_dir(str(root / "src")).partitions
    return root, part


def _files(d):
    return sorted(os.listdir(d))


@pytest.mark.parametrize("cut_at", [0.0, 0.37, 0.5, 0.81, 1.0])
def test_staged_copy_holds_whole_batches_up_to_the_cut(source, tmp_path, cut_at):
    _root, part = source
    src = Storage.local()
    ends = [
        b.header.last_offset + 1
        for seg in part.segments
        for b in iter_batches(open(seg.log.path, "rb").read())
    ]
    offset = ends[int(cut_at * (len(ends) - 1))] + (0 if cut_at < 1 else 10)
    staged = stage_partition(src, part, 0, src, str(tmp_path), None, offset)
    out = tmp_path / "t-0"
    end = staged.cut.end_offset
    assert end == max(e for e in ends if e <= offset)
    logs = [n for n in _files(out) if n.endswith(".log")]
    assert logs[-1] == f"{end:020d}.log" and os.path.getsize(out / logs[-1]) == 0  # the empty active segment
    copied = b""
    for name in logs[:-1]:
        data = (out / name).read_bytes()
        # a prefix of the source
        assert data and data == open(os.path.join(part.path, name), "rb").read()[: len(data)]
        base = int(name[:20])
        index, timeindex = rebuild_indexes_from_log(data, base)
        assert (out / f"{name[:20]}.index").read_bytes() == index
        assert (out / f"{name[:20]}.timeindex").read_bytes() == timeindex
        txn = out / f"{name[:20]}.txnindex"
        if txn.exists():
            assert all(e.last_offset < end for e in read_txn_index(txn.read_bytes()))
        copied += data
    assert [b.header.last_offset + 1 for b in iter_batches(copied)] == [e for e in ends if e <= end]
    epochs = parse_leader_epoch_checkpoint((out / "leader-epoch-checkpoint").read_text())
    assert (epochs and all(o < end for _, o in epochs)) or end == 0
    assert (out / "partition.metadata").read_bytes() == open(
        os.path.join(part.path, "partition.metadata"), "rb"
    ).read()


def test_promote_moves_then_marks(source, tmp_path):
    _root, part = source
    local = Storage.local()
    staged = stage_partition(local, part, 0, local, str(tmp_path / "stage"), None, 400)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "t-0").mkdir()  # an earlier promotion cut short: replaced
    (tmp_path / "out" / "t-0" / "junk").write_text("x")
    marker = marker_for(staged, "src", str(tmp_path / "out" / "t-0"), 123)
    promote(local, str(tmp_path / "stage" / "t-0"), local, str(tmp_path / "out"), marker)
    assert not (tmp_path / "stage" / "t-0").exists()
    assert "junk" not in _files(tmp_path / "out" / "t-0")
    (got,) = read_markers(local, str(tmp_path / "out")).values()
    assert got == json.loads(json.dumps(marker)) and got["logEndOffset"] == staged.cut.end_offset <= 400
