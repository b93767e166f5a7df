"""Custom headers <-> extFields (rocketmq-internals.md section 1.5)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rmq_ha.errors import RmqHaError
from rmq_ha.protocol.codes import RequestCode
from rmq_ha.protocol.headerbase import FieldSpec, camel
from rmq_ha.protocol.headers import (
    REQUEST_HEADERS,
    RESPONSE_HEADERS,
    BrokerHeartbeatRequestHeader,
    CommandHeader,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    GetMaxOffsetRequestHeader,
    HeaderError,
    MalformedHeaderField,
    MissingHeaderField,
    PullMessageRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    UnregisterClientRequestHeader,
    header_fields,
    parse_send_message_header,
)

ALL_HEADERS = REQUEST_HEADERS + RESPONSE_HEADERS
RPC = {"ns", "nsd", "bname", "oway"}
TOPIC = RPC | {"lo"}

#: Java field names (including inherited RPC base fields) of each header, from
#: apache/rocketmq 5.3.x remoting/.../protocol/header/**. `__ZONE_NAME` is the extra extField
#: the name server reads beside RegisterBrokerRequestHeader.
JAVA_FIELDS: dict[str, set[str]] = {
    "SendMessageRequestHeader": TOPIC | {
        "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
        "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "batch",
        "maxReconsumeTimes"},
    "SendMessageRequestHeaderV2": TOPIC | set("abcdefghijklmn"),
    "SendMessageResponseHeader": {
        "msgId", "queueId", "queueOffset", "transactionId", "batchUniqId", "recallHandle"},
    "PullMessageRequestHeader": TOPIC | {
        "consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag",
        "commitOffset", "suspendTimeoutMillis", "subscription", "subVersion", "expressionType",
        "maxMsgBytes", "requestSource", "proxyFrowardClientId"},
    "PullMessageResponseHeader": {
        "suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset", "offsetDelta",
        "topicSysFlag", "groupSysFlag", "forbiddenType"},
    "QueryConsumerOffsetRequestHeader": TOPIC | {
        "consumerGroup", "topic", "queueId", "setZeroIfNotFound"},
    "QueryConsumerOffsetResponseHeader": {"offset"},
    "UpdateConsumerOffsetRequestHeader": TOPIC | {
        "consumerGroup", "topic", "queueId", "commitOffset"},
    "UpdateConsumerOffsetResponseHeader": set(),
    "GetMaxOffsetRequestHeader": TOPIC | {"topic", "queueId", "committed"},
    "GetMaxOffsetResponseHeader": {"offset"},
    "GetMinOffsetRequestHeader": TOPIC | {"topic", "queueId"},
    "GetMinOffsetResponseHeader": {"offset"},
    "GetEarliestMsgStoretimeRequestHeader": TOPIC | {"topic", "queueId"},
    "GetEarliestMsgStoretimeResponseHeader": {"timestamp"},
    "SearchOffsetRequestHeader": TOPIC | {"topic", "queueId", "timestamp", "boundaryType"},
    "SearchOffsetResponseHeader": {"offset"},
    "ViewMessageRequestHeader": {"topic", "offset"},
    "GetConsumerListByGroupRequestHeader": RPC | {"consumerGroup"},
    "ConsumerSendMsgBackRequestHeader": RPC | {
        "offset", "group", "delayLevel", "originMsgId", "originTopic", "unitMode",
        "maxReconsumeTimes"},
    "EndTransactionRequestHeader": RPC | {
        "topic", "producerGroup", "tranStateTableOffset", "commitLogOffset", "commitOrRollback",
        "fromTransactionCheck", "msgId", "transactionId"},
    "CheckTransactionStateRequestHeader": RPC | {
        "topic", "tranStateTableOffset", "commitLogOffset", "msgId", "transactionId",
        "offsetMsgId"},
    "NotifyConsumerIdsChangedRequestHeader": RPC | {"consumerGroup"},
    "UnregisterClientRequestHeader": RPC | {"clientID", "producerGroup", "consumerGroup"},
    "LockBatchMqRequestHeader": RPC,
    "UnlockBatchMqRequestHeader": RPC,
    "CreateTopicRequestHeader": TOPIC | {
        "topic", "defaultTopic", "readQueueNums", "writeQueueNums", "perm", "topicFilterType",
        "topicSysFlag", "order", "attributes", "force"},
    "GetRouteInfoRequestHeader": TOPIC | {"topic", "acceptStandardJsonOnly"},
    "RegisterBrokerRequestHeader": {
        "brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId",
        "heartbeatTimeoutMillis", "enableActingMaster", "compressed", "bodyCrc32",
        "__ZONE_NAME"},
    "RegisterBrokerResponseHeader": {"haServerAddr", "masterAddr"},
    "UnRegisterBrokerRequestHeader": {"brokerName", "brokerAddr", "clusterName", "brokerId"},
    "BrokerHeartbeatRequestHeader": {
        "clusterName", "brokerAddr", "brokerName", "brokerId", "epoch", "maxOffset",
        "confirmOffset", "heartbeatTimeoutMills", "electionPriority"},
    "GetBrokerMemberGroupRequestHeader": {"clusterName", "brokerName"},
    "NotifyMinBrokerIdChangeRequestHeader": {
        "minBrokerId", "brokerName", "minBrokerAddr", "offlineBrokerAddr", "haBrokerAddr"},
    "QueryDataVersionRequestHeader": {"brokerName", "brokerAddr", "clusterName", "brokerId"},
    "QueryDataVersionResponseHeader": {"changed"},
    "ExchangeHAInfoRequestHeader": {"masterHaAddress", "masterFlushOffset", "masterAddress"},
    "ExchangeHAInfoResponseHeader": {"masterHaAddress", "masterFlushOffset", "masterAddress"},
    "PopMessageRequestHeader": TOPIC | {
        "consumerGroup", "topic", "queueId", "maxMsgNums", "invisibleTime", "pollTime",
        "bornTime", "initMode", "expType", "exp", "order", "attemptId"},
    "PopMessageResponseHeader": {
        "popTime", "invisibleTime", "reviveQid", "restNum", "startOffsetInfo", "msgOffsetInfo",
        "orderCountInfo"},
    "AckMessageRequestHeader": TOPIC | {
        "consumerGroup", "topic", "queueId", "extraInfo", "offset"},
    "ChangeInvisibleTimeRequestHeader": TOPIC | {
        "consumerGroup", "topic", "queueId", "extraInfo", "offset", "invisibleTime"},
    "ChangeInvisibleTimeResponseHeader": {"popTime", "invisibleTime", "reviveQid"},
}  # fmt: skip

#: @CFNotNull fields (RocketMQ 5.3.x); every other field is optional.
JAVA_REQUIRED: dict[str, set[str]] = {
    "SendMessageRequestHeader": {
        "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
        "bornTimestamp", "flag"},
    "SendMessageRequestHeaderV2": set("abcdefgh"),
    "SendMessageResponseHeader": {"msgId", "queueId", "queueOffset"},
    "PullMessageRequestHeader": {
        "consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag",
        "commitOffset", "suspendTimeoutMillis", "subVersion"},
    "PullMessageResponseHeader": {
        "suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"},
    "QueryConsumerOffsetRequestHeader": {"consumerGroup", "topic", "queueId"},
    "QueryConsumerOffsetResponseHeader": {"offset"},
    "UpdateConsumerOffsetRequestHeader": {"consumerGroup", "topic", "queueId", "commitOffset"},
    "GetMaxOffsetRequestHeader": {"topic", "queueId"},
    "GetMaxOffsetResponseHeader": {"offset"},
    "GetMinOffsetRequestHeader": {"topic", "queueId"},
    "GetMinOffsetResponseHeader": {"offset"},
    "GetEarliestMsgStoretimeRequestHeader": {"topic", "queueId"},
    "GetEarliestMsgStoretimeResponseHeader": {"timestamp"},
    "SearchOffsetRequestHeader": {"topic", "queueId", "timestamp"},
    "SearchOffsetResponseHeader": {"offset"},
    "ViewMessageRequestHeader": {"offset"},
    "GetConsumerListByGroupRequestHeader": {"consumerGroup"},
    "ConsumerSendMsgBackRequestHeader": {"offset", "group", "delayLevel"},
    "EndTransactionRequestHeader": {
        "producerGroup", "tranStateTableOffset", "commitLogOffset", "commitOrRollback", "msgId"},
    "CheckTransactionStateRequestHeader": {"tranStateTableOffset", "commitLogOffset"},
    "NotifyConsumerIdsChangedRequestHeader": {"consumerGroup"},
    "UnregisterClientRequestHeader": {"clientID"},
    "CreateTopicRequestHeader": {
        "topic", "defaultTopic", "readQueueNums", "writeQueueNums", "perm", "topicFilterType",
        "order"},
    "GetRouteInfoRequestHeader": {"topic"},
    "RegisterBrokerRequestHeader": {
        "brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId"},
    "UnRegisterBrokerRequestHeader": {"brokerName", "brokerAddr", "clusterName", "brokerId"},
    "BrokerHeartbeatRequestHeader": {"clusterName", "brokerAddr", "brokerName"},
    "GetBrokerMemberGroupRequestHeader": {"clusterName", "brokerName"},
    "QueryDataVersionRequestHeader": {"brokerName", "brokerAddr", "clusterName", "brokerId"},
    "QueryDataVersionResponseHeader": {"changed"},
    "PopMessageRequestHeader": {
        "consumerGroup", "topic", "queueId", "maxMsgNums", "invisibleTime", "pollTime",
        "bornTime", "initMode"},
    "PopMessageResponseHeader": {"popTime", "invisibleTime", "reviveQid", "restNum"},
    "AckMessageRequestHeader": {"consumerGroup", "topic", "queueId", "extraInfo", "offset"},
    "ChangeInvisibleTimeRequestHeader": {
        "consumerGroup", "topic", "queueId", "extraInfo", "offset", "invisibleTime"},
    "ChangeInvisibleTimeResponseHeader": {"popTime", "invisibleTime", "reviveQid"},
}  # fmt: skip


def sample_value(spec: FieldSpec, salt: int) -> Any:
    if spec.kind == "str":
        return f"v-{spec.wire}-{salt}"
    if spec.kind == "bool":
        return salt % 2 == 0
    if spec.kind == "i32":
        return -(2**31) + salt if salt % 3 == 0 else 2**31 - 1 - salt
    if spec.kind == "i64":
        return 2**62 + salt
    return 1.5 + salt


def sample(cls: type[CommandHeader], salt: int = 0) -> CommandHeader:
    kwargs = {s.attr: sample_value(s, salt + i) for i, s in enumerate(header_fields(cls))}
    return cls(**kwargs)


def required_only(cls: type[CommandHeader]) -> dict[str, str]:
    return {s.wire: sample(cls).to_ext()[s.wire] for s in header_fields(cls) if s.required}


#: Optional fields of ours beyond RocketMQ's (RocketMQ's peers never send them and ignore
#: them): the catch-up position of a replica that lost data (issue 13, docs/ha.md); a name
#: server's refusal of a registration from an older epoch (docs/ha.md, role changes).
OUR_FIELDS: dict[str, set[str]] = {
    "BrokerHeartbeatRequestHeader": {"catchUpOffset", "catchUpEpoch", "unansweredMs"},
    "RegisterBrokerResponseHeader": {"registerRefused"},
}


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda c: c.__name__)
def test_wire_names_match_java(cls: type[CommandHeader]) -> None:
    ours = OUR_FIELDS.get(cls.__name__, set())
    assert not ours & JAVA_FIELDS[cls.__name__]
    assert {s.wire for s in header_fields(cls)} == JAVA_FIELDS[cls.__name__] | ours
    assert {s.wire for s in header_fields(cls) if s.required} == JAVA_REQUIRED.get(
        cls.__name__, set()
    )


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("salt", [0, 1, 2])
def test_round_trip_every_field_set(cls: type[CommandHeader], salt: int) -> None:
    h = sample(cls, salt)
    ext = h.to_ext()
    assert set(ext) == {s.wire for s in header_fields(cls)}
    assert all(isinstance(v, str) for v in ext.values())
    assert cls.from_ext(ext) == h


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda c: c.__name__)
def test_round_trip_required_only(cls: type[CommandHeader]) -> None:
    ext = required_only(cls)
    h = cls.from_ext(ext)
    again = h.to_ext()
    # Fields with Java primitive defaults (committed, unitMode, compressed, ...) are always sent.
    assert {k: again[k] for k in ext} == ext
    assert cls.from_ext(again) == h


@pytest.mark.parametrize(
    ("cls", "wire_name"),
    [(c, s.wire) for c in ALL_HEADERS for s in header_fields(c) if s.required],
    ids=lambda x: x if isinstance(x, str) else x.__name__,
)
def test_missing_required_field_is_named(cls: type[CommandHeader], wire_name: str) -> None:
    ext = required_only(cls)
    del ext[wire_name]
    with pytest.raises(MissingHeaderField) as info:
        cls.from_ext(ext)
    assert info.value.field == wire_name
    assert info.value.header == cls.__name__
    assert f"<{wire_name}>" in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, RmqHaError)
    assert info.value.definite


def test_none_ext_fields_means_empty() -> None:
    with pytest.raises(MissingHeaderField):
        GetMaxOffsetRequestHeader.from_ext(None)
    assert QueryDataVersionResponseHeader.from_ext({"changed": "x"}).changed is False


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("TRUE", True), ("True", True), ("false", False), ("yes", False),
     ("1", False), ("", False), (" true", False)],
)  # fmt: skip
def test_bool_parse_is_java_lenient(value: str, expected: bool) -> None:
    assert QueryDataVersionResponseHeader.from_ext({"changed": value}).changed is expected


@pytest.mark.parametrize(
    "value", ["", " 1", "1 ", "1.0", "0x10", "1e3", "abc", "--1", "١٢", "9223372036854775808"]
)
def test_malformed_long_is_a_typed_error(value: str) -> None:
    with pytest.raises(MalformedHeaderField) as info:
        GetMaxOffsetRequestHeader.from_ext({"topic": "T", "queueId": value})
    assert info.value.field == "queueId"
    assert info.value.value == value
    assert isinstance(info.value, HeaderError)


def test_int_ranges_follow_java_types() -> None:
    base = {"topic": "T", "queueId": "0", "timestamp": "0"}
    ok = SearchOffsetRequestHeader.from_ext({**base, "queueId": "-2147483648"})
    assert ok.queue_id == -(2**31)
    assert SearchOffsetRequestHeader.from_ext({**base, "queueId": "+7"}).queue_id == 7
    with pytest.raises(MalformedHeaderField, match="Java int"):
        SearchOffsetRequestHeader.from_ext({**base, "queueId": "2147483648"})
    big = SearchOffsetRequestHeader.from_ext({**base, "timestamp": "9223372036854775807"})
    assert big.timestamp == 2**63 - 1
    with pytest.raises(MalformedHeaderField, match="Java long"):
        SearchOffsetRequestHeader.from_ext({**base, "timestamp": "-9223372036854775809"})


def test_unknown_ext_fields_are_ignored() -> None:
    h = GetMaxOffsetRequestHeader.from_ext({"topic": "T", "queueId": "3", "zzz": "?"})
    assert h == GetMaxOffsetRequestHeader(topic="T", queue_id=3)


def test_none_fields_are_omitted_and_java_defaults_are_sent() -> None:
    assert GetMaxOffsetRequestHeader(topic="T", queue_id=1).to_ext() == {
        "topic": "T", "queueId": "1", "committed": "true"}  # fmt: skip
    ext = ConsumerSendMsgBackRequestHeader(offset=5, group="G", delay_level=0).to_ext()
    assert ext == {"offset": "5", "group": "G", "delayLevel": "0", "unitMode": "false"}
    reg = RegisterBrokerRequestHeader(
        broker_name="b", broker_addr="a:1", cluster_name="c", ha_server_addr="a:2", broker_id=0
    ).to_ext()
    assert reg["compressed"] == "false" and reg["bodyCrc32"] == "0"
    assert "__ZONE_NAME" not in reg and "heartbeatTimeoutMillis" not in reg


def test_create_topic_order_is_required_even_with_a_default() -> None:
    ext = CreateTopicRequestHeader(
        topic="T", default_topic="TBW102", read_queue_nums=4, write_queue_nums=4, perm=6,
        topic_filter_type="SINGLE_TAG",
    ).to_ext()  # fmt: skip
    assert ext["order"] == "false"
    del ext["order"]
    with pytest.raises(MissingHeaderField, match="<order>"):
        CreateTopicRequestHeader.from_ext(ext)


def test_special_wire_names() -> None:
    u = UnregisterClientRequestHeader(client_id="c1", producer_group="P")
    assert u.to_ext() == {"clientID": "c1", "producerGroup": "P"}
    p = PullMessageRequestHeader.from_ext(
        {"consumerGroup": "G", "topic": "T", "queueId": "0", "queueOffset": "0",
         "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0",
         "suspendTimeoutMillis": "15000", "subVersion": "0", "proxyFrowardClientId": "x"}
    )  # fmt: skip
    assert p.proxy_forward_client_id == "x"
    hb = BrokerHeartbeatRequestHeader(
        cluster_name="c", broker_addr="a", broker_name="b", heartbeat_timeout_mills=3000
    )
    assert hb.to_ext()["heartbeatTimeoutMills"] == "3000"


def test_search_offset_boundary_type() -> None:
    base = {"topic": "T", "queueId": "0", "timestamp": "1"}
    assert not SearchOffsetRequestHeader.from_ext(base).is_upper
    assert SearchOffsetRequestHeader.from_ext({**base, "boundaryType": "UPPER"}).is_upper
    assert SearchOffsetRequestHeader.from_ext({**base, "boundaryType": "upper"}).is_upper
    assert not SearchOffsetRequestHeader.from_ext({**base, "boundaryType": "LOWER"}).is_upper


# --- SEND_MESSAGE (10) <-> SEND_MESSAGE_V2 (310) -----------------------------------------------

V1_TO_V2 = {
    "producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d",
    "queueId": "e", "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i",
    "reconsumeTimes": "j", "unitMode": "k", "maxReconsumeTimes": "l", "batch": "m",
    "bname": "n",
}  # fmt: skip

V1_EXT = {
    "producerGroup": "PG", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
    "queueId": "3", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
    "properties": "UNIQ_KEY\x01abc\x02WAIT\x01true\x02", "reconsumeTimes": "0",
    "unitMode": "false", "maxReconsumeTimes": "16", "batch": "false", "bname": "broker-a",
}  # fmt: skip


def test_v1_to_v2_key_mapping() -> None:
    v1 = SendMessageRequestHeader.from_ext(V1_EXT)
    v2_ext = v1.to_v2().to_ext()
    expected = {V1_TO_V2[k]: v for k, v in V1_EXT.items()}
    expected["bname"] = "broker-a"  # base RPC fields are kept as well
    assert v2_ext == expected


def test_v2_to_v1_and_back() -> None:
    v2_ext = {V1_TO_V2[k]: v for k, v in V1_EXT.items()}
    v1 = SendMessageRequestHeaderV2.from_ext(v2_ext).to_v1()
    assert v1.to_ext() == V1_EXT
    assert v1.to_v2().to_v1() == v1
    assert v1.max_reconsume_times == 16 and v1.bname == "broker-a"


@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, 325])
def test_parse_send_header_v2_codes(code: int) -> None:
    v2_ext = {V1_TO_V2[k]: v for k, v in V1_EXT.items()}
    assert parse_send_message_header(code, v2_ext) == SendMessageRequestHeader.from_ext(V1_EXT)


def test_parse_send_header_v1_code() -> None:
    assert parse_send_message_header(RequestCode.SEND_MESSAGE, V1_EXT).topic == "T"
    with pytest.raises(MissingHeaderField, match="<producerGroup>"):
        parse_send_message_header(RequestCode.SEND_MESSAGE, {"a": "PG"})
    with pytest.raises(MissingHeaderField, match="<b>"):
        parse_send_message_header(RequestCode.SEND_MESSAGE_V2, {"a": "PG"})


def test_go_client_send_v2_with_empty_properties() -> None:
    # rocketmq-client-go always sends every key, some of them empty strings.
    ext = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1", "h": "0",
           "i": "", "j": "0", "k": "false", "l": "0", "m": "false", "n": ""}  # fmt: skip
    v1 = parse_send_message_header(RequestCode.SEND_MESSAGE_V2, ext)
    assert v1.properties == "" and v1.bname == "" and v1.queue_id == 1


def test_headers_are_keyword_only_slotted_dataclasses() -> None:
    for cls in ALL_HEADERS:
        assert dataclasses.is_dataclass(cls)
        assert "__slots__" in cls.__dict__
    positional: Any = GetMaxOffsetRequestHeader
    with pytest.raises(TypeError):
        positional("T", 1)


def test_camel() -> None:
    assert camel("producer_group") == "producerGroup"
    assert camel("body_crc32") == "bodyCrc32"
    assert camel("lo") == "lo"


def test_header_codes_are_request_codes() -> None:
    for cls in ALL_HEADERS:
        for code in cls.CODES:
            RequestCode(code)
