"""Issue 19: `rmq-ha campaign run --secure` on the controller topology. Every role runs with ACL
(plain_acl.yml, cluster traffic signed with the admin account) and TLS enforcing (a throw-away
CA made for the campaign, certificates verified); the bench's clients sign and speak TLS. The
faults hit the master; the checker's verdict must be valid, as without --secure. The admin
workload runs too: its controller metadata ops are what `make demo` records."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from campaignutil import ROOT, tear_down
from rmq_jepsen.state import StateDir

SUBNET = f"198.18.{150 + os.getpid() % 50}.0/24"
PREFIX = f"rmqjs{os.getpid() % 1000}"


@pytest.fixture
def state(tmp_path):
    st = StateDir(tmp_path / "state")
    yield st
    tear_down(st, PREFIX)  # even on failure


@pytest.mark.timeout(420)
def test_secure_controller_campaign_is_checked_valid(tmp_path, state):
    hosts = "local" if ROOT else "loopback"
    nemesis = "kill-master,pause-master" + (",partition-master" if ROOT else "")
    argv = [
        sys.executable, "-m", "rmq_ha.cli", "campaign", "run",
        "--hosts", hosts, "--n", "5", "--subnet", SUBNET, "--prefix", PREFIX,
        "--state-dir", str(state.root), "--topology", "controller", "--workload", "queue,admin",
        "--nemesis", nemesis, "--time", "24", "--first-fault", "4", "--fault-duration", "4",
        "--between", "3", "--recovery", "4", "--rate", "40", "--concurrency", "3",
        "--consumers", "1", "--seed", "7", "--store", str(tmp_path / "store"), "--test", "sec",
        "--secure", "--no-check", "--quiet", "--json",
    ]  # fmt: skip
    p = subprocess.run(argv, capture_output=True, text=True, timeout=360)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    run = Path(out["run_dir"])
    summary = out["summary"]
    assert summary["counts"].get("send:ok", 0) > 100, summary["counts"]
    # The admin workload's controller metadata ops (what `make demo` runs) were recorded.
    assert summary["counts"].get("metadata:ok", 0) > 0, summary["counts"]
    assert summary["healed"]["healed"], summary["healed"]
    config = json.loads((run / "config.json").read_text())
    assert config["options"]["secure"] is True
    # Every role ran with ACL and TLS enforcing; no secret is in the run directory's config.
    for role in config["roles"]:
        conf = (run / "nodes" / role["node"] / role["name"] / "role.conf").read_text()
        assert "aclEnable=true" in conf and "tls.server.mode=enforcing" in conf, conf
        assert "innerClientAuthenticationCredentials=***" in conf
        role_dir = run / "nodes" / role["node"] / role["name"]
        assert not list(role_dir.glob("*.key")) and not (role_dir / "plain_acl.yml").exists()
    # No secret of the campaign is in the run directory.
    acl = next((state.root / "secure").glob("*/plain_acl.yml")).read_text()
    secret = re.search(r"secretKey: (\S+)", acl)[1]  # type: ignore[index]
    for f in run.rglob("*"):
        if f.is_file() and f.suffix in (".conf", ".json", ".log", ".jsonl"):
            assert secret not in f.read_text(errors="replace"), f
    # The checker's verdict, as for any campaign.
    c = subprocess.run(
        [sys.executable, "-m", "rmq_ha.cli", "check", str(run), "--json",
         "--shuffle-partitions", "2", "--driver-memory", "1g"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert c.returncode == 0, c.stderr[-3000:]
    assert json.loads(c.stdout)["valid"] is True
