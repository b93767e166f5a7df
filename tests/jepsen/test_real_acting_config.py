"""Issue 17: the real-RocketMQ side of `rmq-ha bench acting-master --impl rocketmq|both`:
`realrmq.RealActingGroup`'s plan of a classic topology with slave acting master (one name
server; broker-a = SYNC_MASTER + SLAVE, broker-b = a master). Every key is spelled as RocketMQ
spells it (checked against the setters of its config classes in the jars when java is present),
every setting of rmq_ha's run (`bench.cluster.ActingCluster`, as the bench builds it) is in
RocketMQ's files with the same value, and the ports leave room for each broker's fast (P-2) and
HA (P+1) servers. No JVM is started here (`make test-real-rocketmq` runs one)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest
from rmq_jepsen.bench import acting, realrmq
from rmq_jepsen.bench.cluster import FAST_ACTING, ActingCluster

from rmq_ha.config import parse_properties

pytestmark = pytest.mark.timeout(300)

#: A classic acting-master name server (NamesrvConfig, NettyServerConfig), written out by hand.
NAMESRV_KEYS = {
    "listenPort",
    "bindAddress",
    "supportActingMaster",
    "notifyMinBrokerIdChanged",
    "scanNotActiveBrokerInterval",
}

#: A classic broker with slave acting master (BrokerIdentity/BrokerConfig, MessageStoreConfig,
#: NettyServerConfig), written out by hand.
BROKER_KEYS = {
    "brokerClusterName",
    "brokerName",
    "brokerId",
    "brokerRole",
    "totalReplicas",
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
    "slaveReadEnable",
    "brokerHeartbeatInterval",
    "brokerNotActiveTimeoutMillis",
    "syncBrokerMemberGroupPeriod",
    "syncBrokerMetadataPeriod",
    "haSendHeartbeatInterval",
    "haHousekeepingInterval",
    "slaveTimeout",
    "registerNameServerPeriod",
    "flushIntervalCommitLog",
    "enableSlaveActingMaster",
    "enableRemoteEscape",
    "compatibleWithOldNameSrv",
}


def _args(**kw: object) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    acting.add_parser(ap.add_subparsers())
    ns = ap.parse_args(["acting-master"])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def test_namesrv_routes_an_acting_master(tmp_path):
    c = realrmq.acting_namesrv_conf(9876)
    assert set(c) == NAMESRV_KEYS
    assert (c["supportActingMaster"], c["notifyMinBrokerIdChanged"]) == ("true", "true")
    assert c["scanNotActiveBrokerInterval"] == 200
    assert (
        realrmq.acting_namesrv_conf(1, {"scanNotActiveBrokerInterval": 5000})[
            "scanNotActiveBrokerInterval"
        ]
        == 5000
    )


def test_master_and_slave_of_a_group_with_slave_acting_master(tmp_path):
    ns = ["127.0.0.1:9876"]
    m = realrmq.acting_broker_conf("broker-a", 0, 1, 30911, ns, tmp_path)
    s = realrmq.acting_broker_conf("broker-a", 1, 1, 30921, ns, tmp_path)
    b = realrmq.acting_broker_conf("broker-b", 0, 0, 30931, ns, tmp_path)
    for c in (m, s, b):
        assert set(c) == BROKER_KEYS
        assert (c["enableSlaveActingMaster"], c["enableRemoteEscape"]) == ("true", "true")
        assert c["compatibleWithOldNameSrv"] == "false"
        assert c["slaveReadEnable"] == "true"  # rmq_ha's slaves serve pulls, RocketMQ's must
        assert c["namesrvAddr"] == "127.0.0.1:9876"
        assert c["brokerClusterName"] == realrmq.ACTING_CLUSTER
    assert (m["brokerId"], m["brokerRole"], m["totalReplicas"]) == (0, "SYNC_MASTER", 2)
    assert (s["brokerId"], s["brokerRole"], s["totalReplicas"]) == (1, "SLAVE", 2)
    # broker-b alone: totalReplicas 1, so RocketMQ does not isolate it for a pre-online
    # a master without slaves is asynchronous (a SYNC_MASTER would take no escaped message)
    assert (b["brokerId"], b["brokerRole"], b["totalReplicas"]) == (0, "ASYNC_MASTER", 1)
    assert (s["listenPort"], s["haListenPort"]) == (30921, 30922)
    assert s["storePathCommitLog"] == tmp_path / "broker-a-1" / "commitlog"


def test_rocketmq_gets_every_setting_of_the_rmq_ha_run_under_the_same_key(tmp_path):
    """The bench's own clusters for both implementations: every key rmq_ha's brokers and
    name server are given (but the ones naming their own address or store) is in RocketMQ's
    file of the same role with the same value."""
    args = _args(timeout_ms=2000)
    ours = acting.make_cluster("rmq_ha", tmp_path / "rmq_ha", args)
    theirs = acting.make_cluster("rocketmq", tmp_path / "rocketmq", args)
    assert isinstance(ours, ActingCluster) and isinstance(theirs, realrmq.RealActingGroup)
    assert ours.members == theirs.members == [("broker-a", 0), ("broker-a", 1), ("broker-b", 0)]
    own = {"listenPort", "namesrvAddr", "storePathRootDir"}
    for (group, bid), conf in zip(theirs.members, theirs.broker_confs, strict=True):
        mine = parse_properties((tmp_path / "rmq_ha" / f"{group}-{bid}.conf").read_text())
        assert set(mine) - own <= set(conf), set(mine) - own - set(conf)
        for k, v in mine.items():
            if k not in own:
                assert str(conf[k]) == v, (group, bid, k)
        assert conf["brokerNotActiveTimeoutMillis"] == 2000
        assert conf["brokerHeartbeatInterval"] == 200
        assert conf["messageDelayLevel"] == acting.DELAY_LEVELS
        for k, v in FAST_ACTING.items():
            if k != "brokerNotActiveTimeoutMillis":
                assert conf[k] == v
    ns_mine = parse_properties((tmp_path / "rmq_ha" / "namesrv-0.conf").read_text())
    for k, v in ns_mine.items():
        if k != "listenPort":
            assert str(theirs.ns_confs[0][k]) == v, k


def test_ports_are_distinct_and_leave_room_for_the_broker_side_ports(tmp_path):
    g = realrmq.RealActingGroup(tmp_path)
    ns = [int(a.rpartition(":")[2]) for a in g.ns_addrs]
    used = [*ns, *(p + d for p in g.broker_ports for d in (-2, 0, 1))]
    assert len(used) == len(set(used)) == 1 + 3 * 3
    assert [g.addr(*m) for m in g.members] == [f"127.0.0.1:{p}" for p in g.broker_ports]
    assert g.broker_names == ["broker-a-0", "broker-a-1", "broker-b-0"]
    assert [c["listenPort"] for c in g.broker_confs] == g.broker_ports
    assert {c["namesrvAddr"] for c in g.broker_confs} == {g.ns_addrs[0]}


def test_rocketmq_broker_conf_overrides_and_is_checked_by_name(tmp_path):
    ap = argparse.ArgumentParser()
    acting.add_parser(ap.add_subparsers())
    flag = "--rocketmq-broker-conf"
    args = ap.parse_args(
        ["acting-master", flag, "slaveReadEnable=false", flag, "brokerHeartbeatInterval = 300"]
    )
    g = acting.make_cluster("rocketmq", tmp_path, args)
    assert isinstance(g, realrmq.RealActingGroup)
    assert {c["slaveReadEnable"] for c in g.broker_confs} == {"false"}
    assert {c["brokerHeartbeatInterval"] for c in g.broker_confs} == {"300"}
    with pytest.raises(SystemExit):
        ap.parse_args(["acting-master", "--rocketmq-broker-conf", "slaveReadEnable"])


def test_an_unknown_impl_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="--impl: 'kafka' is not one of rmq_ha, rocketmq"):
        acting.make_cluster("kafka", tmp_path, _args())


def _lib() -> Path:
    if any(shutil.which(t) is None for t in ("java", "javap", "mvn")):
        pytest.skip("needs java, javap and mvn to read RocketMQ's config classes")
    lib: Path = realrmq.interop_harness().real_rocketmq_lib()
    return lib


def test_every_key_is_a_setter_of_rocketmqs_config_classes(tmp_path):
    lib = _lib()
    g = acting.make_cluster("rocketmq", tmp_path, _args(timeout_ms=2000))
    assert isinstance(g, realrmq.RealActingGroup)
    for role, confs in (("namesrv", g.ns_confs), ("broker", g.broker_confs)):
        known = realrmq.config_keys(lib, role)
        for c in confs:
            realrmq.check_keys(c, known, role)
    with pytest.raises(ValueError, match="enableSlaveActingMastr not a RocketMQ config key"):
        realrmq.check_keys(
            {"enableSlaveActingMastr": "true"}, realrmq.config_keys(lib, "broker"), "b"
        )
