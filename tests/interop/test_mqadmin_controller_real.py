"""`rmq-ha mqadmin`'s controller commands against real Apache RocketMQ 5.5.0 in controller mode
(`rmq_jepsen.bench.realrmq.RealControllerGroup`: 3 name servers with embedded DLedger
controllers, one group of 3 brokers): getControllerMetaData, getSyncStateSet (by broker name
and by cluster), getBrokerEpoch, getControllerConfig, updateControllerConfig (accepted and
refused), electMaster and cleanBrokerMetadata of a group that does not exist.

A real group takes 35 s to minutes to come up on 2 busy cores, so this runs only with
RMQ_REAL_ROCKETMQ_TEST=1 (as `make test-real-rocketmq`), java and mvn."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from rmq_jepsen.bench.realrmq import CLUSTER_NAME, RealControllerGroup

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        os.environ.get("RMQ_REAL_ROCKETMQ_TEST") != "1"
        or shutil.which("java") is None
        or shutil.which("mvn") is None,
        reason="real RocketMQ controller group: RMQ_REAL_ROCKETMQ_TEST=1 (java and mvn needed)",
    ),
]


async def mqadmin(*argv: str, ok: bool = True) -> tuple[int, Any, str]:
    proc = await trio.run_process(
        [sys.executable, "-m", "rmq_ha.cli", "mqadmin", *argv, "--json", "--api-timeout", "10"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    out, err = proc.stdout.decode(), proc.stderr.decode()
    if ok:
        assert proc.returncode == 0, (argv, out, err)
    return proc.returncode, json.loads(out) if out.strip() else None, err


async def test_controller_commands_against_real_rocketmq(tmp_path: Path) -> None:
    g = RealControllerGroup(tmp_path)
    try:
        await g.start()
        m = await g.master(120)
        await g.wait_sync_state_set(m, 3, 180)
        ctl, ns = ";".join(g.controller_addrs), ";".join(g.ns_addrs)

        _, meta, _ = await mqadmin("getControllerMetaData", "-a", ctl)
        assert sorted(r["addr"] for r in meta) == sorted(g.controller_addrs)
        assert sum(1 for r in meta if r["isLeader"]) == 1

        _, sss, _ = await mqadmin("getSyncStateSet", "-a", ctl, "-b", g.broker_name)
        (row,) = sss
        assert row["masterAddress"] == g.broker_addr(m)
        assert len(row["inSyncReplicas"]) == 3 and row["masterEpoch"] >= 1
        _, by_cluster, _ = await mqadmin("getSyncStateSet", "-a", ctl, "-c", CLUSTER_NAME,
                                         "-n", ns)  # fmt: skip
        assert [r["brokerName"] for r in by_cluster] == [g.broker_name]

        _, epochs, _ = await mqadmin("getBrokerEpoch", "-n", ns, "-b", g.broker_name)
        assert {e["addr"] for e in epochs} == {g.broker_addr(i) for i in range(3)}
        assert all(e["epochs"] for e in epochs)

        _, cfgs, _ = await mqadmin("getControllerConfig", "-a", ctl)
        assert set(cfgs) == set(g.controller_addrs)
        assert all("controllerDLegerGroup" in c for c in cfgs.values())
        await mqadmin("updateControllerConfig", "-a", ctl, "-k", "notifyBrokerRoleChanged",
                      "-v", "true")  # fmt: skip

        master_id = str(row["masterBrokerId"])
        _, elected, _ = await mqadmin("electMaster", "-a", ctl, "-c", CLUSTER_NAME,
                                      "-b", g.broker_name, "-i", master_id)  # fmt: skip
        assert elected["masterAddress"] == g.broker_addr(m)
        rc, _, err = await mqadmin("cleanBrokerMetadata", "-a", ctl, "-c", CLUSTER_NAME,
                                   "-bn", "no-such-broker", ok=False)  # fmt: skip
        assert rc == 1 and "refused" in err
    finally:
        g.stop()
