"""Pure retention rules: what the cleaner keeps of each batch and record.

Mirrors Kafka's ``Cleaner.cleanInto`` record filter (``checkBatchRetention``,
``shouldRetainRecord``) and the retention-relevant part of ``MemoryRecords.filterTo``
(docs/kafka-rules.md#batch-retention to #writing-retained-batches). The transaction and producer
state the rules read (``CleanedTransactionMetadata``, ``lastRecordsOfActiveProducers``) is in
``txn_state``. No bytes are parsed here.

Batches are duck-typed (:class:`Batch`): anything with ``base_offset, last_offset, next_offset,
producer_id, producer_epoch, is_transactional, is_control, records_count, magic,
delete_horizon_ms (None when unset), max_timestamp`` works - ``format.batch.BatchHeader`` or
:class:`BatchInfo`. Aborted transactions are duck-typed too (:class:`AbortedRange`: ``producer_id,
first_offset, last_offset, last_stable_offset``, e.g. ``format.txnindex.AbortedTxn``) and are
passed through unchanged to the cleaned transaction index.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from compaction.format.batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_TIMESTAMP
from compaction.format.layout import MAGIC_V2

if TYPE_CHECKING:
    from compaction.policy.txn_state import CleanedTransactionMetadata, LastRecord

ABSENT_OFFSET = -1  # OffsetMap.get for an absent key


class HeaderFields(Protocol):
    """What the snapshot cut and the last stable offset read of a batch header."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def records_count(self) -> int: ...


class ProducerBatch(HeaderFields, Protocol):
    """What the producer state replays of a batch header (``ProducerAppendInfo``)."""

    @property
    def producer_epoch(self) -> int: ...


class Batch(ProducerBatch, Protocol):
    """A batch header as the retention rules read it (``RecordBatch``)."""

    @property
    def next_offset(self) -> int: ...
    @property
    def magic(self) -> int: ...
    @property
    def delete_horizon_ms(self) -> int | None: ...


class AbortedRange(Protocol):
    """An aborted transaction's entry of a `.txnindex` (``AbortedTxn``)."""

    @property
    def producer_id(self) -> int: ...
    @property
    def first_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def last_stable_offset(self) -> int: ...


@dataclass(frozen=True)
class BatchInfo:
    """A batch header as the retention rules see it (tests, generators, plain callers)."""

    base_offset: int
    last_offset: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    is_transactional: bool = False
    is_control: bool = False
    records_count: int = 1
    magic: int = MAGIC_V2
    delete_horizon_ms: int | None = None
    max_timestamp: int = NO_TIMESTAMP

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def has_producer_id(batch: HeaderFields) -> bool:
    """``RecordBatch.hasProducerId``: producerId > NO_PRODUCER_ID."""
    return batch.producer_id > NO_PRODUCER_ID


# ----------------------------------------------------------------------------------------------
# Batch-level retention (docs/kafka-rules.md#batch-retention)
# ----------------------------------------------------------------------------------------------


class BatchRetention(enum.Enum):
    """``MemoryRecords.RecordFilter.BatchRetention``."""

    RETAIN_EMPTY = "retain_empty"  # keep the batch, as an empty header if no record survives
    DELETE = "delete"  # drop the batch without looking at its records
    DELETE_EMPTY = "delete_empty"  # drop the batch only if no record survives


def discard_batch_records(batch: Batch, can_discard: bool, current_time_ms: int) -> bool:
    """``discardBatchRecords`` of ``checkBatchRetention``: a discardable marker goes only once
    its delete horizon has passed; aborted data goes at once."""
    if batch.is_control:
        horizon = batch.delete_horizon_ms
        return can_discard and horizon is not None and horizon <= current_time_ms
    return can_discard


def is_last_of_producer(batch: Batch, last_records: Mapping[int, LastRecord]) -> bool:
    """``isBatchLastRecordOfProducer``: the batch holding the producer's last data offset, or,
    when the producer has no data metadata, its marker of the current epoch."""
    last = last_records.get(batch.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return batch.last_offset == last.last_data_offset
    return bool(batch.is_control) and batch.producer_epoch == last.producer_epoch


def batch_retention(
    batch: Batch,
    *,
    discard_batch_records: bool,
    last_records_of_active_producers: Mapping[int, LastRecord],
    retain_empty_offset: int | None,
) -> BatchRetention:
    """The retention verdict of ``checkBatchRetention``.

    A batch whose next offset is ``retain_empty_offset`` is kept, empty if need be, so that the
    cleaned log keeps that offset: Kafka 4.4+ passes the log's high watermark (KAFKA-20452),
    4.0-4.3 the round's upper bound (KAFKA-17076), 3.9 nothing (None)."""
    if has_producer_id(batch) and is_last_of_producer(batch, last_records_of_active_producers):
        return BatchRetention.RETAIN_EMPTY
    if retain_empty_offset is not None and batch.next_offset == retain_empty_offset:
        return BatchRetention.RETAIN_EMPTY
    if discard_batch_records:
        return BatchRetention.DELETE
    return BatchRetention.DELETE_EMPTY


def contains_marker_for_empty_txn(batch: Batch, can_discard: bool) -> bool:
    """``BatchRetentionResult.containsMarkerForEmptyTxn``: a discardable marker (it needs a
    delete horizon before it can go)."""
    return can_discard and bool(batch.is_control)


@dataclass(frozen=True)
class BatchDecision:
    """Everything ``checkBatchRetention`` decides about one batch."""

    retention: BatchRetention
    can_discard: bool
    discard_batch_records: bool
    contains_marker_for_empty_txn: bool


def check_batch_retention(
    batch: Batch,
    txn_metadata: CleanedTransactionMetadata,
    *,
    control_type: int | None,
    last_records_of_active_producers: Mapping[int, LastRecord],
    retain_empty_offset: int | None,
    current_time_ms: int,
) -> BatchDecision:
    """``checkBatchRetention`` end to end: updates ``txn_metadata`` (every batch must pass
    through here in log order, deleted ones included) and returns the decision.
    ``control_type`` is only read for control batches (None = empty control batch)."""
    if batch.is_control:
        can_discard = txn_metadata.on_control_batch_read(batch, control_type)
    else:
        can_discard = txn_metadata.on_batch_read(batch)
    discard = discard_batch_records(batch, can_discard, current_time_ms)
    retention = batch_retention(
        batch,
        discard_batch_records=discard,
        last_records_of_active_producers=last_records_of_active_producers,
        retain_empty_offset=retain_empty_offset,
    )
    return BatchDecision(retention, can_discard, discard, contains_marker_for_empty_txn(batch, can_discard))


# ----------------------------------------------------------------------------------------------
# Record-level retention (docs/kafka-rules.md#record-retention)
# ----------------------------------------------------------------------------------------------


class RecordDecision(NamedTuple):
    """Whether a record is kept, and whether it counts as invalid (``stats.invalidMessage``)."""

    retain: bool
    invalid: bool = False


KEEP = RecordDecision(True)
DROP = RecordDecision(False)
DROP_INVALID = RecordDecision(False, True)


def retain_legacy_deletes(segment_mtime_ms: int, legacy_delete_horizon_ms: int) -> bool:
    """``retainLegacyDeletesAndTxnMarkers`` of ``cleanSegments``: per source segment."""
    return segment_mtime_ms > legacy_delete_horizon_ms


def should_retain_deletes(batch: Batch, current_time_ms: int, retain_legacy: bool) -> bool:
    """May a tombstone of this batch still be kept? v2: until its batch's delete horizon (no
    horizon yet = keep, the rewrite will set one); v0/v1: the segment's legacy horizon."""
    if batch.magic >= MAGIC_V2:
        horizon = batch.delete_horizon_ms
        return horizon is None or current_time_ms < horizon
    return retain_legacy


def should_retain_record(
    batch: Batch,
    record_offset: int,
    key: bytes | None,
    has_value: bool,
    *,
    discard_batch_records: bool,
    offset_map: Mapping[bytes, int],
    map_latest_offset: int,
    current_time_ms: int,
    retain_legacy_deletes: bool,
) -> RecordDecision:
    """The record filter's ``shouldRetainRecord`` plus ``Cleaner.shouldRetainRecord``."""
    if discard_batch_records:
        return DROP  # batch kept only for producer state; its records go
    if batch.is_control:
        return KEEP
    if record_offset > map_latest_offset:
        return KEEP  # beyond this round's map: untouched (tombstones and unkeyed too)
    if key is None:
        return DROP_INVALID
    latest_for_key = record_offset >= offset_map.get(key, ABSENT_OFFSET)
    keep_value = has_value or should_retain_deletes(batch, current_time_ms, retain_legacy_deletes)
    return KEEP if latest_for_key and keep_value else DROP


def should_map_record(
    batch: Batch, record_offset: int, key: bytes | None, aborted: bool, start_offset: int, end_offset: int
) -> bool:
    """``Cleaner.buildOffsetMap``'s record filter: a keyed record of a data batch that is not
    aborted data (``aborted``: ``on_batch_read``), within [start_offset, end_offset)."""
    return (
        key is not None
        and not batch.is_control
        and not aborted
        and start_offset <= record_offset < end_offset
    )


# ----------------------------------------------------------------------------------------------
# What filterTo writes for a batch (docs/kafka-rules.md#writing-retained-batches)
# ----------------------------------------------------------------------------------------------


def needs_delete_horizon(
    batch: Batch, contains_tombstones: bool, contains_marker_for_empty_txn: bool
) -> bool:
    """``needToSetDeleteHorizon`` with 4.0+ semantics (no magic condition: converted legacy
    tombstones get a horizon too): a retained tombstone or a discardable marker, and no horizon
    set yet."""
    return (contains_tombstones or contains_marker_for_empty_txn) and batch.delete_horizon_ms is None


def delete_horizon_ms(current_time_ms: int, delete_retention_ms: int) -> int:
    """The horizon a rebuilt batch gets: ``currentTime + delete.retention.ms``."""
    return current_time_ms + delete_retention_ms


class BatchOutput(enum.Enum):
    """What ``filterTo`` emits for one batch."""

    DROP = "drop"
    COPY_ORIGINAL = "copy_original"  # verbatim bytes, CRC and leader epoch included
    REBUILD = "rebuild"  # MemoryRecordsBuilder with the retained records
    EMPTY_HEADER = "empty_header"  # 61-byte writeEmptyHeader


def filter_batch_output(
    batch: Batch,
    retention: BatchRetention,
    records_retained: int,
    need_to_set_delete_horizon: bool,
    convert_legacy_to_v2: bool = True,
) -> BatchOutput:
    """``MemoryRecords.filterTo``'s per-batch branch. ``records_retained`` is compared with
    ``batch.records_count`` to know whether every record survived (``writeOriginalBatch``).
    ``convert_legacy_to_v2`` is KIP-724 (4.0+): v0/v1 batches are never copied verbatim.
    Raises ValueError where Kafka throws IllegalStateException (empty legacy batch)."""
    if retention is BatchRetention.DELETE:
        return BatchOutput.DROP
    if records_retained > 0:
        write_original = records_retained == batch.records_count and (
            batch.magic >= MAGIC_V2 or not convert_legacy_to_v2
        )
        if write_original and not need_to_set_delete_horizon:
            return BatchOutput.COPY_ORIGINAL
        return BatchOutput.REBUILD
    if retention is BatchRetention.RETAIN_EMPTY:
        if batch.magic < MAGIC_V2:
            raise ValueError(f"cannot keep an empty batch of magic {batch.magic}: needs magic >= 2")
        return BatchOutput.EMPTY_HEADER
    return BatchOutput.DROP
