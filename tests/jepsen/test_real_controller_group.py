"""Issue 17: real Apache RocketMQ 5.5.0 in controller mode from the one launcher
(`rmq_jepsen.bench.realrmq.RealControllerGroup`): 3 name servers with embedded DLedger
controllers and 3 brokers with allAckInSyncStateSet. The master is found by asking the
controller leader; after kill -9 of the master another replica is elected and acknowledges a
send, and the restarted old master brings the SyncStateSet back to 3.

A group takes ~35-45 s to come up on 2 busy cores and the test takes 1-3 min, so it is not in
`make test`: `make test-real-rocketmq` runs it (RMQ_REAL_ROCKETMQ_TEST=1; needs java, mvn and
the jars Maven fetches)."""

from __future__ import annotations

import os
import shutil

import pytest
import trio
from rmq_jepsen.bench.realrmq import RealControllerGroup

from rmq_ha.client import ClientConfig, Producer, ProducerConfig
from rmq_ha.client.errors import ClientError

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        os.environ.get("RMQ_REAL_ROCKETMQ_TEST") != "1"
        or shutil.which("java") is None
        or shutil.which("mvn") is None,
        reason="real RocketMQ group: `make test-real-rocketmq` (java and mvn needed)",
    ),
]


async def _send_ok(namesrv: str, timeout_s: float) -> str:
    """Sends until one send is SEND_OK; returns the address of the master that took it."""
    cfg = ProducerConfig(
        client=ClientConfig(client_ip="127.0.0.1", poll_name_server_interval_s=0.2),
        send_msg_timeout_s=2.0,
        retry_times_when_send_failed=0,
    )
    async with Producer("real-group-test", namesrv, config=cfg) as p:
        with trio.fail_after(timeout_s):
            while True:
                try:
                    r = await p.send("RealGroupTest", b"x")
                except ClientError:
                    await trio.sleep(0.1)
                    continue
                inst = p._instance
                addr = inst.routes.master_addr(r.queue.broker_name) if inst else None
                if r.status.name == "SEND_OK" and addr is not None:
                    return addr


async def test_real_controller_group_fails_over_and_heals(tmp_path):
    g = RealControllerGroup(tmp_path, broker={"controllerHeartBeatTimeoutMills": 2000})
    try:
        await g.start()
        m = await g.master()
        assert await g.sync_state_size(m) == 3
        assert await _send_ok(g.ns_addrs[0], 60) == g.broker_addr(m)
        g.brokers[m].kill()
        new = await g.master(120, exclude=m)
        assert new != m
        assert await _send_ok(g.ns_addrs[1], 60) == g.broker_addr(new)
        g.brokers[m].start()
        await g.brokers[m].wait_ready(180)
        await g.wait_sync_state_set(new, 3, 180)
    finally:
        g.stop()
