"""Issue 17: a short `rmq-ha campaign run --db rocketmq` against real Apache RocketMQ 5.5.0
(controller topology: 3 name servers with embedded controllers, one group of 3 brokers) with
kill-master and, when root (network namespaces), partition-master; the same workload, history
and checker as rmq_ha's campaigns, and the checker's verdict: valid, or (with the partition)
INVALID for the one anomaly RocketMQ 5.5.0 shows there, tied to the partition window.

A RocketMQ group takes 30-45 s to come up, a killed JVM 10-15 s to boot again and the checker
~1 min, so the whole test takes 2.5-4 min on 2 busy cores: it is in `make test-real-rocketmq`
(RMQ_REAL_ROCKETMQ_TEST=1), not in `make test`. Needs java and mvn (the jars Maven fetches,
cached)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from campaignutil import ROOT, tear_down
from rmq_jepsen.state import StateDir

from rmq_ha import history as h

SUBNET = f"198.18.{100 + (os.getpid() + 50) % 100}.0/24"
PREFIX = f"rmqrq{os.getpid() % 1000}"

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        os.environ.get("RMQ_REAL_ROCKETMQ_TEST") != "1"
        or shutil.which("java") is None
        or shutil.which("mvn") is None,
        reason="a campaign against real RocketMQ: `make test-real-rocketmq` (java and mvn needed)",
    ),
]


@pytest.fixture
def state(tmp_path):
    st = StateDir(tmp_path / "state")
    yield st
    tear_down(st, PREFIX)  # even on failure


def test_a_rocketmq_campaign_kills_and_isolates_the_master_and_checks_valid(tmp_path, state):
    nemesis = "kill-master,partition-master" if ROOT else "kill-master"
    argv = [
        sys.executable,
        "-m",
        "rmq_ha.cli",
        "campaign",
        "run",
        "--db",
        "rocketmq",
        "--hosts",
        "local" if ROOT else "loopback",
        "--n",
        "3",
        "--subnet",
        SUBNET,
        "--prefix",
        PREFIX,
        "--state-dir",
        str(state.root),
        "--topology",
        "controller",
        "--workload",
        "queue",
        "--nemesis",
        nemesis,
        "--time",
        "40",
        "--first-fault",
        "5",
        "--fault-duration",
        "8",
        "--between",
        "15",
        "--recovery",
        "5",
        "--rate",
        "40",
        "--concurrency",
        "3",
        "--consumers",
        "1",
        "--seed",
        "7",
        "--store",
        str(tmp_path / "store"),
        "--test",
        "rq",
        "--quiet",
        "--json",
    ]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=560)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    run = Path(out["run_dir"])
    summary = out["summary"]
    # The checker decided (rc 0 valid, 1 INVALID): RocketMQ 5.5.0 can fail it here, see below.
    assert out["verdict"] in ("valid", "INVALID"), (p.stderr[-2000:], out["verdict"])
    assert p.returncode == (0 if out["verdict"] == "valid" else 1)
    assert (run / "report.html").exists()

    config = json.loads((run / "config.json").read_text())
    assert config["db"] == "rocketmq"
    for role in config["roles"]:
        d = run / "nodes" / role["node"] / role["name"]
        conf = (d / "role.conf").read_text()
        key = "enableControllerMode=true" if role["kind"] == "broker" else "controllerDLegerPeers="
        assert key in conf, (role["name"], conf)
        assert "boot success" in (d / "role.log").read_text()
        assert (d / "logs" / "rocketmqlogs").is_dir()  # RocketMQ's own logs, collected
    assert summary["metrics_scrapes"]["targets"] == 0  # the scrape is rmq_ha's only

    ops = list(h.read(run / "history.jsonl"))
    assert len([o for o in ops if o.f == "send" and o.type == "ok"]) > 100
    faults = {f["variant"]: f for f in summary["faults"]}
    assert set(faults) == set(nemesis.split(",")), summary["faults"]
    # kill-master hit the JVM of the broker the name servers named master: that broker booted
    # twice (killed, then restarted by the nemesis)
    kill = faults["kill-master"]
    assert "asked the name servers" in kill["detail"], kill
    killed = kill["detail"].split("'")[1]
    role = next(r for r in config["roles"] if r["name"] == killed)
    log = (run / "nodes" / role["node"] / killed / "role.log").read_text()
    assert log.count("boot success") == 2, log[-2000:]
    if ROOT:
        part = faults["partition-master"]
        assert "isolated" in part["detail"] and "asked the name servers" in part["detail"]
        # it held for a while (a late start after a slow restart would leave it ~0 s)
        assert part["healing_ns"] - part["applied_ns"] > 3e9, part
    assert summary["healed"]["healed"], summary["healed"]
    assert state.faults() == {}
    if out["verdict"] == "valid":
        return
    # INVALID: seen in 2 of 2 runs with the partition (docs/bench.md). It must be the one
    # anomaly found there — two sends acknowledged at one queue offset, the first of them
    # acknowledged while the old master was cut off (it kept acknowledging alone and lost
    # those writes when it rejoined as a slave) — and nothing the kill alone caused.
    assert ROOT, "kill-master alone must check valid"
    results = json.loads((run / "results.json").read_text())
    # those writes were read before the old master rejoined, then gone from the drain: lost
    # (vanished) and lost writes too, since the checker counts a value read and then gone
    failed = results["safety_failed"]
    assert "inconsistent-offsets" in failed, failed
    assert set(failed) <= {"inconsistent-offsets", "lost", "lost-write"}, failed
    part = faults["partition-master"]
    times = {o.index: o.time_ns for o in ops}
    examples = results["analyses"]["inconsistent-offsets"]["examples"]
    assert examples
    for ex in examples:
        acks = sorted(
            times[e["index"]]
            for hs in ex["history"].values()
            for e in hs
            if e["f"] == "send" and e["type"] == "ok"
        )
        assert len(acks) >= 2, ex
        assert part["applied_ns"] <= acks[0] <= part["stop_ns"], (ex, part)
