"""The code registry (rocketmq-internals.md sections 1.2, 1.7, 1.8, 1.11) and the perm bits."""

from __future__ import annotations

import pytest

from rmq_ha.protocol import command
from rmq_ha.protocol.codes import (
    REQUEST_DOCS,
    RESPONSE_DOCS,
    LanguageCode,
    RequestCode,
    ResponseCode,
    all_codes,
    code_name,
    request_info,
    response_info,
)
from rmq_ha.protocol.perm import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_RW,
    PERM_WRITE,
    is_accessible,
    is_inherited,
    is_priority,
    is_readable,
    is_valid,
    is_writeable,
    perm_to_string,
    without_write,
)


def test_every_code_has_exactly_one_doc_line() -> None:
    assert set(REQUEST_DOCS) == set(RequestCode)
    assert set(RESPONSE_DOCS) == set(ResponseCode)
    for doc in [*REQUEST_DOCS.values(), *RESPONSE_DOCS.values()]:
        assert doc.strip() and "\n" not in doc and "|" not in doc


def test_codes_are_unique_within_each_enum() -> None:
    # IntEnum silently aliases duplicate values; an alias would hide a typo.
    assert len({int(c) for c in RequestCode}) == len(RequestCode.__members__)
    assert len({int(c) for c in ResponseCode}) == len(ResponseCode.__members__)


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (10, "SEND_MESSAGE"),
        (39, "CHECK_TRANSACTION_STATE"),
        (40, "NOTIFY_CONSUMER_IDS_CHANGED"),
        (41, "LOCK_BATCH_MQ"),
        (103, "REGISTER_BROKER"),
        (105, "GET_ROUTEINFO_BY_TOPIC"),
        (310, "SEND_MESSAGE_V2"),
        (320, "SEND_BATCH_MESSAGE"),
        (322, "QUERY_DATA_VERSION"),
        (361, "LITE_PULL_MESSAGE"),
        (513, "UPDATE_AND_CREATE_STATIC_TOPIC"),
        (901, "GET_BROKER_MEMBER_GROUP"),
        (904, "BROKER_HEARTBEAT"),
        (905, "NOTIFY_MIN_BROKER_ID_CHANGE"),
        (906, "EXCHANGE_BROKER_HA_INFO"),
        (1001, "CONTROLLER_ALTER_SYNC_STATE_SET"),
        (1007, "GET_BROKER_EPOCH_CACHE"),
        (1013, "CONTROLLER_APPLY_BROKER_ID"),
        (1018, "RAFT_BROKER_HEART_BEAT_EVENT_REQUEST"),
        (2004, "SET_COMMITLOG_READ_MODE"),
        (3010, "AUTH_LIST_ACL"),
        (200050, "POP_MESSAGE"),
        (200056, "POP_ROLLBACK"),
        (200151, "BATCH_ACK_MESSAGE"),
    ],
)
def test_request_codes_match_rocketmq(code: int, name: str) -> None:
    assert RequestCode(code).name == name


def test_reference_ranges_are_complete() -> None:
    for code in range(1001, 1014):
        assert request_info(code) is not None, code
    for code in range(2000, 2017):
        assert response_info(code) is not None, code
    for code in range(200050, 200057):
        assert request_info(code) is not None, code
    for code in range(901, 909):
        assert request_info(code) is not None, code


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (0, "SUCCESS"),
        (2, "SYSTEM_BUSY"),
        (3, "REQUEST_CODE_NOT_SUPPORTED"),
        (17, "TOPIC_NOT_EXIST"),
        (19, "PULL_NOT_FOUND"),
        (21, "PULL_OFFSET_MOVED"),
        (202, "TRANSACTION_STATE_UNKNOW"),
        (208, "NO_MESSAGE"),
        (1500, "GO_AWAY"),
        (2007, "CONTROLLER_NOT_LEADER"),
        (2011, "CONTROLLER_MASTER_STILL_EXIST"),
        (2016, "CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS"),
        (-1006, "RPC_TIME_OUT"),
        (3002, "POLICY_NOT_EXIST"),
    ],
)
def test_response_codes_match_rocketmq(code: int, name: str) -> None:
    assert ResponseCode(code).name == name


def test_lookup_helpers() -> None:
    info = request_info(105)
    assert info is not None and info.kind == "request" and info.name == "GET_ROUTEINFO_BY_TOPIC"
    assert request_info(99999) is None
    assert code_name(17, response=True) == "TOPIC_NOT_EXIST"
    assert code_name(17, response=False) == "UPDATE_AND_CREATE_TOPIC"
    assert code_name(4242, response=False) == "UNKNOWN(4242)"
    entries = all_codes()
    assert len(entries) == len(RequestCode) + len(ResponseCode)
    assert [e.kind for e in entries] == sorted(
        (e.kind for e in entries), key=["request", "response"].index
    )


def test_language_codes() -> None:
    assert [(lc.name, int(lc)) for lc in LanguageCode] == [
        ("JAVA", 0), ("CPP", 1), ("DOTNET", 2), ("PYTHON", 3), ("DELPHI", 4), ("ERLANG", 5),
        ("RUBY", 6), ("OTHER", 7), ("HTTP", 8), ("GO", 9), ("PHP", 10), ("OMS", 11),
        ("RUST", 12), ("NODE_JS", 13),
    ]  # fmt: skip
    # command.py's constants agree with the registry.
    assert command.LANGUAGE_JAVA == int(LanguageCode.JAVA)
    assert command.LANGUAGE_PYTHON == int(LanguageCode.PYTHON)
    assert command.LANGUAGE_GO == int(LanguageCode.GO)


def test_perm_bits() -> None:
    assert (PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT) == (8, 4, 2, 1)
    assert PERM_RW == 6
    assert is_readable(6) and is_writeable(6)
    assert is_readable(4) and not is_writeable(4)
    assert is_writeable(2) and not is_readable(2)
    assert not is_readable(0) and not is_writeable(0) and not is_accessible(0)
    assert is_inherited(7) and not is_inherited(6)
    assert is_priority(8 | 6) and not is_priority(7)
    assert is_valid(7) and not is_valid(8) and not is_valid(-1)
    assert without_write(6) == 4 and without_write(4) == 4 and without_write(7) == 5


@pytest.mark.parametrize(
    ("perm", "text"), [(0, "---"), (1, "--X"), (2, "-W-"), (4, "R--"), (6, "RW-"), (7, "RWX")]
)
def test_perm_to_string(perm: int, text: str) -> None:
    assert perm_to_string(perm) == text
