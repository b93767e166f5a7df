"""Issue 17: a host file describing an EXISTING RocketMQ deployment (`rmq_jepsen.existing`):
its parsing (each host's roles, ports, the regex that finds each JVM, its start command) and the
command lines the bench runs on the nodes. The pid lookup is run for real against processes of
this test (a `java` that is a copy of `sleep`, so no JVM is needed): it finds exactly the one
whose command line matches, never the shell or awk running the lookup."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import trio
from rmq_jepsen.existing import (
    DeploymentError,
    ExistingRole,
    listening_command,
    load_deployment,
    parse_deployment,
    parse_pids,
    pid_command,
    signal_command,
    start_command,
)
from rmq_jepsen.hosts import file_hosts

pytestmark = pytest.mark.timeout(60)

HOSTFILE = """
[defaults]
user = "admin"
key_file = "~/.ssh/id_ed25519"

[deployment]
db = "rocketmq"
topology = "controller"

[[hosts]]
name = "n1"
address = "10.1.0.11"
[[hosts.roles]]
kind = "namesrv"
port = 9876
controller_port = 9878
start = "cd /opt/rocketmq && nohup sh bin/mqnamesrv >/dev/null 2>&1 &"
logs = ["/home/rocketmq/logs/rocketmqlogs"]
[[hosts.roles]]
kind = "broker"
group = "broker-a"
port = 10911
match = 'BrokerStartup.*broker-n1\\.conf'
start = "cd /opt/rocketmq && nohup sh bin/mqbroker -c conf/broker-n1.conf >/dev/null 2>&1 &"

[[hosts]]
name = "n2"
address = "10.1.0.12"
[[hosts.roles]]
kind = "namesrv"
port = 9876
controller_port = 9878
[[hosts.roles]]
kind = "broker"
group = "broker-a"
port = 10921
ha_port = 10930
match = 'BrokerStartup.*broker-n2\\.conf'
"""


def _deployment(tmp_path: Path, text: str = HOSTFILE):
    f = tmp_path / "hosts.toml"
    f.write_text(text)
    return load_deployment(f, file_hosts(f))


def test_roles_addresses_and_ports_of_a_controller_deployment(tmp_path):
    d = _deployment(tmp_path)
    assert d is not None and (d.db, d.topology) == ("rocketmq", "controller")
    assert d.cluster == "DefaultCluster"
    assert [(r.name, r.kind, r.node) for r in d.roles] == [
        ("ns-n1", "namesrv", "n1"),
        ("broker-a-n1", "broker", "n1"),
        ("ns-n2", "namesrv", "n2"),
        ("broker-a-n2", "broker", "n2"),
    ]
    assert d.namesrv_addr() == "10.1.0.11:9876;10.1.0.12:9876"
    assert d.controller_addrs() == ["10.1.0.11:9878", "10.1.0.12:9878"]
    b1, b2 = d.role("broker-a-n1"), d.role("broker-a-n2")
    assert (b1.port, b1.ha_port) == (10911, 10912)
    assert b2.ha_port == 10930  # given
    assert d.role("ns-n1").controller_port == 9878
    # the master's address (as the cluster answers it) maps back to the role to signal
    assert d.role_at("10.1.0.12:10921") is b2
    assert d.role_at("10.1.0.11:9878") is d.role("ns-n1")
    assert d.role_at("10.1.0.11:1") is None
    # a name server without match: RocketMQ's main class
    assert d.role("ns-n2").match == "org\\.apache\\.rocketmq\\.namesrv\\.NamesrvStartup"
    assert d.role("ns-n1").logs == ("/home/rocketmq/logs/rocketmqlogs",)


def test_a_host_file_without_a_deployment_is_one_the_bench_deploys_itself(tmp_path):
    f = tmp_path / "hosts.toml"
    f.write_text('[[hosts]]\nname = "n1"\naddress = "10.1.0.11"\n')
    assert load_deployment(f, file_hosts(f)) is None


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('db = "rocketmq"', 'db = "rmq_ha"'), "only an existing rocketmq deployment"),
        (('topology = "controller"', 'topology = "classic"'), "'classic': not one of controller"),
        (('kind = "broker"\ngroup = "broker-a"\nport = 10911', 'kind = "proxy"'), "kind = 'proxy'"),
        (("port = 10911", "port = 70000"), "port must be a port number"),
        (("port = 10911\n", ""), "port is required"),
        (('group = "broker-a"\nport = 10911', "port = 10911"), "group is required for a broker"),
        (("controller_port = 9878\nstart", "start"), "controller_port is required"),
        (("match = 'BrokerStartup.*broker-n1", "match = '(BrokerStartup"), "is not a regex"),
        (("ha_port = 10930", "ha_prot = 10930"), "unknown key(s) ha_prot"),
        (("port = 10921", 'port = 10921\nname = "broker-a-n1"'), "role names repeat: broker-a-n1"),
    ],
)
def test_bad_deployments_name_the_host_role_and_key(tmp_path, edit, message):
    old, new = edit
    assert old in HOSTFILE
    with pytest.raises(DeploymentError, match=message.replace("(", "\\(").replace(")", "\\)")):
        _deployment(tmp_path, HOSTFILE.replace(old, new, 1))


def test_a_deployment_needs_a_name_server_and_a_broker(tmp_path):
    f = tmp_path / "h.toml"
    text = (
        '[deployment]\n[[hosts]]\nname = "n1"\naddress = "10.0.0.1"\n'
        '[[hosts.roles]]\nkind = "namesrv"\nport = 9876\ncontroller_port = 9878\n'
    )
    f.write_text(text)
    with pytest.raises(DeploymentError, match="found 1 and 0"):
        parse_deployment(tomllib.loads(text), file_hosts(f), "h.toml")


def test_command_lines(tmp_path):
    d = _deployment(tmp_path)
    assert d is not None
    b1, b2 = d.role("broker-a-n1"), d.role("broker-a-n2")
    assert pid_command(b1) == (
        "ps -ww -eo pid=,comm=,args= | RMQJ_MATCH='BrokerStartup.*broker-n1\\.conf' "
        'awk \'$2 == "java" && $0 ~ ENVIRON["RMQJ_MATCH"] { print $1 }\''
    )
    assert signal_command(4242, "STOP") == "kill -STOP 4242"
    with pytest.raises(ValueError, match="signal name"):
        signal_command(1, "STOP; rm -rf /")
    assert start_command(b1).startswith("cd /opt/rocketmq && nohup sh bin/mqbroker")
    with pytest.raises(DeploymentError, match="broker-a-n2 on n2: no start command"):
        start_command(b2)
    assert listening_command(b2) == "ss -Hltn 'sport = :10921' | grep -q ."


def test_parse_pids_wants_exactly_one():
    r = ExistingRole("b", "broker", "n1", "10.0.0.1", 10911, "BrokerStartup")
    assert parse_pids(r, "123\n") == 123
    with pytest.raises(DeploymentError, match="b on n1: no java process match"):
        parse_pids(r, "")
    with pytest.raises(DeploymentError, match=r"2 java processes \(\[1, 2\]\)"):
        parse_pids(r, "1\n2\n")


def test_the_pid_lookup_finds_only_the_matching_java_process(tmp_path):
    """Real processes: two `java`s (copies of sh waiting on a sleep) with different config
    paths in their command lines, and a plain `sh` with the same text. The lookup runs through
    `sh -c`, as over SSH, so its own shell has the pattern in its command line too."""
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no sh")
    java = tmp_path / "java"
    shutil.copy(sh, java)
    os.chmod(java, 0o755)
    wait = "sleep 300; :"  # not the last command: the shell stays (no exec of sleep)
    procs = [
        subprocess.Popen([str(java), "-c", wait, "BrokerStartup", "conf/broker-n1.conf"]),
        subprocess.Popen([str(java), "-c", wait, "BrokerStartup", "conf/broker-n2.conf"]),
        subprocess.Popen([sh, "-c", wait, "BrokerStartup", "conf/broker-n1.conf"]),
    ]
    try:
        r = ExistingRole("b", "broker", "n1", "127.0.0.1", 1, "BrokerStartup.*broker-n1\\.conf")
        out = subprocess.run(
            ["sh", "-c", pid_command(r)], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        assert parse_pids(r, out) == procs[0].pid
        # (not just "BrokerStartup": real RocketMQ brokers may run on this machine)
        both = ExistingRole("b", "broker", "n1", "127.0.0.1", 1, "BrokerStartup conf/broker-n")
        out = subprocess.run(
            ["sh", "-c", pid_command(both)], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        assert sorted(int(x) for x in out.split()) == sorted(p.pid for p in procs[:2])
    finally:
        for p in procs:
            p.kill()
            p.wait()


# ---- the DB against a deployment: local processes stand in for the JVMs -------------------------


def _fake_deployment(tmp_path: Path, tag: str):
    """One local node running a `java` per role: a symlink of that name to Python (the kernel
    names the process after it, as ps's comm shows), listening on the role's port, started by
    the deployment's own start commands."""
    import sys

    from rmq_jepsen.control import Host
    from rmq_jepsen.launch import free_ports

    java = tmp_path / "java"
    java.symlink_to(os.path.realpath(sys.executable))
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "broker.log").write_text("broker log line\n")
    ns_port, ctl_port, broker_port = free_ports(3)

    def start(what: str, port: int) -> str:
        listen = (
            "import socket, time; s = socket.socket(); "
            f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(300)"
        )
        return f'cd {tmp_path} && (nohup ./java -c "{listen}" {what} >/dev/null 2>&1 </dev/null &)'

    host = Host(name="n1", address="127.0.0.1", ssh_host=None, workdir=str(tmp_path / "w"))
    data = {
        "deployment": {"db": "rocketmq", "topology": "controller", "cluster": "ProdCluster"},
        "hosts": [
            {
                "name": "n1",
                "address": "127.0.0.1",
                "roles": [
                    {
                        "kind": "namesrv",
                        "port": ns_port,
                        "controller_port": ctl_port,
                        "match": f"NamesrvStartup-{tag}",
                        "start": start(f"NamesrvStartup-{tag}", ns_port),
                    },
                    {
                        "kind": "broker",
                        "group": "broker-a",
                        "port": broker_port,
                        "match": f"BrokerStartup-{tag}",
                        "start": start(f"BrokerStartup-{tag}", broker_port),
                        "logs": [str(logs / "broker.log"), str(logs), "/nonexistent/x.log"],
                    },
                ],
            }
        ],
    }
    dep = parse_deployment(data, [host], "test")
    assert dep is not None
    return host, dep


def _pids(tag: str) -> list[int]:
    r = ExistingRole("x", "broker", "n1", "127.0.0.1", 1, f"Startup-{tag}")
    out = subprocess.run(["sh", "-c", pid_command(r)], capture_output=True, text=True, timeout=30)
    return sorted(int(x) for x in out.stdout.split())


async def _until(check, timeout_s: float = 20.0) -> None:
    with trio.fail_after(timeout_s):
        while not check():
            await trio.sleep(0.02)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def test_db_runs_faults_against_a_deployment_and_leaves_it_running(tmp_path):
    """install finds every role's JVM (nothing installed or written), pause/resume/kill signal
    the matching process only, stop (the campaign's end) starts a killed role again with the
    deployment's own command instead of stopping anything, and collect copies the roles'
    logs. Every process is killed by pid at the end."""
    from rmq_jepsen.control import Control
    from rmq_jepsen.db import DB, TOPOLOGIES
    from rmq_jepsen.state import StateDir

    tag = f"t{os.getpid()}"
    host, dep = _fake_deployment(tmp_path, tag)
    db = DB(
        Control([host]),
        TOPOLOGIES["controller"],
        state=StateDir(tmp_path / "state"),
        kind="rocketmq",
        deployment=dep,
    )
    try:
        assert db.cluster_name == "ProdCluster"
        ns_e, b_e = dep.roles
        assert [(r.name, r.port, r.ctl_port, r.ha_port) for r in db.roles] == [
            ("ns-n1", ns_e.port, ns_e.controller_port, None),
            ("broker-a-n1", b_e.port, None, b_e.port + 1),
        ]
        assert db.controller_addrs() == [f"127.0.0.1:{ns_e.controller_port}"]
        assert db.role_at(f"127.0.0.1:{b_e.port}") is db.by_name["broker-a-n1"]
        with pytest.raises(DeploymentError, match="no java process match"):
            await db.install()  # nothing runs yet: it says which roles it could not find
        for r in dep.roles:
            subprocess.run(["sh", "-c", r.start or ""], check=True, timeout=30)
        with trio.fail_after(20):  # the start commands return before their processes exec
            while len(_pids(tag)) < 2:
                await trio.sleep(0.02)
        await db.install()
        await db.setup()
        assert await db.start_all(30) >= 0  # nothing started: up once each listens
        assert not (tmp_path / "w").exists()  # nothing written on the node
        ns, broker = db.by_name["ns-n1"], db.by_name["broker-a-n1"]
        assert sorted([ns.pid, broker.pid]) == _pids(tag)
        await db.pause(broker)
        await _until(lambda: _state(broker.pid) == "T")  # signals land a moment later
        assert _state(ns.pid) != "T"
        await db.resume(broker)
        await _until(lambda: _state(broker.pid) != "T")
        old = broker.pid
        await db.kill(broker)
        assert "broker-a-n1" in db.down
        with trio.fail_after(20):  # SIGKILL is delivered; the process is gone a moment later
            while await db.alive(broker):
                await trio.sleep(0.02)
        await db.stop_all()  # the end of a campaign: the deployment is left running
        assert broker.pid != old and await db.alive(broker) and await db.alive(ns)
        assert len(_pids(tag)) == 2 and "broker-a-n1" not in db.down
        got = await db.collect(tmp_path / "run")
        assert got["n1"] > 0
        d = tmp_path / "run" / "nodes" / "n1" / "broker-a-n1"
        assert (d / "0-broker.log").read_text() == "broker log line\n"
        assert (d / "1-logs" / "broker.log").exists()
        assert not (d / "2-x.log").exists()
    finally:
        for pid in _pids(tag):
            os.kill(pid, 9)


def test_campaign_options_for_a_deployment(tmp_path):
    """A host file with [deployment] is run with --db rocketmq and its own topology; a remote
    host file without one is still refused for --db rocketmq (the bench cannot deploy there)."""
    from rmq_jepsen.runner import CampaignError, CampaignOptions, check_options

    f = tmp_path / "prod.toml"
    f.write_text(HOSTFILE)
    check_options(CampaignOptions(db="rocketmq", hosts=str(f), topology="controller"))
    with pytest.raises(CampaignError, match=r"existing RocketMQ deployment.*--db rocketmq"):
        check_options(CampaignOptions(db="rmq_ha", hosts=str(f)))
    with pytest.raises(CampaignError, match="topology is 'controller', not --topology classic"):
        check_options(CampaignOptions(db="rocketmq", hosts=str(f), topology="classic"))
    plain = tmp_path / "plain.toml"
    plain.write_text('[[hosts]]\nname = "n1"\naddress = "10.1.0.11"\n')
    with pytest.raises(CampaignError, match=r"only local hosts.*\[deployment\]"):
        check_options(CampaignOptions(db="rocketmq", hosts=str(plain)))
