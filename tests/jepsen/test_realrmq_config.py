"""Issue 17: the real-RocketMQ controller-mode launcher's config files. Every key is spelled as
RocketMQ spells it: RocketMQ ignores an unknown key silently, so a typo would leave one of its
defaults in force (a 10 s heartbeat timeout instead of 1.5 s) and nothing would say so."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest
from rmq_jepsen.bench import realrmq
from rmq_jepsen.launch import LogMatch, Proc, ProcessExited, write_properties

pytestmark = pytest.mark.timeout(300)

NS_PORTS = [9876, 9886, 9896]
CTL_PORTS = [9878, 9868, 9858]

#: The keys of a name server with an embedded DLedger controller (NamesrvConfig,
#: NettyServerConfig, ControllerConfig), written out by hand.
NAMESRV_KEYS = {
    "listenPort",
    "bindAddress",
    "enableControllerInNamesrv",
    "controllerType",
    "controllerDLegerGroup",
    "controllerDLegerPeers",
    "controllerDLegerSelfId",
    "controllerStorePath",
    "mappedFileSize",
    "enableElectUncleanMaster",
    "notifyBrokerRoleChanged",
    "scanNotActiveBrokerInterval",
    "scanInactiveMasterInterval",
}

#: The keys of a controller-mode broker (BrokerIdentity/BrokerConfig, MessageStoreConfig,
#: NettyServerConfig).
BROKER_KEYS = {
    "brokerClusterName",
    "brokerName",
    "brokerId",
    "brokerRole",
    "enableControllerMode",
    "controllerAddr",
    "fetchControllerAddrByDnsLookup",
    "allAckInSyncStateSet",
    "namesrvAddr",
    "brokerIP1",
    "brokerIP2",
    "bindAddress",
    "listenPort",
    "haListenPort",
    "storePathRootDir",
    "storePathCommitLog",
    "flushDiskType",
    "autoCreateTopicEnable",
    "autoCreateSubscriptionGroup",
    "mappedFileSizeCommitLog",
    "diskMaxUsedSpaceRatio",
    "brokerHeartbeatInterval",
    "controllerHeartBeatTimeoutMills",
    "syncBrokerMetadataPeriod",
    "checkSyncStateSetPeriod",
    "syncControllerMetadataPeriod",
    "syncBrokerMemberGroupPeriod",
    "haMaxTimeSlaveNotCatchup",
    "haSendHeartbeatInterval",
    "haHousekeepingInterval",
    "slaveTimeout",
    "registerNameServerPeriod",
    "flushIntervalCommitLog",
}


def test_namesrv_embeds_a_dledger_controller_with_every_key_as_rocketmq_spells_it(tmp_path):
    confs = [realrmq.controller_namesrv_conf(i, NS_PORTS[i], CTL_PORTS, tmp_path) for i in range(3)]
    for i, c in enumerate(confs):
        assert set(c) == NAMESRV_KEYS
        assert c["listenPort"] == NS_PORTS[i]
        assert c["enableControllerInNamesrv"] == "true"
        assert c["controllerDLegerSelfId"] == f"n{i}"
        assert c["controllerStorePath"] == tmp_path / f"controller-n{i}"
    # one DLedger group, the same peer list on every node: n<i>-host:port;...
    assert {c["controllerDLegerGroup"] for c in confs} == {realrmq.CONTROLLER_GROUP}
    assert {c["controllerDLegerPeers"] for c in confs} == {
        "n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858"
    }


def test_broker_is_a_controller_mode_replica_with_all_ack(tmp_path):
    ns = [f"127.0.0.1:{p}" for p in NS_PORTS]
    ctl = [f"127.0.0.1:{p}" for p in CTL_PORTS]
    c = realrmq.controller_broker_conf(1, 30911, ns, ctl, tmp_path)
    assert set(c) == BROKER_KEYS
    assert (c["enableControllerMode"], c["allAckInSyncStateSet"]) == ("true", "true")
    # the broker sends controller requests to the DLedger peer addresses, not the name servers
    assert c["controllerAddr"] == "127.0.0.1:9878;127.0.0.1:9868;127.0.0.1:9858"
    assert c["namesrvAddr"] == "127.0.0.1:9876;127.0.0.1:9886;127.0.0.1:9896"
    assert (c["brokerId"], c["brokerRole"]) == (-1, "SLAVE")  # the controller decides
    assert (c["listenPort"], c["haListenPort"]) == (30911, 30912)
    assert c["storePathCommitLog"] == tmp_path / "broker-1" / "commitlog"


def test_overrides_win_and_may_add_keys(tmp_path):
    c = realrmq.controller_broker_conf(
        0, 1000, ["a"], ["b"], tmp_path, {"controllerHeartBeatTimeoutMills": 2000, "x": 1}
    )
    assert c["controllerHeartBeatTimeoutMills"] == 2000 and c["x"] == 1
    n = realrmq.controller_namesrv_conf(0, 1, [2], tmp_path, {"scanInactiveMasterInterval": 5000})
    assert n["scanInactiveMasterInterval"] == 5000


def test_group_ports_are_distinct_and_leave_room_for_the_broker_side_ports(tmp_path):
    g = realrmq.RealControllerGroup(tmp_path)
    ns = [int(a.rpartition(":")[2]) for a in g.ns_addrs]
    ctl = [int(a.rpartition(":")[2]) for a in g.controller_addrs]
    used = [*ns, *ctl, *(p + d for p in g.broker_ports for d in (-2, 0, 1))]
    assert len(used) == len(set(used)) == 15
    assert [c["controllerAddr"] for c in g.broker_confs] == [";".join(g.controller_addrs)] * 3


def test_jvm_sizes_are_flags_and_bad_ones_name_the_key():
    ap = argparse.ArgumentParser()
    realrmq.add_jvm_flags(ap)
    sizes = realrmq.jvm_sizes(
        ap.parse_args(["--broker-heap-mb", "768", "--broker-direct-mb", "2048"])
    )
    assert "-Xmx768m" in sizes.broker() and "-XX:MaxDirectMemorySize=2048m" in sizes.broker()
    assert "-Xmx256m" in sizes.namesrv()
    with pytest.raises(ValueError, match="broker_heap_mb must be >= 1"):
        realrmq.JvmSizes(broker_heap_mb=0)


def _lib() -> Path:
    """The jars (Maven fetches them once, cached under tests/interop/.build)."""
    if any(shutil.which(t) is None for t in ("java", "javap", "mvn")):
        pytest.skip("needs java, javap and mvn to read RocketMQ's config classes")
    lib: Path = realrmq.interop_harness().real_rocketmq_lib()
    return lib


@pytest.mark.parametrize("role", ["namesrv", "broker"])
def test_every_key_is_a_setter_of_rocketmqs_config_classes(tmp_path, role):
    """Against the jars themselves: each key has a setter in the classes the role reads its
    file into (properties2Object), so RocketMQ really applies it."""
    known = realrmq.config_keys(_lib(), role)
    conf = (
        realrmq.controller_namesrv_conf(0, 1, [2, 3, 4], tmp_path)
        if role == "namesrv"
        else realrmq.controller_broker_conf(0, 10, ["a"], ["b"], tmp_path)
    )
    realrmq.check_keys(conf, known, role)
    with pytest.raises(ValueError, match="allAckInSyncStateSeet not a RocketMQ config key"):
        realrmq.check_keys({"allAckInSyncStateSeet": "true"}, known, role)


async def test_a_broker_that_lost_its_port_block_gets_a_new_one_and_starts_again(tmp_path):
    """Ports are picked free before the JVMs start; one taken meanwhile (the controllers' own
    connections use ephemeral ports) makes the broker exit with BindException. It gets a new
    block, its config is rewritten, and it starts again. A real process stands in for the
    JVM's start-up: it fails with RocketMQ's message the first time, then says it is up."""
    g = realrmq.RealControllerGroup(tmp_path, replicas=1, namesrv_count=1)
    conf = write_properties(tmp_path / "broker-0.conf", g.broker_confs[0])
    count = tmp_path / "starts"
    script = (
        f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}; "
        'if [ "$n" = 0 ]; then echo "java.net.BindException: Address already in use"; exit 1; fi; '
        "echo 'The broker[broker-a, 127.0.0.1:1] boot success. serializeType=JSON'; sleep 60"
    )
    p = Proc(
        "fake broker-0",
        ["sh", "-c", script],
        tmp_path / "broker-0.out",
        LogMatch(realrmq._BROKER_BOOT),
        stdout="log",
        append_log=False,
    )
    g.brokers.append(p)
    before = g.broker_ports[0]
    try:
        p.start()
        await g._broker_ready(0, 30)
        assert p.alive and count.read_text().strip() == "2"
        new = g.broker_ports[0]
        assert new != before
        text = conf.read_text()
        assert f"listenPort = {new}\n" in text and f"haListenPort = {new + 1}\n" in text
    finally:
        p.kill()


async def test_a_broker_that_fails_for_another_reason_is_not_restarted(tmp_path):
    g = realrmq.RealControllerGroup(tmp_path, replicas=1, namesrv_count=1)
    p = Proc(
        "fake broker-0",
        ["sh", "-c", "echo 'java.lang.OutOfMemoryError'; exit 1"],
        tmp_path / "broker-0.out",
        LogMatch(realrmq._BROKER_BOOT),
        stdout="log",
        append_log=False,
    )
    g.brokers.append(p)
    p.start()
    with pytest.raises(ProcessExited):
        await g._broker_ready(0, 30)
    assert g.broker_ports[0] == g.broker_confs[0]["listenPort"]
