"""End to end through ./spark-submit.sh on copies of real broker-written log dirs.

One job run covers four log dirs (copies; the shared fixtures are read-only):

* `mscaldas`: Confluent 5.1.2 data (Java client, LZ4 changelogs, `_schemas`, `docker-connect-*`,
  `__consumer_offsets`). Every partition there holds only its active segment, so a few
  partitions are re-cut, at batch boundaries, into three segments (the batches' bytes are the
  broker's, untouched): those get cleaned; the others must be reported skipped with a reason.
* `bheem`: Kafka 3.1.0 `__consumer_offsets`, all single-segment: all skipped.
* `v09-reset`: the Kafka 0.9.0.1 v0 log dir with `cleaner-offset-checkpoint` removed, so the
  whole log below the active segment is dirty and gets cleaned (to v2, KIP-724).
* `v09-kept`: the same dir with the broker's checkpoint (2964 = active base): nothing to do.

Expectations come from kafka-python's decoding of the input, never from our reader.
"""

from __future__ import annotations

import os
import shutil

import pytest
from e2ekit import (
    SHARED_FIXTURES,
    decode_log,
    decode_partition,
    latest_per_key,
    run_job,
    segment_logs,
    tree_hashes,
    v2_batches,
)

from compaction.format.batch import RecordBatch
from compaction.format.checkpoint import parse_offset_checkpoint
from compaction.format.segment import iter_batches

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_900_000_000_000
RETENTION = 86_400_000
TOPICS = r"__consumer_offsets|_schemas|docker-connect-.*|_confluent-controlcenter-.*-changelog|compacted"
MSCALDAS = os.path.join(SHARED_FIXTURES, "mscaldas2012+kafka-connect-spooldir", "kafka-data")
BHEEM = os.path.join(SHARED_FIXTURES, "Bheem6005+kafka", "kafka-logs")
V09 = os.path.join(SHARED_FIXTURES, "kafka-0.9.0.1", "kafka-logs")
# Partitions re-cut into three segments (v2, several batches each; one LZ4 Streams changelog).
SPLIT = (
    "_schemas-0",
    "docker-connect-configs-0",
    "docker-connect-status-0",
    "__consumer_offsets-29",
    "__consumer_offsets-37",
    "_confluent-controlcenter-5-1-2-1-KSTREAM-OUTEROTHER-0000000096-store-changelog-0",
)
ACTIVE_ONLY = "nothing cleanable: active segment only"


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


def _split_partition(part_dir: str, pieces: int = 3) -> None:
    """Re-cut a single-segment partition into `pieces` segments at batch boundaries, as a broker
    rolling its segment would have (no index files: the snapshots had none either)."""
    (log,) = segment_logs(part_dir)
    stat = os.stat(log)
    batches = v2_batches(_read(log))
    assert len(batches) >= pieces
    os.remove(log)
    cuts = [len(batches) * i // pieces for i in range(pieces)] + [len(batches)]
    for lo, hi in zip(cuts, cuts[1:]):
        path = os.path.join(part_dir, f"{batches[lo][0]:020d}.log")
        with open(path, "wb") as fh:
            fh.write(b"".join(b for _, b in batches[lo:hi]))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _selected(log_dir):
    import re

    pattern = re.compile(TOPICS)
    return sorted(
        n
        for n in os.listdir(log_dir)
        if os.path.isdir(os.path.join(log_dir, n)) and pattern.fullmatch(n.rpartition("-")[0])
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("fixtures")
    dirs = {name: str(root / name) for name in ("mscaldas", "bheem", "v09-reset", "v09-kept")}
    shutil.copytree(MSCALDAS, dirs["mscaldas"])  # copy2: mtimes preserved
    shutil.copytree(BHEEM, dirs["bheem"])
    shutil.copytree(V09, dirs["v09-reset"])
    shutil.copytree(V09, dirs["v09-kept"])
    for part in SPLIT:
        _split_partition(os.path.join(dirs["mscaldas"], part))
    os.remove(os.path.join(dirs["v09-reset"], "cleaner-offset-checkpoint"))
    before = {
        name: {
            p: decode_partition(os.path.join(d, p))
            for p in os.listdir(d)
            if os.path.isdir(os.path.join(d, p))
        }
        for name, d in dirs.items()
    }
    hashes = {name: tree_hashes(d) for name, d in dirs.items()}
    args = [a for d in dirs.values() for a in ("--log-dir", d)][2:]  # run_job passes the first
    code, report, err = run_job(
        dirs["mscaldas"], *args, "--topics", TOPICS, "--now-ms", str(NOW), report=str(root / "report.json")
    )
    assert code == 0, err
    return dirs, before, hashes, report


def _entries(report, log_dir):
    return {
        f"{p['topic']}-{p['partition']}": p
        for p in report["partitions"]
        if os.path.realpath(p.get("logDir", p.get("log_dir", ""))) == os.path.realpath(log_dir)
    }


def _cleaned(dirs):
    return [("mscaldas", p) for p in SPLIT] + [("v09-reset", "compacted-0")]


def test_report_covers_exactly_the_selected_partitions(run):
    dirs, _, _, report = run
    assert report["totals"]["failed"] == 0
    for name, d in dirs.items():
        entries = _entries(report, d)
        assert sorted(entries) == _selected(d), name
    assert "plain-0" not in _entries(report, dirs["v09-reset"])


def test_single_segment_partitions_are_skipped_with_a_reason(run):
    dirs, _, _, report = run
    skipped = 0
    for name in ("mscaldas", "bheem"):
        for part, entry in _entries(report, dirs[name]).items():
            if name == "mscaldas" and part in SPLIT:
                continue
            assert entry["status"] == "skipped", (name, part, entry)
            assert entry["reason"] == ACTIVE_ONLY, (name, part, entry)
            skipped += 1
    assert skipped > 50
    kept = _entries(report, dirs["v09-kept"])["compacted-0"]
    assert kept["status"] == "skipped" and kept["reason"] == ACTIVE_ONLY, kept


def test_split_and_reset_partitions_are_cleaned(run):
    dirs, _, _, report = run
    for name, part in _cleaned(dirs):
        entry = _entries(report, dirs[name])[part]
        assert entry["status"] == "cleaned", (name, part, entry)
        assert entry["recordsWritten"] <= entry["recordsRead"]
    assert (
        sum(
            _entries(report, dirs["mscaldas"])[p]["recordsWritten"]
            < _entries(report, dirs["mscaldas"])[p]["recordsRead"]
            for p in SPLIT
        )
        >= 3
    )


def _active_base(part_dir):
    return int(os.path.basename(segment_logs(part_dir)[-1])[:20])


def test_latest_record_per_key_kept_at_its_offset(run):
    dirs, before, _, _ = run
    for name, part in _cleaned(dirs):
        part_dir = os.path.join(dirs[name], part)
        bound = _active_base(part_dir)
        records = before[name][part]
        after = decode_partition(part_dir)
        expected = sorted(latest_per_key(records, bound).values(), key=lambda r: r.offset)
        if name == "v09-reset":
            # v0 has no timestamps and no headers: compare offsets, keys and values.
            strip = lambda rs: [(r.offset, r.key, r.value) for r in rs]  # noqa: E731
            assert strip(r for r in after if r.offset < bound) == strip(expected)
            assert strip(r for r in after if r.offset >= bound) == strip(
                r for r in records if r.offset >= bound
            )
        else:
            assert [r for r in after if r.offset < bound] == expected, part
            assert [r for r in after if r.offset >= bound] == [r for r in records if r.offset >= bound], part
        assert [r for r in records if r.key is None and r.offset < bound] == [], part


def test_v09_compacted_to_v2_with_tombstone_horizons(run):
    dirs, before, _, _ = run
    part_dir = os.path.join(dirs["v09-reset"], "compacted-0")
    logs = segment_logs(part_dir)
    assert [os.path.basename(p) for p in logs][-1] == "00000000000000002964.log"
    tombstones = 0
    for log in logs[:-1]:
        for batch in iter_batches(_read(log), log):
            assert isinstance(batch, RecordBatch) and batch.header.magic == 2 and batch.crc_valid()
            if any(r.value is None for r in batch.records()):
                tombstones += 1
                assert batch.header.delete_horizon_ms == NOW + RETENTION
    expected_tombstones = [
        r for r in latest_per_key(before["v09-reset"]["compacted-0"], 2964).values() if r.value is None
    ]
    assert tombstones > 0 and len(expected_tombstones) > 0
    assert _read(logs[-1]) == _read(os.path.join(V09, "compacted-0", "00000000000000002964.log"))


def test_checkpoints(run):
    dirs, _, _, _ = run
    for name, part in _cleaned(dirs):
        checkpoint = parse_offset_checkpoint(_read(os.path.join(dirs[name], "cleaner-offset-checkpoint")))
        topic, _, partition = part.rpartition("-")
        assert checkpoint[(topic, int(partition))] == _active_base(os.path.join(dirs[name], part)), part
    kept = parse_offset_checkpoint(_read(os.path.join(dirs["v09-kept"], "cleaner-offset-checkpoint")))
    assert kept[("compacted", 0)] == 2964


def test_everything_decodes_with_kafka_python_and_our_reader(run):
    dirs, _, _, _ = run
    for d in dirs.values():
        for part in sorted(os.listdir(d)):
            part_dir = os.path.join(d, part)
            if not os.path.isdir(part_dir) or part.startswith("__cluster_metadata"):
                continue
            for log in segment_logs(part_dir):
                data = _read(log)
                ours = []
                for batch in iter_batches(data, log):  # CRCs verified
                    if isinstance(batch, RecordBatch):
                        assert batch.crc_valid(), log
                        if batch.header.is_control:
                            continue
                    ours += [r.offset for r in batch.records()]
                assert [r.offset for r in decode_log(log)] == ours, log
            assert not [n for n in os.listdir(part_dir) if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_no_file_outside_the_cleaned_partitions_changes(run):
    dirs, _, hashes, _ = run
    cleaned = {(name, part) for name, part in _cleaned(dirs)}
    for name, d in dirs.items():
        after = tree_hashes(d)
        before = hashes[name]
        for tree in (after, before):
            tree.pop(".compaction.lock", None)
            if name != "v09-kept" and name != "bheem":
                tree.pop("cleaner-offset-checkpoint", None)
        changed = {p for p in set(after) | set(before) if after.get(p) != before.get(p)}
        outside = {p for p in changed if (name, p.split(os.sep)[0]) not in cleaned}
        assert outside == set(), (name, sorted(outside)[:10])
