"""Integration: a short real campaign (kill + partition + pause) on local hosts — network
namespaces with one sshd each when root, loopback processes otherwise (then without the
partition, and the test says so). Checks the run directory and that every injected fault was
healed: no iptables chain left, no stopped process left, an empty journal. Namespaces are
deleted in teardown even when the test fails."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from campaignutil import ROOT, tear_down
from rmq_jepsen.state import StateDir

from rmq_ha import history as h

SUBNET = f"198.18.{100 + os.getpid() % 100}.0/24"
PREFIX = f"rmqjt{os.getpid() % 1000}"


def _stat_state(pid: str) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@pytest.fixture
def state(tmp_path):
    st = StateDir(tmp_path / "state")
    yield st
    tear_down(st, PREFIX)  # even on failure


@pytest.mark.timeout(240)
def test_short_campaign_heals_every_fault_and_fills_the_run_dir(tmp_path, state):
    if ROOT:
        nemesis, hosts, n = "partition-halves,kill-one,pause-one", "local", 3
    else:
        nemesis, hosts, n = "kill-one,pause-one", "loopback", 3
        print("not root: partition skipped (needs network namespaces); kill + pause only")
    argv = [
        sys.executable,
        "-m",
        "rmq_ha.cli",
        "campaign",
        "run",
        "--hosts",
        hosts,
        "--n",
        str(n),
        "--subnet",
        SUBNET,
        "--prefix",
        PREFIX,
        "--state-dir",
        str(state.root),
        "--topology",
        "independent",
        "--workload",
        "queue,admin",
        "--nemesis",
        nemesis,
        "--time",
        "19",
        "--first-fault",
        "3",
        "--fault-duration",
        "3",
        "--between",
        "2",
        "--recovery",
        "2",
        "--rate",
        "40",
        "--concurrency",
        "3",
        "--consumers",
        "1",
        "--seed",
        "11",
        "--store",
        str(tmp_path / "store"),
        "--test",
        "it",
        "--no-check",
        "--quiet",
        "--json",
    ]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=200)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    run = Path(out["run_dir"])
    summary = out["summary"]

    # The run directory: config, history (valid against the shared schema), Parquet,
    # nemesis timeline, control log, node logs.
    for name in (
        "config.json",
        "history.jsonl",
        "history.parquet",
        "nemesis.jsonl",
        "summary.json",
        "control.log",
        "bench.log",
    ):
        assert (run / name).exists(), name
    config = json.loads((run / "config.json").read_text())
    for role in config["roles"]:
        log = run / "nodes" / role["node"] / role["name"] / "role.log"
        assert log.exists() and log.stat().st_size > 0, log
    ops = list(h.read(run / "history.jsonl"))
    assert [o.index for o in ops] == list(range(len(ops)))

    # The roles' own metrics, scraped through the run (issue 20): every role answered, on
    # the history's clock, and every broker group had a MASTER.
    scrapes = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert {x["node"] for x in scrapes if x["up"]} == {r["name"] for r in config["roles"]}
    assert summary["metrics_scrapes"]["scrapes"] == len(scrapes)
    assert 0 <= scrapes[0]["time_ns"] <= ops[-1].time_ns
    masters = {
        r["group"]
        for x in scrapes
        if x["up"] and x["m"].get("rmq_ha_broker_role") == "MASTER"
        for r in config["roles"]
        if r["name"] == x["node"]
    }
    assert masters == {r["group"] for r in config["roles"] if r["group"]}
    sends_ok = [o for o in ops if o.f == "send" and o.type == "ok"]
    assert len(sends_ok) > 100
    assert any(o.f == "drain" and o.type == "ok" for o in ops)
    assert any(o.f == "offsets" and o.type == "ok" for o in ops)

    # Every injected fault: a start and a stop with the same id, targets recorded.
    starts = {o.value.fault_id: o for o in ops if o.f == "fault-start"}
    stops = {o.value.fault_id: o for o in ops if o.f == "fault-stop"}
    assert starts.keys() == stops.keys()
    fams = {o.value.fault for o in starts.values()}
    expected = {"kill", "pause"} | ({"partition"} if ROOT else set())
    assert fams == expected, fams
    for fid, s in starts.items():
        assert s.value.targets, s
        assert s.index < stops[fid].index
    timeline = [json.loads(x) for x in (run / "nemesis.jsonl").read_text().splitlines()]
    assert {e["fault_id"] for e in timeline if e["event"] == "stopped"} == set(starts)

    # Healed, as the bench saw it and as the hosts say now.
    healed = summary["healed"]
    assert healed["healed"], healed
    assert state.faults() == {}
    if ROOT:
        info = state.hosts()
        for nd in info["nodes"]:
            rules = subprocess.run(
                ["ip", "netns", "exec", nd["netns"], "iptables", "-w", "5", "-S"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert "RMQJ" not in rules, (nd["name"], rules)
            pids = subprocess.run(
                ["ip", "netns", "pids", nd["netns"]], capture_output=True, text=True
            ).stdout.split()
            assert all(_stat_state(pid) != "T" for pid in pids)
    for f in summary["faults"]:
        assert f["variant"] in nemesis.split(",")
