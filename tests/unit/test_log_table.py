"""The `kafka_log` source's rows without Spark (`steps/log_table.py`): every record of generated
log dirs (every codec, headers, transactions and aborts, tombstones, control batches, legacy
v0/v1) against kafka-python's decoding and the generator's manifest; the compacted state against
the latest record per key; the header walk against its Python twin; the cuts, the pruning and a
damaged batch."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from e2ekit import decode_log_dir as kafka_python
from e2ekit import segment_logs, state_offsets_as_of
from open_txn import last_stable_offset, open_offsets, open_txn_log_dir

from compaction.errors import CrcMismatchError, PartitionInvalid, UsageError
from compaction.kernels.headers import header_starts, walk_headers, walk_headers_py
from compaction.kernels.scan import scan_segment
from compaction.steps.log_table import (
    Bounds,
    ReadOptions,
    chosen_columns,
    cut_compacted,
    plan_splits,
    read_split,
)
from compaction.tools.generator import generate_log_dir
from compaction.tools.generator_plan import TXN_ABORTED

VARIANTS = {
    "none": dict(codec="none", headers=2, tombstone_ratio=0.1),
    "gzip": dict(codec="gzip", headers=1, transactions=0.4, abort_ratio=0.4, idempotent=0.3),
    "snappy": dict(codec="snappy", tombstone_ratio=0.2, transactions=0.3, abort_ratio=0.5),
    "lz4": dict(codec="lz4", headers=3, idempotent=0.5),
    "zstd": dict(codec="zstd", transactions=0.5, abort_ratio=0.3, tombstone_ratio=0.1),
    "mixed": dict(codec="mixed", headers=1, transactions=0.3, abort_ratio=0.3, tombstone_ratio=0.1),
    "v0": dict(codec="mixed", legacy="v0", tombstone_ratio=0.1),
    "v1": dict(codec="mixed", legacy="v1", tombstone_ratio=0.1),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def log_dir(request, tmp_path_factory):
    root = str(tmp_path_factory.mktemp(request.param))
    manifest = generate_log_dir(
        root,
        topics=(("orders", 2),),
        records=1200,
        keys=80,
        segment_bytes=12_000,
        seed=5,
        **VARIANTS[request.param],
    )
    return root, manifest, request.param


def rows(root: str, *, buckets: int | None = None, **options) -> list[dict]:
    """The rows of a read; with `buckets`, the compacted state's splits cut by key as the source
    cuts them for `minPartitions=buckets`."""
    opts = ReadOptions.parse({"path": root, **options})
    splits = plan_splits(opts)
    if buckets is not None:
        splits = cut_compacted(splits, buckets)
        assert len(splits) >= buckets
    batches = [b for split in splits for b in read_split(split, opts)]
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    ts = table.column("timestamp").cast(pa.int64()).to_pylist()
    out = table.drop_columns(["timestamp"]).to_pylist()
    for row, t in zip(out, ts):
        row["timestamp"] = None if t is None else t // 1000
    return out


def as_tuples(table_rows: list[dict]) -> list[tuple]:
    return sorted(
        (
            r["topic"],
            r["partition"],
            r["offset"],
            r["key"],
            r["value"],
            r["timestamp"],
            tuple((h["key"], h["value"]) for h in r.get("headers") or ()),
        )
        for r in table_rows
    )


def test_every_record_as_kafka_python_decodes_it(log_dir):
    root, _, _ = log_dir
    got = rows(root, includeHeaders="true")
    assert as_tuples(got) == kafka_python(root)
    assert got and not any(r["isControl"] for r in got)


def test_batch_fields_from_the_manifest(log_dir):
    root, manifest, _ = log_dir
    got = rows(root, includeControl="true")
    for r in got:
        m = manifest.partitions[("orders", r["partition"])].record(r["offset"])
        assert (r["producerId"], r["producerEpoch"], r["sequence"]) == (
            m.producer_id,
            m.producer_epoch,
            m.sequence,
        )
        assert r["isControl"] == (m.control_type >= 0)
        assert r["isTransactional"] == (m.txn != 0 or (r["isControl"]))
    markers = sum(int(p.is_control.sum()) for p in manifest.partitions.values())
    assert sum(r["isControl"] for r in got) == markers


def test_read_committed_leaves_aborted_records_out(log_dir):
    root, manifest, _ = log_dir
    got = {(r["partition"], r["offset"]) for r in rows(root, **{"kafka.isolation.level": "read_committed"})}
    want = {
        (p, o)
        for (_, p), m in manifest.partitions.items()
        for o in range(m.log_end_offset)
        if m.txn[o] != TXN_ABORTED and not m.is_control[o]
    }
    assert got == want


def test_compacted_is_the_latest_record_of_each_key(log_dir):
    root, manifest, _ = log_dir
    got = {(r["partition"], r["key"]): (r["offset"], r["value"]) for r in rows(root, compacted="true")}
    want = {}
    for (_, p), m in manifest.partitions.items():
        latest = {}
        for o in range(m.log_end_offset):
            if not m.is_control[o] and m.txn[o] != TXN_ABORTED:
                latest[m.key(o)] = o
        for key, o in latest.items():
            if not m.is_tombstone[o]:
                want[(p, key)] = (o, m.value(o))
    assert got == want
    assert len(got) < len(rows(root))


def test_compacted_as_of_an_offset(log_dir):
    """The state a broker held when its log ended at offset O: whole batches whose last offset
    is below O (policy/cut.py); a transaction whose marker is not held is open there and unseen."""
    root, manifest, _ = log_dir
    m = manifest.partitions[("orders", 0)]
    cut = m.log_end_offset // 2
    got = {
        r["key"]: r["offset"]
        for r in rows(root, compacted="true", asOfOffsets=f"orders:0={cut}")
        if r["partition"] == 0
    }
    assert got == state_offsets_as_of(m, cut)
    assert got != state_offsets_as_of(m, m.log_end_offset)


def by_offset(table_rows: list[dict]) -> list[dict]:
    return sorted(table_rows, key=lambda r: (r["partition"], r["offset"]))


@pytest.mark.parametrize("buckets", [2, 3, 7])
def test_compacted_cut_by_key_is_the_uncut_state(log_dir, buckets):
    """Each split maps and emits the keys of its bucket: together they return the rows of one
    split per partition, each once."""
    root, manifest, _ = log_dir
    whole = rows(root, compacted="true")
    cut = rows(root, compacted="true", buckets=buckets)
    assert by_offset(cut) == by_offset(whole)
    m = manifest.partitions[("orders", 0)]
    at = m.log_end_offset // 2
    as_of = rows(root, compacted="true", asOfOffsets=f"orders:0={at}", buckets=buckets)
    assert {r["key"]: r["offset"] for r in as_of if r["partition"] == 0} == state_offsets_as_of(m, at)


def test_every_split_of_a_cut_state_has_rows(log_dir):
    """The buckets share the keys out: no split is left without rows (the cut spreads work)."""
    root, _, _ = log_dir
    opts = ReadOptions.parse({"path": root, "compacted": "true"})
    splits = cut_compacted(plan_splits(opts), 4)
    counts = [sum(b.num_rows for b in read_split(s, opts)) for s in splits]
    assert len(counts) >= 4 and min(counts) > 0


@pytest.mark.parametrize(
    "columns",
    [
        ("offset",),
        ("value",),
        ("key", "offset", "timestamp"),
        ("isControl", "headers", "partition", "sequence"),
    ],
)
@pytest.mark.parametrize("compacted", ["false", "true"])
def test_chosen_columns_are_the_full_rows_projected(log_dir, columns, compacted):
    """A read of some columns builds batches of exactly those, in that order, holding what the
    full read holds in them, row for row (headers too, without includeHeaders)."""
    root, _, _ = log_dir
    full = ReadOptions.parse({"path": root, "compacted": compacted, "includeHeaders": "true"})
    narrow = replace(ReadOptions.parse({"path": root, "compacted": compacted}), columns=columns)
    for split in plan_splits(full):
        want = [b.select(list(columns)) for b in read_split(split, full)]
        got = list(read_split(split, narrow))
        assert [b.schema.names for b in got] == [list(columns)] * len(want)
        assert pa.Table.from_batches(got, got[0].schema if got else None).equals(
            pa.Table.from_batches(want, want[0].schema if want else None)
        )


def test_chosen_columns_check_names_and_types():
    assert chosen_columns([("OFFSET", "bigint", True), ("value", "binary", True)]) == ("offset", "value")
    headers = [("headers", "array<struct<key:string,value:binary>>", True)]
    assert chosen_columns(headers) == ("headers",)
    with pytest.raises(UsageError, match=r"no column 'offst'.*offset bigint.*isControl boolean"):
        chosen_columns([("offst", "bigint", True)])
    with pytest.raises(UsageError, match=r"column offset is bigint in kafka_log, not int.*key binary"):
        chosen_columns([("offset", "int", True)])
    with pytest.raises(UsageError, match=r"column timestamp is timestamp in kafka_log, not timestamp_ntz"):
        chosen_columns([("timestamp", "timestamp_ntz", True)])
    with pytest.raises(UsageError, match="named twice"):
        chosen_columns([("key", "binary", True), ("Key", "binary", True)])
    # A NOT NULL column, even one no record leaves null: Spark would plan `IS NULL` on it as false.
    for name, typ in [("value", "binary"), ("offset", "bigint"), headers[0][:2]]:
        with pytest.raises(UsageError, match=rf"column {name} is declared NOT NULL"):
            chosen_columns([(name, typ, False)])


def test_a_partition_dir_a_broker_would_not_write_fails_the_read_naming_the_file(tmp_path):
    """A segment that is a link is not listed as a segment: the read would come back short. It
    fails naming the link, as the job refuses the partition."""
    generate_log_dir(
        str(tmp_path / "logs"), topics=(("orders", 2),), records=400, keys=30, segment_bytes=8000
    )
    part = tmp_path / "logs" / "orders-1"
    first = sorted(part.glob("*.log"))[0]
    os.rename(first, tmp_path / first.name)
    os.symlink(tmp_path / first.name, first)
    with pytest.raises(PartitionInvalid, match=rf"orders-1/{first.name}: is a symbolic link"):
        plan_splits(ReadOptions.parse({"path": str(tmp_path / "logs")}))
    # A partition the pushed filters leave out is not looked at.
    opts = ReadOptions.parse({"path": str(tmp_path / "logs")})
    assert [s.partition for s in plan_splits(opts, Bounds(partitions=frozenset({0})))] == [0]


@pytest.fixture(scope="module")
def open_txn_dir(tmp_path_factory):
    """One partition whose log ends inside transactions (committed and aborted ones before)."""
    root = str(tmp_path_factory.mktemp("open-txn"))
    return (root, *open_txn_log_dir(root))


def test_read_committed_stops_at_the_last_stable_offset(open_txn_dir):
    """A read_committed consumer reads up to the LSO: no record of a transaction open at the log
    end, nor any record after its first offset; aborted ones before it left out."""
    root, m, cut = open_txn_dir
    lso = last_stable_offset(m, cut)
    got = sorted(r["offset"] for r in rows(root, **{"kafka.isolation.level": "read_committed"}))
    assert got == [o for o in range(lso) if not m.is_control[o] and m.txn[o] != TXN_ABORTED]
    everything = {r["offset"] for r in rows(root)}
    assert open_offsets(m, cut) <= everything and max(everything) >= lso
    ending = f'{{"orders":{{"0":{lso - 5}}}}}'
    capped = rows(root, endingOffsets=ending, **{"kafka.isolation.level": "read_committed"})
    assert sorted(r["offset"] for r in capped) == [o for o in got if o < lso - 5]


def test_compacted_leaves_transactions_open_at_the_end_out(open_txn_dir):
    """The state as of the log end holds committed records only: an open transaction's records
    are not in it (the key keeps its latest committed record), records after it are."""
    root, m, cut = open_txn_dir
    got = {r["key"]: r["offset"] for r in rows(root, compacted="true")}
    assert got == state_offsets_as_of(m, cut)
    assert not set(got.values()) & open_offsets(m, cut)
    assert max(got.values()) > last_stable_offset(m, cut)
    assert by_offset(rows(root, compacted="true", buckets=4)) == by_offset(rows(root, compacted="true"))


def test_starting_and_ending_timestamps_are_offsets_for_times(log_dir):
    root, manifest, _ = log_dir
    if VARIANTS[log_dir[2]].get("legacy") == "v0":
        pytest.skip("v0 records have no timestamp")
    m = manifest.partitions[("orders", 1)]
    all_rows = sorted((r["offset"], r["timestamp"]) for r in rows(root) if r["partition"] == 1)
    t0, t1 = all_rows[len(all_rows) // 4][1], all_rows[3 * len(all_rows) // 4][1]
    first = min(o for o, t in all_rows if t >= t0)
    end = min(o for o, t in all_rows if t >= t1)
    got = sorted(
        r["offset"]
        for r in rows(root, startingTimestamp=str(t0), endingTimestamp=str(t1), subscribe="orders")
        if r["partition"] == 1
    )
    assert got == [o for o, _ in all_rows if first <= o < end]
    assert m.log_end_offset > end


def test_offsets_json_and_pushed_bounds_open_only_the_segments_needed(log_dir):
    root, _, _ = log_dir
    opts = ReadOptions.parse({"path": root, "startingOffsets": '{"orders":{"0":500}}'})
    bounds = Bounds(partitions=frozenset([0]), offset_hi=700)
    splits = plan_splits(opts, bounds)
    assert {s.partition for s in splits} == {0}
    segs = [seg for s in splits for seg in s.segments]
    all_segs = sorted(n for n in os.listdir(os.path.join(root, "orders-0")) if n.endswith(".log"))
    assert len(segs) < len(all_segs)
    assert all(seg.base_offset < 700 and (seg.next_base_offset or 10**9) > 500 for seg in segs)
    got = [b for s in splits for b in read_split(s, opts)]
    offsets = pa.Table.from_batches(got).column("offset").to_pylist()
    want = [o for o in (r["offset"] for r in rows(root) if r["partition"] == 0) if 500 <= o < 700]
    assert sorted(offsets) == sorted(want) and want


def test_header_walk_matches_its_twin(log_dir):
    root, _, _ = log_dir
    for log in segment_logs(os.path.join(root, "orders-0")):
        scan = scan_segment(np.fromfile(log, dtype=np.uint8), log)
        rec = scan.records
        start = header_starts(rec.value_pos, rec.value_len)
        v2 = scan.batches.magic[rec.batch_index] == 2
        fast, slow = (
            walk_headers(scan.file, scan.side, scan.split, start, v2),
            walk_headers_py(scan.file, scan.side, scan.split, start, v2),
        )
        for a, b in zip(fast, slow):
            np.testing.assert_array_equal(a, b)


def test_a_bad_crc_fails_the_read_naming_file_byte_and_offset(tmp_path):
    root = str(tmp_path / "logs")
    generate_log_dir(root, topics=(("orders", 1),), records=300, keys=30, segment_bytes=4000, seed=3)
    log = segment_logs(os.path.join(root, "orders-0"))[1]
    data = bytearray(open(log, "rb").read())
    data[100] ^= 0xFF  # inside the first batch's records
    open(log, "wb").write(bytes(data))
    with pytest.raises(CrcMismatchError) as err:
        rows(root)
    assert log in str(err.value) and "byte 0" in str(err.value)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"endingOffsets": "{not json"}, "endingOffsets"),
        ({"subscribe": "a", "subscribePattern": "b"}, "subscribe"),
        ({"includeHeaders": "yes"}, "includeHeaders"),
        ({"asOfTime": "2026-01-01T00:00:00"}, "zone"),
        ({"asOfTime": "1000"}, "compacted=true"),
        ({"kafka.isolation.level": "serializable"}, "isolation"),
        ({"minPartitions": "0"}, "minPartitions"),
        ({"minPartitions": "two"}, "minPartitions"),
    ],
)
def test_bad_options_are_usage_errors(options, message):
    with pytest.raises(UsageError, match=message):
        ReadOptions.parse({"path": "/nowhere", **options})
