"""The key file (erase_keys.py): a boundary table of lines, errors naming file, line and byte; the
erase decision (erase.py, rewrite's erasing-only batch rule) against plain-Python references."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_map import KeyLookup
from test_rewrite_unit import Log, batches_of, one, rec, tombstone

from compaction.cli.options import check_options, parse_unchecked
from compaction.errors import KeyFileError, UsageError
from compaction.format.erase_keys import parse_key_file, parse_line
from compaction.steps.erase import (
    ERASED,
    build_erase_set,
    compiled,
    erase_found,
    erased_records,
    erased_records_py,
    key_count,
    pack_bits,
    unpack_bits,
)

# line -> (topic, key) or None (skipped)
GOOD = [
    ("user-42", (None, b"user-42")),
    (" spaced ", (None, b" spaced ")),
    ("caf\u00e9", (None, "caf\u00e9".encode())),
    ("hex:", (None, b"")),
    ("hex:00FFab", (None, b"\x00\xff\xab")),
    ("base64:AP8=", (None, b"\x00\xff")),
    ("base64:", (None, b"")),
    ("text:hex:00", (None, b"hex:00")),
    ("text:#not a comment", (None, b"#not a comment")),
    ("orders\tuser-1", ("orders", b"user-1")),
    ("a.b_c-9\thex:01", ("a.b_c-9", b"\x01")),
    ("x" * 249 + "\tk", ("x" * 249, b"k")),
    ("# comment", None),
    ("", None),
]
BAD = [
    ("a\tb\tc", "more than one TAB"),
    ("hex:0", "even number"),
    ("hex:zz", "even number"),
    ("hex:00 11", "even number"),
    ("base64:AP8", "base64"),
    ("base64:A P8=", "base64"),
    ("text:", "empty key"),
    ("orders\t", "empty key"),
    ("bad topic\tk", "not a Kafka topic name"),
    ("\tk", "not a Kafka topic name"),
    ("..\tk", "not a Kafka topic name"),
    ("x" * 250 + "\tk", "not a Kafka topic name"),
]


@pytest.mark.parametrize(("line", "want"), GOOD)
def test_good_lines(line, want):
    assert parse_line(line) == want


@pytest.mark.parametrize(("line", "why"), BAD)
def test_bad_lines_name_file_line_and_byte(line, why):
    data = b"first\n# two\n" + line.encode() + b"\nlast\n"
    with pytest.raises(KeyFileError) as exc:
        parse_key_file(data, "keys.txt")
    assert str(exc.value).startswith("--erase-keys keys.txt: line 3 (byte 12): ")
    assert why in str(exc.value)
    assert isinstance(exc.value, UsageError)


def test_not_utf8_names_the_byte_and_crlf_is_a_line_break():
    with pytest.raises(KeyFileError, match=r"line 2 \(byte 5\): not UTF-8"):
        parse_key_file(b"abc\r\n\xffx\n", "k")
    assert parse_key_file(b"abc\r\nhex:01\r\n", "k") == [(None, b"abc"), (None, b"\x01")]


def test_options_refuse_bad_combinations(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("user-1\n")
    with pytest.raises(UsageError, match="--ignore-broker-lock"):
        check_options(parse_unchecked(["--log-dir", "x", "--erase-keys", str(keys), "--ignore-broker-lock"]))
    with pytest.raises(UsageError, match="--erase-only needs --erase-keys"):
        check_options(parse_unchecked(["--log-dir", "x", "--erase-only"]))
    with pytest.raises(UsageError, match="No such file"):
        check_options(parse_unchecked(["--log-dir", "x", "--erase-keys", str(tmp_path / "missing")]))
    keys.write_text("ok\nhex:1\n")
    with pytest.raises(KeyFileError, match="line 2"):
        check_options(parse_unchecked(["--log-dir", "x", "--erase-keys", str(keys)]))


def test_erase_set_scopes_and_dedups():
    es = build_erase_set([(None, b"a"), ("t", b"b"), ("u", b"c"), ("t", b"a"), (None, b"")])
    assert es.keys_for("t") == [b"a", b"b", b""]
    assert es.keys_for("other") == [b"a", b""]
    assert es.applies_to("other")
    scoped = build_erase_set([("t", b"b")])
    assert scoped.applies_to("t") and not scoped.applies_to("u")


keys_st = st.binary(min_size=0, max_size=6)


@settings(max_examples=200, deadline=None)
@given(
    listed=st.lists(keys_st, max_size=12, unique=True),
    records=st.lists(st.tuples(st.one_of(st.none(), keys_st), st.booleans()), max_size=60),
)
def test_erased_records_match_the_reference(listed, records):
    """The compiled lookup (numba `KeyIndex`) finds exactly the records the dict does, control
    records never; the map's answer is ERASED exactly there; the found bitmap survives its text."""
    es = build_erase_set([(None, k) for k in listed])
    index, n = compiled(es, "t")
    keys = [k for k, _ in records]
    control = np.array([c for _, c in records], bool)
    hit = erased_records(index, pa.array(keys, pa.binary()), control)
    assert hit.tolist() == erased_records_py(es.keys_for("t"), keys, control.tolist())
    found = erase_found(np.arange(len(records), dtype=np.int64), hit)
    assert ((found == ERASED) == (hit >= 0)).all()
    met = np.zeros(n, bool)
    met[hit[hit >= 0]] = True
    assert (unpack_bits(pack_bits(met), n) == met).all()


def test_a_bad_key_file_stops_the_launcher_before_spark(tmp_path):
    """Exit 2, one line naming the file and line, nothing written (Spark never starts)."""
    import os
    import subprocess
    import sys

    from e2ekit import REPO, SUBMIT

    from compaction.tools.generator import generate_log_dir

    log_dir = str(tmp_path / "logs")
    generate_log_dir(log_dir, topics=(("t", 1),), records=50, keys=5, segment_bytes=2000, seed=1)
    before = sorted(os.listdir(log_dir))
    keys = tmp_path / "keys.txt"
    keys.write_bytes(b"ok\nt\tx\ty\n")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [SUBMIT, "--log-dir", log_dir, "--erase-keys", str(keys)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"--erase-keys {keys}: line 2 (byte 3): more than one TAB" in proc.stderr
    assert sorted(os.listdir(log_dir)) == before


def _erasing(log, segs, erase, last_records=None):
    """Erasing-only specs, one per segment, as plan_round.group_specs makes them."""
    import dataclasses

    after = {a.base_offset: b.base_offset for a, b in zip(segs, segs[1:])}
    return [
        dataclasses.replace(
            log.spec([s], upper_bound=0, last_records=last_records, gid=i),
            erase=erase,
            erase_only=True,
            segments=(dataclasses.replace(s, next_base_offset=after.get(s.base_offset)),),
        )
        for i, s in enumerate(segs)
    ]


def test_erase_only_keeps_the_batches_producer_state_and_the_log_end_need(tmp_path):
    """Key x erased: a batch of only x goes, unless it is its producer's last data batch or the
    log's last batch (then it stays empty, its offsets and producer fields kept); a batch with x
    and another key is rebuilt; a segment without x is not written. The report's counts: records
    and bytes erased per group (key and value; a tombstone has no value), and which listed keys
    were met (x) or not (q, listed but in no record)."""

    from compaction.format.batch_build import build_batch
    from compaction.policy.txn_state import LastRecord
    from compaction.steps.rewrite import rewrite_unit

    log = Log(tmp_path)
    pid = dict(producer_id=7, producer_epoch=0)
    log.segment(
        0,
        [
            one(0, "x", base_sequence=0, **pid),
            one(1, "y", base_sequence=1, **pid),
            one(2, "x", base_sequence=2, **pid),
        ],
    )
    log.segment(3, [one(3, "z")])
    log.segment(4, [build_batch([rec(4, "x", "v"), rec(5, "w", "v")]), tombstone(6, "x")])
    erase = build_erase_set([(None, b"x"), (None, b"q"), (None, b"x")])
    specs = _erasing(log, log.segments, erase, {7: LastRecord(2, 0)})
    rows = rewrite_unit(specs, KeyLookup(pa.array([], pa.binary()), np.empty(0, np.int64)))
    assert [r.unchanged for r in rows] == [0, 1, 0]
    assert [r.erased_records for r in rows] == [2, 0, 2]
    assert [r.erased_bytes for r in rows] == [2 + 2, 0, 2 + 1]
    listed = key_count(erase, specs[0].topic)
    assert listed == 2 and unpack_bits(rows[0].erase_found, listed).tolist() == [True, False]
    first = batches_of(log.read(0, ".cleaned"))
    assert [
        (h.base_offset, h.last_offset, h.records_count, h.producer_id, h.base_sequence) for h, _, _ in first
    ] == [(1, 1, 1, 7, 1), (2, 2, 0, 7, 2)]
    assert not os.path.exists(log.file(3, ".log", ".cleaned"))
    last = batches_of(log.read(4, ".cleaned"))
    assert [(h.base_offset, h.last_offset, [r.key for r in recs]) for h, recs, _ in last] == [
        (4, 5, [b"w"]),
        (6, 6, []),
    ]


def test_a_listed_key_equal_to_a_markers_key_leaves_the_marker(tmp_path):
    """A transaction marker's record has a key (its version and type, 4 bytes): listing those
    bytes erases the data records with that key, never the COMMIT or ABORT marker, which the
    transaction and every read_committed consumer need."""
    from test_rewrite_unit import marker, txn_batch

    from compaction.format import batch as fb
    from compaction.format.batch_build import build_batch
    from compaction.policy.txn_state import LastRecord
    from compaction.steps.rewrite import rewrite_unit

    commit_key, abort_key = fb.control_record(fb.CONTROL_COMMIT)[0], fb.control_record(fb.CONTROL_ABORT)[0]
    log = Log(tmp_path)
    log.segment(0, [txn_batch([rec(0, "x", "v"), rec(1, commit_key, "v")]), marker(2, fb.CONTROL_COMMIT)])
    log.segment(
        3,
        [txn_batch([rec(3, "y", "v")], seq=2), marker(4, fb.CONTROL_ABORT), build_batch([rec(5, "z", "v")])],
    )
    erase = build_erase_set([(None, b"x"), (None, commit_key), (None, abort_key)])
    specs = _erasing(log, log.segments, erase, {7: LastRecord(1, 0)})
    rows = rewrite_unit(specs, KeyLookup(pa.array([], pa.binary()), np.empty(0, np.int64)))
    assert [r.erased_records for r in rows] == [2, 0]  # x and the data record keyed like a marker
    controls = [
        (h.base_offset, recs[0].key)
        for h, recs, _ in batches_of(log.read(0, ".cleaned"))
        if h.attributes & fb.CONTROL_MASK
    ]
    assert controls == [(2, commit_key)]
    assert not os.path.exists(log.file(3, ".log", ".cleaned"))  # nothing erased: the segment stays


def test_erasing_a_last_legacy_message_fails_rather_than_move_the_log_end(tmp_path):

    from compaction.errors import EraseError
    from compaction.format.legacy import build_legacy_message_set
    from compaction.steps.rewrite import rewrite_unit

    log = Log(tmp_path)
    log.segment(
        0, [build_legacy_message_set([rec(0, "y", "v")], 1), build_legacy_message_set([rec(1, "x", "v")], 1)]
    )
    specs = _erasing(log, log.segments, build_erase_set([(None, b"x")]))
    with pytest.raises(EraseError, match="log end offset"):
        rewrite_unit(specs, KeyLookup(pa.array([], pa.binary()), np.empty(0, np.int64)))


KEYS = [b"a", b"b", b"c", None]
batch_st = st.tuples(
    st.sampled_from([-1, 1, 2]),
    st.sampled_from([0, 1, 3]),  # producer, codec
    st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from([b"v", None])), min_size=1, max_size=4),
)


def _expected(segments, listed):
    """The plain-Python erasing-only rule over the input batches: per segment, per batch, None
    (dropped) or (base, last, producer, sequence, records kept, whole)."""
    flat = [(s, i) for s, batches in enumerate(segments) for i in range(len(batches))]
    last_of = {}
    for s, i in flat:
        if segments[s][i]["pid"] >= 0:
            last_of[segments[s][i]["pid"]] = (s, i)
    out = []
    for s, batches in enumerate(segments):
        seg = []
        for i, b in enumerate(batches):
            kept = [r for r in b["records"] if r[1] not in listed]
            keep_empty = (s, i) == flat[-1] or last_of.get(b["pid"]) == (s, i)
            if kept or keep_empty:
                seg.append((b["base"], b["last"], b["pid"], b["seq"], kept, len(kept) == len(b["records"])))
        out.append(seg)
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(batch_st, min_size=1, max_size=4), min_size=1, max_size=3),
    st.sets(st.sampled_from(KEYS[:3])),
)
def test_erase_only_rewrite_matches_the_reference(segments_in, listed):
    """Random segments of plain and producer batches (codecs, null keys, tombstones) erased of a
    random key set: what each segment holds afterwards is the reference's (kept whole batches byte
    for byte, empty batches where producer state or the log end need them, offsets kept)."""
    import tempfile
    from pathlib import Path

    from compaction.format.batch_build import build_batch
    from compaction.policy.txn_state import LastRecord
    from compaction.steps.rewrite import rewrite_unit

    with tempfile.TemporaryDirectory() as tmp:
        log = Log(Path(tmp))
        offset, seqs, segments, last = 0, {}, [], {}
        for seg in segments_in:
            base, batches, raws = offset, [], []
            for pid, codec, records in seg:
                seq = seqs.get(pid, 0) if pid >= 0 else -1
                recs = [(offset + k, key, value) for k, (key, value) in enumerate(records)]
                raws.append(
                    build_batch(
                        [rec(o, k, v) for o, k, v in recs],
                        codec=codec,
                        producer_id=pid,
                        producer_epoch=0 if pid >= 0 else -1,
                        base_sequence=seq,
                    )
                )
                batches.append(
                    {
                        "base": offset,
                        "last": offset + len(recs) - 1,
                        "pid": pid,
                        "seq": seq,
                        "records": recs,
                        "raw": raws[-1],
                    }
                )
                if pid >= 0:
                    seqs[pid] = seq + len(recs)
                    last[pid] = LastRecord(offset + len(recs) - 1, 0)
                offset += len(recs)
            log.segment(base, raws)
            segments.append(batches)
        specs = _erasing(log, log.segments, build_erase_set([(None, k) for k in listed]), last)
        rows = rewrite_unit(specs, KeyLookup(pa.array([], pa.binary()), np.empty(0, np.int64)))
        for spec, row, want, batches in zip(specs, rows, _expected(segments, listed), segments, strict=True):
            base = spec.new_base
            assert row.unchanged == (not os.path.exists(log.file(base, ".log", ".cleaned")))
            data = log.read(base) if row.unchanged else log.read(base, ".cleaned")
            got = [
                (
                    h.base_offset,
                    h.last_offset,
                    h.producer_id,
                    h.base_sequence,
                    [(r.offset, r.key, r.value) for r in recs],
                    raw,
                )
                for h, recs, raw in batches_of(data)
            ]
            assert [g[:5] for g in got] == [w[:5] for w in want]
            raws = {b["base"]: b["raw"] for b in batches}
            for g, w in zip(got, want):
                if w[5]:  # nothing erased: the batch is copied byte for byte
                    assert g[5] == raws[g[0]]


def test_planning_reads_the_key_file_as_it_is_now_each_time(tmp_path):
    """No state outlives a planning: the same key file path, rewritten between two plannings in
    one process (two rounds, or planning outside a round), is read as it is at each one."""
    from compaction.cli.options import parse_args
    from compaction.steps.plan_round import discover_and_plan, selected
    from compaction.tools.generator import generate_log_dir

    log_dir = str(tmp_path / "logs")
    generate_log_dir(log_dir, topics=(("t", 1),), records=50, keys=5, segment_bytes=2000, seed=1)
    keys = tmp_path / "keys.txt"
    keys.write_text("k-1\n")
    opts = parse_args(["--log-dir", log_dir, "--now-ms", "0", "--erase-keys", str(keys), "--erase-only"])
    for listed, applies in (("t\tk-1\n", True), ("other\tk-1\n", False), ("k-1\n", True)):
        keys.write_text(listed)
        (p,) = discover_and_plan(opts)[0]
        assert (p.erase is not None, selected(p, opts)) == (applies, applies), listed
