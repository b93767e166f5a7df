"""The master side of broker replication: an HA port that slaves connect to.

Per connection (reference 2.2-2.4): the slave sends its 16-byte handshake; the master answers
with its max offset, last epoch and every epoch entry; the slave truncates if it must and acks
its max offset; the master then streams raw commitlog bytes from there, in batches of at most
``haTransferBatchSize`` that never cross an epoch boundary, each with a 36-byte header carrying
the epoch of its bytes and the confirm offset. With nothing to send it sends a header-only
heartbeat every ``haSendHeartbeatInterval``. Connections, transfers and acks go to the role core
as events (`on_event`); `HaCore` there moves the confirm offset and proposes SyncStateSet
changes, and its actions wake producers waiting for replication (`woke`).

The codec is Rust (`rmq_ha._native`, HA wire format). After the handshake the streaming and
the ack reading run in a native thread per slave (`HaMasterLoop`, issue 16), except on TLS
connections, with ``haFlowControlEnable`` or ``RMQ_HA_NATIVE_HA=0``, where `_write` and
`_read_acks` here do it; producers' waits are released in batches (`on_acked`, `woke`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import ssl
from collections.abc import Callable

import trio

from rmq_ha._native import (
    EpochFile,
    HaMasterLoop,
    HaMasterSideDecoder,
    Store,
    encode_master_handshake,
    encode_transfer_header,
)
from rmq_ha.broker.core import events as ev
from rmq_ha.broker.ha.core import NO_LIMIT, FlowMonitor, HaCore
from rmq_ha.broker.ha.slave import first_error as _leaf
from rmq_ha.broker.ha.slave import loop_error as _loop_error
from rmq_ha.errors import QuarantinedRecordError
from rmq_ha.security.acl import AclConfig
from rmq_ha.security.ha_auth import HaAuthError, authenticate_slave
from rmq_ha.security.tls import TlsRefused
from rmq_ha.security.tls import accept as tls_accept
from rmq_ha.store import AsyncStore

log = logging.getLogger(__name__)

RECV_BYTES = 64 * 1024
#: A slave that takes no bytes for this long (a write cannot finish) is dropped.
WRITE_TIMEOUT_MS = 30_000
#: Set to "0" in the broker's environment: streaming to slaves runs in Python (per batch), as
#: before issue 16. TLS connections and haFlowControlEnable always do.
NATIVE_MASTER_ENV = "RMQ_HA_NATIVE_HA"


def native_master_loop_enabled() -> bool:
    return os.environ.get(NATIVE_MASTER_ENV, "1") != "0"


class _Waiter:
    """A producer waiting for its write to be acknowledged."""

    __slots__ = ("cancelled", "event")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.cancelled = False


class _Callback:
    """A producer's write waiting for its acks without a task (issue 16: released in batches
    by `woke`, or failed by `expire_loop` at its deadline)."""

    __slots__ = ("done", "fired")

    def __init__(self, done: Callable[[bool], None]) -> None:
        self.done = done
        self.fired = False

    def fire(self, ok: bool) -> None:
        if not self.fired:
            self.fired = True
            try:
                self.done(ok)
            except Exception:  # one producer's answer must not stop the others'
                log.exception("answering a replicated write failed")


class HaMaster:
    """Streams the commitlog to connected slaves and reports what happens to the role core.

    `on_event` receives SlaveConnected / SlaveDisconnected / Transferring / SlaveIdle /
    SlaveAcked; `core()` is the role core's current `HaCore`, which producers' waits read.
    """

    def __init__(
        self,
        store: AsyncStore,
        epochs: EpochFile,
        core: Callable[[], HaCore],
        on_event: Callable[[ev.Event], None],
        *,
        batch_bytes: int,
        heartbeat_interval_ms: int,
        controller_mode: bool,
        flow_rate: int | None = None,
    ) -> None:
        self.store = store
        self.epochs = epochs
        self.core = core
        self.on_event = on_event
        self.batch_bytes = batch_bytes
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.controller_mode = controller_mode
        #: haFlowControlEnable: bytes per second per slave (None: no limit).
        self.flow_rate = flow_rate
        self._data = trio.Event()
        #: Producers waiting for acks: (end offset, tie-break, event), lowest offset first;
        #: `woke` sets the events of those at or below the HaCore's ack watermark; entries
        #: of producers that timed out are dropped in bulk (`_drop`).
        self._waiters: list[tuple[int, int, _Waiter]] = []
        self._cancelled = 0
        self._seq = itertools.count()
        self._waiting_core: HaCore | None = None
        self._waiting_epoch = 0
        self._accepting: Callable[[], bool] = lambda: True
        #: The cluster accounts a slave must prove it belongs to (aclEnable), else None.
        self.auth: Callable[[], AclConfig] | None = None
        #: TLS on the HA port (tls.server.mode), as on the remoting port.
        self.tls: ssl.SSLContext | None = None
        self.tls_mode = "disabled"
        self._scopes: dict[int, trio.CancelScope] = {}
        self.connections: dict[int, trio.abc.Stream] = {}
        #: broker id -> the connected slave's address (haStatus shows it)
        self.peers: dict[int, str] = {}
        #: Per connected slave, the lowest commitlog offset it still needs (where the master
        #: started it, then its last ack): retention keeps it (issue 15).
        self.needs: dict[int, int] = {}
        #: Called with the offset of a quarantined range a slave needs (self-repair, issue 15).
        self.on_damaged: Callable[[int], None] = lambda _off: None
        self._repaired = trio.Event()
        self._held: set[tuple[int, int]] = set()
        #: Native streaming loops by slave id (poked when the log grows).
        self._loops: dict[int, HaMasterLoop] = {}
        #: Writes waiting without a task (`on_acked`): by offset, and by deadline.
        self._callbacks: list[tuple[int, int, _Callback]] = []
        #: The HaCore and epoch every write in `_callbacks` was registered under.
        self._cb_core: HaCore | None = None
        self._cb_epoch = 0
        self._cb_fired = 0  # fired by expiry, still in `_callbacks`
        self._deadlines: list[tuple[float, int, _Callback]] = []
        self._armed = trio.Event()

    # ---- called by the broker -------------------------------------------------------------

    def notify_append(self) -> None:
        """New bytes in the commitlog: wake the senders."""
        self._data.set()
        self._data = trio.Event()
        for loop in self._loops.values():
            loop.poke()

    async def wait_acked(self, offset: int, timeout_s: float) -> bool:
        """True once a write ending at `offset` is acknowledged as the mode requires; False
        after `timeout_s`, or as soon as the role core replaced its HaCore or leads another
        epoch: a master demoted, cut back by its handshake and elected again must not
        acknowledge a write whose bytes may have been replaced (found by the group
        simulator, issue 14)."""
        started = self.core()
        epoch = started.epoch
        with trio.move_on_after(timeout_s):
            while True:
                now = self.core()
                if now is not started or now.epoch != epoch:
                    return False
                if now.write_acked(offset):
                    return True
                w = _Waiter()
                self._waiting_core, self._waiting_epoch = now, now.epoch
                heapq.heappush(self._waiters, (offset, next(self._seq), w))
                try:
                    await w.event.wait()
                finally:
                    if not w.event.is_set():
                        self._drop(w)
        return False

    def on_acked(self, offset: int, timeout_s: float, done: Callable[[bool], None]) -> None:
        """`wait_acked` without a task: `done(True)` once a write ending at `offset` is
        acknowledged as the mode requires, `done(False)` after `timeout_s` or when the role
        core replaced its HaCore or leads another epoch. Called from `woke` (many at once)
        or from `expire_loop`, which must be running (`HaService.run`); at once when the
        write is acknowledged already."""
        core = self.core()
        cb = _Callback(done)
        if core.write_acked(offset):
            cb.fire(True)
            return
        if core is not self._cb_core or core.epoch != self._cb_epoch:
            # every write waiting now was registered under another HaCore or epoch
            self._fail_all_callbacks()
            self._cb_core, self._cb_epoch = core, core.epoch
        seq = next(self._seq)
        heapq.heappush(self._callbacks, (offset, seq, cb))
        deadline = trio.current_time() + timeout_s
        if not self._deadlines or deadline < self._deadlines[0][0]:
            self._armed.set()  # the expiry task sleeps until a later deadline, or for ever
        heapq.heappush(self._deadlines, (deadline, seq, cb))

    async def expire_loop(self) -> None:
        """Fails the `on_acked` writes whose deadline passed."""
        while True:
            self._armed = trio.Event()
            if self._deadlines:
                with trio.move_on_at(self._deadlines[0][0]):
                    await self._armed.wait()
            else:
                await self._armed.wait()
            now = trio.current_time()
            expired = 0
            while self._deadlines and self._deadlines[0][0] <= now:
                cb = heapq.heappop(self._deadlines)[2]
                expired += not cb.fired
                cb.fire(False)
            if not self._deadlines:
                self._callbacks = []  # every one has fired
                self._cb_fired = 0
                continue
            # Fired entries leave the offset heap when the watermark passes them; while it
            # does not (a stalled replica), drop them in bulk so the heap stays bounded.
            self._cb_fired += expired
            if self._cb_fired > max(64, len(self._callbacks) // 2):
                self._callbacks = [e for e in self._callbacks if not e[2].fired]
                heapq.heapify(self._callbacks)
                self._cb_fired = 0

    def _release(self) -> None:
        """The `on_acked` writes the current HaCore acknowledges now fire True; all of them
        fire False when it is not the HaCore (or epoch) they were registered under (see
        `wait_acked`)."""
        core = self.core()
        if core is not self._cb_core or core.epoch != self._cb_epoch:
            self._fail_all_callbacks()
            return
        mark = core.ack_watermark()
        heap = self._callbacks
        while heap and heap[0][0] <= mark:
            heapq.heappop(heap)[2].fire(True)

    def _fail_all_callbacks(self) -> None:
        old, self._callbacks = self._callbacks, []
        for _, _, cb in old:
            cb.fire(False)

    def _drop(self, w: _Waiter) -> None:
        """A producer stopped waiting (timeout): its entry goes when the heap is mostly such
        entries, so a long stall of replication cannot grow it without bound."""
        w.cancelled = True
        self._cancelled += 1
        if self._cancelled > max(64, len(self._waiters) // 2):
            self._waiters = [x for x in self._waiters if not x[2].cancelled]
            heapq.heapify(self._waiters)
            self._cancelled = 0

    # ---- serving ------------------------------------------------------------------------

    async def serve(
        self, listeners: list[trio.SocketListener], accepting: Callable[[], bool]
    ) -> None:
        """Serves slaves while `accepting()` (this broker is master); other connections are
        closed at once, so a slave that still believes in us learns otherwise."""
        self._accepting = accepting
        async with trio.open_nursery() as nursery:
            await trio.serve_listeners(self._connection, listeners, handler_nursery=nursery)

    def drop_connections(self) -> None:
        """Closes every slave connection (this broker stopped being master)."""
        for scope in list(self._scopes.values()):
            scope.cancel()

    def notify_repaired(self) -> None:
        """A quarantined range was repaired: senders held at one look again."""
        self._repaired.set()
        self._repaired = trio.Event()

    def woke(self) -> None:
        """An ack arrived or the set changed: the producers whose writes are now acknowledged
        re-check (all of them when the role core replaced its HaCore or leads another epoch,
        so that they give up). One watermark per call, not one check per waiting producer."""
        if self._callbacks:
            self._release()
        if not self._waiters:
            return
        core = self.core()
        if core is not self._waiting_core or core.epoch != self._waiting_epoch:
            mark = NO_LIMIT
        else:
            mark = core.ack_watermark()
        while self._waiters and self._waiters[0][0] <= mark:
            w = heapq.heappop(self._waiters)[2]
            if w.cancelled:
                self._cancelled -= 1
            else:
                w.event.set()

    async def _connection(self, tcp: trio.SocketStream) -> None:
        peer = _peer(tcp)
        broker_id: int | None = None
        if not self._accepting():
            await tcp.aclose()
            return
        try:
            # TLS first (tls.server.mode), then the cluster credentials, then RocketMQ's HA.
            stream = await tls_accept(tcp, self.tls, self.tls_mode, peer)
        except TlsRefused as e:
            log.warning("HA: closing %s", e)
            await tcp.aclose()
            return
        scope = trio.CancelScope()
        key = id(scope)
        self._scopes[key] = scope
        try:
            with scope:
                async with stream:
                    dec = HaMasterSideDecoder()
                    early: list[tuple[object, ...]] = []
                    if self.auth is not None:
                        try:
                            _who, extra = await authenticate_slave(stream, self.auth)
                        except (HaAuthError, trio.TooSlowError) as e:
                            # Not the cluster: refused before the handshake, nothing changed.
                            log.warning("HA: refused %s: %s", peer, e or "authentication timeout")
                            return
                        early = dec.feed(extra) if extra else []
                    if early:
                        first, rest = early[0], early[1:]
                    else:
                        first, rest = await _read_first(stream, dec)
                    if first[0] != "handshake":
                        log.warning("HA %s: first record is %s, not a handshake", peer, first[0])
                        return
                    sync_last, learner = bool(first[1]), bool(first[2])
                    broker_id = bid = int(first[3])  # type: ignore[call-overload]
                    log.info("HA: slave %s (id %s, learner=%s) connected", peer, broker_id, learner)
                    await stream.send_all(self._handshake())
                    first_ack, start = await self._first_ack(stream, dec, rest, sync_last)
                    old = self.connections.pop(bid, None)
                    if old is not None:
                        # A native loop holds its own descriptor of the old socket: stop it
                        # too, or it would go on streaming there.
                        old_loop = self._loops.pop(bid, None)
                        if old_loop is not None:
                            old_loop.stop()
                        await old.aclose()
                    self.connections[bid] = stream
                    self.peers[bid] = peer
                    self.needs[bid] = start
                    self.on_event(ev.SlaveConnected(bid, learner))
                    # The handshake's ack counts like any other: a slave that agreed on the
                    # epochs and already holds everything (an idle master, an empty group)
                    # joins the SyncStateSet now, not at its next heartbeat ack
                    # (haSendHeartbeatInterval, 5 s by default; with minInSyncReplicas=2 the
                    # group refused every write until then).
                    self.on_event(ev.SlaveAcked(bid, first_ack, self.store.native.max_offset))
                    if (
                        isinstance(tcp, trio.SocketStream)
                        and stream is tcp
                        and self.flow_rate is None
                        and isinstance(self.store.native, Store)
                        and native_master_loop_enabled()
                    ):
                        held = await self._stream_native(tcp, dec, bid, start)
                        if held is None:
                            return
                        # quarantined bytes at `held`: the repair path below takes over
                        start = held
                    async with trio.open_nursery() as n:
                        n.start_soon(self._read_acks, stream, dec, bid)
                        await self._write(stream, bid, start)
        except Exception as e:  # a lost slave or a protocol error closes this connection only
            why = _leaf(e)
            if isinstance(why, trio.BrokenResourceError | trio.ClosedResourceError | OSError):
                log.info("HA: slave %s (id %s) gone: %s", peer, broker_id, why)
            else:
                log.warning("HA: slave %s (id %s) dropped: %r", peer, broker_id, why)
        finally:
            self._scopes.pop(key, None)
            if broker_id is not None and self.connections.get(broker_id) is stream:
                del self.connections[broker_id]
                self.peers.pop(broker_id, None)
                self.needs.pop(broker_id, None)
                self.on_event(ev.SlaveDisconnected(broker_id))

    async def _stream_native(
        self, tcp: trio.SocketStream, dec: HaMasterSideDecoder, bid: int, start: int
    ) -> int | None:
        """Streaming and acks in a native thread (issue 16) with `_write`'s and `_read_acks`'
        rules; this task hears of progress in batches (one wake-up for any number of acks and
        batches) and feeds the role core. Returns None when the connection ended, or the
        offset of quarantined bytes the slave needs: `_write`'s repair path goes on from
        there (with `dec` holding what the slave sent meanwhile)."""
        native = self.store.native
        assert isinstance(native, Store)
        loop = HaMasterLoop(
            native,
            self.epochs,
            tcp.socket.fileno(),
            start,
            dec.take_buffered(),
            self.controller_mode,
            self.batch_bytes,
            max(1, self.heartbeat_interval_ms),
            WRITE_TIMEOUT_MS,
        )
        self._loops[bid] = loop
        try:
            while True:
                await trio.lowlevel.wait_readable(loop.wake_fd)
                ack, transferring, idle, pos, end, why, leftover = loop.take()
                # In the order they happened: an ack in a report was read before its transfer.
                if ack is not None:
                    self._on_ack(bid, ack)
                if transferring is not None:
                    self.on_event(ev.Transferring(bid, transferring))
                if idle:
                    self.on_event(ev.SlaveIdle(bid))
                if end == "held":
                    if leftover:
                        for rec in dec.feed(leftover):
                            if rec[0] == "ack":
                                self._on_ack(bid, int(rec[1]))  # type: ignore[call-overload]
                    return pos
                if end is not None:
                    raise _loop_error(end, why or end)
        finally:
            if self._loops.get(bid) is loop:
                del self._loops[bid]
            loop.stop()
            # No thread may write to this slave's socket once this task is done with it.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(loop.join)

    def _handshake(self) -> bytes:
        entries = [(e, s) for e, s, _ in self.epochs.entries()]
        last = self.epochs.last_epoch() or 0
        return encode_master_handshake(self.store.native.max_offset, last, entries)

    async def _first_ack(
        self,
        stream: trio.abc.Stream,
        dec: HaMasterSideDecoder,
        pending: list[tuple[object, ...]],
        sync_last: bool,
    ) -> tuple[int, int]:
        """The slave's first ack after the handshake, and where streaming starts."""
        with trio.fail_after(30):
            while True:
                for rec in pending:
                    if rec[0] == "ack":
                        ack = int(rec[1])  # type: ignore[call-overload]
                        return ack, self._start_offset(ack, sync_last)
                data = await stream.receive_some(RECV_BYTES)
                if not data:
                    raise trio.BrokenResourceError("slave closed before its first ack")
                pending = dec.feed(data)

    def _start_offset(self, ack: int, sync_last: bool) -> int:
        native = self.store.native
        if 0 < ack < native.min_offset:
            # Retention deleted what this slave still needs: it can never catch up from here
            # (RocketMQ would send it heartbeats for ever). Refuse, loudly (issue 15).
            msg = (
                f"slave needs commitlog offset {ack}, below this master's min offset "
                f"{native.min_offset} (deleted by retention): it cannot catch up; reset its "
                "store (rmq-ha admin reset-replica) so it syncs from this master's log"
            )
            log.error("HA: %s", msg)
            raise ValueError(msg)
        if ack > 0:
            return ack
        if sync_last:
            files = native.segment_files()
            if files:
                return min(files[-1][0], native.max_offset)
        return native.min_offset

    async def _read_acks(
        self, stream: trio.abc.Stream, dec: HaMasterSideDecoder, broker_id: int
    ) -> None:
        while True:
            data = await stream.receive_some(RECV_BYTES)
            if not data:
                raise trio.BrokenResourceError("slave closed the HA connection")
            # Every ack this read brought is one event: a slave's acks only grow on one
            # connection, so the last one says all (issue 16: one wake-up for many acks).
            last = None
            for rec in dec.feed(data):
                if rec[0] == "handshake":
                    raise ValueError("a second handshake on a transferring connection")
                last = int(rec[1])  # type: ignore[call-overload]
            if last is not None:
                self._on_ack(broker_id, last)

    def _on_ack(self, broker_id: int, ack: int) -> None:
        if broker_id in self.needs:
            self.needs[broker_id] = ack
        self.on_event(ev.SlaveAcked(broker_id, ack, self.store.native.max_offset))

    async def _write(self, stream: trio.abc.Stream, broker_id: int, start: int) -> None:
        native = self.store.native
        pos = start
        hb_s = self.heartbeat_interval_ms / 1000
        last_send = trio.current_time()
        flow = None if self.flow_rate is None else FlowMonitor(self.flow_rate)
        while True:
            data_event = self._data
            end = native.max_offset
            batch = self.batch_bytes
            if pos < end and flow is not None:
                allowed = flow.allowance(trio.current_time())
                if allowed <= 0:
                    # Over this second's budget: wait for the next window, keeping the
                    # slave's connection alive with a heartbeat when one is due.
                    if trio.current_time() >= last_send + hb_s:
                        await stream.send_all(self._heartbeat(pos))
                        last_send = trio.current_time()
                    await trio.sleep_until(min(flow.next_window(), last_send + hb_s))
                    continue
                batch = min(batch, allowed)
            if pos < end:
                entry = self.epochs.find_by_offset(pos)
                if entry is None:
                    raise ValueError(f"no epoch covers offset {pos}")
                epoch, epoch_start, epoch_end = entry
                limit = min(end, epoch_end)
                try:
                    buf = native.read_range(pos, batch, limit)
                except QuarantinedRecordError as e:
                    await self._held_at_damage(stream, broker_id, pos, e)
                    last_send = trio.current_time()
                    continue
                n = len(buf)
                if n == 0:
                    raise ValueError(f"nothing readable at {pos} below {limit}")
                self.on_event(ev.Transferring(broker_id, end))
                header = encode_transfer_header(pos, epoch, epoch_start, self._confirm(), n)
                await stream.send_all(header)
                await stream.send_all(memoryview(buf))
                if flow is not None:
                    flow.used(n)
                pos += n
                last_send = trio.current_time()
                continue
            self.on_event(ev.SlaveIdle(broker_id))
            with trio.move_on_at(last_send + hb_s):
                await data_event.wait()
                continue
            await stream.send_all(self._heartbeat(pos))
            last_send = trio.current_time()

    async def _held_at_damage(
        self, stream: trio.abc.Stream, broker_id: int, pos: int, e: QuarantinedRecordError
    ) -> None:
        """The slave needs bytes this master has quarantined (issue 15). Never send them and
        never drop the slave for it: ask for a repair from an in-sync replica, keep the
        connection alive with heartbeats, and look again after a repair or a heartbeat
        interval. A range no replica has intact holds this slave here (store-health shows it)."""
        size = e.size if e.size is not None else 0
        first = (broker_id, pos) not in self._held
        self._held.add((broker_id, pos))
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "HA: slave %s needs [%d, %d), quarantined here (%s); holding its transfer until "
            "the record is repaired from a replica",
            broker_id,
            pos,
            pos + size,
            e,
        )
        self.on_damaged(pos)
        repaired = self._repaired
        with trio.move_on_after(self.heartbeat_interval_ms / 1000):
            await repaired.wait()
        await stream.send_all(self._heartbeat(pos))

    def _confirm(self) -> int:
        if self.controller_mode:
            return self.store.native.confirm_offset
        return self.store.native.max_offset

    def _heartbeat(self, pos: int) -> bytes:
        """A header-only record carrying the epoch in force at `pos` (the last one whose
        start is not above it), so a slave learns a new epoch even before its first byte."""
        epoch, start = 0, 0
        for e, s, _ in self.epochs.entries():
            if s <= pos:
                epoch, start = e, s
        return encode_transfer_header(pos, epoch, start, self._confirm(), 0)


async def _read_first(
    stream: trio.abc.Stream, dec: HaMasterSideDecoder
) -> tuple[tuple[object, ...], list[tuple[object, ...]]]:
    with trio.fail_after(30):
        while True:
            data = await stream.receive_some(RECV_BYTES)
            if not data:
                raise trio.BrokenResourceError("slave closed before its handshake")
            recs = dec.feed(data)
            if recs:
                return recs[0], recs[1:]


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"
