"""ReplicasManager: a controller-mode broker's side of the controller (reference 2.11-2.12).

The broker starts fenced and unregistered. This task finds the controller leader, obtains a
persistent broker id (GET_NEXT_BROKER_ID -> `brokerIdentity-temp` -> APPLY_BROKER_ID ->
`brokerIdentity`), registers (REGISTER_BROKER), heartbeats every controller, asks for an
election when the group has no master, polls GET_REPLICA_INFO, and obeys
NOTIFY_BROKER_ROLE_CHANGED (stale epochs ignored). As master it shrinks the SyncStateSet
every checkSyncStateSetPeriod and reports every change with ALTER_SYNC_STATE_SET; a change
applies only once the controller accepted it (until then the union rule of `HaCore` holds).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from rmq_ha import faults
from rmq_ha.broker.ha.service import RoleRefused
from rmq_ha.clock import monotonic_ms
from rmq_ha.controller import messages as m
from rmq_ha.controller.client import ControllerClient
from rmq_ha.durable import write_atomic
from rmq_ha.errors import ConfigError, RemotingError
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
)
from rmq_ha.protocol.models import SyncStateSet

if TYPE_CHECKING:
    from rmq_ha.broker.broker import Broker

log = logging.getLogger(__name__)

IDENTITY_FILE = "brokerIdentity"
TEMP_IDENTITY_FILE = "brokerIdentity-temp"
#: A proposal the controller neither accepted nor refused is dropped after this long, so the
#: master can propose again (the replica-info poll adopts it if it was committed after all).
PROPOSAL_STALE_MS = 10_000


class ReplicasManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.cfg
        self.cfg = cfg
        self.cc = ControllerClient(broker.outbound, cfg.controller_addrs, timeout_s=3.0)
        self.broker_id: int | None = None
        self.running = trio.Event()
        self._proposed_at = 0
        self._lock = trio.Lock()
        self.replica_addrs: dict[int, str] = {}
        # The last answer named no (live) master: ask for an election every second until one
        # is known, not only at the next replica-info poll.
        self.masterless = False
        broker.ha.on_proposal = self.report

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
                code = f"{self.broker.address};{int(time.time() * 1000)}"
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
            except (RemotingError, trio.TooSlowError, OSError) as e:
                log.warning("controller start-up failed (%s); retrying", e)
                await trio.sleep(1.0)
        async with trio.open_nursery() as n:
            n.start_soon(self._heartbeat_loop)
            n.start_soon(self._poll_loop)
            n.start_soon(self._shrink_loop)
            n.start_soon(self._elect_loop)

    async def _start(self) -> None:
        await self.cc.find_leader()
        self.broker_id = await self._obtain_id()
        self.broker.ha.self_id = self.broker_id
        reg = await self.cc.request(
            m.RegisterBrokerRequest(
                self.cfg.cluster_name, self.cfg.broker_name, self.broker_id, self.broker.address
            )
        )
        if not reg.ok:
            raise RemotingError(f"REGISTER_BROKER refused: {reg.code!r} {reg.remark}")
        await self.heartbeat_once()
        self.running.set()
        await self._apply_master_info(reg)
        if reg.master_broker_id is None:
            await self.elect()

    async def elect(self) -> None:
        assert self.broker_id is not None
        req = m.ElectMasterRequest.of_broker_trigger(
            self.cfg.cluster_name, self.cfg.broker_name, self.broker_id
        )
        try:
            resp = await self.cc.request(req)
        except RemotingError as e:
            log.info("election request failed: %s", e)
            return
        if resp.ok or resp.master_broker_id is not None:
            await self._apply_master_info(resp)
        else:
            log.info("election refused: %s %s", resp.code, resp.remark)

    async def _elect_loop(self) -> None:
        while True:
            await trio.sleep(1.0)
            if self.masterless:
                await self.elect()

    async def _apply_master_info(self, info: m.MasterInfo) -> None:
        if info.master_broker_id is None or info.master_epoch is None:
            self.masterless = True
            return
        self.masterless = False
        await self.change_role(
            info.master_broker_id,
            info.master_address,
            info.master_epoch,
            info.sync_state_set_epoch or 0,
            frozenset(info.sync_state_set),
        )

    async def change_role(
        self,
        master_id: int,
        master_addr: str | None,
        epoch: int,
        ss_epoch: int,
        members: frozenset[int],
    ) -> None:
        async with self._lock:
            ha = self.broker.ha
            if master_id == self.broker_id:
                try:
                    changed = ha.change_to_master(epoch, members, ss_epoch)
                except RoleRefused as e:
                    # Stay up and fenced; the heartbeat tells the controller why, and asking
                    # for an election lets it pick a replica that can serve (issue 13).
                    log.error("refusing to become master: %s", e)
                    self.masterless = True
                    return
                if changed:
                    await self.broker.became_master(epoch)
                    await self._refresh_replica_addrs()
            elif epoch >= ha.master_epoch:
                if ha.change_to_slave(epoch, master_id) or self.broker.role_is_master():
                    await self.broker.became_slave(epoch, master_addr)

    async def on_notice(self, cmd: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED from the controller."""
        h = NotifyBrokerRoleChangedRequestHeader.from_ext(cmd.ext_fields)
        body = SyncStateSet.from_json(cmd.body) if cmd.body else SyncStateSet()
        if h.master_broker_id is None or h.master_epoch is None or self.broker_id is None:
            return
        await self.change_role(
            h.master_broker_id,
            h.master_address,
            h.master_epoch,
            h.sync_state_set_epoch or body.sync_state_set_epoch,
            frozenset(body.sync_state_set),
        )

    # ---- periodic tasks -----------------------------------------------------------------

    def heartbeat_header(self) -> BrokerHeartbeatRequestHeader:
        native = self.broker.store.native
        ha = self.broker.ha
        debt = ha.catch_up()
        return BrokerHeartbeatRequestHeader(
            cluster_name=self.cfg.cluster_name,
            broker_addr=self.broker.address,
            broker_name=self.cfg.broker_name,
            broker_id=self.broker_id,
            epoch=ha.epochs.last_epoch() or 0,
            max_offset=native.max_offset,
            confirm_offset=native.confirm_offset,
            heartbeat_timeout_mills=self.cfg.controller_heartbeat_timeout_ms,
            election_priority=self.cfg.broker_election_priority,
            catch_up_offset=None if debt is None else debt.offset,
            catch_up_epoch=None if debt is None else debt.epoch,
        )

    async def heartbeat_once(self) -> None:
        ext = self.heartbeat_header().to_ext()
        for addr in self.cc.addrs:
            cmd = RemotingCommand.request(RC.BROKER_HEARTBEAT, ext, oneway=True)
            try:
                with trio.fail_after(1.0):
                    await self.broker.outbound.invoke_oneway(addr, cmd)
            except (RemotingError, trio.TooSlowError, OSError) as e:
                log.debug("heartbeat to controller %s failed: %s", addr, e)
                self.broker.outbound.close_connection(addr)

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.broker_heartbeat_interval_ms / 1000)
            await self.heartbeat_once()

    async def _poll_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.sync_broker_metadata_period_ms / 1000)
            try:
                await self.poll_once()
            except (RemotingError, trio.TooSlowError) as e:
                log.debug("replica info poll failed: %s", e)

    async def poll_once(self) -> None:
        info = await self.cc.request(m.GetReplicaInfoRequest(self.cfg.broker_name))
        if info.code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            await self._start()
            return
        if not info.ok:
            return
        ha = self.broker.ha
        if info.master_broker_id is None:
            self.masterless = True
            await self.elect()
            return
        if info.master_epoch is not None and info.master_epoch > ha.master_epoch:
            await self._apply_master_info(info)
            return
        if ha.is_master and info.master_broker_id == self.broker_id:
            ss_epoch = info.sync_state_set_epoch or 0
            if ss_epoch > ha.core.sync_state_set_epoch:
                ha.apply_sync_state_set(frozenset(info.sync_state_set), ss_epoch)
            elif (
                ha.core.proposed is not None
                and monotonic_ms() - self._proposed_at > PROPOSAL_STALE_MS
            ):
                ha.core.cancel_proposal()

    async def _shrink_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.check_sync_state_set_period_ms / 1000)
            ha = self.broker.ha
            if not ha.is_master:
                continue
            proposal = ha.core.maybe_shrink(monotonic_ms())
            if proposal is not None:
                await self.report(proposal)

    async def report(self, members: frozenset[int]) -> None:
        """ALTER_SYNC_STATE_SET for a proposal of `HaCore`; applied only when accepted."""
        ha = self.broker.ha
        if self.broker_id is None or not ha.is_master:
            return
        self._proposed_at = monotonic_ms()
        req = m.AlterSyncStateSetRequest(
            self.cfg.broker_name,
            self.broker_id,
            ha.master_epoch,
            members,
            ha.core.sync_state_set_epoch,
        )
        try:
            resp = await self.cc.request(req)
            if faults.active(faults.DROP_ALTER_SYNC_STATE_SET_REPLY):
                raise RemotingError("fault injected: the controller's answer is dropped")
        except (RemotingError, trio.TooSlowError) as e:
            # Unknown outcome: keep the union until the replica-info poll tells.
            log.info("ALTER_SYNC_STATE_SET %s: no answer (%s)", sorted(members), e)
            return
        if resp.ok and resp.new_sync_state_set_epoch is not None:
            ha.apply_sync_state_set(frozenset(resp.sync_state_set), resp.new_sync_state_set_epoch)
            log.info(
                "SyncStateSet is now %s (epoch %d)",
                sorted(resp.sync_state_set),
                resp.new_sync_state_set_epoch,
            )
        else:
            log.info("ALTER_SYNC_STATE_SET %s refused: %s", sorted(members), resp.remark)
            ha.core.cancel_proposal()

    async def _refresh_replica_addrs(self) -> None:
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
