"""Issue 20: a real Prometheus server (Debian's `prometheus` package, which `make sysdeps`
installs as root) scrapes a 3-replica controller-mode group while its master is killed, and
PromQL over Prometheus's HTTP API shows what an operator would look for: the role change, the
epoch increase, the elections counted by the controllers and the replication lag back at 0.

Skipped, saying why, where the binary is missing. Prometheus runs on loopback with a config this
test writes, its own data directory under tmp_path, and is stopped by pid."""

from __future__ import annotations

import json
import re
import shutil
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from rmq_jepsen.launch import LogMatch, Proc, free_ports

from hautil import Acked, HaCluster, send_values

PROMETHEUS = shutil.which("prometheus")

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="no `prometheus` binary: Debian's prometheus package is not installed "
    "(`make sysdeps` installs it when run as root with apt-get)",
)


def prometheus_config(targets: dict[str, str]) -> str:
    """A scrape job per role process, labelled with the process's name; a 500 ms interval so
    a failover shows within a few seconds."""
    jobs = [
        {
            "job_name": name,
            "scrape_interval": "500ms",
            "scrape_timeout": "400ms",
            "static_configs": [{"targets": [addr], "labels": {"proc": name}}],
        }
        for name, addr in sorted(targets.items())
    ]
    # JSON is YAML: no YAML library needed to write it.
    return json.dumps({"global": {"scrape_interval": "500ms"}, "scrape_configs": jobs})


def start_prometheus(tmp: Path, targets: dict[str, str]) -> tuple[Proc, str]:
    assert PROMETHEUS is not None
    (port,) = free_ports(1)
    conf = tmp / "prometheus.yml"
    conf.write_text(prometheus_config(targets))
    addr = f"127.0.0.1:{port}"
    proc = Proc(
        "prometheus",
        [
            PROMETHEUS,
            f"--config.file={conf}",
            f"--storage.tsdb.path={tmp / 'prometheus-data'}",
            f"--web.listen-address={addr}",
            "--log.level=info",
        ],
        tmp / "prometheus.log",
        ready=LogMatch(re.compile(r"Server is ready to receive web requests")),
    )
    proc.start()
    return proc, addr


async def promql(addr: str, query: str) -> list[dict[str, Any]]:
    """An instant query; the result vector (each {metric: labels, value: [t, "v"]})."""
    url = f"http://{addr}/api/v1/query?query=" + urllib.parse.quote(query)

    def get() -> bytes:
        with urllib.request.urlopen(url, timeout=10) as r:
            body: bytes = r.read()
            return body

    answer = json.loads(await trio.to_thread.run_sync(get))
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


async def values_by_proc(addr: str, query: str) -> dict[str, float]:
    return {r["metric"].get("proc", ""): float(r["value"][1]) for r in await promql(addr, query)}


async def until(what: str, check: Callable[[], Awaitable[bool]], logs: Callable[[], str]) -> None:
    with trio.move_on_after(60):
        while not await check():
            await trio.sleep(0.2)
        return
    raise AssertionError(f"never: {what}\n{logs()}")


@pytest.mark.timeout(240)
async def test_prometheus_sees_a_master_failover_with_promql(tmp_path: Path) -> None:
    c = HaCluster(tmp_path, metrics=True)
    prom: Proc | None = None
    try:
        await c.start()
        m = await c.master()
        await c.wait_sync_state_set(m, 3)
        targets = {p.name: c.metrics_addr(p) for p in [*c.brokers, *c.namesrvs]}
        prom, paddr = start_prometheus(tmp_path, targets)
        await prom.wait_ready(60)
        logs = lambda: c.logs() + "\n--- prometheus\n" + (prom.tail() if prom else "")  # noqa: E731
        old, old_name = m, c.brokers[m].name

        # Prometheus scrapes every process, and sees the master as MASTER.
        async def all_up() -> bool:
            up = await values_by_proc(paddr, "up")
            return len(up) == len(targets) and all(v == 1 for v in up.values())

        await until("every target is up", all_up, logs)

        async def sees_master(name: str) -> bool:
            got = await values_by_proc(paddr, 'rmq_ha_broker_role{role="MASTER"} == 1')
            return list(got) == [name]

        await until("the first master is MASTER in Prometheus", lambda: sees_master(old_name), logs)
        epochs = await values_by_proc(paddr, "rmq_ha_broker_epoch")
        first_epoch = epochs[old_name]

        acked = Acked()
        assert (
            await send_values(c.ns_addrs[0], "TopicProm", [f"a{i}" for i in range(20)], acked) == []
        )

        # Kill the master: the controllers elect another; Prometheus shows the old target down,
        # a different broker as MASTER at a higher epoch.
        c.brokers[old].kill()
        new = await c.master(exclude=old)
        new_name = c.brokers[new].name
        await until("the new master is the only MASTER", lambda: sees_master(new_name), logs)

        async def old_down() -> bool:
            up = await values_by_proc(paddr, f'up{{proc="{old_name}"}}')
            return up == {old_name: 0.0}

        await until("the killed master's target is down", old_down, logs)
        rose = await values_by_proc(
            paddr, f'rmq_ha_broker_epoch{{proc="{new_name}"}} > {first_epoch}'
        )
        assert new_name in rose, rose
        # The role change itself is in the series' history: the new master was SLAVE before.
        was_slave = await values_by_proc(
            paddr, f'max_over_time(rmq_ha_broker_role{{proc="{new_name}",role="SLAVE"}}[5m])'
        )
        assert was_slave == {new_name: 1.0}, was_slave

        async def elections_counted() -> bool:
            got = await promql(
                paddr,
                'sum(max_over_time(rmq_ha_controller_master_elections_total{result="SUCCESS"}[5m]))',
            )
            return bool(got) and float(got[0]["value"][1]) >= 2

        await until("the controllers count two elections", elections_counted, logs)

        # Sends to the new master replicate; the surviving replica's lag returns to 0.
        assert (
            await send_values(c.ns_addrs[0], "TopicProm", [f"b{i}" for i in range(20)], acked) == []
        )

        async def lag_zero() -> bool:
            got = await promql(paddr, f'rmq_ha_replication_lag_bytes{{proc="{new_name}"}}')
            connected = await promql(paddr, f'sum(rmq_ha_replica_connected{{proc="{new_name}"}})')
            return (
                bool(got)
                and all(float(r["value"][1]) == 0 for r in got)
                and bool(connected)
                and float(connected[0]["value"][1]) >= 1
            )

        await until("the replication lag on the new master returns to 0", lag_zero, logs)
        confirm = await values_by_proc(paddr, f'rmq_ha_confirm_offset_bytes{{proc="{new_name}"}}')
        assert confirm.get(new_name, 0) > 0, confirm
    finally:
        if prom is not None:
            prom.kill()
        c.stop()
