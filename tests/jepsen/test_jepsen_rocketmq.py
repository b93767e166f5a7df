"""Issue 17: `rmq-ha campaign run --db rocketmq` — the planning of real RocketMQ's roles (their
config keys as RocketMQ spells them, their ports, their stores), how "the master" and "the
controller leader" that the cluster names are mapped back to the roles (and so to the pids and
nodes) the nemeses hit, the readiness line, the command a node runs, and the refusals.

The campaign itself against real RocketMQ is tests/jepsen/test_campaign_rocketmq.py
(`make test-real-rocketmq`)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from rmq_jepsen.bench import realrmq
from rmq_jepsen.control import ActionLog, Control, Host
from rmq_jepsen.db import (
    DB,
    ROCKETMQ_READY,
    TOPOLOGIES,
    JvmSizes,
    Timing,
    plan_rocketmq_roles,
)
from rmq_jepsen.runner import CampaignError, CampaignOptions, check_options
from rmq_jepsen.state import StateDir

pytestmark = pytest.mark.timeout(300)

TOPO = TOPOLOGIES["controller"]


def _hosts(n: int = 5) -> list[Host]:
    return [
        Host(name=f"n{i}", address=f"10.9.0.{10 + i}", netns=f"ns{i}", workdir=f"/w/n{i}")
        for i in range(1, n + 1)
    ]


def _loopback(n: int = 3) -> list[Host]:
    return [
        Host(name=f"n{i}", address="127.0.0.1", workdir=f"/w/n{i}", port_offset=100 * i)
        for i in range(1, n + 1)
    ]


def test_roles_are_rocketmqs_controller_mode_on_the_campaigns_nodes():
    roles = plan_rocketmq_roles(TOPO, _hosts(), Timing())
    ns = [r for r in roles if r.kind == "namesrv"]
    brokers = [r for r in roles if r.kind == "broker"]
    assert [(r.name, r.node, r.port, r.ctl_port) for r in ns] == [
        ("ns1", "n1", 9876, 9878),
        ("ns2", "n2", 9876, 9878),
        ("ns3", "n3", 9876, 9878),
    ]
    # brokers on the nodes after the name servers, as for rmq_ha
    assert [(r.name, r.node, r.port, r.ha_port) for r in brokers] == [
        ("broker-a-0", "n4", 10911, 10912),
        ("broker-a-1", "n5", 10911, 10912),
        ("broker-a-2", "n1", 10911, 10912),
    ]
    peers = "n0-10.9.0.11:9878;n1-10.9.0.12:9878;n2-10.9.0.13:9878"
    for i, r in enumerate(ns):
        v = r.values
        assert v["enableControllerInNamesrv"] == "true"
        assert v["controllerDLegerPeers"] == peers
        assert v["controllerDLegerSelfId"] == f"n{i}"
        assert (v["bindAddress"], v["listenPort"]) == (f"10.9.0.{11 + i}", 9876)
        assert v["controllerStorePath"] == f"/w/n{i + 1}/ns{i + 1}/controller"
        assert "metricsExporterType" not in v  # the metrics scrape is rmq_ha's only
    t = Timing()
    for r in brokers:
        v = r.values
        addr = f"10.9.0.1{r.node[1]}"
        assert (v["brokerIP1"], v["bindAddress"], v["listenPort"], v["haListenPort"]) == (
            addr,
            addr,
            10911,
            10912,
        )
        assert (v["brokerName"], v["brokerClusterName"]) == ("broker-a", "RmqJepsen")
        assert v["enableControllerMode"] == "true" and v["allAckInSyncStateSet"] == "true"
        # requests for the controller go to its own port; clients to the name servers
        assert v["controllerAddr"] == "10.9.0.11:9878;10.9.0.12:9878;10.9.0.13:9878"
        assert v["namesrvAddr"] == "10.9.0.11:9876;10.9.0.12:9876;10.9.0.13:9876"
        # the campaign's timings under RocketMQ's names
        assert v["controllerHeartBeatTimeoutMills"] == t.controller_heartbeat_timeout_ms
        assert v["haMaxTimeSlaveNotCatchup"] == t.ha_not_catchup_ms
        assert v["messageDelayLevel"] == t.delay_levels
        # the store under the role's directory: what the run collects, what file faults damage
        d = f"/w/{r.node}/{r.name}"
        assert (v["storePathRootDir"], v["storePathCommitLog"]) == (
            f"{d}/store",
            f"{d}/store/commitlog",
        )
        assert all(not isinstance(x, Path) for x in v.values())  # config.json takes them


def test_loopback_nodes_get_distinct_ports_with_room_for_the_brokers_side_ports():
    roles = plan_rocketmq_roles(TOPO, _loopback(), Timing())
    used: list[int] = []
    for r in roles:
        if r.kind == "namesrv":
            assert r.ctl_port is not None
            used += [r.port, r.ctl_port]
        else:
            used += [r.port - 2, r.port, r.port + 1]  # fast server, listen, HA
    assert len(used) == len(set(used))


def test_only_the_controller_topology_is_planned():
    with pytest.raises(ValueError, match="topology classic is not supported"):
        plan_rocketmq_roles(TOPOLOGIES["classic"], _hosts(), Timing())


def _db(tmp_path: Path, hosts: list[Host]) -> DB:
    tmp_path.mkdir(parents=True, exist_ok=True)
    control = Control(hosts, ActionLog(tmp_path / "control.log"))
    return DB(control, TOPO, state=StateDir(tmp_path / "state"), kind="rocketmq")


def test_the_masters_and_leaders_the_cluster_names_map_to_the_roles_the_nemeses_hit(tmp_path):
    """ClusterView maps a master's registered address (brokerIP1:listenPort) and the leader's
    address (its controller port) to roles; a nemesis then signals that role's pid on its
    node, or cuts that node off."""
    db = _db(tmp_path, _hosts())
    assert db.controller_addrs() == ["10.9.0.11:9878", "10.9.0.12:9878", "10.9.0.13:9878"]
    assert db.namesrv_addr() == "10.9.0.11:9876;10.9.0.12:9876;10.9.0.13:9876"
    leader = db.role_at("10.9.0.12:9878")
    assert leader is not None and (leader.name, leader.node) == ("ns2", "n2")
    master = db.role_at("10.9.0.15:10911")
    assert master is not None and (master.name, master.node) == ("broker-a-1", "n5")
    assert db.role_at("10.9.0.15:10912") is None  # an HA port is nobody's address
    # loopback: one address, told apart by port
    lb = _db(tmp_path / "lb", _loopback())
    ns1 = lb.by_name["ns1"]
    assert lb.role_at(f"127.0.0.1:{ns1.ctl_port}") is ns1
    b = lb.brokers()[1]
    assert lb.role_at(f"127.0.0.1:{b.port}") is b


def test_a_node_runs_the_jvm_itself_so_its_pid_is_the_jvms(tmp_path):
    db = _db(tmp_path, _hosts())
    db.rocketmq_lib = "/jars/lib"
    db.jvm = JvmSizes(broker_heap_mb=300)
    argv = shlex.split(db._command(db.by_name["broker-a-0"]))
    assert argv[0] == "java"  # start_daemon execs it: the pidfile holds the JVM's pid
    assert "-Xmx300m" in argv and "-Drocketmq.home.dir=/w/n4/broker-a-0" in argv
    assert argv[-3:] == [
        "org.apache.rocketmq.broker.BrokerStartup",
        "-c",
        "/w/n4/broker-a-0/role.conf",
    ]
    assert argv[argv.index("-cp") + 1] == "/jars/lib/*"
    ns = shlex.split(db._command(db.by_name["ns1"]))
    assert ns[-3] == "org.apache.rocketmq.namesrv.NamesrvStartup"


def test_a_start_before_install_is_refused(tmp_path):
    from rmq_jepsen.db import InstallError

    db = _db(tmp_path, _hosts())
    with pytest.raises(InstallError, match="no RocketMQ jars"):
        db._command(db.roles[0])


@pytest.mark.skipif(shutil.which("grep") is None, reason="needs grep")
@pytest.mark.parametrize(
    ("kind", "line", "want"),
    [
        (
            "namesrv",
            "The Name Server boot success. serializeType=JSON, address 198.18.231.11:9876",
            "The Name Server boot success. serializeType=JSON, address 198.18.231.11:9876",
        ),
        (
            "broker",
            "The broker[broker-a, 198.18.231.11:10911] boot success. serializeType=JSON and "
            "name server is 198.18.231.11:9876",
            "The broker[broker-a, 198.18.231.11:10911] boot success",
        ),
    ],
)
def test_the_ready_line_is_found_by_the_nodes_grep(tmp_path, kind, line, want):
    """The lines RocketMQ 5.5.0 logged in a campaign, matched the way a node looks for them."""
    log = tmp_path / "role.log"
    log.write_text(f"starting\nThe ControllerManager boot success. serializeType=JSON\n{line}\n")
    p = subprocess.run(
        ["grep", "-m1", "-oE", ROCKETMQ_READY[kind], str(log)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert p.stdout.strip() == want
    log.write_text("The ControllerManager boot success. serializeType=JSON\n")
    p = subprocess.run(
        ["grep", "-m1", "-oE", ROCKETMQ_READY[kind], str(log)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert p.stdout.strip() == ""


@pytest.mark.parametrize(
    ("opts", "msg"),
    [
        (CampaignOptions(db="rocketmq", secure=True), "--db rocketmq with --secure"),
        (CampaignOptions(db="rocketmq", topology="classic"), "topology classic is not supported"),
        (CampaignOptions(db="rocketmq", hosts="vagrant"), "only local hosts"),
        (CampaignOptions(db="kafka"), "--db kafka: unknown database"),
    ],
)
def test_unsupported_combinations_are_refused_with_the_reason(opts, msg):
    with pytest.raises(CampaignError, match=msg):
        check_options(opts)
    check_options(CampaignOptions(db="rocketmq", hosts="loopback"))  # supported


def test_remote_hosts_are_refused_at_install(tmp_path):
    import trio
    from rmq_jepsen.db import InstallError

    hosts = [Host(name=f"n{i}", address=f"10.0.0.{i}", ssh_host=f"10.0.0.{i}") for i in (1, 2, 3)]
    db = _db(tmp_path, hosts)
    with pytest.raises(InstallError, match="runs on local hosts only"):
        trio.run(db.install)


@pytest.mark.parametrize("kind", ["namesrv", "broker"])
def test_every_planned_key_is_a_setter_of_rocketmqs_config_classes(kind):
    """Against the jars: RocketMQ ignores a key it does not know, silently."""
    if any(shutil.which(t) is None for t in ("java", "javap", "mvn")):
        pytest.skip("needs java, javap and mvn to read RocketMQ's config classes")
    known = realrmq.config_keys(realrmq.interop_harness().real_rocketmq_lib(), kind)
    for r in plan_rocketmq_roles(TOPO, _hosts(), Timing()):
        if r.kind == kind:
            realrmq.check_keys(r.values, known, r.name)


#: Timings both databases' campaign roles set under RocketMQ's key names.
SHARED_TIMINGS = {
    "namesrv": ("scanNotActiveBrokerInterval", "scanInactiveMasterInterval"),
    "broker": (
        "brokerHeartbeatInterval",
        "registerNameServerPeriod",
        "controllerHeartBeatTimeoutMills",
        "syncBrokerMetadataPeriod",
        "checkSyncStateSetPeriod",
        "haMaxTimeSlaveNotCatchup",
    ),
}


def test_both_databases_get_the_campaigns_timings():
    """`campaign compare` runs one schedule against both: failure detection must run on the same
    clock. RocketMQ's roles once kept the launcher's faster bench timings (200 ms heartbeats and
    scans against the campaign's 1 s), and RocketMQ recovered from a paused master sooner."""
    from rmq_jepsen.db import plan_roles

    timing = Timing()
    ours = plan_roles(TOPO, _hosts(), timing)
    theirs = plan_rocketmq_roles(TOPO, _hosts(), timing)
    for kind, keys in SHARED_TIMINGS.items():
        a = [r for r in ours if r.kind == kind]
        b = [r for r in theirs if r.kind == kind]
        assert a and len(a) == len(b)
        for ra, rb in zip(a, b, strict=True):
            for k in keys:
                assert str(ra.values[k]) == str(rb.values[k]), (kind, k)
