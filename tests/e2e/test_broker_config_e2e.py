"""A broker's own `server.properties` given to the job (`--config`), end to end in one
spark-submit: its broker-level names are the defaults under the topic-level ones, as a broker
resolves them, and its `log.cleaner.io.max.bytes.per.second` throttles the tasks' I/O.

* `log.cleanup.policy=delete`, and `orders.cleanup.policy=compact` in `--topic-config`: `orders`
  is compacted, `events` skipped untouched, as on a broker with that default;
* `log.segment.bytes=20000`: no two source segments (60 KB each) fit in one cleaned segment, so
  each is cleaned on its own, where Kafka's default (1 GiB) would merge them all into one;
* `log.cleaner.io.max.bytes.per.second`: the partition tasks take at least the bytes they read
  and wrote divided by the rate.
"""

from __future__ import annotations

import os

import pytest
from e2ekit import decode_partition, run_job, segment_logs, tree_hashes
from faultkit import assert_loads, expected_after

from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000
RATE = 50_000  # bytes/s: the partition moves ~370 KB, 7 s at this rate

SERVER_PROPERTIES = f"""\
broker.id=1
listeners=PLAINTEXT://:9092
log.dirs=/var/lib/kafka/data
num.partitions=1
log.retention.hours=168
log.cleaner.threads=2
log.cleanup.policy=delete
log.segment.bytes=20000
log.cleaner.io.max.bytes.per.second={RATE}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("broker-config")
    log_dir = str(root / "logs")
    generate_log_dir(
        log_dir,
        topics=(("orders", 1), ("events", 1)),
        records=6000,
        keys=300,
        codec="mixed",
        segment_bytes=60_000,
        seed=5,
    )
    (root / "server.properties").write_text(SERVER_PROPERTIES)
    (root / "topics.properties").write_text("orders.cleanup.policy=compact\n")
    expected = expected_after(os.path.join(log_dir, "orders-0"))
    events_before = tree_hashes(os.path.join(log_dir, "events-0"))
    code, report, err = run_job(
        log_dir,
        "--now-ms",
        str(NOW),
        "--config",
        str(root / "server.properties"),
        "--topic-config",
        str(root / "topics.properties"),
    )
    assert code == 0, err
    by_topic = {p["topic"]: p for p in report["partitions"]}
    return log_dir, by_topic, report, expected, events_before


def test_topic_override_over_the_brokers_delete_policy(run):
    log_dir, by_topic, _, expected, events_before = run
    assert by_topic["events"]["status"] == "skipped"
    assert by_topic["events"]["reason"] == "cleanup.policy is delete"
    assert tree_hashes(os.path.join(log_dir, "events-0")) == events_before
    assert by_topic["orders"]["status"] == "cleaned"
    assert_loads(os.path.join(log_dir, "orders-0"))
    assert decode_partition(os.path.join(log_dir, "orders-0")) == expected


def test_brokers_segment_bytes_caps_the_cleaned_groups(run):
    log_dir, by_topic, *_ = run
    entry = by_topic["orders"]
    assert entry["segmentsBefore"] > 3
    assert entry["segmentsAfter"] == entry["segmentsBefore"] == entry["groups"] + 1  # one group per segment
    assert len(segment_logs(os.path.join(log_dir, "orders-0"))) == entry["segmentsAfter"]


def test_brokers_io_limit_throttles_the_tasks(run):
    _, by_topic, report, *_ = run
    entry = by_topic["orders"]
    moved = entry["bytesRead"] + entry["bytesWritten"]  # read at least once, written once
    assert moved > 5 * RATE  # so that the bound below is seconds, far above the unthrottled time
    # The first request (at most a 60 KB segment) goes at once, every other one waits its turn.
    assert report["timings"]["stagesSeconds"] >= (moved - 60_000) / RATE * 0.9
