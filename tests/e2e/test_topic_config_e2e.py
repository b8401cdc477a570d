"""Per-topic configs end to end (one spark-submit run): cleanup.policy, min/max compaction lag,
the dirty ratio, and the report's reasons. Mirrors LogCleanerLagIntegrationTest (nothing
cleaned within min.compaction.lag.ms) and LogCleanerIntegrationTest.testMaxLogCompactionLag
(max.compaction.lag.ms forces a partition below the ratio)."""

from __future__ import annotations

import json
import os

import pytest
from e2ekit import decode_partition, latest_per_key, run_job, segment_logs, tree_hashes

from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000  # generated timestamps start at 1_700_000_000_000
RECORDS = 3000
TOPICS = ("lagged", "logs", "forced", "below", "plain")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("topic-config")
    log_dir = str(root / "logs")
    # Checkpoints at 80% leave a small dirty tail: ratio well under 0.5 for "forced" and "below".
    checkpoint = (("forced", 0, RECORDS * 8 // 10), ("below", 0, RECORDS * 8 // 10))
    generate_log_dir(
        log_dir,
        topics=tuple((t, 1) for t in TOPICS),
        records=RECORDS,
        keys=200,
        segment_bytes=30_000,
        checkpoint=checkpoint,
        seed=3,
    )
    config = {
        "lagged": {"min.compaction.lag.ms": NOW},  # every segment is younger than that
        "logs": {"cleanup.policy": "delete"},
        "forced": {"max.compaction.lag.ms": 1},
    }
    config_path = root / "topics.json"
    config_path.write_text(json.dumps(config))
    before = {t: tree_hashes(os.path.join(log_dir, f"{t}-0")) for t in TOPICS}
    records = {t: decode_partition(os.path.join(log_dir, f"{t}-0")) for t in TOPICS}
    code, report, err = run_job(log_dir, "--now-ms", str(NOW), "--topic-config", str(config_path))
    assert code == 0, err
    by_topic = {p["topic"]: p for p in report["partitions"]}
    return log_dir, by_topic, before, records


def _unchanged(log_dir, before, topic):
    return tree_hashes(os.path.join(log_dir, f"{topic}-0")) == before[topic]


def test_delete_policy_topic_is_skipped_untouched(run):
    log_dir, by_topic, before, _ = run
    assert by_topic["logs"]["status"] == "skipped"
    assert by_topic["logs"]["reason"] == "cleanup.policy is delete"
    assert _unchanged(log_dir, before, "logs")


def test_min_compaction_lag_leaves_young_segments_alone(run):
    log_dir, by_topic, before, _ = run
    assert by_topic["lagged"]["status"] == "skipped"
    assert "min.compaction.lag.ms" in by_topic["lagged"]["reason"]
    assert _unchanged(log_dir, before, "lagged")


def test_below_ratio_is_skipped(run):
    log_dir, by_topic, before, _ = run
    assert by_topic["below"]["status"] == "skipped"
    assert by_topic["below"]["dirtyRatio"] < 0.5
    assert by_topic["below"]["reason"] == "below min.cleanable.dirty.ratio"
    assert _unchanged(log_dir, before, "below")


def test_max_compaction_lag_forces_cleaning_below_ratio(run):
    log_dir, by_topic, _, records = run
    entry = by_topic["forced"]
    assert entry["status"] == "cleaned"
    assert entry["dirtyRatio"] < 0.5
    part = os.path.join(log_dir, "forced-0")
    bound = int(os.path.basename(segment_logs(part)[-1])[:20])
    after = [r for r in decode_partition(part) if r.offset < bound]
    # The clean head is not a compacted log here (the generator wrote duplicates below the
    # checkpoint), so Kafka's rule keeps a clean record unless its key is in the dirty map.
    first_dirty = entry["firstDirtyOffset"]
    dirty_latest = latest_per_key([r for r in records["forced"] if r.offset >= first_dirty], bound)
    expected = [
        r
        for r in records["forced"]
        if r.offset < bound
        and r.key is not None
        and (r.key not in dirty_latest or dirty_latest[r.key].offset == r.offset)
    ]
    assert after == expected


def test_plain_topic_with_defaults_is_cleaned(run):
    log_dir, by_topic, _, records = run
    assert by_topic["plain"]["status"] == "cleaned"
    part = os.path.join(log_dir, "plain-0")
    bound = int(os.path.basename(segment_logs(part)[-1])[:20])
    kept = [r for r in decode_partition(part) if r.offset < bound]
    assert kept == sorted(latest_per_key(records["plain"], bound).values(), key=lambda r: r.offset)
