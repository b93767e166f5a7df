"""Controller mode of the simulator: simulated brokers talking to the Raft nodes.

Every Raft node's state machine is the controller's (`ControllerSimStateMachine`). A few broker
groups of 2-3 replicas act at random moments: ask for and apply a broker id, register, send
heartbeats, ask for a master election, expand or shrink the SyncStateSet when they think they
are master; they crash and come back. A request goes to the node the broker believes leads; a
node that is not the serving leader answers NOT_LEADER with its hint. The leader validates with
`requests.handle` against its current state and its own heartbeat table, proposes the events
(`encode_events`, as the real role does) and answers once the entry is applied there. Like the
real leader it also scans for groups whose master died and elects on the controller's behalf.
Brokers act on possibly stale answers, so stale epochs and racing elections are exercised.

Every apply on every node is checked by the shared `InvariantChecker`; all randomness comes
from the simulation's seeded Random.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rmq_ha.controller.elect import BrokerKey, BrokerLiveInfo, scan_need_reelect
from rmq_ha.controller.events import encode_events
from rmq_ha.controller.invariants import InvariantChecker
from rmq_ha.controller.messages import (
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    ControllerConfig,
    ElectMasterRequest,
    GetNextBrokerIdRequest,
    MasterInfo,
    RegisterBrokerRequest,
    Request,
    Response,
)
from rmq_ha.controller.requests import handle, stale_event_code
from rmq_ha.raft.messages import Role

if TYPE_CHECKING:
    from rmq_ha.sim.world import Simulation, _Node

CLUSTER = "sim"
#: A heartbeat older than this makes the broker dead in a node's view.
HEARTBEAT_TIMEOUT_MS = 3000
HEARTBEAT_EVERY_MS = 1000
SCAN_EVERY_MS = 2000

OnResponse = Callable[[Response], None]


@dataclass(frozen=True)
class ControllerSimConfig:
    groups: int = 2
    replicas: tuple[int, ...] = (3, 3)
    enable_elect_unclean_master: bool = False
    broker_min_ms: int = 100
    broker_max_ms: int = 800
    crash: float = 0.04
    restart: float = 0.4

    @classmethod
    def for_seed(cls, rng: random.Random) -> ControllerSimConfig:
        groups = rng.choice((1, 2, 3))
        return cls(
            groups=groups,
            replicas=tuple(rng.choice((2, 3)) for _ in range(groups)),
            enable_elect_unclean_master=rng.random() < 0.25,
            broker_min_ms=rng.choice((50, 200)),
            broker_max_ms=rng.choice((500, 1500)),
            crash=rng.choice((0.01, 0.04, 0.1)),
            restart=rng.choice((0.2, 0.5)),
        )


@dataclass
class SimBroker:
    group: int
    index: int
    up: bool = True
    incarnation: int = 0
    #: Survives a crash (the broker's persisted id and check code).
    broker_id: int | None = None
    check_code: str = ""
    next_id: int | None = None
    registered: bool = False
    master_id: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0
    offset: int = 0
    leader_hint: str | None = None
    known_ids: set[int] = field(default_factory=set)

    @property
    def name(self) -> str:
        return f"b{self.group}"

    @property
    def address(self) -> str:
        return f"10.0.{self.group}.{self.index}:10911"

    @property
    def label(self) -> str:
        return f"{self.name}/{self.index}"

    @property
    def is_master(self) -> bool:
        return self.broker_id is not None and self.master_id == self.broker_id


class ControllerWorld:
    def __init__(self, sim: Simulation, cfg: ControllerSimConfig) -> None:
        self.sim = sim
        self.cfg = cfg
        self.rng = sim.rng
        self.policy = ControllerConfig(enable_elect_unclean_master=cfg.enable_elect_unclean_master)
        self.invariants = InvariantChecker(
            enable_elect_unclean_master=cfg.enable_elect_unclean_master
        )
        self.brokers = [SimBroker(g, i) for g in range(cfg.groups) for i in range(cfg.replicas[g])]
        #: Each node's heartbeat table, lost when the node crashes.
        self.live: dict[str, dict[BrokerKey, BrokerLiveInfo]] = {n: {} for n in sim.names}
        self.requests = 0
        self.proposed = 0
        self.elections = 0

    # -- scheduling (called from the simulation loop) ----------------------------------------

    def start(self) -> None:
        self.sim._at(self.rng.randrange(200, 2000), _BROKER_KIND, "", "step")
        self.sim._at(HEARTBEAT_EVERY_MS, _BROKER_KIND, "", "heartbeat")
        self.sim._at(SCAN_EVERY_MS, _BROKER_KIND, "", "scan")

    def on_event(self, what: str) -> None:
        sim = self.sim
        if not sim.faults_on:
            return
        if what == "step":
            self.step()
            gap = self.rng.randrange(self.cfg.broker_min_ms, self.cfg.broker_max_ms)
            sim._at(sim.now + gap, _BROKER_KIND, "", "step")
        elif what == "heartbeat":
            self.heartbeats()
            sim._at(sim.now + HEARTBEAT_EVERY_MS, _BROKER_KIND, "", "heartbeat")
        else:
            self.scan()
            sim._at(sim.now + SCAN_EVERY_MS, _BROKER_KIND, "", "scan")

    def node_restarted(self, name: str) -> None:
        self.live[name] = {}

    # -- liveness ----------------------------------------------------------------------------

    def heartbeats(self) -> None:
        sim, rng = self.sim, self.rng
        masters: dict[int, SimBroker] = {}
        for b in self.brokers:
            if b.up and b.is_master:
                b.offset += rng.randrange(0, 100)
                masters[b.group] = b
        for b in self.brokers:
            if not b.up or b.broker_id is None:
                continue
            master = masters.get(b.group)
            if master is not None and b is not master and b.broker_id in master.sync_state_set:
                b.offset = master.offset
            key = BrokerKey(CLUSTER, b.name, b.broker_id)
            info = BrokerLiveInfo(True, b.master_epoch, b.offset, last_heartbeat_ms=sim.now)
            for name in sim.names:
                if sim.nodes[name].core is not None and rng.random() >= sim.loss:
                    self.live[name][key] = info

    def view(self, name: str) -> dict[BrokerKey, BrokerLiveInfo]:
        now = self.sim.now
        return {
            k: v if now - v.last_heartbeat_ms <= HEARTBEAT_TIMEOUT_MS else _dead(v)
            for k, v in self.live[name].items()
        }

    # -- the leader's side -------------------------------------------------------------------

    def _serving_leader(self, name: str) -> _Node | None:
        node = self.sim.nodes[name]
        core = node.core
        if core is None or core.role is not Role.LEADER or not core.serving:
            return None
        return node

    def _submit(self, node: _Node, request: Request, on_response: OnResponse | None) -> None:
        from rmq_ha.sim.statemachine import ControllerSimStateMachine

        sm = node.sm
        assert isinstance(sm, ControllerSimStateMachine)
        self.requests += 1
        result = handle(sm.state, request, self.view(node.name), self.policy)
        if not result.events:
            if on_response is not None:
                on_response(result.response)
            return
        self.proposed += 1
        response = result.response
        stale = stale_event_code(result.events[0])

        def applied(outcome: object) -> None:
            if on_response is None:
                return
            ok = isinstance(outcome, list) and len(outcome) > 0 and all(outcome)
            on_response(response if ok else Response(code=stale, remark="stale event"))

        self.sim._feed(node, _PROPOSE_KIND, (encode_events(result.events), applied))

    def scan(self) -> None:
        for name in self.sim.names:
            node = self._serving_leader(name)
            if node is None:
                continue
            sm: Any = node.sm
            for broker_name in scan_need_reelect(sm.state, self.view(name)):
                self.elections += 1
                if self.sim.tracing:
                    self.sim._log(f"{name} scan: re-elect {broker_name}")
                self._submit(node, ElectMasterRequest.of_controller_trigger(broker_name), None)

    # -- the brokers' side -------------------------------------------------------------------

    def _send(self, b: SimBroker, request: Request, on_response: OnResponse) -> None:
        sim = self.sim
        up = [n for n in sim.names if sim.nodes[n].core is not None]
        if not up:
            return
        target = b.leader_hint
        if target not in up or self.rng.random() < 0.1:
            target = self.rng.choice(up)
        node = self._serving_leader(target)
        if node is None:
            core = sim.nodes[target].core
            b.leader_hint = core.leader_id if core is not None else None
            return
        b.leader_hint = target
        incarnation = b.incarnation
        if sim.tracing:
            sim._log(f"{b.label} -> {target}: {type(request).__name__}")

        def deliver(resp: Response) -> None:
            if b.up and b.incarnation == incarnation:
                on_response(resp)

        self._submit(node, request, deliver)

    def step(self) -> None:
        rng = self.rng
        b = rng.choice(self.brokers)
        if not b.up:
            if rng.random() < self.cfg.restart:
                b.up = True
                b.incarnation += 1
                b.registered = False
                b.master_id = None
                self._trace(f"{b.label} RESTART")
            return
        if rng.random() < self.cfg.crash:
            b.up = False
            self._trace(f"{b.label} CRASH")
            return
        if b.broker_id is None:
            self._acquire_id(b)
        elif not b.registered:
            self._register(b)
        else:
            r = rng.random()
            if b.master_id is None or r < 0.15:
                self._elect(b)
            elif b.is_master and r < 0.7:
                self._alter(b)
            else:
                self._register(b)

    def _trace(self, text: str) -> None:
        if self.sim.tracing:
            self.sim._log(text)

    def _acquire_id(self, b: SimBroker) -> None:
        if b.next_id is None:

            def got(resp: Any) -> None:
                if resp.ok:
                    b.next_id = resp.next_broker_id

            self._send(b, GetNextBrokerIdRequest(CLUSTER, b.name), got)
            return
        wanted = b.next_id
        if not b.check_code:
            b.check_code = f"{b.address};{self.sim.now}"

        def applied(resp: Response) -> None:
            b.next_id = None
            if resp.ok and b.broker_id is None:
                b.broker_id = wanted
                self._trace(f"{b.label} got broker id {wanted}")

        self._send(b, ApplyBrokerIdRequest(CLUSTER, b.name, wanted, b.check_code), applied)

    def _learn(self, b: SimBroker, resp: Response) -> None:
        if not isinstance(resp, MasterInfo) or resp.master_epoch is None:
            return
        if resp.master_epoch < b.master_epoch:
            return
        b.master_id = resp.master_broker_id
        b.master_epoch = resp.master_epoch
        if resp.sync_state_set_epoch is not None:
            b.sync_state_set = resp.sync_state_set
            b.sync_state_set_epoch = resp.sync_state_set_epoch

    def _register(self, b: SimBroker) -> None:
        assert b.broker_id is not None

        def registered(resp: Response) -> None:
            if resp.ok:
                b.registered = True
                self._learn(b, resp)

        req = RegisterBrokerRequest(CLUSTER, b.name, b.broker_id, b.address, b.check_code)
        self._send(b, req, registered)

    def _elect(self, b: SimBroker) -> None:
        assert b.broker_id is not None

        def elected(resp: Response) -> None:
            self._learn(b, resp)

        self.elections += 1
        self._send(b, ElectMasterRequest.of_broker_trigger(CLUSTER, b.name, b.broker_id), elected)

    def _alter(self, b: SimBroker) -> None:
        assert b.broker_id is not None
        peers = {
            p.broker_id for p in self.brokers if p.group == b.group and p.broker_id is not None
        }
        current = set(b.sync_state_set) | {b.broker_id}
        outside = sorted(peers - current)
        inside = sorted(current - {b.broker_id})
        if outside and (not inside or self.rng.random() < 0.6):
            new = current | {self.rng.choice(outside)}
        elif inside:
            new = current - {self.rng.choice(inside)}
        else:
            return
        new_set = frozenset(new)
        epoch = b.sync_state_set_epoch

        def altered(resp: Any) -> None:
            if resp.ok and resp.new_sync_state_set_epoch is not None:
                if resp.new_sync_state_set_epoch > b.sync_state_set_epoch:
                    b.sync_state_set = new_set
                    b.sync_state_set_epoch = resp.new_sync_state_set_epoch
            elif not resp.ok:
                b.registered = False  # refresh what it knows on its next step

        req = AlterSyncStateSetRequest(b.name, b.broker_id, b.master_epoch, new_set, epoch)
        self._send(b, req, altered)


def _dead(info: BrokerLiveInfo) -> BrokerLiveInfo:
    return BrokerLiveInfo(
        False,
        info.epoch,
        info.max_offset,
        info.confirm_offset,
        info.election_priority,
        info.last_heartbeat_ms,
    )


# Event kinds of `world.py`, repeated here to avoid an import cycle (checked there).
_PROPOSE_KIND = 4
_BROKER_KIND = 6
