"""`dump --offsets-decoder / --transaction-log-decoder / --max-bytes / --skip-record-metadata`:
kafka-dump-log's options, its output shape.

Golden bytes are built here from the schemas (Kafka's `OffsetCommitKey/Value`, `GroupMetadataKey/
Value`, `TransactionLogKey/Value` message JSONs: field order, which versions hold which field,
version 4 / 1 flexible) by an encoder written for the test, independent of the decoder; consumer
subscriptions and assignments are encoded by kafka-python from its own copy of Kafka's schemas.
The real `__consumer_offsets` segments of the fixtures (written by Kafka 2.1 and 3.1 brokers)
are decoded too.
"""

from __future__ import annotations

import base64
import glob
import io
import json
import os
import struct

import pytest
from e2ekit import SHARED_FIXTURES
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from compaction.format import batch as fb
from compaction.format.batch_build import build_batch
from compaction.format.consumer_offsets import format_offsets_record
from compaction.format.transaction_log import format_txn_record
from compaction.tools import dump

T = 1_700_000_000_000


# --- an encoder of the schemas, for the test ----------------------------------------------------


class Enc:
    def __init__(self, flexible: bool = False) -> None:
        self.out, self.flexible = bytearray(), flexible

    def i8(self, v):
        self.out += struct.pack(">b", v)
        return self

    def i16(self, v):
        self.out += struct.pack(">h", v)
        return self

    def i32(self, v):
        self.out += struct.pack(">i", v)
        return self

    def i64(self, v):
        self.out += struct.pack(">q", v)
        return self

    def uvarint(self, v):
        while v >= 0x80:
            self.out.append((v & 0x7F) | 0x80)
            v >>= 7
        self.out.append(v)
        return self

    def _len(self, n, classic):
        return self.uvarint(n + 1) if self.flexible else getattr(self, classic)(n)

    def str(self, s):
        if s is None:
            return self._len(-1, "i16") if not self.flexible else self.uvarint(0)
        data = s.encode()
        self._len(len(data), "i16")
        self.out += data
        return self

    def bytes(self, b):
        if b is None:
            return self._len(-1, "i32") if not self.flexible else self.uvarint(0)
        self._len(len(b), "i32")
        self.out += b
        return self

    def array(self, items, write):
        if items is None:
            return self._len(-1, "i32") if not self.flexible else self.uvarint(0)
        self._len(len(items), "i32")
        for item in items:
            write(self, item)
        return self

    def tags(self, tagged=()):
        if self.flexible:
            self.uvarint(len(tagged))
            for tag, raw in tagged:
                self.uvarint(tag).uvarint(len(raw))
                self.out += raw
        return self

    def done(self) -> bytes:
        return bytes(self.out)


def offset_commit_key(group, topic, partition, key_type=1):
    return Enc().i16(key_type).str(group).str(topic).i32(partition).done()


def group_key(group):
    return Enc().i16(2).str(group).done()


def offset_commit_value(version, offset, metadata, commit_ts, leader_epoch=-1, expire_ts=-1, tagged=()):
    e = Enc(flexible=version >= 4).i16(version).i64(offset)
    if version >= 3:
        e.i32(leader_epoch)
    e.str(metadata).i64(commit_ts)
    if version == 1:
        e.i64(expire_ts)
    return e.tags(tagged).done()


def group_value(version, protocol_type, generation, protocol, leader, state_ts, members):
    e = Enc(flexible=version >= 4).i16(version).str(protocol_type).i32(generation).str(protocol).str(leader)
    if version >= 2:
        e.i64(state_ts)

    def member(enc, m):
        enc.str(m["memberId"])
        if version >= 3:
            enc.str(m["groupInstanceId"])
        enc.str(m["clientId"]).str(m["clientHost"])
        if version >= 1:
            enc.i32(m["rebalanceTimeout"])
        enc.i32(m["sessionTimeout"]).bytes(m["subscription"]).bytes(m["assignment"]).tags()

    return e.array(members, member).tags().done()


def txn_key(transactional_id):
    return Enc().i16(0).str(transactional_id).done()


def txn_value(version, pid, epoch, timeout, status, partitions, last_update, start, tagged=()):
    e = Enc(flexible=version >= 1).i16(version).i64(pid).i16(epoch).i32(timeout).i8(status)

    def schema(enc, tp):
        enc.str(tp[0]).array(tp[1], lambda en, p: en.i32(p)).tags()

    return e.array(partitions, schema).i64(last_update).i64(start).tags(tagged).done()


def member(version_extra=None, **kw):
    m = {
        "memberId": "m-1",
        "groupInstanceId": None,
        "clientId": "c",
        "clientHost": "/10.0.0.1",
        "rebalanceTimeout": 300000,
        "sessionTimeout": 45000,
        "subscription": b"",
        "assignment": b"",
    }
    m.update(kw)
    return m


# --- __consumer_offsets -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, value, data",
    [
        (0, offset_commit_value(0, 42, "m", T), {"offset": 42, "metadata": "m", "commitTimestamp": T}),
        (
            1,
            offset_commit_value(1, 42, "", T, expire_ts=T + 5),
            {"offset": 42, "metadata": "", "commitTimestamp": T, "expireTimestamp": T + 5},
        ),
        (2, offset_commit_value(2, 7, "x", T), {"offset": 7, "metadata": "x", "commitTimestamp": T}),
        (
            3,
            offset_commit_value(3, 7, "", T, leader_epoch=4),
            {"offset": 7, "leaderEpoch": 4, "metadata": "", "commitTimestamp": T},
        ),
        # flexible; an unknown tagged field (a later Kafka's addition) is skipped
        (
            4,
            offset_commit_value(4, 2**40, "ü", T, leader_epoch=-1, tagged=[(7, b"\x01\x02")]),
            {"offset": 2**40, "leaderEpoch": -1, "metadata": "ü", "commitTimestamp": T},
        ),
    ],
)
def test_offset_commit_values_of_every_version(version, value, data):
    key_text, value_text = format_offsets_record(5, offset_commit_key("g", "orders", 3), value)
    assert key_text == '{"type":"1","data":{"group":"g","topic":"orders","partition":3}}'
    assert value_text == json.dumps(
        {"version": str(version), "data": data}, separators=(",", ":"), ensure_ascii=False
    )


def test_offset_commit_key_type_0_and_tombstone():
    key_text, value_text = format_offsets_record(0, offset_commit_key("g", "t", 0, key_type=0), None)
    assert (key_text, value_text) == (
        '{"type":"0","data":{"group":"g","topic":"t","partition":0}}',
        "<DELETE>",
    )


def _subscription(version):
    owned = (
        [ConsumerProtocolSubscription.TopicPartition(topic="a", partitions=[0, 2])] if version >= 1 else []
    )
    return ConsumerProtocolSubscription(
        version=version,
        topics=["a", "b"],
        user_data=b"\x01",
        owned_partitions=owned,
        generation_id=9,
        rack_id="r1",
    ).encode(version=version)


def _assignment(version):
    parts = [ConsumerProtocolAssignment.TopicPartition(topic="a", partitions=[1])]
    return ConsumerProtocolAssignment(version=version, assigned_partitions=parts, user_data=None).encode(
        version=version
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_values_of_every_version_decode_consumer_members(version):
    sub_version = min(version, 3)
    m = member(
        subscription=_subscription(sub_version), assignment=_assignment(sub_version), groupInstanceId="i-1"
    )
    value = group_value(version, "consumer", 5, "range", "m-1", T, [m])
    key_text, value_text = format_offsets_record(0, group_key("grp"), value)
    assert key_text == '{"type":"2","data":{"group":"grp"}}'
    got = json.loads(value_text)
    assert got["version"] == str(version)
    want_member = {
        "memberId": "m-1",
        "groupInstanceId": "i-1",
        "clientId": "c",
        "clientHost": "/10.0.0.1",
        "rebalanceTimeout": 300000,
        "sessionTimeout": 45000,
    }
    if version < 3:
        del want_member["groupInstanceId"]
    if version < 1:
        del want_member["rebalanceTimeout"]
    sub = {"topics": ["a", "b"], "userData": "AQ=="}
    if sub_version >= 1:
        sub["ownedPartitions"] = [{"topic": "a", "partitions": [0, 2]}]
    if sub_version >= 2:
        sub["generationId"] = 9
    if sub_version >= 3:
        sub["rackId"] = "r1"
    want_member["subscription"] = sub
    want_member["assignment"] = {"assignedPartitions": [{"topic": "a", "partitions": [1]}], "userData": None}
    want = {"protocolType": "consumer", "generation": 5, "protocol": "range", "leader": "m-1"}
    if version >= 2:
        want["currentStateTimestamp"] = T
    want["members"] = [want_member]
    assert got["data"] == want
    assert list(got["data"]) == list(want)  # the schema's field order, as Kafka's JsonConverter writes it
    assert list(got["data"]["members"][0]) == list(want_member)


def test_non_consumer_group_keeps_member_bytes_in_base64_and_nulls():
    m = member(subscription=b"\x00\x01raw", assignment=b"")
    value = group_value(3, "connect", 1, None, None, -1, [m])
    data = json.loads(format_offsets_record(0, group_key("c"), value)[1])["data"]
    assert data["protocol"] is None and data["leader"] is None
    assert data["members"][0]["subscription"] == base64.b64encode(b"\x00\x01raw").decode()
    assert data["members"][0]["assignment"] == ""


UUID = bytes(range(16))
UUID_TEXT = base64.urlsafe_b64encode(UUID).decode().rstrip("=")  # Kafka's Uuid.toString


def cg_key(record_type, *strings):
    e = Enc().i16(record_type)
    for s in strings:
        e.str(s)
    return e.done()


def topic_id_partitions(enc, tp):
    enc.out += UUID
    enc.array(tp[0], lambda en, p: en.i32(p)).tags(tp[1])


@pytest.mark.parametrize(
    "record_type, key_fields, value, data",
    [
        (3, ("g",), Enc(True).i16(0).i32(7).tags().done(), {"epoch": 7}),
        (
            3,
            ("g",),
            Enc(True).i16(0).i32(7).tags([(0, struct.pack(">q", -3)), (1, struct.pack(">q", T))]).done(),
            {"epoch": 7, "metadataHash": -3, "creationTimeMs": T},
        ),
        (
            4,
            ("g",),
            Enc(True)
            .i16(0)
            .i32(2)
            .array(
                [0],
                lambda e, _: (
                    e.out.extend(UUID),
                    e.str("orders").i32(3),
                    e.array([(0, ["r1", "r2"])], lambda e2, pr: e2.i32(pr[0]).array(pr[1], Enc.str).tags()),
                    e.tags(),
                ),
            )
            .tags()
            .done(),
            {
                "epoch": 2,
                "topics": [
                    {
                        "topicId": UUID_TEXT,
                        "topicName": "orders",
                        "numPartitions": 3,
                        "partitionRacks": [{"partition": 0, "racks": ["r1", "r2"]}],
                    }
                ],
            },
        ),
        (
            5,
            ("g", "m-1"),
            Enc(True)
            .i16(0)
            .str(None)
            .str("rack")
            .str("cli")
            .str("/10.0.0.2")
            .array(["a"], Enc.str)
            .str(None)
            .i32(30000)
            .str("uniform")
            .tags(
                [
                    (
                        0,
                        Enc(True)
                        .array([0], lambda e, _: e.str("range").bytes(b"\x00\x01").tags())
                        .tags()
                        .done(),
                    )
                ]
            )
            .done(),
            {
                "instanceId": None,
                "rackId": "rack",
                "clientId": "cli",
                "clientHost": "/10.0.0.2",
                "subscribedTopicNames": ["a"],
                "subscribedTopicRegex": None,
                "rebalanceTimeoutMs": 30000,
                "serverAssignor": "uniform",
                "classicMemberMetadata": {"supportedProtocols": [{"name": "range", "metadata": "AAE="}]},
            },
        ),
        (6, ("g",), Enc(True).i16(0).i32(4).tags().done(), {"assignmentEpoch": 4}),
        (
            7,
            ("g", "m-1"),
            Enc(True).i16(0).array([([0, 1], ())], topic_id_partitions).tags().done(),
            {"topicPartitions": [{"topicId": UUID_TEXT, "partitions": [0, 1]}]},
        ),
        (
            8,
            ("g", "m-1"),
            Enc(True)
            .i16(0)
            .i32(5)
            .i32(4)
            .i8(0)
            .array([([2], [(0, Enc(True).array([5], lambda e, p: e.i32(p)).done())])], topic_id_partitions)
            .array([], topic_id_partitions)
            .tags()
            .done(),
            {
                "memberEpoch": 5,
                "previousMemberEpoch": 4,
                "state": 0,
                "assignedPartitions": [{"topicId": UUID_TEXT, "partitions": [2], "assignmentEpochs": [5]}],
                "partitionsPendingRevocation": [],
            },
        ),
    ],
)
def test_kip_848_consumer_group_records(record_type, key_fields, value, data):
    key_text, value_text = format_offsets_record(0, cg_key(record_type, *key_fields), value)
    names = ("groupId", "memberId")[: len(key_fields)]
    key_data = dict(zip(names, key_fields, strict=True))
    assert json.loads(key_text) == {"type": str(record_type), "data": key_data}
    assert json.loads(value_text) == {"version": "0", "data": data}
    assert list(json.loads(value_text)["data"]) == list(data)  # the schema's order


@pytest.mark.parametrize(
    "key, value, text",
    [
        (Enc().i16(9).str("g").done(), b"\x00\x00", "Unknown record type 9 at offset 9, skipping."),
        (offset_commit_key("g", "t", 0), Enc().i16(9).done(), "Error at offset 9, skipping. value version 9"),
        (offset_commit_key("g", "t", 0)[:-2], None, "Error at offset 9, skipping. needs 4 bytes"),
        (group_key("g"), group_value(3, "consumer", 1, "r", "l", 0, [])[:-3], "Error at offset 9, skipping."),
    ],
)
def test_undecodable_records_print_kafkas_skip_lines(key, value, text):
    key_text, value_text = format_offsets_record(9, key, value)
    assert key_text.startswith(text)
    assert value_text is None


def _fixture_logs(pattern):
    return sorted(glob.glob(os.path.join(SHARED_FIXTURES, pattern)))


def test_real_consumer_offsets_segments_decode_whole():
    logs = _fixture_logs("*/*/__consumer_offsets-*/*.log") + _fixture_logs("*/*/*/__consumer_offsets-*/*.log")
    logs = [p for p in logs if os.path.getsize(p)]
    assert len(logs) >= 10
    out, err = io.StringIO(), io.StringIO()
    options = dump.DumpOptions(deep_iteration=True, print_data_log=True, decoder="offsets")
    assert dump.dump_files(logs, options, out, err) == 0
    lines = [line for line in out.getvalue().splitlines() if line.startswith("| ")]
    assert len(lines) > 100
    assert not [line for line in lines if "skipping" in line]
    payloads = [json.loads(line.split(" payload: ", 1)[1]) for line in lines if "<DELETE>" not in line]
    assert {p["version"] for p in payloads} >= {"2", "3"}  # group metadata v2 (2.1), v3 (3.1); commits v3


def test_real_kafka_3_1_consumer_group_line():
    log = _fixture_logs("Bheem6005+kafka/kafka-logs/__consumer_offsets-31/00000000000000000000.log")[0]
    out = io.StringIO()
    options = dump.DumpOptions(
        deep_iteration=True, print_data_log=True, decoder="offsets", skip_record_metadata=True
    )
    dump.dump_files([log], options, out, io.StringIO())
    first = next(line for line in out.getvalue().splitlines() if line.startswith("|"))
    assert first == (
        '| key: {"type":"2","data":{"group":"console-consumer-89616"}} payload: {"version":"3","data":'
        '{"protocolType":"consumer","generation":1,"protocol":"range","leader":"console-consumer-51bb6957-61f2-'
        '4e01-8d60-57e689161ac7","currentStateTimestamp":1645954581119,"members":[{"memberId":"console-consumer-'
        '51bb6957-61f2-4e01-8d60-57e689161ac7","groupInstanceId":null,"clientId":"console-consumer","clientHost":'
        '"/192.168.50.45","rebalanceTimeout":300000,"sessionTimeout":45000,"subscription":{"topics":["cities"],'
        '"userData":null,"ownedPartitions":[]},"assignment":{"assignedPartitions":[{"topic":"cities",'
        '"partitions":[0]}],"userData":null}}]}}'
    )


# --- __transaction_state ------------------------------------------------------------------------


def test_transaction_log_v0_as_kafka_prints_it():
    # The records of a transaction as kafka-dump-log --transaction-log-decoder printed them on a
    # broker (keySize 15, valueSize 37 and 59 there too).
    key = txn_key("kafka-txn-0")
    empty = txn_value(0, 1, 0, 60000, 0, None, 1742739549435, -1)
    ongoing = txn_value(0, 1, 0, 60000, 1, [("output-topic", [0])], 1742739702876, 1742739702876)
    assert (len(key), len(empty), len(ongoing)) == (15, 37, 59)
    assert format_txn_record(0, key, empty) == (
        "transaction_metadata::transactionalId=kafka-txn-0",
        "producerId:1,producerEpoch:0,state=Empty,partitions=[],txnLastUpdateTimestamp=1742739549435,txnTimeoutMs=60000",
    )
    assert format_txn_record(1, key, ongoing)[1] == (
        "producerId:1,producerEpoch:0,state=Ongoing,partitions=[output-topic-0],"
        "txnLastUpdateTimestamp=1742739702876,txnTimeoutMs=60000"
    )


@pytest.mark.parametrize(
    "status, name",
    [
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ],
)
def test_transaction_log_v1_flexible_with_tagged_fields(status, name):
    tagged = [(0, struct.pack(">q", 5)), (1, struct.pack(">q", 6)), (2, struct.pack(">h", 2))]
    value = txn_value(1, 7, 3, 15000, status, [("txtest", [0, 1]), ("b", [4])], T, T - 5, tagged=tagged)
    assert format_txn_record(0, txn_key("tx"), value)[1] == (
        f"producerId:7,producerEpoch:3,state={name},partitions=[txtest-0,txtest-1,b-4],"
        f"txnLastUpdateTimestamp={T},txnTimeoutMs=15000"
    )


def test_transaction_log_tombstone_unknown_key_version_and_garbage():
    assert format_txn_record(0, txn_key("tx"), None) == (
        "transaction_metadata::transactionalId=tx",
        "<DELETE>",
    )
    assert format_txn_record(0, Enc().i16(1).str("tx").done(), b"") == ("unknown::version=1", None)
    assert format_txn_record(4, txn_key("tx"), b"\x00\x00\x01")[0].startswith("Error at offset 4, skipping.")
    assert format_txn_record(4, txn_key("tx"), txn_value(0, 1, 0, 1, 9, None, 0, 0))[0].startswith(
        "Error at offset 4, skipping. unknown transaction state 9"
    )


# --- the dump command: options and line shapes ----------------------------------------------------


def _segment(tmp_path, records, name="00000000000000000000.log"):
    """One record per batch (as the coordinators write them)."""
    data = b"".join(
        build_batch([fb.Record(i, T + i, k, v)], base_offset=i) for i, (k, v) in enumerate(records)
    )
    path = tmp_path / name
    path.write_bytes(data)
    return str(path), data


def _run(argv):
    from compaction.__main__ import build_parser

    args = build_parser().parse_args(["dump", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = dump.run(args, out, err)
    return code, out.getvalue().splitlines(), err.getvalue()


def test_transaction_log_decoder_command_lines(tmp_path):
    key = txn_key("kafka-txn-0")
    path, _ = _segment(tmp_path, [(key, txn_value(0, 1, 0, 60000, 1, [("t", [0])], T, T)), (key, None)])
    code, lines, _ = _run(["--transaction-log-decoder", "--files", path])
    assert code == 0
    records = [line for line in lines if line.startswith("|")]
    assert records == [
        f"| offset: 0 CreateTime: {T} keySize: 15 valueSize: 48 sequence: -1 headerKeys: [] key: "
        f"transaction_metadata::transactionalId=kafka-txn-0 payload: producerId:1,producerEpoch:0,"
        f"state=Ongoing,partitions=[t-0],txnLastUpdateTimestamp={T},txnTimeoutMs=60000",
        f"| offset: 1 CreateTime: {T + 1} keySize: 15 valueSize: -1 sequence: -1 headerKeys: [] key: "
        f"transaction_metadata::transactionalId=kafka-txn-0 payload: <DELETE>",
    ]


def test_offsets_decoder_json_mode_carries_the_decoded_forms(tmp_path):
    path, _ = _segment(tmp_path, [(offset_commit_key("g", "t", 1), offset_commit_value(3, 10, "", T))])
    _, lines, _ = _run(["--offsets-decoder", "--json", path])
    record = next(json.loads(line) for line in lines if '"type": "record"' in line)
    assert record["decodedKey"] == '{"type":"1","data":{"group":"g","topic":"t","partition":1}}'
    assert json.loads(record["decodedValue"])["data"]["offset"] == 10


def test_skip_record_metadata_spacing_as_kafka(tmp_path):
    path, _ = _segment(tmp_path, [(b"k", b"v"), (None, b"only-value"), (b"only-key", None)])
    _, lines, _ = _run(["--print-data-log", "--skip-record-metadata", path])
    records = [line for line in lines if not line.startswith(("Dumping", "Log starting", "baseOffset"))]
    assert records == ["| key: k payload: v", " payload: only-value", "| key: only-key"]
    _, lines, _ = _run(["--deep-iteration", "--skip-record-metadata", path])
    assert [line for line in lines if not line.startswith(("Dumping", "Log starting", "baseOffset"))] == [
        "",
        "",
        "",
    ]


def test_max_bytes_reads_only_whole_batches_within_the_limit(tmp_path):
    path, data = _segment(tmp_path, [(b"k%d" % i, b"v" * 50) for i in range(5)])
    size = len(data) // 5
    code, lines, _ = _run(["--max-bytes", str(2 * size + 10), path])
    assert code == 0
    assert [line.split()[1] for line in lines if line.startswith("baseOffset")] == ["0", "1"]
    assert not [line for line in lines if "invalid bytes" in line]
    code, lines, _ = _run([path])
    assert len([line for line in lines if line.startswith("baseOffset")]) == 5
    with pytest.raises(SystemExit):
        _run(["--max-bytes", "0", path])


def test_decoders_are_exclusive():
    with pytest.raises(SystemExit):
        _run(["--offsets-decoder", "--transaction-log-decoder", "x.log"])


def test_max_bytes_reads_no_more_of_the_file(tmp_path, monkeypatch):
    path, _ = _segment(tmp_path, [(b"k%d" % i, b"v" * 50) for i in range(5)])
    asked = []
    real = dump.Storage.read_bytes

    def spy(self, p, offset=0, length=None):
        asked.append(length)
        return real(self, p, offset, length)

    monkeypatch.setattr(dump.Storage, "read_bytes", spy)
    _run(["--max-bytes", "100", path])
    assert asked == [100]
