"""`--erase-keys` end to end through ./spark-submit.sh on a generated dir with every codec,
transactions (committed and aborted), idempotent producers and tombstones, checked with
kafka-python:

* erase only: no listed key decodes anywhere, every other record is exactly as before, the
  `.txnindex` files, the log end offset and the checkpoint are unchanged, every index passes the
  broker's checks; the dry run reports what the run then erases; cut into ranges, the same bytes;
* erase + compaction: the records a plain round keeps, less the listed keys (the active segment
  erased too), the checkpoint where the plain round puts it; cut into ranges, the same bytes.

Six Spark runs in all (a dry run, four erasing runs, the plain round they are compared with).
"""

from __future__ import annotations

import base64
import json
import os
import shutil

import numpy as np
import pytest
from e2ekit import decode_partition, run_job, segment_logs, tree_hashes
from faultkit import assert_loads, parts

from compaction.format.segment import iter_batches
from compaction.kernels.scan import scan_batches
from compaction.runtime.storage import Storage
from compaction.steps.discover import log_end_offset, read_log_dir
from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOW = 1_800_000_000_000
SEGMENT_BYTES = 150_000
RANGES = ("--conf", "spark.kafka.compaction.partitionTaskMaxBytes=0")
ONLY_IN_USERS = b"key-000007"  # listed for topic users only
NEVER = b"no-such-key"


def _generate(log_dir: str) -> None:
    generate_log_dir(
        log_dir,
        topics=(("ledger", 2), ("users", 1)),
        records=4000,
        keys=200,
        codec="mixed",
        batch_records=(1, 12),
        segment_bytes=60_000,
        tombstone_ratio=0.15,
        transactions=0.45,
        idempotent=0.25,
        abort_ratio=0.35,
        txn_producers=4,
        idempotent_producers=2,
        txn_batches=3,
        headers=1,
        seed=23,
    )
    # A partition without transactions, whose log ends in a data batch (in the others a marker
    # ends it): all of that batch's keys are listed, so erasing empties the log's last batch.
    tail = log_dir + ".tail"
    generate_log_dir(
        tail,
        topics=(("tail", 1),),
        records=600,
        keys=80,
        codec="none",
        batch_records=(2, 4),
        segment_bytes=8000,
        tombstone_ratio=0.1,
        seed=5,
    )
    shutil.move(os.path.join(tail, "tail-0"), os.path.join(log_dir, "tail-0"))
    # A partition none of whose keys is listed (longer keys): erasing only leaves it alone.
    quiet = log_dir + ".quiet"
    generate_log_dir(
        quiet, topics=(("quiet", 1),), records=300, keys=40, key_size=14, segment_bytes=8000, seed=9
    )
    shutil.move(os.path.join(quiet, "quiet-0"), os.path.join(log_dir, "quiet-0"))


def _last_data_key(records) -> bytes:
    return next(r.key for r in reversed(records) if r.key is not None)


def _log_end_offset(part_dir: str) -> int:
    """The next offset after the last batch of the last segment (what a broker's LogLoader
    recovers), or the segment's base when it holds no batch; the job's own discovery (from the
    last index entry on) must say the same."""
    last = segment_logs(part_dir)[-1]
    cols = scan_batches(np.frombuffer(open(last, "rb").read(), np.uint8))
    leo = int(cols.last_offset[-1]) + 1 if len(cols.last_offset) else int(os.path.basename(last)[:20])
    log_dir, name = os.path.split(part_dir.rstrip("/"))
    part = next(p for p in read_log_dir(log_dir).partitions if os.path.basename(p.path) == name)
    storage, _ = Storage.for_uri(log_dir)
    assert log_end_offset(storage, part.segments[-1]) == leo, part_dir
    return leo


def _last_batch_keys(part_dir: str) -> set[bytes]:
    last = segment_logs(part_dir)[-1]
    batches = list(iter_batches(open(last, "rb").read(), last))
    return {r.key for r in batches[-1].records()}


def _key_file(path: str, before: dict, tail_keys: set[bytes]) -> dict[str, set[bytes]]:
    """Listed keys: the last data record's key of every partition but quiet-0, every key of the tail
    partition's last batch (scoped to it), a tombstoned key, a text and a hex form, one key scoped
    to a topic, one key found nowhere. Returns the keys that apply per topic."""
    ledger = before["ledger-0"]
    tomb = next(r.key for r in ledger if r.value is None and r.key is not None)
    lasts = {_last_data_key(recs) for part, recs in before.items() if part != "quiet-0"}
    lines = [
        "# right-to-be-forgotten requests",
        "",
        *sorted(k.decode() for k in lasts),
        f"hex:{tomb.hex()}",
        f"users\t{ONLY_IN_USERS.decode()}",
        f"text:{NEVER.decode()}",
        *(f"tail\tbase64:{base64.b64encode(k).decode()}" for k in sorted(tail_keys)),
    ]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    common = lasts | {tomb, NEVER}
    return {"ledger": common, "users": common | {ONLY_IN_USERS}, "tail": common | tail_keys, "quiet": common}


def _copy(src: str, dst: str) -> str:
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("erase")
    pristine = str(root / "pristine")
    _generate(pristine)
    before = {p: decode_partition(os.path.join(pristine, p)) for p in parts(pristine)}
    leo = {p: _log_end_offset(os.path.join(pristine, p)) for p in parts(pristine)}
    keys = str(root / "keys.txt")
    listed = _key_file(keys, before, _last_batch_keys(os.path.join(pristine, "tail-0")))
    erase = ("--now-ms", str(NOW), "--segment-bytes", str(SEGMENT_BYTES), "--erase-keys", keys)
    dirs, out = {}, {}
    for name, args in {
        "only": (*erase, "--erase-only"),
        "only_ranges": (*erase, "--erase-only", *RANGES),
        "combined": erase,
        "combined_ranges": (*erase, *RANGES),
        "plain": ("--now-ms", str(NOW), "--segment-bytes", str(SEGMENT_BYTES)),
    }.items():
        dirs[name] = _copy(pristine, str(root / name))
        if name == "only":
            hashes = tree_hashes(dirs[name])
            out["dry"] = run_job(dirs[name], *args, "--dry-run", report=str(root / "dry.json"))
            assert tree_hashes(dirs[name]) == hashes, "the dry run wrote"
        out[name] = run_job(dirs[name], *args, report=str(root / f"{name}.json"))
        assert out[name][0] == 0, out[name][2]
    return {"pristine": pristine, "before": before, "leo": leo, "listed": listed, "dirs": dirs, "out": out}


def _entries(report: dict) -> dict[str, dict]:
    return {f"{p['topic']}-{p['partition']}": p for p in report["partitions"]}


def _topic(part: str) -> str:
    return part.rsplit("-", 1)[0]


def test_erase_only_removes_exactly_the_listed_keys(runs):
    for part, records in runs["before"].items():
        listed = runs["listed"][_topic(part)]
        after = decode_partition(os.path.join(runs["dirs"]["only"], part))
        assert not [r for r in after if r.key in listed], part
        assert after == [r for r in records if r.key not in listed], part
    ledger_after = decode_partition(os.path.join(runs["dirs"]["only"], "ledger-0"))
    assert any(r.key == ONLY_IN_USERS for r in ledger_after), "a key scoped to users stays in ledger"


def test_erase_only_keeps_log_end_offset_txn_indexes_checkpoint_and_loads(runs):
    only, pristine = runs["dirs"]["only"], runs["pristine"]
    for part in runs["before"]:
        part_dir = os.path.join(only, part)
        assert _log_end_offset(part_dir) == runs["leo"][part], part
        assert_loads(part_dir)
        for name in os.listdir(os.path.join(pristine, part)):
            if name.endswith(".txnindex"):
                old, new = (open(os.path.join(d, part, name), "rb").read() for d in (pristine, only))
                assert new == old, name
        assert sorted(n for n in os.listdir(part_dir) if n.endswith(".log")) == sorted(
            n for n in os.listdir(os.path.join(pristine, part)) if n.endswith(".log")
        )
    for name in ("cleaner-offset-checkpoint",):
        assert open(os.path.join(only, name)).read() == open(os.path.join(pristine, name)).read()


def test_an_emptied_last_batch_stays_as_an_empty_batch(runs):
    """The tail partition's last batch held only listed keys: it is kept empty (its offsets, so
    the log end offset a broker recovers), in both modes."""
    for name in ("only", "combined"):
        last = segment_logs(os.path.join(runs["dirs"][name], "tail-0"))[-1]
        header = list(iter_batches(open(last, "rb").read(), last))[-1].header
        assert header.records_count == 0 and header.next_offset == runs["leo"]["tail-0"], name


def test_report_counts_and_dry_run_says_the_same(runs):
    report, dry = runs["out"]["only"][1], runs["out"]["dry"][1]
    entries, dry_entries = _entries(report), _entries(dry)
    for part, records in runs["before"].items():
        listed = runs["listed"][_topic(part)]
        gone = [r for r in records if r.key in listed]
        e = entries[part]
        if part == "quiet-0":  # nothing listed in it: not rewritten, and said so
            assert (e["status"], e["erasedRecords"], dry_entries[part]["status"]) == (
                "skipped",
                0,
                "skipped",
            ), e
            assert _hashes(os.path.join(runs["dirs"]["only"], part)) == _hashes(
                os.path.join(runs["pristine"], part)
            )
            continue
        assert e["status"] == "cleaned", e
        assert e["erasedRecords"] == len(gone), part
        assert e["erasedBytes"] == sum(len(r.key) + len(r.value or b"") for r in gone), part
        found = {r.key for r in gone}
        assert (e["eraseKeysFound"], e["eraseKeysNotFound"]) == (len(found), len(listed) - len(found)), part
        d = dry_entries[part]
        assert d["status"] == "eligible", d
        for k in (
            "erasedRecords",
            "erasedBytes",
            "eraseKeysFound",
            "eraseKeysNotFound",
            "reclaimableBytes",
            "reclaimableRecords",
        ):
            assert d[k] == e[k], (part, k)
    text = json.dumps(report)
    for keys in runs["listed"].values():
        for k in keys:
            assert k.decode() not in text, "a listed key leaked into the report"


def test_erase_only_cut_into_ranges_writes_the_same_bytes(runs):
    assert runs["out"]["only_ranges"][1]["timings"].get("rangesSeconds")
    assert _hashes(runs["dirs"]["only_ranges"]) == _hashes(runs["dirs"]["only"])


def test_combined_is_the_plain_round_less_the_listed_keys(runs):
    combined, plain = runs["dirs"]["combined"], runs["dirs"]["plain"]
    for part in runs["before"]:
        listed = runs["listed"][_topic(part)]
        after = decode_partition(os.path.join(combined, part))
        assert not [r for r in after if r.key in listed], part
        assert after == [r for r in decode_partition(os.path.join(plain, part)) if r.key not in listed], part
        assert _log_end_offset(os.path.join(combined, part)) == runs["leo"][part], part
        assert_loads(os.path.join(combined, part))
    ckpt = "cleaner-offset-checkpoint"
    assert open(os.path.join(combined, ckpt)).read() == open(os.path.join(plain, ckpt)).read()
    assert {e["status"] for e in runs["out"]["combined"][1]["partitions"]} == {"cleaned"}


def test_combined_cut_into_ranges_writes_the_same_bytes(runs):
    assert runs["out"]["combined_ranges"][1]["timings"].get("rangesSeconds")
    assert _hashes(runs["dirs"]["combined_ranges"]) == _hashes(runs["dirs"]["combined"])


def _hashes(log_dir: str) -> dict[str, str]:
    tree = tree_hashes(log_dir)
    tree.pop(".compaction.lock", None)
    return tree
