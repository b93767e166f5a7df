"""GET_BROKER_EPOCH_CACHE (1007): this replica's epochs and offsets as RocketMQ's
EpochEntryCache, plus our fields (role, replication state, acting master, catch-up), for the
admin tools and the tests; GET_BROKER_HA_STATUS (907): RocketMQ's HARuntimeInfo (mqadmin
haStatus); and NOTIFY_BROKER_ROLE_CHANGED, handed to the controller client."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand

Status = Callable[[], dict[str, Any]]
RoleNotice = Callable[[RemotingCommand], Awaitable[None]]


def register(
    d: Dispatcher, status: Status, role_notice: RoleNotice | None, ha_status: Status
) -> None:
    async def epoch_cache(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Resp.SUCCESS, None, None, json.dumps(status()).encode())

    async def ha_runtime(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Resp.SUCCESS, None, None, json.dumps(ha_status()).encode())

    async def role_changed(conn: Connection, cmd: RemotingCommand) -> None:
        if role_notice is not None:
            await role_notice(cmd)

    d.register(RC.GET_BROKER_EPOCH_CACHE, epoch_cache)
    d.register(RC.GET_BROKER_HA_STATUS, ha_runtime)
    d.register(RC.NOTIFY_BROKER_ROLE_CHANGED, role_changed)
