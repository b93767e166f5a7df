"""GET_BROKER_CONFIG (26), UPDATE_BROKER_CONFIG (25) and GET_BROKER_RUNTIME_INFO (28), the
requests behind mqadmin getBrokerConfig, updateBrokerConfig and brokerStatus.

The config travels as RocketMQ does: a properties text body (`key=value` lines, RocketMQ's
keys). An update may change only the keys in `RUNTIME_KEYS`, each read by the broker at the
moment it is used; any other key, an unknown key or a bad value refuses the whole update,
naming the key and the reason, and changes nothing. An accepted update replaces the broker's
config record (validated as at load) through `apply`, which the wiring implements.

An accepted update is persisted first (`<storePathRootDir>/config/runtimeConfig.json`, the
keys ever updated with their last values; RocketMQ rewrites its config file instead), and
`with_runtime_overrides` applies it again at the next start over the config file, with one
WARNING naming each key that overrides the file: an operator who drained a broker with
brokerPermission=4 and restarted it got writes back.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

from rmq_ha import config as config_mod
from rmq_ha._native import decode_stored_record
from rmq_ha.broker.ports import Ports
from rmq_ha.config import BrokerConfig, parse_properties
from rmq_ha.config_admin import config_text, decode_update
from rmq_ha.durable import read_with_backup, write_with_backup
from rmq_ha.errors import ConfigError, RmqHaError
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.admin import GetBrokerConfigResponseHeader
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.models import DataVersion, KVTable
from rmq_ha.store_retention import disk_usage

#: RocketMQ key -> why it is safe to change while the broker runs (docs/operations.md).
RUNTIME_KEYS: Final[Mapping[str, str]] = {
    "brokerPermission": "checked by every send, pull and pop; re-registered at once",
    "maxMessageSize": "checked by every send",
    "longPollingEnable": "read by every pull that finds no message",
    "autoCreateTopicEnable": "read by every send to an unknown topic",
    "defaultTopicQueueNums": "read when a send auto-creates a topic",
}

log = logging.getLogger(__name__)

OVERRIDES_FILE: Final = "runtimeConfig.json"


def overrides_path(cfg: BrokerConfig) -> Path:
    return cfg.store_root / "config" / OVERRIDES_FILE


def _parse_overrides(raw: bytes) -> dict[str, str]:
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError(f"not a JSON object of strings but {type(doc).__name__}")
    for k, v in doc.items():
        if not isinstance(v, str):
            # keys of a JSON object are always strings: only the value can be wrong
            raise ValueError(f"key {k!r}: the value {v!r} is not a string")
    return doc


def load_overrides(cfg: BrokerConfig) -> dict[str, str]:
    """The runtime updates persisted in the store (empty when there are none)."""
    got = read_with_backup(overrides_path(cfg), _parse_overrides, "runtime config")
    return got or {}


def with_runtime_overrides(cfg: BrokerConfig) -> BrokerConfig:
    """`cfg` with the persisted runtime updates applied (each key that changes the loaded
    value logged at WARNING). A persisted key or value the rules no longer allow is refused
    naming the file: ConfigError."""
    values = load_overrides(cfg)
    if not values:
        return cfg
    try:
        new = check_update(cfg, values)
    except ConfigError as e:
        raise ConfigError(f"{overrides_path(cfg)}: {e}", getattr(e, "key", None)) from None
    before = dict(config_mod.rocketmq_items(cfg))
    after = dict(config_mod.rocketmq_items(new))
    changed = [k for k in sorted(after) if before.get(k) != after[k]]
    if changed:
        log.warning(
            "runtime config from updateBrokerConfig (%s) overrides the config file: %s",
            overrides_path(cfg),
            ", ".join(f"{k}={after[k]} (file: {before.get(k)})" for k in changed),
        )
    return new


#: Replaces the broker's config (the wiring: Ports.cfg, the name-server shell, topics).
Apply = Callable[[BrokerConfig], Awaitable[None]]
Status = Callable[[], dict[str, Any]]


def check_update(cfg: BrokerConfig, values: Mapping[str, str]) -> BrokerConfig:
    """The config after the update, or ConfigError naming the first bad key and why
    (NotRuntimeKey for a key that may not change at runtime). Pure."""
    return config_mod.replace_runtime_keys(cfg, values, RUNTIME_KEYS)


def _runtime(boot_ms: int) -> str:
    s = max(0, int(time.time() * 1000) - boot_ms) // 1000
    return (
        f"[ {s // 86400} days, {s // 3600 % 24} hours, {s // 60 % 60} minutes, {s % 60} seconds ]"
    )


def runtime_info(p: Ports, status: dict[str, Any], boot_ms: int) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO's table: RocketMQ's key names where the value means the same,
    then rmq_ha's HA fields. Message totals count since the broker started."""
    native = p.store.native
    msgs_in = sum(v[0] for v in p.traffic.inbound.values())
    msgs_out = sum(v[0] for v in p.traffic.outbound.values())
    table: dict[str, Any] = {
        "brokerVersionDesc": "rmq_ha",
        "bootTimestamp": boot_ms,
        "runtime": _runtime(boot_ms),
        "brokerActive": "true",
        "commitLogMinOffset": native.min_offset,
        "commitLogMaxOffset": native.max_offset,
        "dispatchBehindBytes": max(0, native.max_offset - native.dispatched_offset),
        "msgPutTotalTodayNow": msgs_in,
        "msgGetTotalTodayNow": msgs_out,
        "putTps": p.traffic.tps_text(p.traffic.put_rate),
        "getTransferredTps": p.traffic.tps_text(p.traffic.got_rate),
        "brokerPermission": p.cfg.broker_permission,
        # mqadmin clusterList's columns. No thread pools here (a task per request on one
        # event loop): nothing waits in a send or pull pool queue, so 0 is the true value;
        # the page cache is never locked.
        "sendThreadPoolQueueSize": 0,
        "sendThreadPoolQueueHeadWaitTimeMills": 0,
        "pullThreadPoolQueueSize": 0,
        "pullThreadPoolQueueHeadWaitTimeMills": 0,
        "ackThreadPoolQueueSize": 0,
        "ackThreadPoolQueueHeadWaitTimeMills": 0,
        "pageCacheLockTimeMills": 0,
        "earliestMessageTimeStamp": _earliest_store_time(native),
        "commitLogDiskRatio": _disk_ratio(p.cfg.store_root),
        # rmq_ha: replication state (GET_BROKER_EPOCH_CACHE has the rest).
        "role": status.get("role"),
        "masterEpoch": status.get("masterEpoch"),
        "confirmOffset": native.confirm_offset,
        "flushedOffset": native.flushed_offset,
        "syncStateSet": json.dumps(status.get("syncStateSet", [])),
        "fenced": "false" if status.get("fence") is None else str(status.get("fence")),
    }
    return {k: str(v) for k, v in table.items()}


def _earliest_store_time(native: Any) -> int:
    """The store time of the commitlog's first record (0 when empty or unreadable)."""
    if native.max_offset <= native.min_offset:
        return 0
    try:
        rec = decode_stored_record(native.read_record(native.min_offset).tobytes())
    except (RmqHaError, ValueError, OSError):
        return 0
    ts = rec.get("store_timestamp")
    return ts if isinstance(ts, int) else 0


def _disk_ratio(root: Path) -> float:
    """The used share of the store's filesystem (RocketMQ's commitLogDiskRatio)."""
    try:
        return round(disk_usage(root).used_ratio, 4)
    except OSError:
        return 0.0


def register(d: Dispatcher, p: Ports, apply: Apply, status: Status) -> None:
    boot_ms = int(time.time() * 1000)
    version = [DataVersion.initial(boot_ms)]

    async def get_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetBrokerConfigResponseHeader(version=version[0].to_json().decode())
        return cmd.response(Resp.SUCCESS, None, h.to_ext(), config_text(p.cfg).encode())

    async def update_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        new = decode_update(p.cfg, cmd.body, RUNTIME_KEYS)
        if isinstance(new, tuple):
            return cmd.response(new[0], new[1])
        # Persisted before it takes effect: a write that fails changes nothing.
        values = {**load_overrides(p.cfg), **parse_properties((cmd.body or b"").decode())}
        path = overrides_path(p.cfg)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_with_backup(path, json.dumps(values, sort_keys=True, indent=1).encode())
        except OSError as e:
            return cmd.response(
                Resp.SYSTEM_ERROR, f"cannot persist the update to {path}: {e.strerror or e}"
            )
        await apply(new)
        version[0] = version[0].next_version(int(time.time() * 1000))
        return cmd.response(Resp.SUCCESS)

    async def runtime(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = KVTable(table=runtime_info(p, status(), boot_ms))
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    d.register(RC.GET_BROKER_CONFIG, get_config)
    d.register(RC.UPDATE_BROKER_CONFIG, update_config)
    d.register(RC.GET_BROKER_RUNTIME_INFO, runtime)
