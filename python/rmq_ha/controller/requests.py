"""Request handlers: validate against the current state, return (events, response), mutate
nothing. The events take effect only when the Raft layer commits them and calls
`ControllerState.apply`; the response goes back to the caller after that.

Validation order and codes follow RocketMQ's ReplicasInfoManager (5.3.3 / HEAD). Where we differ
the handler's docstring says so and why.

The driver must, for each result: append `events` (if any) as one Raft entry, wait for the
commit, apply them, and then answer with `response`. If `apply` returned False for an event
(its premise went stale between validation and commit, possible only when requests are
pipelined), answer with `stale_event_code(event)` instead.
"""

from __future__ import annotations

from typing import Any

from rmq_ha.controller import elect
from rmq_ha.controller.elect import LiveView, is_alive, live_info_fn
from rmq_ha.controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
)
from rmq_ha.controller.messages import (
    AlterSyncStateSetRequest,
    AlterSyncStateSetResponse,
    ApplyBrokerIdRequest,
    ApplyBrokerIdResponse,
    CleanBrokerDataRequest,
    CleanBrokerDataResponse,
    ControllerConfig,
    ControllerResult,
    ElectMasterRequest,
    ElectMasterResponse,
    GetNextBrokerIdRequest,
    GetNextBrokerIdResponse,
    GetReplicaInfoRequest,
    GetReplicaInfoResponse,
    GetSyncStateDataRequest,
    GetSyncStateDataResponse,
    R,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    ReplicaIdentity,
    ReplicasInfo,
    Request,
)
from rmq_ha.controller.state import FIRST_BROKER_CONTROLLER_ID, BrokerSet, ControllerState
from rmq_ha.protocol.codes import ResponseCode

Code = ResponseCode
DEFAULT_CONFIG = ControllerConfig()


def _result(response: R, *events: Event) -> ControllerResult[R]:
    return ControllerResult(response, tuple(events))


# --- broker id assignment (GET_NEXT_BROKER_ID 1012, APPLY_BROKER_ID 1013) ------------------


def get_next_broker_id(
    state: ControllerState, req: GetNextBrokerIdRequest
) -> ControllerResult[GetNextBrokerIdResponse]:
    bs = state.get(req.broker_name)
    next_id = FIRST_BROKER_CONTROLLER_ID if bs is None else bs.next_assign_broker_id
    return _result(
        GetNextBrokerIdResponse(
            cluster_name=req.cluster_name, broker_name=req.broker_name, next_broker_id=next_id
        )
    )


def apply_broker_id(
    state: ControllerState, req: ApplyBrokerIdRequest
) -> ControllerResult[ApplyBrokerIdResponse]:
    """Accept if the set is new and the id is 1, the id is unused, or the id's check code is
    the request's (an idempotent retry). We also refuse ids < 1 (RocketMQ does not)."""
    address = req.register_check_code.split(";")[0]  # the check code is "addr;millis"
    error = _apply_id_error(state.get(req.broker_name), req, address)
    if error is not None:
        code, remark = error
        resp = ApplyBrokerIdResponse(
            code=code, remark=remark, cluster_name=req.cluster_name, broker_name=req.broker_name
        )
        return _result(resp)
    event = ApplyBrokerIdEvent(
        req.cluster_name, req.broker_name, req.applied_broker_id, address, req.register_check_code
    )
    resp = ApplyBrokerIdResponse(cluster_name=req.cluster_name, broker_name=req.broker_name)
    return _result(resp, event)


def _apply_id_error(
    bs: BrokerSet | None, req: ApplyBrokerIdRequest, address: str
) -> tuple[ResponseCode, str] | None:
    broker_id = req.applied_broker_id
    if not req.broker_name or not address:
        return Code.CONTROLLER_INVALID_REQUEST, "brokerName and registerCheckCode required"
    if bs is None and broker_id != FIRST_BROKER_CONTROLLER_ID:
        return Code.CONTROLLER_BROKER_ID_INVALID, f"a new broker set starts at 1, not {broker_id}"
    if broker_id < FIRST_BROKER_CONTROLLER_ID:
        return Code.CONTROLLER_BROKER_ID_INVALID, f"broker id {broker_id} < 1"
    taken = None if bs is None else bs.replicas.get(broker_id)
    if taken is not None and taken.register_check_code != req.register_check_code:
        return Code.CONTROLLER_BROKER_ID_INVALID, f"broker id {broker_id} already taken"
    return None


# --- REGISTER_BROKER (1003) ----------------------------------------------------------------


def register_broker(
    state: ControllerState, req: RegisterBrokerRequest, live: LiveView
) -> ControllerResult[RegisterBrokerResponse]:
    """Confirms an applied id and reports the master if it is alive. Never elects: as in
    RocketMQ 5.1.1+, a broker told "no master" sends ELECT_MASTER itself (brokerElect)."""

    def fail(code: ResponseCode, remark: str) -> ControllerResult[RegisterBrokerResponse]:
        resp = RegisterBrokerResponse(
            code=code, remark=remark, cluster_name=req.cluster_name, broker_name=req.broker_name
        )
        return _result(resp)

    if not req.broker_address:
        return fail(Code.CONTROLLER_INVALID_REQUEST, "brokerAddress required")
    bs = state.get(req.broker_name)
    if bs is None:
        return fail(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "broker set not registered")
    replica = bs.replicas.get(req.broker_id)
    if replica is None:
        return fail(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"id {req.broker_id} unknown")
    code = req.register_check_code
    if code is not None and code != replica.register_check_code:
        return fail(Code.CONTROLLER_BROKER_ID_INVALID, "registerCheckCode does not match")
    master = bs.master_broker_id
    master_alive = master is not None and is_alive(live_info_fn(live, bs)(master))
    resp = RegisterBrokerResponse(
        cluster_name=req.cluster_name,
        broker_name=req.broker_name,
        master_broker_id=master if master_alive else None,
        master_address=bs.master_address if master_alive else None,
        master_epoch=bs.master_epoch,
        sync_state_set_epoch=bs.sync_state_set_epoch,
        sync_state_set=frozenset(bs.sync_state_set),
    )
    if replica.address == req.broker_address:
        return _result(resp)
    event = UpdateBrokerAddressEvent(
        req.cluster_name, req.broker_name, req.broker_id, req.broker_address
    )
    return _result(resp, event)


# --- ALTER_SYNC_STATE_SET (1001) -----------------------------------------------------------


def alter_sync_state_set(
    state: ControllerState, req: AlterSyncStateSetRequest, live: LiveView
) -> ControllerResult[AlterSyncStateSetResponse]:
    """RocketMQ's checks in RocketMQ's order: set known (2013), set changed (2013), requester is
    the master (2002), masterEpoch (2000), syncStateSetEpoch (2001), members registered (2003)
    and alive (2006), master kept in the set (2013)."""
    bs = state.get(req.broker_name)
    error = _alter_error(bs, req, live)
    if error is not None or bs is None:
        code, remark = error or (Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "")
        return _result(AlterSyncStateSetResponse(code=code, remark=remark))
    new_epoch = bs.sync_state_set_epoch + 1
    event = AlterSyncStateSetEvent(
        req.broker_name, req.master_broker_id, req.master_epoch, req.sync_state_set, new_epoch
    )
    resp = AlterSyncStateSetResponse(
        new_sync_state_set_epoch=new_epoch, sync_state_set=req.sync_state_set
    )
    return _result(resp, event)


def _alter_error(
    bs: BrokerSet | None, req: AlterSyncStateSetRequest, live: LiveView
) -> tuple[ResponseCode, str] | None:
    if bs is None:
        return Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "broker metadata does not exist"
    if req.sync_state_set == bs.sync_state_set:
        return Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "new SyncStateSet equals the old one"
    if bs.master_broker_id is None or bs.master_broker_id != req.master_broker_id:
        return Code.CONTROLLER_INVALID_MASTER, f"the master is {bs.master_broker_id}"
    if req.master_epoch != bs.master_epoch:
        return Code.CONTROLLER_FENCED_MASTER_EPOCH, f"masterEpoch is {bs.master_epoch}"
    if req.sync_state_set_epoch != bs.sync_state_set_epoch:
        return Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, f"epoch is {bs.sync_state_set_epoch}"
    info = live_info_fn(live, bs)
    for broker_id in sorted(req.sync_state_set):
        if broker_id not in bs.replicas:
            return Code.CONTROLLER_INVALID_REPLICAS, f"replica {broker_id} does not exist"
        if not is_alive(info(broker_id)):
            return Code.CONTROLLER_BROKER_NOT_ALIVE, f"replica {broker_id} is not alive"
    if bs.master_broker_id not in req.sync_state_set:
        return Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "new set must contain the master"
    return None


# --- ELECT_MASTER (1002) -------------------------------------------------------------------


def elect_master(
    state: ControllerState,
    req: ElectMasterRequest,
    live: LiveView,
    config: ControllerConfig = DEFAULT_CONFIG,
) -> ControllerResult[ElectMasterResponse]:
    """ReplicasInfoManager.electMaster.

    First election of a set (no ElectMaster event yet): the requesting broker wins outright
    (RocketMQ); we additionally require it to be a registered replica that lost no data.
    Otherwise the policy
    (`elect.default_elect_policy`). Keeping the live old master answers 2011 with no event. With no
    candidate, a controller-triggered request records "no master" (masterEpoch+1, set kept,
    2004) and a broker/admin one fails (2012); we skip the "no master" event when there
    already is no master, since it would only bump the epoch again. The remark says why no
    replica qualifies (down, or lost data that no live replica holds).
    """
    bs = state.get(req.broker_name)
    if bs is None:
        code = Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        return _result(ElectMasterResponse(code=code, remark="broker set not registered"))
    choice = _choose_master(bs, req, live, config)
    new_master = choice.master
    if (
        new_master is not None
        and new_master == bs.master_broker_id
        and req.requester == new_master
        and not req.designate_elect
    ):
        # The master itself asks: it restarted, was named master of the epoch it led before,
        # and refuses to go on in it (its log may have lost that epoch's tail, and slaves hold
        # bytes of it): it gets the same role in a new epoch, with a SyncStateSet of itself.
        return _elected(bs, new_master, choice.recovery)
    if new_master is not None and new_master == bs.master_broker_id:
        return _result(_master_still_exists(bs))
    if new_master is not None:
        return _elected(bs, new_master, choice.recovery)
    if req.requester is not None:
        code = Code.CONTROLLER_ELECT_MASTER_FAILED
        return _result(
            ElectMasterResponse(code=code, remark=f"no candidate can be master: {choice.why_none}")
        )
    has_master = bs.master_broker_id is not None
    resp = ElectMasterResponse(
        code=Code.CONTROLLER_MASTER_NOT_AVAILABLE,
        remark=f"no candidate can be master: {choice.why_none}",
        master_epoch=bs.master_epoch + 1 if has_master else bs.master_epoch,
        sync_state_set_epoch=bs.sync_state_set_epoch,
        sync_state_set=frozenset(bs.sync_state_set),
    )
    if not has_master:
        return _result(resp)
    event = ElectMasterEvent(bs.broker_name, None, bs.master_epoch + 1, bs.sync_state_set_epoch)
    return _result(resp, event)


def _choose_master(
    bs: BrokerSet, req: ElectMasterRequest, live: LiveView, config: ControllerConfig
) -> elect.Election:
    requester = req.requester
    info = live_info_fn(live, bs)
    if bs.is_first_time_for_elect and requester in bs.replicas:
        # RocketMQ: the first requester wins outright (it may not have heartbeated yet); but
        # never one that says it lost data (issue 13).
        first = info(requester)
        if first is None or first.catch_up_offset is None:
            return elect.Election(requester)
    return elect.default_elect_policy(
        sync_state_set=bs.sync_state_set,
        replicas=set(bs.replicas),
        unclean=config.enable_elect_unclean_master,
        old_master=bs.master_broker_id,
        prefer_broker_id=requester if req.designate_elect else None,
        live_info=info,
    )


def _master_still_exists(bs: BrokerSet) -> ElectMasterResponse:
    return ElectMasterResponse(
        code=Code.CONTROLLER_MASTER_STILL_EXIST,
        remark=f"master {bs.master_broker_id} is still alive",
        master_broker_id=bs.master_broker_id,
        master_address=bs.master_address,
        master_epoch=bs.master_epoch,
        sync_state_set_epoch=bs.sync_state_set_epoch,
        sync_state_set=frozenset(bs.sync_state_set),
        broker_addrs=bs.broker_addrs(),
    )


def _elected(
    bs: BrokerSet, new_master: int, recovery: bool = False
) -> ControllerResult[ElectMasterResponse]:
    event = ElectMasterEvent(
        bs.broker_name,
        new_master,
        bs.master_epoch + 1,
        bs.sync_state_set_epoch + 1,
        recovery=recovery,
    )
    resp = ElectMasterResponse(
        master_broker_id=new_master,
        master_address=bs.address_of(new_master),
        master_epoch=event.master_epoch,
        sync_state_set_epoch=event.sync_state_set_epoch,
        sync_state_set=frozenset({new_master}),
        broker_addrs=bs.broker_addrs(),
    )
    return _result(resp, event)


# --- reads: GET_REPLICA_INFO (1004), GET_SYNC_STATE_DATA (1006) ----------------------------


def get_replica_info(
    state: ControllerState, req: GetReplicaInfoRequest
) -> ControllerResult[GetReplicaInfoResponse]:
    bs = state.get(req.broker_name)
    if bs is None:
        code = Code.CONTROLLER_BROKER_METADATA_NOT_EXIST
        return _result(GetReplicaInfoResponse(code=code, remark="broker metadata does not exist"))
    resp = GetReplicaInfoResponse(
        master_broker_id=bs.master_broker_id,
        master_address=bs.master_address,
        master_epoch=bs.master_epoch,
        sync_state_set_epoch=bs.sync_state_set_epoch,
        sync_state_set=frozenset(bs.sync_state_set),
    )
    return _result(resp)


def get_sync_state_data(
    state: ControllerState, req: GetSyncStateDataRequest, live: LiveView
) -> ControllerResult[GetSyncStateDataResponse]:
    """Unknown broker names are skipped, as in RocketMQ."""
    infos = {}
    for name in req.broker_names:
        bs = state.get(name)
        if bs is not None:
            infos[name] = _replicas_info(bs, live)
    return _result(GetSyncStateDataResponse(replicas_info=infos))


def _replicas_info(bs: BrokerSet, live: LiveView) -> ReplicasInfo:
    info = live_info_fn(live, bs)
    replicas = [
        ReplicaIdentity(bs.broker_name, i, r.address, is_alive(info(i)))
        for i, r in sorted(bs.replicas.items())
    ]
    return ReplicasInfo(
        master_broker_id=bs.master_broker_id,
        master_address=bs.master_address,
        master_epoch=bs.master_epoch,
        sync_state_set_epoch=bs.sync_state_set_epoch,
        in_sync_replicas=tuple(r for r in replicas if r.broker_id in bs.sync_state_set),
        not_in_sync_replicas=tuple(r for r in replicas if r.broker_id not in bs.sync_state_set),
    )


# --- CLEAN_BROKER_DATA (1011) --------------------------------------------------------------


def clean_broker_data(
    state: ControllerState, req: CleanBrokerDataRequest, live: LiveView
) -> ControllerResult[CleanBrokerDataResponse]:
    """Without cleanLivingBroker: a whole set only while it has no master (RocketMQ) and, our
    addition, no live replica; listed ids only if none is alive. Unlike RocketMQ, listed ids
    are honoured with cleanLivingBroker too (RocketMQ then silently drops the whole set)."""

    def fail(remark: str) -> ControllerResult[CleanBrokerDataResponse]:
        code = Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        return _result(CleanBrokerDataResponse(code=code, remark=remark))

    try:
        ids = _parse_ids(req.broker_controller_ids_to_clean)
    except ValueError as exc:
        return fail(f"brokerControllerIdsToClean must be ids separated by ';': {exc}")
    bs = state.get(req.broker_name)
    if bs is None:
        return fail(f"broker set {req.broker_name} does not exist")
    if not req.clean_living_broker:
        alive = {i for i in bs.replicas if is_alive(live_info_fn(live, bs)(i))}
        if ids is None and (bs.master_broker_id is not None or alive):
            return fail(f"broker set {req.broker_name} still has a master or a live replica")
        if ids is not None and ids & alive:
            return fail(f"replicas {sorted(ids & alive)} are still alive")
    if ids is not None and bs.sync_state_set and bs.sync_state_set <= ids < set(bs.replicas):
        # Ours (operator probe): the group was left with replicas but no member to elect,
        # masterless for good; those members may hold acknowledged writes nobody else has.
        return fail(
            f"removing {sorted(ids)} would empty the SyncStateSet of {req.broker_name}"
            f" ({sorted(bs.sync_state_set)}): no replica left could be elected. Elect another"
            " first (electMaster, with enableElectUncleanMaster if it is not in the set: it may"
            " lack acknowledged writes), or clean the whole set"
        )
    return _result(CleanBrokerDataResponse(), CleanBrokerDataEvent(req.broker_name, ids))


def _parse_ids(text: str | None) -> frozenset[int] | None:
    parts = [p.strip() for p in (text or "").split(";") if p.strip()]
    return frozenset(int(p) for p in parts) if parts else None


# --- dispatch and driver helpers -----------------------------------------------------------


def handle(
    state: ControllerState,
    request: Request,
    live: LiveView,
    config: ControllerConfig = DEFAULT_CONFIG,
) -> ControllerResult[Any]:
    """One entry point for the role and the simulator."""
    match request:
        case GetNextBrokerIdRequest():
            return get_next_broker_id(state, request)
        case ApplyBrokerIdRequest():
            return apply_broker_id(state, request)
        case RegisterBrokerRequest():
            return register_broker(state, request, live)
        case AlterSyncStateSetRequest():
            return alter_sync_state_set(state, request, live)
        case ElectMasterRequest():
            return elect_master(state, request, live, config)
        case GetReplicaInfoRequest():
            return get_replica_info(state, request)
        case GetSyncStateDataRequest():
            return get_sync_state_data(state, request, live)
        case CleanBrokerDataRequest():
            return clean_broker_data(state, request, live)


_STALE_CODES: dict[type, ResponseCode] = {
    ApplyBrokerIdEvent: Code.CONTROLLER_BROKER_ID_INVALID,
    ElectMasterEvent: Code.CONTROLLER_ELECT_MASTER_FAILED,
    AlterSyncStateSetEvent: Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
    UpdateBrokerAddressEvent: Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
    CleanBrokerDataEvent: Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
}


def stale_event_code(event: Event) -> ResponseCode:
    """The answer to send instead of the handler's when `apply(event)` returned False."""
    return _STALE_CODES[type(event)]
