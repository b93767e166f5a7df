"""TLS on the remoting and HA ports (RocketMQ's tls.server.mode: disabled / permissive /
enforcing), server certificates and optional client certificates.

* `server_context` / `client_context` build `ssl.SSLContext`s from a role's config (the
  RocketMQ key of a bad value is named in the error).
* `accept` turns one accepted TCP stream into what the connection reads: in ENFORCING mode a
  TLS stream (a failed handshake closes this connection only); in PERMISSIVE mode TLS when the
  first byte is a TLS handshake record (0x16) and plaintext otherwise (a remoting frame starts
  with its length, whose first byte is 0 for any frame under 16 MiB); in DISABLED mode the
  plain stream.
"""

from __future__ import annotations

import logging
import ssl
from typing import Protocol

import trio

from rmq_ha.errors import ConfigError

log = logging.getLogger(__name__)

#: First byte of a TLS record carrying a handshake (ClientHello).
TLS_HANDSHAKE_RECORD = 0x16
HANDSHAKE_TIMEOUT_S = 10.0


class TlsConfig(Protocol):
    @property
    def tls_server_mode(self) -> object: ...
    @property
    def tls_server_cert_path(self) -> str: ...
    @property
    def tls_server_key_path(self) -> str: ...
    @property
    def tls_server_trust_cert_path(self) -> str: ...
    @property
    def tls_server_need_client_auth(self) -> object: ...
    @property
    def tls_enable(self) -> bool: ...
    @property
    def tls_client_trust_cert_path(self) -> str: ...
    @property
    def tls_client_cert_path(self) -> str: ...
    @property
    def tls_client_key_path(self) -> str: ...


def _mode(cfg: TlsConfig) -> str:
    return str(getattr(cfg.tls_server_mode, "value", cfg.tls_server_mode))


def server_context(cfg: TlsConfig) -> ssl.SSLContext | None:
    """None when tls.server.mode is disabled."""
    if _mode(cfg) == "disabled":
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cfg.tls_server_cert_path, cfg.tls_server_key_path)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(
            f"bad config tls.server.certPath/tls.server.keyPath: cannot load "
            f"{cfg.tls_server_cert_path} with its key: {e}",
            "tls.server.certPath",
        ) from None
    auth = str(getattr(cfg.tls_server_need_client_auth, "value", "none"))
    if auth != "none":
        try:
            ctx.load_verify_locations(cfg.tls_server_trust_cert_path)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(
                f"bad config tls.server.trustCertPath: {cfg.tls_server_trust_cert_path}: {e}",
                "tls.server.trustCertPath",
            ) from None
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "require" else ssl.CERT_OPTIONAL
    return ctx


def client_context(cfg: TlsConfig) -> ssl.SSLContext | None:
    """None unless tlsEnable. With tls.client.trustCertPath the server's certificate is
    verified against it (chain and host name/IP); without, it is not (RocketMQ's client
    default, tls.client.authServer=false): encrypted, not authenticated."""
    if not cfg.tls_enable:
        return None
    return make_client_context(
        cfg.tls_client_trust_cert_path, cfg.tls_client_cert_path, cfg.tls_client_key_path
    )


def make_client_context(trust: str = "", cert: str = "", key: str = "") -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if trust:
        try:
            ctx.load_verify_locations(trust)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(
                f"bad config tls.client.trustCertPath: {trust}: {e}", "tls.client.trustCertPath"
            ) from None
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        try:
            ctx.load_cert_chain(cert, key or None)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(
                f"bad config tls.client.certPath/tls.client.keyPath: {cert}: {e}",
                "tls.client.certPath",
            ) from None
    return ctx


class _Prefixed(trio.abc.Stream):
    """A stream that first returns bytes already read (the peeked first byte)."""

    def __init__(self, inner: trio.abc.Stream, prefix: bytes) -> None:
        self.inner = inner
        self.prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self.prefix:
            out, self.prefix = self.prefix, b""
            return out
        return await self.inner.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


class TlsRefused(Exception):
    """This connection is closed: a failed handshake, or plaintext on an enforcing port."""


async def accept(
    stream: trio.abc.Stream, ctx: ssl.SSLContext | None, mode: str, peer: str
) -> trio.abc.Stream:
    """The stream a connection should use; raises TlsRefused (the caller closes)."""
    if ctx is None or mode == "disabled":
        return stream
    with trio.move_on_after(HANDSHAKE_TIMEOUT_S) as scope:
        first = await stream.receive_some(1)
    if scope.cancelled_caught:
        raise TlsRefused(f"{peer}: nothing received within {HANDSHAKE_TIMEOUT_S} s")
    if not first:
        raise TlsRefused(f"{peer}: closed before sending anything")
    inner: trio.abc.Stream = _Prefixed(stream, bytes(first))
    if first[0] != TLS_HANDSHAKE_RECORD:
        if mode == "permissive":
            return inner
        raise TlsRefused(f"{peer}: plaintext on a TLS-enforcing port")
    tls = trio.SSLStream(inner, ctx, server_side=True)
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            await tls.do_handshake()
    except (trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError) as e:
        raise TlsRefused(f"{peer}: TLS handshake failed: {e.__cause__ or e}") from None
    return tls


async def connect(
    stream: trio.abc.Stream, ctx: ssl.SSLContext, host: str
) -> trio.SSLStream[trio.abc.Stream]:
    """Client side: the TLS stream over a connected TCP stream, handshake done."""
    tls = trio.SSLStream(stream, ctx, server_hostname=host if ctx.check_hostname else None)
    with trio.fail_after(HANDSHAKE_TIMEOUT_S):
        await tls.do_handshake()
    return tls


def server_mode(cfg: TlsConfig) -> str:
    """tls.server.mode as text: "disabled", "permissive" or "enforcing"."""
    return _mode(cfg)
