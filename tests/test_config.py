"""Config records: RocketMQ key names, TOML, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_ha.config import (
    BrokerConfig,
    BrokerRole,
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
    ],
)
def test_bad_values_name_the_key_and_the_reason(key: str, value: str, reason: str) -> None:
    with pytest.raises(ConfigError) as e:
        from_mapping(BrokerConfig, {key: value})
    assert e.value.key == key
    assert key in str(e.value) and reason in str(e.value)


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
