"""The remoting client: one cached connection per address, reconnecting on demand."""

from __future__ import annotations

import logging
import ssl
from types import TracebackType

import trio

from rmq_ha.errors import RemotingConnectError, RemotingTimeoutError
from rmq_ha.net.connection import Connection, Handler, Signer
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.security.tls import connect as tls_connect

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 3.0  # RocketMQ's mqClientApiTimeout
CONNECT_TIMEOUT_S = 3.0
#: A timed-out request closes its connection only if it could wait longer than this
#: (RocketMQ's MIN_CLOSE_TIMEOUT_MILLIS).
MIN_CLOSE_TIMEOUT_S = 0.1


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise RemotingConnectError(f"bad address {addr!r}: expected host:port")
    return host, int(port)


class RemotingClient:
    """Use as `async with RemotingClient() as c: resp = await c.invoke(addr, cmd)`.

    `handler` answers requests the server sends back on the same connection (e.g. a broker
    asking a producer CHECK_TRANSACTION_STATE). `signer` signs every request sent (ACL
    credentials, rmq_ha.security)."""

    def __init__(
        self,
        handler: Handler | None = None,
        signer: Signer | None = None,
        tls: ssl.SSLContext | None = None,
        *,
        close_on_timeout: bool = True,
    ) -> None:
        self._handler = handler
        self.signer = signer
        #: RocketMQ's clientCloseSocketIfTimeout (default true): a request that times out
        #: closes its connection, so the next one opens a fresh connection rather than queueing
        #: behind a TCP connection that may be in retransmission back-off after a partition
        #: (seen in a partition-master campaign: requests on the old connections kept timing
        #: out for seconds after the heal, and the old master learnt its demotion late).
        self.close_on_timeout = close_on_timeout
        #: A client SSLContext: every connection is TLS (RocketMQ's useTLS).
        self.tls = tls
        self._conns: dict[str, Connection] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._nursery: trio.Nursery | None = None

    async def __aenter__(self) -> RemotingClient:
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return await self._nursery_cm.__aexit__(exc_type, exc, tb)

    async def aclose(self) -> None:
        for conn in list(self._conns.values()):
            await conn.aclose()
        self._conns.clear()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        lock = self._locks.setdefault(addr, trio.Lock())
        async with lock:
            conn = self._conns.get(addr)
            if conn is not None and not conn.closed:
                return conn
            host, port = split_addr(addr)
            try:
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    tcp = await trio.open_tcp_stream(host, port)
            except (OSError, trio.TooSlowError) as e:
                raise RemotingConnectError(f"cannot connect to {addr}: {e}") from None
            stream: trio.abc.Stream = tcp
            if self.tls is not None:
                try:
                    stream = await tls_connect(tcp, self.tls, host)
                except (OSError, ssl.SSLError, trio.BrokenResourceError, trio.TooSlowError) as e:
                    with trio.CancelScope(shield=True):
                        await tcp.aclose()
                    why = e.__cause__ or e
                    raise RemotingConnectError(f"TLS to {addr} failed: {why}") from None
            conn = Connection(stream, self._handler, addr, self.signer)
            if self._nursery is None:
                raise RuntimeError("RemotingClient used outside `async with`")
            self._nursery.start_soon(conn.run)
            self._conns[addr] = conn
            return conn

    async def invoke(
        self,
        addr: str,
        cmd: RemotingCommand,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        close_on_timeout: bool = True,
    ) -> RemotingCommand:
        """`cmd`'s answer from `addr`. `close_on_timeout=False`: a timeout leaves the
        connection open even with the client's `close_on_timeout` (a late answer says
        something, a closed connection says something else to the peer)."""
        conn = await self.connection(addr)
        try:
            return await conn.request(cmd, timeout_s)
        except RemotingTimeoutError:
            if close_on_timeout:
                self.timed_out(addr, conn, cmd.code, timeout_s)
            raise

    def timed_out(self, addr: str, conn: Connection, code: int, timeout_s: float) -> None:
        """A request on `conn` to `addr` timed out after `timeout_s`: with `close_on_timeout`,
        the connection is closed (if it is still the cached one), unless the request had less
        than MIN_CLOSE_TIMEOUT_S to wait (RocketMQ's rule: a request left only the remains of
        a retry budget says nothing about the connection). For callers that use a connection
        directly."""
        if timeout_s <= MIN_CLOSE_TIMEOUT_S:
            return
        if self.close_on_timeout and self._conns.get(addr) is conn:
            log.info("closing the connection to %s: a request (code %d) timed out", addr, code)
            self.close_connection(addr)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        cmd.flag |= 2
        await conn.send(cmd)

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None and self._nursery is not None:
            self._nursery.start_soon(conn.aclose)
