"""A real Kafka 4.x broker (tests/helpers/kafka4.py) loads a snapshot the job wrote with
`--output-dir --as-of-offset` and serves exactly its records.

The broker writes a compacted topic (idempotent lz4 batches, gzip transactions committed and
aborted, tombstones, small segments) and stops. The job writes the partition as of a random offset
at which no transaction is open into a new log dir. That partition dir and its checkpoint entries
replace the broker's (a restore into the same cluster, so the topic id matches), the broker starts:
it loads the snapshot without recovering it, and a read_committed consumer from offset 0 reads
exactly the data records of the snapshot's files (kafka-python's decoding), all below the cut.
"""

from __future__ import annotations

import random
import shutil

import kafka4
import pytest
from e2ekit import run_job
from kafka4 import Broker, Script
from round_model import cut_snapshot, snapshot

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TOPIC = "snap"
CHECKPOINTS = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "cleaner-offset-checkpoint")


def _script(rng: random.Random) -> Script:
    s = Script()
    s.topic(TOPIC, 1, **{"cleanup.policy": "compact", "internal.segment.bytes": 8192})
    s.producer("p", compression_type="lz4", linger_ms=2, batch_size=2048)
    s.producer("t", compression_type="gzip", linger_ms=2, batch_size=2048, transactional_id="tx-snap").init(
        "t"
    )
    for block in range(18):
        txn = block % 2 == 1
        if txn:
            s.begin("t")
        for i in range(rng.randint(10, 30)):
            value = None if rng.random() < 0.1 else b"value-%d-%d" % (block, i)
            s.send(
                "t" if txn else "p",
                TOPIC,
                0,
                b"key-%02d" % rng.randint(0, 25),
                value,
                headers=(("block", b"%d" % block),),
            )
        if txn:
            s.abort("t") if block % 4 == 3 else s.commit("t")
        else:
            s.flush("p")
    return s.close("p").close("t")


def _merge_checkpoint(path, entries: dict) -> None:
    current = kafka4.read_checkpoint(path) if path.exists() else {}
    merged = {**current, **entries}
    path.write_text(f"0\n{len(merged)}\n" + "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(merged.items())))


def test_a_broker_loads_a_snapshot_and_serves_exactly_its_records(tmp_path):
    kafka4.require()
    rng = random.Random(29)
    broker = Broker(tmp_path / "broker", {})
    try:
        broker.produce_fresh(_script(rng))
    finally:
        broker.stop()
    part = broker.log_dir / f"{TOPIC}-0"
    source = snapshot(str(part))
    ends = [b.last + 1 for b in source.batches]
    stable = [e for e in ends[len(ends) // 3 : -len(ends) // 4] if cut_snapshot(source, None, e)[2] is None]
    cut = rng.choice(stable)
    out = tmp_path / "out"
    code, report, err = run_job(
        str(broker.log_dir),
        "--topics",
        TOPIC,
        "--output-dir",
        str(out),
        "--as-of-offset",
        f"{TOPIC}:0={cut}",
        report=str(tmp_path / "report.json"),
    )
    assert code == 0, err
    assert [(p["status"], p["cut"]["endOffset"]) for p in report["partitions"]] == [("cleaned", cut)]

    shutil.rmtree(part)  # the restore: the snapshot's partition dir and checkpoint entries
    shutil.copytree(out / f"{TOPIC}-0", part)
    for name in CHECKPOINTS:
        _merge_checkpoint(broker.log_dir / name, kafka4.read_checkpoint(out / name))
    kept = [
        (r[0], r[1], r[2], r[3], r[4])
        for b in snapshot(str(part)).batches
        if not b.control
        for r in b.records
    ]
    try:
        broker.start()
        loading = broker.log_text().split("Kafka Server started")[0]
        served = broker.consume(TOPIC)[(TOPIC, 0)]
    finally:
        broker.stop()
    assert not [
        line for line in loading.splitlines() if f"{TOPIC}-0" in line and kafka4.RECOVERY_LINES.search(line)
    ]
    assert served == kept
    assert kept and all(o < cut for o, *_ in kept)
    assert len({r[2] for r in kept}) == len(kept)  # one record per key: the snapshot is compacted
