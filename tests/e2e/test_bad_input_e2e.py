"""Corruption suite: many damaged partitions beside healthy ones in one log dir,
one spark-submit run. Each damaged partition must be reported `failed` with a reason naming the
file (and the byte position where there is one), keep every byte of its files, and not stop the
healthy partitions from being compacted (checked against kafka-python's decoding of the input).
A second log dir on a tiny tmpfs runs out of space mid-rewrite. While the run holds the log dir's
lock, a second run is started and must fail fast (exit 2).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time

import pytest
from e2ekit import tree_hashes
from faultkit import (
    assert_compacted,
    expected_after,
    healthy_log_dir,
    lock_held_by_other,
    run_driver_only,
    small_partition,
    start_submit,
)

from compaction.format.checkpoint import CHECKPOINT_MAX_BYTES
from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000
MAX_MESSAGE_BYTES = 20_000
SEG1 = "00000000000000000010"


def _seg1(log_dir, name, suffix=".log"):
    return os.path.join(log_dir, name, SEG1 + suffix)


def _patch(path, pos, data):
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)


def _make_damaged(log_dir) -> dict[str, tuple[str, ...]]:
    """Damaged partitions -> substrings their reason must contain."""
    want = {}
    pos = small_partition(os.path.join(log_dir, "crc-0"))
    _patch(_seg1(log_dir, "crc-0"), pos[2] + 70, b"\xff")  # a byte inside the third batch's records
    want["crc-0"] = (_seg1(log_dir, "crc-0"), f"byte {pos[2]}", "checksum mismatch")

    pos = small_partition(os.path.join(log_dir, "truncated-0"))
    path = _seg1(log_dir, "truncated-0")
    data = open(path, "rb").read()
    open(path, "wb").write(data[: pos[3] - 9] + data[pos[3] :])  # third batch loses its last 9 bytes
    want["truncated-0"] = (path, f"byte {pos[2]}")

    pos = small_partition(os.path.join(log_dir, "badmagic-0"))
    _patch(_seg1(log_dir, "badmagic-0"), pos[2] + 16, b"\x07")
    want["badmagic-0"] = (_seg1(log_dir, "badmagic-0"), f"byte {pos[2]}", "invalid magic 7")

    pos = small_partition(os.path.join(log_dir, "smallsize-0"))
    _patch(_seg1(log_dir, "smallsize-0"), pos[2] + 8, (5).to_bytes(4, "big"))
    want["smallsize-0"] = (_seg1(log_dir, "smallsize-0"), f"byte {pos[2]}", "record size 5")

    pos = small_partition(os.path.join(log_dir, "toobig-0"), big_at_2=MAX_MESSAGE_BYTES)
    want["toobig-0"] = (_seg1(log_dir, "toobig-0"), f"byte {pos[2]}", "larger than max.message.bytes")

    small_partition(os.path.join(log_dir, "indexpast-0"))
    index = _seg1(log_dir, "indexpast-0", ".index")
    n = os.path.getsize(index) // 8
    assert n >= 2
    _patch(index, (n - 1) * 8 + 4, (10_000).to_bytes(4, "big"))
    want["indexpast-0"] = (index, f"byte {(n - 1) * 8}", "past the end")

    small_partition(os.path.join(log_dir, "indexback-0"))
    index = _seg1(log_dir, "indexback-0", ".index")
    entries = open(index, "rb").read()
    open(index, "wb").write(entries[8:16] + entries[:8] + entries[16:])
    want["indexback-0"] = (index, "byte 8", "goes backwards")

    small_partition(os.path.join(log_dir, "unknown-0"))
    open(os.path.join(log_dir, "unknown-0", "notes.txt"), "w").write("mine\n")
    want["unknown-0"] = ("notes.txt", "unexpected file")

    small_partition(os.path.join(log_dir, "badname-0"))
    shutil.copy(_seg1(log_dir, "badname-0"), os.path.join(log_dir, "badname-0", "0000000000000000010.log"))
    want["badname-0"] = ("0000000000000000010.log", "exactly 20 digits")

    os.makedirs(os.path.join(log_dir, "empty-0"))
    want["empty-0"] = ("empty-0", "no segment")

    # Unreadable file: tests run as root, where chmod 000 does not deny reads; a directory where a
    # file is expected cannot be read by anyone.
    small_partition(os.path.join(log_dir, "unreadable-0"))
    os.remove(_seg1(log_dir, "unreadable-0", ".timeindex"))
    os.makedirs(_seg1(log_dir, "unreadable-0", ".timeindex"))
    want["unreadable-0"] = (_seg1(log_dir, "unreadable-0", ".timeindex"), "is a directory")
    return want


def _tmpfs(path: str, size: int) -> bool:
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True
        ).returncode
        == 0
    )


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("bad_input"))
    log_dir = os.path.join(root, "logs")
    healthy_log_dir(log_dir)
    want = _make_damaged(log_dir)
    small_partition(os.path.join(log_dir, "noindex-0"))
    os.remove(_seg1(log_dir, "noindex-0", ".index"))
    healthy = ["good-0", "good-1", "noindex-0"]
    expected = {p: expected_after(os.path.join(log_dir, p)) for p in healthy}
    hashes = {p: tree_hashes(os.path.join(log_dir, p)) for p in want}

    # Disk full: a second log dir on a tmpfs with less free space than the cleaned segment needs.
    full_dir, staging = os.path.join(root, "full"), os.path.join(root, "full-staging")
    # Few repeated keys: the cleaned group is nearly as big as its input.
    generate_log_dir(
        staging, topics=(("full", 1),), records=2000, keys=2000, codec="none", segment_bytes=40_000, seed=5
    )
    pages = sum(-(-os.path.getsize(os.path.join(d, f)) // 4096) for d, _, fs in os.walk(staging) for f in fs)
    mounted = _tmpfs(full_dir, (pages + 24) * 4096)  # ~96 KB free: less than one cleaned group
    try:
        if mounted:
            shutil.copytree(staging, full_dir, dirs_exist_ok=True)
            full_hashes = tree_hashes(full_dir)
        full = full_hashes if mounted else None
        yield from _run(root, log_dir, want, hashes, expected, mounted, full_dir, full)
    finally:
        if mounted:
            subprocess.run(["umount", full_dir], check=False)


def _run(root, log_dir, want, hashes, expected, mounted, full_dir, full_hashes):
    report = os.path.join(root, "report.json")
    started = time.monotonic()
    dirs = [log_dir, full_dir] if mounted else [log_dir]
    proc = start_submit(dirs, report, "--now-ms", str(NOW), "--max-message-bytes", str(MAX_MESSAGE_BYTES))
    # A second run while the first holds <logdir>/.compaction.lock must fail fast.
    lock = os.path.join(log_dir, ".compaction.lock")
    while proc.poll() is None and not lock_held_by_other(lock):
        time.sleep(0.05)
    second_started = time.monotonic()
    second = run_driver_only(log_dir, "--now-ms", str(NOW)) if proc.poll() is None else None
    second_seconds = time.monotonic() - second_started
    _, stderr = proc.communicate(timeout=900)
    seconds = time.monotonic() - started
    data = json.load(open(report)) if os.path.exists(report) else {}
    yield dict(
        log_dir=log_dir,
        code=proc.returncode,
        report=data,
        stderr=stderr[-6000:],
        want=want,
        hashes=hashes,
        expected=expected,
        seconds=seconds,
        second=second,
        second_seconds=second_seconds,
        full_dir=full_dir if mounted else None,
        full_hashes=full_hashes,
    )


def _by_name(report):
    return {f"{p['topic']}-{p['partition']}": p for p in report["partitions"]}


def test_run_exits_1_and_reports_every_partition(outcome):
    assert outcome["code"] == 1, outcome["stderr"]
    assert set(_by_name(outcome["report"])) >= set(outcome["want"]) == set(DAMAGED)


DAMAGED = [
    "crc-0",
    "truncated-0",
    "badmagic-0",
    "smallsize-0",
    "toobig-0",
    "indexpast-0",
    "indexback-0",
    "unknown-0",
    "badname-0",
    "empty-0",
    "unreadable-0",
]


@pytest.mark.parametrize("name", DAMAGED)
def test_damaged_partition_failed_with_file_and_position_and_untouched(outcome, name):
    entry = _by_name(outcome["report"])[name]
    assert entry["status"] == "failed", entry
    for part in outcome["want"][name]:
        assert part in entry["reason"], (part, entry["reason"])
    assert tree_hashes(os.path.join(outcome["log_dir"], name)) == outcome["hashes"][name]


@pytest.mark.parametrize("name", ["good-0", "good-1", "noindex-0"])
def test_healthy_partitions_compacted(outcome, name):
    assert_compacted(
        _by_name(outcome["report"])[name], os.path.join(outcome["log_dir"], name), outcome["expected"][name]
    )


def test_missing_index_rebuilt_and_reported_in_recovery(outcome):
    entry = _by_name(outcome["report"])["noindex-0"]
    assert any("rebuilt missing 00000000000000000010.index" in a for a in entry["recovery"]), entry


def test_disk_full_mid_rewrite_leaves_input_untouched(outcome):
    if outcome["full_dir"] is None:
        pytest.skip("cannot mount a tmpfs here (needs root): disk full not simulated")
    entry = _by_name(outcome["report"])["full-0"]
    assert entry["status"] == "failed", entry
    # One line naming the file being written, the bytes the cleaned segments need and the free space.
    reason = entry["reason"]
    match = re.fullmatch(
        rf"{re.escape(outcome['full_dir'])}/full-0/\d{{20}}\.(log|index|timeindex)\.cleaned: "
        r"No space left on device while writing the partition's cleaned segments, which need "
        r"up to (\d+) bytes \(the \d+ segments they replace\); \d+ bytes of its group written, "
        r"(\d+) bytes free there",
        reason,
    )
    assert match, reason
    logs = sum(
        os.path.getsize(os.path.join(outcome["full_dir"], "full-0", n))
        for n in os.listdir(os.path.join(outcome["full_dir"], "full-0"))
        if n.endswith(".log")
    )
    needed, free = int(match[2]), int(match[3])
    assert free < 40_000 < needed <= logs, reason
    after = tree_hashes(outcome["full_dir"])
    after.pop(".compaction.lock", None)
    assert after == outcome["full_hashes"]  # input unchanged, no .cleaned leftovers


def test_second_run_on_a_locked_log_dir_fails_fast(outcome):
    second = outcome["second"]
    assert second is not None, "the first run ended before its lock was seen"
    assert second.returncode == 2, second.stderr
    assert "another compaction run is working on this log dir" in second.stderr
    assert outcome["second_seconds"] < 30


@pytest.mark.parametrize("too_long", [False, True], ids=["count-mismatch", "longer-than-the-bound"])
def test_malformed_checkpoint_stops_the_run_before_writing(tmp_path, too_long):
    log_dir = str(tmp_path / "logs")
    small_partition(os.path.join(log_dir, "t-0"))
    with open(os.path.join(log_dir, "t-0", SEG1 + ".index.cleaned"), "wb") as fh:
        fh.write(b"stale")  # recovery would remove it: it must not run either
    path = os.path.join(log_dir, "cleaner-offset-checkpoint")
    with open(path, "w") as fh:
        fh.write("0\n2\nt 0 5\n")
        if too_long:  # sparse: refused unread, whatever it holds
            fh.truncate(CHECKPOINT_MAX_BYTES + 1)
    before = tree_hashes(log_dir)
    proc = run_driver_only(log_dir, "--now-ms", str(NOW))
    assert proc.returncode == 2
    assert "cleaner-offset-checkpoint" in proc.stderr and "Nothing was written" in proc.stderr
    said = f"{path}: byte {CHECKPOINT_MAX_BYTES}: {CHECKPOINT_MAX_BYTES + 1} bytes, more than"
    assert (said in proc.stderr) == too_long, proc.stderr
    assert "Fix the file" in proc.stderr
    after = tree_hashes(log_dir)
    after.pop(".compaction.lock", None)
    assert after == before
