"""Fault injection of whole runs: SIGKILL the spark-submit session at each step
of the commit (and mid-rewrite), and at random times; then check that recovery leaves every
partition loadable and either as it was or compacted, and that a further run ends with exactly the
records an uninterrupted run keeps (the latest per key below the active segment, from
kafka-python's decoding of the input).

Each crashed run is one spark-submit on its own small log dir (distinct topics); all dirs are then
finished by ONE run with repeated --log-dir, to keep CI time down. The crash points are the
test-only `COMPACTION_CRASH_AT` steps of compaction/runtime/faults.py; random kills are timed from outside.
"""

from __future__ import annotations

import json
import os
import random
import time

import pytest
from e2ekit import decode_partition
from faultkit import assert_loads, expected_after, kill_session, parts, run_driver_only, start_submit

from compaction.format.checkpoint import parse_offset_checkpoint
from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000
# A step with ":2" crashes in the second partition's commit (the first one is then committed).
STEPS = [
    "rewrite",
    "cleaned",
    "intent",
    "swap",
    "swap:2",
    "deleted",
    "renamed:2",
    "checkpoint",
    "checkpointed",
]
# The commit's steps in order (compaction/steps/commit.py), as a partition's files show them.
COMMIT_STEPS = ("cleaned", "intent", "swap", "deleted", "renamed")
# The same steps with every partition cut into ranges (the ranges stage: scan, merge, rewrite).
RANGES = ("--conf", "spark.kafka.compaction.partitionTaskMaxBytes=0")
RANGE_STEPS = ["rewrite", "cleaned:2"]


def _make(root: str, tag: str, seed: int) -> tuple[str, dict]:
    log_dir = os.path.join(root, tag)
    generate_log_dir(
        log_dir,
        topics=((f"t{tag}", 3),),
        records=400,
        keys=30,
        codec="mixed",
        segment_bytes=5000,
        tombstone_ratio=0.05,
        seed=seed,
    )
    before = {p: decode_partition(os.path.join(log_dir, p)) for p in parts(log_dir)}
    expected = {p: expected_after(os.path.join(log_dir, p)) for p in parts(log_dir)}
    return log_dir, {"before": before, "expected": expected}


def _crash_run(log_dir: str, env: dict | None, kill_after: float | None = None, args: tuple = ()) -> dict:
    """One spark-submit; killed (whole session, SIGKILL) at the crash mark or after `kill_after` s."""
    mark = log_dir.rstrip("/") + ".crashed"
    env = {**(env or {}), "COMPACTION_CRASH_MARK": mark}
    started = time.monotonic()
    proc = start_submit([log_dir], log_dir + ".report.json", "--now-ms", str(NOW), *args, env=env)
    killed = False
    while proc.poll() is None:
        if os.path.exists(mark) or (kill_after is not None and time.monotonic() - started >= kill_after):
            kill_session(proc.pid)
            killed = True
            break
        time.sleep(0.02)
    proc.wait(timeout=60)
    return {
        "killed": killed,
        "code": proc.returncode,
        "seconds": time.monotonic() - started,
        "marked": os.path.exists(mark),
    }


def _commit_step(part_dir: str) -> int:
    """How far a partition's commit got, as an index in COMMIT_STEPS, from its files alone."""
    names = os.listdir(part_dir)
    has = lambda suffix: any(n.endswith(suffix) for n in names)  # noqa: E731
    if "compaction-commit.json" not in names:
        return 0  # not started (the intent file goes only once the round's checkpoints are written)
    if has(".deleted"):
        return 3 if has(".swap") else 4
    if has(".cleaned"):
        return 1  # also half-way through the renames to `.swap`: not yet at the swap's crash point
    return 2 if has(".swap") else 4


def _check_stopped_at(log_dir: str, step: str) -> None:
    """Killed at the n-th arrival at a commit step, with the partitions committing on threads: the
    first n-1 arrivals may have gone past it, no other partition may have, and one is at it."""
    name, _, nth = step.partition(":")
    at = COMMIT_STEPS.index(name)
    reached = {p: _commit_step(os.path.join(log_dir, p)) for p in parts(log_dir)}
    assert sum(r > at for r in reached.values()) <= int(nth or 1) - 1, (step, reached)
    assert at in reached.values(), (step, reached)


def _check_after_recovery(log_dir: str, info: dict) -> None:
    """After `--recover-only`: each partition loads and holds either its input or the compacted
    records; a partition whose checkpoint moved is compacted (the next round would not redo it)."""
    proc = run_driver_only(log_dir, "--recover-only", "--now-ms", str(NOW))
    assert proc.returncode == 0, proc.stderr
    checkpoint_path = os.path.join(log_dir, "cleaner-offset-checkpoint")
    checkpoint = {}
    if os.path.exists(checkpoint_path):
        checkpoint = parse_offset_checkpoint(open(checkpoint_path, "rb").read())
    for p in parts(log_dir):
        part_dir = os.path.join(log_dir, p)
        names = os.listdir(part_dir)
        assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))], names
        now = decode_partition(part_dir)
        assert now in (info["before"][p], info["expected"][p]), p
        topic, _, partition = p.rpartition("-")
        if (topic, int(partition)) in checkpoint:
            assert now == info["expected"][p], p


def _finish_and_check(root: str, dirs: dict) -> dict:
    report = os.path.join(root, "final.json")
    started = time.monotonic()
    proc = start_submit(list(dirs), report, "--now-ms", str(NOW))
    _, stderr = proc.communicate(timeout=1200)
    assert proc.returncode == 0, stderr[-4000:]
    for log_dir, info in dirs.items():
        for p in parts(log_dir):
            part_dir = os.path.join(log_dir, p)
            assert decode_partition(part_dir) == info["expected"][p], (log_dir, p)
            assert_loads(part_dir)
    statuses = {r["status"] for r in json.load(open(report))["partitions"]}
    assert statuses <= {"cleaned", "skipped"}
    return {"seconds": time.monotonic() - started}


def test_sigkill_at_every_commit_step_then_rerun(tmp_path):
    root = str(tmp_path)
    dirs, runs = {}, {}
    for i, step in enumerate(STEPS):
        log_dir, info = _make(root, f"s{i}", seed=100 + i)
        runs[step] = _crash_run(log_dir, {"COMPACTION_CRASH_AT": step})
        assert runs[step]["marked"] and runs[step]["killed"], (step, runs[step])
        if step.partition(":")[0] in COMMIT_STEPS:
            _check_stopped_at(log_dir, step)
        _check_after_recovery(log_dir, info)
        dirs[log_dir] = info
    for i, step in enumerate(RANGE_STEPS):
        log_dir, info = _make(root, f"g{i}", seed=300 + i)
        runs[f"ranges {step}"] = run = _crash_run(log_dir, {"COMPACTION_CRASH_AT": step}, args=RANGES)
        assert run["marked"] and run["killed"], (step, run)
        _check_after_recovery(log_dir, info)
        dirs[log_dir] = info
    final = _finish_and_check(root, dirs)
    print(
        "crash runs:",
        {s: round(r["seconds"], 1) for s, r in runs.items()},
        "final run:",
        round(final["seconds"], 1),
    )


@pytest.mark.crash_random
def test_sigkill_at_random_times_then_rerun(tmp_path):
    """`COMPACTION_RANDOM_KILLS` runs (default 20), each SIGKILLed at a uniformly random time in
    [0.2, 1.1] x the duration of a complete run (measured first); a kill after the end is a
    complete run, which must also be fine."""
    root = str(tmp_path)
    n = int(os.environ.get("COMPACTION_RANDOM_KILLS", "20"))
    seed = int(os.environ.get("COMPACTION_RANDOM_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    print(f"COMPACTION_RANDOM_SEED={seed}")  # in the captured output of a failure, to repeat it
    probe_dir, probe = _make(root, "probe", seed=1)
    full = _crash_run(probe_dir, None)
    assert full["code"] == 0 and not full["killed"]
    dirs, runs = {probe_dir: probe}, []
    for i in range(n):
        log_dir, info = _make(root, f"r{i}", seed=200 + i)
        delay = rng.uniform(0.2, 1.1) * full["seconds"]
        runs.append((round(delay, 1), _crash_run(log_dir, None, kill_after=delay)))
        _check_after_recovery(log_dir, info)
        dirs[log_dir] = info
    final = _finish_and_check(root, dirs)
    killed = sum(r["killed"] for _, r in runs)
    print(
        f"seed {seed}: {killed}/{n} runs killed, full run {full['seconds']:.1f}s,",
        f"final {final['seconds']:.1f}s, kills at",
        [d for d, _ in runs],
    )
    # A sweep whose every kill landed after the run ended tested nothing but clean runs.
    assert killed > 0, (
        f"no run was killed (COMPACTION_RANDOM_SEED={seed} to repeat): kills at {[d for d, _ in runs]}"
    )
