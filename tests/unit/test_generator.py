"""The generator: its output is what a broker would hold, checked with code we did not write
(kafka-python) and against the manifest it returns; rolls, indexes, checkpoints, transactions,
determinism, and its fast path against `build_batch`."""

from __future__ import annotations

import filecmp
import json
import os

import numpy as np
import pytest
from kafka.record.memory_records import MemoryRecords

from compaction.__main__ import main
from compaction.format.batch import Record, RecordBatch
from compaction.format.batch_build import build_batch
from compaction.format.checkpoint import parse_leader_epoch_checkpoint, parse_offset_checkpoint
from compaction.format.index import sanity_check_offset_index, sanity_check_time_index
from compaction.format.segment import iter_batches
from compaction.format.txnindex import AbortedTxn, read_txn_index, sanity_check_txn_index
from compaction.kernels.index_build import rebuild_indexes_from_log
from compaction.tools.generator import TXN_ABORTED, TXN_COMMITTED, TXN_NONE, generate_log_dir

SEGMENT_BYTES = 60_000
OPTIONS = dict(
    topics=(("orders", 2), ("users", 1)),
    records=4000,
    keys=500,
    codec="mixed",
    batch_records=(1, 40),
    segment_bytes=SEGMENT_BYTES,
    tombstone_ratio=0.1,
    headers=2,
    transactions=0.3,
    idempotent=0.2,
    abort_ratio=0.4,
    leader_epochs=3,
    seed=11,
    checkpoint=(("orders", 0, 1200), ("users", None, 7)),
)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("gen") / "logs")
    return out, generate_log_dir(out, **OPTIONS)


def _logs(part_dir):
    return sorted(os.path.join(part_dir, n) for n in os.listdir(part_dir) if n.endswith(".log"))


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


def _kafka_python_batches(path):
    records = MemoryRecords(_read(path))
    while (batch := records.next_batch()) is not None:
        yield batch


def _part_dir(out, topic, partition):
    return os.path.join(out, f"{topic}-{partition}")


def test_every_partition_decodes_with_kafka_python_as_in_the_manifest(generated):
    out, manifest = generated
    assert set(manifest.partitions) == {("orders", 0), ("orders", 1), ("users", 0)}
    for (topic, partition), pm in manifest.partitions.items():
        offsets = []
        for log in _logs(_part_dir(out, topic, partition)):
            for batch in _kafka_python_batches(log):
                assert batch.validate_crc()
                for r in batch:
                    offsets.append(r.offset)
                    expected = pm.record(r.offset)
                    assert (r.key, r.value, r.timestamp) == (expected.key, expected.value, expected.timestamp)
                    assert tuple(r.headers) == expected.headers
                    assert batch.producer_id == expected.producer_id
                    assert batch.is_control_batch == (expected.control_type >= 0)
        assert offsets == list(range(pm.log_end_offset))  # contiguous, nothing lost or duplicated
        assert int((~pm.is_control).sum()) == OPTIONS["records"]


def test_manifest_keys_values_and_tombstones(generated):
    _, manifest = generated
    pm = manifest.partitions[("orders", 0)]
    data = ~pm.is_control
    assert pm.key_id[data].min() >= 0 and pm.key_id[data].max() < OPTIONS["keys"]
    assert pm.key(int(np.flatnonzero(data)[0])).startswith(b"key-") and len(pm.key(0)) == 10
    tomb = int(np.flatnonzero(pm.is_tombstone)[0])
    assert pm.value(tomb) is None
    assert 0.05 < pm.is_tombstone.sum() / data.sum() < 0.15
    assert pm.headers(0)[0][0] == "h0" and len(pm.headers(0)) == 2


def test_segments_roll_before_overflowing_segment_bytes(generated):
    out, manifest = generated
    for (topic, partition), pm in manifest.partitions.items():
        logs = _logs(_part_dir(out, topic, partition))
        assert len(logs) == len(pm.segments) > 2
        expected_base = 0
        for log, seg in zip(logs, pm.segments, strict=True):
            data = _read(log)
            batches = list(iter_batches(data))
            assert len(data) == seg.size and (len(data) <= SEGMENT_BYTES or len(batches) == 1)
            assert int(os.path.basename(log)[:20]) == seg.base_offset == expected_base
            assert batches[0].header.base_offset == seg.base_offset
            expected_base = seg.next_offset
        # a roll happened only because the next batch did not fit
        for log, nxt in zip(logs, logs[1:]):
            first_next = next(iter_batches(_read(nxt)))
            assert os.path.getsize(log) + first_next.header.size > SEGMENT_BYTES


def test_indexes_equal_a_rebuild_from_the_log(generated):
    out, manifest = generated
    for (topic, partition), _pm in manifest.partitions.items():
        for log in _logs(_part_dir(out, topic, partition)):
            base = int(os.path.basename(log)[:20])
            index, time_index = rebuild_indexes_from_log(_read(log), base)
            stem = log[: -len(".log")]
            assert _read(stem + ".index") == index
            assert _read(stem + ".timeindex") == time_index
            sanity_check_offset_index(index, base, strict=True)
            sanity_check_time_index(time_index, base, strict=True)
        assert any(os.path.getsize(p[:-4] + ".index") for p in _logs(_part_dir(out, topic, partition)))


def _expected_aborted(pm) -> list[AbortedTxn]:
    """Spec 2.2 from the manifest alone: walk the log, track each producer's open transaction."""
    open_first: dict[int, int] = {}
    out = []
    for o in range(pm.log_end_offset):
        pid = int(pm.producer_id[o])
        if pm.control_type[o] < 0 and pm.txn[o] != TXN_NONE:
            open_first.setdefault(pid, o)
        elif pm.control_type[o] >= 0:
            first = open_first.pop(pid)
            if pm.control_type[o] == 0:
                out.append(AbortedTxn(pid, first, o, min(open_first.values(), default=o + 1)))
    assert not open_first  # every transaction ends with a marker
    return out


def test_txnindex_lists_aborted_transactions_in_the_marker_segment(generated):
    out, manifest = generated
    for (topic, partition), pm in manifest.partitions.items():
        found = []
        for seg, log in zip(pm.segments, _logs(_part_dir(out, topic, partition)), strict=True):
            path = log[:-4] + ".txnindex"
            assert os.path.exists(path) == seg.has_txn_index
            if os.path.exists(path):
                data = _read(path)
                sanity_check_txn_index(data, seg.base_offset, strict=True)
                entries = read_txn_index(data)
                assert all(seg.base_offset <= e.last_offset < seg.next_offset for e in entries)
                found += entries
        assert found == _expected_aborted(pm)
        assert found == pm.aborted


def test_transactions_markers_and_producer_sequences(generated):
    out, manifest = generated
    saw = {"commit": 0, "abort": 0, "idempotent": 0}
    for (topic, partition), pm in manifest.partitions.items():
        next_seq: dict[int, int] = {}
        markers_by_epoch = set()
        for log in _logs(_part_dir(out, topic, partition)):
            for batch in _kafka_python_batches(log):
                if batch.is_control_batch:
                    (r,) = list(batch)
                    kind = int.from_bytes(r.key[2:4], "big")
                    saw["abort" if kind == 0 else "commit"] += 1
                    markers_by_epoch.add(int.from_bytes(r.value[2:6], "big"))
                    assert batch.is_transactional and batch.base_sequence == -1
                    assert pm.txn[batch.base_offset] == (TXN_ABORTED if kind == 0 else TXN_COMMITTED)
                    continue
                if batch.producer_id >= 0:
                    saw["idempotent"] += not batch.is_transactional
                    assert batch.base_sequence == next_seq.get(batch.producer_id, 0)
                    next_seq[batch.producer_id] = batch.last_sequence + 1
                else:
                    assert batch.base_sequence == -1 and not batch.is_transactional
        assert len(next_seq) >= 3  # several producer ids per partition
    assert saw["commit"] > 0 and saw["abort"] > 0 and saw["idempotent"] > 0


def test_checkpoints_and_partition_files_parse(generated):
    out, manifest = generated
    leo = {tp: pm.log_end_offset for tp, pm in manifest.partitions.items()}
    read = lambda name: parse_offset_checkpoint(_read(os.path.join(out, name)), name)  # noqa: E731
    assert read("recovery-point-offset-checkpoint") == leo
    assert read("replication-offset-checkpoint") == leo
    assert read("log-start-offset-checkpoint") == {}
    assert read("cleaner-offset-checkpoint") == {("orders", 0): 1200, ("users", 0): 7}
    props = _read(os.path.join(out, "meta.properties")).decode()
    assert "broker.id=0" in props and "version=0" in props and "cluster.id=" in props
    for (topic, partition), _pm in manifest.partitions.items():
        part = _part_dir(out, topic, partition)
        epochs = parse_leader_epoch_checkpoint(_read(os.path.join(part, "leader-epoch-checkpoint")))
        assert [e for e, _ in epochs] == [0, 1, 2] and epochs[0][1] == 0
        assert [o for _, o in epochs] == sorted(o for _, o in epochs)
        for epoch, start in epochs:  # the batch starting an epoch carries it
            batch = next(
                b for log in _logs(part) for b in iter_batches(_read(log)) if b.header.base_offset == start
            )
            assert batch.header.partition_leader_epoch == epoch
        meta = _read(os.path.join(part, "partition.metadata")).decode()
        assert meta.startswith("version: 0\ntopic_id: ") and len(meta.split(": ")[-1]) == 22
    assert not os.path.exists(os.path.join(out, ".kafka_cleanshutdown"))


def test_fast_path_bytes_equal_build_batch(generated):
    out, manifest = generated
    pm = manifest.partitions[("orders", 1)]
    checked = set()
    for log in _logs(_part_dir(out, "orders", 1)):
        for batch in iter_batches(_read(log)):
            h = batch.header
            records = [
                Record(o, pm.record(o).timestamp, pm.key(o), pm.value(o), pm.headers(o))
                for o in range(h.base_offset, h.last_offset + 1)
            ]
            rebuilt = build_batch(
                records,
                codec=h.codec,
                producer_id=h.producer_id,
                producer_epoch=h.producer_epoch,
                base_sequence=h.base_sequence,
                is_transactional=h.is_transactional,
                is_control=h.is_control,
                partition_leader_epoch=h.partition_leader_epoch,
            )
            assert bytes(batch.raw) == rebuilt
            checked.add(h.codec)
    assert checked == {0, 1, 2, 3, 4}


def _tree(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files)


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    small = dict(OPTIONS, records=800)
    a, b, c = (str(tmp_path / n) for n in "abc")
    generate_log_dir(a, **small)
    generate_log_dir(b, **small)
    generate_log_dir(c, **dict(small, seed=12))
    assert _tree(a) == _tree(b)
    _, mismatch, errors = filecmp.cmpfiles(a, b, _tree(a), shallow=False)
    assert mismatch == [] and errors == []
    _, mismatch, _ = filecmp.cmpfiles(a, c, _tree(a), shallow=False)
    assert any(m.endswith(".log") for m in mismatch)


@pytest.mark.parametrize("legacy,codec", [("v0", "none"), ("v1", "mixed"), ("v0", "gzip")])
def test_legacy_formats_decode_with_kafka_python(tmp_path, legacy, codec):
    out = str(tmp_path / "legacy")
    manifest = generate_log_dir(
        out, topics=(("old", 1),), records=1500, legacy=legacy, codec=codec, segment_bytes=20_000, seed=3
    )
    pm = manifest.partitions[("old", 0)]
    offsets = []
    for log in _logs(_part_dir(out, "old", 0)):
        for batch in _kafka_python_batches(log):
            for r in batch:
                offsets.append(r.offset)
                assert (r.key, r.value) == (pm.key(r.offset), pm.value(r.offset))
                assert r.timestamp == (None if legacy == "v0" else pm.timestamp[r.offset])
        assert all(b.magic == int(legacy[1]) for b in iter_batches(_read(log)))
        base = int(os.path.basename(log)[:20])
        indexes = (_read(log[:-4] + ".index"), _read(log[:-4] + ".timeindex"))
        assert indexes == rebuild_indexes_from_log(_read(log), base)
        if legacy == "v0":
            assert os.path.getsize(log[:-4] + ".timeindex") == 0  # timestamp -1 is never indexed
    assert offsets == list(range(1500))
    assert _read(os.path.join(out, "old-0", "leader-epoch-checkpoint")) == b"0\n0\n"


def test_key_skew_makes_low_key_ids_hot(tmp_path):
    manifest = generate_log_dir(
        str(tmp_path / "s"), topics=(("t", 1),), records=20_000, keys=1000, key_skew=1.2
    )
    counts = np.bincount(manifest.partitions[("t", 0)].key_id, minlength=1000)
    assert counts[0] == counts.max() and counts[0] > 20 * np.median(counts)


def test_empty_partition_has_one_empty_segment(tmp_path):
    out = str(tmp_path / "e")
    manifest = generate_log_dir(out, topics=(("t", 1),), records=0)
    assert [n for n in sorted(os.listdir(os.path.join(out, "t-0"))) if n[0] == "0"] == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]
    assert all(
        os.path.getsize(os.path.join(out, "t-0", n)) == 0
        for n in os.listdir(os.path.join(out, "t-0"))
        if n[0] == "0"
    )
    assert manifest.partitions[("t", 0)].log_end_offset == 0


@pytest.mark.parametrize(
    "bad",
    [
        dict(key_size=5, keys=1000),
        dict(value_size=(10, 5)),
        dict(legacy="v1", headers=1),
        dict(legacy="v0", transactions=0.1),
        dict(codec="brotli"),
        dict(legacy="v1", codec="zstd"),
    ],
)
def test_invalid_options_are_refused(tmp_path, bad):
    with pytest.raises(ValueError):
        generate_log_dir(str(tmp_path / "x"), **bad)


def test_cli_generate(tmp_path, capsys):
    out = str(tmp_path / "cli")
    argv = [
        "generate",
        out,
        "--topics",
        "a:1,b",
        "--records",
        "300",
        "--value-size",
        "10:30",
        "--batch-records",
        "5",
        "--codec",
        "lz4",
        "--checkpoint",
        "a:0=3,*=1",
        "--summary",
        str(tmp_path / "s.json"),
    ]
    assert main(argv) == 0
    assert "generated 2 partitions, 600 records" in capsys.readouterr().out
    with open(tmp_path / "s.json") as fh:
        summary = json.load(fh)
    assert [(p["topic"], p["records"], p["logEndOffset"]) for p in summary["partitions"]] == [
        ("a", 300, 300),
        ("b", 300, 300),
    ]
    cleaner = parse_offset_checkpoint(_read(os.path.join(out, "cleaner-offset-checkpoint")))
    assert cleaner == {("a", 0): 1, ("b", 0): 1}
    batches = list(iter_batches(_read(os.path.join(out, "a-0", "00000000000000000000.log"))))
    assert {b.header.records_count for b in batches} == {5} and {b.header.codec for b in batches} == {3}
    assert isinstance(batches[0], RecordBatch)
    assert main(argv) == 2  # refuses a non-empty dir
    assert main(["generate", str(tmp_path / "bad"), "--key-size", "5"]) == 2
