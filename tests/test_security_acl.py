"""ACL 1.0: plain_acl.yml parsing (bad files get clear errors), address white-lists, the
request code table, and the pure decision for one request (RocketMQ's validate + checkPerm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.security import rules
from rmq_ha.security.acl import AclConfigError, decide, load_acl_file, load_acl_text
from rmq_ha.security.addresses import AddressPatternError, compile_pattern, host_of
from rmq_ha.security.signing import Credentials, sign_fields

ACL = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
  - accessKey: rocketmq2
    secretKey: 87654321
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""

USER = Credentials("RocketMQ", "12345678")
ADMIN = Credentials("rocketmq2", "87654321")
IP = "127.0.0.1"


def ask(
    code: int,
    ext: dict[str, str],
    body: bytes | None = None,
    creds: Credentials | None = USER,
    ip: str = IP,
) -> tuple[bool, str]:
    acl = load_acl_text(ACL)
    fields = dict(ext) if creds is None else sign_fields(dict(ext), body, creds)
    v = decide(acl, code, fields, body, 479, ip)
    return v.allowed, v.reason


# ---- the file --------------------------------------------------------------------------------


def test_numbers_are_secrets_as_text() -> None:
    acl = load_acl_text(ACL)
    assert acl.accounts["RocketMQ"].secret_key == "12345678"
    assert acl.accounts["rocketmq2"].admin
    assert "12345678" not in repr(acl)


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("accounts: [", "not YAML"),
        ("- a", "must be a mapping"),
        ("accounts: 5", "accounts must be a list"),
        ("accounts: [5]", r"accounts\[0\]: must be a mapping"),
        ("accountz: []", "unknown top-level keys"),
        ("accounts: [{accessKey: abc, secretKey: 12345678}]", "accessKey must be at least 6"),
        ("accounts: [{accessKey: abcdef, secretKey: '123'}]", "secretKey must be at least 6"),
        ("accounts: [{accessKey: abcdef, secretKey: '123456', admin: maybe}]", "admin must"),
        ("accounts: [{accessKey: abcdef, secretKey: '123456', defaultTopicPerm: ALL}]", "ALL"),
        ("accounts: [{accessKey: abcdef, secretKey: '123456', topicPerms: [t]}]", "'name=PERM'"),
        ("accounts: [{accessKey: abcdef, secretKey: '123456', topicPerms: [t=RW]}]", "RW"),
        ("accounts: [{accessKey: abcdef, secretKey: '123456', groupPerms: x}]", "must be a list"),
        ("accounts: [{accessKey: abcdef, secretKey: '123456', colour: red}]", "unknown keys"),
        (
            "accounts: [{accessKey: abcdef, secretKey: '123456', whiteRemoteAddress: 1.2.3}]",
            "4 parts",
        ),
        (
            "accounts: [{accessKey: abcdef, secretKey: '123456'}, "
            "{accessKey: abcdef, secretKey: '654321'}]",
            "appears twice",
        ),
        ("globalWhiteRemoteAddresses: [300.1.1.1]", "0..255"),
    ],
)
def test_bad_files_get_clear_errors(text: str, msg: str) -> None:
    with pytest.raises(AclConfigError, match=msg) as e:
        load_acl_text(text)
    assert "123456" not in str(e.value)  # a secret is never echoed


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(AclConfigError, match="cannot read ACL file"):
        load_acl_file(tmp_path / "nope.yml")


# ---- addresses -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("", [], ["127.0.0.1"]),
        ("192.168.0.1", ["192.168.0.1", "::ffff:192.168.0.1"], ["192.168.0.2"]),
        ("192.168.0.*", ["192.168.0.0", "192.168.0.255"], ["192.168.1.1", "x"]),
        ("192.168.1-10.*", ["192.168.1.5", "192.168.10.0"], ["192.168.11.1"]),
        ("192.168.0.{1,2}", ["192.168.0.2"], ["192.168.0.3"]),
        ("10.0.0.0/8", ["10.9.9.9"], ["11.0.0.1", "::1"]),
        ("::1", ["::1"], ["127.0.0.1"]),
    ],
)
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    p = compile_pattern(pattern)
    assert all(p(ip) for ip in yes) and not any(p(ip) for ip in no)


@pytest.mark.parametrize("bad", ["1.2.3", "1.2.3.x", "1.2.3.9-1", "fe80::*", "1.2.3.4/99"])
def test_bad_address_patterns(bad: str) -> None:
    with pytest.raises(AddressPatternError, match="address pattern"):
        compile_pattern(bad)


def test_host_of() -> None:
    assert host_of("127.0.0.1:10911") == "127.0.0.1"
    assert host_of("[::1]:9876") == "::1"


# ---- the code table --------------------------------------------------------------------------


def test_every_registry_code_is_classified() -> None:
    assert {int(c) for c in RC} <= set(rules.RULES)


def test_inner_codes_are_cluster_and_admin_codes_admin() -> None:
    for code in (
        RC.REGISTER_BROKER,
        RC.BROKER_HEARTBEAT,
        RC.CONTROLLER_ELECT_MASTER,
        RC.CONTROLLER_ALTER_SYNC_STATE_SET,
        RC.CONTROLLER_APPLY_BROKER_ID,
        RC.CONTROLLER_REGISTER_BROKER,
        RC.RMQHA_RAFT_MESSAGE,
    ):
        assert rules.RULES[code].kind is rules.Kind.CLUSTER, code
    for code in (
        RC.UPDATE_AND_CREATE_TOPIC,
        RC.DELETE_TOPIC_IN_BROKER,
        RC.RESET_CONSUMER_OFFSET_IN_BROKER,
        RC.UPDATE_BROKER_CONFIG,
        RC.UPDATE_CONTROLLER_CONFIG,
        RC.CLEAN_BROKER_DATA,
    ):
        assert rules.RULES[code].kind is rules.Kind.ADMIN, code


# ---- the decision ----------------------------------------------------------------------------


def test_authentication_answers_as_rocketmq() -> None:
    ext = {"topic": "topicB"}
    assert ask(RC.SEND_MESSAGE, ext) == (True, "")
    assert ask(RC.SEND_MESSAGE, ext, creds=None) == (False, "No accessKey is configured")
    assert ask(RC.SEND_MESSAGE, ext, creds=Credentials("nobody", "12345678")) == (
        False,
        "No acl config for nobody",
    )
    assert ask(RC.SEND_MESSAGE, ext, creds=Credentials("RocketMQ", "wrong-secret")) == (
        False,
        "Check signature failed for accessKey=RocketMQ",
    )


def test_altered_header_or_body_after_signing_is_refused() -> None:
    acl = load_acl_text(ACL)
    signed = sign_fields({"topic": "topicB", "queueId": "1"}, b"body", USER)
    assert decide(acl, RC.SEND_MESSAGE, signed, b"body", 479, IP).allowed
    assert not decide(acl, RC.SEND_MESSAGE, signed, b"bodY", 479, IP).allowed
    assert not decide(acl, RC.SEND_MESSAGE, {**signed, "queueId": "2"}, b"body", 479, IP).allowed
    assert not decide(acl, RC.SEND_MESSAGE, {**signed, "x": "1"}, b"body", 479, IP).allowed


def test_topic_and_group_permissions() -> None:
    assert ask(RC.SEND_MESSAGE, {"topic": "topicA"}) == (False, "No permission for topic=topicA")
    assert ask(RC.SEND_MESSAGE, {"topic": "topicC"}) == (False, "No permission for topic=topicC")
    assert ask(RC.SEND_MESSAGE_V2, {"b": "topicB"})[0]
    assert ask(RC.SEND_MESSAGE, {"topic": "other"}) == (
        False,
        "No default permission for topic=other",
    )
    pull = {"topic": "topicC", "consumerGroup": "groupB"}
    assert ask(RC.PULL_MESSAGE, pull)[0]
    assert ask(RC.PULL_MESSAGE, {**pull, "consumerGroup": "groupA"}) == (
        False,
        "No permission for group=groupA",
    )
    assert ask(RC.PULL_MESSAGE, {**pull, "consumerGroup": "anyGroup"})[0]  # default SUB
    # sending to a retry topic needs the group's SUB
    assert not ask(RC.SEND_MESSAGE, {"topic": "%RETRY%groupA"})[0]
    assert ask(RC.SEND_MESSAGE, {"topic": "%RETRY%groupB"})[0]


def test_heartbeat_body_is_checked() -> None:
    hb = {
        "clientID": "c",
        "consumerDataSet": [{"groupName": "groupB", "subscriptionDataSet": [{"topic": "topicA"}]}],
    }
    ok, reason = ask(RC.HEART_BEAT, {}, json.dumps(hb).encode())
    assert (ok, reason) == (False, "No permission for topic=topicA")
    hb["consumerDataSet"][0]["subscriptionDataSet"] = [{"topic": "topicC"}]  # type: ignore[index]
    assert ask(RC.HEART_BEAT, {}, json.dumps(hb).encode())[0]
    assert not ask(RC.HEART_BEAT, {}, b"{not json")[0]  # unreadable: refused


def test_admin_codes_need_an_admin() -> None:
    ext = {"topic": "topicB"}
    assert ask(RC.UPDATE_AND_CREATE_TOPIC, ext) == (
        False,
        "Need admin permission for request code=17, but accessKey=RocketMQ is not",
    )
    assert ask(RC.UPDATE_AND_CREATE_TOPIC, ext, creds=ADMIN)[0]
    assert ask(RC.SEND_MESSAGE, {"topic": "topicA"}, creds=ADMIN)[0]  # admin may do anything


def test_white_lists_as_rocketmq_but_never_for_cluster_traffic() -> None:
    # globalWhiteRemoteAddresses: no credentials at all
    assert ask(RC.SEND_MESSAGE, {"topic": "x"}, creds=None, ip="10.10.103.7")[0]
    # the account's whiteRemoteAddress: no signature check
    bad_secret = Credentials("rocketmq2", "not-the-secret")
    assert ask(RC.UPDATE_AND_CREATE_TOPIC, {}, creds=bad_secret, ip="192.168.1.9")[0]
    # cluster traffic: always a valid admin signature
    for ip in ("10.10.103.7", "192.168.1.9"):
        assert not ask(RC.REGISTER_BROKER, {}, creds=None, ip=ip)[0]
        assert not ask(RC.REGISTER_BROKER, {}, creds=bad_secret, ip=ip)[0]
    assert ask(RC.REGISTER_BROKER, {}, creds=ADMIN)[0]
    assert ask(RC.CONTROLLER_ELECT_MASTER, {}, creds=USER) == (
        False,
        "Need admin permission for request code=1002, but accessKey=RocketMQ is not",
    )


def test_unclassified_code_is_refused() -> None:
    ok, reason = ask(77_777, {}, creds=ADMIN)
    assert not ok and "not classified" in reason


def test_config_printing_masks_the_inner_credentials() -> None:
    from rmq_ha.config import BrokerConfig, rocketmq_items

    secret = '{"accessKey": "clusterAdmin", "secretKey": "cluster-secret-1"}'
    cfg = BrokerConfig(inner_client_authentication_credentials=secret)
    items = dict(rocketmq_items(cfg))
    assert items["innerClientAuthenticationCredentials"] == "******"
    assert "cluster-secret-1" not in repr(cfg) and "cluster-secret-1" not in str(items)
    assert dict(rocketmq_items(BrokerConfig()))["innerClientAuthenticationCredentials"] == ""


# ---- bad input never crashes the decision ----------------------------------------------------

_codes = st.sampled_from([*sorted(rules.RULES), 0, -1, 2**31 - 1])
_text = st.text(max_size=16)
_ext = st.dictionaries(
    st.sampled_from(["AccessKey", "Signature", "SecurityToken", "topic", "b", "consumerGroup",
                     "group", "_UNIQUE_KEY_QUERY"]) | _text,
    _text,
    max_size=8,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(_codes, _ext, st.one_of(st.none(), st.binary(max_size=64)), st.integers(-5, 600), _text)
def test_any_request_gets_a_verdict_never_an_exception(
    code: int, ext: dict[str, str], body: bytes | None, version: int, ip: str
) -> None:
    acl = load_acl_text(ACL)
    v = decide(acl, code, ext, body, version, ip)
    assert v.allowed in (True, False)
    if ext.get("AccessKey") not in acl.accounts and not v.allowed:
        assert v.reason


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([RC.HEART_BEAT]), st.binary(max_size=200))
def test_garbage_heartbeat_bodies_are_refused_cleanly(code: int, body: bytes) -> None:
    acl = load_acl_text(ACL)
    fields = sign_fields({}, body, USER)
    v = decide(acl, code, fields, body, 479, IP)
    assert v.allowed or "cannot read" in v.reason or "permission" in v.reason
