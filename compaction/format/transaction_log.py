"""Records of `__transaction_state`, decoded as kafka-dump-log prints them (pure functions).

`__transaction_state` (`--transaction-log-decoder`, `TransactionLog.formatRecordKeyAndValue`):
key TransactionLogKey v0 (transactionalId), value TransactionLogValue 0-1 (1: flexible, tagged
PreviousProducerId/NextProducerId/ClientTransactionVersion), printed
`transaction_metadata::transactionalId=<id>` and
`producerId:P,producerEpoch:E,state=S,partitions=[t-0,...],txnLastUpdateTimestamp=T,txnTimeoutMs=M`.
Kafka prints the partitions of a Scala Set (hash order); here they are in the record's order.
"""

from __future__ import annotations

import struct
from typing import Any

from compaction.errors import DecodeError
from compaction.format.coordinator import Parsed, Reader

TXN_STATES = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}


def txn_key(data: bytes) -> tuple[int, str | None]:
    """(key version, transactional id); the id is None for a key version Kafka does not know."""
    r = Reader(data)
    version = r.int16()
    if version != 0:
        return version, None
    transactional_id = r.string()
    r.end()
    return version, transactional_id


def txn_value(data: bytes) -> dict[str, Any]:
    """TransactionLogValue 0-1 as {producerId, producerEpoch, state, partitions, ...}."""
    version = Reader(data).int16()
    if version not in (0, 1):
        raise DecodeError(f"TransactionLogValue version {version} is not 0-1")
    r = Reader(data, flexible=version >= 1)
    r.pos = 2
    out: dict[str, Any] = {
        "version": version,
        "producerId": r.int64(),
        "producerEpoch": r.int16(),
        "timeoutMs": r.int32(),
    }
    status = r.int8()
    if status not in TXN_STATES:
        raise DecodeError(f"unknown transaction state {status}")
    out["state"] = TXN_STATES[status]

    def partitions_schema() -> tuple[str, list[int]]:
        topic, ids = r.string(), r.array(r.int32)
        r.tagged_fields()
        return topic, ids

    schemas = r.array(partitions_schema, nullable=True) or []
    out["partitions"] = [f"{topic}-{p}" for topic, ids in schemas for p in ids]
    out["lastUpdateTimestampMs"] = r.int64()
    out["startTimestampMs"] = r.int64()
    tags = r.tagged_fields()
    r.end()
    for tag, name, fmt in (
        (0, "previousProducerId", ">q"),
        (1, "nextProducerId", ">q"),
        (2, "clientTransactionVersion", ">h"),
    ):
        if tag in tags:
            out[name] = struct.unpack(fmt, tags[tag])[0]
    return out


def format_txn_record(offset: int, key: bytes | None, value: bytes | None) -> Parsed:
    """(key text, payload text) as kafka-dump-log's TransactionLogMessageParser prints them."""
    if key is None:
        return (
            f"Error at offset {offset}, skipping. The record has no key (no __transaction_state record)",
            None,
        )
    try:
        version, transactional_id = txn_key(key)
        if transactional_id is None:
            return f"unknown::version={version}", None
        key_text = f"transaction_metadata::transactionalId={transactional_id}"
        if value is None:
            return key_text, "<DELETE>"
        v = txn_value(value)
    except (DecodeError, UnicodeDecodeError, struct.error) as exc:
        return f"Error at offset {offset}, skipping. {exc}", None
    return key_text, (
        f"producerId:{v['producerId']},producerEpoch:{v['producerEpoch']},state={v['state']},"
        f"partitions=[{','.join(v['partitions'])}],txnLastUpdateTimestamp={v['lastUpdateTimestampMs']},"
        f"txnTimeoutMs={v['timeoutMs']}"
    )
