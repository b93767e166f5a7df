"""A single-node driver: handle a request, apply its events at once, answer.

This is the contract a Raft driver implements, minus replication: the events are applied
before the answer goes out, and a stale event turns the answer into a failure. Tests and
single-process tools use it directly.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rmq_ha.controller.elect import BrokerKey, BrokerLiveInfo
from rmq_ha.controller.messages import (
    ApplyBrokerIdRequest,
    ControllerConfig,
    GetNextBrokerIdRequest,
    RegisterBrokerRequest,
    Request,
    Response,
)
from rmq_ha.controller.requests import handle, stale_event_code
from rmq_ha.controller.state import ControllerState


class LocalController:
    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.config = config or ControllerConfig()
        self.state = ControllerState()
        self.live: dict[BrokerKey, BrokerLiveInfo] = {}

    def request(self, req: Request) -> Any:
        """Returns the handler's response (typed per request); see `requests.handle`."""
        result = handle(self.state, req, self.live, self.config)
        response: Response = result.response
        for event in result.events:
            if not self.state.apply(event):
                code = stale_event_code(event)
                return dataclasses.replace(response, code=code, remark="stale event")
        return response

    def set_live(self, cluster: str, broker_name: str, broker_id: int, **info: Any) -> None:
        """Records a heartbeat view entry; `alive` defaults to True."""
        info.setdefault("alive", True)
        self.live[BrokerKey(cluster, broker_name, broker_id)] = BrokerLiveInfo(**info)

    def kill(self, cluster: str, broker_name: str, broker_id: int) -> None:
        self.live.pop(BrokerKey(cluster, broker_name, broker_id), None)

    def join(self, cluster: str, broker_name: str, address: str, check_time_ms: int = 0) -> int:
        """A broker's first start (seed 002 / RocketMQ 5.1.1+): get next id, apply it with a
        check code, register, and start heartbeating. Returns the id; raises if refused."""
        nxt = self.request(GetNextBrokerIdRequest(cluster, broker_name))
        broker_id: int = nxt.next_broker_id
        check_code = f"{address};{check_time_ms}"
        for req in (
            ApplyBrokerIdRequest(cluster, broker_name, broker_id, check_code),
            RegisterBrokerRequest(cluster, broker_name, broker_id, address),
        ):
            resp = self.request(req)
            if not resp.ok:
                raise RuntimeError(f"{type(req).__name__} refused: {resp.code!r} {resp.remark}")
        self.set_live(cluster, broker_name, broker_id)
        return broker_id
