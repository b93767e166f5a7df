"""Controller requests and responses <-> remoting commands (RocketMQ's headers and bodies).

Server side: `decode_request` turns a command into a `messages` request (raising
`InvalidControllerRequest` for a missing id or a malformed body, answered with
CONTROLLER_INVALID_REQUEST) and `encode_response` turns a handler's response into the answer.
Client side (brokers in tests, the admin tool, the benchmark): `request_command` and
`decode_response`, the inverses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from rmq_ha.controller import messages as m
from rmq_ha.protocol import models
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    ApplyBrokerIdResponseHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
)
from rmq_ha.protocol.json_compat import BodyDecodeError

#: Request code of each request type.
REQUEST_CODES: dict[type, int] = {
    m.AlterSyncStateSetRequest: RC.CONTROLLER_ALTER_SYNC_STATE_SET,
    m.ElectMasterRequest: RC.CONTROLLER_ELECT_MASTER,
    m.RegisterBrokerRequest: RC.CONTROLLER_REGISTER_BROKER,
    m.GetReplicaInfoRequest: RC.CONTROLLER_GET_REPLICA_INFO,
    m.GetSyncStateDataRequest: RC.CONTROLLER_GET_SYNC_STATE_DATA,
    m.CleanBrokerDataRequest: RC.CLEAN_BROKER_DATA,
    m.GetNextBrokerIdRequest: RC.CONTROLLER_GET_NEXT_BROKER_ID,
    m.ApplyBrokerIdRequest: RC.CONTROLLER_APPLY_BROKER_ID,
}


class InvalidControllerRequest(ValueError):
    """A request that decodes but lacks what the controller needs (answered 2005)."""


def _need(value: Any, name: str) -> Any:
    if value is None:
        raise InvalidControllerRequest(f"{name} is required")
    return value


def _sync_state_set(body: bytes | None, required: bool) -> models.SyncStateSet:
    if not body:
        if required:
            raise InvalidControllerRequest("a SyncStateSet body is required")
        return models.SyncStateSet()
    try:
        return models.SyncStateSet.from_json(body)
    except BodyDecodeError as e:
        raise InvalidControllerRequest(f"bad SyncStateSet body: {e}") from None


# --- server: command -> request ------------------------------------------------------------


def _alter(cmd: RemotingCommand) -> m.Request:
    h = AlterSyncStateSetRequestHeader.from_ext(cmd.ext_fields)
    body = _sync_state_set(cmd.body, required=True)
    return m.AlterSyncStateSetRequest(
        broker_name=_need(h.broker_name, "brokerName"),
        master_broker_id=_need(h.master_broker_id, "masterBrokerId"),
        master_epoch=_need(h.master_epoch, "masterEpoch"),
        sync_state_set=frozenset(body.sync_state_set),
        sync_state_set_epoch=body.sync_state_set_epoch,
    )


def _elect(cmd: RemotingCommand) -> m.Request:
    h = ElectMasterRequestHeader.from_ext(cmd.ext_fields)
    broker_id = None if h.broker_id == -1 else h.broker_id
    return m.ElectMasterRequest(h.broker_name, h.cluster_name, broker_id, h.designate_elect)


def _register(cmd: RemotingCommand) -> m.Request:
    h = RegisterBrokerToControllerRequestHeader.from_ext(cmd.ext_fields)
    return m.RegisterBrokerRequest(
        cluster_name=h.cluster_name or "",
        broker_name=_need(h.broker_name, "brokerName"),
        broker_id=_need(h.broker_id, "brokerId"),
        broker_address=h.broker_address or "",
        register_check_code=h.register_check_code,
    )


def _replica_info(cmd: RemotingCommand) -> m.Request:
    h = GetReplicaInfoRequestHeader.from_ext(cmd.ext_fields)
    return m.GetReplicaInfoRequest(_need(h.broker_name, "brokerName"))


def _sync_state_data(cmd: RemotingCommand) -> m.Request:
    if not cmd.body:
        return m.GetSyncStateDataRequest(())
    try:
        names = json.loads(cmd.body)
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidControllerRequest("the body must be a JSON array of broker names")
    return m.GetSyncStateDataRequest(tuple(names))


def _clean(cmd: RemotingCommand) -> m.Request:
    h = CleanControllerBrokerDataRequestHeader.from_ext(cmd.ext_fields)
    return m.CleanBrokerDataRequest(
        h.cluster_name or "",
        h.broker_name,
        h.broker_controller_ids_to_clean,
        h.is_clean_living_broker,
    )


def _next_id(cmd: RemotingCommand) -> m.Request:
    h = GetNextBrokerIdRequestHeader.from_ext(cmd.ext_fields)
    return m.GetNextBrokerIdRequest(h.cluster_name or "", _need(h.broker_name, "brokerName"))


def _apply_id(cmd: RemotingCommand) -> m.Request:
    h = ApplyBrokerIdRequestHeader.from_ext(cmd.ext_fields)
    return m.ApplyBrokerIdRequest(
        cluster_name=h.cluster_name or "",
        broker_name=_need(h.broker_name, "brokerName"),
        applied_broker_id=_need(h.applied_broker_id, "appliedBrokerId"),
        register_check_code=h.register_check_code or "",
    )


_DECODERS: dict[int, Callable[[RemotingCommand], m.Request]] = {
    RC.CONTROLLER_ALTER_SYNC_STATE_SET: _alter,
    RC.CONTROLLER_ELECT_MASTER: _elect,
    RC.CONTROLLER_REGISTER_BROKER: _register,
    RC.CONTROLLER_GET_REPLICA_INFO: _replica_info,
    RC.CONTROLLER_GET_SYNC_STATE_DATA: _sync_state_data,
    RC.CLEAN_BROKER_DATA: _clean,
    RC.CONTROLLER_GET_NEXT_BROKER_ID: _next_id,
    RC.CONTROLLER_APPLY_BROKER_ID: _apply_id,
}


def decode_request(cmd: RemotingCommand) -> m.Request:
    """Raises HeaderError (a malformed field) or InvalidControllerRequest."""
    decoder = _DECODERS.get(cmd.code)
    if decoder is None:
        raise InvalidControllerRequest(f"code {cmd.code} is not a controller request")
    return decoder(cmd)


# --- server: response -> command -----------------------------------------------------------


def _ss_body(ids: frozenset[int], epoch: int | None) -> bytes:
    return models.SyncStateSet(set(ids), epoch or 0).to_json()


def _master_fields(r: m.MasterInfo) -> dict[str, Any]:
    return {
        "master_broker_id": r.master_broker_id,
        "master_address": r.master_address,
        "master_epoch": r.master_epoch,
    }


def _encode_elect(r: m.ElectMasterResponse, cluster: str, broker_name: str) -> tuple[Any, bytes]:
    header = ElectMasterResponseHeader(
        **_master_fields(r), sync_state_set_epoch=r.sync_state_set_epoch
    )
    group = None
    if r.broker_addrs:
        group = models.BrokerMemberGroup(cluster, broker_name, dict(r.broker_addrs))
    body = models.ElectMasterResponseBody(group, set(r.sync_state_set))
    return header, body.to_json()


def _replicas_model(info: m.ReplicasInfo) -> models.ReplicasInfo:
    def ident(r: m.ReplicaIdentity) -> models.ReplicaIdentity:
        return models.ReplicaIdentity(r.broker_name, r.broker_id, r.broker_address, r.alive)

    return models.ReplicasInfo(
        info.master_broker_id,
        info.master_address,
        info.master_epoch,
        info.sync_state_set_epoch,
        [ident(r) for r in info.in_sync_replicas],
        [ident(r) for r in info.not_in_sync_replicas],
    )


def _header_and_body(
    req: m.Request, resp: m.Response, cluster: str | None
) -> tuple[Any, bytes | None]:
    match resp:
        case m.GetNextBrokerIdResponse():
            return GetNextBrokerIdResponseHeader(
                cluster_name=resp.cluster_name,
                broker_name=resp.broker_name,
                next_broker_id=resp.next_broker_id,
            ), None
        case m.ApplyBrokerIdResponse():
            return ApplyBrokerIdResponseHeader(
                cluster_name=resp.cluster_name, broker_name=resp.broker_name
            ), None
        case m.RegisterBrokerResponse():
            return RegisterBrokerToControllerResponseHeader(
                cluster_name=resp.cluster_name,
                broker_name=resp.broker_name,
                **_master_fields(resp),
                sync_state_set_epoch=resp.sync_state_set_epoch,
            ), _ss_body(resp.sync_state_set, resp.sync_state_set_epoch)
        case m.ElectMasterResponse():
            name: str = getattr(req, "broker_name", "")
            group_cluster = cluster or str(getattr(req, "cluster_name", ""))
            return _encode_elect(resp, group_cluster, name)
        case m.GetReplicaInfoResponse():
            info = GetReplicaInfoResponseHeader(**_master_fields(resp))
            if not resp.ok:
                return info, None
            return info, _ss_body(resp.sync_state_set, resp.sync_state_set_epoch)
        case m.AlterSyncStateSetResponse():
            epoch = resp.new_sync_state_set_epoch
            alter = AlterSyncStateSetResponseHeader(new_sync_state_set_epoch=epoch or 0)
            return alter, (_ss_body(resp.sync_state_set, epoch) if resp.ok else None)
        case m.GetSyncStateDataResponse():
            table = {n: _replicas_model(i) for n, i in resp.replicas_info.items()}
            return None, models.BrokerReplicasInfo(table).to_json()
    return None, None


def encode_response(
    cmd: RemotingCommand, req: m.Request, resp: m.Response, cluster: str | None = None
) -> RemotingCommand:
    """The answer to `cmd`. `cluster` names the broker group's cluster for the member group of
    an election answer (a controller-triggered request does not carry it)."""
    header, body = _header_and_body(req, resp, cluster)
    ext = header.to_ext() if header is not None else None
    return cmd.response(resp.code, resp.remark or None, ext, body)


# --- client: request -> command ------------------------------------------------------------


def _request_header(req: m.Request) -> tuple[Any, bytes | None]:
    match req:
        case m.AlterSyncStateSetRequest():
            h = AlterSyncStateSetRequestHeader(
                broker_name=req.broker_name,
                master_broker_id=req.master_broker_id,
                master_epoch=req.master_epoch,
            )
            return h, _ss_body(req.sync_state_set, req.sync_state_set_epoch)
        case m.ElectMasterRequest():
            broker_id = -1 if req.broker_id is None else req.broker_id
            return ElectMasterRequestHeader(
                cluster_name=req.cluster_name,
                broker_name=req.broker_name,
                broker_id=broker_id,
                designate_elect=req.designate_elect,
            ), None
        case m.RegisterBrokerRequest():
            return RegisterBrokerToControllerRequestHeader(
                cluster_name=req.cluster_name,
                broker_name=req.broker_name,
                broker_id=req.broker_id,
                broker_address=req.broker_address,
                register_check_code=req.register_check_code,
            ), None
        case m.GetReplicaInfoRequest():
            return GetReplicaInfoRequestHeader(broker_name=req.broker_name), None
        case m.GetSyncStateDataRequest():
            return None, json.dumps(list(req.broker_names)).encode()
        case m.CleanBrokerDataRequest():
            return CleanControllerBrokerDataRequestHeader(
                cluster_name=req.cluster_name,
                broker_name=req.broker_name,
                broker_controller_ids_to_clean=req.broker_controller_ids_to_clean,
                is_clean_living_broker=req.clean_living_broker,
            ), None
        case m.GetNextBrokerIdRequest():
            h2 = GetNextBrokerIdRequestHeader(
                cluster_name=req.cluster_name, broker_name=req.broker_name
            )
            return h2, None
        case m.ApplyBrokerIdRequest():
            return ApplyBrokerIdRequestHeader(
                cluster_name=req.cluster_name,
                broker_name=req.broker_name,
                applied_broker_id=req.applied_broker_id,
                register_check_code=req.register_check_code,
            ), None


def request_command(req: m.Request) -> RemotingCommand:
    header, body = _request_header(req)
    ext = header.to_ext() if header is not None else None
    return RemotingCommand.request(REQUEST_CODES[type(req)], ext, body)


# --- client: command -> response -----------------------------------------------------------


def response_code(cmd: RemotingCommand) -> ResponseCode | int:
    try:
        return ResponseCode(cmd.code)
    except ValueError:
        return cmd.code


def _base(cmd: RemotingCommand) -> dict[str, Any]:
    return {"code": response_code(cmd), "remark": cmd.remark or ""}


def _master_from(h: Any, ss: models.SyncStateSet | None) -> dict[str, Any]:
    out = {
        "master_broker_id": h.master_broker_id,
        "master_address": h.master_address,
        "master_epoch": h.master_epoch,
    }
    if ss is not None:
        out["sync_state_set"] = frozenset(ss.sync_state_set)
    return out


def _body_ss(cmd: RemotingCommand) -> models.SyncStateSet | None:
    return models.SyncStateSet.from_json(cmd.body) if cmd.body else None


def _decode_elect(cmd: RemotingCommand) -> m.ElectMasterResponse:
    h = ElectMasterResponseHeader.from_ext(cmd.ext_fields)
    body = models.ElectMasterResponseBody.from_json(cmd.body) if cmd.body else None
    addrs: Mapping[int, str] = {}
    if body is not None and body.broker_member_group is not None:
        addrs = dict(body.broker_member_group.broker_addrs)
    return m.ElectMasterResponse(
        **_base(cmd),
        **_master_from(h, None),
        sync_state_set_epoch=h.sync_state_set_epoch,
        sync_state_set=frozenset(body.sync_state_set) if body is not None else frozenset(),
        broker_addrs=addrs,
    )


def _replicas_info(info: models.ReplicasInfo) -> m.ReplicasInfo:
    def ident(r: models.ReplicaIdentity) -> m.ReplicaIdentity:
        return m.ReplicaIdentity(
            r.broker_name or "", r.broker_id or 0, r.broker_address or "", bool(r.alive)
        )

    return m.ReplicasInfo(
        info.master_broker_id,
        info.master_address,
        info.master_epoch,
        info.sync_state_set_epoch,
        tuple(ident(r) for r in info.in_sync_replicas),
        tuple(ident(r) for r in info.not_in_sync_replicas),
    )


def _decode(req: m.Request, cmd: RemotingCommand) -> m.Response:
    base = _base(cmd)
    match req:
        case m.GetNextBrokerIdRequest():
            h1 = GetNextBrokerIdResponseHeader.from_ext(cmd.ext_fields)
            return m.GetNextBrokerIdResponse(
                **base,
                cluster_name=h1.cluster_name or "",
                broker_name=h1.broker_name or "",
                next_broker_id=h1.next_broker_id,
            )
        case m.ApplyBrokerIdRequest():
            h2 = ApplyBrokerIdResponseHeader.from_ext(cmd.ext_fields)
            return m.ApplyBrokerIdResponse(
                **base, cluster_name=h2.cluster_name or "", broker_name=h2.broker_name or ""
            )
        case m.RegisterBrokerRequest():
            h3 = RegisterBrokerToControllerResponseHeader.from_ext(cmd.ext_fields)
            return m.RegisterBrokerResponse(
                **base,
                **_master_from(h3, _body_ss(cmd)),
                sync_state_set_epoch=h3.sync_state_set_epoch,
                cluster_name=h3.cluster_name or "",
                broker_name=h3.broker_name or "",
            )
        case m.ElectMasterRequest():
            return _decode_elect(cmd)
        case m.GetReplicaInfoRequest():
            h4 = GetReplicaInfoResponseHeader.from_ext(cmd.ext_fields)
            ss = _body_ss(cmd)
            epoch = ss.sync_state_set_epoch if ss is not None else None
            return m.GetReplicaInfoResponse(
                **base, **_master_from(h4, ss), sync_state_set_epoch=epoch
            )
        case m.AlterSyncStateSetRequest():
            ss = _body_ss(cmd)
            h5 = AlterSyncStateSetResponseHeader.from_ext(cmd.ext_fields)
            return m.AlterSyncStateSetResponse(
                **base,
                new_sync_state_set_epoch=h5.new_sync_state_set_epoch if ss is not None else None,
                sync_state_set=frozenset(ss.sync_state_set) if ss is not None else frozenset(),
            )
        case m.GetSyncStateDataRequest():
            table = models.BrokerReplicasInfo.from_json(cmd.body).replicas_info_table
            infos = {n: _replicas_info(i) for n, i in table.items()}
            return m.GetSyncStateDataResponse(**base, replicas_info=infos)
        case m.CleanBrokerDataRequest():
            return m.CleanBrokerDataResponse(**base)


def decode_response(req: m.Request, cmd: RemotingCommand) -> Any:
    """The typed response to `req` (see `requests.handle` for which type). Codes outside
    ResponseCode are kept as ints. Raises HeaderError / BodyDecodeError on a bad answer."""
    return _decode(req, cmd)
