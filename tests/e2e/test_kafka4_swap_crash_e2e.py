"""A round stopped half-way through the first step of its swap (some `.cleaned` files renamed to
`.swap`, the others not), then a real Kafka 4.4 broker (tests/helpers/kafka4.py) started on the
log dir: once our recovery has run (what the next round does first), and on the dir as the crash
left it (a broker restarted before the job runs again: Kafka's `LogLoader` alone reads the
half-done swap). Either way the broker loads the partition and a read_committed consumer reads
no record that was not produced at its offset, the latest value of every key, and every record
from the round's bound on: nothing is lost.

The crash: the job runs with its crash point after the intent file (every `.cleaned` file written,
no rename done) and is killed there; then the commit's own code (`commit_partition`) runs step 1
again on a `Storage` that fails at the middle rename.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path

import kafka4
import pytest
from faultkit import kill_session, start_submit
from kafka4 import Broker, Script

from compaction.runtime.storage import Storage
from compaction.steps.commit import INTENT_FILE, Replacement, commit_partition
from compaction.steps.recover import recover_partition

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TOPIC = "swap-crash"
SEGMENT_BYTES = 4096
CONFIGS = {"cleanup.policy": "compact", "internal.segment.bytes": SEGMENT_BYTES}
JOB_ARGS = ("--segment-bytes", str(SEGMENT_BYTES), "--min-cleanable-dirty-ratio", "0.01", "--topics", TOPIC)


class Crash(Exception):
    pass


class CrashingStorage(Storage):
    """The local filesystem, failing at the rename after the first `renames`."""

    def __init__(self, renames: int) -> None:
        super().__init__()
        self.left = renames

    def rename(self, src: str, dst: str, *, durable: bool = True) -> None:
        if self.left == 0:
            raise Crash(f"crash before renaming {src}")
        self.left -= 1
        super().rename(src, dst, durable=durable)


def _produce(script: Script, rng: random.Random) -> None:
    """Keys overwritten many times (so that cleaning groups many segments into a few), committed
    and aborted transactions among idempotent writes (`.txnindex` files)."""
    script.topic(TOPIC, 1, **CONFIGS)
    script.producer("idem", enable_idempotence="true", linger_ms=0, batch_size=512)
    script.producer("tx", transactional_id="tx-swap", linger_ms=0, batch_size=512).init("tx")
    for block in range(24):
        name = "tx" if block % 4 == 3 else "idem"
        if name == "tx":
            script.begin("tx")
        for i in range(30):
            key = b"k%03d" % rng.randrange(150)
            value = None if rng.random() < 0.05 else b"v%d-%d-" % (block, i) + bytes(rng.randrange(40, 90))
            script.send(name, TOPIC, 0, key, value)
        if name == "tx":
            script.abort("tx") if block % 8 == 7 else script.commit("tx")
        else:
            script.flush("idem")
    script.close("idem").close("tx")


def _crash_at_intent(log_dir: Path) -> None:
    """The job, killed (its whole session) once its intent file is written."""
    mark = str(log_dir) + ".crashed"
    env = {"COMPACTION_CRASH_AT": "intent", "COMPACTION_CRASH_MARK": mark}
    proc = start_submit([str(log_dir)], str(log_dir) + ".report.json", *JOB_ARGS, env=env)
    deadline = time.monotonic() + 600
    while proc.poll() is None and not os.path.exists(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(mark), f"the job did not reach its crash point: {proc.stderr.read()[-3000:]}"
    kill_session(proc.pid)
    proc.wait(timeout=60)


def _step_one_half_done(part: Path) -> int:
    """Step 1 of the commit again, by the commit's code, failing at its middle rename. Returns how
    many `.cleaned` files there were."""
    intent = json.loads((part / INTENT_FILE).read_text())
    new_bases = sorted({int(n[:20]) for n in intent["new_files"]})
    old_bases = tuple(sorted({int(n[:20]) for n in intent["old_files"]}))
    # _intent only needs every new base and the union of the old ones: the same intent again.
    replacements = [Replacement(b, old_bases if i == 0 else ()) for i, b in enumerate(new_bases)]
    cleaned = len(intent["new_files"])
    with pytest.raises(Crash):
        commit_partition(CrashingStorage(cleaned // 2), str(part), replacements)
    return cleaned


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """(root, what a consumer read before the round, the round's bound): `root/recovered` and
    `root/as-left` hold the half-swapped log dir, the first after our recovery."""
    kafka4.require()
    root = tmp_path_factory.mktemp("swapcrash")
    script = Script()
    _produce(script, random.Random(5))
    with Broker(root / "produced", {}) as broker:
        broker.produce_fresh(script)
        before = broker.consume(TOPIC)[(TOPIC, 0)]
    log_dir = root / "produced" / "kafka-logs"
    part = log_dir / f"{TOPIC}-0"
    bound = max(int(n.name[:20]) for n in part.glob("*.log"))
    _crash_at_intent(log_dir)
    names = sorted(os.listdir(part))
    assert INTENT_FILE in names and any(n.endswith(".cleaned") for n in names), names
    cleaned = _step_one_half_done(part)
    names = sorted(os.listdir(part))
    swapped = [n for n in names if n.endswith(".swap")]
    assert 0 < len(swapped) < cleaned, names  # the crash is between the renames of step 1
    assert len({n[:20] for n in names if n.endswith((".swap", ".cleaned"))}) > 1, names  # several groups
    for side in ("recovered", "as-left"):
        shutil.copytree(root / "produced", root / side, symlinks=True)
    recover_partition(Storage.local(), str(root / "recovered" / "kafka-logs" / f"{TOPIC}-0"))
    return root, before, bound


def _serve(root: Path) -> tuple[list[tuple], list[str]]:
    broker = Broker(root, {})
    try:
        broker.start()
        problems = kafka4.load_problems(broker.log_text(), [TOPIC])
        return broker.consume(TOPIC)[(TOPIC, 0)], problems
    finally:
        broker.stop()


def _latest(records: list[tuple]) -> dict[bytes, tuple]:
    return {r[2]: r for r in records}  # (offset, timestamp, key, value, headers), in offset order


@pytest.mark.parametrize("side", ["recovered", "as-left"])
def test_a_broker_on_a_half_swapped_log_dir_loses_no_record(crashed, side):
    root, before, bound = crashed
    served, problems = _serve(root / side)
    produced = {r[0]: r for r in before}
    assert [r for r in served if produced.get(r[0]) != r] == []  # each one produced at its offset
    assert _latest(served) == _latest(before)
    assert [r for r in served if r[0] >= bound] == [r for r in before if r[0] >= bound]
    if side == "recovered":  # our recovery leaves a log the broker takes as it is
        assert problems == []
