"""Nemesis bookkeeping: the journal entry (with its undo actions) exists before the fault is
injected, is removed only after healing, and a crashed run is healed from the journal alone
(eloqsql #81, openraft #1976: faults left in force after a crash or a partial failure)."""

import json
import os
import shutil
import signal
import subprocess
import threading

import pytest
from procutil import busy_program, thread_states
from rmq_jepsen import generator as gen
from rmq_jepsen.control import Control, Host, LocalRemote, Remote
from rmq_jepsen.db import DB, TOPOLOGIES, ClusterView
from rmq_jepsen.nemesis import Nemesis, Timeline, chain_install_cmd, chain_name, heal_journal
from rmq_jepsen.recorder import Recorder
from rmq_jepsen.state import StateDir

from rmq_ha import history as h

pytestmark = pytest.mark.timeout(60)


class FakeRemote(Remote):
    """Runs nothing; remembers each command and what the journal held when it ran. `hook`, when
    set, is called with each command first (in the worker thread the command runs in)."""

    hook = None

    def __init__(self, host, state, seen):
        super().__init__(host)
        self.state = state
        self.seen = seen

    def _exec(self, cmd, timeout_s, stdin):
        if self.hook is not None:
            self.hook(self.host.name, cmd)
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
    # the kill, then the wait for every thread to stop (Remote.signal)
    stops = [(cmd.split(" && ")[0], j) for _, cmd, j in seen if cmd.startswith("kill -STOP")]
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
    nem, state, seen, db, _ = rig
    act = await nem.start(_ev("kill-one"))
    assert act is not None and act.restart
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


def _nemesis_ops(nem):
    nem.rec.flush()
    return [o for o in h.read(nem.rec.path) if o.process == h.NEMESIS_PROCESS]


@pytest.mark.parametrize("variant", ["kill-leader", "pause-leader", "partition-leader"])
async def test_no_controller_leader_skips_the_fault_instead_of_hitting_a_random_node(rig, variant):
    """Issue 17: with no leader (or master) at that moment, a fault aimed at it once fell back
    to a random node (a name server included); now it is skipped and recorded as skipped."""
    nem, state, seen, _, view = rig

    async def no_leader():
        return None

    view.controller_leader = no_leader
    assert await nem.start(_ev(variant)) is None
    assert not seen, "no command may run on any node"
    assert nem.active == {} and state.faults() == {}
    start, stop = _nemesis_ops(nem)
    assert (start.f, stop.f) == ("fault-start", "fault-stop")
    assert start.value.targets == [] and stop.value.targets == []
    assert "skipped: no controller leader" in start.value.detail
    assert nem.injected[-1]["skipped"] and nem.injected[-1]["targets"] == []
    timeline = [json.loads(x) for x in nem.timeline.path.read_text().splitlines()]
    assert [e["event"] for e in timeline] == ["start", "skipped"]


@pytest.mark.parametrize("variant", ["kill-master", "pause-master", "partition-master"])
async def test_a_master_fault_without_a_live_master_is_skipped(rig, variant):
    """No master registered: skipped. The registered master already killed by the nemesis
    (its route not yet expired): skipped too, not a second kill of something dead. Nothing
    runs on any node (no kill, no SIGSTOP, no iptables rule on a random node)."""
    nem, state, seen, db, view = rig
    masters = {"broker-a": None}

    async def registered():
        return masters

    view.masters = registered
    assert await nem.start(_ev(variant, 1)) is None
    assert "skipped: no master registered" in _nemesis_ops(nem)[0].value.detail
    masters["broker-a"] = db.by_name["broker-a-0"]
    db.down.add("broker-a-0")
    assert await nem.start(_ev(variant, 2)) is None
    assert "broker-a-0 are down already" in _nemesis_ops(nem)[2].value.detail
    assert not seen, "no command may run on any node"
    assert nem.active == {} and state.faults() == {}
    assert [f["targets"] for f in nem.injected] == [[], []]


async def test_a_partition_heals_on_every_node_at_once_and_records_its_real_times(rig):
    """Issue 17: healing went node by node (23 s under load). Every node's undo must be under
    way at the same time: each heal command waits at a barrier for all the others, so a
    sequential heal breaks the barrier and fails the stop. The fault-stop records when the
    fault was wholly applied and when healing began, on the history's clock."""
    nem, state, _, db, _ = rig
    act = await nem.start(_ev("partition-halves"))
    assert act is not None and len(act.targets) > 1
    barrier = threading.Barrier(len(act.targets), timeout=20)
    heal_times = []

    def hook(node, cmd):
        if "-X RMQJ" in cmd:
            heal_times.append(nem.rec.now_ns())
            barrier.wait()

    for r in db.control.remotes.values():
        r.hook = hook
    await nem.stop(1)
    start, stop = _nemesis_ops(nem)
    assert stop.error is None, stop.error
    assert len(heal_times) == len(act.targets)
    v = stop.value
    assert start.time_ns <= v.applied_ns <= v.healing_ns <= min(heal_times)
    assert max(heal_times) <= stop.time_ns
    assert state.faults() == {}
    f = nem.injected[-1]
    assert (f["start_ns"], f["applied_ns"], f["healing_ns"], f["stop_ns"]) == (
        start.time_ns,
        v.applied_ns,
        v.healing_ns,
        stop.time_ns,
    )


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


@pytest.mark.timeout(60)
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)")
def test_remote_stop_returns_once_every_thread_is_stopped(tmp_path):
    """The nemesis's pause (Remote.signal STOP) returns once every thread of the process has
    stopped: kill returns before a group stop is complete, and a broker's native replication
    threads would go on meanwhile (rmq_jepsen.launch.Proc.wait_stopped does the same for
    local processes). Eight busy threads: without the wait, some still ran when the check
    looked in 1 of 3 tries here (the shell's own exit gives them time)."""
    import sys
    import time

    p = subprocess.Popen([sys.executable, "-c", busy_program()])
    try:
        task = f"/proc/{p.pid}/task"
        deadline = time.monotonic() + 30
        while len(os.listdir(task)) < 9 and time.monotonic() < deadline:
            time.sleep(0.01)  # waiting for the threads to exist (condition, not timing)
        remote = LocalRemote(Host("n1", "127.0.0.1"))
        assert remote.signal(p.pid, "STOP")
        states = thread_states(p.pid)
        assert set(states) <= {"T", "t"}, states
        assert remote.signal(p.pid, "CONT")
    finally:
        p.kill()
        p.wait()


async def test_netem_delay_without_netem_in_the_kernel_is_recorded_as_skipped(rig):
    """A kernel without netem cannot delay packets: the fault was recorded as started with no
    targets and held "in force" for its whole window (probe); now it is skipped like any fault
    with nothing to act on."""
    nem, state, _, _, _ = rig
    nem._netem_ok = False  # what the probe of `tc qdisc add ... netem` found
    assert await nem.start(_ev("netem-delay")) is None
    assert nem.active == {} and state.faults() == {}
    start, stop = _nemesis_ops(nem)
    assert (start.f, stop.f) == ("fault-start", "fault-stop")
    assert "skipped" in start.value.detail and "netem" in start.value.detail
    assert nem.injected[-1]["skipped"] and nem.injected[-1]["targets"] == []
