"""A role's config over the wire: the GET_*_CONFIG / UPDATE_*_CONFIG pair that mqadmin's
getBrokerConfig, getNamesrvConfig, getControllerConfig and their update commands use.

Bodies are RocketMQ's properties text (`key=value` lines, keys sorted, secrets masked). An
update may change only the role's runtime keys, each read by the role where it is used; any
other key, an unknown key or a bad value refuses the whole update (NO_PERMISSION for a key that
cannot change at runtime, SYSTEM_ERROR otherwise), naming the key and the reason. An update is
not persisted: a restarted role reads its config file again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from rmq_ha import config as config_mod
from rmq_ha.config import NotRuntimeKey, parse_properties
from rmq_ha.errors import ConfigError
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand

log = logging.getLogger(__name__)

C = TypeVar("C")


def config_text(cfg: Any) -> str:
    """Every key of a config record, sorted, one `key=value` line each (secrets masked)."""
    return "".join(f"{k}={v}\n" for k, v in sorted(config_mod.rocketmq_items(cfg)))


def decode_update(
    cfg: C, body: bytes | None, runtime_keys: Mapping[str, str]
) -> C | tuple[int, str]:
    """The config after an update whose body is `body`, or the (response code, message) that
    refuses it. Pure."""
    try:
        text = (body or b"").decode("utf-8")
    except UnicodeDecodeError:
        return Resp.SYSTEM_ERROR, "config update body is not UTF-8 text"
    try:
        return config_mod.replace_runtime_keys(cfg, parse_properties(text), runtime_keys)
    except ConfigError as e:
        return (Resp.NO_PERMISSION if isinstance(e, NotRuntimeKey) else Resp.SYSTEM_ERROR), str(e)


def register(
    d: Dispatcher,
    current: Callable[[], C],
    apply: Callable[[C], None],
    *,
    get_code: int,
    update_code: int,
    runtime_keys: Mapping[str, str],
    role: str,
) -> None:
    """Registers the pair on `d` for a role whose config `current()` returns and `apply`
    replaces."""

    async def get_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Resp.SUCCESS, None, None, config_text(current()).encode())

    async def update_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        new = decode_update(current(), cmd.body, runtime_keys)
        if isinstance(new, tuple):
            return cmd.response(new[0], new[1])
        apply(new)
        keys = sorted(parse_properties((cmd.body or b"").decode("utf-8")))
        log.info("%s config updated at runtime: %s", role, ", ".join(keys))
        return cmd.response(Resp.SUCCESS)

    d.register(get_code, get_config)
    d.register(update_code, update_config)
