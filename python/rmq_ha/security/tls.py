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
#: Bytes asked of the transport per read (as net.connection reads).
RECEIVE_BYTES = 256 << 10


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


class TlsStream(trio.abc.Stream):
    """TLS over a transport stream through `ssl.MemoryBIO`s: what trio.SSLStream does for a
    remoting connection's one reader and one writer task, with less per-call machinery (about a
    third less CPU per request/response pair, measured), and a read returns every record
    already received (one TLS record per read would cut a coalesced batch of frames apart).

    Errors of the TLS layer come out as trio.BrokenResourceError (caused by the ssl error), as
    from trio.SSLStream; a peer that closes, with or without close_notify, reads as b"".
    """

    def __init__(
        self,
        transport: trio.abc.Stream,
        ctx: ssl.SSLContext,
        *,
        server_side: bool,
        server_hostname: str | None = None,
    ) -> None:
        self.transport = transport
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = ctx.wrap_bio(
            self._in, self._out, server_side=server_side, server_hostname=server_hostname
        )
        # Records must reach the transport in the order the TLS object made them, and
        # trio streams allow one sender at a time: every send goes through this lock.
        self._send_lock = trio.Lock()
        self._eof = False

    async def _flush(self) -> None:
        if self._out.pending:
            async with self._send_lock:
                data = self._out.read()
                if data:
                    await self.transport.send_all(data)

    async def _fill(self) -> None:
        data = await self.transport.receive_some(RECEIVE_BYTES)
        if data:
            self._in.write(data)
        else:
            self._eof = True
            self._in.write_eof()

    async def do_handshake(self) -> None:
        while True:
            try:
                self._obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if self._eof:
                    raise trio.BrokenResourceError("peer closed during the TLS handshake") from None
                await self._fill()
            except ssl.SSLError as e:
                with trio.move_on_after(1):  # tell the peer why (an alert), if it listens
                    try:
                        await self._flush()
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                raise trio.BrokenResourceError(f"TLS handshake failed: {e}") from e
        await self._flush()

    def getpeercert(self) -> dict[str, object] | None:
        return self._obj.getpeercert()  # type: ignore[return-value]

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        limit = max_bytes or RECEIVE_BYTES
        while True:
            try:
                first = self._obj.read(limit)
                break
            except ssl.SSLWantReadError:
                await self._flush()  # e.g. a key update's answer
                if self._eof:
                    return b""  # closed without close_notify: as a plain EOF
                await self._fill()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
            except ssl.SSLError as e:
                raise trio.BrokenResourceError(f"TLS: {e}") from e
        if not first:
            return b""
        parts, total = [first], len(first)
        # The rest of what was already received, without waiting (most reads have none).
        while total < limit and (self._in.pending or self._obj.pending()):
            try:
                more = self._obj.read(limit - total)
            except ssl.SSLError:
                break  # WantRead, or an error the next call reports
            if not more:
                break
            parts.append(more)
            total += len(more)
        return first if len(parts) == 1 else b"".join(parts)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        async with self._send_lock:
            try:
                self._obj.write(data)
            except ssl.SSLError as e:
                raise trio.BrokenResourceError(f"TLS: {e}") from e
            await self.transport.send_all(self._out.read())

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        # close_notify, best effort and briefly: the connection is going away either way.
        with trio.move_on_after(0.5):
            try:
                self._obj.unwrap()
            except ssl.SSLError:
                pass
            try:
                await self._flush()
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                pass
        await self.transport.aclose()


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
    tls = TlsStream(inner, ctx, server_side=True)
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            await tls.do_handshake()
    except (trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError) as e:
        raise TlsRefused(f"{peer}: TLS handshake failed: {e.__cause__ or e}") from None
    return tls


async def connect(stream: trio.abc.Stream, ctx: ssl.SSLContext, host: str) -> TlsStream:
    """Client side: the TLS stream over a connected TCP stream, handshake done."""
    tls = TlsStream(
        stream, ctx, server_side=False, server_hostname=host if ctx.check_hostname else None
    )
    with trio.fail_after(HANDSHAKE_TIMEOUT_S):
        await tls.do_handshake()
    return tls


def server_mode(cfg: TlsConfig) -> str:
    """tls.server.mode as text: "disabled", "permissive" or "enforcing"."""
    return _mode(cfg)
