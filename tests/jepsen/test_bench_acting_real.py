"""Issue 17: `rmq-ha bench acting-master --impl rocketmq --kills 1 --json` end to end against
real Apache RocketMQ 5.5.0 (`realrmq.RealActingGroup`: one name server, broker-a master + slave
with enableSlaveActingMaster, broker-b master). The figures live in docs/PERF.md; what is
checked here is that the shared measuring code ran against RocketMQ's cluster and accounted for
every round: each figure is either measured or counted as not seen within its deadline, never
both; a frozen master cannot be noticed before its heartbeat timeout; every delayed message is
stored somewhere at the end or counted missing.

JVMs take tens of seconds to boot on 2 busy cores (the run takes 3-6 min), so this is not in
`make test`: `make test-real-rocketmq` runs it (RMQ_REAL_ROCKETMQ_TEST=1; needs java and mvn)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from typing import Any

import pytest

pytestmark = [
    pytest.mark.timeout(960),
    pytest.mark.skipif(
        os.environ.get("RMQ_REAL_ROCKETMQ_TEST") != "1"
        or shutil.which("java") is None
        or shutil.which("mvn") is None,
        reason="real RocketMQ cluster: `make test-real-rocketmq` (java and mvn needed)",
    ),
]

FIGURES = ("route_read_only", "master_only_op")


def run_bench(args: list[str], timeout_s: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "rmq_ha.cli", "bench", "acting-master", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            # SIGINT first: the bench kills the JVMs it started (by pid) on its way out.
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    # The error's first lines (the processes' logs follow it), then the end of stderr.
    tb = err.find("Traceback")
    assert proc.returncode == 0, (err[tb : tb + 4000] if tb >= 0 else "") + "\n...\n" + err[-4000:]
    result: dict[str, Any] = json.loads(out)
    return result


def test_bench_acting_master_against_real_rocketmq_accounts_for_every_round() -> None:
    # slaveReadEnable=false: with true, RocketMQ 5.5.0's restarted master never finishes
    # pre-online once offsets were committed on the acting slave (docs/PERF.md), and the run
    # ends after its first round (the aborted path, also accepted below).
    args = ["--impl", "rocketmq", "--kills", "1", "--json"]
    r = run_bench([*args, "--rocketmq-broker-conf", "slaveReadEnable=false"], timeout_s=900)
    assert r["impl"] == "rocketmq" and r["benchmark"] == "acting-master"
    unit = r["broker_not_active_timeout_ms"] / 1000
    rounds = r["rounds"]
    ran = [(x["mode"], x["n"]) for x in rounds]
    if "aborted" in r:
        # RocketMQ's group did not come back within the bench's timeout: said where and why,
        # and the rounds before it stand.
        assert ran == [("kill", 0), ("stop", 0)][: len(ran)] and ran, ran
        assert rounds[-1]["hand_back_s"] is None and rounds[-1]["not_handed_back"]
        assert r["aborted"]["mode"] == ran[-1][0]
        assert "not_counted" in r["delayed"]
    else:
        assert ran == [("kill", 0), ("stop", 0)]
        d = r["delayed"]
        assert d["sent"] == 6, d
        assert d["delivered_once"] + len(d["copies_not_1"]) == 6, d
    for name, m in r["modes"].items():
        ns = m["not_seen"]
        for fig in FIGURES:
            # measured, or not seen within the probe's deadline: one or the other per round
            assert m[fig]["n"] + ns[fig] == 1, (name, fig, m[fig], ns)
        late = m["delay_lateness"]
        assert late["n"] + ns["delayed_not_delivered"] == 3, (name, late, ns)
        if late["n"]:
            assert min(late["samples_s"]) >= -0.01, late  # stored at or after its due time
        assert m["hand_back"]["n"] + ns["hand_back"] == 1
        assert m["lateness_goal_met"] is (
            ns["delayed_not_delivered"] == 0 and late["max_x_timeout"] <= 1.0
        )
    stop = r["modes"].get("stop")
    if stop is not None and stop["route_read_only"]["n"]:
        # A frozen master keeps its connections: only its heartbeat timeout can reveal it.
        assert stop["route_read_only"]["samples_s"][0] >= 0.75 * unit, stop["route_read_only"]
    for x in rounds:
        if x["route_s"] is not None and x["op_s"] is not None:
            assert 0 < x["route_s"] <= x["op_s"], x
    done = [x for x in rounds if x["hand_back_s"] is not None]
    assert r["consumer_offsets"]["queues_checked"] == 4 * len(done)
