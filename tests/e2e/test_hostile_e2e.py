"""Hostile input, one spark-submit run over one log dir: decompression bombs of every codec (valid
batches, CRCs right, in a middle segment of their partition), files longer than a broker loads
and `.txnindex` files longer than their segment holds entries for (sparse, never read), a named
pipe, and partitions a careful operator would not want touched, beside healthy partitions. Each
hostile partition must be `failed` with a reason naming the file (and the byte position, codec and
bound for a bomb), keep every byte of its files, and leave the healthy partitions to be
compacted; the Python workers' peak RSS is measured while the run goes and must stay bounded by
the inflating bound, not by the bombs."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest
from bombkit import MiB, bomb_batch
from e2ekit import REPO, tree_hashes
from faultkit import (
    assert_compacted,
    batch,
    expected_after,
    healthy_log_dir,
    small_partition,
    submit_cmd,
    write_partition,
)

from compaction.format.checkpoint import CHECKPOINT_MAX_BYTES
from compaction.format.layout import (
    ABORTED_TXN_SIZE,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    FILE_MAX_BYTES,
    RECORD_BATCH_OVERHEAD,
)
from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000
SEG0 = "00000000000000000000"
SEG1 = "00000000000000000010"
ACTIVE = "00000000000000000020"  # small_partition's active segment
LIMIT = 64 * MiB  # --max-inflated-batch-bytes of the run
MAX_MESSAGE_BYTES = 8 * MiB  # room for the lz4 and snappy bombs (snappy inflates ~21:1 at most)
# (partition, codec, bytes its bomb inflates to, max.message.bytes of its topic)
BOMBS = [
    ("zstd4g-0", CODEC_ZSTD, 4 << 30, None),  # ~130 KB: 4 GiB of RLE blocks
    ("zstd1g-0", CODEC_ZSTD, 1 << 30, None),
    ("gzip1g-0", CODEC_GZIP, 1 << 30, None),  # ~1 MB of concatenated members (zlib level 9)
    ("lz4-0", CODEC_LZ4, 1 << 30, None),  # ~4.4 MB: independent 64 KiB blocks
    ("snappy-0", CODEC_SNAPPY, 128 * MiB, None),  # ~6 MB of xerial chunks
    ("gzip2g-0", CODEC_GZIP, 2 << 30, 1_048_588),  # 2 MB: over its topic's max.message.bytes
]


def _tree_memory():
    spec = importlib.util.spec_from_file_location(
        "tree_memory", os.path.join(REPO, "bench", "tree_memory.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TreeMemory


def _symlinked_segment(log_dir: str, outside: str) -> str:
    """A partition whose middle segment's .log is a link to a copy outside the log dir."""
    part = os.path.join(log_dir, "symlog-0")
    small_partition(part)
    target = os.path.join(outside, "elsewhere.log")
    os.makedirs(outside, exist_ok=True)
    shutil.move(os.path.join(part, SEG1 + ".log"), target)
    os.symlink(target, os.path.join(part, SEG1 + ".log"))
    return target


def _foreign_without_index(log_dir: str) -> None:
    """Segment 10 holds offsets 10-25 (copied from another replica), overlapping the active segment
    at 20, and came without its index: the scan refuses it, after the planner rebuilt the index."""
    part = os.path.join(log_dir, "foreign-0")
    write_partition(
        part,
        [
            [batch(range(o, o + 2)) for o in range(0, 10, 2)],
            [batch(range(o, o + 2)) for o in range(10, 26, 2)],
        ],
    )
    write_partition(part, [[batch([20, 21])]])
    os.remove(os.path.join(part, SEG1 + ".index"))
    os.remove(os.path.join(part, SEG1 + ".timeindex"))


def _same_offsets_twice(log_dir: str) -> None:
    """Segment 10 is a copy of segment 0 (offsets 0-9) without its index."""
    part = os.path.join(log_dir, "twice-0")
    small_partition(part)
    shutil.copy(os.path.join(part, SEG0 + ".log"), os.path.join(part, SEG1 + ".log"))
    os.remove(os.path.join(part, SEG1 + ".index"))


# Partitions with one file longer than a broker loads (sparse: no disk used), refused unread ->
# (the file, its size). A read of any of them whole would ask for gigabytes.
OVERSIZE_SEGMENT = FILE_MAX_BYTES + 1
OVERSIZE = {
    "bigmiddle-0": (SEG1 + ".log", OVERSIZE_SEGMENT),  # a segment the round would rewrite
    "bigactive-0": (ACTIVE + ".log", OVERSIZE_SEGMENT),  # read for its producers only
    "bigindex-0": (SEG1 + ".index", OVERSIZE_SEGMENT),
    "bigtimeindex-0": (SEG1 + ".timeindex", OVERSIZE_SEGMENT),
    "bigepochs-0": ("leader-epoch-checkpoint", CHECKPOINT_MAX_BYTES + 1),
}
# Partitions with a `.txnindex` (sparse zeros) longer than its segment can hold ABORT markers for,
# refused from the listing's sizes: read, half a GiB was 16M aborted transactions on the driver (GBs,
# minutes), and at base offset 0 zeros pass a broker's load check: the partition was cleaned.
TOO_MANY_TXNS = {
    "manytxn-0": (SEG0 + ".txnindex", 512 * MiB),
    "bigtxnindex-0": (SEG1 + ".txnindex", OVERSIZE_SEGMENT),  # longer than a broker loads, too
}


def _oversize_partition(log_dir: str, name: str) -> str:
    part = os.path.join(log_dir, name)
    small_partition(part)
    filename, size = {**OVERSIZE, **TOO_MANY_TXNS}[name]
    path = os.path.join(part, filename)
    with open(path, "ab") as fh:
        fh.truncate(size)
    return path


def _pipe_partition(log_dir: str) -> str:
    """A partition whose middle segment's `.timeindex` is a named pipe: a read of it would wait
    for a writer for ever."""
    part = os.path.join(log_dir, "pipe-0")
    small_partition(part)
    path = os.path.join(part, SEG1 + ".timeindex")
    os.remove(path)
    os.mkfifo(path)
    return path


def _fingerprint(root: str) -> dict[str, object]:
    """Every file's hash, or for the sparse oversize ones its size and mtime (hashing gigabytes of
    zeros twice per file would be most of the test's time), and a pipe's mode."""
    out: dict[str, object] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                out[os.path.relpath(path, root)] = st.st_mode
            elif st.st_size > 64 * MiB:
                out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
            else:
                out[os.path.relpath(path, root)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return out


def _bomb_partition(part_dir: str, codec: int, inflated: int) -> int:
    """Segments 0 (offsets 0-9), 10 (10-11, the bomb at 12, 13-16) and active 17; returns the
    bomb's byte position in segment 10."""
    first = batch(range(10, 12))
    seg1 = [
        first,
        bomb_batch(codec, inflated, base_offset=12, timestamp=1_700_000_000_012),
        batch(range(13, 15)),
        batch(range(15, 17)),
    ]
    write_partition(part_dir, [[batch(range(o, o + 2)) for o in range(0, 10, 2)], seg1, [batch([17, 18])]])
    return len(first)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("hostile"))
    log_dir = os.path.join(root, "logs")
    healthy_log_dir(log_dir)
    want, topic_config = {}, {}
    for name, codec, inflated, max_message_bytes in BOMBS:
        pos = _bomb_partition(os.path.join(log_dir, name), codec, inflated)
        want[name] = pos
        if max_message_bytes is not None:
            topic_config[name[:-2]] = {"max.message.bytes": max_message_bytes}
    outside = os.path.join(root, "outside")
    link_target = _symlinked_segment(log_dir, outside)
    _foreign_without_index(log_dir)
    _same_offsets_twice(log_dir)
    oversize = {name: _oversize_partition(log_dir, name) for name in [*OVERSIZE, *TOO_MANY_TXNS]}
    pipe = _pipe_partition(log_dir)
    # A partition dir that is itself a link (a broker follows it): cleaned like any other.
    linked_target = os.path.join(root, "disk2", "linked-0")
    generate_log_dir(
        os.path.join(root, "staging"),
        topics=(("linked", 1),),
        records=600,
        keys=30,
        codec="zstd",
        segment_bytes=8_000,
        seed=3,
    )
    shutil.move(os.path.join(root, "staging", "linked-0"), linked_target)
    os.symlink(linked_target, os.path.join(log_dir, "linked-0"))
    healthy = ["good-0", "good-1", "linked-0"]
    expected = {p: expected_after(os.path.join(log_dir, p)) for p in healthy}
    hashes = {p: tree_hashes(os.path.join(log_dir, p)) for p in [*want, *REFUSED]}
    hashes["outside"] = tree_hashes(outside)
    hashes.update(
        {name: _fingerprint(os.path.join(log_dir, name)) for name in [*OVERSIZE, *TOO_MANY_TXNS, "pipe-0"]}
    )
    config = os.path.join(root, "topics.json")
    json.dump(topic_config, open(config, "w"))
    report = os.path.join(root, "report.json")
    cmd = submit_cmd(
        [log_dir],
        report,
        "--now-ms",
        str(NOW),
        "--max-message-bytes",
        str(MAX_MESSAGE_BYTES),
        "--max-inflated-batch-bytes",
        str(LIMIT),
        "--topic-config",
        config,
    )
    # The driver's log lines and Spark's, in one stream.
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    memory = _tree_memory()(proc.pid, interval=0.05).start()
    started = time.monotonic()
    stderr, _ = proc.communicate(timeout=900)
    memory.stop()
    data = json.load(open(report)) if os.path.exists(report) else {}
    return dict(
        log_dir=log_dir,
        code=proc.returncode,
        report=data,
        stderr=stderr,
        want=want,
        hashes=hashes,
        expected=expected,
        seconds=time.monotonic() - started,
        outside=outside,
        oversize=oversize,
        pipe=pipe,
        link_target=link_target,
        linked_target=linked_target,
        worker_hwm=memory.max_worker_hwm(),
        workers=len(memory.workers),
    )


def _by_name(report):
    return {f"{p['topic']}-{p['partition']}": p for p in report["partitions"]}


def test_run_exits_1_and_reports_every_partition(outcome):
    assert outcome["code"] == 1, outcome["stderr"]
    assert set(_by_name(outcome["report"])) >= set(outcome["want"]) | {"good-0", "good-1"}


@pytest.mark.parametrize("name, codec, inflated, max_message_bytes", BOMBS, ids=[b[0] for b in BOMBS])
def test_bomb_fails_its_partition_naming_file_position_codec_and_bound(
    outcome, name, codec, inflated, max_message_bytes
):
    entry = _by_name(outcome["report"])[name]
    assert entry["status"] == "failed", entry
    path = os.path.join(outcome["log_dir"], name, SEG1 + ".log")
    assert f"{path}: byte {outcome['want'][name]}: " in entry["reason"], entry["reason"]
    if max_message_bytes is not None:  # refused on its compressed size, before inflating
        assert f"is larger than max.message.bytes {max_message_bytes}" in entry["reason"], entry["reason"]
    else:
        codec_name = {CODEC_ZSTD: "zstd", CODEC_GZIP: "gzip", CODEC_LZ4: "lz4", CODEC_SNAPPY: "snappy"}[codec]
        assert f"{codec_name} records of " in entry["reason"], entry["reason"]
        assert f"more than {LIMIT} bytes (--max-inflated-batch-bytes)" in entry["reason"], entry["reason"]
    assert tree_hashes(os.path.join(outcome["log_dir"], name)) == outcome["hashes"][name]


# Refused partitions -> what their reason must say ({log_dir} and {outside} filled in).
REFUSED = {
    "symlog-0": (
        "{log_dir}/symlog-0/" + SEG1 + ".log: is a symbolic link (to {outside}/elsewhere.log), "
        "which a broker never makes"
    ),
    "foreign-0": "{log_dir}/foreign-0/" + SEG1 + ".log: byte ",
    "twice-0": "{log_dir}/twice-0/" + SEG1 + ".log: relative offset -",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_partition_names_its_file_and_is_left_exactly_as_found(outcome, name):
    entry = _by_name(outcome["report"])[name]
    assert entry["status"] == "failed", entry
    want = REFUSED[name].format(log_dir=outcome["log_dir"], outside=outcome["outside"])
    assert want in entry["reason"], entry["reason"]
    # Nothing written into it: no rebuilt index, no .cleaned leftover, the link still a link.
    assert tree_hashes(os.path.join(outcome["log_dir"], name)) == outcome["hashes"][name]
    assert entry.get("recovery", []) == [], entry


@pytest.mark.parametrize("name", sorted(OVERSIZE))
def test_a_file_longer_than_a_broker_loads_fails_its_partition_unread(outcome, name):
    entry = _by_name(outcome["report"])[name]
    assert entry["status"] == "failed", entry
    _, size = OVERSIZE[name]
    limit = CHECKPOINT_MAX_BYTES if size == CHECKPOINT_MAX_BYTES + 1 else FILE_MAX_BYTES
    want = f"{outcome['oversize'][name]}: byte {limit}: {size} bytes, more than the {limit} "
    assert want in entry["reason"], entry["reason"]
    assert _fingerprint(os.path.join(outcome["log_dir"], name)) == outcome["hashes"][name]


@pytest.mark.parametrize("name", sorted(TOO_MANY_TXNS))
def test_a_txnindex_longer_than_its_segment_holds_markers_for_fails_its_partition_unread(outcome, name):
    entry = _by_name(outcome["report"])[name]
    assert entry["status"] == "failed", entry
    filename, size = TOO_MANY_TXNS[name]
    log_bytes = os.path.getsize(os.path.join(outcome["log_dir"], name, filename[:20] + ".log"))
    most = log_bytes // RECORD_BATCH_OVERHEAD * ABORTED_TXN_SIZE
    want = f"{outcome['oversize'][name]}: byte {most}: {size} bytes ({size // ABORTED_TXN_SIZE} aborted transactions)"
    assert want in entry["reason"] and "a broker never writes it" in entry["reason"], entry["reason"]
    assert _fingerprint(os.path.join(outcome["log_dir"], name)) == outcome["hashes"][name]


def test_a_pipe_named_like_an_index_fails_its_partition_unopened(outcome):
    entry = _by_name(outcome["report"])["pipe-0"]
    assert entry["status"] == "failed", entry
    assert f"{outcome['pipe']}: is not a regular file (a pipe, socket or device)" in entry["reason"], entry
    assert _fingerprint(os.path.join(outcome["log_dir"], "pipe-0")) == outcome["hashes"]["pipe-0"]


def test_the_symlinked_segment_and_its_target_are_untouched(outcome):
    link = os.path.join(outcome["log_dir"], "symlog-0", SEG1 + ".log")
    assert os.path.islink(link) and os.readlink(link) == outcome["link_target"]
    assert tree_hashes(outcome["outside"]) == outcome["hashes"]["outside"]


def test_a_symlinked_partition_dir_is_followed_and_said_at_info(outcome):
    link = os.path.join(outcome["log_dir"], "linked-0")
    assert os.path.islink(link)
    lines = [line for line in outcome["stderr"].splitlines() if f"{link} is a symbolic link to" in line]
    assert len(lines) == 1 and "INFO" in lines[0] and outcome["linked_target"] in lines[0], [
        line for line in outcome["stderr"].splitlines() if "symbolic" in line or "linked" in line
    ][:5]


@pytest.mark.parametrize("name", ["good-0", "good-1", "linked-0"])
def test_healthy_partitions_compacted(outcome, name):
    assert_compacted(
        _by_name(outcome["report"])[name], os.path.join(outcome["log_dir"], name), outcome["expected"][name]
    )


def test_workers_peak_memory_is_bounded_by_the_setting_not_the_bombs(outcome, record_property):
    """4 GiB, 2 GiB and 1 GiB bombs; without the bound a worker reaches several GiB. A worker
    here holds its modules, compiled kernels and a healthy partition's buffers (~200 MB), plus at
    most the bound and one piece for a bomb (measured: 269 MiB)."""
    assert outcome["workers"] >= 1
    record_property("worker_hwm_mib", outcome["worker_hwm"] // MiB)
    print(f"largest Python worker VmHWM: {outcome['worker_hwm'] / MiB:.0f} MiB")
    assert outcome["worker_hwm"] < 250 * MiB + LIMIT + 32 * MiB + 150 * MiB, outcome["worker_hwm"] / MiB
