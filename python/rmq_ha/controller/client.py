"""A client of a controller group, as brokers and mqadmin use one: ask any node for the
metadata (1005), send leader-only requests to the node that serves, and on
CONTROLLER_NOT_LEADER (2007) or a lost connection look the leader up again and retry.

Retrying is safe: every controller write is validated against the state it would change and
applied only if its premise still holds, so a duplicate is refused or is a no-op.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import trio

from rmq_ha.controller import wire
from rmq_ha.controller.messages import Request
from rmq_ha.errors import RemotingError, RemotingTimeoutError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import GetMetaDataResponseHeader

log = logging.getLogger(__name__)


def split_addrs(text: str) -> list[str]:
    """ "host:port;host:port" (RocketMQ's controllerAddr) as a list."""
    return [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]


#: The least time one try of a controller request is given, even past its deadline.
MIN_TRY_S = 0.2


class NoLeaderError(RemotingError):
    """No controller node serves as leader (yet)."""


class ControllerClient:
    def __init__(
        self, client: RemotingClient, addrs: Sequence[str], timeout_s: float = 3.0
    ) -> None:
        if not addrs:
            raise ValueError("no controller addresses")
        self.client = client
        self.addrs = list(addrs)
        self.timeout_s = timeout_s
        self.leader: str | None = None

    async def metadata(self, addr: str) -> GetMetaDataResponseHeader:
        cmd = RemotingCommand.request(RC.CONTROLLER_GET_METADATA_INFO)
        resp = await self.client.invoke(addr, cmd, self.timeout_s)
        if resp.code != Code.SUCCESS:  # e.g. refused by the controller's ACL
            raise NoLeaderError(f"controller {addr} answered {resp.code}: {resp.remark}")
        return GetMetaDataResponseHeader.from_ext(resp.ext_fields)

    async def find_leader(self) -> str:
        """The address of a node that says it serves as leader; NoLeaderError if none does
        (naming the last error, e.g. an ACL refusal). Every node is asked at once and the
        first leader to answer wins: asked one after the other, a node that cannot be reached
        (a partition drops its packets) cost a connect timeout each before the next was asked
        (fault probe: a SyncStateSet change took 10.7 s to fail this way)."""
        found: list[str] = []
        errors: list[str] = []

        async def ask(addr: str, done: trio.CancelScope) -> None:
            try:
                meta = await self.metadata(addr)
            except RemotingError as e:
                log.debug("controller %s: %s", addr, e)
                errors.append(f"{addr}: {e}")
                return
            if meta.is_leader and not found:
                found.append(addr)
                done.cancel()

        async with trio.open_nursery() as n:
            for addr in self.addrs:
                n.start_soon(ask, addr, n.cancel_scope)
        if found:
            self.leader = found[0]
            return found[0]
        last = f" (last error: {errors[-1]})" if errors else ""
        raise NoLeaderError(f"no serving controller leader among {';'.join(self.addrs)}{last}")

    async def invoke(
        self, cmd: RemotingCommand, deadline_s: float | None = None
    ) -> RemotingCommand:
        """Sends `cmd` to the leader, following 2007 answers and failovers until `deadline_s`
        seconds have passed (default: the request timeout). Each try uses a fresh opaque and
        lasts at most the request timeout, and none outlives the deadline (a connect to an
        unreachable node is cut short too)."""
        end = trio.current_time() + (self.timeout_s if deadline_s is None else deadline_s)
        last: Exception | None = None
        while True:
            try:
                left = min(end - trio.current_time(), self.timeout_s)
                with trio.fail_after(max(left, MIN_TRY_S)):
                    addr = self.leader or await self.find_leader()
                    resp = await self.client.invoke(addr, _again(cmd), self.timeout_s)
                if resp.code != Code.CONTROLLER_NOT_LEADER:
                    return resp
                self.leader = None
                last = NoLeaderError(resp.remark or "not leader")
            except RemotingError as e:
                self.leader, last = None, e
            except trio.TooSlowError:
                self.leader = None
                last = RemotingTimeoutError(
                    f"no controller answer within {self.timeout_s} s"
                    + (f" (before: {last})" if last is not None else "")
                )
            if trio.current_time() >= end:
                raise last if isinstance(last, RemotingError) else RemotingTimeoutError(str(last))
            await trio.sleep(0.05)

    async def request(self, req: Request, deadline_s: float | None = None) -> Any:
        """A typed request (see `requests.handle` for the response type)."""
        resp = await self.invoke(wire.request_command(req), deadline_s)
        return wire.decode_response(req, resp)


def _again(cmd: RemotingCommand) -> RemotingCommand:
    return RemotingCommand.request(cmd.code, cmd.ext_fields, cmd.body, oneway=cmd.is_oneway)
