"""Request dispatch by code, shared by every role.

Unknown codes get REQUEST_CODE_NOT_SUPPORTED (as RocketMQ answers); a header or body that does
not decode gets SYSTEM_ERROR with a remark naming the field (RocketMQ answers the same code for
a RemotingCommandException). Other exceptions are answered by the connection (SYSTEM_ERROR) and
logged; nothing a client sends can crash a server.

Every request enters here, so this is where access control runs (RocketMQ runs its ACL as an
RPC hook before the processor, after the code lookup): a `Guard` sees each request of a known
code before its handler and may answer it instead (rmq_ha.security.guard.AclGuard).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from rmq_ha.net.connection import Connection
from rmq_ha.protocol.codes import ResponseCode, code_name
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headerbase import HeaderError
from rmq_ha.protocol.json_compat import BodyDecodeError

RequestHandler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand | None]]


class Guard(Protocol):
    def check(self, peer: str, cmd: RemotingCommand) -> RemotingCommand | None:
        """None lets the request through; a response refuses it (and is sent as the answer)."""
        ...


class Dispatcher:
    def __init__(self, role: str, guard: Guard | None = None) -> None:
        self.role = role
        self._handlers: dict[int, RequestHandler] = {}
        #: Access control for every request (None: none, as RocketMQ with aclEnable=false).
        self.guard = guard

    def register(self, code: int, handler: RequestHandler) -> None:
        self._handlers[int(code)] = handler

    def codes(self) -> list[int]:
        return sorted(self._handlers)

    async def __call__(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            return cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"{self.role}: request type {cmd.code} ({code_name(cmd.code, response=False)}) "
                "not supported",
            )
        if self.guard is not None:
            refused = self.guard.check(conn.peer, cmd)
            if refused is not None:
                return refused
        try:
            return await handler(conn, cmd)
        except (HeaderError, BodyDecodeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
