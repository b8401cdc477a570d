"""Transaction and producer state the retention rules read (pure): Kafka's
``CleanedTransactionMetadata`` (which aborted transactions and markers a clean passes), the
producer view ``UnifiedLog.lastRecordsOfActiveProducers``, and the first unstable offset
(docs/kafka-rules.md#producer-state, #transactions, #last-stable-offset). Batches and aborted
transactions are duck-typed as in ``retention``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, replace

from compaction.format.batch import CONTROL_ABORT, CONTROL_COMMIT, NO_PRODUCER_EPOCH, NO_TIMESTAMP
from compaction.policy.retention import AbortedRange, Batch, HeaderFields, ProducerBatch, has_producer_id

# ----------------------------------------------------------------------------------------------
# Transaction bookkeeping (docs/kafka-rules.md#transactions)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _AbortedTxnState:
    """``AbortedTransactionMetadata``: the index entry and the last data batch seen of it."""

    aborted_txn: AbortedRange
    last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    """``CleanedTransactionMetadata``: transaction state carried across the batches of a round.

    One instance per cleaning round, traversing every group in order. ``cleaned_index`` is the
    list the retained ABORT markers' entries go to (``setCleanedIndex``; one list per output
    segment), or None while only state is tracked (as ``buildOffsetMap`` does).
    """

    def __init__(self, cleaned_index: list | None = None) -> None:
        self.ongoing_committed_txns: set[int] = set()
        self.ongoing_aborted_txns: dict[int, _AbortedTxnState] = {}
        # Min-heap by firstOffset; the counter keeps equal offsets in insertion order.
        self._aborted_heap: list[tuple[int, int, AbortedRange]] = []
        self._tiebreak = itertools.count()
        self.cleaned_index = cleaned_index

    def set_cleaned_index(self, cleaned_index: list | None) -> None:
        """``setCleanedIndex``: where the next output segment's AbortedTxn entries go."""
        self.cleaned_index = cleaned_index

    def add_aborted(self, aborted_txns: Iterable[AbortedRange]) -> None:
        """``addAbortedTransactions``: duplicates are harmless (ignored while ongoing)."""
        for txn in aborted_txns:
            heapq.heappush(self._aborted_heap, (txn.first_offset, next(self._tiebreak), txn))

    def _consume_aborted_txns_up_to(self, offset: int) -> None:
        """``consumeAbortedTxnsUpTo``: start tracking every aborted txn beginning at/before
        ``offset``; an already ongoing one for the same producer is kept."""
        while self._aborted_heap and self._aborted_heap[0][0] <= offset:
            _, _, txn = heapq.heappop(self._aborted_heap)
            self.ongoing_aborted_txns.setdefault(txn.producer_id, _AbortedTxnState(txn))

    def on_batch_read(self, batch: Batch) -> bool:
        """``onBatchRead``: True iff this data batch belongs to an aborted transaction."""
        self._consume_aborted_txns_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        state = self.ongoing_aborted_txns.get(batch.producer_id)
        if state is not None:
            self.ongoing_aborted_txns[batch.producer_id] = replace(
                state, last_observed_batch_offset=batch.last_offset
            )
            return True
        self.ongoing_committed_txns.add(batch.producer_id)
        return False

    def on_control_batch_read(self, batch: Batch, control_type: int | None) -> bool:
        """``onControlBatchRead``: True iff the marker may be discarded.

        ``control_type`` is the type of the batch's first control record, None for an empty
        (already cleaned) control batch, which is always discardable.
        """
        self._consume_aborted_txns_up_to(batch.last_offset)
        if control_type is None:
            return True
        if control_type == CONTROL_ABORT:
            state = self.ongoing_aborted_txns.pop(batch.producer_id, None)
            # Keep the marker (and its index entry) while data of the transaction remains.
            if state is not None and state.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state.aborted_txn)
                return False
            return True
        if control_type == CONTROL_COMMIT:
            # Discardable iff no data batch of this transaction was traversed in the round.
            if batch.producer_id in self.ongoing_committed_txns:
                self.ongoing_committed_txns.discard(batch.producer_id)
                return False
            return True
        return False  # other control types (LEADER_CHANGE, ...) are always kept


# ----------------------------------------------------------------------------------------------
# Producer state (docs/kafka-rules.md#producer-state)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LastRecord:
    """``LastRecord``: a producer's last data offset (None if its batch metadata is empty) and
    its current epoch."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(frozen=True)
class _ProducerEntry:
    """The part of ``ProducerStateEntry`` the cleaner observes."""

    producer_epoch: int = NO_PRODUCER_EPOCH
    last_data_offset: int | None = None
    last_timestamp: int = NO_TIMESTAMP
    in_transaction: bool = False

    def with_epoch(self, epoch: int) -> _ProducerEntry:
        """``maybeUpdateProducerEpoch``: a new epoch clears the batch metadata."""
        if epoch == self.producer_epoch:
            return self
        return replace(self, producer_epoch=epoch, last_data_offset=None)


def _apply_batch(entry: _ProducerEntry, batch: ProducerBatch) -> _ProducerEntry:
    """``ProducerAppendInfo.append`` for one batch read back from the log."""
    if batch.is_control:
        if batch.records_count == 0:
            return entry  # an empty (cleaned) control batch is not replayed
        # appendEndTxnMarker: epoch bump clears metadata; the transaction ends.
        return replace(
            entry.with_epoch(batch.producer_epoch), in_transaction=False, last_timestamp=batch.max_timestamp
        )
    # appendDataBatch: an empty retained data batch still re-creates lastDataOffset.
    return replace(
        entry.with_epoch(batch.producer_epoch),
        last_data_offset=batch.last_offset,
        last_timestamp=batch.max_timestamp,
        in_transaction=entry.in_transaction or bool(batch.is_transactional),
    )


def last_records_of_active_producers(
    batches: Iterable[ProducerBatch],
    now_ms: int | None = None,
    producer_id_expiration_ms: int | None = None,
) -> dict[int, LastRecord]:
    """``UnifiedLog.lastRecordsOfActiveProducers`` rebuilt offline by replaying batch headers in
    log order, the way ``ProducerStateManager`` would.

    Offline approximation: the broker starts from its latest ``.snapshot`` and expires producers
    with no open transaction whose last timestamp is ``producer.id.expiration.ms`` old. Here
    nothing expires unless both ``now_ms`` and ``producer_id_expiration_ms`` are given; then
    the same rule (``now - lastTimestamp >= expiration``) is applied once at the end. Batches
    without a producer id are skipped; sequence validation is not modelled (a valid log is
    assumed), nor the 5-entry batch metadata cap (only the last entry is ever read).
    """
    entries: dict[int, _ProducerEntry] = {}
    for batch in batches:
        if not has_producer_id(batch):
            continue
        entries[batch.producer_id] = _apply_batch(entries.get(batch.producer_id, _ProducerEntry()), batch)
    if now_ms is not None and producer_id_expiration_ms is not None:
        entries = {
            pid: e
            for pid, e in entries.items()
            if e.in_transaction or now_ms - e.last_timestamp < producer_id_expiration_ms
        }
    return {pid: LastRecord(e.last_data_offset, e.producer_epoch) for pid, e in entries.items()}


def first_unstable_offset(batches: Iterable[HeaderFields]) -> int | None:
    """First offset of the earliest transaction with data but no marker by the end of the log
    (docs/kafka-rules.md#last-stable-offset): the broker's LSO, which the planner could not know before the
    scan."""
    open_txns: dict[int, int] = {}
    for b in batches:
        if b.is_control:
            if b.records_count:
                open_txns.pop(b.producer_id, None)
        elif b.is_transactional:
            open_txns.setdefault(b.producer_id, b.base_offset)
    return min(open_txns.values(), default=None)
