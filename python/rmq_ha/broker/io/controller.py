"""ReplicasManager's I/O: a controller-mode broker's side of the controller (reference
2.11-2.12). The decisions are the role core's; this shell talks to the controllers.

It finds the controller leader (again every `syncControllerMetadataPeriod`, not only after a
NOT_LEADER answer), obtains a persistent broker id (GET_NEXT_BROKER_ID ->
`brokerIdentity-temp` -> APPLY_BROKER_ID -> `brokerIdentity`), registers (REGISTER_BROKER),
heartbeats every controller (carrying the catch-up position of issue 13), polls
GET_REPLICA_INFO every `syncBrokerMetadataPeriod`, and turns every answer and every
NOTIFY_BROKER_ROLE_CHANGED into a `MasterInfo` event. It executes the core's RequestElection,
ProposeSyncStateSet and RefreshReplicaAddrs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import trio

from rmq_ha import faults
from rmq_ha.broker.core import events as ev
from rmq_ha.broker.core.role import RoleCore
from rmq_ha.clock import monotonic_ms
from rmq_ha.config import BrokerConfig
from rmq_ha.controller import messages as m
from rmq_ha.controller.client import ControllerClient
from rmq_ha.durable import write_atomic
from rmq_ha.errors import ConfigError, RemotingError, RemotingTimeoutError
from rmq_ha.net.client import RemotingClient
from rmq_ha.net.logthrottle import THROTTLE
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
)
from rmq_ha.protocol.models import SyncStateSet

log = logging.getLogger(__name__)

IDENTITY_FILE = "brokerIdentity"


class UnknownToController(RemotingError):
    """The controller does not know this broker's id: an operator must decide."""


TEMP_IDENTITY_FILE = "brokerIdentity-temp"


class ControllerShell:
    def __init__(
        self,
        cfg: BrokerConfig,
        outbound: RemotingClient,
        core: RoleCore,
        feed: Callable[[ev.Event], None],
        address: str,
        last_epoch: Callable[[], int],
    ) -> None:
        self.cfg = cfg
        self.outbound = outbound
        self.core = core
        self.feed = feed
        self.address = address
        self.last_epoch = last_epoch
        self.cc = ControllerClient(outbound, cfg.controller_addrs, timeout_s=3.0)
        self.broker_id: int | None = None
        self.running = trio.Event()
        self._poll_soon = trio.Event()
        self.replica_addrs: dict[int, str] = {}
        #: monotonic ms of the controller's last answer (to a poll, an election, a
        #: registration) and of the last heartbeat a controller answered; for metrics.
        self.last_answer_ms: int | None = None
        self.last_heartbeat_ms: int | None = None
        #: Per controller address: when (trio's clock, s) it last answered a heartbeat, or
        #: the first heartbeat was sent to it.
        self._answered: dict[str, float] = {}

    # ---- identity -----------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        return self.cfg.store_root / name

    def _load_identity(self) -> tuple[int | None, tuple[int, str] | None]:
        """(applied id, (temp id, check code)) from the identity files."""
        applied: int | None = None
        temp: tuple[int, str] | None = None
        p = self._path(IDENTITY_FILE)
        if p.exists():
            cluster, name, bid = p.read_text().strip().split("#")[:3]
            self._check_names(cluster, name, p)
            applied = int(bid)
        t = self._path(TEMP_IDENTITY_FILE)
        if applied is None and t.exists():
            parts = t.read_text().strip().split("#")
            if len(parts) >= 4:
                self._check_names(parts[0], parts[1], t)
                temp = (int(parts[2]), parts[3])
        return applied, temp

    def _check_names(self, cluster: str, name: str, path: Path) -> None:
        if (cluster, name) != (self.cfg.cluster_name, self.cfg.broker_name):
            raise ConfigError(
                f"{path} belongs to {cluster}/{name}, not "
                f"{self.cfg.cluster_name}/{self.cfg.broker_name}: wrong storePathRootDir?",
                "brokerName",
            )

    async def _obtain_id(self) -> int:
        applied, temp = self._load_identity()
        if applied is not None:
            return applied
        cluster, name = self.cfg.cluster_name, self.cfg.broker_name
        while True:
            if temp is None:
                nxt = await self.cc.request(m.GetNextBrokerIdRequest(cluster, name))
                if not nxt.ok or nxt.next_broker_id is None:
                    raise RemotingError(f"GET_NEXT_BROKER_ID refused: {nxt.remark}")
                code = f"{self.address};{int(time.time() * 1000)}"
                temp = (int(nxt.next_broker_id), code)
                write_atomic(
                    self._path(TEMP_IDENTITY_FILE),
                    f"{cluster}#{name}#{temp[0]}#{temp[1]}".encode(),
                )
            resp = await self.cc.request(m.ApplyBrokerIdRequest(cluster, name, temp[0], temp[1]))
            if resp.ok:
                write_atomic(self._path(IDENTITY_FILE), f"{cluster}#{name}#{temp[0]}".encode())
                self._path(TEMP_IDENTITY_FILE).unlink(missing_ok=True)
                return temp[0]
            if resp.code == Code.CONTROLLER_BROKER_ID_INVALID:
                log.info("broker id %d was taken; asking for another", temp[0])
                self._path(TEMP_IDENTITY_FILE).unlink(missing_ok=True)
                temp = None
                continue
            raise RemotingError(f"APPLY_BROKER_ID refused: {resp.code!r} {resp.remark}")

    # ---- main loop ----------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            try:
                await self._start()
                break
            except UnknownToController as e:
                THROTTLE.log(log, logging.ERROR, "unknown-to-controller", "%s", e)
                await trio.sleep(1.0)
            except (RemotingError, trio.TooSlowError, OSError) as e:
                log.warning("controller start-up failed (%s); retrying", e)
                await trio.sleep(1.0)
        async with trio.open_nursery() as n:
            n.start_soon(self._heartbeat_loop)
            n.start_soon(self._poll_loop)
            n.start_soon(self._metadata_loop)

    async def _start(self) -> None:
        await self.cc.find_leader()
        self.broker_id = await self._obtain_id()
        self.feed(ev.IdAssigned(self.broker_id))
        reg = await self.cc.request(
            m.RegisterBrokerRequest(
                self.cfg.cluster_name, self.cfg.broker_name, self.broker_id, self.address
            )
        )
        if not reg.ok:
            if reg.code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED:
                raise UnknownToController(
                    f"the controller does not know broker id {self.broker_id} of"
                    f" {self.cfg.cluster_name}/{self.cfg.broker_name} ({reg.remark}). If this"
                    " replica was removed on purpose (cleanBrokerMetadata), delete"
                    f" {self._path(IDENTITY_FILE)} and start it again to join as a new"
                    " replica; if the controllers lost their metadata, restore it (this broker"
                    " does not register again by itself: a new broker set would elect whichever"
                    " replica comes first, maybe one that lacks acknowledged writes). Until"
                    " then no failover happens for this group"
                )
            raise RemotingError(f"REGISTER_BROKER refused: {reg.code!r} {reg.remark}")
        await self.heartbeat_once()
        self.running.set()
        self._master_info(reg, "register")

    def _master_info(self, info: m.MasterInfo, source: str) -> None:
        self.last_answer_ms = monotonic_ms()
        self.feed(ev.MasterInfo.of(info, source))

    async def elect(self) -> None:
        """RequestElection: ELECT_MASTER, triggered by this broker."""
        if self.broker_id is None:
            return
        req = m.ElectMasterRequest.of_broker_trigger(
            self.cfg.cluster_name, self.cfg.broker_name, self.broker_id
        )
        try:
            resp = await self.cc.request(req)
        except (RemotingError, trio.TooSlowError) as e:
            log.info("election request failed: %s", e)
            return
        if resp.ok or resp.master_broker_id is not None:
            self._master_info(resp, "elect")
        else:
            log.info("election refused: %s %s", resp.code, resp.remark)

    async def on_notice(self, cmd: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED from the controller."""
        h = NotifyBrokerRoleChangedRequestHeader.from_ext(cmd.ext_fields)
        body = SyncStateSet.from_json(cmd.body) if cmd.body else SyncStateSet()
        if h.master_broker_id is None or h.master_epoch is None or self.broker_id is None:
            return
        self.last_answer_ms = monotonic_ms()
        self.feed(
            ev.MasterInfo(
                h.master_broker_id,
                h.master_address,
                h.master_epoch,
                h.sync_state_set_epoch or body.sync_state_set_epoch,
                frozenset(body.sync_state_set),
                "notice",
            )
        )

    # ---- periodic tasks -----------------------------------------------------------------

    def heartbeat_header(self) -> BrokerHeartbeatRequestHeader:
        s = self.core.state
        debt = s.catch_up
        return BrokerHeartbeatRequestHeader(
            cluster_name=self.cfg.cluster_name,
            broker_addr=self.address,
            broker_name=self.cfg.broker_name,
            broker_id=self.broker_id,
            epoch=self.last_epoch(),
            max_offset=s.log_max,
            confirm_offset=s.confirm,
            heartbeat_timeout_mills=self.cfg.controller_heartbeat_timeout_ms,
            election_priority=self.cfg.broker_election_priority,
            catch_up_offset=None if debt is None else debt.offset,
            catch_up_epoch=None if debt is None else debt.epoch,
        )

    async def heartbeat_once(self) -> None:
        """One heartbeat to every controller, waiting for their answers."""
        async with trio.open_nursery() as n:
            self._send_heartbeats(n)

    def _send_heartbeats(self, n: trio.Nursery) -> None:
        for addr in self.cc.addrs:
            n.start_soon(self._heartbeat_to, addr)

    async def _heartbeat_to(self, addr: str) -> None:
        """BROKER_HEARTBEAT to one controller, as a request (RocketMQ's brokers send it
        oneway): it carries how long this controller has not answered (`unansweredMs`), so a
        controller whose answers stop reaching this broker (a one-way partition) does not
        elect it a master that would never learn it (controller/elect.py)."""
        now = trio.current_time()
        h = self.heartbeat_header()
        h.unanswered_ms = int((now - self._answered.setdefault(addr, now)) * 1000)
        cmd = RemotingCommand.request(RC.BROKER_HEARTBEAT, h.to_ext())
        wait = self._heartbeat_wait_s()
        try:
            with trio.fail_after(wait):
                resp = await self.outbound.invoke(addr, cmd, timeout_s=wait, close_on_timeout=False)
        except (RemotingTimeoutError, trio.TooSlowError) as e:
            # No answer in time: the connection stays. A controller drops a broker whose
            # connection closes at once, so closing it on a slow answer deposed a live master
            # (a one-way-partition campaign saw it); the next heartbeats say how long this
            # controller has not answered instead.
            log.debug("heartbeat to controller %s: no answer yet (%s)", addr, e)
            return
        except (RemotingError, OSError) as e:
            log.debug("heartbeat to controller %s failed: %s", addr, e)
            self.outbound.close_connection(addr)
            return
        # Any answer, even a refusal, shows that this controller's messages reach us.
        log.debug("heartbeat to controller %s answered: %s", addr, resp.code)
        self._answered[addr] = trio.current_time()
        self.last_heartbeat_ms = monotonic_ms()

    def _heartbeat_wait_s(self) -> float:
        """How long a heartbeat waits for its answer: a few intervals, and less than the time
        after which the controller counts this broker as not hearing it."""
        half = self.cfg.controller_heartbeat_timeout_ms / 2000
        return max(0.2, min(3 * self.cfg.broker_heartbeat_interval_ms / 1000, half))

    async def _heartbeat_loop(self) -> None:
        # Heartbeats do not wait for one another: a controller that does not answer must
        # not delay the heartbeats to the others.
        async with trio.open_nursery() as n:
            while True:
                await trio.sleep(self.cfg.broker_heartbeat_interval_ms / 1000)
                self._send_heartbeats(n)

    def poll_now(self) -> None:
        """Poll GET_REPLICA_INFO at once (a name server refused our registration)."""
        self._poll_soon.set()

    async def _poll_loop(self) -> None:
        while True:
            with trio.move_on_after(self.cfg.sync_broker_metadata_period_ms / 1000):
                await self._poll_soon.wait()
            self._poll_soon = trio.Event()
            try:
                await self.poll_once()
            except (RemotingError, trio.TooSlowError) as e:
                log.debug("replica info poll failed: %s", e)

    async def _metadata_loop(self) -> None:
        """syncControllerMetadataPeriod: look the leader up again, so a leader change is
        followed before a request has to fail on the old one."""
        while True:
            await trio.sleep(self.cfg.sync_controller_metadata_period_ms / 1000)
            try:
                leader = await self.cc.find_leader()
            except (RemotingError, trio.TooSlowError) as e:
                log.debug("controller metadata sync failed: %s", e)
                continue
            log.debug("controller leader is %s", leader)

    async def poll_once(self) -> None:
        info = await self.cc.request(m.GetReplicaInfoRequest(self.cfg.broker_name))
        if info.code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            try:
                await self._start()
            except UnknownToController as e:
                # the controllers forgot this group (an emptied controller store): say so,
                # loudly; the group serves on but cannot fail over (operator probe: only an
                # INFO line per second said that its SyncStateSet could not grow)
                THROTTLE.log(log, logging.ERROR, "unknown-to-controller", "%s", e)
            return
        if info.ok:
            self._master_info(info, "poll")
        else:
            self.last_answer_ms = monotonic_ms()

    async def report(self, members: frozenset[int], master_epoch: int, ss_epoch: int) -> None:
        """ProposeSyncStateSet: ALTER_SYNC_STATE_SET; the answer goes back as an event."""
        if self.broker_id is None:
            return
        req = m.AlterSyncStateSetRequest(
            self.cfg.broker_name, self.broker_id, master_epoch, members, ss_epoch
        )
        try:
            resp = await self.cc.request(req)
            if faults.active(faults.DROP_ALTER_SYNC_STATE_SET_REPLY):
                raise RemotingError("fault injected: the controller's answer is dropped")
        except (RemotingError, trio.TooSlowError) as e:
            log.info("ALTER_SYNC_STATE_SET %s: no answer (%s)", sorted(req.sync_state_set), e)
            self.feed(ev.ProposalAnswered(accepted=False, unknown=True))
            return
        if resp.ok and resp.new_sync_state_set_epoch is not None:
            self.feed(
                ev.ProposalAnswered(
                    True,
                    members=frozenset(resp.sync_state_set),
                    sync_state_set_epoch=resp.new_sync_state_set_epoch,
                )
            )
        else:
            log.info("ALTER_SYNC_STATE_SET %s refused: %s", sorted(req.sync_state_set), resp.remark)
            self.feed(ev.ProposalAnswered(accepted=False))

    async def refresh_replica_addrs(self) -> None:
        try:
            resp = await self.cc.request(m.GetSyncStateDataRequest((self.cfg.broker_name,)))
        except (RemotingError, trio.TooSlowError):
            return
        info = resp.replicas_info.get(self.cfg.broker_name) if resp.ok else None
        if info is None:
            return
        self.replica_addrs = {
            r.broker_id: r.broker_address
            for r in (*info.in_sync_replicas, *info.not_in_sync_replicas)
        }
