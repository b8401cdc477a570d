"""A partition cleaned as one range (the whole-partition task) and as N ranges (the ranges
stage's tasks, compaction/steps/range_task.py, run here on threads without Spark) writes the same
bytes. Inputs: generated partitions with every codec, tombstones, transactions, a clean section."""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from groupkit import NOW_MS, generate, outcomes, specs_for
from hypothesis import example, given, settings
from hypothesis import strategies as st
from index_oracle import index_files
from open_txn import last_stable_offset, open_txn_log_dir
from round_model import R as DELETE_RETENTION_MS
from round_model import decode_batches, expected_round, snapshot
from structkit import bases, seg_path, set_epochs
from synckit import record_creates_and_fsyncs

from compaction.format import naming
from compaction.format.txnindex import AbortedTxn
from compaction.kernels.keymap import KeyTable
from compaction.runtime.exchange import Exchange
from compaction.runtime.storage import Storage
from compaction.spark.stages import compact_partition
from compaction.steps import pipeline, range_task, ranges, rewrite
from compaction.steps.group import CLEANED, GroupSpec, SourceSegment
from compaction.steps.range_task import finish, resume, run_task
from compaction.steps.results import STATS_ROW, GroupResult, as_rows
from compaction.steps.schedule import RangePlan


def cleaned(part: Path) -> dict[str, bytes]:
    out = {f.name: f.read_bytes() for f in sorted(part.glob("*" + CLEANED))}
    for f in part.glob("*" + CLEANED):
        f.unlink()
    return out


def in_ranges(
    specs: list[GroupSpec],
    tasks: int,
    where: Path,
    reuse: int = 1 << 30,
    partitions=None,
    peer_wait: float = 60.0,
) -> list[dict]:
    """The ranges stage in this process: its `tasks` tasks on threads, meeting through an
    exchange directory in `where`, as the stage's tasks do, then what they left undone
    (`finish`, its pieces run here in turn)."""
    plan = RangePlan.cut(partitions or [specs], tasks)
    where.mkdir(parents=True, exist_ok=True)
    ex = Exchange(Storage.local(), str(where), peer_wait=peer_wait)
    with ThreadPoolExecutor(len(plan.tasks)) as pool:
        outs = list(pool.map(lambda t: run_task(t, plan, ex, reuse), range(len(plan.tasks))))
    run = lambda kind, items: as_rows(r for item in items for r in resume(kind, item, plan, ex, reuse))  # noqa: E731
    rows = finish(plan, ex, as_rows(r for out in outs for r in out), run)
    return sorted((r for r in rows if r["group_id"] != STATS_ROW), key=lambda r: r["group_id"])


# Each case's generator flags, one line: `generate(dir, CASE_FLAGS[case])` (tests/helpers/groupkit.py).
CASE_FLAGS = {
    "mixed codecs, tombstones": "--records 6000 --keys 700 --codec mixed --tombstone-ratio 0.1 --segment-bytes 40000",
    "transactions, aborts": "--records 5000 --keys 400 --transactions 0.5 --abort-ratio 0.3 --idempotent 0.3"
    " --segment-bytes 40000",
    "legacy v1 gzip": "--records 3000 --keys 300 --legacy v1 --codec gzip --segment-bytes 30000",
}


@pytest.mark.parametrize("case", sorted(CASE_FLAGS))
# (groups, tasks, scan cache bytes): one group cut between three tasks; groups cut across tasks
# with and without kept scans; more groups than tasks.
@pytest.mark.parametrize(
    "n_ranges, tasks, reuse", [(1, 3, 1 << 30), (2, 3, 0), (3, 2, 1 << 30), (5, 2, 20_000)]
)
def test_n_ranges_write_the_bytes_of_one(tmp_path, case, n_ranges, tasks, reuse):
    part = generate(tmp_path / "logs", CASE_FLAGS[case])
    whole = compact_partition(specs_for(part, 1))
    assert not any(r.get("error") or r.get("first_unstable") for r in whole), whole
    one = cleaned(part)
    # The groups are the whole-partition task's one group cut: their boundaries must match.
    specs = specs_for(part, n_ranges)
    plan = RangePlan.cut([specs], tasks)
    assert len(plan.tasks) == tasks and len(plan.ranges) >= max(tasks, n_ranges)
    rows = in_ranges(specs, tasks, tmp_path / "exchange", reuse)
    assert not any(r.get("error") for r in rows), rows
    many = cleaned(part)
    assert len(many) == 3 * n_ranges or len(many) >= 3 * n_ranges  # .log, .index, .timeindex (+ .txnindex)
    # Concatenated logs (the groups' new bases differ from the one group's) hold the same batches.
    logs = lambda files: b"".join(v for k, v in sorted(files.items()) if k.endswith(".log" + CLEANED))  # noqa: E731
    assert logs(many) == logs(one)
    assert sum(r["records_written"] for r in rows) == whole[0]["records_written"]
    if n_ranges == 1:  # one group, its indexes too: a cut group's parts land at the right positions
        assert many == one
    # A cut group of a partition without transactions: its later ranges come as parts, cleaned
    # by the tasks that hold them; no range's ids are handed over (no task stopped early).
    names = [p.name for p in (tmp_path / "exchange").iterdir()]
    cut = any(len(rids) > 1 for _, rids in plan.groups.values())
    assert any(n.startswith("piece-") for n in names) == (cut and "transactions" not in case)
    assert not any(n.startswith("ids-") for n in names) or "transactions" in case
    # A key a later range holds is found once, by the merge of its bucket, for each earlier range.
    ex = Exchange(Storage.local(), str(tmp_path / "exchange"))
    found = [
        (b.range_id, i)
        for k in range(tasks)
        for b in ex.read_blocks(f"found-{k}")
        for i in ranges.from_block(b.data).column("id").to_pylist()
    ]
    assert len(found) == len(set(found)) and bool(found) == (len(plan.ranges) > 1)


@pytest.mark.parametrize("case", ["mixed codecs, tombstones", "transactions, aborts"])
def test_the_rewrite_from_ranges_reads_its_segments_without_hashing_keys_or_checking_crcs_again(
    tmp_path, monkeypatch, case
):
    """The ranges' scan gave every record its key id and checked every CRC: a rewrite that reads a
    segment again (its scan not kept: a cache of 0 bytes) asks for neither, in its own ranges or
    in those handed over by another task (`ShippedMap.hashes_keys`, `verified`)."""
    part = generate(tmp_path / "logs", CASE_FLAGS[case])
    asked = []
    read = rewrite.read_segment

    def read_segment(spec, seg, data=None, hash_keys=True, **kw):
        asked.append((hash_keys, kw.get("verify_crc", True)))
        return read(spec, seg, data, hash_keys, **kw)

    monkeypatch.setattr(rewrite, "read_segment", read_segment)
    rows = in_ranges(specs_for(part, 3), 2, tmp_path / "exchange", reuse=0)
    assert not any(r.get("error") for r in rows), rows
    assert len(asked) == len(list(part.glob("*.log"))) - 1 and set(asked) == {(False, False)}


def test_a_partition_of_idempotent_producers_is_cut_into_pieces_as_one_without_producers(tmp_path):
    """Producer ids without transactions (idempotent producers) ask for no transaction state across
    ranges: a group cut between three tasks is cleaned in pieces by the tasks that hold its ranges,
    as a partition without producers is (only transactional batches make a partition one unit),
    and the bytes are those of one task."""
    part = generate(tmp_path / "logs", "--records 5000 --keys 400 --idempotent 0.6 --segment-bytes 40000")
    one = _whole(part)
    rows = in_ranges(specs_for(part, 1), 3, tmp_path / "exchange")
    assert not any(r.get("error") for r in rows), rows
    assert cleaned(part) == one
    names = [p.name for p in (tmp_path / "exchange").iterdir()]
    assert any(n.startswith("piece-") for n in names) and not any(n.startswith("ids-") for n in names), names


def test_the_last_tasks_groups_are_rewritten_while_the_merge_runs(tmp_path, monkeypatch):
    """Every group of the partition's last task needs nothing from the merge (the later ranges of
    its own task were scanned with it; no other task's range follows): that task rewrites them all
    before the merge is done (here the merge does not end before their files are written, which
    would never happen if one of those rewrites waited for it), and the bytes are those of one task."""
    part = generate(tmp_path / "logs", CASE_FLAGS["mixed codecs, tombstones"])
    compact_partition(specs_for(part, 1))
    one = cleaned(part)
    specs = specs_for(part, 8)
    plan = RangePlan.cut([specs], 2)
    last = [g for g, cut in plan.groups.items() if cut.ranges[0] in plan.tasks[1]]
    # the shape meant: several groups in the last task, none cut (a task with a piece to clean
    # waits for the merges before its rewrites, so that its piece's rewriter waits the least)
    assert len(last) >= 3 and all(len(cut.ranges) == 1 for cut in plan.groups.values())
    files = [Path(plan.groups[g].spec.segment_path(plan.groups[g].spec.new_base)) for g in last]
    files = [f.with_suffix(".log" + CLEANED) for f in files]
    merge, waited = range_task._merge, []

    def merge_after_the_last_tasks_groups(t, *args):
        deadline = time.monotonic() + 10
        while t == 0 and not all(f.exists() for f in files):
            if time.monotonic() > deadline:  # a rewrite waits for this merge: go on, and fail below
                waited.append(t)
                break
            time.sleep(0.01)
        return merge(t, *args)

    monkeypatch.setattr(range_task, "_merge", merge_after_the_last_tasks_groups)
    rows = in_ranges(specs, 2, tmp_path / "exchange")
    assert not waited, "a rewrite of the last task's groups waited for the merge"
    assert not any(r.get("error") for r in rows), rows
    logs = lambda files: b"".join(v for k, v in sorted(files.items()) if k.endswith(".log" + CLEANED))  # noqa: E731
    assert logs(cleaned(part)) == logs(one)


# --- tasks that do not run together ----------------------------------------------------------

# (output groups, tasks): one group cut between three tasks (parts); three groups over two tasks.
SHAPES = [(1, 3), (3, 2)]


def _whole(part: Path) -> dict[str, bytes]:
    rows = compact_partition(specs_for(part, 1))
    assert not any(r.get("error") or r.get("first_unstable") for r in rows), rows
    return cleaned(part)


def _logs(files: dict[str, bytes]) -> bytes:
    return b"".join(v for k, v in sorted(files.items()) if k.endswith(".log" + CLEANED))


def _check(part: Path, rows: list[dict], one: dict[str, bytes], specs: list[GroupSpec]) -> None:
    assert not any(r.get("error") for r in rows), rows
    many = cleaned(part)
    assert _logs(many) == _logs(one)
    assert sorted(r["group_id"] for r in rows) == sorted(s.group_id for s in specs)
    if len(specs) == 1:
        assert many == one


@pytest.mark.parametrize("case", ["mixed codecs, tombstones", "transactions, aborts"])
@pytest.mark.parametrize("n_groups, tasks", SHAPES)
def test_tasks_run_one_after_another_leave_the_rest_to_finish(tmp_path, case, n_groups, tasks):
    """One slot for the stage's tasks (dynamic allocation with one executor, or the others lost):
    each task runs alone, gives up on the peers that never ran, and `finish` does the merge, the
    parts and the rewrites they left: the bytes of one whole-partition task."""
    part = generate(tmp_path / "logs", CASE_FLAGS[case])
    one = _whole(part)
    specs = specs_for(part, n_groups)
    plan = RangePlan.cut([specs], tasks)
    ex = Exchange(Storage.local(), str(tmp_path / "exchange"), peer_wait=0.3)
    (tmp_path / "exchange").mkdir()
    started = time.monotonic()
    outs = as_rows(r for t in range(tasks) for r in run_task(t, plan, ex, 1 << 30))
    assert time.monotonic() - started < 10  # each gave up after peer_wait, not a day
    names = {p.name for p in (tmp_path / "exchange").iterdir()}
    # Every task but the last stopped early: none had all its peers' scans. The last had them; it
    # waits for the merges only for what reads them (a piece to clean, a unit the merge feeds).
    plan_work = range_task.Work.of(plan, ex.no_wait().gather("scan", tasks))
    last_waits = bool(
        plan_work.pieces_of(tasks - 1, plan) or plan_work.rewrites(tasks - 1, plan, early=False)
    )
    gone = {f"gone-{t}" for t in range(tasks)} & names
    assert gone == {f"gone-{t}" for t in range(tasks - 1 + last_waits)}
    kinds = []

    def run(kind, items):
        kinds.append((kind, len(items)))
        return as_rows(r for item in items for r in resume(kind, item, plan, ex, 1 << 30))

    rows = finish(plan, ex, outs, run)
    cut = any(len(rids) > 1 for _, rids in plan.groups.values()) and "transactions" not in case
    assert [k for k, n in kinds if n] == (["merge", "piece", "rewrite"] if cut else ["merge", "rewrite"])
    _check(part, [r for r in rows if r["group_id"] != STATS_ROW], one, specs)


def test_a_follow_up_of_units_that_need_no_merge_neither_runs_nor_waits_for_the_merges(tmp_path):
    """Two partitions of one range each, over two tasks run one after another: the later task
    rewrites its own partition and gives up on the earlier one's merge; `finish` rewrites the
    earlier one's partition without running that merge or reading the merges' statuses (one is
    missing for good): the bytes of one whole-partition task each."""
    parts = [generate(tmp_path / name, "--records 600 --keys 50 --segment-bytes 4000") for name in "ab"]
    ones = [_whole(part) for part in parts]
    partitions = [
        [dataclasses.replace(s, group_id=s.group_id + 100 * n) for s in specs_for(part, 1)]
        for n, part in enumerate(parts)
    ]
    plan = RangePlan.cut(partitions, 2)
    assert plan.tasks == [[0], [1]]
    ex = Exchange(Storage.local(), str(tmp_path / "exchange"), peer_wait=0.3)
    (tmp_path / "exchange").mkdir()
    outs = as_rows(r for t in (1, 0) for r in run_task(t, plan, ex, 1 << 30))
    kinds = []

    def run(kind, items):
        kinds.append((kind, len(items)))
        return as_rows(r for item in items for r in resume(kind, item, plan, ex, 1 << 30))

    rows = finish(plan, ex, outs, run)
    assert [k for k, n in kinds if n] == ["rewrite"]
    for part, one, specs in zip(parts, ones, partitions, strict=True):
        _check(part, [r for r in rows if r["group_id"] in {s.group_id for s in specs}], one, specs)


class _Killed(BaseException):
    """An attempt that dies where it stands (its process killed): nothing of it returns."""


@pytest.mark.parametrize("phase", ["_merge", "_write_piece", "_rewrite"])
@pytest.mark.parametrize("n_groups, tasks", SHAPES)
def test_a_task_that_dies_is_retried_and_its_peers_wait_for_the_retry(
    tmp_path, monkeypatch, phase, n_groups, tasks
):
    """The last task's first attempt dies in `phase` (or, where it has none there, goes on); Spark
    runs it again: its peers wait for the retry's markers (its heart beats again), and the retry
    writes what the first attempt would have. The bytes are those of one whole-partition task."""
    part = generate(tmp_path / "logs", CASE_FLAGS["mixed codecs, tombstones"])
    one = _whole(part)
    specs = specs_for(part, n_groups)
    plan = RangePlan.cut([specs], tasks)
    ex = Exchange(Storage.local(), str(tmp_path / "exchange"), peer_wait=30)
    (tmp_path / "exchange").mkdir()
    victim, died, real = tasks - 1, [], getattr(range_task, phase)

    def dies_once(*args, **kwargs):
        if threading.current_thread().name == "victim" and not died:
            died.append(phase)
            raise _Killed
        return real(*args, **kwargs)

    monkeypatch.setattr(range_task, phase, dies_once)

    def attempt(t):
        threading.current_thread().name = "victim" if t == victim else f"task-{t}"
        try:
            return run_task(t, plan, ex, 1 << 30)
        except _Killed:
            time.sleep(1.5)  # the retry starts later, on another executor
            threading.current_thread().name = "retry"
            return run_task(t, plan, ex, 1 << 30)

    with ThreadPoolExecutor(tasks) as pool:
        outs = as_rows(r for out in pool.map(attempt, range(tasks)) for r in out)
    left = []
    rows = finish(plan, ex, outs, lambda kind, items: left.extend(items) or [])
    assert not left, f"the peers gave up on the retried task: {left}"
    assert not any(n.startswith("gone-") for n in (p.name for p in (tmp_path / "exchange").iterdir()))
    _check(part, [r for r in rows if r["group_id"] != STATS_ROW], one, specs)


def test_a_rewriter_that_gives_up_on_a_piece_leaves_the_group_to_a_follow_up(tmp_path, monkeypatch):
    """One group cut between two tasks: the task holding the smaller range dies while it cleans
    its piece, and its retry comes later than the rewriter will wait. The rewriter gives up in the
    middle of the group, leaving its own range's ids in the exchange; the retry cleans the piece;
    `finish` rewrites the group from those ids and the piece: the bytes of one task."""
    part = generate(tmp_path / "logs", CASE_FLAGS["mixed codecs, tombstones"])
    one = _whole(part)
    specs = specs_for(part, 1)
    plan = RangePlan.cut([specs], 2)
    rewriter = plan.rewriter[specs[0].group_id]
    victim = 1 - rewriter
    ex = Exchange(Storage.local(), str(tmp_path / "exchange"), peer_wait=0.5)
    (tmp_path / "exchange").mkdir()
    real, died = range_task._write_piece, []

    def dies_once(*args):
        if threading.current_thread().name == "victim" and not died:
            died.append(1)
            raise _Killed
        return real(*args)

    monkeypatch.setattr(range_task, "_write_piece", dies_once)

    def attempt(t):
        threading.current_thread().name = "victim" if t == victim else "rewriter"
        try:
            return run_task(t, plan, ex, 1 << 30)
        except _Killed:
            while not (tmp_path / "exchange" / f"gone-{rewriter}").exists():
                time.sleep(0.05)  # the retry starts after the rewriter gave up
            return run_task(t, plan, ex, 1 << 30)

    with ThreadPoolExecutor(2) as pool:
        outs = as_rows(r for out in pool.map(attempt, range(2)) for r in out)
    assert [p.name for p in (tmp_path / "exchange").glob("ids-*")] == [f"ids-{plan.tasks[rewriter][0]}"]
    kinds = []

    def run(kind, items):
        kinds.append((kind, len(items)))
        return as_rows(r for item in items for r in resume(kind, item, plan, ex, 1 << 30))

    rows = finish(plan, ex, outs, run)
    assert [k for k, n in kinds if n] == ["rewrite"]  # the merges and the piece were done in the stage
    _check(part, [r for r in rows if r["group_id"] != STATS_ROW], one, specs)


@pytest.mark.parametrize("n_groups, tasks", SHAPES)
def test_a_merge_that_fails_in_the_follow_up_fails_the_groups_it_feeds(
    tmp_path, monkeypatch, n_groups, tasks
):
    """The stage's tasks run one after another (each gives up on its peers) and the merges fail:
    the follow-up's rewrites report the merge's error for every group that needs a merge, clean
    no piece of a cut group, and write nothing for them; a group of one range that no later
    range of another task follows needs no merge and is cleaned."""
    part = generate(tmp_path / "logs", CASE_FLAGS["mixed codecs, tombstones"])
    specs = specs_for(part, n_groups)
    plan = RangePlan.cut([specs], tasks)
    ex = Exchange(Storage.local(), str(tmp_path / "exchange"), peer_wait=0.3)
    (tmp_path / "exchange").mkdir()

    def fails(rows):
        raise OSError("the merge's exchange went away")

    monkeypatch.setattr(ranges, "merge_bucket", fails)
    outs = as_rows(r for t in range(tasks) for r in run_task(t, plan, ex, 1 << 30))
    kinds = []

    def run(kind, items):
        kinds.append((kind, len(items)))
        return as_rows(r for item in items for r in resume(kind, item, plan, ex, 1 << 30))

    rows = finish(plan, ex, outs, run)
    assert [k for k, n in kinds if n] == ["merge", "rewrite"]
    errors = {
        r["group_id"]: "the merge's exchange went away" in (r.get("error") or "")
        for r in rows
        if r["group_id"] != STATS_ROW
    }
    early = {g for g, (_, rids) in plan.groups.items() if len(rids) == 1 and not plan.merged(rids[0])}
    assert early == ({specs[-1].group_id} if n_groups > 1 else set())
    assert errors == {s.group_id: s.group_id not in early for s in specs}
    assert sorted(cleaned(part)) == sorted(
        naming.segment_file_name(s.segments[0].base_offset, suffix) + CLEANED
        for s in specs
        if s.group_id in early
        for suffix in (".log", ".index", ".timeindex")
    )
    assert not any(p.name.startswith("piece-") for p in (tmp_path / "exchange").iterdir())


def test_a_piece_that_fails_fails_its_group_in_the_rewriter(tmp_path, monkeypatch):
    """One group cut between two tasks: the task holding the smaller range fails to clean it into
    its piece. The rewriter must report that error for the group, not write the group without the
    piece's records."""
    part = generate(tmp_path / "logs", CASE_FLAGS["mixed codecs, tombstones"])
    specs = specs_for(part, 1)

    def fails(*args, **kw):
        raise OSError("the piece's disk went away")

    monkeypatch.setattr(range_task, "rewrite_piece", fails)
    rows = in_ranges(specs, 2, tmp_path / "exchange")
    assert [r["group_id"] for r in rows] == [specs[0].group_id]
    assert "the piece's disk went away" in (rows[0].get("error") or ""), rows
    assert any(p.name.startswith("piece-") for p in (tmp_path / "exchange").iterdir())  # the piece path ran


def test_a_merge_that_fails_fails_every_group_it_feeds(tmp_path, monkeypatch):
    """Two groups over two tasks: a merge task fails. The first group may not be rewritten without
    the merge's FOUND entries (its keys' later offsets): it reports the error. The last group
    needs nothing from the merge (no later range), and is rewritten while the merge runs; the
    partition fails as a whole at commit (steps/outcome.py)."""
    part = generate(tmp_path / "logs", CASE_FLAGS["mixed codecs, tombstones"])
    specs = specs_for(part, 2)

    def fails(rows):
        raise OSError("the merge's exchange went away")

    monkeypatch.setattr(ranges, "merge_bucket", fails)
    rows = in_ranges(specs, 2, tmp_path / "exchange")
    assert [r["group_id"] for r in rows] == [s.group_id for s in specs]
    assert "the merge's exchange went away" in (rows[0].get("error") or ""), rows
    assert not rows[1].get("error"), rows


def test_one_merge_that_fails_fails_the_cut_group_and_its_pieces_are_not_cleaned(tmp_path, monkeypatch):
    """One group cut between three tasks, the merge of one task failing: the group reports that
    merge's error, and the tasks that hold its other ranges post their pieces' status with it and
    clean nothing (its rewriter waits for no piece)."""
    part = generate(tmp_path / "logs", CASE_FLAGS["mixed codecs, tombstones"])
    specs = specs_for(part, 1)
    merge = range_task._merge

    def fails_in_task_0(t, *args):
        return "task 0's merge: the exchange went away" if t == 0 else merge(t, *args)

    monkeypatch.setattr(range_task, "_merge", fails_in_task_0)
    rows = in_ranges(specs, 3, tmp_path / "exchange")
    assert [(r["group_id"], r.get("error")) for r in rows] == [(10, "task 0's merge: the exchange went away")]
    names = [p.name for p in (tmp_path / "exchange").iterdir()]
    assert any(n.startswith("done-piece-") for n in names), names
    assert not any(n.startswith("piece-") for n in names), names
    assert not cleaned(part)


def test_a_hand_over_that_fails_fails_the_partition_it_hands_over(tmp_path, monkeypatch):
    """A partition with transactions is one unit, rewritten by one task: the other task hands its
    ranges over as ids. When writing them fails, the error is reported for every group of the
    unit (the task does not die with it) and nothing is written."""
    part = generate(tmp_path / "logs", CASE_FLAGS["transactions, aborts"])
    specs = specs_for(part, 2)
    handed = []

    def fails(r, held):
        handed.append(r)
        raise OSError("the exchange refused the ids")

    monkeypatch.setattr(ranges, "held_blocks", fails)
    rows = in_ranges(specs, 2, tmp_path / "exchange")
    assert handed, "no range was handed over"
    assert [r["group_id"] for r in rows] == [s.group_id for s in specs]
    assert all("the exchange refused the ids" in (r.get("error") or "") for r in rows), rows
    assert not cleaned(part)


@pytest.mark.parametrize("chunk", [1, 3000, None])
def test_a_cut_group_writes_and_counts_what_one_task_does(tmp_path, monkeypatch, chunk):
    """One group cut between three tasks: the rewriter copies the other ranges' pieces into the
    group's file whole batches at a time, at most `chunk` bytes each (1: a batch a chunk; 3000:
    a few; None: the worker's default, a piece a chunk), and adds their counts to the group's.
    The files and the report are those of one whole-partition task."""
    if chunk is not None:
        monkeypatch.setattr(range_task, "_piece_chunk_bytes", chunk)
    part = generate(tmp_path / "logs", CASE_FLAGS["mixed codecs, tombstones"])
    whole = compact_partition(specs_for(part, 1))
    one = cleaned(part)
    specs = specs_for(part, 1)
    rows = in_ranges(specs, 3, tmp_path / "exchange")
    assert any(p.name.startswith("piece-") for p in (tmp_path / "exchange").iterdir())
    assert cleaned(part) == one
    counts = [
        n for n in dataclasses.fields(GroupResult) if n.name.endswith(("_read", "_written", "_records"))
    ]
    assert len(rows) == 1 and len(counts) >= 7
    assert {n.name: rows[0].get(n.name) for n in counts} == {n.name: whole[0].get(n.name) for n in counts}


def test_a_damaged_partition_is_reported_by_finish_and_the_other_cleaned(tmp_path):
    a = generate(tmp_path / "a", CASE_FLAGS["mixed codecs, tombstones"])
    b = generate(tmp_path / "b", CASE_FLAGS["mixed codecs, tombstones"])
    one = _whole(b)
    specs_a = specs_for(a, 2)
    specs_b = [dataclasses.replace(s, group_id=s.group_id + 100) for s in specs_for(b, 2)]
    seg = sorted(a.glob("*.log"))[1]
    data = bytearray(seg.read_bytes())
    data[200] ^= 0xFF  # a CRC no longer matches
    seg.write_bytes(bytes(data))
    rows = in_ranges([], 2, tmp_path / "exchange", partitions=[specs_a, specs_b])
    by_group = {r["group_id"]: r for r in rows}
    assert sorted(by_group) == sorted(s.group_id for s in specs_a + specs_b)
    assert all(seg.name in by_group[s.group_id]["error"] for s in specs_a), rows
    assert not any(by_group[s.group_id].get("error") for s in specs_b)
    assert _logs(cleaned(b)) == _logs(one)
    assert not cleaned(a)


def test_leader_epochs_that_go_back_fail_their_partition_and_the_other_is_cleaned(tmp_path):
    """The check of a partition's leader epochs across its ranges, made once its ranges' scans
    are all in: a partition whose second segment's epoch is below its first's fails every group
    with the error naming that segment, and the other partition of the stage is cleaned."""
    a = generate(tmp_path / "a", CASE_FLAGS["mixed codecs, tombstones"])
    b = generate(tmp_path / "b", CASE_FLAGS["mixed codecs, tombstones"])
    one = _whole(b)
    first, second = bases(str(a))[:2]
    set_epochs(str(a), first, 5)  # a later leader's epoch before an earlier one's (0)
    specs_a = specs_for(a, 2)
    specs_b = [dataclasses.replace(s, group_id=s.group_id + 100) for s in specs_for(b, 2)]
    rows = in_ranges([], 2, tmp_path / "exchange", partitions=[specs_a, specs_b])
    by_group = {r["group_id"]: r for r in rows}
    assert sorted(by_group) == sorted(s.group_id for s in specs_a + specs_b)
    name = naming.segment_file_name(second)
    assert all(f"{name} has leader epoch 0" in by_group[s.group_id]["error"] for s in specs_a), rows
    assert not any(by_group[s.group_id].get("error") for s in specs_b)
    assert _logs(cleaned(b)) == _logs(one)
    assert not cleaned(a)


@pytest.mark.parametrize("n_groups, tasks", [(1, 3), (3, 2)])
def test_an_open_transaction_below_the_bound_sends_the_partition_back_to_planning(tmp_path, n_groups, tasks):
    """A partition whose log ends inside a transaction, its segment rolled at the log end (the
    planned bound above the open transaction's first offset): no range task rewrites any of its
    groups, since the cleaner would drop the open transaction's records as if it had aborted; every
    group comes back with the last stable offset (from the generator's manifest) to plan again."""
    root = tmp_path / "logs"
    m, cut = open_txn_log_dir(str(root))
    part = root / "orders-0"
    # The broker's roll at the log end: the segment's indexes trimmed to it, a new active segment.
    last = max(bases(str(part)))
    index, timeindex = index_files(Path(seg_path(str(part), last)).read_bytes(), last)
    Path(seg_path(str(part), last, ".index")).write_bytes(index)
    Path(seg_path(str(part), last, ".timeindex")).write_bytes(timeindex)
    (part / naming.segment_file_name(cut)).write_bytes(b"")
    before = {f.name: f.read_bytes() for f in part.iterdir()}
    specs = specs_for(part, n_groups)
    lso = last_stable_offset(m, cut)
    assert lso < specs[0].upper_bound == cut
    rows = in_ranges(specs, tasks, tmp_path / "exchange")
    assert [(r["group_id"], r.get("error"), r.get("first_unstable")) for r in rows] == [
        (s.group_id, None, lso) for s in specs
    ]
    assert {f.name: f.read_bytes() for f in part.iterdir()} == before


@pytest.mark.parametrize("n_groups, tasks", [(1, 3), (3, 2)])
def test_an_open_transaction_from_the_bound_on_leaves_the_partition_to_the_ranges(tmp_path, n_groups, tasks):
    """The bound planned at the last stable offset, where a segment starts (the open transaction
    in the tail after it, as a broker's active segment holds one): the range tasks clean the
    partition, none sends it back to planning, and they write what a whole-partition task
    writes."""
    root = tmp_path / "logs"
    m, cut = open_txn_log_dir(str(root))
    part = root / "orders-0"
    lso = last_stable_offset(m, cut)
    assert lso in bases(str(part))[1:-1]  # the bound a segment's base, the open transaction after it
    last = max(bases(str(part)))  # its indexes trimmed to the log end, as a broker's recovery does
    index, timeindex = index_files(Path(seg_path(str(part), last)).read_bytes(), last)
    Path(seg_path(str(part), last, ".index")).write_bytes(index)
    Path(seg_path(str(part), last, ".timeindex")).write_bytes(timeindex)
    specs = specs_for(part, n_groups, upper_bound=lso)
    rows = in_ranges(specs, tasks, tmp_path / "exchange")
    assert [(r["group_id"], r.get("error"), r.get("first_unstable")) for r in rows] == [
        (s.group_id, None, None) for s in specs
    ]
    many = cleaned(part)
    compact_partition(specs)
    assert _logs(many) == _logs(cleaned(part)) != b""


# One transaction over the whole log, its marker in the active segment: the round holds its data
# and no marker at all.
MARKER_PAST_THE_BOUND = (
    "--records 3000 --keys 300 --transactions 0.3 --txn-producers 1 --txn-batches 400 --segment-bytes 20000"
)


@pytest.mark.parametrize("abort_ratio", ["1.0", "0.0"])
@pytest.mark.parametrize("n_groups, tasks", [(1, 3), (3, 2)])
def test_a_transaction_whose_marker_is_past_the_bound_is_cleaned_by_the_ranges_as_kafka_does(
    tmp_path, abort_ratio, n_groups, tasks
):
    """A partition cut into ranges whose round holds transactional data and no marker (the
    transaction's ABORT or COMMIT marker, and its `.txnindex` entry, in the active segment past the
    bound): no open transaction, so the range tasks clean it, and they write what Kafka's cleaner
    keeps (the round model over kafka-python's decoding: an aborted transaction's data dropped,
    since `collectAbortedTransactions` reads the later segments' indexes; a committed one's
    compacted) and the bytes of a whole-partition task."""
    part = generate(tmp_path / "logs", f"{MARKER_PAST_THE_BOUND} --abort-ratio {abort_ratio}")
    snap = snapshot(str(part))
    entries = [e for _, _, es in snap.segments for e in es]
    round_ = [b for b in snap.batches if b.base < snap.active_base]
    assert any(b.txn for b in round_) and not any(b.control for b in round_)
    assert [b.control for b in snap.batches if b.base >= snap.active_base].count(True) == 1
    assert len(entries) == (abort_ratio == "1.0")
    aborted = tuple(AbortedTxn(*e) for e in entries)
    # the model's delete.retention.ms (Kafka's default), for the horizons it gives
    specs = [
        dataclasses.replace(s, aborted_txns=aborted, delete_retention_ms=DELETE_RETENTION_MS)
        for s in specs_for(part, n_groups)
    ]
    assert len(RangePlan.cut([specs], tasks).ranges) > len(specs)  # the groups cut into ranges
    rows = in_ranges(specs, tasks, tmp_path / "exchange")
    assert [(r["group_id"], r.get("error"), r.get("first_unstable")) for r in rows] == [
        (s.group_id, None, None) for s in specs
    ]
    many = cleaned(part)
    out = tmp_path / "out.log"
    out.write_bytes(_logs(many))
    expected, _ = expected_round(snap, NOW_MS)
    kept = [b for b in expected if b.base < snap.active_base]
    assert decode_batches(str(out)) == kept
    assert any(b.txn and b.records for b in kept) == (abort_ratio == "0.0")  # the aborted data dropped
    compact_partition(specs)
    assert _logs(many) == _logs(cleaned(part))


def test_clean_section_keys_absent_from_later_ranges_are_kept(tmp_path):
    part = generate(tmp_path / "logs", "--records 4000 --keys 2000 --segment-bytes 30000")
    bases = sorted(naming.parse_segment_file_name(f.name).base_offset for f in part.glob("*.log"))
    first_dirty = bases[len(bases) // 2]
    compact_partition(specs_for(part, 1, first_dirty))
    one = cleaned(part)
    in_ranges(specs_for(part, 3, first_dirty), 2, tmp_path / "exchange")
    many = cleaned(part)
    logs = lambda files: b"".join(v for k, v in sorted(files.items()) if k.endswith(".log" + CLEANED))  # noqa: E731
    assert logs(many) == logs(one)


def test_a_scan_whose_blocks_cannot_be_written_fails_its_ranges_and_holds_none(tmp_path, monkeypatch):
    """A task's ranges of a partition scanned together, the exchange refusing the last one's
    blocks after the others' were written: every range of the scan reports the error, and the
    task holds none of them (nothing of a failed partition is kept, or handed to a follow-up)."""
    part = generate(tmp_path / "logs", CASE_FLAGS["mixed codecs, tombstones"])
    plan = RangePlan.cut([specs_for(part, 3)], 1)
    rids = plan.tasks[0]
    assert len(rids) == 3
    (tmp_path / "exchange").mkdir()
    written = []
    write = Exchange.write_blocks

    def refuses_the_last(self, name, blocks):
        if name == f"scan-{rids[-1]}":
            raise OSError("the exchange refused the blocks")
        written.append(name)
        return write(self, name, blocks)

    monkeypatch.setattr(Exchange, "write_blocks", refuses_the_last)
    task = range_task._Task(plan, Exchange(Storage.local(), str(tmp_path / "exchange")), None)
    status = range_task._scan(rids, task)
    assert written == [f"scan-{r}" for r in rids[:-1]]
    assert sorted(status) == sorted(str(r) for r in rids)
    assert all("the exchange refused the blocks" in s["error"] for s in status.values()), status
    assert task.held == {}


def test_a_tasks_ranges_scanned_together_keep_what_one_whole_scan_keeps(tmp_path):
    """One task's ranges of a partition are scanned into one key table: their kept scans hold
    exactly what the whole-partition task's scan keeps (only the records no later segment
    supersedes), and a range ships no key whose latest offset lies in a later range of the task."""
    from compaction.steps.scan import ScanCache, scan_partition

    part = generate(tmp_path / "logs", "--records 6000 --keys 500 --codec mixed --segment-bytes 40000")
    whole = ScanCache(1 << 30)
    scan_partition(specs_for(part, 1), whole)
    plan = RangePlan.cut([specs_for(part, 4)], 1)
    rids = plan.tasks[0]
    assert len(rids) == 4
    together = ScanCache(1 << 30)
    specs = [plan.ranges[r].scan for r in rids]
    scanned = ranges.scan_ranges(rids, specs, 0, together)
    assert together.held == whole.held
    omitted = 0
    for n, (held, blocks) in enumerate(scanned[:-1]):
        summary = [ranges.from_block(b.data) for b in blocks if b.kind == ranges.SUMMARY]
        none = [np.empty(0, np.int64)]
        shipped = np.concatenate([ranges.column(b, "latest", np.int64) for b in summary] or none)
        ids = np.concatenate([ranges.column(b, "id", np.int32) for b in summary] or none)
        later = specs[n + 1].segments[0].base_offset
        assert (shipped < later).all() and len(shipped) == int((held.latest < later).sum())
        assert (held.latest[ids] == shipped).all()
        omitted += len(held.latest) - len(shipped)
    assert omitted > 0


def test_a_tasks_ranges_ship_the_producer_headers_of_the_whole_scan(tmp_path):
    """A task's four ranges of a partition of transactions and idempotent producers, scanned
    together: each range's PRODUCERS block holds the producer batch headers of its own segments
    (and its tail's), and over the ranges they are exactly the whole-partition scan's, each once."""
    from compaction.steps.scan import scan_partition

    part = generate(tmp_path / "logs", CASE_FLAGS["transactions, aborts"])
    _, whole = scan_partition(specs_for(part, 1))
    plan = RangePlan.cut([specs_for(part, 4)], 1)
    rids = plan.tasks[0]
    assert len(rids) == 4
    specs = [plan.ranges[r].scan for r in rids]

    def rows(tables) -> list[tuple]:
        cols = [[pa.table(t).column(c).to_pylist() for c in ranges.HEADER_COLUMNS] for t in tables]
        return sorted(r for c in cols for r in zip(*c))

    shipped = []
    for n, (_, blocks) in enumerate(ranges.scan_ranges(rids, specs, 0)):
        mine = rows(ranges.from_block(b.data) for b in blocks if b.kind == ranges.PRODUCERS)
        end = specs[n + 1].segments[0].base_offset if n + 1 < len(specs) else float("inf")
        assert mine and all(specs[n].segments[0].base_offset <= r[2] < end for r in mine)
        shipped += mine
    assert sorted(shipped) == rows(whole)


@pytest.mark.parametrize("groups, tasks", [((3, 2), 1), ((1, 3, 1), 1), ((3, 2), 2), ((2, 1, 2), 3)])
def test_a_tasks_ranges_are_scanned_together_partition_by_partition(tmp_path, groups, tasks):
    """A task's ranges (log order) are cut into runs where the partition changes: each run is one
    scan, one key table (`scan_ranges`), never two partitions', and a partition's ranges in the
    task are one run. `groups`: the number of groups of each partition."""
    part = generate(tmp_path / "logs", "--records 600 --keys 50 --segment-bytes 4000")
    partitions = [
        [dataclasses.replace(s, group_id=s.group_id + 100 * n) for s in specs_for(part, g)]
        for n, g in enumerate(groups)
    ]
    plan = RangePlan.cut(partitions, tasks)
    assert len(plan.tasks) == tasks
    for rids in plan.tasks:
        present = sorted({plan.ranges[r].partition for r in rids})
        want = [[r for r in rids if plan.ranges[r].partition == p] for p in present]
        assert range_task._runs_of_partitions(rids, plan) == want
    assert range_task._runs_of_partitions([], plan) == []


# (the marks a task reached, seconds after it started) -> its (scan, map) seconds; a mark not
# reached is the moment the timings are taken (`now`, 20 s after the start here).
@pytest.mark.parametrize(
    "marks, scan, map_",
    [
        ({"scanned": 1, "posted": 3, "rewritten": 4, "merged": 9}, 1, 2 + 5),  # merge, then the wait
        ({"scanned": 1, "posted": 3, "rewritten": 4}, 1, 2 + 16),  # gave up waiting for the merges: until now
        ({"scanned": 1, "posted": 3, "rewritten": 4, "merged": 4}, 1, 2),  # the others' merges done first
        ({"scanned": 2}, 2, 0),  # stopped after the scan (its peers gone)
        ({}, 20, 0),  # stopped during its scan
    ],
)
def test_a_range_tasks_timings_are_its_scan_and_its_merge_with_the_wait_for_the_others(marks, scan, map_):
    """A ranges task's scan seconds end at its scan's end; its map seconds are its own merge and
    the wait for the others' merges (not the rewrite it does meanwhile): what a whole-partition
    task spends on its offset map."""
    clock = pipeline.TaskClock()
    now = time.monotonic()
    clock.started = now - 20
    timings = range_task._timings(clock, {k: clock.started + v for k, v in marks.items()})
    later = time.monotonic() - now  # the moment taken for a mark not reached: at most this late
    assert scan <= timings.scan_seconds <= scan + (later if "scanned" not in marks else 0)
    assert map_ <= timings.map_seconds <= map_ + later


@pytest.mark.parametrize("txn", [False, True])
def test_who_does_what_follows_from_the_plan_and_the_ranges_scans(tmp_path, txn):
    """`Work.of`, the same in every task and on the driver: three partitions over two tasks, the
    first damaged in both its ranges (it fails with its first range's error, in log order, as a
    whole-partition scan stops at the first damage), the second with a group cut between the two
    tasks, the third whole in task 1. Without transactions the second's groups are units of their
    own, the cut one rewritten from pieces; with them (`txn`, seen in its last range) the
    partition is one unit, rewritten by the rewriter of its first group, and nothing is a piece.
    A unit of one range that no later range of another task follows needs no merge (`early`)."""
    part = generate(tmp_path / "logs", "--records 600 --keys 50 --segment-bytes 4000")
    partitions = [
        [dataclasses.replace(s, group_id=s.group_id + 100 * n) for s in specs_for(part, g)]
        for n, g in enumerate((2, 3, 2))
    ]
    plan = RangePlan.cut(partitions, 2)
    assert plan.tasks == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert {g: c.ranges for g, c in plan.groups.items()} == {
        10: [0],
        11: [1],
        110: [2],
        111: [3, 4],
        112: [5],
        210: [6],
        211: [7],
    }
    assert plan.rewriter == {10: 0, 11: 0, 110: 0, 111: 1, 112: 1, 210: 1, 211: 1}

    def status(r):
        error = f"range {r} damaged" if r in (0, 1) else None
        return {"error": error, "txn": txn and r == 5, "stats": [1000 * (r + 1), 100, 10]}

    work = range_task.Work.of(plan, [{str(r): status(r) for r in rids} for rids in plan.tasks])
    assert work.dead == {0: "range 0 damaged"}
    assert work.holder == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    if txn:
        assert work.units == {110: [110, 111, 112], 210: [210], 211: [211]}
        assert work.split == frozenset() and work.early == {210, 211}
        assert work.task_of == {110: 0, 111: 0, 112: 0, 210: 1, 211: 1}
        assert work.rewrites(0, plan, early=False) == {1: [[110, 111, 112]]}
        assert work.rewrites(1, plan, early=False) == {}
        assert work.rewrites(1, plan, early=True) == {2: [[210], [211]]}
    else:
        assert work.units == {g: [g] for g in (110, 111, 112, 210, 211)}
        assert work.split == {111} and work.early == {112, 210, 211}
        assert work.task_of == {110: 0, 111: 1, 112: 1, 210: 1, 211: 1}
        assert work.rewrites(0, plan, early=False) == {1: [[110]]}
        assert work.rewrites(1, plan, early=False) == {1: [[111]]}
        assert work.rewrites(1, plan, early=True) == {1: [[112]], 2: [[210], [211]]}
    assert work.rewrites(0, plan, early=True) == {}
    assert work.pieces_of(0, plan) == ([] if txn else [3]) and work.pieces_of(1, plan) == []
    assert len(work.buckets) == 2 and sorted(b for bs in work.buckets for b in bs) == list(
        range(ranges.FINE_BUCKETS)
    )


@pytest.mark.parametrize(
    "seg_ids, n_keys, keys, local",
    [
        ([[]], 0, [], [[]]),
        ([[-1, -1]], 3, [], [[-1, -1]]),
        ([[2, 0, 2], [-1, 0]], 4, [0, 2], [[1, 0, 1], [-1, 0]]),
        ([[3], [1, 3, -1]], 4, [1, 3], [[1], [0, 1, -1]]),
    ],
)
def test_local_ids_number_a_ranges_keys_in_table_order(seg_ids, n_keys, keys, local):
    got_keys, got = ranges.local_ids([np.array(d, np.int64) for d in seg_ids], n_keys)
    assert got_keys.tolist() == keys
    assert [g.tolist() for g in got] == local and all(g.dtype == np.int32 for g in got)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.binary(max_size=6), st.integers(-1, 50)), max_size=60),
    st.integers(1, 5),
    st.sampled_from([1 << 19, 0]),
)
# A key in both partitions, its later offset in the other one: it must not reach range 2.
@example(rows=[(0, b"k", 9), (2, b"k", 1)], buckets=1, cached_rows=1 << 19)
@example(rows=[(0, b"k", 9), (2, b"k", 1)], buckets=1, cached_rows=0)
def test_merge_gives_each_range_the_max_over_its_partition(rows, buckets, cached_rows):
    """merge_bucket against a dict: (partition, key) -> max latest; FOUND only where it beats the
    range's. Both ways of merging a bucket: the table over the rows' bytes, the key table."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ranges, "CACHED_MERGE_ROWS", cached_rows)
        _check_merge(rows)


def _check_merge(rows):
    by_range: dict[int, dict[bytes, int]] = {}
    for r, key, latest in rows:
        by_range.setdefault(r, {})
        by_range[r][key] = max(latest, by_range[r].get(key, -1))
    part_of = {0: 0, 1: 0, 2: 1}  # ranges 0 and 1 are one partition, range 2 another
    expect: dict[tuple[int, bytes], int] = {}
    for r, keys in by_range.items():
        for k, v in keys.items():
            expect[(part_of[r], k)] = max(v, expect.get((part_of[r], k), -1))
    blocks = []
    for r, keys in by_range.items():
        ks = list(keys)
        blocks.append(
            (
                r,
                ranges.to_block(
                    key=pa.array(ks, pa.binary()),
                    latest=np.array([keys[k] for k in ks], np.int64),
                    id=np.arange(len(ks), dtype=np.int32),
                    part=np.full(len(ks), part_of[r], np.int32),
                ),
            )
        )
    got: dict[int, dict[int, int]] = {}
    for b in ranges.merge_bucket(blocks):
        f = ranges.from_block(b.data)
        got.setdefault(b.range_id, {}).update(zip(f.column("id").to_pylist(), f.column("latest").to_pylist()))
    for r, keys in by_range.items():
        want = {i: expect[(part_of[r], k)] for i, k in enumerate(keys) if expect[(part_of[r], k)] > keys[k]}
        assert got.get(r, {}) == want


# (range, key, latest) rows: ranges 0 and 1 are partition 0, range 2 partition 1 (`_check_merge`).
MERGE_ROWS = {
    "the later range's offset reaches the earlier": [(0, b"k", 3), (1, b"k", 9)],
    "the earlier range's offset reaches the later": [(0, b"k", 9), (1, b"k", 3)],
    "equal offsets: no FOUND": [(0, b"k", 5), (1, b"k", 5)],
    "offset 0 beats no dirty record": [(0, b"k", -1), (1, b"k", 0)],
    "empty keys": [(0, b"", 2), (1, b"", 7), (2, b"", 1)],
    "keys that are prefixes of each other": [(0, b"ab", 4), (0, b"abc", 1), (1, b"abc", 8), (1, b"a", 9)],
    "the other partition's higher offset is not taken": [(0, b"k", 3), (1, b"k", 5), (2, b"k", 9)],
    # more keys than the table's 16 smallest slots: probes past taken slots
    "40 keys in both ranges": [(r, b"%d" % i, i if r == 0 else 40 - i) for r in (0, 1) for i in range(40)]
    + [(2, b"%d" % i, 100) for i in range(0, 40, 3)],
}


@pytest.mark.parametrize("cached_rows", [1 << 19, 0])
@pytest.mark.parametrize("case", sorted(MERGE_ROWS))
def test_merge_of_a_key_in_two_ranges_of_a_partition(case, cached_rows):
    """The merge's boundary table, both ways of merging a bucket: a key in two ranges of one
    partition gets the higher offset in the other range, never one of another partition."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ranges, "CACHED_MERGE_ROWS", cached_rows)
        _check_merge(MERGE_ROWS[case])


@pytest.mark.parametrize("prefix", [b"", b"k", b"key-"])
def test_merge_table_probes_wrap_inside_its_slots(prefix):
    """`_max_by_key` with 15 (partition, key) pairs, 8 keys in partition 0 and 7 of them in
    partition 1, 20 rows, in 16 slots that are the head of a larger zeroed buffer: every probe
    wraps at the end of the table (a compiled kernel checks no index, so one past it would take
    the buffer's next word as a free slot), the long probes pass the same key of the other
    partition without taking it, and each row gets the max of its (partition, key)."""
    rows = [(0, b"%s%d" % (prefix, i), i) for i in range(8)]
    rows += [(1, b"%s%d" % (prefix, i), 20 - i) for i in range(7)]
    rows += [(p, k, (v * 7) % 23) for p, k, v in rows[:5]]
    part = np.array([p for p, _, _ in rows], np.int32)
    latest = np.array([v for _, _, v in rows], np.int64)
    offs = np.cumsum([0] + [len(k) for _, k, _ in rows]).astype(np.int64)
    buf = np.zeros(64, np.uint64)
    out, rep = np.empty(len(rows), np.int64), np.empty(len(rows), np.int64)
    data = np.frombuffer(b"".join(k for _, k, _ in rows), np.uint8)
    ranges._max_by_key(data, offs, part, latest, buf[:16], rep, out)
    assert (buf[16:] == 0).all()
    best = {(p, k): max(v for pp, kk, v in rows if (pp, kk) == (p, k)) for p, k, _ in rows}
    assert out.tolist() == [best[(p, k)] for p, k, _ in rows]


@pytest.mark.parametrize(
    "arrays",
    [
        [],
        [pa.array([], pa.binary())],
        [pa.array([b""], pa.binary()), pa.array([b"", b""], pa.large_binary())],
        [pa.array([b"ab", b"", b"cde"], pa.binary())],
        [pa.array([b"xy", b"ab", b"", b"cde", b"f"], pa.binary()).slice(1, 3)],
        [
            pa.array([b"q", b"rs"], pa.large_binary()).slice(1),
            pa.array([b"tuv"], pa.binary()),
            pa.array([b"w", b"", b"xyz"], pa.binary()).slice(2),
        ],
    ],
)
def test_flat_lays_the_keys_of_sliced_arrays_end_to_end(arrays):
    """`_flat` reads the arrays' buffers: a slice starts inside its buffers (offset and first
    value offset not 0), a large binary array has 64-bit offsets, an array of empty keys may
    have no data buffer."""
    keys = [k for a in arrays for k in a.to_pylist()]
    data, offs = ranges._flat(arrays)
    assert data.tobytes() == b"".join(keys)
    assert offs.tolist() == np.cumsum([0] + [len(k) for k in keys]).tolist()


def test_prefixed_puts_each_keys_partition_before_it_big_endian():
    keys = [b"ab", b"", b"cde", b"ab"]
    part = np.array([0, 7, 1 << 24, 258], np.int64)
    offs = np.cumsum([0] + [len(k) for k in keys]).astype(np.int64)
    data, new_offs = ranges._prefixed(np.frombuffer(b"".join(keys), np.uint8), offs, part)
    want = [int(p).to_bytes(4, "big") + k for p, k in zip(part.tolist(), keys)]
    assert data.tobytes() == b"".join(want)
    assert new_offs.tolist() == np.cumsum([0] + [len(w) for w in want]).tolist()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.binary(max_size=9), st.integers(-1, 10**12)), max_size=80),
    st.sampled_from([1, 2, 64]),
)
def test_summaries_lay_the_keys_out_by_bucket_as_a_stable_sort_would(keys, buckets):
    """`_by_bucket` (compiled) against its plain twin: numpy's stable argsort by bucket and a gather."""
    # the keys apart in their buffer, with bytes between them, as in a key table's regions
    data = np.frombuffer(b"".join(b"#" * (i % 3) + k for i, (k, _) in enumerate(keys)), np.uint8)
    stops = np.cumsum([i % 3 + len(k) for i, (k, _) in enumerate(keys)]).astype(np.int64)
    starts = stops - np.array([len(k) for k, _ in keys], np.int64)
    latest = np.array([v for _, v in keys], np.int64)
    bucket = ranges.bucket_of(data, starts, stops, buckets)
    n = len(keys)
    order, ends = np.empty(n, np.int64), np.zeros(buckets + 1, np.int64)
    size = sum(len(k) for k, _ in keys)
    out, out_offs, out_latest = np.empty(size, np.uint8), np.empty(n + 1, np.int64), np.empty(n, np.int64)
    ranges._by_bucket(data, starts, stops, latest, bucket, order, ends, out, out_offs, out_latest)
    want = np.argsort(bucket, kind="stable")
    assert order.tolist() == want.tolist()
    assert ends.tolist() == np.searchsorted(bucket[want], np.arange(buckets + 1)).tolist()
    assert [out[out_offs[j] : out_offs[j + 1]].tobytes() for j in range(n)] == [keys[i][0] for i in want]
    assert out_latest.tolist() == latest[want].tolist() and out_offs[n] == size


def test_summaries_of_a_large_range_ship_each_key_once_in_its_bucket():
    """`_summaries` of every other key of a 6 MB arena (400k keys of 15 bytes; `rows` their ids):
    each shipped key in exactly one SUMMARY block, of its bucket, with its latest offset, its id
    and the partition. Its buffer holds the shipped keys' bytes: one sized from where the keys
    lie in the arena instead of from their lengths would be hundreds of GB here."""
    n = 400_000
    data = np.frombuffer(b"".join(b"%015d" % (i * 7919) for i in range(n)), np.uint8)
    starts = np.arange(n, dtype=np.int64) * 15
    stops = starts + 15
    latest = np.arange(n, dtype=np.int64) * 3 - 1
    ship = np.arange(0, n, 2)
    blocks = list(ranges._summaries(5, 2, data, starts[ship], stops[ship], latest[ship], 64, ship))
    assert {(b.range_id, b.kind) for b in blocks} == {(5, ranges.SUMMARY)}
    got: dict[int, tuple[int, int, int]] = {}
    for b in blocks:
        f = ranges.from_block(b.data)
        ids = ranges.column(f, "id", np.int64)
        assert (ranges.bucket_of(data, starts[ids], stops[ids], 64) == b.bucket).all()
        keys = f.column("key").to_pylist()
        assert keys == [data[starts[i] : stops[i]].tobytes() for i in ids]
        for i, lat, part in zip(ids.tolist(), f.column("latest").to_pylist(), f.column("part").to_pylist()):
            assert i not in got
            got[i] = (lat, part)
    assert got == {i: (int(latest[i]), 2) for i in ship.tolist()}


def test_key_table_export_is_dense_and_complete():
    table = KeyTable(50_000)
    keys = [f"k{i % 3000}".encode() for i in range(10_000)]
    data = np.frombuffer(b"".join(keys), np.uint8)
    lens = np.array([len(k) for k in keys], np.int64)
    pos = np.concatenate([[0], np.cumsum(lens)[:-1]])
    offsets = np.arange(10_000, dtype=np.int64)
    ids = table.assign(
        data, np.empty(0, np.uint8), len(data), pos, lens, np.ones(10_000, bool), offsets % 2 == 0, offsets
    )
    arena, starts, stops, latest = table.export()
    dense = table.dense_ids(ids)
    assert (
        sorted(set(dense.tolist())) == list(range(3000)) and len(starts) == len(stops) == len(latest) == 3000
    )
    for r in (0, 1, 2999, 5000, 9999):
        i = int(dense[r])
        assert arena[starts[i] : stops[i]].tobytes() == keys[r]
        assert latest[i] == max((o for o in range(r % 3000, 10_000, 3000) if o % 2 == 0), default=-1)


@pytest.mark.parametrize("case", ["transactions, aborts", "mixed codecs, tombstones"])
@pytest.mark.parametrize("n_ranges", [1, 3])
def test_dry_run_sizes_the_output_exactly_and_writes_nothing(tmp_path, n_ranges, case):
    """A dry run decides and builds everything a round would (its report's sizes are exact) and
    leaves the partition as it found it."""
    part = generate(tmp_path / "logs", f"{CASE_FLAGS[case]} --tombstone-ratio 0.1")
    before = {f.name: f.read_bytes() for f in part.iterdir()}
    dry = [dataclasses.replace(s, dry_run=True) for s in specs_for(part, n_ranges)]
    rows = compact_partition(dry) if n_ranges == 1 else in_ranges(dry, 2, tmp_path / "dry")
    assert {f.name: f.read_bytes() for f in part.iterdir()} == before
    real = (
        compact_partition(specs_for(part, n_ranges))
        if n_ranges == 1
        else in_ranges(specs_for(part, n_ranges), 2, tmp_path / "real")
    )
    written = cleaned(part)
    assert outcomes(rows) == outcomes(real)
    assert sum(r["bytes_written"] for r in real) == sum(len(v) for k, v in written.items() if ".log" in k)


def test_plan_cuts_the_segments_into_equal_contiguous_shares():
    seg = lambda base, size: SourceSegment(base, size, 0)  # noqa: E731
    specs = [
        GroupSpec(
            group_id=7 + n,
            topic="t",
            partition=0,
            storage=Storage.local(),
            part_path="/x",
            segments=tuple(seg(100 * n + i, 10) for i in range(k)),
            first_dirty_offset=0,
            upper_bound=1000,
            now_ms=NOW_MS,
            delete_retention_ms=0,
            legacy_delete_horizon_ms=0,
            index_interval_bytes=4096,
            tail_segments=(seg(999, 5),) if n == 2 else (),
        )
        for n, k in enumerate((3, 1, 4))
    ]
    plan = RangePlan.cut([specs], 2)
    scanned = [[s.base_offset for r in rids for s in plan.ranges[r].scan.segments] for rids in plan.tasks]
    assert scanned == [[0, 1, 2, 100], [200, 201, 202, 203]]
    assert {g: group.ranges for g, group in plan.groups.items()} == {7: [0], 8: [1], 9: [2]}
    assert plan.rewriter == {7: 0, 8: 0, 9: 1}
    assert [plan.ranges[r].validate for r in range(3)] == [True, False, False]  # index checks with the first
    assert plan.ranges[2].scan.tail_segments == specs[2].tail_segments
    cut = RangePlan.cut([specs[:1]], 2)  # one group of three segments: two ranges, two tasks
    assert [[s.base_offset for s in cut.ranges[r].scan.segments] for r in sorted(cut.ranges)] == [[0], [1, 2]]
    assert cut.groups[7].ranges == [0, 1] and cut.rewriter == {7: 1} and cut.tasks == [[0], [1]]
    # A tie goes to the later task, whose newer range keeps more: the earlier range is the piece.
    tie = RangePlan.cut([[dataclasses.replace(specs[0], segments=specs[0].segments[:2])]], 2)
    assert tie.groups[7].ranges == [0, 1] and tie.rewriter == {7: 1}


MiB = 1 << 20


@pytest.mark.parametrize(
    "sizes, groups, expect",
    [
        ([2048 * MiB], [1], [True]),  # above the 1 GiB limit
        ([600 * MiB], [1], [True]),  # alone: more than a core's share, and big enough to share
        ([100 * MiB], [1], [False]),  # alone but small: the exchange would cost more
        ([100 * MiB], [2], [True]),  # several groups: cut whatever the size
        ([512 * MiB] * 4, [1] * 4, [False] * 4),  # a core's share each: whole tasks
        ([900 * MiB, 100 * MiB], [1, 1], [True, False]),
    ],
)
def test_which_partitions_are_cut_into_ranges(sizes, groups, expect):
    from compaction.steps.schedule import cut_into_ranges

    assert cut_into_ranges(sizes, groups, 2, 1 << 30) == expect


def test_plan_keeps_a_task_that_holds_no_segment():
    seg = lambda base, size: SourceSegment(base, size, 0)  # noqa: E731
    spec = GroupSpec(
        group_id=3,
        topic="t",
        partition=0,
        storage=Storage.local(),
        part_path="/x",
        segments=(seg(0, 100), seg(1, 1), seg(2, 1)),
        first_dirty_offset=0,
        upper_bound=3,
        now_ms=NOW_MS,
        delete_retention_ms=0,
        legacy_delete_horizon_ms=0,
        index_interval_bytes=4096,
    )
    plan = RangePlan.cut([[spec]], 3)
    assert plan.tasks == [[], [0], [1]] and plan.rewriter == {3: 1}


def test_a_tasks_groups_are_made_durable_together_before_their_rows_leave(tmp_path, monkeypatch):
    """A task's groups of one partition are synced together at the end of their rewrite
    (runtime/durability.py), as a whole-partition task's are: every `.cleaned` file of the last
    task's groups, and the partition dir, fsynced before the task returns, none of them before the
    last of them is created."""
    part = generate(tmp_path / "logs", CASE_FLAGS["mixed codecs, tombstones"])
    specs = specs_for(part, 5)
    plan = RangePlan.cut([specs], 2)
    last = [plan.groups[g].spec for g, cut in plan.groups.items() if cut.ranges[0] in plan.tasks[1]]
    assert len(last) == 2
    bases = tuple(naming.offset_prefix(s.new_base) + "." for s in last)
    events = record_creates_and_fsyncs(monkeypatch)
    rows = in_ranges(specs, 2, tmp_path / "exchange")
    assert not any(r.get("error") for r in rows), rows
    mine = lambda p: Path(p).name.startswith(bases) and p.endswith(CLEANED)  # noqa: E731
    created = [i for i, (kind, p) in enumerate(events) if kind == "create" and mine(p)]
    synced = [i for i, (kind, p) in enumerate(events) if kind == "fsync" and mine(p)]
    assert len(created) >= 3 * len(last)
    assert {events[i][1] for i in created} <= {events[i][1] for i in synced}
    assert min(synced) > max(created)  # together at the end, not group by group
    assert str(part) in {p for kind, p in events if kind == "fsync"}
