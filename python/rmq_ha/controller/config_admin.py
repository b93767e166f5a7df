"""GET_CONTROLLER_CONFIG (1010) and UPDATE_CONTROLLER_CONFIG (1009), the requests behind
mqadmin getControllerConfig / updateControllerConfig (`rmq_ha.config_admin` has the rules).
Any controller node answers them for itself (not only the leader), as RocketMQ's do; an admin
updates each node it names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from rmq_ha import config as config_mod
from rmq_ha import config_admin
from rmq_ha.config import ControllerConfig
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC

#: RocketMQ key -> why it is safe to change on a running controller (docs/operations.md).
RUNTIME_KEYS: Final[Mapping[str, str]] = {
    "enableElectUncleanMaster": "read by every election (true may elect a replica that lost data)",
    "notifyBrokerRoleChanged": "read after every election",
    "electMasterMaxRetryCount": "read by every controller-triggered election",
    "scanNotActiveBrokerInterval": "read before every scan of broker heartbeats",
    "scanInactiveMasterInterval": "read before every scan for dead masters",
}


def check_update(cfg: ControllerConfig, values: Mapping[str, str]) -> ControllerConfig:
    """The config after the update, or ConfigError (NotRuntimeKey) naming the key. Pure."""
    return config_mod.replace_runtime_keys(cfg, values, RUNTIME_KEYS)


def register(
    d: Dispatcher,
    current: Callable[[], ControllerConfig],
    apply: Callable[[ControllerConfig], None],
) -> None:
    config_admin.register(
        d,
        current,
        apply,
        get_code=RC.GET_CONTROLLER_CONFIG,
        update_code=RC.UPDATE_CONTROLLER_CONFIG,
        runtime_keys=RUNTIME_KEYS,
        role="controller",
    )
