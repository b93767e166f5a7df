"""The Trio driver of a RaftNode: timers, durable storage, transport over the remoting protocol.

One task owns the node and calls it serially (the core's contract): it waits for the next of
an inbound message, a proposal, or the node's next tick time; calls the node; makes the
returned `persist` operations durable (in a worker thread, fsync'd) before anything else; then
queues `send` messages to per-peer sender tasks; then resolves proposals. Queues are bounded;
a full peer queue drops the message (Raft retries).

Transport, code RMQHA_RAFT_MESSAGE: a Raft request (vote, heartbeat, append, snapshot) goes out
as a remoting request, and the remoting response carries the receiver's Raft response (written
after the receiver made its state durable). So a request that cannot get an answer fails
definitely and at once: connection refused, or the connection closes with the request
outstanding, as when the peer was killed just before or after the write. The core then gets its
`failure_response`, as DLedger's failed futures do, and a vote round does not wait out its
deadline for a dead peer. (Sent oneway, as before issue 14, such a frame was lost without a
trace: a round waited its whole vote-response wait.) A request unanswered within
`request_timeout_s` fails too, and its connection is closed. Oneway frames are still accepted,
and a Raft response to one goes back oneway.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from rmq_ha.errors import RemotingError, RemotingTimeoutError, RmqHaError
from rmq_ha.net.client import RemotingClient
from rmq_ha.net.connection import Connection
from rmq_ha.protocol.codes import RequestCode
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.raft.config import RaftConfig
from rmq_ha.raft.core import NodeStatus, RaftNode, StateMachine
from rmq_ha.raft.messages import (
    AppendRequest,
    AppendResponse,
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
    failure_response,
)
from rmq_ha.raft.outputs import ProposalStatus, Ready, RoleState
from rmq_ha.raft.storage import RaftStorage
from rmq_ha.raft.wire import RaftWireError, decode, encode

log = logging.getLogger(__name__)

_REQUEST_TYPES = (VoteRequest, HeartBeatRequest, AppendRequest, InstallSnapshotRequest)
_RESPONSE_TYPES = (VoteResponse, HeartBeatResponse, AppendResponse, InstallSnapshotResponse)

INBOX_DEPTH = 4096
PEER_QUEUE_DEPTH = 1024
#: Raft requests awaiting their answer, per peer.
PEER_INFLIGHT = 64


class NotLeaderError(RmqHaError):
    """The proposal was not appended: this node does not lead (definite)."""

    definite = True

    def __init__(self, leader_id: str | None) -> None:
        super().__init__(f"not the leader; leader is {leader_id or 'unknown'}")
        self.leader_id = leader_id


class ProposalOutcomeUnknown(RmqHaError):
    """Appended, but leadership changed before commit: it may or may not commit."""


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class _Inbound:
    """A Raft request that came as a remoting request: its Raft response goes back as the
    remoting response, through `answer`."""

    __slots__ = ("answer", "done", "msg")

    def __init__(self, msg: Message) -> None:
        self.msg = msg
        self.answer: Message | None = None
        self.done = trio.Event()


def _answers(resp: Message, req: Message) -> bool:
    return (
        isinstance(resp, _RESPONSE_TYPES)
        and isinstance(req, _REQUEST_TYPES)
        and resp.dst == req.src
        and resp.src == req.dst
        and resp.request_id == req.request_id
    )


class _Proposal:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.done = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class RaftDriver:
    def __init__(
        self,
        node_id: str,
        peers: Mapping[str, str],
        state_machine: StateMachine,
        storage_dir: str | Path,
        *,
        client: RemotingClient,
        config: RaftConfig | None = None,
        rng: random.Random | None = None,
        on_role_change: Callable[[RoleState], None] | None = None,
    ) -> None:
        if node_id not in peers:
            raise ValueError(f"{node_id} is not one of the peers {sorted(peers)}")
        self.node_id = node_id
        self.peers = dict(peers)
        self._sm = state_machine
        self.storage = RaftStorage(storage_dir)
        self._client = client
        self._cfg = config
        self._rng = rng or random.Random()
        self._on_role_change = on_role_change
        self._node: RaftNode | None = None
        self._inbox_send, self._inbox = trio.open_memory_channel[Any](INBOX_DEPTH)
        self._peer_queues: dict[str, trio.MemorySendChannel[Message]] = {}
        self._by_proposal_id: dict[int, _Proposal] = {}
        self._nursery: trio.Nursery | None = None
        hb_ms = (config or RaftConfig()).heart_beat_time_interval_ms
        #: A Raft request not answered within this fails (and its connection is closed).
        self.request_timeout_s = max(2.0, 2 * hb_ms / 1000)

    # -- status --------------------------------------------------------------------------------

    @property
    def node(self) -> RaftNode:
        if self._node is None:
            raise RuntimeError("the driver is not running")
        return self._node

    @property
    def serving(self) -> bool:
        return self._node is not None and self._node.serving

    @property
    def leader_id(self) -> str | None:
        return self._node.leader_id if self._node is not None else None

    def status(self) -> NodeStatus:
        return self.node.status()

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        persisted = await trio.to_thread.run_sync(self.storage.load)
        self._node = RaftNode(
            self.node_id, list(self.peers), self._sm, self._rng, self._cfg, persisted
        )
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for peer, addr in self.peers.items():
                if peer == self.node_id:
                    continue
                send, recv = trio.open_memory_channel[Message](PEER_QUEUE_DEPTH)
                self._peer_queues[peer] = send
                nursery.start_soon(self._sender, peer, addr, recv)
            task_status.started()
            try:
                await self._loop()
            finally:
                for p in self._by_proposal_id.values():
                    p.error = ProposalOutcomeUnknown("the driver stopped")
                    p.done.set()

    async def _loop(self) -> None:
        node = self.node
        while True:
            wait_s = max(0, node.next_tick_ms() - now_ms()) / 1000
            item: Any = None
            with trio.move_on_after(wait_s):
                item = await self._inbox.receive()
            inbound: _Inbound | None = None
            if item is None:
                ready = node.tick(now_ms())
            elif isinstance(item, _Proposal):
                pid, ready = node.propose(item.data, now_ms())
                self._by_proposal_id[pid] = item
            elif isinstance(item, _Inbound):
                inbound = item
                ready = node.receive(item.msg, now_ms())
            else:
                ready = node.receive(item, now_ms())
            try:
                await self._handle(ready, inbound)
            finally:
                if inbound is not None:
                    inbound.done.set()

    async def _handle(self, ready: Ready, inbound: _Inbound | None = None) -> None:
        if ready.persist:
            # Durable before anything leaves this node or is acknowledged (the core's contract).
            await trio.to_thread.run_sync(self.storage.apply, ready.persist)
        for msg in ready.send:
            if inbound is not None and inbound.answer is None and _answers(msg, inbound.msg):
                inbound.answer = msg  # goes back as the remoting response
                continue
            q = self._peer_queues.get(msg.dst)
            if q is None:
                continue
            try:
                q.send_nowait(msg)
            except trio.WouldBlock:
                log.debug("queue to %s full: dropped %s", msg.dst, type(msg).__name__)
            except trio.BrokenResourceError:
                pass  # the sender is gone: this node is shutting down
        for reply in ready.proposals:
            p = self._by_proposal_id.get(reply.proposal_id)
            if p is None or reply.status is ProposalStatus.ACCEPTED:
                continue
            del self._by_proposal_id[reply.proposal_id]
            if reply.status is ProposalStatus.REJECTED:
                p.error = NotLeaderError(reply.leader_id)
            else:
                p.error = ProposalOutcomeUnknown("leadership changed before the entry committed")
            p.done.set()
        for applied in ready.applied:
            if applied.proposal_id is None:
                continue
            p = self._by_proposal_id.pop(applied.proposal_id, None)
            if p is not None:
                p.result = applied.result
                p.done.set()
        for event in ready.events:  # election outcomes, step-downs: rare, and what a
            log.info("raft %s", event)  # failover's log must show
        if ready.role is not None:
            log.info(
                "raft %s: %s term %d leader %s serving %s",
                self.node_id,
                ready.role.role.name,
                ready.role.term,
                ready.role.leader_id,
                ready.role.serving,
            )
            if self._on_role_change is not None:
                self._on_role_change(ready.role)

    async def _sender(self, peer: str, addr: str, recv: trio.MemoryReceiveChannel[Message]) -> None:
        """Sends this peer's messages in order: requests as remoting requests, each answer
        awaited in its own task (at most PEER_INFLIGHT at once); responses oneway."""
        assert self._nursery is not None
        slots = trio.Semaphore(PEER_INFLIGHT)
        async with recv:
            async for msg in recv:
                if isinstance(msg, _REQUEST_TYPES):
                    await slots.acquire()
                    self._nursery.start_soon(self._request, peer, addr, msg, slots)
                    continue
                cmd = RemotingCommand.request(RequestCode.RMQHA_RAFT_MESSAGE, None, encode(msg))
                try:
                    with trio.fail_after(self.request_timeout_s):
                        await self._client.invoke_oneway(addr, cmd)
                except (RemotingError, trio.TooSlowError, OSError) as e:
                    log.debug("raft %s -> %s: %s", self.node_id, peer, e)
                    self._client.close_connection(addr)

    async def _request(self, peer: str, addr: str, msg: Message, slots: trio.Semaphore) -> None:
        try:
            cmd = RemotingCommand.request(RequestCode.RMQHA_RAFT_MESSAGE, None, encode(msg))
            try:
                with trio.fail_after(self.request_timeout_s):
                    resp = await self._client.invoke(addr, cmd, self.request_timeout_s)
            except (RemotingError, trio.TooSlowError, OSError) as e:
                # Refused, closed before the answer (the peer died), or no answer in time.
                log.debug("raft %s -> %s: %s", self.node_id, peer, e)
                if isinstance(e, RemotingTimeoutError | trio.TooSlowError):
                    self._client.close_connection(addr)
                self._feed(failure_response(msg))
                return
            if not resp.body:
                return  # the peer dropped it (inbox full, not for it): as if lost
            try:
                answer = decode(resp.body)
            except RaftWireError as e:
                log.warning("dropped a malformed raft answer from %s: %s", peer, e)
                return
            if _answers(answer, msg):
                self._feed(answer)
        finally:
            slots.release()

    def _feed(self, msg: Message | None) -> None:
        if msg is None:
            return
        try:
            self._inbox_send.send_nowait(msg)
        except (trio.WouldBlock, trio.BrokenResourceError):
            pass

    # -- inputs --------------------------------------------------------------------------------

    async def handle_message(self, conn: Connection, cmd: RemotingCommand) -> None:
        """Remoting handler for RMQHA_RAFT_MESSAGE. A request gets its answer on `conn` from
        here (a response whose body is the Raft response, empty if there is none), so this
        works behind a handler that returns nothing; a oneway frame gets none."""
        answer = await self._take(conn, cmd)
        if not cmd.is_oneway:
            body = encode(answer) if answer is not None else None
            with contextlib.suppress(RemotingError):
                await conn.send(cmd.response(0, None, body=body))
        return None

    async def _take(self, conn: Connection, cmd: RemotingCommand) -> Message | None:
        try:
            msg = decode(cmd.body or b"")
        except RaftWireError as e:
            log.warning("dropped a malformed raft message from %s: %s", conn.peer, e)
            return None
        if msg.dst != self.node_id or msg.src not in self.peers:
            log.warning("dropped a raft message for %s from %s", msg.dst, msg.src)
            return None
        item: Message | _Inbound = msg
        if not cmd.is_oneway and isinstance(msg, _REQUEST_TYPES):
            item = _Inbound(msg)
        try:
            self._inbox_send.send_nowait(item)
        except trio.WouldBlock:
            log.debug("raft inbox full: dropped a message from %s", msg.src)
            return None
        if not isinstance(item, _Inbound):
            return None
        with trio.move_on_after(self.request_timeout_s):
            await item.done.wait()
        return item.answer

    async def propose(self, data: bytes, timeout_s: float) -> Any:
        """Appends `data` and returns the state machine's result once it is applied here."""
        if self._node is None:
            raise NotLeaderError(None)
        p = _Proposal(data)
        with trio.move_on_after(timeout_s) as scope:
            await self._inbox_send.send(p)
            await p.done.wait()
        if scope.cancelled_caught:
            raise RemotingTimeoutError(f"proposal not applied within {timeout_s:.3f} s")
        if p.error is not None:
            raise p.error
        return p.result
