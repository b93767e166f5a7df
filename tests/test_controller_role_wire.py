"""Controller headers and bodies (RocketMQ's names) and the request/response mapping."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rmq_ha.controller import messages as m
from rmq_ha.controller import wire
from rmq_ha.protocol import models
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headerbase import FieldSpec
from rmq_ha.protocol.headers import (
    CONTROLLER_REQUEST_HEADERS,
    CONTROLLER_RESPONSE_HEADERS,
    CommandHeader,
    ElectMasterRequestHeader,
    header_fields,
)
from rmq_ha.protocol.jsonmodel import json_keys

#: Java field names, apache/rocketmq HEAD remoting/.../protocol/header/controller/** and
#: header/NotifyBrokerRoleChangedRequestHeader (registerCheckCode on the register request is
#: our extension, ignored by RocketMQ).
JAVA_FIELDS: dict[str, set[str]] = {
    "AlterSyncStateSetRequestHeader": {"brokerName", "masterBrokerId", "masterEpoch", "invokeTime"},
    "AlterSyncStateSetResponseHeader": {"newSyncStateSetEpoch"},
    "ElectMasterRequestHeader": {
        "clusterName", "brokerName", "brokerId", "designateElect", "invokeTime"},
    "ElectMasterResponseHeader": {
        "masterBrokerId", "masterAddress", "masterEpoch", "syncStateSetEpoch"},
    "RegisterBrokerToControllerRequestHeader": {
        "clusterName", "brokerName", "brokerId", "brokerAddress", "invokeTime",
        "registerCheckCode"},
    "RegisterBrokerToControllerResponseHeader": {
        "clusterName", "brokerName", "masterBrokerId", "masterAddress", "masterEpoch",
        "syncStateSetEpoch"},
    "GetReplicaInfoRequestHeader": {"brokerName"},
    "GetReplicaInfoResponseHeader": {"masterBrokerId", "masterAddress", "masterEpoch"},
    "GetMetaDataResponseHeader": {
        "group", "controllerLeaderId", "controllerLeaderAddress", "isLeader", "peers"},
    "CleanControllerBrokerDataRequestHeader": {
        "clusterName", "brokerName", "brokerControllerIdsToClean", "isCleanLivingBroker",
        "invokeTime"},
    "GetNextBrokerIdRequestHeader": {"clusterName", "brokerName"},
    "GetNextBrokerIdResponseHeader": {"clusterName", "brokerName", "nextBrokerId"},
    "ApplyBrokerIdRequestHeader": {
        "clusterName", "brokerName", "appliedBrokerId", "registerCheckCode"},
    "ApplyBrokerIdResponseHeader": {"clusterName", "brokerName"},
    "NotifyBrokerRoleChangedRequestHeader": {
        "masterAddress", "masterEpoch", "syncStateSetEpoch", "masterBrokerId"},
}  # fmt: skip

JAVA_REQUIRED: dict[str, set[str]] = {
    "ElectMasterRequestHeader": {"clusterName", "brokerName", "brokerId", "designateElect"},
    "CleanControllerBrokerDataRequestHeader": {"brokerName"},
}

ALL = CONTROLLER_REQUEST_HEADERS + CONTROLLER_RESPONSE_HEADERS


def sample_value(spec: FieldSpec, salt: int) -> Any:
    if spec.kind == "str":
        return f"v-{spec.wire}-{salt}"
    if spec.kind == "bool":
        return salt % 2 == 0
    if spec.kind == "i32":
        return 2**31 - 1 - salt
    return 2**62 + salt


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_wire_names_and_required_fields_match_java(cls: type[CommandHeader]) -> None:
    assert {s.wire for s in header_fields(cls)} == JAVA_FIELDS[cls.__name__]
    required = {s.wire for s in header_fields(cls) if s.required}
    assert required == JAVA_REQUIRED.get(cls.__name__, set())


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
@pytest.mark.parametrize("salt", [0, 1])
def test_headers_round_trip(cls: type[CommandHeader], salt: int) -> None:
    h = cls(**{s.attr: sample_value(s, salt + i) for i, s in enumerate(header_fields(cls))})
    ext = h.to_ext()
    assert set(ext) == {s.wire for s in header_fields(cls)}
    assert cls.from_ext(ext) == h


def test_elect_header_defaults_as_java() -> None:
    ext = ElectMasterRequestHeader().to_ext()
    assert ext["brokerId"] == "-1" and ext["designateElect"] == "false"
    assert int(ext["invokeTime"]) > 1_600_000_000_000


def test_body_json_keys_are_rocketmqs() -> None:
    assert json_keys(models.SyncStateSet) == ("syncStateSet", "syncStateSetEpoch")
    assert json_keys(models.ElectMasterResponseBody) == ("brokerMemberGroup", "syncStateSet")
    assert json_keys(models.BrokerReplicasInfo) == ("replicasInfoTable",)
    assert json_keys(models.ReplicasInfo) == (
        "masterBrokerId", "masterAddress", "masterEpoch", "syncStateSetEpoch",
        "inSyncReplicas", "notInSyncReplicas",
    )  # fmt: skip
    assert json_keys(models.ReplicaIdentity) == ("brokerName", "brokerId", "brokerAddress", "alive")
    assert json_keys(models.EpochEntry) == ("epoch", "startOffset", "endOffset")
    assert json_keys(models.EpochEntryCache) == (
        "clusterName",
        "brokerName",
        "brokerId",
        "epochList",
        "maxOffset",
    )


def test_sync_state_set_parses_fastjson_output() -> None:
    java = b'{"syncStateSet":[2,1],"syncStateSetEpoch":3}'
    assert models.SyncStateSet.from_json(java) == models.SyncStateSet({1, 2}, 3)
    assert json.loads(models.SyncStateSet({2, 1}, 3).to_json())["syncStateSet"] == [1, 2]


REQUESTS: list[m.Request] = [
    m.GetNextBrokerIdRequest("c", "b"),
    m.ApplyBrokerIdRequest("c", "b", 3, "127.0.0.1:10911;1700000000000"),
    m.RegisterBrokerRequest("c", "b", 3, "127.0.0.1:10911"),
    m.RegisterBrokerRequest("c", "b", 3, "127.0.0.1:10911", "127.0.0.1:10911;1"),
    m.AlterSyncStateSetRequest("b", 1, 4, frozenset({1, 2}), 7),
    m.ElectMasterRequest.of_broker_trigger("c", "b", 2),
    m.ElectMasterRequest.of_controller_trigger("b"),
    m.ElectMasterRequest.of_admin_trigger("c", "b", 2),
    m.GetReplicaInfoRequest("b"),
    m.GetSyncStateDataRequest(("a", "b")),
    m.CleanBrokerDataRequest("c", "b"),
    m.CleanBrokerDataRequest("c", "b", "1;2", True),
]


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: type(r).__name__)
def test_requests_round_trip(req: m.Request) -> None:
    cmd = wire.request_command(req)
    assert cmd.code == wire.REQUEST_CODES[type(req)]
    again = RemotingCommand.from_wire(cmd.to_wire())
    assert wire.decode_request(again) == req


MASTER = {"master_broker_id": 2, "master_address": "h:2", "master_epoch": 5,
          "sync_state_set_epoch": 6, "sync_state_set": frozenset({2})}  # fmt: skip
RESPONSES: list[tuple[m.Request, m.Response]] = [
    (REQUESTS[0], m.GetNextBrokerIdResponse(cluster_name="c", broker_name="b", next_broker_id=4)),
    (REQUESTS[1], m.ApplyBrokerIdResponse(cluster_name="c", broker_name="b")),
    (REQUESTS[1], m.ApplyBrokerIdResponse(code=Code.CONTROLLER_BROKER_ID_INVALID,
                                          remark="taken", cluster_name="c", broker_name="b")),
    (REQUESTS[2], m.RegisterBrokerResponse(cluster_name="c", broker_name="b", **MASTER)),
    (REQUESTS[2], m.RegisterBrokerResponse(cluster_name="c", broker_name="b", master_epoch=5,
                                           sync_state_set_epoch=6)),
    (REQUESTS[4], m.AlterSyncStateSetResponse(new_sync_state_set_epoch=8,
                                              sync_state_set=frozenset({1, 2}))),
    (REQUESTS[4], m.AlterSyncStateSetResponse(code=Code.CONTROLLER_FENCED_MASTER_EPOCH,
                                              remark="masterEpoch is 5")),
    (REQUESTS[5], m.ElectMasterResponse(**MASTER, broker_addrs={1: "h:1", 2: "h:2"})),
    (REQUESTS[5], m.ElectMasterResponse(code=Code.CONTROLLER_MASTER_NOT_AVAILABLE, remark="x",
                                        master_epoch=5, sync_state_set_epoch=6,
                                        sync_state_set=frozenset({1}))),
    (REQUESTS[8], m.GetReplicaInfoResponse(**MASTER)),
    (REQUESTS[8], m.GetReplicaInfoResponse(code=Code.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                                           remark="Broker metadata is not existed")),
    (REQUESTS[9], m.GetSyncStateDataResponse(replicas_info={"b": m.ReplicasInfo(
        2, "h:2", 5, 6, (m.ReplicaIdentity("b", 2, "h:2", True),),
        (m.ReplicaIdentity("b", 1, "h:1", False),))})),
    (REQUESTS[10], m.CleanBrokerDataResponse()),
]  # fmt: skip


@pytest.mark.parametrize(("req", "resp"), RESPONSES, ids=lambda x: type(x).__name__)
def test_responses_round_trip(req: m.Request, resp: m.Response) -> None:
    cmd = wire.request_command(req)
    answer = wire.encode_response(cmd, req, resp, cluster="c")
    assert answer.opaque == cmd.opaque and answer.code == resp.code
    again = RemotingCommand.from_wire(answer.to_wire())
    assert wire.decode_response(req, again) == resp


def test_elect_answer_carries_the_member_group_as_rocketmq() -> None:
    req, resp = RESPONSES[7]
    answer = wire.encode_response(wire.request_command(req), req, resp, cluster="c")
    body = json.loads(answer.body or b"")
    assert body["brokerMemberGroup"] == {
        "cluster": "c", "brokerName": "b", "brokerAddrs": {"1": "h:1", "2": "h:2"}}  # fmt: skip
    assert body["syncStateSet"] == [2]
    assert answer.ext_fields == {"masterBrokerId": "2", "masterAddress": "h:2",
                                 "masterEpoch": "5", "syncStateSetEpoch": "6"}  # fmt: skip


@pytest.mark.parametrize(
    ("code", "ext", "body", "missing"),
    [
        (RC.CONTROLLER_APPLY_BROKER_ID, {"brokerName": "b"}, None, "appliedBrokerId"),
        (RC.CONTROLLER_REGISTER_BROKER, {"brokerName": "b"}, None, "brokerId"),
        (RC.CONTROLLER_GET_REPLICA_INFO, {}, None, "brokerName"),
        (RC.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterEpoch": "1"},
         b'{"syncStateSet":[1]}', "masterBrokerId"),
        (RC.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": "1",
                                              "masterEpoch": "1"}, None, "SyncStateSet"),
        (RC.CONTROLLER_GET_SYNC_STATE_DATA, {}, b'{"a": 1}', "array"),
    ],
)  # fmt: skip
def test_incomplete_requests_are_invalid(
    code: int, ext: dict[str, str], body: bytes | None, missing: str
) -> None:
    with pytest.raises(wire.InvalidControllerRequest, match=missing):
        wire.decode_request(RemotingCommand.request(code, ext, body))
