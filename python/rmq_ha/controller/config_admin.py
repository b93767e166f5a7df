"""GET_CONTROLLER_CONFIG (1010) and UPDATE_CONTROLLER_CONFIG (1009), the requests behind
mqadmin getControllerConfig / updateControllerConfig. Any controller node answers them for
itself (not only the leader), as RocketMQ's do; an admin updates each node it names.

Bodies are RocketMQ's properties text (`key=value` lines). An update may change only the keys
in `RUNTIME_KEYS`, each read by the node when it is used; any other key, an unknown key or a
bad value refuses the whole update (NO_PERMISSION for a key that cannot change at runtime,
SYSTEM_ERROR otherwise), naming the key and the reason. An update is not persisted: a
restarted node reads its config file again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Final

from rmq_ha import config as config_mod
from rmq_ha.config import ControllerConfig, NotRuntimeKey, parse_properties
from rmq_ha.errors import ConfigError
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand

log = logging.getLogger(__name__)

#: RocketMQ key -> why it is safe to change on a running controller (docs/operations.md).
RUNTIME_KEYS: Final[Mapping[str, str]] = {
    "enableElectUncleanMaster": "read by every election (true may elect a replica that lost data)",
    "notifyBrokerRoleChanged": "read after every election",
    "electMasterMaxRetryCount": "read by every controller-triggered election",
    "scanNotActiveBrokerInterval": "read before every scan of broker heartbeats",
    "scanInactiveMasterInterval": "read before every scan for dead masters",
}


def config_text(cfg: ControllerConfig) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(config_mod.rocketmq_items(cfg)))


def check_update(cfg: ControllerConfig, values: Mapping[str, str]) -> ControllerConfig:
    """The config after the update, or ConfigError (NotRuntimeKey) naming the key. Pure."""
    return config_mod.replace_runtime_keys(cfg, values, RUNTIME_KEYS)


def register(
    d: Dispatcher,
    current: Callable[[], ControllerConfig],
    apply: Callable[[ControllerConfig], None],
) -> None:
    async def get_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Resp.SUCCESS, None, None, config_text(current()).encode())

    async def update_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            text = (cmd.body or b"").decode("utf-8")
        except UnicodeDecodeError:
            return cmd.response(Resp.SYSTEM_ERROR, "config update body is not UTF-8 text")
        values = parse_properties(text)
        try:
            new = check_update(current(), values)
        except ConfigError as e:
            code = Resp.NO_PERMISSION if isinstance(e, NotRuntimeKey) else Resp.SYSTEM_ERROR
            return cmd.response(code, str(e))
        apply(new)
        log.info("controller config updated at runtime: %s", ", ".join(sorted(values)))
        return cmd.response(Resp.SUCCESS)

    d.register(RC.GET_CONTROLLER_CONFIG, get_config)
    d.register(RC.UPDATE_CONTROLLER_CONFIG, update_config)
