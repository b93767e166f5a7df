"""Replication flow control and classic mode's gap rule (issue 16, RocketMQ's keys):

* `haFlowControlEnable` / `maxHaTransferByteInSecond`: each slave connection gets at most that
  many bytes per second on average (`FlowMonitor`, pure; whole records may overshoot a window and
  the overshoot is carried over);
* `haMaxGapNotInSync`: a classic SYNC_MASTER waits for its slave only while the slave is no
  further behind than that (RocketMQ's isSlaveOK); otherwise SLAVE_NOT_AVAILABLE at once."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

from hautil import HaCluster
from rmq_ha.broker.ha.core import FlowMonitor, slave_ok
from rmq_ha.config import BrokerConfig, from_mapping
from rmq_ha.errors import ConfigError
from rmq_ha.protocol.codes import ResponseCode as Resp
from test_ha_controller import send_codes_direct


def test_flow_monitor_budget_per_window_and_carried_overshoot() -> None:
    f = FlowMonitor(1000)
    assert f.allowance(10.0) == 1000
    f.used(600)
    assert f.allowance(10.5) == 400
    f.used(900)  # a whole record overshoots the budget
    assert f.allowance(10.9) == 0 and f.next_window() == 11.0
    assert f.allowance(11.0) == 500  # the 500 overshoot is paid from the next window
    f.used(500)
    assert f.allowance(11.99) == 0
    assert f.allowance(14.2) == 1000  # idle windows do not pile up credit
    assert f.next_window() == 15.0


def test_slave_ok_is_rocketmqs_is_slave_ok() -> None:
    gap = 256 * 1024 * 1024
    assert not slave_ok(0, 100, 100, gap)  # no slave connected
    assert slave_ok(1, 1000, 900, gap)
    assert not slave_ok(1, gap + 10, 10, gap)  # exactly the gap behind: not ok
    assert slave_ok(1, gap + 10, 11, gap)
    assert not slave_ok(1, gap, -1, gap)  # no ack yet counts from 0


def test_flow_keys_parse_with_rocketmq_names_and_refuse_nonsense() -> None:
    cfg, _ = from_mapping(
        BrokerConfig,
        {
            "haFlowControlEnable": "true",
            "maxHaTransferByteInSecond": "1048576",
            "haMaxGapNotInSync": "4096",
        },
    )
    assert cfg.ha_flow_control_enable and cfg.max_ha_transfer_rate_bytes == 1 << 20
    assert cfg.ha_max_gap_not_in_sync_bytes == 4096
    assert BrokerConfig().ha_flow_control_enable is False
    with pytest.raises(ConfigError, match="maxHaTransferByteInSecond"):
        from_mapping(BrokerConfig, {"maxHaTransferByteInSecond": "0"})


async def _caught_up(c: HaCluster) -> None:
    with trio.fail_after(60):
        while True:
            m, s = await c.status(0), await c.status(1)
            if m and s and m["maxOffset"] == s["maxOffset"] and s["slaveState"] == "TRANSFER":
                return
            await trio.sleep(0.1)


@pytest.mark.timeout(120)
async def test_a_sync_master_does_not_wait_for_a_slave_beyond_the_gap(tmp_path: Path) -> None:
    """slaveTimeout is 10 minutes: were the gap rule missing, the first send would wait for the
    stopped slave until the test's timeout."""
    c = HaCluster(
        tmp_path,
        replicas=2,
        controller_mode=False,
        broker={"haMaxGapNotInSync": 4096, "slaveTimeout": 600_000},
    )
    try:
        await c.start()
        await _caught_up(c)
        assert await send_codes_direct(c.broker_addr(0), ["small"]) == [Resp.SUCCESS]
        await _caught_up(c)
        c.brokers[1].signal(signal.SIGSTOP)
        # 8 KiB: the slave would be more than 4 KiB behind once it is stored.
        assert await send_codes_direct(c.broker_addr(0), ["x" * 8192]) == [Resp.SLAVE_NOT_AVAILABLE]
        c.brokers[1].signal(signal.SIGCONT)
        await _caught_up(c)
        assert await send_codes_direct(c.broker_addr(0), ["small again"]) == [Resp.SUCCESS]
    finally:
        c.stop()


@pytest.mark.timeout(120)
async def test_flow_controlled_replication_still_delivers_every_byte(tmp_path: Path) -> None:
    """With 64 KiB/s per slave, 256 KiB of SYNC_MASTER sends are each acknowledged by the
    slave (within slaveTimeout) and reach it in full, over a few seconds (no duration is
    asserted); a limiter that stopped sending would answer FLUSH_SLAVE_TIMEOUT."""
    c = HaCluster(
        tmp_path,
        replicas=2,
        controller_mode=False,
        broker={
            "slaveTimeout": 10_000,
            "haFlowControlEnable": "true",
            "maxHaTransferByteInSecond": 65536,
            "haTransferBatchSize": 16384,
        },
    )
    try:
        await c.start()
        await _caught_up(c)
        codes = await send_codes_direct(
            c.broker_addr(0), [f"{i:04d}" + "y" * 4092 for i in range(64)]
        )
        assert codes == [Resp.SUCCESS] * 64
        await _caught_up(c)
    finally:
        c.stop()


@pytest.mark.timeout(120)
async def test_ha_status_answers_rocketmqs_ha_runtime_info(tmp_path: Path) -> None:
    """GET_BROKER_HA_STATUS (mqadmin haStatus) answered "request type 907 not supported"
    (probe with RocketMQ 5.5.0's mqadmin): the master lists its slave's connection, the slave
    its master, in HARuntimeInfo's field names."""
    import json

    from rmq_ha.net.client import RemotingClient
    from rmq_ha.protocol.codes import RequestCode as RC
    from rmq_ha.protocol.command import RemotingCommand

    async def ha_status(addr: str) -> dict[str, object]:
        async with RemotingClient() as rc:
            r = await rc.invoke(addr, RemotingCommand.request(RC.GET_BROKER_HA_STATUS), 5.0)
        assert r.code == Resp.SUCCESS, r.remark
        return dict(json.loads(r.body or b"{}"))

    c = HaCluster(tmp_path, replicas=2, controller_mode=False)
    try:
        await c.start()
        await _caught_up(c)
        with trio.fail_after(60):
            while (m := await ha_status(c.broker_addr(0)))["inSyncSlaveNums"] != 1:
                await trio.sleep(0.1)
        assert m["master"] is True
        (conn,) = m["haConnectionInfo"]  # type: ignore[misc]
        assert conn["slaveAckOffset"] == m["masterCommitLogMaxOffset"] and conn["diff"] == 0
        assert conn["inSync"] is True and str(conn["addr"]).startswith("127.0.0.1:")
        s = await ha_status(c.broker_addr(1))
        assert s["master"] is False and s["haConnectionInfo"] == []
        client = s["haClientRuntimeInfo"]
        assert client["maxOffset"] == m["masterCommitLogMaxOffset"]  # type: ignore[index]
        assert str(client["masterAddr"]).startswith("127.0.0.1:")  # type: ignore[index]
    finally:
        c.stop()
