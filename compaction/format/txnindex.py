"""The transaction index `.txnindex`: the aborted transactions whose ABORT marker lies in a
segment (docs/kafka-rules.md#txnindex). Source: `storage/.../log/TransactionIndex.java`,
`AbortedTxn.java`.

Wire format (big-endian, no header, no checksum, no entry count: entries = file length / size)

    .txnindex   34 bytes per entry (AbortedTxn), created lazily    TransactionIndex.java
      0  int16  version          0
      2  int64  producerId
     10  int64  firstOffset      first offset of the aborted transaction's data
     18  int64  lastOffset       offset of the ABORT marker
     26  int64  lastStableOffset LSO when the abort completed
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from compaction.errors import IndexCorruptError
from compaction.format.index import whole_entries
from compaction.format.layout import ABORTED_TXN_SIZE, RECORD_BATCH_OVERHEAD

ABORTED_TXN = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset
ABORTED_TXN_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def most_entries(log_bytes: int) -> int:
    """The most entries the `.txnindex` of a segment of `log_bytes` can hold: one per ABORT marker
    in that segment (a broker appends the entry as it appends the marker, and its cleaner keeps an
    entry only with its marker: `CleanedTransactionMetadata`), each marker a batch of at least
    RECORD_BATCH_OVERHEAD bytes."""
    return max(log_bytes, 0) // RECORD_BATCH_OVERHEAD


def check_txn_index_size(size: int, log_bytes: int, path: str = "<memory>") -> None:
    """IndexCorruptError when a `.txnindex` of `size` bytes holds more entries than its segment of
    `log_bytes` holds ABORT markers (`most_entries`): a file no broker writes, refused from its
    size alone, before it is read (a read would hold every entry it claims)."""
    most = most_entries(log_bytes) * ABORTED_TXN_SIZE
    if size > most:
        raise IndexCorruptError(
            f"{size} bytes ({size // ABORTED_TXN_SIZE} aborted transactions), more than the "
            f"{most} bytes of entries its segment's {log_bytes} bytes can hold ABORT markers for "
            f"(one batch of at least {RECORD_BATCH_OVERHEAD} bytes each): a broker never writes it",
            path=path,
            position=most,
        )


def read_txn_index(data: bytes | memoryview) -> list[AbortedTxn]:
    return [
        AbortedTxn(*fields[1:]) for fields in ABORTED_TXN.iter_unpack(whole_entries(data, ABORTED_TXN_SIZE))
    ]


def write_txn_index(entries: Iterable[AbortedTxn], path: str = "<memory>") -> bytes:
    """`TransactionIndex.append` requires strictly increasing lastOffset."""
    out = bytearray()
    last = None
    for txn in entries:
        if last is not None and txn.last_offset <= last:
            raise IndexCorruptError(
                f"txn index lastOffset must increase: {txn.last_offset} after {last}",
                path=path,
                offset=txn.last_offset,
            )
        out += ABORTED_TXN.pack(ABORTED_TXN_VERSION, *txn)
        last = txn.last_offset
    return bytes(out)


def sanity_check_txn_index(
    data: bytes | memoryview, base_offset: int, path: str = "<memory>", *, strict: bool = False
) -> None:
    """Broker: any entry with lastOffset < base offset is corrupt (-> segment recovery)."""
    entries = read_txn_index(data)
    for i, txn in enumerate(entries):
        if txn.last_offset < base_offset:
            raise IndexCorruptError(
                f"aborted txn lastOffset {txn.last_offset} is below the base offset {base_offset}",
                path=path,
                position=i * ABORTED_TXN_SIZE,
                offset=txn.last_offset,
            )
    if strict:
        if len(data) % ABORTED_TXN_SIZE:
            raise IndexCorruptError(f"txn index length {len(data)} is not a multiple of 34", path=path)
        for i in range(1, len(entries)):
            if entries[i].last_offset <= entries[i - 1].last_offset:
                raise IndexCorruptError(
                    "txn index lastOffset not increasing", path=path, position=i * ABORTED_TXN_SIZE
                )
