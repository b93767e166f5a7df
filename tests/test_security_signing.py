"""RocketMQ's ACL signature (AclClientRPCHook / PlainAccessResource.parse rules) and the parsing
of the credential fields: pure, with property tests (hypothesis)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_ha.security.signing import (
    ACCESS_KEY,
    SECURITY_TOKEN,
    SIGNATURE,
    UNIQUE_MSG_QUERY_FLAG,
    Credentials,
    calc_signature,
    parse_credentials_json,
    sign_fields,
    signature_matches,
    signed_content,
)

CREDS = Credentials("RocketMQ", "12345678")


def test_content_is_values_in_key_order_then_body() -> None:
    # AclClientRPCHook: TreeMap of the ext fields (AccessKey included, Signature not), values
    # only, then the body.
    ext = {"topic": "T", "AccessKey": "ak", "b": "2", "Signature": "x", "a": "1"}
    assert signed_content(ext, b"BODY") == b"ak12TBODY"
    assert signed_content(ext, None) == b"ak12T"
    assert signed_content({}, b"") == b""


def test_key_order_is_java_utf16_not_code_points() -> None:
    # U+FF21 (one UTF-16 unit, 0xFF21) sorts after U+1F600 (surrogates 0xD83D..) in Java's
    # String.compareTo, but before it in Python's code-point order.
    ext = {"\U0001f600": "emoji", "\uff21": "fullwidth"}
    assert signed_content(ext, None) == b"emojifullwidth"


def test_signature_is_base64_hmac_sha1_of_the_content() -> None:
    content = b"ak12TBODY"
    want = base64.b64encode(hmac.new(b"12345678", content, hashlib.sha1).digest()).decode()
    assert calc_signature(content, "12345678") == want


def test_sign_adds_access_key_token_and_signature() -> None:
    creds = Credentials("RocketMQ", "12345678", "tok")
    ext = sign_fields({"topic": "T"}, b"x", creds)
    assert ext[ACCESS_KEY] == "RocketMQ" and ext[SECURITY_TOKEN] == "tok"
    assert ext[SIGNATURE] == calc_signature(b"RocketMQtokTx", "12345678")


def test_old_clients_unique_key_flag_is_left_out_by_the_server_only() -> None:
    ext = {"a": "1", UNIQUE_MSG_QUERY_FLAG: "true"}
    assert signed_content(ext, None, version=400) == b"1"  # V4_9_3: left out
    assert signed_content(ext, None, version=401) == b"true1"  # "_" sorts before "a"
    assert signed_content(ext, None) == b"true1"  # the client side keeps it


def test_credentials_hide_the_secret() -> None:
    c = Credentials("RocketMQ", "s3cr3t-value", "tok-value")
    assert "s3cr3t" not in repr(c) and "tok-value" not in repr(c)
    with pytest.raises(ValueError, match="access key is empty"):
        Credentials(" ", "x")
    with pytest.raises(ValueError, match="secret key is empty"):
        Credentials("ak", "")


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("{", "not a JSON object"),
        ("[]", "not a JSON object"),
        ('{"secretKey": "12345678"}', "accessKey is missing"),
        ('{"accessKey": "ak"}', "secretKey is missing"),
        ('{"accessKey": "ak", "secretKey": 5}', "secretKey is missing"),
        ('{"accessKey": "ak", "secretKey": "x", "securityToken": 1}', "securityToken"),
        ('{"accessKey": "ak", "secretKey": "x", "extra": 1}', "unknown fields"),
    ],
)
def test_bad_inner_credentials_name_the_key(text: str, msg: str) -> None:
    with pytest.raises(ValueError, match=msg) as e:
        parse_credentials_json(text, "innerClientAuthenticationCredentials")
    assert "innerClientAuthenticationCredentials" in str(e.value)
    assert '"x"' not in str(e.value)


def test_inner_credentials_parse() -> None:
    assert parse_credentials_json("  ", "k") is None
    c = parse_credentials_json('{"accessKey": "rocketmq2", "secretKey": "12345678"}', "k")
    assert c == Credentials("rocketmq2", "12345678")


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_fields = st.dictionaries(_text, _text, max_size=8)


@settings(max_examples=300, deadline=None)
@given(_fields, st.binary(max_size=64))
def test_a_signed_request_verifies(ext: dict[str, str], body: bytes) -> None:
    signed = sign_fields(dict(ext), body, CREDS)
    expected = calc_signature(signed_content(signed, body, 479), CREDS.secret_key)
    assert signature_matches(expected, signed[SIGNATURE])


@settings(max_examples=300, deadline=None)
@given(_fields, st.binary(max_size=64), st.data())
def test_any_change_to_a_value_or_the_body_breaks_it(
    ext: dict[str, str], body: bytes, data: st.DataObject
) -> None:
    signed = sign_fields(dict(ext), body, CREDS)
    sig = signed[SIGNATURE]
    if data.draw(st.booleans()) or not ext:
        other = data.draw(st.binary(max_size=64).filter(lambda b: b != body))
        changed, new_body = dict(signed), other
    else:
        key = data.draw(st.sampled_from(sorted(ext)))
        value = data.draw(_text.filter(lambda v: v != signed[key]))
        changed, new_body = {**signed, key: value}, body
    got = calc_signature(signed_content(changed, new_body, 479), CREDS.secret_key)
    # Moving bytes between a value and its neighbour keeps the concatenation (RocketMQ's
    # scheme has no separators); only then may a change verify.
    same = signed_content(changed, new_body, 479) == signed_content(signed, body, 479)
    assert signature_matches(got, sig) == same


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), _text), _text)
def test_signature_comparison_never_raises(got: str | None, expected: str) -> None:
    assert signature_matches(expected, got) == (got == expected)


@settings(max_examples=300, deadline=None)
@given(_fields, st.one_of(st.none(), st.binary(max_size=64)), st.sampled_from([None, 400, 479]))
def test_streamed_signature_equals_the_plain_definition(
    ext: dict[str, str], body: bytes | None, version: int | None
) -> None:
    from rmq_ha.security.signing import signature_of

    plain = calc_signature(signed_content(ext, body, version), "k3y")
    assert signature_of(ext, body, "k3y", version) == plain
    # and the fast key order equals Java's order
    from rmq_ha.security.signing import _java_key_order, _sorted_keys

    assert _sorted_keys(ext) == sorted(ext, key=_java_key_order)
