"""Helpers for the controller tests: free loopback ports, configs, waiting for a leader."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from rmq_ha import config
from rmq_ha.controller.client import ControllerClient
from rmq_ha.errors import RemotingError
from rmq_ha.protocol.headers import GetMetaDataResponseHeader

#: Fast Raft and scans for tests: failover within about a second.
FAST = {
    "heartBeatTimeIntervalMs": 100,
    "maxHeartBeatLeak": 3,
    "minVoteIntervalMs": 30,
    "maxVoteIntervalMs": 100,
    "scanNotActiveBrokerInterval": 200,
    "scanInactiveMasterInterval": 300,
}


def free_ports(n: int) -> list[int]:
    """Ports free right now (a Raft group's members must know each other's ports up front,
    so they cannot listen on port 0)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


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


def write_properties(path: Path, values: dict[str, Any]) -> Path:
    path.write_text("".join(f"{k} = {v}\n" for k, v in values.items()))
    return path


async def wait_for(pred: Callable[[], Any], timeout_s: float, what: str) -> Any:
    with trio.move_on_after(timeout_s):
        while True:
            got = pred()
            if got:
                return got
            await trio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


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
