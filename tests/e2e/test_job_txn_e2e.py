"""End to end through ./spark-submit.sh on generated logs with transactions, idempotent producers
and tombstones, over three cleaning rounds, checked with kafka-python.

Rounds mirror Kafka's `LogCleanerTest.runTwoPassClean` (every pass is `LogToClean(tp, log, 0,
activeSegment.baseOffset)`): before each round the cleaner checkpoint is removed, so the whole
log below the active segment is dirty again ("missing entry -> first dirty offset = log start",
docs/kafka-rules.md#cleaner-offset-checkpoint). Without that, a round after the first finds nothing: the dirty
section would lie in the active segment (checked below with a dry run).

* round 1 at NOW: aborted data goes, latest-per-key, tombstones get horizon NOW + R, markers stay;
* round 2 at NOW + R - 1: one ms before the tombstones' horizon: they stay; markers whose
  transaction has no data left become discardable and get their own horizon (NOW + 2R - 1);
* round 3 at NOW + 2R - 1: tombstones are gone, and so are the markers whose horizon passed.

The expected partition after every round is computed here, from kafka-python's decoding of that
round's input and the raw `.txnindex` bytes, by a small independent model of the rules in
docs/kafka-rules.md#transactions to #writing-retained-batches
(`expected_round`): no code of ours decides what is kept.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from e2ekit import REPO, run_job, segment_logs, v2_batches
from kafka.record.memory_records import MemoryRecords
from round_model import (
    ABORT,
    TXN_ENTRY,
    KBatch,
    R,
    decode_batches,
    expected_round,
    read_txn_entries,
    snapshot,
)

from compaction.format.batch import RecordBatch
from compaction.format.segment import iter_batches
from compaction.tools.generator import generate_log_dir
from compaction.tools.generator_plan import TXN_ABORTED

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000
NOWS = (NOW, NOW + R - 1, NOW + 2 * R - 1)
GENERATED_SEGMENT_BYTES = 50_000
SEGMENT_BYTES = (120_000, 12_000, 12_000)  # per round: several groups, transaction state crosses them


# --- the runs --------------------------------------------------------------------------------


def _parts(log_dir):
    return sorted(n for n in os.listdir(log_dir) if os.path.isdir(os.path.join(log_dir, n)))


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    root = tmp_path_factory.mktemp("txn")
    log_dir = str(root / "logs")
    manifest = generate_log_dir(
        log_dir,
        topics=(("ledger", 2),),
        records=5000,
        keys=250,
        codec="mixed",
        batch_records=(1, 12),
        segment_bytes=GENERATED_SEGMENT_BYTES,
        tombstone_ratio=0.15,
        transactions=0.45,
        idempotent=0.25,
        abort_ratio=0.35,
        txn_producers=4,
        idempotent_producers=2,
        txn_batches=3,
        headers=1,
        seed=23,
    )
    checkpoint = os.path.join(log_dir, "cleaner-offset-checkpoint")
    out = []
    for n, now in enumerate(NOWS):
        if n == 1:
            out_of_dry_run = _dry_run_after_first_round(log_dir, now)
        if os.path.exists(checkpoint):
            os.remove(checkpoint)  # runTwoPassClean: every pass cleans from offset 0
        before = {p: snapshot(os.path.join(log_dir, p)) for p in _parts(log_dir)}
        code, report, err = run_job(
            log_dir,
            "--now-ms",
            str(now),
            "--segment-bytes",
            str(SEGMENT_BYTES[n]),
            report=str(root / f"report-{n}.json"),
        )
        assert code == 0, err
        after = {p: snapshot(os.path.join(log_dir, p)) for p in _parts(log_dir)}
        out.append((now, before, after, report))
    return log_dir, manifest, out, out_of_dry_run


def _dry_run_after_first_round(log_dir, now):
    """What the planner says about a second round that keeps the checkpoint (no Spark)."""
    import sys

    sys.path.insert(0, REPO)
    from compaction.cli.options import parse_args
    from compaction.round import run

    code, report = run(
        parse_args(
            ["--log-dir", log_dir, "--now-ms", str(now), "--plan-only", "--min-cleanable-dirty-ratio", "0"]
        )
    )
    assert code == 0
    return report


def test_every_round_cleans_every_partition(rounds):
    _, _, out, _ = rounds
    for now, before, _, report in out:
        assert {p["status"] for p in report["partitions"]} == {"cleaned"}, now
        assert len(report["partitions"]) == len(before)
        assert all(p["groups"] >= 2 for p in report["partitions"]), (now, report["partitions"])


def test_without_a_checkpoint_reset_the_second_round_has_nothing_to_clean(rounds):
    _, _, _, dry = rounds
    for p in dry["partitions"]:
        assert p["status"] == "skipped" and p["reason"] == "nothing cleanable: active segment only", p


@pytest.mark.parametrize("n", range(len(NOWS)))
def test_round_matches_the_model(rounds, n):
    _, _, out, _ = rounds
    now, before, after, _ = out[n]
    for part in before:
        expected, _ = expected_round(before[part], now)
        got = after[part].batches
        assert [(b.base, b.last) for b in got] == [(b.base, b.last) for b in expected], part
        for g, e in zip(got, expected):
            assert g == e, (part, n, g, e)


@pytest.mark.parametrize("n", range(len(NOWS)))
def test_txnindex_holds_exactly_the_kept_abort_markers(rounds, n):
    _, _, out, _ = rounds
    now, before, after, _ = out[n]
    kept_total = 0
    for part in before:
        _, kept = expected_round(before[part], now)
        snap = after[part]
        got = set()
        for i, (base, batches, entries) in enumerate(snap.segments[:-1]):
            end = snap.segments[i + 1][0]
            assert all(base <= e[2] < end for e in entries), (part, base, entries)
            assert [e[2] for e in entries] == sorted(e[2] for e in entries)
            markers = {b.last for b in batches if b.control_type == ABORT}
            assert {e[2] for e in entries} <= markers
            got |= set(entries)
        assert got == kept, (part, n)
        kept_total += len(kept)
    if n == 0:
        assert kept_total > 0  # the first round keeps every ABORT marker with its entry


def test_aborted_records_never_survive(rounds):
    _, manifest, out, _ = rounds
    for (topic, partition), pm in manifest.partitions.items():
        aborted = {int(o) for o in (pm.txn == TXN_ABORTED).nonzero()[0] if pm.key_id[o] >= 0}
        assert aborted
        part = f"{topic}-{partition}"
        for _, _, after, _ in out:
            snap = after[part]
            survivors = {r[0] for b in snap.batches if not b.control for r in b.records}
            assert all(o >= snap.active_base for o in survivors & aborted), part


def test_committed_records_follow_latest_per_key(rounds):
    """After round 1: below the active segment, exactly the latest non-aborted record of each key."""
    _, _, out, _ = rounds
    _, before, after, _ = out[0]
    for part, snap in before.items():
        aborted = set()
        by_pid_open: dict[int, list] = {}
        for b in snap.batches:  # aborted by the markers alone (independent of the .txnindex)
            if b.txn and not b.control:
                by_pid_open.setdefault(b.pid, []).append(b)
            elif b.control and b.records:
                for d in by_pid_open.pop(b.pid, []):
                    if b.control_type == ABORT:
                        aborted |= {r[0] for r in d.records}
        latest = {}
        for b in snap.batches:
            if not b.control:
                for r in b.records:
                    if r[0] < snap.active_base and r[0] not in aborted:
                        latest[r[2]] = r
        got = [r for b in after[part].batches if not b.control for r in b.records if r[0] < snap.active_base]
        assert got == sorted(latest.values()), part


def test_every_producer_keeps_its_last_batch(rounds):
    _, _, out, _ = rounds
    _, before0, _, _ = out[0]
    for part, snap in before0.items():
        last = {}
        for b in snap.batches:
            if b.pid >= 0 and not b.control:
                last[b.pid] = (b.base, b.last)
        assert len(last) >= 4
        for _, _, after, _ in out:
            present = {(b.pid, b.base, b.last) for b in after[part].batches}
            for pid, (base, lst) in last.items():
                assert (pid, base, lst) in present, (part, pid)


def test_tombstones_and_markers_leave_when_the_rules_say(rounds):
    _, _, out, _ = rounds
    below = lambda snap: [b for b in snap.batches if b.last < snap.active_base]  # noqa: E731
    tomb = lambda snap: [r for b in below(snap) if not b.control for r in b.records if r[3] is None]  # noqa: E731
    markers = lambda snap: [b for b in below(snap) if b.control and b.records]  # noqa: E731
    for part in out[0][1]:
        r1, r2, r3 = (o[2][part] for o in out)
        assert tomb(r1) and tomb(r2) == tomb(r1)  # one ms before the horizon they are all still there
        assert all(
            b.horizon == NOW + R for b in below(r1) if not b.control and any(r[3] is None for r in b.records)
        )
        assert tomb(r3) == []
        assert len(markers(r1)) == len(markers(out[0][1][part]))  # round 1 keeps every marker
        with_horizon = [b for b in markers(r2) if b.horizon is not None]
        assert with_horizon and all(b.horizon == NOWS[1] + R for b in with_horizon)
        assert len(markers(r3)) == len(markers(r2)) - len(with_horizon)


def test_everything_decodes_with_our_reader_too(rounds):
    log_dir, _, _, _ = rounds
    for part in _parts(log_dir):
        part_dir = os.path.join(log_dir, part)
        for log in segment_logs(part_dir):
            data = open(log, "rb").read()
            batches = list(iter_batches(data, log))
            assert all(isinstance(b, RecordBatch) and b.crc_valid() for b in batches)
            assert [(b.header.base_offset, b.header.last_offset) for b in batches] == [
                (b.base, b.last) for b in decode_batches(log)
            ]
        assert not [n for n in os.listdir(part_dir) if n.endswith((".cleaned", ".swap", ".deleted"))]


# --- an open transaction bounds the round (docs/kafka-rules.md#last-stable-offset, #cleanable-range) --------


def _open_a_transaction(part_dir: str) -> int:
    """Make the transaction of the next-to-last segment's first transactional batch open (no marker
    up to the end of the log) by removing its producer's later batches, as if the log ended while
    it was ongoing. Returns the first unstable offset (that transaction's first offset)."""
    logs = segment_logs(part_dir)
    seg = decode_batches(logs[-2])
    first = next(b for b in seg if b.txn and not b.control)
    _drop_batches(logs[-2:], first.pid, first.base)
    open_txns: dict[int, int] = {}  # the first unstable offset, from kafka-python's view of the log
    for b in snapshot(part_dir).batches:
        if b.control and b.records:
            open_txns.pop(b.pid, None)
        elif b.txn and not b.control:
            open_txns.setdefault(b.pid, b.base)
    assert list(open_txns) == [first.pid]
    return open_txns[first.pid]


def _drop_batches(logs: list[str], pid: int, after: int) -> None:
    """Remove the batches of producer `pid` past offset `after` from the segments `logs` (and their
    `.txnindex` entries), their indexes left to be rebuilt."""
    for log in logs:
        kept = [
            raw
            for base, raw in v2_batches(open(log, "rb").read())
            if not (decode_batches_raw(raw).pid == pid and base > after)
        ]
        with open(log, "wb") as fh:
            fh.write(b"".join(kept))
        stem = log[: -len(".log")]
        for suffix in (".index", ".timeindex"):  # positions changed: let them be rebuilt
            if os.path.exists(stem + suffix):
                os.remove(stem + suffix)
        entries = [e for e in read_txn_entries(stem + ".txnindex") if not (e[0] == pid and e[2] > after)]
        if os.path.exists(stem + ".txnindex"):
            with open(stem + ".txnindex", "wb") as fh:
                fh.write(b"".join(TXN_ENTRY.pack(0, *e) for e in entries))


def decode_batches_raw(raw: bytes) -> KBatch:
    b = MemoryRecords(raw).next_batch()
    return KBatch(
        b.base_offset,
        b.last_offset,
        b.producer_id,
        b.producer_epoch,
        bool(b.is_transactional),
        bool(b.is_control_batch),
        None,
        (),
    )


# Both paths re-plan a partition whose scan finds an open transaction below the planned bound: a
# task compacting it whole (spark/stages.py) and the ranges stage's tasks (steps/range_task.py),
# chosen for every partition by partitionTaskMaxBytes=0.
PATHS = {"whole": (), "ranges": ("--conf", "spark.kafka.compaction.partitionTaskMaxBytes=0")}


@pytest.fixture(scope="module", params=sorted(PATHS))
def open_txn(tmp_path_factory, request):
    root = tmp_path_factory.mktemp(f"open-txn-{request.param}")
    log_dir = str(root / "logs")
    generate_log_dir(
        log_dir,
        topics=(("ledger", 1),),
        records=3000,
        keys=150,
        codec="none",
        batch_records=(1, 12),
        segment_bytes=40_000,
        tombstone_ratio=0.1,
        transactions=0.5,
        idempotent=0.2,
        abort_ratio=0.3,
        txn_producers=4,
        txn_batches=3,
        seed=5,
    )
    part_dir = os.path.join(log_dir, "ledger-0")
    first_unstable = _open_a_transaction(part_dir)
    before = snapshot(part_dir)
    raw_before = {log: open(log, "rb").read() for log in segment_logs(part_dir)}
    code, report, err = run_job(
        log_dir, "--now-ms", str(NOW), *PATHS[request.param], report=str(root / "report.json")
    )
    assert code == 0, err
    assert bool(report["timings"].get("rangesSeconds")) == (request.param == "ranges"), report["timings"]
    return part_dir, first_unstable, before, raw_before, report


def test_open_transaction_bounds_the_round(open_txn):
    part_dir, first_unstable, before, raw_before, report = open_txn
    bases = [base for base, _, _ in before.segments]
    bound = max(b for b in bases if b <= first_unstable)  # the segment holding the LSO is not cleaned
    assert bound < before.active_base
    (entry,) = report["partitions"]
    assert entry["status"] == "cleaned", entry
    assert entry["firstUncleanableOffset"] == bound
    for log, data in raw_before.items():
        if int(os.path.basename(log)[:20]) >= bound:
            assert open(log, "rb").read() == data, log
    expected, _ = expected_round(replace(before, active_base=bound), NOW)
    assert snapshot(part_dir).batches == expected


# --- producer expiry (docs/kafka-rules.md#producer-state) ----------------------------------------
# An idempotent producer that stopped in the first segment: every later write of its keys empties
# its last batch, kept for it only while it has not expired. The generated timestamps are ~100 days
# before NOW, so Kafka's default (one day) expires it; the age of its last batch is the boundary.
EXPIRY = ("default", "age", "age+1")


@pytest.fixture(scope="module", params=EXPIRY)
def idle_producer(tmp_path_factory, request):
    root = tmp_path_factory.mktemp(f"idle-{request.param}")
    log_dir = str(root / "logs")
    generate_log_dir(
        log_dir,
        topics=(("ledger", 1),),
        records=3000,
        keys=60,
        codec="none",
        batch_records=(1, 6),
        segment_bytes=30_000,
        idempotent=0.5,
        idempotent_producers=3,
        seed=11,
    )
    part_dir = os.path.join(log_dir, "ledger-0")
    logs = segment_logs(part_dir)
    first_segment = decode_batches(logs[0])
    idle = next(b.pid for b in first_segment if b.pid >= 0 and not b.txn)
    last = max(b.last for b in first_segment if b.pid == idle)
    _drop_batches(logs[1:], idle, last)
    before = snapshot(part_dir)
    assert before.batches[-1].pid != idle  # the log end, the generator's high watermark, is unchanged
    age = NOW - max(b.max_ts for b in before.batches if b.pid == idle)
    expiration = {"default": 86_400_000, "age": age, "age+1": age + 1}[request.param]
    flag = () if request.param == "default" else ("--producer-id-expiration-ms", str(expiration))
    code, _, err = run_job(log_dir, "--now-ms", str(NOW), *flag, report=str(root / "report.json"))
    assert code == 0, err
    return request.param, idle, last, before, expiration, snapshot(part_dir)


def test_an_idle_producers_emptied_last_batch_goes_once_it_expired(idle_producer):
    param, idle, last, before, expiration, after = idle_producer
    expected, _ = expected_round(before, NOW, expiration=expiration)
    assert after.batches == expected
    expired, _ = expected_round(before, NOW, expiration=1)
    never, _ = expected_round(before, NOW, expiration=2**62)
    assert expired != never  # the idle producer's last batch is emptied: expiry decides whether it stays
    at_last = [b for b in after.batches if b.pid == idle and b.last == last]
    if param == "age+1":
        assert len(at_last) == 1 and at_last[0].records == ()  # not expired: kept empty
    else:
        assert at_last == []
