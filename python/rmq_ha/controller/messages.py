"""Requests and responses of the controller's metadata API, as plain dataclasses.

Field names follow RocketMQ's request/response headers (snake_case). Responses carry the numeric
code from `codes.ResponseCode`; the wire layer maps them to and from remoting frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from rmq_ha.controller.events import Event
from rmq_ha.protocol.codes import ResponseCode

Code = ResponseCode


@dataclass(frozen=True)
class ControllerConfig:
    # ControllerConfig.enableElectUncleanMaster: may elect outside the SyncStateSet (loses data).
    enable_elect_unclean_master: bool = False


# --- requests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GetNextBrokerIdRequest:
    cluster_name: str
    broker_name: str


@dataclass(frozen=True)
class ApplyBrokerIdRequest:
    cluster_name: str
    broker_name: str
    applied_broker_id: int
    register_check_code: str  # "brokerAddr;currentTimeMillis", written by the broker


@dataclass(frozen=True)
class RegisterBrokerRequest:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    # Our extension: when given it must match the applied check code. RocketMQ's header has
    # no such field, so its brokers (None) are checked by id only, as RocketMQ does.
    register_check_code: str | None = None


@dataclass(frozen=True)
class AlterSyncStateSetRequest:
    broker_name: str
    master_broker_id: int
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class ElectMasterRequest:
    """broker_id None (or -1 on the wire) = controller-triggered; designate_elect = admin."""

    broker_name: str
    cluster_name: str = ""
    broker_id: int | None = None
    designate_elect: bool = False

    @classmethod
    def of_broker_trigger(
        cls, cluster: str, broker_name: str, broker_id: int
    ) -> ElectMasterRequest:
        return cls(broker_name, cluster, broker_id)

    @classmethod
    def of_controller_trigger(cls, broker_name: str) -> ElectMasterRequest:
        return cls(broker_name)

    @classmethod
    def of_admin_trigger(cls, cluster: str, broker_name: str, broker_id: int) -> ElectMasterRequest:
        return cls(broker_name, cluster, broker_id, designate_elect=True)

    @property
    def requester(self) -> int | None:
        return None if self.broker_id in (None, -1) else self.broker_id


@dataclass(frozen=True)
class GetReplicaInfoRequest:
    broker_name: str


@dataclass(frozen=True)
class GetSyncStateDataRequest:
    broker_names: tuple[str, ...]


@dataclass(frozen=True)
class CleanBrokerDataRequest:
    cluster_name: str
    broker_name: str
    broker_controller_ids_to_clean: str | None = None  # "1;2;3" as on the wire
    clean_living_broker: bool = False


Request = (
    GetNextBrokerIdRequest
    | ApplyBrokerIdRequest
    | RegisterBrokerRequest
    | AlterSyncStateSetRequest
    | ElectMasterRequest
    | GetReplicaInfoRequest
    | GetSyncStateDataRequest
    | CleanBrokerDataRequest
)

# --- responses -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Response:
    code: ResponseCode = Code.SUCCESS
    remark: str = ""

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS


@dataclass(frozen=True, kw_only=True)
class GetNextBrokerIdResponse(Response):
    cluster_name: str
    broker_name: str
    next_broker_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class ApplyBrokerIdResponse(Response):
    cluster_name: str
    broker_name: str


@dataclass(frozen=True, kw_only=True)
class MasterInfo(Response):
    """Master and epochs, the common part of register / elect / replica-info answers."""

    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None
    sync_state_set: frozenset[int] = frozenset()


@dataclass(frozen=True, kw_only=True)
class RegisterBrokerResponse(MasterInfo):
    cluster_name: str = ""
    broker_name: str = ""


@dataclass(frozen=True, kw_only=True)
class ElectMasterResponse(MasterInfo):
    broker_addrs: Mapping[int, str] = field(default_factory=dict)  # BrokerMemberGroup


@dataclass(frozen=True, kw_only=True)
class GetReplicaInfoResponse(MasterInfo):
    pass


@dataclass(frozen=True, kw_only=True)
class AlterSyncStateSetResponse(Response):
    new_sync_state_set_epoch: int | None = None
    sync_state_set: frozenset[int] = frozenset()


@dataclass(frozen=True)
class ReplicaIdentity:
    broker_name: str
    broker_id: int
    broker_address: str
    alive: bool


@dataclass(frozen=True)
class ReplicasInfo:
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set_epoch: int
    in_sync_replicas: tuple[ReplicaIdentity, ...]
    not_in_sync_replicas: tuple[ReplicaIdentity, ...]


@dataclass(frozen=True, kw_only=True)
class GetSyncStateDataResponse(Response):
    replicas_info: Mapping[str, ReplicasInfo] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CleanBrokerDataResponse(Response):
    pass


R = TypeVar("R", bound=Response)


@dataclass(frozen=True)
class ControllerResult(Generic[R]):
    response: R
    events: tuple[Event, ...] = ()
