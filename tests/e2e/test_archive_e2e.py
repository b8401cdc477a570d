"""`--output-dir` end to end through ./spark-submit.sh: compacted copies, snapshots as of a time or
offsets, erasure into a copy, on generated log dirs (every codec, transactions committed, aborted
and open at the cut, tombstones, control batches; and a legacy v1 log dir as a second source).

What the output must hold is decided here, independently of the job: the cut from kafka-python's
decoding of the source (a prefix of whole batches: the first batch stamped after T, or the
batches whose last offset is below O), then tests/helpers/round_model.py's model of one round
over the copy, bounded by a transaction open at the cut as Kafka bounds a round by its last
stable offset. Every run also checks that the sources' bytes and file names did not change (they
are made read-only, which binds a non-root run), and SIGKILLs at random moments plus a rerun
give the uninterrupted run's bytes.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time

import pytest
from e2ekit import REPO, decode_log, run_job, segment_logs, tree_hashes
from faultkit import kill_session, run_driver_only, start_submit
from round_model import cut_snapshot, expected_archive, snapshot

from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

T0 = 1_700_000_000_000
V2_PARTS = ("ledger-0", "ledger-1")
LEGACY_PART = "old-0"
SEED = int(os.environ.get("ARCHIVE_TEST_SEED", "41"))


def _set_writable(root: str, writable: bool) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644 if writable else 0o444)
        os.chmod(dirpath, 0o755 if writable else 0o555)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("archive")
    src, legacy = str(root / "src"), str(root / "legacy")
    generate_log_dir(
        src,
        topics=(("ledger", 2),),
        records=2500,
        keys=150,
        codec="mixed",
        batch_records=(1, 12),
        segment_bytes=30_000,
        tombstone_ratio=0.15,
        transactions=0.45,
        idempotent=0.25,
        abort_ratio=0.35,
        txn_producers=4,
        idempotent_producers=2,
        txn_batches=3,
        headers=1,
        seed=SEED,
    )
    generate_log_dir(
        legacy,
        topics=(("old", 1),),
        records=800,
        keys=80,
        codec="gzip",
        legacy="v1",
        batch_records=(1, 6),
        segment_bytes=12_000,
        tombstone_ratio=0.1,
        timestamp_step_ms=3,
        seed=SEED + 1,
    )
    hashes = {d: tree_hashes(d) for d in (src, legacy)}
    _set_writable(src, False)
    _set_writable(legacy, False)
    yield root, src, legacy, hashes
    _set_writable(src, True)
    _set_writable(legacy, True)


# --- the expected output, from kafka-python's view of the source -----------------------------------


def _legacy_batches(part_dir: str):
    """[(last offset, max timestamp, records)] of each v1 entry (a wrapper's records together)."""
    from kafka.record.memory_records import MemoryRecords

    out = []
    for log in segment_logs(part_dir):
        records = MemoryRecords(open(log, "rb").read())
        while records.has_next():
            b = records.next_batch()
            if b is None:
                break
            recs = [(r.offset, r.timestamp, r.key, r.value) for r in b]
            out.append((recs[-1][0], max(r[1] for r in recs), recs))
    return out


def _expected_legacy(part_dir: str, time_ms, offset) -> tuple[set, int]:
    """The latest record of every key held (legacy tombstones stay: no segment is below the dirty
    section, so the legacy delete horizon is 0)."""
    latest, end = {}, 0
    for last, ts, recs in _legacy_batches(part_dir):
        if (offset is not None and last >= offset) or (time_ms is not None and ts > time_ms):
            break
        end = last + 1
        for o, _, k, v in recs:
            latest[k] = (o, k, v)
    return set(latest.values()), end


def _records(part_dir: str) -> set:
    return {(r.offset, r.key, r.value) for log in segment_logs(part_dir) for r in decode_log(log)}


def _run(root, src, legacy, name, *args, check=True):
    out = str(root / name)
    code, report, err = run_job(
        src, "--log-dir", legacy, "--output-dir", out, *args, report=str(root / f"{name}.json")
    )
    if check:
        assert code == 0, err
    return out, report, code, err


def _assert_sources_unchanged(src, legacy, hashes):
    assert tree_hashes(src) == hashes[src]
    assert tree_hashes(legacy) == hashes[legacy]


def _check_output(out, report, src, legacy, time_ms, offsets, now):
    by_part = {f"{p['topic']}-{p['partition']}": p for p in report["partitions"]}
    assert set(by_part) == {*V2_PARTS, LEGACY_PART}
    opened = 0
    for part in V2_PARTS:
        expected, entries, end, unstable = expected_archive(
            snapshot(os.path.join(src, part)), time_ms, offsets.get(part), now
        )
        got = snapshot(os.path.join(out, part))
        assert {e for _, _, es in got.segments for e in es} == entries, part
        assert [(b.base, b.last) for b in got.batches] == [(b.base, b.last) for b in expected], part
        assert got.batches == expected, part
        assert got.active_base == end and by_part[part]["cut"]["endOffset"] == end
        assert by_part[part]["cut"]["firstUnstableOffset"] == unstable
        assert by_part[part]["output"] == os.path.join(out, part)
        opened += unstable is not None
    want, end = _expected_legacy(os.path.join(legacy, LEGACY_PART), time_ms, offsets.get(LEGACY_PART))
    assert _records(os.path.join(out, LEGACY_PART)) == want
    assert snapshot_end(os.path.join(out, LEGACY_PART)) == end
    checkpoints = {
        n: open(os.path.join(out, n)).read().split("\n")
        for n in (
            "recovery-point-offset-checkpoint",
            "log-start-offset-checkpoint",
            "cleaner-offset-checkpoint",
        )
    }
    for part, entry in by_part.items():
        topic, p = part.rsplit("-", 1)
        assert f"{topic} {p} {entry['cut']['endOffset']}" in checkpoints["recovery-point-offset-checkpoint"]
    assert os.path.exists(os.path.join(out, "meta.properties"))
    assert not os.path.exists(out + ".kafka-compaction-staging")
    return opened


def snapshot_end(part_dir: str) -> int:
    return int(os.path.basename(segment_logs(part_dir)[-1])[:20])


def _random_cuts(src, legacy):
    rng = random.Random(SEED)
    stamps = [b.max_ts for p in V2_PARTS for b in snapshot(os.path.join(src, p)).batches]
    time_ms = rng.randint(min(stamps), max(stamps))
    ends = {p: snapshot(os.path.join(src, p)).batches[-1].last + 1 for p in V2_PARTS}
    offsets = {p: rng.randint(1, ends[p] - 1) for p in V2_PARTS}
    return time_ms, offsets


# --- the runs ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def as_of_time(sources):
    """One run as of a random time: (its output, report, the time)."""
    root, src, legacy, _ = sources
    time_ms, _ = _random_cuts(src, legacy)
    out, report, _, _ = _run(root, src, legacy, "as-of-time", "--as-of-time", str(time_ms))
    return out, report, time_ms


def test_snapshot_as_of_a_time(sources, as_of_time):
    _, src, legacy, hashes = sources
    out, report, time_ms = as_of_time
    _assert_sources_unchanged(src, legacy, hashes)
    assert report["archive"]["clockMs"] == time_ms  # the cut is the round's clock
    _check_output(out, report, src, legacy, time_ms, {}, time_ms)


def test_snapshot_as_of_offsets_with_an_open_transaction(sources):
    """Offsets are drawn until a transaction is open at one of the cuts (the round then stops at
    its segment, as Kafka's cleaner stops at the last stable offset)."""
    root, src, legacy, hashes = sources
    rng = random.Random(SEED + 7)
    snaps = {p: snapshot(os.path.join(src, p)) for p in V2_PARTS}
    for _ in range(200):
        offsets = {p: rng.randint(1, snaps[p].batches[-1].last) for p in V2_PARTS}
        if any(cut_snapshot(snaps[p], None, offsets[p])[2] is not None for p in V2_PARTS):
            break
    arg = ",".join(f"{p.rsplit('-', 1)[0]}:{p.rsplit('-', 1)[1]}={o}" for p, o in offsets.items())
    out, report, _, _ = _run(root, src, legacy, "as-of-offset", "--as-of-offset", arg)
    _assert_sources_unchanged(src, legacy, hashes)
    # The clock: the newest timestamp the cut partitions hold (the uncut legacy one is not cut).
    now = max(b.max_ts for p in V2_PARTS for b in cut_snapshot(snaps[p], None, offsets[p])[0].batches)
    assert report["archive"]["clockMs"] == now
    assert _check_output(out, report, src, legacy, None, offsets, now) >= 1


def test_full_compaction_of_a_copy_then_nothing_to_clean(sources):
    root, src, legacy, hashes = sources
    now = T0 + 10_000_000
    out, report, _, _ = _run(root, src, legacy, "full", "--now-ms", str(now))
    _assert_sources_unchanged(src, legacy, hashes)
    _check_output(out, report, src, legacy, None, {}, now)
    # The job and the dump tool read the output back: a round finds nothing to clean, and every
    # segment's indexes match its batches.
    code, again, err = run_job(
        out,
        "--dry-run",
        "--min-cleanable-dirty-ratio",
        "0",
        "--now-ms",
        str(now),
        report=str(root / "full-again.json"),
    )
    assert code == 0, err
    assert {(p["status"], p["reason"]) for p in again["partitions"]} == {
        ("skipped", "nothing cleanable: active segment only")
    }
    logs = [log for part in (*V2_PARTS, LEGACY_PART) for log in segment_logs(os.path.join(out, part))]
    dump = subprocess.run(
        [sys.executable, "-m", "compaction", "dump", "--verify-index-only", *logs],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert dump.returncode == 0 and "mismatch" not in dump.stdout.lower(), dump.stdout[-2000:] + dump.stderr


def test_erase_into_a_copy(sources):
    root, src, legacy, hashes = sources
    time_ms, _ = _random_cuts(src, legacy)
    keys = sorted({r.key for r in decode_log(segment_logs(os.path.join(src, "ledger-0"))[0]) if r.key})[:5]
    key_file = root / "erase.txt"
    key_file.write_text("".join(f"ledger\t{k.decode()}\n" for k in keys))
    out, report, _, _ = _run(
        root, src, legacy, "erased", "--as-of-time", str(time_ms), "--erase-keys", str(key_file)
    )
    _assert_sources_unchanged(src, legacy, hashes)
    for part in V2_PARTS:
        got = {r[1] for r in _records(os.path.join(out, part))}
        assert got and not got & set(keys), part
    assert sum(p["erasedRecords"] or 0 for p in report["partitions"]) > 0


def test_two_sources_holding_one_partition_are_a_usage_error(sources):
    root, src, _legacy, _ = sources
    copy = str(root / "src-copy")
    shutil.copytree(src, copy)
    _set_writable(copy, True)
    _, _, code, err = _run(root, src, copy, "collide", check=False)
    assert code == 2 and "ledger-0 is in both" in err, err
    assert not os.path.exists(root / "collide")


def test_sigkill_at_random_moments_then_rerun_gives_the_same_output(sources, as_of_time):
    root, src, legacy, hashes = sources
    reference, _, time_ms = as_of_time
    args = ("--as-of-time", str(time_ms))
    want = _partition_hashes(reference)
    out = str(root / "killed")
    rng = random.Random(SEED + 3)
    interrupted = 0
    for attempt in range(2):
        proc = start_submit([src, legacy], str(root / "killed.json"), "--output-dir", out, *args)
        time.sleep(rng.uniform(2.0, 14.0))
        finished = proc.poll() is not None
        kill_session(proc.pid)
        proc.wait()
        _assert_sources_unchanged(src, legacy, hashes)
        got = _partition_hashes(out) if os.path.exists(out) else {}
        for part, files in got.items():  # a partition in the output is complete
            assert files == want[part], (attempt, part)
        if finished:
            break
        interrupted += 1
    assert interrupted, "no run was killed before it finished"
    code, report, err = run_job(
        src, "--log-dir", legacy, "--output-dir", out, *args, report=str(root / "rerun.json")
    )
    assert code == 0, err
    assert _partition_hashes(out) == want
    assert {p["output"] for p in report["partitions"]} == {
        os.path.join(out, p) for p in (*V2_PARTS, LEGACY_PART)
    }
    assert _checkpoints(out) == _checkpoints(reference)
    _assert_sources_unchanged(src, legacy, hashes)


def _partition_hashes(out: str) -> dict[str, dict[str, str]]:
    return {
        part: tree_hashes(os.path.join(out, part))
        for part in (*V2_PARTS, LEGACY_PART)
        if os.path.isdir(os.path.join(out, part))
    }


def _checkpoints(out: str) -> dict[str, str]:
    names = (
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "cleaner-offset-checkpoint",
        "meta.properties",
    )
    return {n: open(os.path.join(out, n)).read() for n in names}


@pytest.mark.parametrize("case", ["taken", "absent-partition", "other-cut", "interrupted-swap"])
def test_what_an_archive_refuses(sources, tmp_path, case):
    """An output partition dir no archive run wrote, an --as-of-offset of no source's partition:
    usage errors before anything is written. A source partition with an interrupted swap: that
    partition fails (finishing the swap would write to the source), the others are copied."""
    _, src, legacy, hashes = sources
    out = tmp_path / "out"
    args = ["--log-dir", legacy, "--output-dir", str(out)]
    if case == "taken":
        (out / "ledger-1").mkdir(parents=True)
        done = run_driver_only(src, *args)
        assert done.returncode == 2 and "already holds ledger-1, not written by an archive run" in done.stderr
    elif case == "other-cut":  # an output archived as of one time, rerun as of another
        code, _, err = run_job(src, *args, "--as-of-time", str(T0 + 500), report=str(tmp_path / "r.json"))
        assert code == 0, err
        done = run_driver_only(src, *args, "--as-of-time", str(T0 + 900))
        assert done.returncode == 2 and "'timeMs': 1700000000500}, not as this run asks" in done.stderr, (
            done.stderr
        )
        return
    elif case == "absent-partition":
        done = run_driver_only(src, *args, "--as-of-offset", "ledger:7=5")
        assert done.returncode == 2 and "no --log-dir holds ledger-7" in done.stderr
    else:
        copy = str(tmp_path / "swapped")
        shutil.copytree(legacy, copy)
        _set_writable(copy, True)
        log = segment_logs(os.path.join(copy, LEGACY_PART))[0]
        os.rename(log, log + ".swap")
        code, report, err = run_job(
            copy, "--log-dir", src, "--output-dir", str(out), report=str(tmp_path / "r.json")
        )
        assert code == 1, err
        by = {(p["topic"], p["partition"]): p for p in report["partitions"]}
        assert by[("old", 0)]["status"] == "failed" and "interrupted swap" in by[("old", 0)]["reason"]
        assert by[("old", 0)]["output"] is None and not (out / LEGACY_PART).exists()
        assert {by[("ledger", p)]["status"] for p in (0, 1)} == {"cleaned"}
        return
    assert not [n for n in os.listdir(out) if n != "ledger-1"] if out.exists() else True
    _assert_sources_unchanged(src, legacy, hashes)


@pytest.mark.parametrize("step", ["staged:2", "promoted:2"])
def test_killed_at_a_step_then_rerun_gives_the_same_output(sources, as_of_time, tmp_path, step):
    """The moments a random kill rarely hits: a partition copied while another is still being
    copied, and a partition moved into the output before its marker is written."""
    _, src, legacy, hashes = sources
    reference, _, time_ms = as_of_time
    out, mark = str(tmp_path / "out"), str(tmp_path / "mark")
    args = ("--output-dir", out, "--as-of-time", str(time_ms))
    proc = start_submit(
        [src, legacy],
        str(tmp_path / "killed.json"),
        *args,
        env={"COMPACTION_CRASH_AT": step, "COMPACTION_CRASH_MARK": mark},
    )
    deadline = time.monotonic() + 300
    while proc.poll() is None and not os.path.exists(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_session(proc.pid)
    proc.wait()
    assert os.path.exists(mark), proc.stderr.read()[-3000:]
    want = _partition_hashes(reference)
    got = _partition_hashes(out) if os.path.exists(out) else {}
    markers = [n for n in os.listdir(out) if n.startswith(".archived-")] if os.path.exists(out) else []
    assert all(files == want[part] for part, files in got.items())  # absent or complete
    if step.startswith("promoted"):
        assert len(got) == 2 and len(markers) == 1  # the second one moved, not yet marked
    code, _, err = run_job(src, "--log-dir", legacy, *args, report=str(tmp_path / "rerun.json"))
    assert code == 0, err
    assert _partition_hashes(out) == want and _checkpoints(out) == _checkpoints(reference)
    _assert_sources_unchanged(src, legacy, hashes)
