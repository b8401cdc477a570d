"""Kafka's keep/drop rules over the columns of a whole segment at once: numpy, no I/O.

The scalar rules are in `retention.py` (one batch or record at a time, as the cleaner applies
them); each function here computes the same answer for every record or batch of a segment, and
`tests/unit/test_keep_policy.py` holds each against its scalar twin:

    map_masks, aborted_batches   what goes into the offset map (Cleaner.buildOffsetMap)
    keep_records, retain_deletes record retention (retention.should_retain_record)
    may_keep                     keep_records with every delete retained (what a kept scan packs)
    last_data_batches            retention.is_last_of_producer for data batches
    decide_plain, decide_fast    checkBatchRetention + filterTo's branch for batches outside
                                 transactions; `decide_batch` maps the per-batch path's decision
    decide_erase_only            erasing without compaction (not a Kafka rule)

Columns are duck-typed (`BatchArrays`, `RecordArrays`): `batches` has the per-batch arrays of
`kernels.scan.SegmentScan.batches` (magic, attributes, base_offset, last_offset, producer_id, ...),
`records` the per-record ones (offset, key_len, value_len, batch_index). A batch's fate is a kind
(an int8 per batch), which the writer turns into bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from compaction.format import batch as fb
from compaction.format.txnindex import AbortedTxn
from compaction.policy.retention import BatchDecision, BatchOutput, filter_batch_output, needs_delete_horizon
from compaction.policy.txn_state import LastRecord

# What becomes of each batch (an int8 per batch), emitted in log order once a segment's v2
# rebuilds and legacy conversions are done.
DROP, COPY, REBUILD_V2, REBUILD_WRAPPER, EMPTY, CONVERT = range(6)
NO_NEW_HORIZON = -1  # a batch's new delete horizon when it gets none


class BatchArrays(Protocol):
    """The per-batch columns these rules read (one entry per batch of a segment)."""

    position: np.ndarray
    magic: np.ndarray
    attributes: np.ndarray
    base_offset: np.ndarray
    last_offset: np.ndarray
    base_timestamp: np.ndarray
    max_timestamp: np.ndarray
    producer_id: np.ndarray
    producer_epoch: np.ndarray


class RecordArrays(Protocol):
    """The per-record columns these rules read (-1 lengths: null key or value)."""

    offset: np.ndarray
    key_len: np.ndarray
    value_len: np.ndarray
    batch_index: np.ndarray


@dataclass
class BatchView:
    """The fields of one batch that the retention rules read (duck-typed like retention.BatchInfo)."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    is_transactional: bool
    is_control: bool
    records_count: int
    magic: int
    delete_horizon_ms: int | None
    max_timestamp: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def batch_view(b: BatchArrays, i: int, n_records: int) -> BatchView:
    """Batch `i` of the columns `b`, holding `n_records` records."""
    attrs = int(b.attributes[i])
    magic = int(b.magic[i])
    has_horizon = magic >= 2 and bool(attrs & fb.DELETE_HORIZON_MASK)
    return BatchView(
        base_offset=int(b.base_offset[i]),
        last_offset=int(b.last_offset[i]),
        producer_id=int(b.producer_id[i]),
        producer_epoch=int(b.producer_epoch[i]),
        is_transactional=magic >= 2 and bool(attrs & fb.TRANSACTIONAL_MASK),
        is_control=magic >= 2 and bool(attrs & fb.CONTROL_MASK),
        records_count=n_records,
        magic=magic,
        delete_horizon_ms=int(b.base_timestamp[i]) if has_horizon else None,
        max_timestamp=int(b.max_timestamp[i]),
    )


# --- the offset map's input ------------------------------------------------------------------


def aborted_batches(b: BatchArrays, aborted: tuple[AbortedTxn, ...]) -> np.ndarray:
    """Per batch: True for transactional data batches inside an aborted transaction's range."""
    flags = b.attributes.astype(np.int64)
    candidates = np.flatnonzero((flags & fb.TRANSACTIONAL_MASK != 0) & (flags & fb.CONTROL_MASK == 0))
    out = np.zeros(len(b.position), dtype=bool)
    if not aborted or not len(candidates):
        return out
    by_pid: dict[int, list[AbortedTxn]] = {}
    for txn in aborted:
        by_pid.setdefault(txn.producer_id, []).append(txn)
    for i in candidates:
        for txn in by_pid.get(int(b.producer_id[i]), ()):
            if txn.first_offset <= b.base_offset[i] <= txn.last_offset:
                out[i] = True
                break
    return out


def map_masks(
    b: BatchArrays,
    rec: RecordArrays,
    aborted: tuple[AbortedTxn, ...],
    first_dirty_offset: int,
    upper_bound: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(control, usable, dirty) per record: in a control batch; usable records build the offset
    map (keyed, not in a control batch, not in an aborted transaction); dirty ones are usable and
    lie in [first dirty offset, upper bound)."""
    control = (b.attributes.astype(np.int64) & fb.CONTROL_MASK) != 0
    excluded = control | aborted_batches(b, aborted)
    usable = (rec.key_len >= 0) & ~excluded[rec.batch_index]
    dirty = usable & (rec.offset >= first_dirty_offset) & (rec.offset < upper_bound)
    return control[rec.batch_index], usable, dirty


# --- records ---------------------------------------------------------------------------------


def keep_records(
    offsets: np.ndarray,
    key_len: np.ndarray,
    value_len: np.ndarray,
    found: np.ndarray,
    map_latest_offset: int,
    retain_deletes: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """`shouldRetainRecord` over the records of one data batch, vectorized.

    Returns (keep, invalid): beyond the map -> keep; no key -> drop and count invalid; else keep
    iff offset >= map[key] and (has value or deletes are still retained).
    """
    beyond = offsets > map_latest_offset
    keyed = key_len >= 0
    latest = offsets >= found
    has_value = value_len >= 0
    keep = beyond | (keyed & latest & (has_value | retain_deletes))
    invalid = ~beyond & ~keyed
    return keep, invalid


def retain_deletes(
    v2: np.ndarray, has_horizon: np.ndarray, base_timestamp: np.ndarray, now_ms: int, retain_legacy: bool
) -> np.ndarray:
    """`should_retain_deletes` per batch: a v2 batch's tombstones stay until its delete horizon
    (stored as its base timestamp), a legacy batch's while its segment is newer than the legacy
    horizon (`retain_legacy`, one answer per segment)."""
    return np.where(v2, ~has_horizon | (now_ms < base_timestamp), retain_legacy)


def may_keep(rec: RecordArrays, found: np.ndarray, upper_bound: int) -> np.ndarray:
    """Per record: False where `keep_records` drops it whatever else the rewrite decides (an older
    record of a key, or no key, below the bound): `keep_records` with every delete retained, the
    one decision a record's tombstone or horizon can only narrow. What the batch-level rules add
    (transactions, control batches) only concerns batches `sidepack` does not pack."""
    return keep_records(rec.offset, rec.key_len, rec.value_len, found, upper_bound - 1, True)[0]


# --- batches ---------------------------------------------------------------------------------


def last_data_batches(
    last_records: dict[int, LastRecord], producer_id: np.ndarray, last_offset: np.ndarray
) -> np.ndarray:
    """`is_last_of_producer` for data batches, vectorized: the batch holds its producer's last
    data offset."""
    out = np.zeros(len(producer_id), dtype=bool)
    pairs = sorted(
        (pid, r.last_data_offset) for pid, r in last_records.items() if r.last_data_offset is not None
    )
    if not pairs:
        return out
    pids = np.array([p for p, _ in pairs], dtype=np.int64)
    last = np.array([o for _, o in pairs], dtype=np.int64)
    j = np.minimum(np.searchsorted(pids, producer_id), len(pids) - 1)
    return (pids[j] == producer_id) & (last[j] == last_offset)


def decide_plain(
    b: BatchArrays,
    count: np.ndarray,
    n_keep: np.ndarray,
    n_tomb: np.ndarray,
    has_horizon: np.ndarray,
    last_records: dict[int, LastRecord],
    retain_empty_offset: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """`checkBatchRetention` + `filterTo`'s branch for every v2 data batch outside transactions
    at once: (kind, needs a new delete horizon). Such a batch is never discarded (it is not
    aborted data) and never changes the transaction state, so it need not go through the
    per-batch path (`CleanedTransactionMetadata` consumes aborted ranges lazily, by offset)."""
    retain_empty = np.zeros(len(count), dtype=bool)
    if last_records:
        retain_empty |= (b.producer_id >= 0) & last_data_batches(last_records, b.producer_id, b.last_offset)
    if retain_empty_offset is not None:
        retain_empty |= b.last_offset + 1 == retain_empty_offset
    need_horizon = (n_keep > 0) & (n_tomb > 0) & ~has_horizon
    original = (n_keep == count) & ~need_horizon
    kept_kind = np.where(original, COPY, REBUILD_V2)
    empty_kind = np.where(retain_empty, EMPTY, DROP)
    return np.where(n_keep > 0, kept_kind, empty_kind).astype(np.int8), need_horizon


def decide_fast(
    b: BatchArrays,
    count: np.ndarray,
    n_keep: np.ndarray,
    n_tomb: np.ndarray,
    has_horizon: np.ndarray,
    last_records: dict[int, LastRecord],
    retain_empty_offset: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kind, needs a new delete horizon, fast) for every batch of a segment: `fast` marks the
    batches decided here, the v2 data batches outside transactions (`decide_plain`) and the
    uncompressed v0/v1 entries, batches of one message outside transactions: the same branch,
    except that a kept one is re-encoded as v2 (KIP-724), never copied, and one to be retained
    empty is Kafka's IllegalStateException, which the per-batch path raises. The other batches
    (kind DROP here) go through the per-batch path in log order (`decide_batch`)."""
    attrs = b.attributes.astype(np.int64)
    v2 = b.magic >= 2
    plain = v2 & ((attrs & (fb.TRANSACTIONAL_MASK | fb.CONTROL_MASK)) == 0)
    kind, need_horizon = decide_plain(
        b, count, n_keep, n_tomb, has_horizon, last_records, retain_empty_offset
    )
    messages = ~v2 & ((attrs & fb.COMPRESSION_CODEC_MASK) == 0)
    kind[messages & (n_keep > 0)] = CONVERT
    fast = plain | (messages & (kind != EMPTY))
    kind[~fast] = DROP
    return kind, need_horizon, fast


def decide_batch(
    view: BatchView, decision: BatchDecision, n_keep: int, n_tomb: int, new_horizon: int
) -> tuple[int, int, int]:
    """One batch of the per-batch path (transactional, control and legacy batches) once
    `check_batch_retention` has not deleted it: (kind, records kept, new delete horizon or
    NO_NEW_HORIZON). A discarded batch keeps no record, a control batch all of them
    (`should_retain_record`); any other keeps what `keep_records` kept (`n_keep`, `n_tomb` of
    them tombstones)."""
    if decision.discard_batch_records:
        n_kept, tombstones = 0, False
    elif view.is_control:
        n_kept, tombstones = view.records_count, False
    else:
        n_kept, tombstones = n_keep, n_tomb > 0
    marker = decision.contains_marker_for_empty_txn
    need_horizon = n_kept > 0 and needs_delete_horizon(view, tombstones, marker)
    output = filter_batch_output(view, decision.retention, n_kept, need_horizon)
    if output is BatchOutput.COPY_ORIGINAL:
        kind = COPY
    elif output is BatchOutput.REBUILD:
        kind = REBUILD_V2 if view.magic >= 2 else REBUILD_WRAPPER
    elif output is BatchOutput.EMPTY_HEADER:
        kind = EMPTY
    else:
        kind = DROP
    return kind, n_kept, new_horizon if need_horizon else NO_NEW_HORIZON


def decide_erase_only(
    b: BatchArrays, count: np.ndarray, n_keep: np.ndarray, retain_empty: np.ndarray
) -> np.ndarray:
    """Erasing without compaction, for every batch of a segment: one with nothing erased is copied
    byte for byte (control batches always), one with some records erased is rebuilt with the rest
    (its delete horizon kept; a v0/v1 wrapper's rest as one v2 batch, KIP-724), one with all
    erased is dropped unless it must stay as an empty batch (`retain_empty`, v2 only)."""
    v2 = b.magic >= 2
    control = v2 & ((b.attributes.astype(np.int64) & fb.CONTROL_MASK) != 0)
    partial = np.where(v2, REBUILD_V2, REBUILD_WRAPPER)
    emptied = np.where(retain_empty & v2, EMPTY, DROP)
    kind = np.where(n_keep == count, COPY, np.where(n_keep > 0, partial, emptied)).astype(np.int8)
    kind[control] = COPY
    return kind
