"""One remoting connection, used the same way by servers and clients.

* Reading: one task receives into a buffer and decodes every complete frame in it with one
  native call (`_native.decode_frames`). A malformed frame closes this connection only.
* Responses are matched to outstanding requests by opaque. Requests (either direction: a broker
  also calls clients, e.g. CHECK_TRANSACTION_STATE) go to the handler, each in its own task so a
  parked long-poll does not hold up the connection; a limiter bounds them.
* Writing: frames go through a bounded channel (backpressure on the sender); one task drains
  whatever is queued and encodes it into one buffer for one `send_all` (coalesced writes).
* A `FrameFilter` (the broker's native send path, broker/handlers/send.NativeSends) may take
  the place of `decode_frames`: it answers what it can natively (already encoded responses,
  queued for the writer as they are) and returns the other frames for the handler.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from rmq_ha._native import decode_frames, encode_frames
from rmq_ha.errors import (
    RemotingClosedError,
    RemotingDecodeError,
    RemotingTimeoutError,
)
from rmq_ha.net.logthrottle import THROTTLE
from rmq_ha.protocol.command import FLAG_RESPONSE, RemotingCommand, WireTuple

log = logging.getLogger(__name__)

#: A handler answers a request (or returns None for oneway / no answer).
Handler = Callable[["Connection", RemotingCommand], Awaitable[RemotingCommand | None]]
#: Adds credentials to an outgoing request (rmq_ha.security.signing.request_signer).
Signer = Callable[[RemotingCommand], None]

SYSTEM_ERROR = 1
SYSTEM_BUSY = 2

#: Bounds. Frames waiting to be written; requests handled at once per connection; bytes per
#: coalesced write; bytes read per receive.
WRITE_QUEUE_FRAMES = 4096
MAX_INFLIGHT_REQUESTS = 1024
MAX_WRITE_BATCH_BYTES = 4 << 20
RECEIVE_BYTES = 256 << 10
#: Stands in for `decode_frames` on a received buffer: (frames for the handler, bytes used,
#: encoded responses to write as they are, or None). Raises RemotingDecodeError as it does.
FrameFilter = Callable[["Connection", bytes | bytearray], tuple[list[WireTuple], int, bytes | None]]
#: What the writer sends: a frame to encode, or bytes already encoded.
Outgoing = WireTuple | bytes
#: After the peer closes, how long requests it already sent may still run (a parked long-poll
#: is cut short then; a oneway offset commit finishes in microseconds).
CLOSE_GRACE_S = 2.0
#: RocketMQ's serverChannelMaxIdleTimeSeconds: a server closes a connection on which nothing
#: was read or written for this long. Real clients heartbeat every 30 s and never reach it.
SERVER_IDLE_S = 120


class Connection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        handler: Handler | None,
        peer: str,
        signer: Signer | None = None,
        fast: FrameFilter | None = None,
        *,
        idle_s: float | None = None,
    ) -> None:
        self.stream = stream
        #: Close the connection once nothing was read or written for this long and no request
        #: from the peer is being handled (None: never). A request in flight (a held pull,
        #: whose suspend time is the client's) keeps the connection however long it takes;
        #: a peer stuck on half a frame does not.
        self.idle_s = idle_s
        self._last_io = 0.0
        #: Why the connection was closed from this side ("idle", ...), None otherwise.
        self.closed_because: str | None = None
        self._fast = fast
        self.peer = peer
        self._handler = handler
        #: Signs every request this side sends (never responses): a client's or a role's
        #: credentials; the server side of a connection signs the requests it sends back too.
        self.signer = signer
        self._send, self._outbox = trio.open_memory_channel[Outgoing](WRITE_QUEUE_FRAMES)
        self._pending: dict[int, trio.MemorySendChannel[RemotingCommand]] = {}
        self._limiter = trio.CapacityLimiter(MAX_INFLIGHT_REQUESTS)
        self._closed = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._inflight = 0
        self._idle = trio.Event()
        #: Free-form per-connection state for the roles (e.g. the client id of a consumer).
        self.attrs: dict[str, Any] = {}

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def run(self) -> None:
        """Serves the connection until either side closes it or a frame is malformed.

        When the peer closes, requests it sent just before are still carried out: a client's
        last act is often a oneway offset commit followed by close. Handlers get
        `CLOSE_GRACE_S` to finish; only then is the rest cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                self._last_io = trio.current_time()
                with trio.CancelScope() as reading:
                    if self.idle_s:
                        nursery.start_soon(self._idle_watch, self.idle_s, reading)
                    await self._reader()
                with trio.move_on_after(CLOSE_GRACE_S):
                    while self._inflight:
                        await self._idle.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._close_now()

    def _close_now(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._send.close()
        for ch in self._pending.values():
            ch.close()
        self._pending.clear()

    async def aclose(self) -> None:
        self._close_now()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        with trio.CancelScope(shield=True):
            await self.stream.aclose()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def _idle_watch(self, idle_s: float, reading: trio.CancelScope) -> None:
        """Stops the reader (and so the connection, after CLOSE_GRACE_S) once the connection
        has been idle for `idle_s`: nothing read, nothing written, no request in flight."""
        while True:
            await trio.sleep_until(self._last_io + idle_s)
            if self._inflight:
                await self._idle.wait()  # the answer's write counts as traffic
                self._last_io = max(self._last_io, trio.current_time())
                continue
            if trio.current_time() >= self._last_io + idle_s:
                break
        self.closed_because = "idle"
        THROTTLE.log(
            log,
            logging.INFO,
            "idle-close",
            "closing connection from %s: nothing read or written for %g s",
            self.peer,
            idle_s,
        )
        reading.cancel()

    async def _reader(self) -> None:
        buf = bytearray()
        while True:
            try:
                data = await self.stream.receive_some(RECEIVE_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                return
            self._last_io = trio.current_time()
            # A receive that completes no partial frame is decoded as it came (no copy).
            src: bytes | bytearray = data
            if buf:
                buf += data
                src = buf
            out: bytes | None = None
            try:
                if self._fast is not None:
                    frames, used, out = self._fast(self, src)
                else:
                    frames, used = decode_frames(src)
            except RemotingDecodeError as e:
                THROTTLE.log(
                    log,
                    logging.WARNING,
                    "malformed-frame",
                    "closing connection from %s: malformed frame: %s",
                    self.peer,
                    e,
                )
                return
            if src is buf:
                del buf[:used]
            elif used < len(data):
                buf += memoryview(data)[used:]
            if out is not None:
                try:
                    self._send.send_nowait(out)
                except trio.WouldBlock:
                    try:
                        await self._send.send(out)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        return
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
            for t in frames:
                self._dispatch(RemotingCommand.from_wire(t))

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.flag & FLAG_RESPONSE:
            ch = self._pending.pop(cmd.opaque, None)
            if ch is None:
                log.debug(
                    "response with no pending request (opaque %d) from %s", cmd.opaque, self.peer
                )
                return
            try:
                ch.send_nowait(cmd)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            return
        if self._handler is None or self._nursery is None:
            return
        # Counted when scheduled, not when the task starts: a peer that closes right after
        # sending must find its request in flight.
        self._inflight += 1
        self._nursery.start_soon(self._handle, cmd)

    async def _handle(self, cmd: RemotingCommand) -> None:
        assert self._handler is not None
        try:
            async with self._limiter:
                resp = await self._handler(self, cmd)
        except trio.Cancelled:
            raise
        except Exception as e:  # the server must answer, never crash; the error is logged
            log.exception("handler failed for code %d from %s", cmd.code, self.peer)
            resp = cmd.response(SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                idle, self._idle = self._idle, trio.Event()
                idle.set()
        if resp is None or cmd.is_oneway:
            return
        try:
            await self._send.send(resp.to_wire())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _writer(self) -> None:
        async with self._outbox:
            async for first in self._outbox:
                batch = [first]
                size = _size(first)
                while size < MAX_WRITE_BATCH_BYTES:
                    try:
                        t = self._outbox.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    batch.append(t)
                    size += _size(t)
                try:
                    await self.stream.send_all(_encode(batch))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self._close_now()
                    return
                self._last_io = trio.current_time()

    async def send(self, cmd: RemotingCommand) -> None:
        """Queues a frame (request, response or oneway) without waiting for an answer.
        Requests are signed first when this connection has a signer."""
        if self.closed:
            raise RemotingClosedError(f"connection to {self.peer} is closed")
        if self.signer is not None and not cmd.flag & FLAG_RESPONSE:
            self.signer(cmd)
        try:
            await self._send.send(cmd.to_wire())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise RemotingClosedError(f"connection to {self.peer} is closed") from None

    def send_nowait(self, cmd: RemotingCommand) -> bool:
        """`send` from synchronous code: False when the frame could not be queued now (the
        write queue is full: call `send` from a task; or the connection is closed)."""
        if self.closed:
            return False
        if self.signer is not None and not cmd.flag & FLAG_RESPONSE:
            self.signer(cmd)
        try:
            self._send.send_nowait(cmd.to_wire())
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    async def request(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Sends a request and waits for its response. A timeout or a closed connection means
        the outcome is unknown (not definite)."""
        send_ch, recv_ch = trio.open_memory_channel[RemotingCommand](1)
        self._pending[cmd.opaque] = send_ch
        try:
            with trio.move_on_after(timeout_s if timeout_s > 0 else math.inf) as scope:
                await self.send(cmd)
                try:
                    return await recv_ch.receive()
                except trio.EndOfChannel:
                    raise RemotingClosedError(
                        f"connection to {self.peer} closed before the response to code "
                        f"{cmd.code} (opaque {cmd.opaque})"
                    ) from None
            assert scope.cancelled_caught
            raise RemotingTimeoutError(
                f"no response from {self.peer} to code {cmd.code} within {timeout_s:.3f} s"
            )
        finally:
            self._pending.pop(cmd.opaque, None)


def _size(item: Outgoing) -> int:
    return len(item) if isinstance(item, bytes) else len(item[7] or b"")


def _encode(batch: list[Outgoing]) -> bytes:
    """One buffer for one write: frames encoded together, pre-encoded bytes as they are, in
    queue order."""
    parts: list[bytes] = []
    run: list[WireTuple] = []
    for item in batch:
        if isinstance(item, bytes):
            if run:
                parts.append(encode_frames(run))
                run = []
            parts.append(item)
        else:
            run.append(item)
    if run:
        parts.append(encode_frames(run))
    return parts[0] if len(parts) == 1 else b"".join(parts)
