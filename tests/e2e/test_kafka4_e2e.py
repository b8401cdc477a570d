"""A real Apache Kafka 4.x broker (tests/helpers/kafka4.py) writes the input, its own LogCleaner is
the oracle, and it loads and serves the job's output.

1. Kafka's Java producers write a matrix of topics: every codec x (idempotent | transactional
   with commits and aborts), partition 0 with tombstones, partition 1 without, small segments; and
   a gzip transactional topic with LogAppendTime; a `mixed` topic where producers of every
   codec, with and without idempotence, share partitions; and topics with their own configs
   (`EXTRA`): `delete.retention.ms=0`; a `segment.index.bytes` so small that a group of round 2
   needs more index entries than it holds, where both cleaners fail on the same group (and the
   job's dry run before its round 2 fails it alike); `compact,delete` with segments past
   `retention.ms`, which Kafka's cleaner thread deletes and the job keeps; `min.compaction.lag.ms`
   with records of three days ago and of now.
   The broker is stopped cleanly and its log dir copied twice.
2. Three cleaning rounds on each copy, the whole log dirty each time (the checkpoint removed, as
   Kafka's `LogCleanerTest.runTwoPassClean`): Kafka's cleaner (the broker restarted with the
   cleaner on, until its checkpoint reaches the active segment) and the job with the same configs.
   `delete.retention.ms` is short, so round 1 stamps tombstones, round 2 removes them and stamps
   the markers of transactions left empty, round 3 removes those. After each round the two
   copies must agree batch for batch (tests/helpers/logdiff.py): file names, batch boundaries,
   header fields, records, `.txnindex` bytes; bytes and index files equal where uncompressed; the
   only shared-nothing input, the clock of the horizon, is matched round to round. Round 2 also
   cleans each side's round 1 with the other cleaner: the job on Kafka's output must write what
   Kafka's round 2 writes, Kafka's cleaner on the job's output what the job's round 2 writes.
3. A broker started on the job's output loads it without recovering anything, a read_committed
   consumer from offset 0 reads exactly the records of the job's files, producing more works, and
   the broker's own cleaner cleans on top of the job's output without an error.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import struct
import time
from pathlib import Path

import kafka4
import logdiff
import pytest
from e2ekit import run_job
from kafka4 import Broker, Script

pytestmark = [pytest.mark.slow, pytest.mark.spark]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
MODES = ("idem", "txn")
SEGMENT_BYTES = 8192
RETENTION_MS = 2000  # short: the next round, half a minute later, is past every horizon
ROUNDS = 3
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "internal.segment.bytes": SEGMENT_BYTES,
    "delete.retention.ms": RETENTION_MS,
    "min.cleanable.dirty.ratio": 0.01,
}
# Topics beyond the codec matrix, one partition each, for rules the matrix leaves out; the job
# reads their configs from --topic-config.
INDEX_FULL = "tiny-index"  # docs/kafka-rules.md#index-room
NO_RETENTION = "retention-0"  # a horizon equal to the round's now: removed by the next round
IDLE = "idle-producers"  # producers idle past producer.id.expiration.ms: their last batches go
DAY_MS = 86_400_000
# compact,delete with the first segments written three days ago, past retention.ms: Kafka's
# cleaner thread deletes them (docs/kafka-rules.md#differences-from-kafka), the job does not.
RETAINED = "compact-delete"
# Records of three days ago, then of now: only the old segments are past min.compaction.lag.ms.
LAG = "compaction-lag"
EXTRA = {
    INDEX_FULL: {"segment.bytes": 16384, "segment.index.bytes": 64, "index.interval.bytes": 128},
    NO_RETENTION: {"delete.retention.ms": 0},
    IDLE: {},
    RETAINED: {"cleanup.policy": "compact,delete", "retention.ms": DAY_MS},
    LAG: {"min.compaction.lag.ms": DAY_MS},
}
# The broker's default, which the job applies unless told otherwise: no option passes it here.
PRODUCER_ID_EXPIRATION_MS = DAY_MS
JOB_ARGS = (
    "--segment-bytes",
    str(SEGMENT_BYTES),
    "--delete-retention-ms",
    str(RETENTION_MS),
    "--min-cleanable-dirty-ratio",
    "0.01",
    "--topics",
    "(?!__).*",
)
TRANSACTIONAL = 0x10
CLEANER_ON = {"log.cleaner.enable": "true", "log.cleaner.backoff.ms": 100, "log.segment.delete.delay.ms": 0}
MATRIX = [f"{c}-{m}" for c in CODECS for m in MODES]
LOG_APPEND = "gzip-txn-logappend"  # a cell more: the broker stamps LogAppendTime on every batch
MATRIX.append(LOG_APPEND)
MIXED = "mixed"
WORDS = (
    "order",
    "shipped",
    "customer",
    "amount",
    "currency",
    "EUR",
    "status",
    "pending",
    "address",
    "street",
    "city",
    "total",
    "discount",
    "item",
    "quantity",
    "warehouse",
)


def _value(rng: random.Random, i: int) -> bytes:
    """JSON-like text, compressible as real payloads are."""
    fields = ",".join(f'"{rng.choice(WORDS)}":"{rng.choice(WORDS)}"' for _ in range(rng.randint(2, 14)))
    return f'{{"seq":{i},{fields}}}'.encode()


def _matrix_script(s: Script, rng: random.Random) -> None:
    for topic in MATRIX:
        codec, mode = topic.split("-")[:2]
        timestamps = {"message.timestamp.type": "LogAppendTime"} if topic == LOG_APPEND else {}
        s.topic(topic, 2, **TOPIC_CONFIGS, **timestamps)
        s.producer("p", compression_type=codec, linger_ms=2, batch_size=2048)
        if mode == "txn":
            s.producer(
                "t", compression_type=codec, linger_ms=2, batch_size=2048, transactional_id=f"tx-{topic}"
            ).init("t")
        seq = 0
        for block in range(24):
            txn = mode == "txn" and block % 2 == 1
            if txn:
                s.begin("t")
            for _ in range(rng.randint(10, 40)):
                part = rng.randint(0, 1)
                key = b"key-%03d" % rng.randint(0, 40)
                value = None if part == 0 and rng.random() < 0.12 else _value(rng, seq)
                headers = (("trace", b"%d" % seq), ("empty", None)) if rng.random() < 0.2 else ()
                s.send("t" if txn else "p", topic, part, key, value, headers=headers)
                seq += 1
            if txn:
                s.abort("t") if block % 6 == 3 else s.commit("t")
            else:
                s.flush("p")
        s.close("p")
        if mode == "txn":
            s.close("t")


def _mixed_script(s: Script, rng: random.Random) -> None:
    s.topic(MIXED, 3, **TOPIC_CONFIGS)
    for codec in CODECS:
        s.producer(f"idem-{codec}", compression_type=codec, linger_ms=2, batch_size=4096)
        s.producer(
            f"plain-{codec}",
            compression_type=codec,
            linger_ms=2,
            batch_size=4096,
            acks=1,
            enable_idempotence="false",
        )
    s.producer("tx", compression_type="lz4", transactional_id="tx-mixed", linger_ms=2, batch_size=4096).init(
        "tx"
    )
    for block in range(40):
        name = rng.choice([f"{kind}-{codec}" for kind in ("idem", "plain") for codec in CODECS] + ["tx"])
        if name == "tx":
            s.begin("tx")
        for i in range(rng.randint(5, 30)):
            value = None if rng.random() < 0.1 else _value(rng, block * 100 + i)
            s.send(
                name,
                MIXED,
                rng.randint(0, 2),
                b"m-%02d" % rng.randint(0, 60),
                value,
                headers=(("block", b"%d" % block),),
            )
        if name == "tx":
            s.abort("tx") if block % 3 == 0 else s.commit("tx")
        else:
            s.flush(name)
    for codec in CODECS:
        s.close(f"idem-{codec}").close(f"plain-{codec}")
    s.close("tx")


def _extra_script(s: Script, rng: random.Random) -> None:
    for topic, configs in EXTRA.items():
        kafka_configs = {**TOPIC_CONFIGS, **configs}
        kafka_configs["internal.segment.bytes"] = kafka_configs.pop("segment.bytes", SEGMENT_BYTES)
        s.topic(topic, 1, **kafka_configs)
    s.producer("x", linger_ms=2, batch_size=512)
    s.producer("tx", linger_ms=2, batch_size=1024, transactional_id="tx-retention-0").init("tx")
    for block in range(16):  # tombstones, committed and aborted transactions
        txn = block % 2 == 1
        if txn:
            s.begin("tx")
        for i in range(rng.randint(5, 25)):
            value = None if rng.random() < 0.2 else _value(rng, block * 100 + i)
            s.send("tx" if txn else "x", NO_RETENTION, 0, b"key-%02d" % rng.randint(0, 30), value)
        if txn:
            s.abort("tx") if block % 4 == 3 else s.commit("tx")
        else:
            s.flush("x")
    # Small batches of increasing timestamps: every segment rolls on a full index. The batches are
    # the flushes' (a linger no flush waits for) and every record's timestamp its own millisecond,
    # so the indexes, and the round-2 group whose cleaned time index overflows, do not depend on the
    # producer's timing.
    s.producer("ix", linger_ms=600_000, batch_size=16384)
    start = int(time.time() * 1000) - 10_000
    for i in range(1500):
        key, value = b"k%03d" % rng.randint(0, 200), b"value-%05d-%s" % (i, b"x" * 12)
        s.send("ix", INDEX_FULL, 0, key, value, timestamp=start + i)
        if i % 7 == 6:
            s.flush("ix")
    s.close("ix")
    # Idempotent producers writing three days ago, whose keys the later ones overwrite.
    old = int(time.time() * 1000) - 3 * PRODUCER_ID_EXPIRATION_MS
    for n in range(12):
        s.producer(f"idle-{n}", linger_ms=0, batch_size=512)
    for r in range(3):
        for n in range(12):
            for i in range(rng.randint(2, 6)):
                key, value = b"k%02d" % rng.randint(0, 15), b"v%05d" % i * 10
                s.send(f"idle-{n}", IDLE, 0, key, value, timestamp=old + r * 1000 + n)
            s.flush(f"idle-{n}")
    for n in range(12):
        s.close(f"idle-{n}")
    # Three days old: distinct keys on RETAINED (its old segments stay full, one group each, however
    # often they are cleaned), 40 keys overwritten on LAG; then records of now on both.
    s.producer("old", linger_ms=2, batch_size=512)
    for i in range(400):
        s.send("old", RETAINED, 0, b"old-%04d" % i, _value(rng, i), timestamp=old + i)
        s.send("old", LAG, 0, b"lag-%02d" % rng.randint(0, 39), _value(rng, i), timestamp=old + i)
        if i % 5 == 4:
            s.flush("old")
    s.close("old")
    for i in range(400):
        value = None if rng.random() < 0.1 else _value(rng, i)
        s.send("x", RETAINED, 0, b"new-%02d" % rng.randint(0, 29), value)
        s.send("x", LAG, 0, b"lag-%02d" % rng.randint(0, 39), value)
        if i % 5 == 4:
            s.flush("x")
    s.close("x").close("tx")


def _partitions(topics) -> list[tuple[str, int]]:
    return [(t, p) for t in topics for p in range(3 if t == MIXED else 1 if t in EXTRA else 2)]


def _retention(topic: str) -> int:
    return EXTRA.get(topic, {}).get("delete.retention.ms", RETENTION_MS)


def _snapshot(log_dir: Path, dest: Path) -> None:
    for topic, part in _partitions([*MATRIX, MIXED, *EXTRA]):
        shutil.copytree(
            log_dir / f"{topic}-{part}", dest / f"{topic}-{part}", ignore=shutil.ignore_patterns("*.deleted")
        )
    for name in ("cleaner-offset-checkpoint", "log-start-offset-checkpoint"):
        if (log_dir / name).exists():
            shutil.copy2(log_dir / name, dest / name)


def _first_base(part_dir: Path) -> int:
    return min(int(p.name.split(".")[0]) for p in part_dir.glob("*.log"))


def _clean_with_kafka(broker: Broker, round_no: int) -> tuple[int, int]:
    """One round of Kafka's cleaner: the broker started with it on until every partition is done
    (the index-full topic failed from round 2, the lag topic cleaned up to its lag, the segments
    past retention deleted); its (start, end) ms."""
    started = int(time.time() * 1000)
    broker.start(**CLEANER_ON)
    broker.wait_cleaned(
        _partitions([*MATRIX, MIXED, NO_RETENTION, IDLE, RETAINED] + ([INDEX_FULL] if round_no == 1 else []))
    )
    if round_no == 1:
        # Later rounds find nothing of it cleanable: its first segment, emptied by round 1, counts
        # as written at its mtime (LogSegment.largestTimestamp), which is within the lag.
        _wait_for(broker, re.compile(rf"cleaned log {LAG}-0 "))
    else:
        _wait_for(broker, re.compile(rf"cleaned log {INDEX_FULL}-0 |\({INDEX_FULL}-0\) as uncleanable"))
    _wait_until(
        lambda: _first_base(broker.log_dir / f"{RETAINED}-0") > 0, "the segments past retention.ms go"
    )
    finished = int(time.time() * 1000)
    broker.stop()
    return started, finished


def _clean_with_ours(log_dir: Path, now: int, report: Path, *extra: str) -> dict:
    code, out, err = run_job(
        str(log_dir),
        *JOB_ARGS,
        "--topic-config",
        str(report.parent / "topics.json"),
        "--now-ms",
        str(now),
        *extra,
        report=str(report),
    )
    failed = {p["topic"] for p in out["partitions"] if p["status"] == "failed"}
    assert failed <= {INDEX_FULL} and code == (1 if failed else 0), err
    return out


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    """Produce once; then ROUNDS rounds of Kafka's cleaner on one copy and of the job on another,
    each round's partition dirs kept. Round 2 also runs: a dry run of the job before its round;
    the job on a copy of Kafka's round 1 (`cross-ours`), and Kafka's cleaner on a copy of the job's
    round 1 (`cross-kafka`), each with its side's round-2 clock. Yields (root, {our now: Kafka's
    window}, {our round-2 now: the window of Kafka's cleaner on our round 1})."""
    kafka4.require()
    root = tmp_path_factory.mktemp("kafka4")
    rng = random.Random(31)
    script = Script()
    _matrix_script(script, rng)
    _mixed_script(script, rng)
    _extra_script(script, rng)
    (root / "topics.json").write_text(json.dumps(EXTRA))
    with Broker(root / "produced", {}) as broker:
        broker.produce_fresh(script)
    assert (root / "produced" / "kafka-logs" / ".kafka_cleanshutdown").exists()
    for side in ("kafka", "ours"):
        shutil.copytree(root / "produced", root / side, symlinks=True)
    kafka_broker, cross_broker = Broker(root / "kafka", {}), Broker(root / "cross-kafka", {})
    stamped, cross_stamped = {}, {}
    try:
        for r in range(1, ROUNDS + 1):
            for side in ("kafka", "ours", "cross-ours", "cross-kafka"):
                (root / side / "kafka-logs" / "cleaner-offset-checkpoint").unlink(missing_ok=True)
            window = _clean_with_kafka(kafka_broker, r)
            _snapshot(kafka_broker.log_dir, root / f"kafka-round{r}")
            if r == 1:
                shutil.copytree(root / "kafka", root / "cross-ours", symlinks=True)
            now = int(time.time() * 1000)
            if r == 2:
                dry = root / "dry-round2.json"
                _clean_with_ours(root / "ours" / "kafka-logs", now, dry, "--dry-run")
                _clean_with_ours(root / "cross-ours" / "kafka-logs", now, root / "cross-ours.json")
                _snapshot(root / "cross-ours" / "kafka-logs", root / "cross-ours-round2")
            _clean_with_ours(root / "ours" / "kafka-logs", now, root / f"report-round{r}.json")
            stamped[now] = window
            _snapshot(root / "ours" / "kafka-logs", root / f"ours-round{r}")
            if r == 1:
                shutil.copytree(root / "ours", root / "cross-kafka", symlinks=True)
            if r == 2:
                cross_stamped[now] = _clean_with_kafka(cross_broker, 2)
                _snapshot(cross_broker.log_dir, root / "cross-kafka-round2")
    finally:
        kafka_broker.stop()
        cross_broker.stop()
    yield root, stamped, cross_stamped


def _wait_for(broker: Broker, pattern: re.Pattern, timeout: float = 120) -> None:
    _wait_until(lambda: pattern.search(broker.log_text()), f"the broker logs {pattern.pattern}", timeout)


def _wait_until(done, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.3)


CELLS = [(f"{t}-{p}", r) for t, p in _partitions([*MATRIX, MIXED, *EXTRA]) for r in range(1, ROUNDS + 1)]


def _compare(kafka_dir: Path, ours_dir: Path, stamped: dict, scratch: Path) -> list[str]:
    """logdiff's differences; on the compact,delete topic the segments Kafka deleted past
    retention.ms (all below its first) are left out of ours first (test_compact_delete_...), and
    the producer snapshot at the log start offset of both: a broker deletes it when it loads the
    log (`ProducerStateManager.truncateAndReload`), which is no cleaner's doing."""
    topic = kafka_dir.name.rsplit("-", 1)[0]
    if topic == RETAINED:
        first = _first_base(kafka_dir)
        for side, src in (("kafka", kafka_dir), ("ours", ours_dir)):
            (scratch / side).mkdir(parents=True)
            for path in src.iterdir():
                base = int(path.name.split(".")[0]) if path.name[0].isdigit() else first + 1
                if base > first or (base == first and path.suffix != ".snapshot"):
                    shutil.copy2(path, scratch / side / path.name)
        kafka_dir, ours_dir = scratch / "kafka", scratch / "ours"
    interval = EXTRA.get(topic, {}).get("index.interval.bytes", 4096)
    return logdiff.compare_partition(kafka_dir, ours_dir, stamped, _retention(topic), interval)


def _same_checkpoint(kafka_side: Path, ours_side: Path, cell: str) -> None:
    topic, part = cell.rsplit("-", 1)
    kafka_cp = kafka4.read_checkpoint(kafka_side / "cleaner-offset-checkpoint")
    ours_cp = kafka4.read_checkpoint(ours_side / "cleaner-offset-checkpoint")
    # no entry on either side for a log with nothing cleanable (the lag topic from round 2)
    assert kafka_cp.get((topic, int(part))) == ours_cp.get((topic, int(part)))


# After round 1 the index-full topic is checked by test_index_full_...: Kafka has swapped in part
# of it; the compact,delete one by test_compact_delete_...: the job's next groups hold a segment
# Kafka deleted.
@pytest.mark.parametrize(
    ("cell", "round_no"),
    [c for c in CELLS if not (c[0] in (f"{INDEX_FULL}-0", f"{RETAINED}-0") and c[1] > 1)],
)
def test_kafka_cleaner_and_ours_agree(rounds, cell, round_no, tmp_path):
    root, stamped, _ = rounds
    kafka_side, ours_side = root / f"kafka-round{round_no}", root / f"ours-round{round_no}"
    diffs = _compare(kafka_side / cell, ours_side / cell, stamped, tmp_path / cell)
    assert not diffs, "\n".join(d[:600] for d in diffs[:20])
    _same_checkpoint(kafka_side, ours_side, cell)


CROSS_CELLS = [c for c, r in CELLS if r == 2 and c != f"{INDEX_FULL}-0"]


@pytest.mark.parametrize("cell", CROSS_CELLS)
def test_ours_on_kafkas_round_1_agrees_with_kafkas_round_2(rounds, cell, tmp_path):
    """The job cleaning on top of Kafka's cleaner's output (horizons it stamped, markers it
    emptied, segments it grouped and deleted) writes what Kafka's second round writes."""
    root, stamped, _ = rounds
    kafka_side, ours_side = root / "kafka-round2", root / "cross-ours-round2"
    diffs = _compare(kafka_side / cell, ours_side / cell, stamped, tmp_path / cell)
    assert not diffs, "\n".join(d[:600] for d in diffs[:20])
    _same_checkpoint(kafka_side, ours_side, cell)


@pytest.mark.parametrize("cell", [c for c in CROSS_CELLS if c != f"{RETAINED}-0"])
def test_kafka_on_our_round_1_agrees_with_our_round_2(rounds, cell, tmp_path):
    """Kafka's cleaner cleaning on top of the job's output writes what the job's second round writes."""
    root, _, cross_stamped = rounds
    kafka_side, ours_side = root / "cross-kafka-round2", root / "ours-round2"
    diffs = _compare(kafka_side / cell, ours_side / cell, cross_stamped, tmp_path / cell)
    assert not diffs, "\n".join(d[:600] for d in diffs[:20])
    _same_checkpoint(kafka_side, ours_side, cell)


def test_dry_run_fails_the_index_full_partition_as_the_round_does(rounds):
    """Round 2's dry run, on the log its round then cleans, fails the partitions the round fails
    with the round's reasons: the index-full one when its round-2 group needs more index entries
    than it holds (docs/kafka-rules.md#index-room; whether it does follows the producer's batches,
    tests/unit/test_rewrite_unit.py holds the rule alone), and no other."""
    root, *_ = rounds
    dry, real = (json.loads((root / n).read_text()) for n in ("dry-round2.json", "report-round2.json"))
    assert dry["args"]["dry_run"] and not real["args"].get("dry_run")
    failed = {
        (p["topic"], p["partition"]): p["reason"] for p in real["partitions"] if p["status"] == "failed"
    }
    assert set(failed) <= {(INDEX_FULL, 0)}
    assert {
        (p["topic"], p["partition"]): p["reason"] for p in dry["partitions"] if p["status"] == "failed"
    } == failed
    assert dry["totals"]["failed"] == real["totals"]["failed"] == len(failed)


def _end(path: Path) -> int:
    """The offset after a segment's last batch (its base when empty)."""
    return max((b.last_offset + 1 for b in logdiff.read_batches(path)), default=int(path.stem))


def _max_timestamp(path: Path) -> int:
    """`LogSegment.largestTimestamp`: an empty segment's is its mtime."""
    return max(
        (b.header()["max_timestamp"] for b in logdiff.read_batches(path)), default=logdiff.mtime_ms(path)
    )


def test_compact_delete_past_retention(rounds, tmp_path):
    """Kafka 4.4.0's cleaner thread deletes the segments of a compact,delete log past retention.ms
    and moves the log start offset; the job compacts only and keeps them (documented), cleaning the
    rest as Kafka does in round 1 (test_kafka_cleaner_and_ours_agree). From round 2 the job groups
    its last segment past retention (round 1 emptied it of its newer records) with the newer ones
    Kafka groups without it: the merged segment starts below Kafka's log start and is not past
    retention."""
    root, stamped, _ = rounds
    cell = f"{RETAINED}-0"
    kafka1, ours1 = root / "kafka-round1" / cell, root / "ours-round1" / cell
    first = _first_base(kafka1)
    assert first > 0 and _first_base(ours1) == 0
    window_start = min(stamped[now][0] for now in stamped)
    for path in sorted(ours1.glob("*.log")):  # what Kafka deleted: every segment past retention, no other
        past = _max_timestamp(path) < window_start - DAY_MS
        assert past == (int(path.stem) < first), path.name
    for r in range(2, ROUNDS + 1):
        kafka_r, ours_r = root / f"kafka-round{r}" / cell, root / f"ours-round{r}" / cell
        if not _compare(kafka_r, ours_r, stamped, tmp_path / f"round{r}"):
            continue  # no segment the job kept was grouped with a newer one this time
        # what parts them: one of ours starting below Kafka's log start, holding records past it
        # and not past retention, where Kafka's segments start at its log start
        [merged] = [p for p in ours_r.glob("*.log") if int(p.stem) < first < _end(p)]
        assert _max_timestamp(merged) >= window_start - DAY_MS
        kafka_bases = [int(p.stem) for p in kafka_r.glob("*.log")]
        assert first in kafka_bases and int(merged.stem) not in kafka_bases
    for r in range(1, ROUNDS + 1):
        assert _first_base(root / f"kafka-round{r}" / cell) == first
        assert _first_base(root / f"ours-round{r}" / cell) == 0
        # Kafka checkpoints a log start offset only beyond the first segment's base: on both sides
        # the log starts at its first segment.
        for side in ("kafka", "ours"):
            starts = kafka4.read_checkpoint(root / f"{side}-round{r}" / "log-start-offset-checkpoint")
            assert (RETAINED, 0) not in starts


def test_index_full_fails_kafka_and_ours_on_the_same_group(rounds):
    """Round 2 of the index-full topic: Kafka's cleaner fails appending to a full time index of
    the cleaned segment of some group (and marks the partition uncleanable); the job fails the
    partition naming that group's first segment, and leaves it as round 1 left it."""
    root, *_ = rounds
    log = (root / "kafka" / "logs" / "broker-2.log").read_text(errors="replace")
    assert re.search(rf"\({INDEX_FULL}-0\) as uncleanable", log)
    assert "Attempt to append to a full time index" in log
    kafka_group = re.findall(rf"Cleaning LogSegment\(baseOffset=\d+.*in log {INDEX_FULL}-0 into (\d+) ", log)[
        -1
    ]
    report = json.loads((root / "report-round2.json").read_text())
    [ours] = [p for p in report["partitions"] if p["topic"] == INDEX_FULL]
    assert ours["status"] == "failed"
    assert f"{int(kafka_group):020d}.log: the cleaned segment's .timeindex" in ours["reason"]
    round1, round2 = (root / f"ours-round{r}" / f"{INDEX_FULL}-0" for r in (1, 2))
    assert logdiff.segment_files(round1) == logdiff.segment_files(round2)
    assert all((round1 / n).read_bytes() == (round2 / n).read_bytes() for n in logdiff.segment_files(round1))


# --- the broker loads and serves our output --------------------------------------------------------

MORE = ("mixed", "none-txn", "zstd-idem")  # topics that get more data once the broker serves ours
TXNINDEX_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first offset, ABORT marker offset, LSO


def _file_records(part_dir: Path) -> list[tuple]:
    """What a read_committed consumer must read from a partition's files, decoded by kafka-python:
    the data records of every batch but those of aborted transactions (`.txnindex` entries)."""
    aborted = []
    for path in sorted(part_dir.glob("*.txnindex")):
        data = path.read_bytes()
        aborted += [
            TXNINDEX_ENTRY.unpack_from(data, i)[1:4] for i in range(0, len(data), TXNINDEX_ENTRY.size)
        ]
    out = []
    for path in sorted(part_dir.glob("*.log")):
        for batch in logdiff.read_batches(path):
            h = batch.header()
            if h["attributes"] & logdiff.CONTROL:
                continue
            in_aborted = any(
                pid == h["producer_id"] and first <= h["base_offset"] <= end for pid, first, end in aborted
            )
            if h["attributes"] & TRANSACTIONAL and in_aborted:
                continue
            out += batch.records()
    return out


def _log_end(part_dir: Path) -> int:
    return max(
        (b.last_offset + 1 for p in part_dir.glob("*.log") for b in logdiff.read_batches(p)), default=0
    )


def _more_script(rng: random.Random) -> tuple[Script, dict]:
    """More records for MORE's partitions, idempotent and transactional (reusing the transactional
    ids of the produce phase: the broker bumps their epochs), with one aborted transaction. Returns
    the script and the committed (key, value, headers) per partition in order."""
    s, committed = Script(), {}
    for topic in MORE:
        parts = 3 if topic == MIXED else 2
        codec = "lz4" if topic == MIXED else topic.split("-")[0]
        s.producer("more", compression_type=codec, linger_ms=2, batch_size=2048)
        s.producer(
            "tx", compression_type=codec, transactional_id=f"tx-{topic}", linger_ms=2, batch_size=2048
        ).init("tx")
        for block in range(12):
            name = "tx" if block % 3 else "more"
            if name == "tx":
                s.begin("tx")
            sent = []
            for i in range(80):  # enough for every partition to roll a segment: its cleaner has work
                part, key = rng.randrange(parts), b"more-%02d" % rng.randint(0, 30)
                value = None if rng.random() < 0.1 else _value(rng, 10_000 + block * 100 + i)
                headers = (("more", b"%d" % block),)
                s.send(name, topic, part, key, value, headers=headers)
                sent.append(((topic, part), (key, value, headers)))
            if name == "tx" and block % 3 == 2:
                s.abort("tx")
                continue
            s.commit("tx") if name == "tx" else s.flush("more")
            for tp, record in sent:
                committed.setdefault(tp, []).append(record)
        s.close("more").close("tx")
    return s, committed


@pytest.fixture(scope="module")
def served(rounds):
    """The broker on our output after the last round: what it logs while loading, what a consumer
    reads; then more data produced, and the broker's own cleaner on top."""
    root, *_ = rounds
    broker = Broker(root / "ours", {})
    topics = [*MATRIX, MIXED, *EXTRA]
    parts = {tp: broker.log_dir / f"{tp[0]}-{tp[1]}" for tp in _partitions(topics)}
    out = {
        "clean_shutdown_file": (broker.log_dir / ".kafka_cleanshutdown").exists(),
        "files": {tp: _file_records(d) for tp, d in parts.items()},
        "log_end": {tp: _log_end(d) for tp, d in parts.items()},
    }
    script, out["committed"] = _more_script(random.Random(7))
    try:
        broker.start()
        out["load_problems"] = kafka4.load_problems(broker.log_text(), topics)
        out["served"] = broker.consume(*topics)
        broker.run_client(script)
        out["after_produce"] = broker.consume(*topics)
        broker.stop()
        broker.start(**CLEANER_ON)
        # Kafka fails on the index-full topic; the lag topic's checkpoint stops at its lag
        broker.wait_cleaned([tp for tp in parts if tp[0] not in (INDEX_FULL, LAG)])
        retained = broker.log_dir / f"{RETAINED}-0"
        _wait_until(lambda: _first_base(retained) > 0, "the broker deletes our segments past retention.ms")
        out["after_clean"] = broker.consume(*topics)
        out["retained_first"] = _first_base(retained)
        out["cleaner_log"] = broker.log_text()
    finally:
        broker.stop()
    return out


def test_broker_loads_our_output_without_recovery(served):
    assert served["clean_shutdown_file"]  # the job keeps the broker's clean shutdown marker
    assert served["load_problems"] == []


def test_consumer_reads_exactly_the_records_we_kept(served):
    for tp, records in served["files"].items():
        assert served["served"][tp] == records, tp
    assert sum(map(len, served["files"].values())) > 1000


def test_producing_more_works(served):
    for tp, before in served["served"].items():
        after = served["after_produce"][tp]
        assert after[: len(before)] == before, tp
        new = after[len(before) :]
        assert [(k, v, h) for _, _, k, v, h in new] == served["committed"].get(tp, []), tp
        assert all(o >= served["log_end"][tp] for o, *_ in new), tp
    assert all(served["committed"].get((t, p)) for t in MORE for p in range(3 if t == MIXED else 2))


# A single-node KRaft broker's own registration, retried while its controller is still becoming
# the active one: logged at INFO with its stack trace, a start-up race of the broker, not a
# complaint about the log.
STARTUP_RETRY = re.compile(
    r"INFO \[QuorumController id=\d+\] registerController: event failed with NotControllerException"
)


def complaints(log: str) -> list[str]:
    """The lines of a broker log that report a problem: ERROR, an exception, an uncleanable log;
    the records (a line and its stack trace) of the start-up retry above left out."""
    out, skipping = [], False
    for line in log.splitlines():
        if line.startswith("["):  # a record's first line; the others are its stack trace
            # the index-full topic: Kafka's cleaner fails on it (test_index_full_fails_...)
            skipping = bool(STARTUP_RETRY.search(line)) or f"{INDEX_FULL}-0" in line
        if not skipping and re.search("ERROR|Exception|uncleanable", line):
            out.append(line)
    return out


def test_broker_deletes_our_segments_past_retention(served, rounds):
    """What the job leaves past retention.ms on a compact,delete log, the broker's cleaner thread
    deletes on its first pass: every segment before the first one within retention.ms; the one
    the job merged (test_compact_delete_past_retention) stays, so the log starts below Kafka's."""
    root, *_ = rounds
    ours = sorted((root / f"ours-round{ROUNDS}" / f"{RETAINED}-0").glob("*.log"))
    cutoff = int(time.time() * 1000) - DAY_MS
    first_within = next(int(p.stem) for p in ours if _max_timestamp(p) >= cutoff)
    assert served["retained_first"] == first_within
    assert first_within < _first_base(root / f"kafka-round{ROUNDS}" / f"{RETAINED}-0")
    before, after = served["after_produce"][(RETAINED, 0)], served["after_clean"][(RETAINED, 0)]
    assert after == [r for r in before if r[0] >= served["retained_first"]]


def test_broker_cleaner_cleans_on_top_of_ours(served):
    log = served["cleaner_log"]
    assert not complaints(log)
    for topic in MORE:
        for part in range(3 if topic == MIXED else 2):
            assert f"cleaned log {topic}-{part} " in log, (topic, part)
            before, after = served["after_produce"][(topic, part)], served["after_clean"][(topic, part)]
            assert len(after) < len(before)
            assert set(after) <= set(before)  # the cleaner only removes
            latest = {key: r for r in before for key in [r[2]]}
            assert [r for r in latest.values() if r[3] is not None and r not in after] == []
