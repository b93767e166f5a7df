"""Request dispatch by code, shared by every role.

Unknown codes get REQUEST_CODE_NOT_SUPPORTED (as RocketMQ answers); a header or body that does
not decode gets SYSTEM_ERROR with a remark naming the field (RocketMQ answers the same code for
a RemotingCommandException). Other exceptions are answered by the connection (SYSTEM_ERROR) and
logged; nothing a client sends can crash a server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from rmq_ha.net.connection import Connection
from rmq_ha.protocol.codes import ResponseCode, code_name
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headerbase import HeaderError
from rmq_ha.protocol.json_compat import BodyDecodeError

RequestHandler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand | None]]


class Dispatcher:
    def __init__(self, role: str) -> None:
        self.role = role
        self._handlers: dict[int, RequestHandler] = {}

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
        try:
            return await handler(conn, cmd)
        except (HeaderError, BodyDecodeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
