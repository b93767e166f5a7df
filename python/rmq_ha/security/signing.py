"""RocketMQ's remoting request signature (ACL 1.0 `AclClientRPCHook`, also what 5.x clients send).

Pure functions, no I/O. The rules, as the Java client and the broker's validator apply them:

* The client adds `AccessKey` (and `SecurityToken` when it has one) to the request's ext fields,
  then signs: the *values* of all ext fields except `Signature`, ordered by key (Java `TreeMap`,
  i.e. UTF-16 code-unit order), concatenated as UTF-8, followed by the body bytes; HmacSHA1 with
  the secret key (UTF-8), base64. The result goes into the `Signature` ext field.
* The server rebuilds the same content from the fields it received (all but `Signature`; for a
  sender announcing version <= V4_9_3 it also leaves out `_UNIQUE_KEY_QUERY`, which old clients
  added after signing) and compares.

So every header field and the body are covered; the request code, opaque, flag and remark are
not (as in RocketMQ). A replayed request with the same fields and body verifies again: the
signature has no nonce or time. docs/security.md says what that means.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from rmq_ha.protocol.command import RemotingCommand

ACCESS_KEY: Final = "AccessKey"
SECRET_KEY: Final = "SecretKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
#: MixAll.UNIQUE_MSG_QUERY_FLAG: left out of the content for senders <= V4_9_3.
UNIQUE_MSG_QUERY_FLAG: Final = "_UNIQUE_KEY_QUERY"
#: MQVersion ordinal of V4_9_3 (V4_9_4 is 401).
V4_9_3: Final = 400


@dataclass(frozen=True)
class Credentials:
    """An access key and its secret (and RocketMQ's optional security token). The secret is
    kept out of `repr`, so logging a config or a client never prints it."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.access_key.strip():
            raise ValueError("credentials: the access key is empty")
        if not self.secret_key:
            raise ValueError(f"credentials for {self.access_key!r}: the secret key is empty")


def _java_key_order(key: str) -> bytes:
    # Java's String.compareTo orders by UTF-16 code units; big-endian UTF-16 bytes sort alike
    # (surrogates come before U+E000..U+FFFF there, unlike code-point order).
    return key.encode("utf-16-be", "surrogatepass")


def _sorted_keys(ext_fields: Mapping[str, str]) -> list[str]:
    keys = sorted(ext_fields)
    # Code-point order equals UTF-16 order unless a key holds a character past U+FFFF; the
    # header keys of every real request are ASCII, so the exact (slower) sort is rarely needed.
    if not "".join(keys).isascii():
        keys.sort(key=_java_key_order)
    return keys


def _head(ext_fields: Mapping[str, str], version: int | None) -> bytes:
    skip = (SIGNATURE, UNIQUE_MSG_QUERY_FLAG) if version is not None and version <= V4_9_3 else ()
    keys = _sorted_keys(ext_fields)
    if skip:
        values = [ext_fields[k] for k in keys if k not in skip]
    else:
        values = [ext_fields[k] for k in keys if k != SIGNATURE]
    return "".join(values).encode("utf-8", "surrogatepass")


def signed_content(
    ext_fields: Mapping[str, str], body: bytes | None, version: int | None = None
) -> bytes:
    """The bytes a signature covers: ext-field values (all but `Signature`) in key order, then
    the body. `version` is the sender's; None means "the client side" (nothing left out)."""
    head = _head(ext_fields, version)
    return head + bytes(body) if body else head


@functools.lru_cache(maxsize=1024)
def _keyed(secret_key: str) -> hmac.HMAC:
    # The keyed HMAC state, copied per request: about half the cost of keying it each time.
    return hmac.new(secret_key.encode("utf-8"), digestmod=hashlib.sha1)


def calc_signature(content: bytes, secret_key: str) -> str:
    """HmacSHA1(content, secret) in base64, as `AclSigner.calSignature`."""
    mac = _keyed(secret_key).copy()
    mac.update(content)
    return base64.b64encode(mac.digest()).decode("ascii")


def signature_of(
    ext_fields: Mapping[str, str], body: bytes | None, secret_key: str, version: int | None = None
) -> str:
    """calc_signature(signed_content(...)) without copying the body."""
    mac = _keyed(secret_key).copy()
    mac.update(_head(ext_fields, version))
    if body:
        mac.update(body)
    return base64.b64encode(mac.digest()).decode("ascii")


def sign_fields(
    ext_fields: dict[str, str], body: bytes | None, creds: Credentials
) -> dict[str, str]:
    """Adds AccessKey, SecurityToken (if any) and Signature to `ext_fields` (in place, as the
    Java hook does) and returns it."""
    ext_fields[ACCESS_KEY] = creds.access_key
    if creds.security_token is not None:
        ext_fields[SECURITY_TOKEN] = creds.security_token
    ext_fields.pop(SIGNATURE, None)
    ext_fields[SIGNATURE] = signature_of(ext_fields, body, creds.secret_key)
    return ext_fields


def signature_matches(expected: str, got: str | None) -> bool:
    """Constant-time comparison (RocketMQ 5 uses MessageDigest.isEqual)."""
    if got is None:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), got.encode("utf-8", "surrogatepass"))


def parse_credentials_json(text: str, key: str) -> Credentials | None:
    """RocketMQ 5.3's `innerClientAuthenticationCredentials`: a JSON object
    `{"accessKey": "...", "secretKey": "..."}` (optionally "securityToken"). Empty means none.
    Raises ValueError naming `key` and the reason; never echoes the secret."""
    if not text.strip():
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{key}: not a JSON object ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{key}: not a JSON object")
    ak, sk, token = obj.get("accessKey"), obj.get("secretKey"), obj.get("securityToken")
    if not isinstance(ak, str) or not ak.strip():
        raise ValueError(f"{key}: accessKey is missing or empty")
    if not isinstance(sk, str) or not sk:
        raise ValueError(f"{key}: secretKey is missing or empty")
    if token is not None and not isinstance(token, str):
        raise ValueError(f"{key}: securityToken must be a string")
    unknown = sorted(set(obj) - {"accessKey", "secretKey", "securityToken"})
    if unknown:
        raise ValueError(f"{key}: unknown fields {unknown}")
    return Credentials(ak.strip(), sk, token)


def request_signer(creds: Credentials) -> Callable[[RemotingCommand], None]:
    """A `net.connection.Signer`: signs each outgoing request with `creds`."""

    def sign(cmd: RemotingCommand) -> None:
        cmd.ext_fields = sign_fields(dict(cmd.ext_fields or {}), cmd.body, creds)

    return sign
