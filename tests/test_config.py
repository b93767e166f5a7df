"""Config records: RocketMQ key names, TOML, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_ha.config import (
    BrokerConfig,
    BrokerRole,
    ControllerConfig,
    FlushDiskType,
    NamesrvConfig,
    from_mapping,
    load,
    parse_properties,
)
from rmq_ha.errors import ConfigError

ROCKETMQ_BROKER_CONF = """\
# a broker.conf as RocketMQ's distribution ships it, plus keys rmq_ha does not know
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = SYNC_FLUSH
namesrvAddr=127.0.0.1:9876;127.0.0.1:9877
listenPort: 10911
storePathRootDir=/tmp/rmq-store
autoCreateTopicEnable=false
"""


def test_rocketmq_conf_file_is_read_with_rocketmq_key_names(tmp_path: Path) -> None:
    p = tmp_path / "broker.conf"
    p.write_text(ROCKETMQ_BROKER_CONF)
    cfg, unknown = load(BrokerConfig, p)
    assert cfg.cluster_name == "DefaultCluster"
    assert cfg.broker_name == "broker-a"
    assert cfg.broker_id == 0
    assert cfg.broker_role is BrokerRole.ASYNC_MASTER
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.namesrv_addrs == ["127.0.0.1:9876", "127.0.0.1:9877"]
    assert cfg.listen_port == 10911
    assert cfg.store_root == Path("/tmp/rmq-store")
    assert cfg.auto_create_topic_enable is False
    assert unknown == []
    assert (cfg.delete_when, cfg.file_reserved_time_h) == ("04", 48)


def test_toml_accepts_field_names_and_rocketmq_names(tmp_path: Path) -> None:
    p = tmp_path / "broker.toml"
    p.write_text('broker_name = "b"\nlistenPort = 0\nflush_interval_ms = 20\n')
    cfg, unknown = load(BrokerConfig, p)
    assert (cfg.broker_name, cfg.listen_port, cfg.flush_interval_ms) == ("b", 0, 20)
    assert unknown == []


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("listenPort", "99999", "outside 0..65535"),
        ("listenPort", "abc", "not an integer"),
        ("brokerRole", "LEADER", "not one of"),
        ("autoCreateTopicEnable", "maybe", "not a boolean"),
        ("flushIntervalCommitLog", "0", "must be positive"),
        ("brokerId", "-1", "must be >= 0"),
        ("mappedFileSizeConsumeQueue", "1001", "multiple of 20"),
        ("brokerPermission", "16", "bits beyond"),
        ("damagedRecordWaitMs", "-1", "must be >= 0"),
        ("storeScrubBytesPerSecond", "-1", "must be >= 0"),
        ("storeScrubPassInterval", "0", "must be positive"),
        ("mappedFileSizeCommitLog", "99999999999999999999", "outside a 64-bit integer"),
        ("inSyncReplicas", "0", "must be >= 1"),
        ("totalReplicas", "0", "must be >= 1"),
        ("storePathRootDir", " ", "empty"),
        ("brokerName", ["a"], "an array is not a value"),
    ],
)
def test_bad_values_name_the_key_and_the_reason(key: str, value: object, reason: str) -> None:
    with pytest.raises(ConfigError) as e:
        from_mapping(BrokerConfig, {key: value})
    assert e.value.key == key
    assert key in str(e.value) and reason in str(e.value)


def test_contradictions_and_sections_are_refused_naming_the_key(tmp_path: Path) -> None:
    """A SLAVE with the master's id 0 (routed as the master, every send refused), two
    controller peers with one id (the later silently replaced the earlier: a smaller Raft
    group), and a TOML [section] (every key in it was dropped as unknown: the broker ran on
    defaults) are refused."""
    with pytest.raises(ConfigError) as e:
        from_mapping(BrokerConfig, {"brokerRole": "SLAVE", "brokerId": "0"})
    assert e.value.key == "brokerId" and "SLAVE" in str(e.value)
    assert from_mapping(BrokerConfig, {"brokerRole": "SLAVE", "brokerId": "1"})[0].broker_id == 1
    peers = "n0-127.0.0.1:19878;n0-127.0.0.1:19879;n1-127.0.0.1:19880"
    with pytest.raises(ConfigError) as e:
        from_mapping(
            ControllerConfig,
            {"controllerDLegerPeers": peers, "controllerDLegerSelfId": "n0"},
        )
    assert e.value.key == "controllerDLegerPeers" and "n0 given twice" in str(e.value)
    t = tmp_path / "b.toml"
    t.write_text('[broker]\nbrokerName = "x"\n')
    with pytest.raises(ConfigError) as e:
        load(BrokerConfig, t)
    assert "[broker]" in str(e.value) and "flat" in str(e.value)


def test_properties_files_read_as_java_does(tmp_path: Path) -> None:
    """java.util.Properties: a key may end at whitespace ("brokerName broker-b" was dropped
    as an unknown key "brokerName broker-b"), and the file is ISO-8859-1 (a Latin-1 byte gave
    a UnicodeDecodeError traceback)."""
    p = tmp_path / "broker.conf"
    p.write_bytes(b"brokerName broker-b\nbrokerClusterName \t= C1\nlistenPort:0\n# caf\xe9\n")
    cfg, unknown = load(BrokerConfig, p)
    assert (cfg.broker_name, cfg.cluster_name, cfg.listen_port, unknown) == (
        "broker-b", "C1", 0, [],
    )  # fmt: skip
    p.write_bytes("brokerName=caf\u00e9\n".encode("latin-1"))
    assert load(BrokerConfig, p)[0].broker_name == "caf\u00e9"
    t = tmp_path / "x.toml"
    t.write_bytes(b'brokerName = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load(BrokerConfig, t)


def test_unreadable_and_malformed_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(NamesrvConfig, tmp_path / "missing.conf")
    bad = tmp_path / "bad.toml"
    bad.write_text("listenPort = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(NamesrvConfig, bad)


def test_properties_syntax() -> None:
    props = parse_properties("a=1\n! comment\n  b : two words \nc=x\\\n  y\nflag\n")
    assert props == {"a": "1", "b": "two words", "c": "xy", "flag": ""}


def test_config_records_are_frozen() -> None:
    cfg = NamesrvConfig()
    with pytest.raises(AttributeError):
        cfg.listen_port = 1  # type: ignore[misc]


def test_controller_deployed_stand_alone_decides_where_the_controllers_are() -> None:
    """Seed 002's controllerDeployedStandAlone: false (default) means the controllers are
    embedded in the name servers, so controllerAddr may be left out; true requires it."""
    embedded, _ = from_mapping(
        BrokerConfig,
        {"enableControllerMode": "true", "namesrvAddr": "a:1;b:2"},
    )
    assert embedded.controller_addrs == ["a:1", "b:2"]
    explicit, _ = from_mapping(
        BrokerConfig,
        {"enableControllerMode": "true", "namesrvAddr": "a:1", "controllerAddr": "c:3"},
    )
    assert explicit.controller_addrs == ["c:3"]
    with pytest.raises(ConfigError, match="controllerDeployedStandAlone=true") as err:
        from_mapping(
            BrokerConfig,
            {
                "enableControllerMode": "true",
                "namesrvAddr": "a:1",
                "controllerDeployedStandAlone": "true",
            },
        )
    assert err.value.key == "controllerAddr"


def test_damaged_record_wait_of_zero_skips_at_once_and_is_accepted() -> None:
    """docs/store.md: damagedRecordWaitMs=0 skips a damaged record at once (the generic
    'durations are positive' rule refused it)."""
    cfg, _ = from_mapping(BrokerConfig, {"damagedRecordWaitMs": "0"})
    assert cfg.damaged_record_wait_ms == 0


def test_the_command_line_obeys_the_file_rules_and_typos_are_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`--listen-port 70000` was bound as port 4464 (the override skipped validation); a
    misspelt key was one INFO line among unused keys."""
    import argparse
    import logging

    from rmq_ha.roles import _load

    p = tmp_path / "b.conf"
    p.write_text("brokerRoel=SLAVE\nbrokerClusterName=C\nzzUnusedKey=04\n")
    args = argparse.Namespace(config=str(p))
    with pytest.raises(ConfigError) as e:
        _load(BrokerConfig, args, {"listen_port": 70_000})
    assert e.value.key == "listenPort"
    with caplog.at_level(logging.WARNING, logger="rmq_ha"):
        cfg = _load(BrokerConfig, args, {"listen_port": 0})
    assert cfg.listen_port == 0 and cfg.broker_role == BrokerRole.ASYNC_MASTER
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("brokerRoel" in m and "did you mean brokerRole" in m for m in msgs), msgs
    assert any("zzUnusedKey" in m and "ignored" in m for m in msgs), msgs
