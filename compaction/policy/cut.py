"""Where a partition's log ends as of a point in time or an offset (pure): the cut of a snapshot.

A snapshot "as of T" (or "as of offset O") is the log a broker held then: a prefix of whole
batches, since a broker appends a batch at once and never part of one. The rules, per partition:

- **As of a time T** (epoch ms): the log ends before the first batch whose max timestamp is later
  than T. Kafka's time index keeps the largest timestamp seen so far, and `ListOffsets` by time
  finds the first batch whose max timestamp reaches the target, so "after T" starts there. A
  batch without a timestamp (magic 0, or -1) never ends the log: its place is decided by the
  batches around it.
- **As of an offset O**: O is a log end offset (exclusive, as Kafka's LEO and high watermark
  are): the log holds the batches whose last offset is below O. A batch that holds O and offsets
  below it is not held: a broker's log never ended inside a batch, and its log end offset was
  last at or below O just before that batch.
- **Both**: the earlier of the two ends the log.
- **The log end offset** of the snapshot is the last held batch's last offset + 1 (the next
  offset a broker would have assigned), or `log_start_offset` when no batch is held.
- **A transaction open at the cut** (a producer's transactional data held, its marker not) is
  what Kafka has at a log end: an open transaction. Its first offset bounds the last stable
  offset, so a cleaner leaves everything from it on as it is, and a `read_committed` reader of
  the snapshot sees none of its records (nor anything after it).
  `Cut.first_unstable_offset` is the earliest such offset, `Cut.open_transactions` each
  producer's.
- **The round's clock** (the `now` of Kafka's retention rules: tombstone and marker horizons,
  compaction lags) is T for a time cut; for an offset cut, the largest timestamp held (the
  latest moment the snapshot is known to include); None when nothing held has a timestamp (the
  caller's wall clock then). An explicit `--now-ms` overrides it.

Batches are duck-typed as in `retention`: `base_offset`, `last_offset`, `max_timestamp`,
`producer_id`, `is_transactional`, `is_control`, `records_count` (a `format.batch.BatchHeader`
has them all). A v0/v1 wrapper's `base_offset` is read only for transactional batches, which
are v2.

Use: `cut_log(headers, as_of_time_ms=T)` over a partition's batches in log order (segment after
segment); it stops reading at the first batch past the cut. `past_cut(batch, T, O)` is the test
alone, for a reader that streams. `parse_as_of_time` / `parse_as_of_offsets` read the command
line's values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compaction.policy.retention import HeaderFields

NO_TIMESTAMP = -1

# By what the log ended (`Cut.ended_by`).
BY_TIME, BY_OFFSET = "time", "offset"


@dataclass(frozen=True)
class Cut:
    """One partition's cut.

    `held`: how many leading batches the snapshot holds; `end_offset`: its log end offset;
    `ended_by`: BY_TIME / BY_OFFSET, or None when every batch is held (the cut is past the log
    end); `first_unstable_offset`: first offset of the earliest transaction open at the cut
    (None: none open); `open_transactions`: producer id -> first offset of its open
    transaction; `clock_ms`: the round's clock (None: unknown, use the wall clock).
    """

    held: int
    end_offset: int
    ended_by: str | None
    first_unstable_offset: int | None
    open_transactions: dict[int, int] = field(default_factory=dict)
    clock_ms: int | None = None


def past_cut(
    batch: HeaderFields, as_of_time_ms: int | None = None, as_of_offset: int | None = None
) -> str | None:
    """BY_TIME or BY_OFFSET if this batch is not held by the snapshot, else None (BY_OFFSET
    first when both hold)."""
    if as_of_offset is not None and batch.last_offset >= as_of_offset:
        return BY_OFFSET
    if as_of_time_ms is not None and batch.max_timestamp > as_of_time_ms:
        return BY_TIME
    return None


def cut_log(
    batches: Iterable[HeaderFields],
    as_of_time_ms: int | None = None,
    as_of_offset: int | None = None,
    log_start_offset: int = 0,
) -> Cut:
    """The cut of one partition's batches (in log order); see the module's rules. With neither
    bound every batch is held and the cut is the log end."""
    held = 0
    end = log_start_offset
    newest = NO_TIMESTAMP
    open_txns: dict[int, int] = {}
    ended_by = None
    for batch in batches:
        ended_by = past_cut(batch, as_of_time_ms, as_of_offset)
        if ended_by is not None:
            break
        held += 1
        end = max(end, batch.last_offset + 1)
        newest = max(newest, batch.max_timestamp)
        if batch.is_control:
            if batch.records_count:  # an empty (cleaned) control batch ends nothing
                open_txns.pop(batch.producer_id, None)
        elif batch.is_transactional:
            open_txns.setdefault(batch.producer_id, batch.base_offset)
    clock: int | None
    if as_of_time_ms is not None:
        clock = as_of_time_ms
    else:
        clock = newest if newest > NO_TIMESTAMP else None
    return Cut(held, end, ended_by, min(open_txns.values(), default=None), open_txns, clock)


# --- the command line's values ------------------------------------------------------------------

_EPOCH_MS = re.compile(r"^\d+$")
# Kafka topic names are [a-zA-Z0-9._-]: neither ':' nor '=' can be part of one.
_OFFSET_ENTRY = re.compile(r"^([A-Za-z0-9._-]+):(\d+)=(\d+)$")


def parse_as_of_time(text: str) -> int:
    """`--as-of-time`: epoch milliseconds, or ISO-8601 with a zone (`2026-11-27T10:00:00Z`,
    `...+01:00`). A time without a zone is refused (ValueError): a restore must not depend on
    the machine's zone."""
    text = text.strip()
    if _EPOCH_MS.match(text):
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither epoch milliseconds nor an ISO-8601 time (e.g. 2026-11-27T10:00:00Z)"
        ) from None
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no zone: add Z (UTC) or an offset such as +01:00")
    ms = round(when.timestamp() * 1000)
    if ms < 0:
        raise ValueError(f"{text!r} is before 1970")
    return ms


def parse_as_of_offsets(text: str) -> dict[tuple[str, int], int]:
    """`--as-of-offset`: `TOPIC:PARTITION=OFFSET,...` -> {(topic, partition): offset}. A malformed
    or repeated entry is a ValueError naming it."""
    out: dict[tuple[str, int], int] = {}
    for entry in (e.strip() for e in text.split(",")):
        m = _OFFSET_ENTRY.match(entry)
        if not m:
            raise ValueError(f"{entry!r} is not TOPIC:PARTITION=OFFSET (e.g. orders:0=1500)")
        key = (m.group(1), int(m.group(2)))
        if key in out:
            raise ValueError(f"{key[0]}:{key[1]} is given twice")
        out[key] = int(m.group(3))
    return out
