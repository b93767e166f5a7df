"""Mutual authentication of a slave and its master on the HA port, before RocketMQ's HA
handshake (rmq_ha's own: RocketMQ's HA port has no authentication at all).

Both sides prove they hold the cluster secret (the master's plain_acl.yml account named by the
slave's innerClientAuthenticationCredentials, which must be an admin account), over fresh nonces
from both, so a recorded exchange cannot be replayed and a fake master cannot make a slave
truncate its log. Wire, all integers big-endian:

  slave  -> master  b"RMQHAUTH" | u8 version (1) | u16 n | access key (n bytes, UTF-8)
                    | 16-byte slave nonce
  master -> slave   16-byte master nonce
  slave  -> master  20-byte HMAC-SHA1(secret, b"slave" | slave nonce | master nonce | key)
  master -> slave   u8 0 | 20-byte HMAC-SHA1(secret, b"master" | slave nonce | master nonce | key)
                    or u8 1 | u16 n | reason (n bytes, UTF-8), then the master closes

Without aclEnable on the master and credentials on the slave nothing is sent: the wire is
RocketMQ's. The pure half (encoding, MACs, the decision) is separate from the two Trio
exchanges.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import trio

from rmq_ha.security.acl import AclConfig
from rmq_ha.security.signing import Credentials

MAGIC: Final = b"RMQHAUTH"
VERSION: Final = 1
NONCE_BYTES: Final = 16
MAC_BYTES: Final = 20
MAX_KEY_BYTES: Final = 256
#: The whole exchange must finish within this (a silent peer cannot hold a connection).
AUTH_TIMEOUT_S: Final = 10.0


class HaAuthError(Exception):
    """The peer failed authentication or broke the exchange; the connection is closed."""


def mac(secret: str, who: bytes, slave_nonce: bytes, master_nonce: bytes, key: str) -> bytes:
    data = who + slave_nonce + master_nonce + key.encode("utf-8")
    return hmac.new(secret.encode("utf-8"), data, hashlib.sha1).digest()


def encode_hello(access_key: str, nonce: bytes) -> bytes:
    k = access_key.encode("utf-8")
    if not 0 < len(k) <= MAX_KEY_BYTES:
        raise ValueError(f"access key must be 1..{MAX_KEY_BYTES} bytes")
    return MAGIC + struct.pack(">BH", VERSION, len(k)) + k + nonce


@dataclass(frozen=True)
class Hello:
    access_key: str
    nonce: bytes


def decode_hello_head(head: bytes) -> int:
    """The first 11 bytes: magic, version, key length; returns the key length."""
    if head[:8] != MAGIC:
        raise HaAuthError("no HA authentication from the slave (the master requires it)")
    version, n = struct.unpack(">BH", head[8:11])
    if version != VERSION:
        raise HaAuthError(f"HA authentication version {version} is not supported")
    if not 0 < n <= MAX_KEY_BYTES:
        raise HaAuthError(f"HA authentication: access key length {n} is out of range")
    return int(n)


def decode_hello_rest(rest: bytes) -> Hello:
    key_bytes, nonce = rest[:-NONCE_BYTES], rest[-NONCE_BYTES:]
    try:
        key = key_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise HaAuthError("HA authentication: the access key is not UTF-8") from None
    return Hello(key, nonce)


def check_account(acl: AclConfig, access_key: str) -> str | None:
    """The secret of a cluster account, or None when the key is unknown or not admin."""
    account = acl.accounts.get(access_key)
    if account is None or not account.admin:
        return None
    return account.secret_key


# ---- the two exchanges -----------------------------------------------------------------------


async def _read_exact(stream: trio.abc.Stream, n: int, buf: bytearray) -> bytes:
    while len(buf) < n:
        data = await stream.receive_some(max(n - len(buf), 4096))
        if not data:
            raise HaAuthError("the peer closed during HA authentication")
        buf += data
    out = bytes(buf[:n])
    del buf[:n]
    return out


async def authenticate_slave(
    stream: trio.abc.Stream, acl: Callable[[], AclConfig]
) -> tuple[str, bytes]:
    """Master side. Returns the slave's access key and any bytes read past the exchange (the
    start of RocketMQ's handshake); raises HaAuthError (after telling the slave why)."""
    buf = bytearray()
    with trio.fail_after(AUTH_TIMEOUT_S):
        n = decode_hello_head(await _read_exact(stream, 11, buf))
        hello = decode_hello_rest(await _read_exact(stream, n + NONCE_BYTES, buf))
        master_nonce = os.urandom(NONCE_BYTES)
        await stream.send_all(master_nonce)
        got = await _read_exact(stream, MAC_BYTES, buf)
        secret = check_account(acl(), hello.access_key)
        want = (
            None
            if secret is None
            else mac(secret, b"slave", hello.nonce, master_nonce, hello.access_key)
        )
        if want is None or not hmac.compare_digest(want, got):
            reason = (
                f"HA authentication failed for accessKey={hello.access_key}"
                if secret is not None
                else f"No cluster account {hello.access_key} (unknown or not admin)"
            )
            r = reason.encode("utf-8")[:1024]
            await stream.send_all(struct.pack(">BH", 1, len(r)) + r)
            raise HaAuthError(reason)
        assert secret is not None
        proof = mac(secret, b"master", hello.nonce, master_nonce, hello.access_key)
        await stream.send_all(b"\x00" + proof)
    return hello.access_key, bytes(buf)


async def authenticate_master(stream: trio.abc.Stream, creds: Credentials) -> bytes:
    """Slave side: proves itself and checks the master's proof. Returns bytes read past the
    exchange (none are expected: the master speaks next only after our handshake)."""
    buf = bytearray()
    slave_nonce = os.urandom(NONCE_BYTES)
    with trio.fail_after(AUTH_TIMEOUT_S):
        await stream.send_all(encode_hello(creds.access_key, slave_nonce))
        master_nonce = await _read_exact(stream, NONCE_BYTES, buf)
        await stream.send_all(
            mac(creds.secret_key, b"slave", slave_nonce, master_nonce, creds.access_key)
        )
        status = (await _read_exact(stream, 1, buf))[0]
        if status != 0:
            (n,) = struct.unpack(">H", await _read_exact(stream, 2, buf))
            reason = (await _read_exact(stream, n, buf)).decode("utf-8", "replace")
            raise HaAuthError(f"the master refused HA authentication: {reason}")
        proof = await _read_exact(stream, MAC_BYTES, buf)
        want = mac(creds.secret_key, b"master", slave_nonce, master_nonce, creds.access_key)
        if not hmac.compare_digest(want, proof):
            raise HaAuthError("the master could not prove it holds the cluster secret")
    return bytes(buf)
