"""The bench's scraper of the cluster's own metrics (issue 20): it reads a real exporter (the
one the roles serve), keeps only the families the report draws, marks a target it cannot reach
as down, and the campaign's roles are configured to serve an endpoint each."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import trio
from rmq_jepsen.db import TOPOLOGIES, Timing, plan_roles
from rmq_jepsen.hosts import loopback_hosts
from rmq_jepsen.launch import free_ports
from rmq_jepsen.scrape import WANTED, Scraper, pick, scraping
from rmq_jepsen.state import StateDir

from rmq_ha.broker.metrics import Traffic, families
from rmq_ha.metrics import SnapshotCollector, registry_of, serve_metrics
from test_metrics import snapshot


@pytest.mark.timeout(30)
async def test_scraper_keeps_the_wanted_families_and_marks_a_dead_target_down(
    tmp_path: Path,
) -> None:
    base = {"cluster": "C", "node_type": "broker", "node_id": "broker-a"}
    reg = registry_of(SnapshotCollector(lambda: families(snapshot(), Traffic(), base)))
    (dead,) = free_ports(1)
    out = tmp_path / "metrics.jsonl"
    ticks = iter(range(10**9))
    async with trio.open_nursery() as n:
        addr = await n.start(serve_metrics, reg, "127.0.0.1", 0)
        sc = Scraper(
            {"b0": addr, "gone": f"127.0.0.1:{dead}"}, out, lambda: next(ticks), interval_s=0.5
        )
        with open(out, "w") as f:
            await sc.one("b0", addr, f)
            await sc.one("gone", f"127.0.0.1:{dead}", f)
        n.cancel_scope.cancel()
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    ok, down = lines
    assert ok["node"] == "b0" and ok["up"] == 1 and ok["time_ns"] == 0
    m = ok["m"]
    assert set(m) <= set(WANTED)
    assert m["rmq_ha_broker_role"] == "MASTER"
    assert m["rmq_ha_broker_epoch"] == 3
    assert m["rmq_ha_sync_state_set_size"] == 2
    assert m["rmq_ha_replication_lag_bytes"] == {"2": 100, "3": 0}
    assert m["rmq_ha_confirm_offset_bytes"] == 900
    assert "rocketmq_messages_in_total" not in m
    assert down["node"] == "gone" and down["up"] == 0 and down["error"]
    assert sc.summary() == {"targets": 2, "scrapes": 2, "failed": 1, "interval_s": 0.5}


@pytest.mark.timeout(30)
async def test_a_target_reset_mid_answer_is_down_not_fatal(tmp_path: Path) -> None:
    """A broker killed while it answers resets the connection: that scrape is down and the
    scraper goes on (found when a killed broker ended a whole campaign)."""
    import socket
    import struct

    async def resetter(stream: trio.SocketStream) -> None:
        await stream.receive_some(1024)
        await stream.send_all(b"HTTP/1.0 200 OK\r\n")
        # SO_LINGER 0: close() sends RST, as a killed process's kernel does with unread data
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        stream.socket.close()

    out = tmp_path / "metrics.jsonl"
    async with trio.open_nursery() as n:
        (listener,) = await n.start(
            functools.partial(trio.serve_tcp, host="127.0.0.1"), resetter, 0
        )
        port = listener.socket.getsockname()[1]
        sc = Scraper({"b0": f"127.0.0.1:{port}"}, out, lambda: 0, interval_s=1.0)
        with open(out, "w") as f:
            for _ in range(3):
                await sc.one("b0", f"127.0.0.1:{port}", f)
        n.cancel_scope.cancel()
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["up"] for x in lines] == [0, 0, 0]
    assert sc.failed == 3


@pytest.mark.timeout(30)
async def test_scraping_runs_until_the_block_ends(tmp_path: Path) -> None:
    base = {"cluster": "C", "node_type": "broker", "node_id": "broker-a"}
    reg = registry_of(SnapshotCollector(lambda: families(snapshot(), Traffic(), base)))
    out = tmp_path / "metrics.jsonl"
    async with trio.open_nursery() as n:
        addr = await n.start(serve_metrics, reg, "127.0.0.1", 0)
        sc = Scraper({"b0": addr}, out, lambda: 0, interval_s=0.05)
        async with scraping(sc):
            while sc.scrapes < 3:
                await trio.sleep(0.01)
        n.cancel_scope.cancel()
    assert len(out.read_text().splitlines()) >= 3


def test_pick_ignores_unwanted_families_and_reads_counters() -> None:
    text = (
        "# TYPE rmq_ha_broker_role gauge\n"
        'rmq_ha_broker_role{role="MASTER"} 0.0\n'
        'rmq_ha_broker_role{role="SLAVE"} 1.0\n'
        "# TYPE other gauge\nother 5\n"
        "# TYPE rmq_ha_controller_raft_term gauge\nrmq_ha_controller_raft_term 7\n"
    )
    assert pick(text) == {"rmq_ha_broker_role": "SLAVE", "rmq_ha_controller_raft_term": 7}


def test_every_campaign_role_serves_metrics_on_its_own_port(tmp_path: Path) -> None:
    hosts = loopback_hosts(5, StateDir(tmp_path), port_base=20000)
    for name in ("controller", "acting-master", "independent"):
        roles = plan_roles(TOPOLOGIES[name], hosts, Timing())
        addrs = [r.metrics_addr() for r in roles]
        assert all(a is not None for a in addrs), name
        by = {h.name: h for h in hosts}
        used = {f"{by[r.node].address}:{p}" for r in roles for p in (r.port, r.ha_port) if p}
        assert not set(addrs) & used
        assert len(set(addrs)) == len(addrs), addrs
        for r in roles:
            assert r.values["metricsExporterType"] == "PROM"
