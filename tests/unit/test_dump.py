"""`python -m compaction dump`: JSON fields against kafka-python's view of the same bytes and the
generator's manifest, real broker files, kafka-dump-log text vocabulary, and failure on corrupt
input (error line + non-zero exit, after printing what could be read)."""

from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import struct
import subprocess
import sys

import pytest
from e2ekit import SHARED_FIXTURES
from kafka.record.memory_records import MemoryRecords

from compaction.__main__ import main
from compaction.format.index import read_offset_index, read_time_index
from compaction.format.txnindex import read_txn_index
from compaction.tools.generator import generate_log_dir

REAL = SHARED_FIXTURES
V0_PLAIN = f"{REAL}/kafka-0.9.0.1/kafka-logs/plain-0/00000000000000000112"
V0_COMPACTED = f"{REAL}/kafka-0.9.0.1/kafka-logs/compacted-0/00000000000000000000.log"
V2_LZ4 = (
    f"{REAL}/mscaldas2012+kafka-connect-spooldir/kafka-data/"
    "_confluent-controlcenter-5-1-2-1-actual-group-consumption-rekey-0/00000000000000000000.log"
)
BATCH_KEYS = [
    "type",
    "baseOffset",
    "lastOffset",
    "count",
    "position",
    "size",
    "magic",
    "compression",
    "crcValid",
    "isTransactional",
    "isControl",
    "producerId",
    "producerEpoch",
    "baseSequence",
    "partitionLeaderEpoch",
    "maxTimestamp",
    "timestampType",
    "deleteHorizonMs",
]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("dump") / "logs")
    manifest = generate_log_dir(
        out,
        topics=(("t", 1),),
        records=3000,
        keys=200,
        codec="mixed",
        headers=1,
        transactions=0.4,
        idempotent=0.2,
        abort_ratio=0.5,
        segment_bytes=80_000,
        batch_records=(1, 30),
        seed=5,
    )
    return os.path.join(out, "t-0"), manifest.partitions[("t", 0)]


def dump_json(capsys, *args):
    code = main(["dump", "--json", *args])
    out = capsys.readouterr().out
    return code, [json.loads(line) for line in out.splitlines()]


def dump_text(capsys, *args):
    code = main(["dump", *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def _segments(part_dir):
    return sorted(glob.glob(os.path.join(part_dir, "*.log")))


def _kafka_python_batches(path):
    with open(path, "rb") as fh:
        records = MemoryRecords(fh.read())
    while (batch := records.next_batch()) is not None:
        yield batch


def _b64(data):
    return None if data is None else base64.b64encode(data).decode()


def test_batch_json_matches_kafka_python(generated, capsys):
    part_dir, _ = generated
    for log in _segments(part_dir):
        code, objs = dump_json(capsys, log)
        assert code == 0
        batches = [o for o in objs if o["type"] == "batch"]
        theirs = list(_kafka_python_batches(log))
        assert len(batches) == len(theirs) > 0
        position = 0
        for ours, b in zip(batches, theirs, strict=True):
            assert list(ours) == BATCH_KEYS
            last = b.base_offset + b.last_offset_delta
            assert (ours["baseOffset"], ours["lastOffset"]) == (b.base_offset, last)
            assert ours["count"] == b.records_count
            assert ours["position"] == position and ours["size"] == b.size_in_bytes
            position += ours["size"]
            assert ours["compression"] == ["none", "gzip", "snappy", "lz4", "zstd"][b.compression_type]
            assert (ours["producerId"], ours["producerEpoch"], ours["baseSequence"]) == (
                b.producer_id,
                b.producer_epoch,
                b.base_sequence,
            )
            assert (ours["isTransactional"], ours["isControl"]) == (b.is_transactional, b.is_control_batch)
            assert ours["partitionLeaderEpoch"] == b.leader_epoch and ours["maxTimestamp"] == b.max_timestamp
            assert ours["crcValid"] is True and ours["magic"] == 2
            assert ours["timestampType"] == "CreateTime" and ours["deleteHorizonMs"] is None


def test_deep_iteration_records_equal_the_manifest(generated, capsys):
    part_dir, pm = generated
    seen = []
    for log in _segments(part_dir):
        code, objs = dump_json(capsys, "--deep-iteration", log)
        assert code == 0
        for o in (o for o in objs if o["type"] == "record"):
            seen.append(o["offset"])
            assert o["key"] == _b64(pm.key(o["offset"])) and o["value"] == _b64(pm.value(o["offset"]))
            assert o["headers"] == [[name, _b64(v)] for name, v in pm.headers(o["offset"])]
            assert o["timestamp"] == pm.timestamp[o["offset"]]
            control = pm.control_type[o["offset"]]
            assert o.get("controlType") == {-1: None, 0: "ABORT", 1: "COMMIT"}[int(control)]
    assert seen == list(range(pm.log_end_offset))


def test_index_timeindex_txnindex_json(generated, capsys):
    part_dir, pm = generated
    txns = []
    for log in _segments(part_dir):
        stem, base = log[:-4], int(os.path.basename(log)[:20])
        code, objs = dump_json(capsys, stem + ".index", stem + ".timeindex")
        assert code == 0  # every entry points at the batch whose last offset it names
        with open(stem + ".index", "rb") as fh:
            expected = read_offset_index(fh.read(), base).tolist()
        assert [[o["offset"], o["position"]] for o in objs if o["type"] == "index"] == expected
        with open(stem + ".timeindex", "rb") as fh:
            expected = read_time_index(fh.read(), base).tolist()
        assert [[o["timestamp"], o["offset"]] for o in objs if o["type"] == "timeindex"] == expected
        if os.path.exists(stem + ".txnindex"):
            code, objs = dump_json(capsys, stem + ".txnindex")
            assert code == 0
            with open(stem + ".txnindex", "rb") as fh:
                assert len(objs) == len(read_txn_index(fh.read()))
            txns += [
                tuple(o[k] for k in ("producerId", "firstOffset", "lastOffset", "lastStableOffset"))
                for o in objs
            ]
    assert txns == [tuple(a) for a in pm.aborted] and txns


def test_text_output_uses_kafka_dump_log_vocabulary(generated, capsys):
    part_dir, _ = generated
    log = _segments(part_dir)[0]
    code, out, _ = dump_text(capsys, "--print-data-log", log)
    assert code == 0
    assert out[0] == f"Dumping {log}" and out[1] == "Log starting offset: 0"
    assert out[2].startswith("baseOffset: 0 lastOffset: ") and " count: " in out[2]
    assert " deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: " in out[2]
    assert " magic: 2 compresscodec: " in out[2] and out[2].endswith("isvalid: true")
    record = next(line for line in out if line.startswith("| offset: 0 "))
    assert "keySize: 10 " in record and "headerKeys: [h0]" in record and " key: key-" in record
    marker = next(line for line in out if "endTxnMarker" in line)
    assert any(f"endTxnMarker: {kind} coordinatorEpoch: " in marker for kind in ("COMMIT", "ABORT"))
    stem = log[:-4]
    code, out, _ = dump_text(capsys, stem + ".index", stem + ".timeindex", "--index-sanity-check")
    assert code == 0 and out[1] == f"{stem}.index passed sanity check."


def test_real_v0_broker_files(capsys):
    code, objs = dump_json(capsys, "--deep-iteration", V0_PLAIN + ".log", V0_PLAIN + ".index")
    assert code == 0  # the 0.9 broker's own index agrees with its log
    batches = [o for o in objs if o["type"] == "batch"]
    assert {(b["magic"], b["timestampType"], b["crcValid"], b["producerId"]) for b in batches} == {
        (0, "NoTimestampType", True, -1)
    }
    records = [o for o in objs if o["type"] == "record"]
    theirs = [r for b in _kafka_python_batches(V0_PLAIN + ".log") for r in b]
    assert [(o["offset"], o["key"], o["value"]) for o in records] == [
        (r.offset, _b64(r.key), _b64(r.value)) for r in theirs
    ]
    assert [o for o in objs if o["type"] == "index"]
    code, objs = dump_json(capsys, V0_COMPACTED)  # cleaned by the 0.9 broker: lz4 wrappers, gaps
    assert code == 0 and {o["compression"] for o in objs} >= {"lz4"}


def test_real_v2_lz4_file(capsys):
    code, objs = dump_json(capsys, "--deep-iteration", V2_LZ4)
    assert code == 0
    batches = [o for o in objs if o["type"] == "batch"]
    assert {b["compression"] for b in batches} == {"lz4"} and all(b["crcValid"] for b in batches)
    theirs = [r for b in _kafka_python_batches(V2_LZ4) for r in b]
    records = [o for o in objs if o["type"] == "record"]
    assert [(o["offset"], o["key"], o["value"], o["timestamp"]) for o in records] == [
        (r.offset, _b64(r.key), _b64(r.value), r.timestamp) for r in theirs
    ]
    assert sum(b["count"] for b in batches) == len(records) > 0


@pytest.fixture
def segment_copy(generated, tmp_path):
    part_dir, _ = generated
    src = _segments(part_dir)[0]
    dst = str(tmp_path / os.path.basename(src))
    shutil.copy(src, dst)
    with open(dst, "rb") as fh:
        data = bytearray(fh.read())
    first = struct.unpack_from(">i", data, 8)[0] + 12
    second = struct.unpack_from(">i", data, first + 8)[0] + 12
    return dst, data, first, second


def _write(path, data):
    with open(path, "wb") as fh:
        fh.write(data)


def test_crc_mismatch_is_shown_and_fails(segment_copy, capsys):
    path, data, first, _ = segment_copy
    data[first + 70] ^= 0xFF  # inside the second batch's records
    _write(path, data)
    code, objs = dump_json(capsys, path)
    assert code == 1
    batches = [o for o in objs if o["type"] == "batch"]
    assert [b["crcValid"] for b in batches[:3]] == [True, False, True]
    errors = [o for o in objs if o["type"] == "error"]
    assert errors[0]["file"] == path and errors[0]["position"] == first and "CRC" in errors[0]["message"]
    code, out, err = dump_text(capsys, path)
    assert code == 1 and "isvalid: false" in out[3] and err


def test_partial_trailing_batch_is_reported_like_kafka(segment_copy, capsys):
    path, data, first, second = segment_copy
    _write(path, data[: first + second - 10])
    code, objs = dump_json(capsys, path)
    assert code == 1
    assert [o["type"] for o in objs] == ["batch", "error"]
    assert objs[1]["position"] == first
    assert objs[1]["message"] == f"Found {second - 10} invalid bytes at the end of {os.path.basename(path)}"
    code, out, _ = dump_text(capsys, path)
    assert code == 1 and out[-1] == objs[1]["message"]


def test_corrupt_batch_prints_what_was_read_then_an_error(segment_copy, capsys):
    path, data, first, _ = segment_copy
    data[first + 16] = 7  # magic 7 in the second batch
    _write(path, data)
    code, objs = dump_json(capsys, path)
    assert code == 1
    assert [o["type"] for o in objs] == ["batch", "error"]
    assert objs[1]["position"] == first and "magic" in objs[1]["message"]
    code, out, err = dump_text(capsys, path)
    assert code == 1 and len([line for line in out if line.startswith("baseOffset")]) == 1
    assert any("magic" in line for line in err)


def test_index_entry_not_pointing_at_its_batch_fails(generated, tmp_path, capsys):
    part_dir, _ = generated
    log = next(p for p in _segments(part_dir) if os.path.getsize(p[:-4] + ".index") >= 8)
    for suffix in (".log", ".index"):
        shutil.copy(log[:-4] + suffix, tmp_path / os.path.basename(log[:-4] + suffix))
    index = str(tmp_path / os.path.basename(log[:-4] + ".index"))
    with open(index, "rb") as fh:
        data = bytearray(fh.read())
    struct.pack_into(">i", data, 0, struct.unpack_from(">i", data, 0)[0] + 1)  # off by one offset
    _write(index, data)
    code, objs = dump_json(capsys, index)
    assert code == 1 and objs[-1]["type"] == "error" and objs[-1]["position"] == 0


def test_unknown_and_missing_files(tmp_path, capsys):
    other = tmp_path / "notes.txt"
    other.write_text("x")
    code, _out, err = dump_text(capsys, str(other))
    assert code == 0 and err == [f"Ignoring unknown file {other}"]
    code, objs = dump_json(capsys, str(tmp_path / "00000000000000000000.log"))
    assert code == 1 and objs[0]["type"] == "error"


def test_module_entry_point_runs(generated):
    part_dir, _ = generated
    log = _segments(part_dir)[0]
    done = subprocess.run(
        [sys.executable, "-m", "compaction", "dump", "--json", "--files", log],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[0])["type"] == "batch"
