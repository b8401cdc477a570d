"""Crash safety of compaction/steps/commit.py and recover.py (the swap protocol and LogLoader's recovery:
docs/kafka-rules.md#swap-protocol, #broker-load-checks).

A "crash" is simulated by letting the protocol's filesystem mutations (Storage.rename / delete /
write_durable) fail after N calls, at every N, then running `recover_partition`. The partition dir
must then hold exactly the old segment set or exactly the new one (names and bytes), never a mix,
never a lost file, and recovery must be idempotent. A SIGKILLed subprocess checks the same thing
for a real process death. Recovery without our intent file follows Kafka's LogLoader
(LogCleanerTest.testRecoveryAfterCrash).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager

import pytest
from faultkit import small_partition
from hypothesis import given, settings
from hypothesis import strategies as st
from index_oracle import index_files

from compaction.cli.options import parse_args
from compaction.format import batch as fb
from compaction.format import naming
from compaction.format.batch_build import build_batch
from compaction.runtime.storage import Storage
from compaction.steps import plan_round
from compaction.steps.commit import INTENT_FILE, Replacement, commit, commit_partition, remove_replaced
from compaction.steps.discover import read_log_dir
from compaction.steps.pipeline import compact_whole
from compaction.steps.recover import recover_partition
from compaction.steps.results import as_rows

T0 = 1_700_000_000_000
OTHER_FILES = {"leader-epoch-checkpoint": b"0\n1\n0 0\n", "partition.metadata": b"version: 0\ntopic_id: x\n"}


def _batch(offsets) -> bytes:
    return build_batch([fb.Record(o, T0 + o, f"k{o}".encode(), f"v{o}".encode()) for o in offsets])


def name(base: int, suffix: str = ".log", transient: str = "") -> str:
    return naming.segment_file_name(base, suffix) + transient


def snapshot(part) -> dict[str, bytes]:
    return {n: open(os.path.join(part, n), "rb").read() for n in sorted(os.listdir(part))}


def write(part, files: dict[str, bytes]) -> None:
    for n, data in files.items():
        with open(os.path.join(part, n), "wb") as f:
            f.write(data)


# Old log: segments 0 (offsets 0-4), 5 (5-9), 10 (10-14), active 15. The cleaner output replaces
# [0, 5] by a new segment 0 and [10] by a new segment 10.
OLD = {
    name(0): _batch(range(0, 5)),
    name(0, ".index"): b"i0" * 4,
    name(0, ".timeindex"): b"t0" * 6,
    name(0, ".txnindex"): b"x0" * 17,  # the new segment 0 has none: must go
    name(0, ".snapshot"): b"s0",  # base reused by the new segment: Kafka keeps it
    name(5): _batch(range(5, 10)),
    name(5, ".index"): b"i5" * 4,
    name(5, ".timeindex"): b"t5" * 6,
    name(5, ".snapshot"): b"s5",  # base not reused: removed with its segment
    name(10): _batch(range(10, 15)),
    name(10, ".index"): b"i1" * 4,
    name(10, ".timeindex"): b"t1" * 6,
    name(15): _batch(range(15, 17)),
    name(15, ".index"): b"",
    name(15, ".timeindex"): b"",
    name(15, ".snapshot"): b"s15",
    **OTHER_FILES,
}
CLEANED = {
    name(0): _batch([3]) + _batch([8, 9]),
    name(0, ".index"): b"",
    name(0, ".timeindex"): b"T0" * 6,
    name(10): _batch([14]),
    name(10, ".index"): b"",
    name(10, ".timeindex"): b"T1" * 6,
    name(10, ".txnindex"): b"X1" * 17,  # new file that the old segment 10 did not have
}
REPLACEMENTS = [Replacement(0, (0, 5)), Replacement(10, (10,))]
NEW = {
    **{n: d for n, d in OLD.items() if not n.startswith((name(0)[:20], name(5)[:20], name(10)[:20]))},
    name(0, ".snapshot"): OLD[name(0, ".snapshot")],
    **CLEANED,
}
OLD_STATE = dict(sorted(OLD.items()))
NEW_STATE = dict(sorted(NEW.items()))


def setup_dir(tmp_path, tag: str = "p") -> str:
    part = tmp_path / f"{tag}-0"
    part.mkdir()
    write(part, OLD)
    write(part, {n + ".cleaned": d for n, d in CLEANED.items()})
    return str(part)


class Crash(Exception):
    pass


@contextmanager
def crash_after(n: int | None, ops=("rename", "delete")):
    """Let the first `n` filesystem mutations through, then raise before the next one (None: never).
    Yields the call counter."""
    calls = [0]
    originals = {op: getattr(Storage, op) for op in ops}

    def wrap(op):
        def guarded(self, *args, **kwargs):
            if n is not None and calls[0] >= n:
                raise Crash(f"crash before {op} #{calls[0] + 1} {args[:1]}")
            calls[0] += 1
            return originals[op](self, *args, **kwargs)

        return guarded

    with pytest.MonkeyPatch.context() as mp:
        for op in ops:
            mp.setattr(Storage, op, wrap(op))
        yield calls


def count_ops(tmp_path) -> int:
    part = setup_dir(tmp_path, "count")
    with crash_after(None) as calls:
        commit_partition(Storage.local(), part, REPLACEMENTS)
    assert snapshot(part) == NEW_STATE
    return calls[0]


def assert_consistent(part) -> str:
    state = snapshot(part)
    if state == OLD_STATE:
        return "old"
    assert state == NEW_STATE, f"mixed state: {sorted(state)}"
    return "new"


def test_commit_without_crash_gives_new_set(tmp_path):
    part = setup_dir(tmp_path)
    commit_partition(Storage.local(), part, REPLACEMENTS)
    assert snapshot(part) == NEW_STATE
    assert recover_partition(Storage.local(), part).actions == []


def test_replaced_files_can_be_removed_later(tmp_path):
    """The job removes the replaced files after advancing the checkpoint (as Kafka deletes them
    asynchronously): until then the new set is live and the old files are only `*.deleted`, which
    `remove_replaced`, or the next run's recovery after a crash in between, removes."""
    part = setup_dir(tmp_path)
    commit_partition(Storage.local(), part, REPLACEMENTS, remove_old=False)
    state = snapshot(part)
    pending = {n for n in state if n.endswith(".deleted")} | {INTENT_FILE}
    assert pending - {INTENT_FILE} and {n: d for n, d in state.items() if n not in pending} == NEW_STATE
    assert {n.removesuffix(".deleted") for n in pending - {INTENT_FILE}} == set(OLD_STATE) - set(
        NEW_STATE
    ) | {n for n in set(OLD_STATE) & set(NEW_STATE) if OLD_STATE[n] != NEW_STATE[n]}
    later = setup_dir(tmp_path, "later")
    commit_partition(Storage.local(), later, REPLACEMENTS, remove_old=False)
    remove_replaced(Storage.local(), later)
    assert snapshot(later) == NEW_STATE
    recover_partition(Storage.local(), part)  # a crash before remove_replaced
    assert snapshot(part) == NEW_STATE


def test_crash_at_every_step_recovers_to_old_or_new(tmp_path):
    total = count_ops(tmp_path)
    assert total >= 10
    outcomes = []
    for n in range(total + 1):
        part = setup_dir(tmp_path, f"n{n}")
        with crash_after(n):
            if n < total:
                with pytest.raises(Crash):
                    commit_partition(Storage.local(), part, REPLACEMENTS)
            else:
                commit_partition(Storage.local(), part, REPLACEMENTS)
        recover_partition(Storage.local(), part)
        outcomes.append(assert_consistent(part))
        # Idempotent: a second recovery changes nothing.
        again = recover_partition(Storage.local(), part)
        assert again.actions == [] and outcomes[-1] == assert_consistent(part)
    # Before the first .swap rename completes the swap is rolled back; once every .cleaned became
    # a .swap it is rolled forward. Both happen, and the switch happens exactly once.
    assert outcomes[0] == "old" and outcomes[-1] == "new"
    switch = outcomes.index("new")
    assert outcomes[switch:] == ["new"] * (len(outcomes) - switch)


def test_a_broker_loading_the_dir_during_step_1_finds_the_log_as_it_was(tmp_path):
    """A broker started on the dir while step 1 runs never reads the intent file: its LogLoader
    removes every `.cleaned` file and every `.swap` at or above the lowest `.cleaned` base, and
    completes the `.swap` files below it. Step 1 renames the highest names first, so until its
    last rename a `.cleaned` file is left below every `.swap`: the broker finds the old segments,
    every byte, never a log swapped up to a group and not after it."""
    for n in range(len(CLEANED)):
        part = setup_dir(tmp_path, f"n{n}")
        with crash_after(n), pytest.raises(Crash):
            commit_partition(Storage.local(), part, REPLACEMENTS)
        assert sum(f.endswith(".swap") for f in os.listdir(part)) == n
        os.remove(os.path.join(part, INTENT_FILE))  # what the broker does not read
        recover_partition(Storage.local(), part)  # without an intent file: the LogLoader's rules
        assert snapshot(part) == OLD_STATE, n


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_subset_of_the_old_files_renames_surviving_a_crash_recovers_to_the_new_set(
    tmp_path_factory, data
):
    """Step 2's renames (old files -> `.deleted`) share one directory fsync, so a crash before it
    may leave any subset of them done. Each such state rolls forward to exactly the new set."""
    part = setup_dir(tmp_path_factory.mktemp("subset"))
    with crash_after(len(CLEANED)), pytest.raises(Crash):  # step 1 done, step 2 not begun
        commit_partition(Storage.local(), part, REPLACEMENTS)
    old_files = json.loads(open(os.path.join(part, INTENT_FILE)).read())["old_files"]
    for n in data.draw(st.lists(st.sampled_from(old_files), unique=True)):
        os.replace(os.path.join(part, n), os.path.join(part, n + ".deleted"))
    recover_partition(Storage.local(), part)
    assert snapshot(part) == NEW_STATE


def test_crash_during_recovery_then_recover_again(tmp_path):
    total = count_ops(tmp_path)
    for n in range(total):
        for m in range(8):
            part = setup_dir(tmp_path, f"n{n}m{m}")
            with crash_after(n), pytest.raises(Crash):
                commit_partition(Storage.local(), part, REPLACEMENTS)
            with crash_after(m):
                try:
                    recover_partition(Storage.local(), part)
                except Crash:
                    pass
            recover_partition(Storage.local(), part)
            assert_consistent(part)
            assert INTENT_FILE not in os.listdir(part)


@pytest.mark.parametrize("written", [0, 1, 10])
def test_crash_while_writing_intent_rolls_back(tmp_path, written):
    """A torn intent file (power loss / kill during its write): nothing was renamed yet."""
    part = setup_dir(tmp_path)
    original = Storage.write_durable

    def torn(self, path, data):
        if path.endswith(INTENT_FILE):
            with open(path, "wb") as f:
                f.write(bytes(data)[:written])
            raise Crash("crash while writing the intent")
        return original(self, path, data)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Storage, "write_durable", torn)
        with pytest.raises(Crash):
            commit_partition(Storage.local(), part, REPLACEMENTS)
    recover_partition(Storage.local(), part)
    assert snapshot(part) == OLD_STATE


def test_recovery_with_intent_ignores_foreign_cleaned_files(tmp_path):
    """A `.cleaned` file that is not part of the intent (e.g. written for a group that is not being
    committed) must not make recovery roll back a swap whose old files are already `.deleted`."""
    part = setup_dir(tmp_path)
    stray = name(15, ".log", ".cleaned")
    write(part, {stray: b"partial"})
    # Crash in step 3 (.swap -> live): after the 7 .cleaned -> .swap and 11 old -> .deleted renames.
    with crash_after(len(CLEANED) + 11 + 2), pytest.raises(Crash):
        commit_partition(Storage.local(), part, REPLACEMENTS)
    assert any(n.endswith(".swap") for n in os.listdir(part))
    recover_partition(Storage.local(), part)
    state = snapshot(part)
    state.pop(stray, None)
    assert state == NEW_STATE


# --- LogLoader-style recovery (no intent file: a broker's own cleaner left these) ----------------

# Kafka-shaped scenario: old segments 0 (0-4) and 5 (5-9), active 10; the cleaned segment 0 keeps
# offsets 3 and 9 (the batch ending at the upper bound stays, KAFKA-17076), so its readNextOffset
# (10) covers both old segments.
K_OLD = {
    name(0): _batch(range(0, 5)),
    name(0, ".index"): b"a" * 8,
    name(0, ".timeindex"): b"b" * 12,
    name(5): _batch(range(5, 10)),
    name(5, ".index"): b"c" * 8,
    name(5, ".timeindex"): b"d" * 12,
    name(5, ".snapshot"): b"snap5",
    name(10): _batch([10]),
    name(10, ".index"): b"",
    name(10, ".timeindex"): b"",
    **OTHER_FILES,
}
K_NEW_SEG = {name(0): _batch([3]) + _batch([9]), name(0, ".index"): b"", name(0, ".timeindex"): b"e" * 12}
K_NEW = {**{n: d for n, d in K_OLD.items() if not n.startswith(("0" * 20, name(5)[:20]))}, **K_NEW_SEG}


def _kafka_dir(tmp_path, tag, files) -> str:
    part = tmp_path / f"{tag}-0"
    part.mkdir()
    write(part, files)
    return str(part)


def _old_with(suffix: str, names=None) -> dict[str, bytes]:
    replaced = names or [n for n in K_OLD if n.startswith(("0" * 20, name(5)[:20]))]
    return {(n + suffix if n in replaced else n): d for n, d in K_OLD.items()}


def _recover_twice(part):
    first = recover_partition(Storage.local(), part)
    state = snapshot(part)
    second = recover_partition(Storage.local(), part)
    assert second.actions == [] and snapshot(part) == state  # idempotent
    return first


def test_testRecoveryAfterCrash_cleaned_files_discarded(tmp_path):
    # 1) crash right after the .cleaned files were written: the clean is aborted.
    part = _kafka_dir(tmp_path, "s1", {**K_OLD, **{n + ".cleaned": d for n, d in K_NEW_SEG.items()}})
    _recover_twice(part)
    assert snapshot(part) == dict(sorted(K_OLD.items()))


def test_testRecoveryAfterCrash_some_cleaned_some_swap(tmp_path):
    # 2) some .cleaned renamed to .swap: still aborted (a .swap at/after min .cleaned offset goes).
    files = {n + ".cleaned": d for n, d in K_NEW_SEG.items()}
    files[name(0, ".log", ".swap")] = files.pop(name(0, ".log", ".cleaned"))
    part = _kafka_dir(tmp_path, "s2", {**K_OLD, **files})
    _recover_twice(part)
    assert snapshot(part) == dict(sorted(K_OLD.items()))


def test_testRecoveryAfterCrash_swap_and_deleted(tmp_path):
    # 3) all new files .swap and old ones renamed .deleted: the swap is completed.
    swaps = {n + ".swap": d for n, d in K_NEW_SEG.items()}
    part = _kafka_dir(tmp_path, "s3", {**_old_with(".deleted"), **swaps})
    _recover_twice(part)
    assert snapshot(part) == dict(sorted(K_NEW.items()))


def test_testRecoveryAfterCrash_swap_before_old_files_renamed(tmp_path):
    # 3b) all new files .swap, old files still live: those in [minSwap, maxSwap) are deleted.
    # Non-segment files (leader-epoch-checkpoint, partition.metadata) must be skipped, not fatal.
    part = _kafka_dir(tmp_path, "s3b", {**K_OLD, **{n + ".swap": d for n, d in K_NEW_SEG.items()}})
    report = _recover_twice(part)
    assert snapshot(part) == dict(sorted(K_NEW.items()))
    assert any("replaced by swap" in a for a in report.actions)


def test_a_completed_broker_swap_leaves_no_file_of_the_segments_it_replaced(tmp_path):
    """Every file of an old segment in [minSwap, maxSwap) goes, the one at the swap's own base
    included: its `.txnindex` (the new segment has none: an old one left would give it aborted
    ranges that are not its own) and its `.snapshot`, as a broker's LogLoader deletes them. The
    segment after the range keeps all of its files."""
    old = {**K_OLD, name(0, ".txnindex"): b"x0" * 17, name(0, ".snapshot"): b"snap0"}
    old[name(10, ".snapshot")] = b"snap10"
    part = _kafka_dir(tmp_path, "s3c", {**old, **{n + ".swap": d for n, d in K_NEW_SEG.items()}})
    report = _recover_twice(part)
    assert snapshot(part) == dict(sorted({**K_NEW, name(10, ".snapshot"): b"snap10"}.items()))
    assert sorted(a for a in report.actions if "replaced by swap" in a) == sorted(
        f"removed {n} (replaced by swap)" for n in old if n.startswith(("0" * 20, name(5)[:20]))
    )


def test_testRecoveryAfterCrash_async_delete_pending(tmp_path):
    # 4) swap complete, old files still .deleted (async deletion pending): they are removed.
    part = _kafka_dir(tmp_path, "s4", {**_old_with(".deleted"), **K_NEW_SEG})
    _recover_twice(part)
    assert snapshot(part) == dict(sorted(K_NEW.items()))


def test_log_loader_caveat_old_segment_past_swap_next_offset_survives(tmp_path):
    """Kafka's recovery gap (docs/kafka-rules.md#swap-protocol), mirrored on purpose: Kafka infers the
    replaced range from the swap's readNextOffset, so an old segment starting after the cleaned segment's last
    batch (possible with 3.9 brokers, where the round's last batch can vanish) is not deleted. Our own commits
    never rely on this: they carry the intent file."""
    new_seg = {name(0): _batch([3]), name(0, ".index"): b"", name(0, ".timeindex"): b"e" * 12}
    part = _kafka_dir(tmp_path, "cav", {**K_OLD, **{n + ".swap": d for n, d in new_seg.items()}})
    recover_partition(Storage.local(), part)
    state = snapshot(part)
    assert state[name(0)] == new_seg[name(0)]
    assert name(5) in state  # old segment 5 (base 5 >= maxSwap 4) stays, as in Kafka


# --- a real process death ------------------------------------------------------------------------

CHILD = r"""
import json, sys, time
from compaction.steps.commit import Replacement, commit_partition
from compaction.runtime.storage import Storage

part, stop_at = sys.argv[1], int(sys.argv[2])
calls = [0]

def pausing(op):
    original = getattr(Storage, op)
    def run(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == stop_at:
            print("paused", flush=True)
            time.sleep(120)
        return original(self, *args, **kwargs)
    return run

for op in ("rename", "delete"):
    setattr(Storage, op, pausing(op))
reps = [Replacement(r[0], tuple(r[1])) for r in json.loads(sys.argv[3])]
commit_partition(Storage.local(), part, reps)
print("done", flush=True)
"""


def test_sigkill_mid_commit_recovers(tmp_path):
    total = count_ops(tmp_path)
    reps = json.dumps([[r.new_base, list(r.old_bases)] for r in REPLACEMENTS])
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    stops = sorted({1, 2, 3, total // 2, total - 3, total - 1, total})
    children = []
    for stop in stops:
        part = setup_dir(tmp_path, f"kill{stop}")
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, part, str(stop), reps],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=repo,
        )
        children.append((stop, part, proc))
    outcomes = {}
    for stop, part, proc in children:
        try:
            line = proc.stdout.readline().strip()
            assert line == "paused", f"child stopped at {stop} said {line!r}"
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
            proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL
        recover_partition(Storage.local(), part)
        outcomes[stop] = assert_consistent(part)
        assert recover_partition(Storage.local(), part).actions == []
    assert outcomes[1] == "old" and outcomes[total] == "new"


# --- a round's commit of a partition whose index planning rebuilt ---------------------------------


def test_a_round_that_cleans_a_partition_writes_the_indexes_planning_rebuilt(tmp_path):
    """A missing `.index` is rebuilt in memory by planning and written by the commit, before the
    intent file: the active segment's lands in place (its segment stays), and the replaced
    segment's goes to `.deleted` with the rest of its files."""
    log_dir = str(tmp_path / "logs")
    part_dir = os.path.join(log_dir, "t-0")
    small_partition(part_dir)
    logs = {b: open(os.path.join(part_dir, name(b)), "rb").read() for b in (0, 10, 20)}
    for base in (10, 20):
        os.remove(os.path.join(part_dir, name(base, ".index")))
    ld = read_log_dir(log_dir)
    args = ["--log-dir", log_dir, "--now-ms", "0", "--index-interval-bytes", "100"]
    opts = parse_args(args)
    p = plan_round.plan_one(ld, ld.partitions[0], opts)
    plan_round.set_specs([p], opts)
    assert p.plan.eligible and [f.name for r in p.rebuilt for f in r.files.values()] == [
        name(10, ".index"),
        name(20, ".index"),
    ]
    assert [(s.new_base, [x.base_offset for x in s.segments]) for s in p.specs] == [(0, [0, 10])]
    results, _ = compact_whole(p.specs, 0)
    commit(p, {row["group_id"]: row for row in as_rows(results)})
    assert p.result.status == "cleaned", p.result.reason
    assert [a.split(" from ")[0] for a in p.result.recovery] == [
        f"rebuilt missing {name(10, '.index')}",
        f"rebuilt missing {name(20, '.index')}",
    ]
    files = snapshot(part_dir)
    # Both written from their `.log` (an oracle that shares no code with the job's builder).
    assert files[name(20, ".index")] == index_files(logs[20], 20, 100)[0]
    assert files[name(10, ".index", ".deleted")] == index_files(logs[10], 10, 100)[0] != b""
    remove_replaced(Storage.local(), part_dir)
    assert sorted(snapshot(part_dir)) == sorted(
        [name(0, s) for s in (".log", ".index", ".timeindex")]
        + [name(20, s) for s in (".log", ".index", ".timeindex")]
    )
