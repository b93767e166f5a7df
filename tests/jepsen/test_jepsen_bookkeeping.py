"""Nemesis bookkeeping: the journal entry (with its undo actions) exists before the fault is
injected, is removed only after healing, and a crashed run is healed from the journal alone
(eloqsql #81, openraft #1976: faults left in force after a crash or a partial failure)."""

import os
import shutil
import signal
import subprocess

import pytest
from rmq_jepsen import generator as gen
from rmq_jepsen.control import Control, Host, LocalRemote, Remote
from rmq_jepsen.db import DB, TOPOLOGIES, ClusterView
from rmq_jepsen.nemesis import Nemesis, Timeline, chain_install_cmd, chain_name, heal_journal
from rmq_jepsen.recorder import Recorder
from rmq_jepsen.state import StateDir

pytestmark = pytest.mark.timeout(60)


class FakeRemote(Remote):
    """Runs nothing; remembers each command and what the journal held when it ran."""

    def __init__(self, host, state, seen):
        super().__init__(host)
        self.state = state
        self.seen = seen

    def _exec(self, cmd, timeout_s, stdin):
        self.seen.append((self.host.name, cmd, self.state.faults()))
        if cmd.startswith("ps -o stat="):
            return 0, b"S\n", b""
        return 0, b"", b""


@pytest.fixture
def rig(tmp_path):
    state = StateDir(tmp_path / "state")
    seen = []
    hosts = [
        Host(
            f"n{i}",
            f"198.18.250.{10 + i}",
            ssh_host=f"198.18.250.{10 + i}",
            workdir=str(tmp_path / f"n{i}"),
        )
        for i in range(1, 6)
    ]
    control = Control(hosts, remotes={h.name: FakeRemote(h, state, seen) for h in hosts})
    db = DB(control, TOPOLOGIES["controller"], state=state)
    for i, r in enumerate(db.roles):
        r.pid = 1000 + i
    view = ClusterView(db)
    rec = Recorder(tmp_path / "history.jsonl")
    nem = Nemesis(db, view, rec, state, "RUN1", Timeline(tmp_path / "nemesis.jsonl", 0.0), seed=1)
    yield nem, state, seen, db, view
    rec.close()


def _ev(variant, fid=1):
    return gen.FaultEvent(fid, variant, 0.0, 1.0)


async def test_partition_is_journalled_before_the_rules_and_forgotten_after_healing(rig):
    nem, state, seen, _, _ = rig
    act = await nem.start(_ev("partition-halves"))
    assert act is not None and act.targets
    installs = [(n, j) for n, cmd, j in seen if " -A RMQJ" in cmd]
    assert {n for n, _ in installs} == set(act.targets)
    for _, journal in installs:
        entry = journal["RUN1:1"]
        assert {u["host"]["name"] for u in entry["undo"]} == set(act.targets)
        assert all(
            u["op"] == "iptables-chain" and u["chain"] == chain_name("RUN1") for u in entry["undo"]
        )
    seen.clear()
    await nem.stop(1)
    heals = [(n, j) for n, cmd, j in seen if "-X RMQJ" in cmd]
    assert {n for n, _ in heals} == set(act.targets)
    assert all("RUN1:1" in j for _, j in heals), "the entry stays until every undo ran"
    assert state.faults() == {}


async def test_pause_records_the_pid_to_resume_before_stopping_it(rig):
    nem, state, seen, db, view = rig

    async def masters():
        return {"broker-a": db.by_name["broker-a-1"]}

    view.masters = masters
    await nem.start(_ev("pause-master"))
    stops = [(cmd, j) for _, cmd, j in seen if cmd.startswith("kill -STOP")]
    assert stops == [(f"kill -STOP {db.by_name['broker-a-1'].pid}", stops[0][1])]
    undo = stops[0][1]["RUN1:1"]["undo"]
    assert undo == [
        {
            "op": "cont",
            "host": db.host(db.by_name["broker-a-1"]).to_json(),
            "pid": db.by_name["broker-a-1"].pid,
        }
    ]
    await nem.stop(1)
    assert any(cmd.startswith("kill -CONT") for _, cmd, _ in seen)
    assert state.faults() == {}


async def test_kill_journals_restarts_and_a_failed_start_heals_what_it_did(rig):
    nem, state, seen, db, view = rig

    async def no_leader():
        return None

    view.controller_leader = no_leader
    act = await nem.start(_ev("kill-leader"))
    assert "fell back to one random node" in act.detail
    kills = [j for _, cmd, j in seen if cmd.startswith("kill -KILL")]
    assert kills and all(u["op"] == "restart" for u in kills[0]["RUN1:1"]["undo"])

    # A fault whose start raises is healed at once and recorded with its error.
    async def boom(ev, key):
        nem._begin(
            ev,
            key,
            ["n1"],
            "x",
            [{"op": "cont", "host": db.control.host("n1").to_json(), "pid": 1}],
        )
        raise RuntimeError("half done")

    nem._start_pause = boom
    assert await nem.start(_ev("pause-one", 2)) is None
    assert "RUN1:2" not in state.faults()


async def test_heal_journal_after_a_crash_resumes_a_stopped_process(tmp_path):
    state = StateDir(tmp_path / "state")
    p = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(p.pid, signal.SIGSTOP)
        host = Host("n1", "127.0.0.1")
        state.begin_fault(
            "OLD:1",
            {
                "run": "OLD",
                "variant": "pause-one",
                "undo": [{"op": "cont", "host": host.to_json(), "pid": p.pid}],
            },
        )
        assert LocalRemote(host).proc_state(p.pid) == "T"
        did = heal_journal(state, log=lambda s: None)
        assert any("healed pause-one" in d for d in did)
        assert LocalRemote(host).proc_state(p.pid) in ("S", "R")
        assert state.faults() == {}
    finally:
        p.kill()
        p.wait()


async def test_heal_journal_stops_stale_roles_but_never_a_recycled_pid(tmp_path):
    state = StateDir(tmp_path / "state")
    role = subprocess.Popen(["rmq-ha-fake-role", "60"], executable=shutil.which("sleep"))
    other = subprocess.Popen(["sleep", "60"])
    try:
        host = Host("n1", "127.0.0.1").to_json()
        for name, proc in (("role", role), ("other", other)):
            pidfile = tmp_path / f"{name}.pid"
            pidfile.write_text(str(proc.pid))
            state.set_proc(f"n1/{name}", {"host": host, "role": name, "pidfile": str(pidfile)})
        heal_journal(state, log=lambda s: None)
        assert role.wait(timeout=5) == -signal.SIGKILL
        assert other.poll() is None, "a pid whose command is not rmq-ha is left alone"
        assert state.procs() == {}
    finally:
        for p in (role, other):
            p.kill()
            p.wait()


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("iptables") or not shutil.which("ip"),
    reason="needs root, ip and iptables (network namespaces); as non-root only loopback runs",
)


@needs_root
async def test_heal_journal_drops_a_left_over_partition_chain(tmp_path):
    state = StateDir(tmp_path / "state")
    ns = f"rmqjt-bk{os.getpid() % 10000}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        host = Host("n1", "198.18.251.11", ssh_host="198.18.251.11", netns=ns)
        remote = LocalRemote(host)
        chain = chain_name("CRASHED")
        state.begin_fault(
            "CRASHED:1",
            {
                "run": "CRASHED",
                "variant": "partition-one",
                "undo": [{"op": "iptables-chain", "host": host.to_json(), "chain": chain}],
            },
        )
        remote.run(chain_install_cmd(chain, ["198.18.251.12"]))
        assert chain in remote.run("iptables -w 5 -S").out
        # The bench "crashed" here; the next `hosts down` or run heals from the journal.
        heal_journal(state, log=lambda s: None)
        assert "RMQJ" not in remote.run("iptables -w 5 -S").out
        assert state.faults() == {}
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    assert ns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
