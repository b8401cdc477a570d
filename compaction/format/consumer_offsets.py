"""Records of `__consumer_offsets`, decoded as kafka-dump-log prints them (pure functions).

`__consumer_offsets` (`--offsets-decoder`, Kafka's `OffsetsMessageParser`): a key is an int16
record type then a struct, a value an int16 version then a struct (schemas:
`group-coordinator/src/main/resources/common/message/*.json`):

| key type | key struct                         | value versions                                   |
|---------:|------------------------------------|--------------------------------------------------|
| 0, 1     | OffsetCommitKey (group, topic, partition) | OffsetCommitValue 0-4 (4: flexible)       |
| 2        | GroupMetadataKey (group)           | GroupMetadataValue 0-4 (4: flexible); a consumer |
|          |                                    | group's member subscription/assignment bytes are |
|          |                                    | decoded (ConsumerProtocolSubscription/Assignment 0-3) |

Those are every record of classic groups that Kafka 2.x-4.x write. The consumer groups of KIP-848
(Kafka 4.0+) add record types 3-8 (group metadata, partition metadata, member metadata, target
assignment metadata and members, current member assignments; value version 0, flexible), decoded
with the schemas as Kafka 4.0 released them (3.7-3.9 wrote early-access versions of some of them,
which print Kafka's "Error at offset" line). Printed as Kafka prints them: key
`{"type":"<key type>","data":{...}}`, value `{"version":"<version>","data":{...}}` or `<DELETE>`
for a tombstone, compact JSON with the schemas' field names; bytes in base64, topic ids as Kafka's
`Uuid.toString`. Share and streams groups' records (types 9 and up) print Kafka's "Unknown record
type" line and are skipped.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

from compaction.errors import DecodeError, UnknownRecordType
from compaction.format.coordinator import Parsed, Reader


def _json(value: object) -> str:
    """Jackson's `ObjectNode.toString`: compact, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


OFFSET_COMMIT_KEY_TYPES = (0, 1)
GROUP_METADATA_KEY_TYPE = 2
CONSUMER_PROTOCOL_TYPE = "consumer"


def _offset_commit_value(r: Reader, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {"offset": r.int64()}
    if version >= 3:
        out["leaderEpoch"] = r.int32()
    out["metadata"] = r.string()
    out["commitTimestamp"] = r.int64()
    if version == 1:
        out["expireTimestamp"] = r.int64()
    r.tagged_fields()
    return out


def _member_metadata(r: Reader, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {"memberId": r.string()}
    if version >= 3:
        out["groupInstanceId"] = r.string(nullable=True)
    out["clientId"] = r.string()
    out["clientHost"] = r.string()
    if version >= 1:
        out["rebalanceTimeout"] = r.int32()
    out["sessionTimeout"] = r.int32()
    out["subscription"] = r.bytes_()
    out["assignment"] = r.bytes_()
    r.tagged_fields()
    return out


def _group_metadata_value(r: Reader, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "protocolType": r.string(),
        "generation": r.int32(),
        "protocol": r.string(nullable=True),
        "leader": r.string(nullable=True),
    }
    if version >= 2:
        out["currentStateTimestamp"] = r.int64()
    members = r.array(lambda: _member_metadata(r, version))
    r.tagged_fields()
    consumer = out["protocolType"] == CONSUMER_PROTOCOL_TYPE
    for member in members:
        for field, decode in (("subscription", consumer_subscription), ("assignment", consumer_assignment)):
            raw = member[field]
            member[field] = _b64(raw)
            if consumer:
                try:  # as Kafka: the decoded form where it decodes, else the bytes
                    member[field] = decode(raw)
                except (DecodeError, UnicodeDecodeError):
                    pass
    out["members"] = members
    return out


def _topic_partitions(r: Reader) -> dict[str, Any]:
    return {"topic": r.string(), "partitions": r.array(r.int32)}


def consumer_subscription(data: bytes) -> dict[str, Any]:
    """ConsumerProtocolSubscription 0-3 (an int16 version, then the struct) as JSON fields."""
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise DecodeError(f"ConsumerProtocolSubscription version {version} is not 0-3")
    out: dict[str, Any] = {"topics": r.array(r.string), "userData": _b64(r.bytes_(nullable=True))}
    if version >= 1:
        out["ownedPartitions"] = r.array(lambda: _topic_partitions(r))
    if version >= 2:
        out["generationId"] = r.int32()
    if version >= 3:
        out["rackId"] = r.string(nullable=True)
    return out


def consumer_assignment(data: bytes) -> dict[str, Any]:
    """ConsumerProtocolAssignment 0-3 as JSON fields."""
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise DecodeError(f"ConsumerProtocolAssignment version {version} is not 0-3")
    assigned = r.array(lambda: _topic_partitions(r))
    return {"assignedPartitions": assigned, "userData": _b64(r.bytes_(nullable=True))}


# --- KIP-848 consumer groups (Kafka 4.0+; record types 3-8, value version 0, flexible) -------------
# Tagged fields are in the JSON when the record carries them: Kafka writes a tagged field only when
# it differs from its default.


def _uuid(r: Reader) -> str:
    """Kafka's `Uuid.toString`: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(r._take(16)).decode().rstrip("=")


def _tagged(r: Reader, out: dict, fields: dict) -> dict[str, Any]:
    """The struct's tagged section; known tags {tag: (name, decode(raw) -> value)} go into `out`."""
    for tag, raw in r.tagged_fields().items():
        if tag in fields:
            name, decode = fields[tag]
            out[name] = decode(raw)
    return out


def _int64(raw: bytes) -> int:
    return struct.unpack(">q", raw)[0]


def _cg_metadata_value(r: Reader, version: int) -> dict[str, Any]:
    return _tagged(r, {"epoch": r.int32()}, {0: ("metadataHash", _int64), 1: ("creationTimeMs", _int64)})


def _cg_partition_metadata_value(r: Reader, version: int) -> dict[str, Any]:
    def partition() -> dict[str, Any]:
        return _tagged(r, {"partition": r.int32(), "racks": r.array(r.string)}, {})

    def topic() -> dict[str, Any]:
        out: dict[str, Any] = {
            "topicId": _uuid(r),
            "topicName": r.string(),
            "numPartitions": r.int32(),
            "partitionRacks": r.array(partition),
        }
        return _tagged(r, out, {})

    return _tagged(r, {"epoch": r.int32(), "topics": r.array(topic)}, {})


def _classic_member_metadata(raw: bytes) -> dict[str, Any]:
    r = Reader(raw, flexible=True)

    def protocol() -> dict[str, Any]:
        return _tagged(r, {"name": r.string(), "metadata": _b64(r.bytes_())}, {})

    out = _tagged(r, {"supportedProtocols": r.array(protocol)}, {})
    r.end()
    return out


def _cg_member_metadata_value(r: Reader, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "instanceId": r.string(nullable=True),
        "rackId": r.string(nullable=True),
        "clientId": r.string(),
        "clientHost": r.string(),
        "subscribedTopicNames": r.array(r.string),
        "subscribedTopicRegex": r.string(nullable=True),
        "rebalanceTimeoutMs": r.int32(),
        "serverAssignor": r.string(nullable=True),
    }
    return _tagged(r, out, {0: ("classicMemberMetadata", _classic_member_metadata)})


def _cg_target_assignment_metadata_value(r: Reader, version: int) -> dict[str, Any]:
    return _tagged(r, {"assignmentEpoch": r.int32()}, {0: ("assignmentTimestamp", _int64)})


def _topic_id_partitions(r: Reader, tags: dict | None = None) -> dict[str, Any]:
    return _tagged(r, {"topicId": _uuid(r), "partitions": r.array(r.int32)}, tags or {})


def _cg_target_assignment_member_value(r: Reader, version: int) -> dict[str, Any]:
    return _tagged(r, {"topicPartitions": r.array(lambda: _topic_id_partitions(r))}, {})


def _int32_array(raw: bytes) -> list[int] | None:
    r = Reader(raw, flexible=True)
    out = r.array(r.int32, nullable=True)
    r.end()
    return out


def _cg_current_member_assignment_value(r: Reader, version: int) -> dict[str, Any]:
    tags = {0: ("assignmentEpochs", _int32_array)}
    out: dict[str, Any] = {
        "memberEpoch": r.int32(),
        "previousMemberEpoch": r.int32(),
        "state": r.int8(),
        "assignedPartitions": r.array(lambda: _topic_id_partitions(r, tags)),
        "partitionsPendingRevocation": r.array(lambda: _topic_id_partitions(r, tags)),
    }
    return _tagged(r, out, {})


_OFFSETS_VALUES = {  # key type -> (value decoder, highest version, first flexible version)
    0: (_offset_commit_value, 4, 4),
    1: (_offset_commit_value, 4, 4),
    GROUP_METADATA_KEY_TYPE: (_group_metadata_value, 4, 4),
    3: (_cg_metadata_value, 0, 0),
    4: (_cg_partition_metadata_value, 0, 0),
    5: (_cg_member_metadata_value, 0, 0),
    6: (_cg_target_assignment_metadata_value, 0, 0),
    7: (_cg_target_assignment_member_value, 0, 0),
    8: (_cg_current_member_assignment_value, 0, 0),
}
CONSUMER_GROUP_KEYS = {
    3: ("groupId",),
    4: ("groupId",),
    5: ("groupId", "memberId"),
    6: ("groupId",),
    7: ("groupId", "memberId"),
    8: ("groupId", "memberId"),
}


def offsets_key(data: bytes) -> tuple[int, dict]:
    """(record type, key fields) of a `__consumer_offsets` key."""
    r = Reader(data)
    key_type = r.int16()
    if key_type in OFFSET_COMMIT_KEY_TYPES:
        fields = {"group": r.string(), "topic": r.string(), "partition": r.int32()}
    elif key_type == GROUP_METADATA_KEY_TYPE:
        fields = {"group": r.string()}
    elif key_type in CONSUMER_GROUP_KEYS:
        fields = {name: r.string() for name in CONSUMER_GROUP_KEYS[key_type]}
    else:
        raise UnknownRecordType(key_type)
    r.end()
    return key_type, fields


def offsets_value(key_type: int, data: bytes) -> tuple[int, dict]:
    decode, highest, flexible_from = _OFFSETS_VALUES[key_type]
    version = Reader(data).int16()
    if not 0 <= version <= highest:
        raise DecodeError(f"value version {version} of record type {key_type} is not 0-{highest}")
    r = Reader(data, flexible=version >= flexible_from)
    r.pos = 2
    fields = decode(r, version)
    r.end()
    return version, fields


def format_offsets_record(offset: int, key: bytes | None, value: bytes | None) -> Parsed:
    """(key text, payload text) exactly where kafka-dump-log's OffsetsMessageParser prints them."""
    if key is None:
        return (
            f"Error at offset {offset}, skipping. The record has no key (no __consumer_offsets record)",
            None,
        )
    try:
        key_type, key_fields = offsets_key(key)
        key_text = _json({"type": str(key_type), "data": key_fields})
        if value is None:
            return key_text, "<DELETE>"
        version, fields = offsets_value(key_type, value)
        return key_text, _json({"version": str(version), "data": fields})
    except UnknownRecordType as exc:
        return f"Unknown record type {exc.record_type} at offset {offset}, skipping.", None
    except (DecodeError, UnicodeDecodeError) as exc:
        return f"Error at offset {offset}, skipping. {exc}", None
