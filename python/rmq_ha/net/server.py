"""The remoting server: accepts connections and runs each one with the role's handler."""

from __future__ import annotations

import logging
import socket
import ssl

import trio

from rmq_ha.errors import ConfigError
from rmq_ha.net.connection import SERVER_IDLE_S, Connection, FrameFilter, Handler
from rmq_ha.net.logthrottle import THROTTLE
from rmq_ha.security.tls import TlsRefused, accept

log = logging.getLogger(__name__)


async def open_listeners(port: int, host: str, key: str) -> list[trio.SocketListener]:
    """trio.open_tcp_listeners, with a bind failure (the port in use, an address this host
    does not have, a name that does not resolve) as a ConfigError naming the address and the
    config key, not a bare "[Errno 98] Address already in use"."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as e:
        why = e.strerror or str(e)
        raise ConfigError(f"cannot listen on {host}:{port} ({key}): {why}", key) from None


#: TCP keepalive on every accepted connection: a peer that vanished without closing (power
#: loss, a cut cable, a killed VM) is found within about KEEPALIVE_IDLE_S + 4 x 30 s, and its
#: connection, file descriptor and held pulls go. Without it they stayed until the kernel's
#: default of 2 h 11 min, for ever with keepalive off as it was (soak probe, 2026-11-28). An idle
#: but live client is not disturbed: the kernel answers the probes.
KEEPALIVE_IDLE_S = 120


def keepalive(sock: trio.socket.SocketType) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 4)
    except OSError:  # a socket already gone: nothing to keep alive
        pass


class RemotingServer:
    """Listens on (host, port); `port=0` picks a free port, reported by `serve`'s
    `task_status.started(port)` and kept in `self.port`. With `tls` (a server SSLContext)
    connections are TLS as `tls_mode` says (rmq_ha.security.tls: permissive or enforcing).
    Connections idle for `idle_s` are closed (Connection.idle_s)."""

    def __init__(
        self,
        handler: Handler,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tls: ssl.SSLContext | None = None,
        tls_mode: str = "disabled",
        idle_s: float | None = SERVER_IDLE_S,
    ) -> None:
        self.handler = handler
        #: serverChannelMaxIdleTimeSeconds: a connection with nothing read or written and no
        #: request in flight for this long is closed (None or 0: never).
        self.idle_s = idle_s or None
        self.host = host
        self.port = port
        self.tls = tls
        self.tls_mode = tls_mode if tls is not None else "disabled"
        #: Connections closed by TLS (failed handshake, plaintext on an enforcing port).
        self.tls_refused = 0
        self.connections: set[Connection] = set()
        #: Runs on every received buffer in place of the frame decoder (the broker's native
        #: send path); connections accepted from then on use it.
        self.fast: FrameFilter | None = None
        self._listeners: list[trio.SocketListener] | None = None
        #: the config key of the port, named when it cannot be bound
        self.port_key = "listenPort"

    async def bind(self) -> int:
        """Binds now (before `serve`), so the real port is known early; returns it."""
        if self._listeners is None:
            self._listeners = await open_listeners(self.port, self.host, self.port_key)
            self.port = self._listeners[0].socket.getsockname()[1]
        return self.port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        await self.bind()
        listeners = self._listeners
        assert listeners is not None
        log.info("remoting server listening on %s", self.address)
        task_status.started(self.port)
        await trio.serve_listeners(self._serve_one, listeners)

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "?"
        keepalive(stream.socket)
        try:
            s = await accept(stream, self.tls, self.tls_mode, peer)
        except TlsRefused as e:  # this connection only
            self.tls_refused += 1
            THROTTLE.log(log, logging.WARNING, "tls-refused", "closing connection: %s", e)
            with trio.CancelScope(shield=True):
                await stream.aclose()
            return
        conn = Connection(s, self.handler, peer, fast=self.fast, idle_s=self.idle_s)
        self.connections.add(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)
            with trio.CancelScope(shield=True):
                await s.aclose()
