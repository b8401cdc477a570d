"""Compare two cleaned copies of a partition dir batch for batch: one cleaned by Kafka's own
LogCleaner, one by the job. Independent of the job's code: batch headers with `struct`, records
with kafka-python, varints and CRC-32C with kafka-python's utilities.

The only input the two cleaners do not share is the clock: a batch given a delete horizon holds
`now + delete.retention.ms` in its base timestamp, and each record's timestamp delta from it.
`rebase` rewrites an uncompressed batch to another horizon (deltas re-encoded, CRC recomputed) so
that such batches are still compared byte for byte.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import index_oracle
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.util import calc_crc32c, decode_varint, encode_varint

# base offset, length, leader epoch, magic, crc, attributes, last offset delta, base timestamp,
# max timestamp, producer id, producer epoch, base sequence, record count: 61 bytes
HEADER = struct.Struct(">qiibIhiqqqhii")
FIELDS = (
    "base_offset",
    "length",
    "leader_epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "count",
)
CODEC_MASK, CONTROL, HORIZON = 0x07, 0x20, 0x40
OFFSET_ENTRY, TIME_ENTRY = struct.Struct(">ii"), struct.Struct(">qi")


@dataclass(frozen=True)
class Batch:
    position: int
    raw: bytes

    def header(self) -> dict:
        return dict(zip(FIELDS, HEADER.unpack_from(self.raw)))

    @property
    def attributes(self) -> int:
        return self.header()["attributes"]

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def horizon(self) -> int | None:
        h = self.header()
        return h["base_timestamp"] if h["attributes"] & HORIZON else None

    @property
    def last_offset(self) -> int:
        h = self.header()
        return h["base_offset"] + h["last_offset_delta"]

    def records(self) -> list[tuple]:
        """(offset, timestamp, key, value, headers) as kafka-python decodes them."""
        if self.attributes & CONTROL:
            return [("control", self.raw[61:])]
        return [
            (r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in DefaultRecordBatch(self.raw)
        ]


def read_batches(path: Path) -> list[Batch]:
    data = Path(path).read_bytes()
    out, pos = [], 0
    while pos < len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0]
        out.append(Batch(pos, data[pos : pos + 12 + length]))
        pos += 12 + length
    return out


def _varint(value: int) -> bytes:
    out = bytearray()
    encode_varint(value, out.append)
    return bytes(out)


def rebase(batch: Batch, horizon: int) -> bytes:
    """An uncompressed batch with a delete horizon, as if stamped with `horizon` instead."""
    h = batch.header()
    assert h["attributes"] & HORIZON and batch.codec == 0
    pos, records = 61, []
    for _ in range(h["count"]):
        length, pos = decode_varint(batch.raw, pos)
        body = batch.raw[pos : pos + length]
        pos += length
        delta, rest = decode_varint(body, 1)
        new = body[:1] + _varint(delta + h["base_timestamp"] - horizon) + body[rest:]
        records.append(_varint(len(new)) + new)
    recs = b"".join(records)
    fields = {**h, "length": 49 + len(recs), "base_timestamp": horizon, "crc": 0}
    head = bytearray(HEADER.pack(*(fields[f] for f in FIELDS)))
    struct.pack_into(">I", head, 17, calc_crc32c(bytes(head[21:]) + recs))
    return bytes(head) + recs


def read_offset_index(path: Path) -> list:
    data = Path(path).read_bytes()
    return [OFFSET_ENTRY.unpack_from(data, i) for i in range(0, len(data), 8)]


def read_time_index(path: Path) -> list:
    data = Path(path).read_bytes()
    return [TIME_ENTRY.unpack_from(data, i) for i in range(0, len(data), 12)]


def segment_files(part_dir: Path) -> list[str]:
    """The names a broker would keep: no `.deleted` leftovers awaiting `file.delete.delay.ms`."""
    return sorted(n for n in os.listdir(part_dir) if not n.endswith(".deleted"))


def mtime_ms(path: Path) -> int:
    return os.stat(path).st_mtime_ns // 1_000_000


def compare_partition(
    kafka_dir: Path,
    ours_dir: Path,
    stamped: dict[int, tuple[int, int]],
    delete_retention_ms: int,
    interval: int = 4096,
) -> list[str]:
    """Every difference between Kafka's cleaned partition and ours, as readable lines.

    `stamped` maps each of our rounds' `now` to the window (first, last ms) in which Kafka's cleaner
    ran the same round: a horizon of ours `now + D` must face one of Kafka's within that window + D.
    """
    diffs: list[str] = []
    kn, on = segment_files(kafka_dir), segment_files(ours_dir)
    if kn != on:
        return [f"files: Kafka {kn} vs ours {on}"]
    for name in kn:
        if not name.endswith(".log"):
            continue
        kpath, opath = kafka_dir / name, ours_dir / name
        if mtime_ms(kpath) != mtime_ms(opath):
            diffs.append(f"{name}: mtime Kafka {mtime_ms(kpath)} vs ours {mtime_ms(opath)}")
        kb, ob = read_batches(kpath), read_batches(opath)
        if len(kb) != len(ob):
            kbases, obases = ([b.header()["base_offset"] for b in bs][:40] for bs in (kb, ob))
            diffs.append(
                f"{name}: {len(kb)} batches (Kafka) vs {len(ob)} (ours); base offsets: Kafka {kbases}, "
                f"ours {obases}"
            )
            continue
        for k, o in zip(kb, ob):
            at = k.header()["base_offset"]
            diffs += [f"{name} @{at}: {d}" for d in compare_batch(k, o, stamped, delete_retention_ms)]
        base = int(name.split(".")[0])
        stem = name[: -len(".log")]
        for which, kind_rule in (("index", 0), ("timeindex", 1)):
            kidx, oidx = kafka_dir / f"{stem}.{which}", ours_dir / f"{stem}.{which}"
            reader = read_offset_index if which == "index" else read_time_index
            kentries, oentries = reader(kidx), reader(oidx)
            kafka_rule, ours_rule = (
                index_oracle.entries(p.read_bytes(), base, interval)[kind_rule] for p in (kpath, opath)
            )
            if kentries != kafka_rule:
                diffs.append(
                    f"{stem}.{which}: Kafka's entries {kentries} do not follow the rule here: {kafka_rule}"
                )
            if oentries != ours_rule:
                diffs.append(f"{stem}.{which}: ours {oentries} vs the rule {ours_rule}")
            if all(b.codec == 0 for b in kb):
                # A stamped horizon sizes the records' timestamp deltas, so positions follow the clock:
                # Kafka's entries are compared as if its batches were stamped with our horizons.
                on_our_clock = index_oracle.entries(_on_our_clock(kb, ob), base, interval)[kind_rule]
                expect = kentries if on_our_clock == kafka_rule else on_our_clock
                if expect != oentries:
                    diffs.append(
                        f"{stem}.{which}: Kafka {kentries} (on our clock {expect}) vs ours {oentries}"
                    )
        ktxn, otxn = kafka_dir / f"{stem}.txnindex", ours_dir / f"{stem}.txnindex"
        if ktxn.exists() and ktxn.read_bytes() != otxn.read_bytes():
            diffs.append(
                f"{stem}.txnindex: Kafka {ktxn.read_bytes().hex()} vs ours {otxn.read_bytes().hex()}"
            )
    return diffs


def _on_our_clock(kafka: list[Batch], ours: list[Batch]) -> bytes:
    """Kafka's segment with each horizon batch stamped with our horizon instead (sizes follow)."""
    return b"".join(
        rebase(k, o.horizon) if o.horizon is not None and k.horizon is not None else k.raw
        for k, o in zip(kafka, ours)
    )


def compare_batch(k: Batch, o: Batch, stamped: dict[int, tuple[int, int]], retention: int) -> list[str]:
    kh, oh = k.header(), o.header()
    if (kh["attributes"] & HORIZON) != (oh["attributes"] & HORIZON):
        return [f"horizon Kafka {k.horizon} vs ours {o.horizon}"]
    same_clock = True
    # An equal horizon is one both copies inherited (a second round on the other cleaner's output).
    if o.horizon is not None and o.horizon != k.horizon:
        window = stamped.get(o.horizon - retention)
        same_clock = window is not None and window[0] <= k.horizon - retention <= window[1]
        if not same_clock:
            return [
                f"horizon Kafka {k.horizon} vs ours {o.horizon}: not stamped in the same round ({stamped})"
            ]
    if k.codec == 0 and o.codec == 0:
        expect = rebase(k, o.horizon) if o.horizon is not None else k.raw
        if expect != o.raw:
            same = k.records() == o.records()
            return [f"bytes differ: Kafka {_fields(kh)} vs ours {_fields(oh)}; records equal: {same}"]
        return []
    out = []
    ignore = {"length", "crc", "base_timestamp"}
    for f in FIELDS:
        if f not in ignore and kh[f] != oh[f]:
            out.append(f"{f}: Kafka {kh[f]} vs ours {oh[f]}")
    if o.horizon is None and kh["base_timestamp"] != oh["base_timestamp"]:
        out.append(f"base_timestamp: Kafka {kh['base_timestamp']} vs ours {oh['base_timestamp']}")
    if k.records() != o.records():
        out.append(f"records: Kafka {k.records()[:3]}... vs ours {o.records()[:3]}...")
    return out


def _fields(h: dict) -> dict:
    return {f: v for f, v in h.items() if f != "crc"}
