"""JSON body models: RocketMQ field names, round trips, lenient parsing of Java output."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from rmq_ha.protocol.json_compat import BodyDecodeError
from rmq_ha.protocol.jsonmodel import JsonModel, json_keys
from rmq_ha.protocol.models import (
    MASTER_ID,
    BrokerData,
    BrokerMemberGroup,
    ClusterInfo,
    ConsumeFromWhere,
    ConsumerData,
    ConsumerListByGroupResponseBody,
    ConsumerOffsetSerializeWrapper,
    ConsumeType,
    DataVersion,
    GetBrokerMemberGroupResponseBody,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    MessageQueue,
    ProducerData,
    QueueData,
    SubscriptionData,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    UnlockBatchRequestBody,
)

MQ1 = MessageQueue(topic="T", broker_name="broker-a", queue_id=0)
MQ2 = MessageQueue(topic="T", broker_name="broker-b", queue_id=3)
BD = BrokerData(
    cluster="DefaultCluster",
    broker_name="broker-a",
    broker_addrs={0: "127.0.0.1:10911", 1: "127.0.0.1:10921"},
    zone_name="z1",
    enable_acting_master=True,
)
DV = DataVersion(state_version=3, timestamp=1_700_000_000_000, counter=42)

SAMPLES: list[JsonModel] = [
    DV,
    TopicConfig(topic_name="T", read_queue_nums=8, write_queue_nums=4, perm=4, order=True,
                topic_sys_flag=1, attributes={"+message.type": "FIFO"}),
    TopicConfigSerializeWrapper(topic_config_table={"T": TopicConfig(topic_name="T")},
                                data_version=DV),
    TopicConfigAndMappingSerializeWrapper(
        topic_config_table={"T": TopicConfig(topic_name="T")}, data_version=DV,
        topic_queue_mapping_info_map={"T": {"topic": "T", "totalQueues": 2, "bname": "b"}},
        mapping_data_version=DataVersion(counter=1)),
    KVTable(table={"k": "v", "k2": ""}),
    ConsumerOffsetSerializeWrapper(offset_table={"T@G": {0: 10, 1: 2**40}}, data_version=DV),
    ConsumerOffsetSerializeWrapper(offset_table={}),
    QueueData(broker_name="broker-a", read_queue_nums=4, write_queue_nums=4, perm=6,
              topic_sys_flag=0),
    BD,
    TopicRouteData(order_topic_conf="broker-a:4", queue_datas=[QueueData(broker_name="b")],
                   broker_datas=[BD], filter_server_table={"127.0.0.1:10911": ["f1"]}),
    TopicRouteData(topic_queue_mapping_by_broker={"b": {"topic": "T"}}),
    ClusterInfo(broker_addr_table={"broker-a": BD},
                cluster_addr_table={"DefaultCluster": {"broker-a", "broker-b"}}),
    BrokerMemberGroup(cluster="c", broker_name="b", broker_addrs={0: "a:1", 2: "a:2"}),
    GetBrokerMemberGroupResponseBody(broker_member_group=BrokerMemberGroup(cluster="c")),
    GetBrokerMemberGroupResponseBody(),
    SubscriptionData(topic="T", sub_string="a || b", tags_set={"a", "b"}, code_set={97, 98},
                     sub_version=123),
    ProducerData(group_name="PG"),
    ConsumerData(group_name="CG", consume_type=ConsumeType.CONSUME_PASSIVELY,
                 message_model=MessageModel.CLUSTERING,
                 consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 subscription_data_set=[SubscriptionData(topic="T", sub_string="*")],
                 unit_mode=True),
    HeartbeatData(client_id="10.0.0.1@123", producer_data_set=[ProducerData(group_name="PG")],
                  consumer_data_set=[ConsumerData(group_name="CG")], heartbeat_fingerprint=-7,
                  without_sub=True),
    MQ1,
    LockBatchRequestBody(consumer_group="CG", client_id="c1", only_this_broker=True,
                         mq_set={MQ1, MQ2}),
    LockBatchResponseBody(lock_ok_mq_set={MQ2}),
    UnlockBatchRequestBody(consumer_group="CG", client_id="c1", mq_set={MQ1}),
    GetConsumerListByGroupResponseBody(consumer_id_list=["c1", "c2"]),
]  # fmt: skip


@pytest.mark.parametrize("model", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(model: JsonModel) -> None:
    body = model.to_json()
    assert type(model).from_json(body) == model
    # Standard JSON (quoted keys), compact.
    parsed = json.loads(body)
    assert isinstance(parsed, dict)
    assert b": " not in body and b", " not in body


@pytest.mark.parametrize("model", SAMPLES, ids=lambda m: type(m).__name__)
def test_empty_body_gives_defaults(model: JsonModel) -> None:
    cls = type(model)
    assert cls.from_json(b"") == cls()
    assert cls.from_json(None) == cls()
    assert cls.from_json(b"{}") == cls()


def test_topic_route_data_golden_shape() -> None:
    route = TopicRouteData(
        order_topic_conf="broker-a:8",
        queue_datas=[QueueData(broker_name="broker-a", read_queue_nums=8, write_queue_nums=8,
                               perm=6, topic_sys_flag=0)],
        broker_datas=[BrokerData(cluster="DefaultCluster", broker_name="broker-a",
                                 broker_addrs={0: "127.0.0.1:10911", 1: "127.0.0.1:10921"})],
    )  # fmt: skip
    assert route.to_json() == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:10921"},'
        b'"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],'
        b'"filterServerTable":{},"orderTopicConf":"broker-a:8",'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":8,'
        b'"topicSysFlag":0,"writeQueueNums":8}]}'
    )
    obj = json.loads(route.to_json())
    assert set(obj) == {"orderTopicConf", "queueDatas", "brokerDatas", "filterServerTable"}
    assert set(obj["queueDatas"][0]) == {
        "brokerName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag"}  # fmt: skip
    with_zone = BrokerData(cluster="c", broker_name="b", zone_name="z").to_obj()
    assert set(with_zone) == {"cluster", "brokerName", "brokerAddrs", "zoneName",
                              "enableActingMaster"}  # fmt: skip


def test_null_fields_are_omitted_like_fastjson() -> None:
    obj = json.loads(TopicRouteData().to_json())
    assert obj == {"brokerDatas": [], "filterServerTable": {}, "queueDatas": []}


def test_topic_route_from_fastjson_nonstandard_output() -> None:
    # What a name server sends to a client with version < V4_9_4 (bare Long keys).
    raw = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
        b'"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],'
        b'"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
        b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    route = TopicRouteData.from_json(raw)
    assert route.order_topic_conf is None
    assert route.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert route.queue_datas[0].write_queue_nums == 4


def test_go_client_spelling_topic_syn_flag() -> None:
    assert QueueData.from_json(b'{"brokerName":"b","topicSynFlag":3}').topic_sys_flag == 3
    assert QueueData.from_json(b'{"topicSysFlag":1,"topicSynFlag":3}').topic_sys_flag == 1


def test_select_broker_addr() -> None:
    assert BD.select_broker_addr() == "127.0.0.1:10911"
    assert BD.master_addr == BD.broker_addrs[MASTER_ID]
    slaves = BrokerData(broker_addrs={1: "s1", 2: "s2"})
    assert slaves.master_addr is None
    rng = random.Random(7)
    picks = {slaves.select_broker_addr(rng) for _ in range(50)}
    assert picks == {"s1", "s2"}
    assert BrokerData().select_broker_addr() is None


def test_cluster_info_from_fastjson() -> None:
    raw = (
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"a:1",1:"a:2"},'
        b'"brokerName":"broker-a","cluster":"C1","enableActingMaster":true}},'
        b'"clusterAddrTable":{"C1":["broker-a","broker-b"]}}'
    )
    ci = ClusterInfo.from_json(raw)
    assert ci.cluster_addr_table == {"C1": {"broker-a", "broker-b"}}
    assert ci.broker_addr_table["broker-a"].enable_acting_master is True
    assert ci.retrieve_all_addr_by_cluster("C1") == ["a:1", "a:2"]
    assert ci.retrieve_all_addr_by_cluster("nope") == []
    assert ci.retrieve_all_cluster_names() == ["C1"]
    # Sets go out as sorted arrays.
    assert json.loads(ci.to_json())["clusterAddrTable"] == {"C1": ["broker-a", "broker-b"]}


def test_consumer_offsets_with_bare_integer_keys_and_extra_fields() -> None:
    # ConsumerOffsetManager.encode() output: bare Integer keys, plus keys we do not model.
    raw = (
        b'{"dataVersion":{"counter":7,"stateVersion":2,"timestamp":1},'
        b'"offsetTable":{"T@G":{0:15,1:0},"%RETRY%G@G":{0:3}},'
        b'"pullOffsetTable":{"T@G":{0:15}}}'
    )
    w = ConsumerOffsetSerializeWrapper.from_json(raw)
    assert w.offset_table == {"T@G": {0: 15, 1: 0}, "%RETRY%G@G": {0: 3}}
    assert w.data_version == DataVersion(state_version=2, timestamp=1, counter=7)


def test_data_version_order_and_next() -> None:
    a = DataVersion(state_version=1, timestamp=500, counter=9)
    assert a.compare(a) == 0
    assert a.compare(DataVersion(state_version=2)) == -1  # stateVersion first
    assert a.compare(DataVersion(state_version=1, counter=8, timestamp=999)) == 1  # then counter
    assert a.compare(DataVersion(state_version=1, counter=9, timestamp=501)) == -1  # then time
    b = a.next_version(now_ms=600)
    assert (b.state_version, b.timestamp, b.counter) == (1, 600, 10)
    assert a.next_version(now_ms=700, state_version=5).state_version == 5
    assert DataVersion.initial(123, state_version=4) == DataVersion(4, 123, 0)
    assert json.loads(a.to_json()) == {"counter": 9, "stateVersion": 1, "timestamp": 500}


def test_heartbeat_from_java_client() -> None:
    # Shape of MQClientInstance's heartbeat as fastjson writes it (Sets as arrays).
    raw = json.dumps({
        "clientID": "10.1.5.9@40700#955220087822500",
        "consumerDataSet": [{
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_PASSIVELY",
            "groupName": "CG", "messageModel": "CLUSTERING",
            "subscriptionDataSet": [{
                "classFilterMode": False, "codeSet": [97], "expressionType": "TAG",
                "subString": "a", "subVersion": 1700000000000, "tagsSet": ["a"], "topic": "T"}],
            "unitMode": False}],
        "heartbeatFingerprint": 0,
        "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}, {"groupName": "PG"}],
        "withoutSub": False,
    })  # fmt: skip
    hb = HeartbeatData.from_json(raw)
    assert hb.client_id.startswith("10.1.5.9@")
    assert [p.group_name for p in hb.producer_data_set] == ["CLIENT_INNER_PRODUCER", "PG"]
    sub = hb.consumer_data_set[0].subscription_data_set[0]
    assert sub.tags_set == {"a"} and sub.code_set == {97} and sub.sub_version == 1700000000000
    assert hb.consumer_data_set[0].consume_type == ConsumeType.CONSUME_PASSIVELY
    assert json.loads(hb.to_json()) == json.loads(raw)


def test_heartbeat_from_go_client() -> None:
    # rocketmq-client-go: no fingerprint/withoutSub keys.
    raw = (
        b'{"clientID":"c@1","producerDataSet":[],"consumerDataSet":[{"groupName":"G",'
        b'"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING",'
        b'"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{'
        b'"classFilterMode":false,"topic":"T","subString":"*","tagsSet":[],"codeSet":[],'
        b'"subVersion":0,"expressionType":"TAG"}],"unitMode":false}]}'
    )
    hb = HeartbeatData.from_json(raw)
    assert hb.heartbeat_fingerprint == 0 and hb.without_sub is False
    assert hb.consumer_data_set[0].subscription_data_set[0].sub_string == "*"


def test_without_sub_alias() -> None:
    assert HeartbeatData.from_json(b'{"isWithoutSub":true}').without_sub is True
    assert "withoutSub" in HeartbeatData().to_obj()


def test_lock_bodies() -> None:
    body = LockBatchRequestBody(consumer_group="G", client_id="c", mq_set={MQ2, MQ1})
    obj = json.loads(body.to_json())
    assert obj == {
        "clientId": "c", "consumerGroup": "G", "onlyThisBroker": False,
        "mqSet": [{"brokerName": "broker-a", "queueId": 0, "topic": "T"},
                  {"brokerName": "broker-b", "queueId": 3, "topic": "T"}],
    }  # fmt: skip
    resp = LockBatchResponseBody.from_json(
        b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}'
    )
    assert resp.lock_ok_mq_set == {MQ1}
    assert json_keys(LockBatchResponseBody) == ("lockOKMQSet",)
    assert json_keys(UnlockBatchRequestBody) == json_keys(LockBatchRequestBody)
    assert sorted([MQ2, MQ1]) == [MQ1, MQ2]


def test_member_group() -> None:
    g = BrokerMemberGroup.from_json(b'{"brokerAddrs":{2:"a:2",1:"a:1"},"brokerName":"b"}')
    assert g.minimum_broker_id() == 1
    assert BrokerMemberGroup().minimum_broker_id() == 0
    wrapped = GetBrokerMemberGroupResponseBody.from_json(
        b'{"brokerMemberGroup":{"brokerAddrs":{0:"m"},"brokerName":"b","cluster":"c"}}'
    )
    assert wrapped.broker_member_group == BrokerMemberGroup("c", "b", {0: "m"})


def test_consumer_list_alias() -> None:
    assert ConsumerListByGroupResponseBody is GetConsumerListByGroupResponseBody
    body = GetConsumerListByGroupResponseBody.from_json(b'{"consumerIdList":["a","b"]}')
    assert body.consumer_id_list == ["a", "b"]


def test_topic_config_json_names_and_defaults() -> None:
    obj = json.loads(TopicConfig(topic_name="T").to_json())
    assert obj == {
        "attributes": {}, "order": False, "perm": 6, "readQueueNums": 16, "topicFilterType":
        "SINGLE_TAG", "topicName": "T", "topicSysFlag": 0, "writeQueueNums": 16,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"perm":"6"}', QueueData(perm=6)),  # numeric strings
        (b'{"perm":6.0}', QueueData(perm=6)),
        (b'{"brokerName":7}', QueueData(broker_name="7")),
        (b'{"brokerName":null,"perm":null}', QueueData()),  # null keeps defaults
        (b'{"unknown":{"x":[1]},"perm":2}', QueueData(perm=2)),  # unknown keys ignored
    ],
)
def test_lenient_scalars(raw: bytes, expected: QueueData) -> None:
    assert QueueData.from_json(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(b'{"enableActingMaster":"true"}', True), (b'{"enableActingMaster":1}', True),
     (b'{"enableActingMaster":"FALSE"}', False), (b'{"enableActingMaster":0}', False)],
)  # fmt: skip
def test_lenient_booleans(raw: bytes, expected: bool) -> None:
    assert BrokerData.from_json(raw).enable_acting_master is expected


@pytest.mark.parametrize(
    ("cls", "raw", "path"),
    [
        (QueueData, b'{"perm":"rw"}', "$.perm"),
        (QueueData, b'{"perm":true}', "$.perm"),
        (BrokerData, b'{"brokerAddrs":{"x":"a"}}', "$.brokerAddrs"),
        (BrokerData, b'{"brokerAddrs":[1]}', "$.brokerAddrs"),
        (BrokerData, b'{"enableActingMaster":"yes"}', "$.enableActingMaster"),
        (TopicRouteData, b'{"queueDatas":[{"perm":"x"}]}', "$.queueDatas[0].perm"),
        (TopicRouteData, b'{"queueDatas":{}}', "$.queueDatas"),
        (TopicRouteData, b"[]", "$"),
        (ClusterInfo, b'{"clusterAddrTable":{"c":"b"}}', "$.clusterAddrTable.c"),
        (KVTable, b'{"table":{"k":[1]}}', "$.table.k"),
    ],
)
def test_wrong_shapes_raise_with_path(cls: type[JsonModel], raw: bytes, path: str) -> None:
    with pytest.raises(BodyDecodeError) as info:
        cls.from_json(raw)
    assert info.value.path.startswith(path)


def test_every_model_key_is_camel_case_or_java_name() -> None:
    for model in SAMPLES:
        for key in json_keys(type(model)):
            assert "_" not in key, key


def _walk(o: Any) -> None:
    if isinstance(o, dict):
        for k, v in o.items():
            assert isinstance(k, str)
            _walk(v)
    elif isinstance(o, list):
        for v in o:
            _walk(v)


@pytest.mark.parametrize("model", SAMPLES, ids=lambda m: type(m).__name__)
def test_to_obj_is_plain_json(model: JsonModel) -> None:
    obj = model.to_obj()
    _walk(obj)
    assert json.loads(json.dumps(obj)) == json.loads(model.to_json())
