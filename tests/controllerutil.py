"""Helpers for the controller tests: configs and waiting for a leader (ports, property files and
`wait_for` come from the one launcher, `rmq_jepsen.launch`, shared with the benchmarks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from rmq_jepsen.bench.cluster import FAST_CONTROLLER
from rmq_jepsen.launch import free_ports, wait_for, write_properties

from rmq_ha import config
from rmq_ha.controller.client import ControllerClient
from rmq_ha.errors import RemotingError
from rmq_ha.protocol.headers import GetMetaDataResponseHeader

__all__ = [
    "FAST",
    "controller_config",
    "controller_values",
    "free_ports",
    "metadata_all",
    "peers_of",
    "wait_for",
    "wait_leader",
    "write_properties",
]

#: Fast Raft and scans for tests: failover within about a second.
FAST = FAST_CONTROLLER


def peers_of(ports: list[int]) -> str:
    return ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))


def controller_values(ports: list[int], i: int, store: Path, **extra: Any) -> dict[str, Any]:
    return {
        "controllerDLegerGroup": "test-group",
        "controllerDLegerPeers": peers_of(ports),
        "controllerDLegerSelfId": f"n{i}",
        "controllerStorePath": str(store),
        **FAST,
        **extra,
    }


def controller_config(ports: list[int], i: int, store: Path, **extra: Any) -> Any:
    cfg, unknown = config.from_mapping(
        config.ControllerConfig, controller_values(ports, i, store, **extra)
    )
    assert not unknown
    return cfg


async def wait_leader(cc: ControllerClient, timeout_s: float = 15.0) -> str:
    """The address of the serving leader, once one serves."""
    with trio.move_on_after(timeout_s):
        while True:
            try:
                return await cc.find_leader()
            except RemotingError:
                await trio.sleep(0.05)
    raise AssertionError(f"no serving leader within {timeout_s} s")


async def metadata_all(cc: ControllerClient) -> dict[str, GetMetaDataResponseHeader]:
    out = {}
    for addr in cc.addrs:
        try:
            out[addr] = await cc.metadata(addr)
        except RemotingError:
            pass
    return out
