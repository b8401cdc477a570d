"""End to end through ./spark-submit.sh on generated log dirs, checked with kafka-python.

The expected result is computed from kafka-python's decoding of the *input*, not from our code:
for every key, the record kept is its latest one below the uncleanable bound (the active
segment's base), at its original offset; the active segment is byte-identical; a second run
finds nothing to do.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from e2ekit import decode_log, decode_partition, latest_per_key, run_job, segment_logs, tree_hashes

from compaction.format.batch import RecordBatch
from compaction.format.checkpoint import parse_offset_checkpoint
from compaction.format.segment import iter_batches
from compaction.kernels.index_build import build_indexes
from compaction.kernels.scan import scan_batches
from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000
RETENTION = 86_400_000
GENERATED_SEGMENT_BYTES = 120_000
SEGMENT_BYTES = 400_000  # the job may merge ~3 cleaned segments into one group


def _generate(log_dir):
    generate_log_dir(
        log_dir,
        topics=(("orders", 2), ("users", 1)),
        records=6000,
        keys=300,
        codec="mixed",
        segment_bytes=GENERATED_SEGMENT_BYTES,
        tombstone_ratio=0.1,
        headers=1,
        seed=7,
    )


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    log_dir = str(root / "logs")
    _generate(log_dir)
    before = {p: decode_partition(os.path.join(log_dir, p)) for p in _parts(log_dir)}
    active = {p: _read(segment_logs(os.path.join(log_dir, p))[-1]) for p in _parts(log_dir)}
    code, report, err = run_job(log_dir, "--now-ms", str(NOW), "--segment-bytes", str(SEGMENT_BYTES))
    assert code == 0, err
    return log_dir, before, active, report


def _parts(log_dir):
    return sorted(n for n in os.listdir(log_dir) if os.path.isdir(os.path.join(log_dir, n)))


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


def _active_base(part_dir):
    return int(os.path.basename(segment_logs(part_dir)[-1])[:20])


def test_every_partition_is_cleaned_and_reported(compacted):
    _log_dir, before, _, report = compacted
    by_name = {f"{p['topic']}-{p['partition']}": p for p in report["partitions"]}
    assert set(by_name) == set(before)
    for _name, entry in by_name.items():
        assert entry["status"] == "cleaned", entry
        assert entry["recordsWritten"] < entry["recordsRead"]
        assert entry["segmentsAfter"] < entry["segmentsBefore"]
        assert entry["bytesWritten"] < entry["bytesRead"]
    assert report["totals"]["failed"] == 0


def test_start_up_is_reported_apart_from_the_round(compacted):
    """The fixed cost of a run (Spark session, Python workers warmed up on a thread while the
    driver plans) is reported apart from planning, stages and commit."""
    t = compacted[3]["timings"]
    for key in (
        "sparkStartSeconds",
        "workerWarmupSeconds",
        "sparkWaitSeconds",
        "planSeconds",
        "stagesSeconds",
        "commitSeconds",
    ):
        assert t[key] >= 0, key
    assert t["workerWarmupSeconds"] > 0
    # The stages start only once the session is up: the wait covers what planning did not hide.
    assert t["sparkWaitSeconds"] <= t["sparkStartSeconds"] + t["workerWarmupSeconds"] + 1


def test_the_compiled_kernels_are_kept_on_the_store_beside_the_log_dir(compacted):
    """The warm-up published this host's compiled kernels, one archive of this key, whole and
    checked, for executors that start with an empty temp dir (tests/e2e/test_cluster.py)."""
    from compaction.kernels.cache import current_key, verify
    from compaction.settings import KERNEL_CACHE_NAME

    store = os.path.join(os.path.dirname(compacted[0]), KERNEL_CACHE_NAME)
    assert os.listdir(store) == [current_key().archive_name]
    with open(os.path.join(store, current_key().archive_name), "rb") as fh:
        files = verify(fh.read(), current_key())
    assert any(name.startswith("kernels/scan_kernels.") for name in files), sorted(files)[:10]
    assert compacted[3]["timings"]["workerKernelCompiles"] >= 0


def test_latest_record_per_key_kept_at_its_offset(compacted):
    log_dir, before, _, _ = compacted
    for part, records in before.items():
        part_dir = os.path.join(log_dir, part)
        bound = _active_base(part_dir)
        after = decode_partition(part_dir)
        kept_below = [r for r in after if r.offset < bound]
        expected = sorted(latest_per_key(records, bound).values(), key=lambda r: r.offset)
        assert kept_below == expected, part
        assert [r for r in after if r.offset >= bound] == [r for r in records if r.offset >= bound]


def test_active_segment_untouched(compacted):
    log_dir, _, active, _ = compacted
    for part, data in active.items():
        assert _read(segment_logs(os.path.join(log_dir, part))[-1]) == data


def test_checkpoint_moved_to_the_uncleanable_bound(compacted):
    log_dir, before, _, _ = compacted
    checkpoint = parse_offset_checkpoint(_read(os.path.join(log_dir, "cleaner-offset-checkpoint")))
    for part in before:
        topic, _, partition = part.rpartition("-")
        assert checkpoint[(topic, int(partition))] == _active_base(os.path.join(log_dir, part))


def test_new_segments_are_valid_kafka_segments(compacted):
    log_dir, _, _, _ = compacted
    for part in _parts(log_dir):
        part_dir = os.path.join(log_dir, part)
        for log in segment_logs(part_dir)[:-1]:
            data = _read(log)
            assert len(data) <= SEGMENT_BYTES
            batches = list(iter_batches(data, log))  # CRCs verified
            assert all(isinstance(b, RecordBatch) and b.crc_valid() for b in batches)
            cols = scan_batches(np.frombuffer(data, dtype=np.uint8))
            base = int(os.path.basename(log)[:20])
            index, timeindex = build_indexes(
                cols.position, cols.size, cols.last_offset, cols.max_timestamp, base, 4096
            )
            assert _read(log[: -len(".log")] + ".index") == index
            assert _read(log[: -len(".log")] + ".timeindex") == timeindex
            assert not [n for n in os.listdir(part_dir) if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_tombstones_get_a_delete_horizon_on_first_clean(compacted):
    log_dir, _, _, _ = compacted
    seen = 0
    for part in _parts(log_dir):
        for log in segment_logs(os.path.join(log_dir, part))[:-1]:
            for batch in iter_batches(_read(log), log):
                if any(r.value is None for r in batch.records()):
                    seen += 1
                    assert batch.header.delete_horizon_ms == NOW + RETENTION
    assert seen > 0


def test_second_run_finds_nothing_to_clean(compacted):
    log_dir, _, _, _ = compacted
    hashes = tree_hashes(log_dir)
    code, report, err = run_job(log_dir, "--now-ms", str(NOW), "--segment-bytes", str(SEGMENT_BYTES))
    assert code == 0, err
    assert {p["status"] for p in report["partitions"]} == {"skipped"}
    after = tree_hashes(log_dir)
    after.pop(".compaction.lock", None)
    hashes.pop(".compaction.lock", None)
    assert after == hashes


def test_decodes_with_kafka_python_record_for_record(compacted):
    log_dir, _, _, _ = compacted
    for part in _parts(log_dir):
        for log in segment_logs(os.path.join(log_dir, part)):
            ours = [
                r.offset
                for b in iter_batches(_read(log), log)
                if not b.header.is_control
                for r in b.records()
            ]
            assert [r.offset for r in decode_log(log)] == ours


def test_partitions_cut_into_ranges_write_the_same_bytes(compacted, tmp_path):
    """Partitions above partitionTaskMaxBytes are cut into ranges (a scan task per group, key
    summaries merged per bucket, a rewrite task per unit); forced here on the same input, they
    must write exactly what the whole-partition tasks wrote. A range cleaned by another task is
    copied into its group's file one batch at a time (partChunkBytes=1): the copy's loop runs once
    per batch. No decompressed scan is kept for the rewrite here (`scan_reuse_codecs` none), so
    the compressed segments are decompressed again, to the same bytes; the whole-partition tasks
    kept every scan."""
    log_dir, _, _, whole = compacted
    other = str(tmp_path / "logs")
    _generate(other)
    code, report, err = run_job(
        other,
        "--now-ms",
        str(NOW),
        "--segment-bytes",
        str(SEGMENT_BYTES),
        "--conf",
        "spark.kafka.compaction.partitionTaskMaxBytes=0",
        "--conf",
        "spark.kafka.compaction.partChunkBytes=1",
        env={"KAFKA_COMPACTION_SCAN_REUSE_CODECS": "none"},
    )
    assert report["timings"].get("rangesSeconds"), report["timings"]
    assert report["timings"]["taskSegmentsRescanned"] > 0 == whole["timings"]["taskSegmentsRescanned"]
    assert code == 0, err
    assert {p["status"] for p in report["partitions"]} == {"cleaned"}
    ours, theirs = tree_hashes(log_dir), tree_hashes(other)
    for tree in (ours, theirs):
        tree.pop(".compaction.lock", None)
    assert theirs == ours
