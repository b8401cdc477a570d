"""An independent model of one cleaning round over kafka-python's decoding of a partition
(docs/kafka-rules.md#producer-state to #writing-retained-batches): what a round keeps, batch by
batch, and which `.txnindex` entries its cleaned segments hold. No code of the job decides
anything here; e2e tests hold the job's output to it."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field, replace

from e2ekit import segment_logs
from kafka.record.memory_records import MemoryRecords

R = 86_400_000  # delete.retention.ms default
EXPIRATION = 86_400_000  # producer.id.expiration.ms default
ABORT, COMMIT = 0, 1
TXN_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True)
class KBatch:
    """A batch as kafka-python decodes it. Data records: (offset, timestamp, key, value, headers);
    control records: (offset, type)."""

    base: int
    last: int
    pid: int
    epoch: int
    txn: bool
    control: bool
    horizon: int | None
    records: tuple
    max_ts: int = field(default=-1, compare=False)  # the batch's max timestamp (a cut by time reads it)

    @property
    def control_type(self) -> int | None:
        return self.records[0][1] if self.control and self.records else None


def decode_batches(path: str) -> list[KBatch]:
    with open(path, "rb") as fh:
        records = MemoryRecords(fh.read())
    out = []
    while records.has_next():
        b = records.next_batch()
        if b is None:
            break
        assert b.magic == 2 and b.validate_crc(), path
        if b.is_control_batch:
            recs = tuple((r.offset, r.type) for r in b)
        else:
            recs = tuple(
                (r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)) for r in b
            )
        horizon = b.first_timestamp if b.attributes & 0x40 else None
        out.append(
            KBatch(
                b.base_offset,
                b.last_offset,
                b.producer_id,
                b.producer_epoch,
                bool(b.is_transactional),
                bool(b.is_control_batch),
                horizon,
                recs,
                b.max_timestamp,
            )
        )
    return out


def read_txn_entries(path: str) -> list[tuple[int, int, int, int]]:
    """(producer id, first offset, last offset, LSO) of each 34-byte entry (docs/kafka-rules.md#txnindex)."""
    if not os.path.exists(path):
        return []
    data = open(path, "rb").read()
    assert len(data) % TXN_ENTRY.size == 0
    return [TXN_ENTRY.unpack_from(data, i)[1:] for i in range(0, len(data), TXN_ENTRY.size)]


@dataclass
class PartitionSnapshot:
    batches: list[KBatch]
    segments: list[tuple[int, list[KBatch], list[tuple]]]  # (base, batches, txnindex entries)
    active_base: int


def snapshot(part_dir: str) -> PartitionSnapshot:
    segs = []
    for log in segment_logs(part_dir):
        base = int(os.path.basename(log)[:20])
        segs.append((base, decode_batches(log), read_txn_entries(log[: -len(".log")] + ".txnindex")))
    return PartitionSnapshot([b for _, bs, _ in segs for b in bs], segs, segs[-1][0])


# --- the independent model of one round (docs/kafka-rules.md#producer-state to #writing-retained-batches) ---


def producer_last(
    batches: list[KBatch], now: int, expiration: int = EXPIRATION
) -> dict[int, tuple[int, int | None]]:
    """pid -> (epoch, last data offset or None) of the producers still active at `now`: a replay of
    batch headers in log order, then producer.id.expiration.ms applied once (a producer with no open
    transaction whose last batch's max timestamp is `expiration` old at `now` is gone)."""
    state: dict[int, tuple[int, int | None, int, bool]] = {}  # pid -> (epoch, last, last ts, open txn)
    for b in batches:
        if b.pid < 0 or (b.control and not b.records):
            continue
        epoch, last, _, open_txn = state.get(b.pid, (b.epoch, None, -1, False))
        if epoch != b.epoch:
            last, open_txn = None, False
        if b.control:
            state[b.pid] = (b.epoch, last, b.max_ts, False)
        else:
            state[b.pid] = (b.epoch, b.last, b.max_ts, open_txn or b.txn)
    return {
        pid: (epoch, last)
        for pid, (epoch, last, ts, open_txn) in state.items()
        if open_txn or now - ts < expiration
    }


def expected_round(
    snap: PartitionSnapshot, now: int, upper: int | None = None, expiration: int = EXPIRATION
) -> tuple[list[KBatch], set[tuple]]:
    """The partition after one round over [0, `upper`) (default: the active base) at `now`, and
    the `.txnindex` entries the cleaned segments must hold; producers idle `expiration` ms at `now`
    (producer.id.expiration.ms) are not active."""
    upper = snap.active_base if upper is None else upper
    # The generator's replication-offset-checkpoint: the high watermark is the log end offset.
    high_watermark = max((b.last + 1 for b in snap.batches), default=0)
    last = producer_last(snap.batches, now, expiration)
    entries = sorted((e for _, _, es in snap.segments for e in es), key=lambda e: e[1])
    # Pass 1 (buildOffsetMap): which data batches are aborted, and the key -> latest offset map.
    aborted = _aborted_flags(snap.batches, entries, upper)
    latest: dict[bytes, int] = {}
    for b, ab in zip(snap.batches, aborted):
        if b.last < upper and not b.control and not ab:
            for r in b.records:
                if r[2] is not None:
                    latest[r[2]] = r[0]
    # Pass 2 (cleanSegments): batch and record retention.
    out, kept_entries = [], set()
    pending = list(entries)
    ongoing_aborted: dict[int, list] = {}  # pid -> [entry, observed]
    ongoing_committed: set[int] = set()
    for b, ab in zip(snap.batches, aborted):
        if b.base >= upper:
            out.append(b)
            continue
        while pending and pending[0][1] <= b.last:
            e = pending.pop(0)
            ongoing_aborted.setdefault(e[0], [e, False])
        if b.control:
            if not b.records:
                can_discard = True
            elif b.control_type == ABORT:
                st = ongoing_aborted.pop(b.pid, None)
                can_discard = not (st and st[1])
                if not can_discard:
                    kept_entries.add(st[0])
            else:
                can_discard = b.pid not in ongoing_committed
                ongoing_committed.discard(b.pid)
            discard = can_discard and b.horizon is not None and b.horizon <= now
        else:
            can_discard = False
            if b.txn and b.pid in ongoing_aborted:
                ongoing_aborted[b.pid][1] = True
                can_discard = True
            elif b.txn:
                ongoing_committed.add(b.pid)
            assert can_discard == ab
            discard = can_discard
        epoch, last_data = last.get(b.pid, (None, None))
        is_last = (
            b.pid >= 0
            and b.pid in last
            and (b.last == last_data if last_data is not None else (b.control and b.epoch == epoch))
        )
        retain_empty = is_last or b.last + 1 == high_watermark  # Kafka 4.4+ (KAFKA-20452)
        if discard and not retain_empty:
            continue  # DELETE
        if discard:
            kept = ()
        elif b.control:
            kept = b.records
        else:
            retain_deletes = b.horizon is None or now < b.horizon
            kept = tuple(
                r
                for r in b.records
                if r[2] is not None and r[0] >= latest.get(r[2], -1) and (r[3] is not None or retain_deletes)
            )
        if kept:
            tombstones = not b.control and any(r[3] is None for r in kept)
            need = (tombstones or (b.control and can_discard)) and b.horizon is None
            out.append(replace(b, records=kept, horizon=now + R if need else b.horizon))
        elif retain_empty:
            out.append(replace(b, records=(), horizon=None))  # 61-byte empty header
    return out, kept_entries


def _aborted_flags(batches: list[KBatch], entries: list[tuple], upper: int) -> list[bool]:
    pending = list(entries)
    ongoing: set[int] = set()
    flags = []
    for b in batches:
        while pending and pending[0][1] <= b.last:
            e = pending.pop(0)
            ongoing.add(e[0])
        flags.append(bool(b.txn and not b.control and b.pid in ongoing))
        if b.control and b.control_type == ABORT:
            ongoing.discard(b.pid)
    return flags


# --- a copy cut as of a time or an offset (compaction/policy/cut.py's rules, restated) ---


def held_count(batches, time_ms, offset):
    """How many leading batches a cut holds: up to the first stamped after `time_ms` or whose last
    offset reaches `offset`."""
    for i, b in enumerate(batches):
        if (offset is not None and b.last >= offset) or (time_ms is not None and b.max_ts > time_ms):
            return i
    return len(batches)


def cut_snapshot(snap: PartitionSnapshot, time_ms, offset) -> tuple[PartitionSnapshot, int, int | None]:
    """(the snapshot of the copy, its end offset, the first offset of a transaction open at the cut)."""
    held = snap.batches[: held_count(snap.batches, time_ms, offset)]
    end = held[-1].last + 1 if held else 0
    segments = []
    for base, batches, entries in snap.segments:
        kept = [b for b in batches if b.last < end]
        if kept:
            segments.append((base, kept, [e for e in entries if e[2] < end]))
    open_txns: dict[int, int] = {}
    for b in held:
        if b.control and b.records:
            open_txns.pop(b.pid, None)
        elif b.txn and not b.control:
            open_txns.setdefault(b.pid, b.base)
    return PartitionSnapshot(held, segments, end), end, min(open_txns.values(), default=None)


def expected_archive(snap: PartitionSnapshot, time_ms, offset, now):
    """A copy cut as of `time_ms` / `offset` after one round at `now` over every segment, bounded
    by a transaction open at the cut: (its batches, its `.txnindex` entries, its end offset, the
    open transaction's first offset)."""
    cut, end, unstable = cut_snapshot(snap, time_ms, offset)
    upper = end if unstable is None else max(base for base, _, _ in cut.segments if base <= unstable)
    expected, kept_entries = expected_round(cut, now, upper)
    # .txnindex: the kept abort markers' entries below the bound, the copied ones above it (none of
    # a marker past the cut)
    entries = kept_entries | {e for base, _, es in cut.segments if base >= upper for e in es}
    return expected, entries, end, unstable
