"""The JVM reader `kafka_log_jvm` (compaction/jvm, its jar built by `compaction.jvm.reader_jar()`
and put on `spark.jars`) against `kafka_log`, in one SparkSession of its own started once for the
module (the jar goes on `spark.jars` before a session starts): every column of every row the same
on a generated dir of every codec with transactions, aborts, tombstones and headers, and on log
dirs real brokers wrote; the pushed-down COUNT(*) with and without CRC checks; the `headers`
column with `includeHeaders`; a flipped byte or a batch cut short failing the read with its file
and byte; a v1 segment and `compacted=true` refused; topic and offset options skipping whole
segments unopened.

Needs javac (a JDK): skipped without one, failed under CI=true (.ci/run has Java 17).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import envkit
import pytest
from e2ekit import SHARED_FIXTURES

from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.spark, pytest.mark.slow]
# Log dirs real brokers wrote (../shared/fixtures/real-kafka, PROVENANCE.md there).
REAL = (("marioBarbozaA+AIBulb", "kafka-data"), ("mscaldas2012+kafka-connect-spooldir", "kafka-data"))

# Runs in its own process: each case prints one JSON line {"case", "ok" | "error", ...}.
SCRIPT = r"""
import json, sys
from pyspark.sql import SparkSession, functions as F
import compaction, compaction.jvm

cases = json.loads(sys.argv[1])
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.jars", compaction.jvm.reader_jar()).getOrCreate())
spark.dataSource.register(compaction.KafkaLogDataSource)

def read(fmt, root, opts):
    r = spark.read.format(fmt)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load(root)

def rows(df):
    return sorted(map(repr, df.collect()))

for case in cases:
    out = {"case": case["name"]}
    try:
        jvm = read("kafka_log_jvm", case["root"], case.get("options", {}))
        what = case["check"]
        if what == "same":
            py = read("kafka_log", case["root"], case.get("options", {}))
            out["schema_same"] = jvm.schema == py.schema
            expected = rows(py)
            out["rows_same"] = rows(jvm) == expected
            out["rows"] = len(expected)
            out["count"] = jvm.count()
            if "headers" in jvm.columns:
                out["with_headers"] = jvm.where(F.size("headers") > 0).count()
            out["count_headers_only"] = read("kafka_log_jvm", case["root"],
                                             {**case.get("options", {}), "checkCrc": "false"}).count()
            out["plan"] = jvm.groupBy().count()._jdf.queryExecution().executedPlan().toString()
            out["pruned_plan"] = jvm.select("offset")._jdf.queryExecution().executedPlan().toString()
        elif what == "both":
            # the same read on both readers: rows counted, or the error each one gives
            for fmt in ("kafka_log_jvm", "kafka_log"):
                try:
                    out[fmt] = len(read(fmt, case["root"], case.get("options", {})).collect())
                except Exception as exc:
                    out[fmt + "_error"] = str(exc)[:3000]
        elif what == "count":
            out["count"] = jvm.count()
        elif what == "collect":
            out["count"] = len(jvm.collect())
        out["ok"] = True
    except Exception as exc:
        out["error"] = str(exc)[:3000]
    print("CASE " + json.dumps(out), flush=True)
"""


# Partition dirs a broker would not write: (name, what is added to orders-0, the problem each
# reader names after "unexpected file in partition dir: ", {p} the partition dir).
NOT_SEGMENT = "the part before the first '.' must be exactly 20 digits, got"
BROKEN_DIRS = [
    (
        "stray_file",
        {"notes.txt": b"x"},
        f"{{p}}/notes.txt: 'notes.txt' is not a segment file name: {NOT_SEGMENT} 'notes'",
    ),
    (
        "nineteen_digits",
        {"0000000000000000001.log": b""},
        f"{{p}}/0000000000000000001.log: '0000000000000000001.log' is not a segment file name: {NOT_SEGMENT}"
        " '0000000000000000001'",
    ),
    (
        "unknown_suffix",
        {"00000000000000000000.log.bak": b""},
        "{p}/00000000000000000000.log.bak: '00000000000000000000.log.bak': unknown suffix '.log.bak' (expected one"
        " of .log, .index, .timeindex, .txnindex, .snapshot, optionally followed by one of .cleaned, .swap, .deleted)",
    ),
    (
        "offset_beyond_a_long",
        {"99999999999999999999.log": b""},
        "{p}/99999999999999999999.log: '99999999999999999999.log': base offset 99999999999999999999 does not fit"
        " a Java long",
    ),
    ("sub_directory", {"old/": None}, "{p}/old: is a directory, not a file"),
    (
        "symbolic_link",
        {"00000000000000099999.log": "->"},
        "{p}/00000000000000099999.log: is a symbolic link (to {target}), which a broker never makes",
    ),
    (
        "named_pipe",
        {"00000000000000099999.timeindex": "|"},
        "{p}/00000000000000099999.timeindex: is not a regular file (a pipe, socket or device), which a broker"
        " never makes",
    ),
    (
        "two_files",
        {"notes.txt": b"x", "old/": None},
        f"{{p}}/notes.txt: 'notes.txt' is not a segment file name: {NOT_SEGMENT} 'notes'; {{p}}/old: is a directory,"
        " not a file",
    ),
]
# Files a broker writes beside its segments (or leaves mid-clean): neither reader refuses them.
BROKER_FILES = {
    "leader-epoch-checkpoint": b"0\n0\n",
    "partition.metadata": b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n",
    "00000000000000000000.snapshot": b"",
    "00000000000000000000.log.deleted": b"",
    "00000000000000000000.index.swap": b"",
    "00000000000000000000.timeindex.cleaned": b"",
    "leader-epoch-checkpoint.tmp.checkpoint.part": b"",
}


# Batches no broker writes, in the first of several segments of orders-0: (name, byte of the
# segment's first batch changed, the bytes written there; None: the segment cut 5 bytes short).
BAD_BATCHES = [
    ("crc", -3, None),  # the last record's bytes, in the segment's last batch
    ("size_below_minimum", 8, b"\x00\x00\x00\x01"),
    ("magic", 16, b"\x07"),
    ("cut_short", None, None),
]
DAMAGE = re.compile(r"(\S+\.log): byte (\d+): (.*?)(?: \(offset (\d+)\))?(?:\n|$)", re.M)


def _damage(path: Path, at: int | None, data: bytes | None) -> None:
    raw = bytearray(path.read_bytes())
    if at is None:
        del raw[-5:]
    elif data is None:
        raw[at] ^= 0xFF
    else:
        raw[at : at + len(data)] = data
    path.write_bytes(bytes(raw))


def _add_files(part: Path, files: dict) -> str:
    """Adds `files` to partition dir `part` (None: a dir, "->": a link to another file, "|": a named
    pipe); the link's target."""
    target = str(part.parent / "elsewhere.log")
    for name, content in files.items():
        if content is None:
            (part / name.rstrip("/")).mkdir()
        elif content == "->":
            Path(target).write_bytes(b"")
            os.symlink(target, part / name)
        elif content == "|":
            os.mkfifo(part / name)
        else:
            (part / name).write_bytes(content)
    return target


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def _segments(part: Path) -> list[Path]:
    return sorted(part.glob("*.log"))


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    envkit.need_javac()
    tmp = tmp_path_factory.mktemp("jvm")
    mixed = str(tmp / "mixed")
    generate_log_dir(
        mixed,
        topics=(("orders", 2), ("users", 1)),
        records=1500,
        keys=70,
        codec="mixed",
        segment_bytes=15_000,
        tombstone_ratio=0.1,
        transactions=0.3,
        abort_ratio=0.3,
        idempotent=0.2,
        headers=2,
        seed=3,
    )
    # A flipped byte in the last record of a segment's last batch: its CRC no longer matches.
    bad = tmp / "bad"
    generate_log_dir(str(bad), topics=(("orders", 1),), records=300, keys=20, codec="none", seed=4)
    bad_seg = _segments(bad / "orders-0")[0]
    _flip(bad_seg, bad_seg.stat().st_size - 3)
    # Two partitions of several segments: orders-0's first segment cut short (a batch runs past
    # its end: damage), users-0's last one too (a broker stopped mid-write: its end).
    cut = tmp / "cut"
    generate_log_dir(
        str(cut), topics=(("orders", 1), ("users", 1)), records=400, keys=20, segment_bytes=8_000, seed=7
    )
    cut_first = _segments(cut / "orders-0")[0]
    cut_last = _segments(cut / "users-0")[-1]
    for seg in (cut_first, cut_last):
        with open(seg, "r+b") as f:
            f.truncate(seg.stat().st_size - 5)
    legacy = str(tmp / "legacy")
    generate_log_dir(legacy, topics=(("old", 1),), records=200, keys=20, legacy="v1", seed=5)
    # Many segments in one partition; the third one's first batch header ruined (a size no
    # reader takes): a read that opens it fails, one whose offsets or topics leave it out does not.
    skip = tmp / "skip"
    generate_log_dir(
        str(skip), topics=(("orders", 1), ("users", 1)), records=800, keys=40, segment_bytes=8_000, seed=6
    )
    users = _segments(skip / "users-0")
    ruined = users[2]
    data = bytearray(ruined.read_bytes())
    data[8:12] = b"\x00\x00\x00\x01"  # batchLength 1: below any legal size
    ruined.write_bytes(bytes(data))
    users_base = [int(p.name[:20]) for p in users]
    orders = _segments(skip / "orders-0")
    # offsets of orders-0 from inside its second segment to inside its fourth
    lo, hi = int(orders[1].name[:20]) + 3, int(orders[3].name[:20]) + 5
    before_ruined = {"users": {"0": users_base[2]}}
    # one small dir of several segments, copied for every broken dir
    small = tmp / "small"
    generate_log_dir(str(small), topics=(("orders", 1),), records=60, keys=10, segment_bytes=4_000, seed=8)
    broken = {}
    for name, files, problem in BROKEN_DIRS:
        root = tmp / "broken" / name
        shutil.copytree(small, root)
        target = _add_files(root / "orders-0", files)
        broken[name] = problem.format(p=root / "orders-0", target=target)
    for name, at, data in BAD_BATCHES:
        root = tmp / "bad_batch" / name
        shutil.copytree(small, root)
        _damage(_segments(root / "orders-0")[0], at, data)
    accepted = tmp / "broker_files"
    shutil.copytree(small, accepted)
    _add_files(accepted / "orders-0", BROKER_FILES)
    cases = [
        *({"name": f"broken {name}", "root": str(tmp / "broken" / name), "check": "both"} for name in broken),
        *(
            {"name": f"bad_batch {name}", "root": str(tmp / "bad_batch" / name), "check": "both"}
            for name, _, _ in BAD_BATCHES
        ),
        {"name": "broker_files", "root": str(accepted), "check": "same"},
        {"name": "mixed", "root": mixed, "check": "same"},
        *(
            {"name": f"real {name}", "root": os.path.join(SHARED_FIXTURES, name, sub), "check": "same"}
            for name, sub in REAL
        ),
        {"name": "mixed_control", "root": mixed, "check": "same", "options": {"includeControl": "true"}},
        {"name": "mixed_headers", "root": mixed, "check": "same", "options": {"includeHeaders": "true"}},
        {"name": "bad_read", "root": str(bad), "check": "collect"},
        {"name": "bad_count", "root": str(bad), "check": "count"},
        {
            "name": "bad_count_headers_only",
            "root": str(bad),
            "check": "count",
            "options": {"checkCrc": "false"},
        },
        {"name": "cut_first", "root": str(cut), "check": "collect", "options": {"subscribe": "orders"}},
        {"name": "cut_last", "root": str(cut), "check": "same", "options": {"subscribe": "users"}},
        {"name": "legacy", "root": legacy, "check": "count"},
        {"name": "compacted", "root": mixed, "check": "count", "options": {"compacted": "true"}},
        {"name": "skip_all", "root": str(skip), "check": "collect"},
        {"name": "skip_topic", "root": str(skip), "check": "same", "options": {"subscribe": "orders"}},
        {
            "name": "skip_pattern",
            "root": str(skip),
            "check": "count",
            "options": {"subscribePattern": "ord.*"},
        },
        {
            "name": "skip_offsets",
            "root": str(skip),
            "check": "same",
            "options": {
                "startingOffsets": json.dumps({"orders": {"0": lo}}),
                "endingOffsets": json.dumps({"orders": {"0": hi}, **before_ruined}),
            },
        },
        {
            "name": "skip_offsets_after",
            "root": str(skip),
            "check": "same",
            "options": {"startingOffsets": json.dumps({"users": {"0": users_base[3]}})},
        },
    ]
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(cases)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
        timeout=900,
    )
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CASE "):
            case = json.loads(line[5:])
            out[case["case"]] = case
    assert len(out) == len(cases), (proc.returncode, proc.stdout[-3000:], proc.stderr[-5000:])
    out["_broken"] = broken
    out["_bad_batch"] = {
        name: str(_segments(tmp / "bad_batch" / name / "orders-0")[0]) for name, _, _ in BAD_BATCHES
    }
    out["_paths"] = {"cut": str(cut_first), "bad": str(bad_seg), "ruined": str(ruined), "lo": lo, "hi": hi}
    yield out
    shutil.rmtree(tmp, ignore_errors=True)


def _same(case: dict) -> None:
    assert case.get("ok"), case.get("error")
    assert case["schema_same"], case
    assert case["rows_same"]
    assert case["count"] == case["count_headers_only"] == case["rows"], case


def test_every_column_and_row_as_kafka_log(results):
    case = results["mixed"]
    _same(case)
    assert case["rows"] > 1000
    # COUNT(*) answered by the source, and a select reads one column
    assert "COUNT(*) from batch headers, every CRC checked" in case["plan"], case["plan"]
    assert "struct<offset:bigint>" in case["pruned_plan"], case["pruned_plan"]


@pytest.mark.parametrize("name", [name for name, _ in REAL])
def test_a_real_brokers_log_dir_as_kafka_log(results, name):
    _same(results[f"real {name}"])
    assert results[f"real {name}"]["rows"] > 0


def test_control_batches_as_rows_when_asked(results):
    _same(results["mixed_control"])
    assert results["mixed_control"]["rows"] > results["mixed"]["rows"]


def test_headers_column_when_asked(results):
    _same(results["mixed_headers"])
    assert results["mixed_headers"]["with_headers"] > 0


def test_a_bad_crc_fails_naming_file_byte_and_offset(results):
    path = results["_paths"]["bad"]
    for name in ("bad_read", "bad_count"):
        error = results[name].get("error", "")
        assert f"{path}: byte " in error and "checksum mismatch" in error and "(offset " in error, (
            name,
            error,
        )
    # a count that trusts the headers reads none of the damaged bytes
    assert results["bad_count_headers_only"].get("ok"), results["bad_count_headers_only"]
    assert results["bad_count_headers_only"]["count"] > 0


def test_a_truncated_batch_fails_unless_it_ends_the_last_segment(results):
    error = results["cut_first"].get("error", "")
    path = results["_paths"]["cut"]
    assert f"{path}: byte " in error and "partial trailing batch, log segment may be corrupt" in error, error
    _same(results["cut_last"])
    assert results["cut_last"]["rows"] > 0


def test_legacy_segments_and_compacted_refused_pointing_to_kafka_log(results):
    legacy = results["legacy"].get("error", "")
    assert "magic v1" in legacy and "old-0/00000000000000000000.log: byte 0" in legacy, legacy
    assert "kafka_log data source" in legacy
    compacted = results["compacted"].get("error", "")
    assert "option compacted is not implemented here" in compacted and "KafkaLogDataSource" in compacted


def test_options_skip_segments_unopened(results):
    ruined = results["_paths"]["ruined"]
    # the control: a read of every segment opens the ruined one and fails there
    error = results["skip_all"].get("error", "")
    assert f"{ruined}: byte 0: record size 1 is less than the minimum" in error, error
    for name in ("skip_topic", "skip_offsets", "skip_offsets_after"):
        _same(results[name])
        assert results[name]["rows"] > 0, name
    assert results["skip_pattern"].get("count") == results["skip_topic"]["rows"], results["skip_pattern"]
    lo, hi = results["_paths"]["lo"], results["_paths"]["hi"]
    # orders-0 in [lo, hi) and users-0 up to the ruined segment
    assert results["skip_offsets"]["rows"] > hi - lo


@pytest.mark.parametrize("name", [name for name, _, _ in BROKEN_DIRS])
def test_a_partition_dir_a_broker_would_not_write_is_refused_by_both_readers(results, name):
    case, problem = results[f"broken {name}"], results["_broken"][name]
    for reader in ("kafka_log_jvm", "kafka_log"):
        error = case.get(f"{reader}_error", "")
        assert f"unexpected file in partition dir: {problem}" in error, (reader, problem, case)


def test_the_files_a_broker_writes_beside_segments_are_read_past(results):
    _same(results["broker_files"])
    assert results["broker_files"]["rows"] > 0


@pytest.mark.parametrize("name", [name for name, _, _ in BAD_BATCHES])
def test_a_bad_batch_fails_both_readers_naming_the_same_file_byte_and_offset(results, name):
    case, path = results[f"bad_batch {name}"], results["_bad_batch"][name]
    named = {}
    for reader in ("kafka_log_jvm", "kafka_log"):
        found = [m.groups() for m in DAMAGE.finditer(case.get(f"{reader}_error", "")) if m.group(1) == path]
        assert found, (reader, path, case)
        named[reader] = found[0]
    assert named["kafka_log_jvm"] == named["kafka_log"], named
