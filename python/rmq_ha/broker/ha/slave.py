"""The slave side of broker replication: connect to the master's HA port and copy its log.

READY -> HANDSHAKE -> TRANSFER (reference 2.2, 2.4, 2.6). In HANDSHAKE the slave sends its id
and flags, receives the master's epoch entries and cuts its own log back to the last point both
logs agree on (``find_consistent_point``). When there is no such point the logs share no
history: the slave refuses to sync, says so in its status and log, and retries later — it
never wipes data on its own; an operator decides. In TRANSFER it appends each batch at exactly
its offset, records a new epoch when a header carries one, moves its confirm offset to
min(master's confirm offset, its own max offset) and acks its max offset; with nothing received
for ``haHousekeepingInterval`` it reconnects.

TRANSFER runs in a native thread (`HaSlaveLoop`, issue 16) with the same rules; this module
keeps the handshake and the Python loop for TLS connections and ``RMQ_HA_NATIVE_HA=0``.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass

import trio

from rmq_ha._native import (
    EpochFile,
    HaSlaveLoop,
    HaSlaveSideDecoder,
    Store,
    encode_slave_ack,
    encode_slave_handshake,
)
from rmq_ha.broker.core import events as ev
from rmq_ha.broker.ha.core import consistent_point
from rmq_ha.security.ha_auth import HaAuthError, authenticate_master
from rmq_ha.security.signing import Credentials
from rmq_ha.security.tls import connect as tls_connect
from rmq_ha.store import AsyncStore

log = logging.getLogger(__name__)

RECV_BYTES = 256 * 1024
RETRY_S = 1.0


class NoConsistentPointError(RuntimeError):
    """The slave's log and the master's share no epoch: syncing would need a wipe."""


@dataclass
class SlaveStatus:
    state: str = "READY"
    master: str | None = None
    refused: str | None = None  # why the slave will not sync, when it will not
    truncated_to: int | None = None  # the last handshake cut the log back to here


class HaSlave:
    def __init__(
        self,
        store: AsyncStore,
        epochs: EpochFile,
        broker_id: Callable[[], int],
        *,
        async_learner: bool,
        sync_from_last_file: bool,
        heartbeat_interval_ms: int,
        housekeeping_ms: int,
        controller_mode: bool,
    ) -> None:
        self.store = store
        self.epochs = epochs
        self.broker_id = broker_id
        self.async_learner = async_learner
        self.sync_from_last_file = sync_from_last_file
        #: Cluster credentials proven to the master before the handshake (None: RocketMQ's
        #: unauthenticated HA wire).
        self.credentials: Credentials | None = None
        #: TLS to the master's HA port (tlsEnable + tls.client.*).
        self.tls: ssl.SSLContext | None = None
        self.heartbeat_s = heartbeat_interval_ms / 1000
        self.housekeeping_s = housekeeping_ms / 1000
        self.controller_mode = controller_mode
        self.status = SlaveStatus()
        self._master: str | None = None
        self._changed = trio.Event()
        self._session_scope: trio.CancelScope | None = None
        #: Called when replicated messages became visible here (parked pulls re-check).
        self.on_visible: Callable[[], None] | None = None
        #: The role core's input: LogGrew after appends, SlaveFollowing on reaching TRANSFER.
        self.on_event: Callable[[ev.Event], None] = lambda _e: None

    def set_master(self, addr: str | None) -> None:
        """Points the slave at a master's HA address (None: stop syncing)."""
        if addr == self._master:
            return
        self._master = addr
        self.status.master = addr
        if self._session_scope is not None:
            self._session_scope.cancel()
        self._changed.set()
        self._changed = trio.Event()

    async def run(self) -> None:
        while True:
            addr = self._master
            if addr is None:
                self.status.state = "READY"
                await self._changed.wait()
                continue
            with trio.CancelScope() as scope:
                self._session_scope = scope
                try:
                    try:
                        await self._session(addr)
                    except BaseExceptionGroup as g:
                        raise first_error(g) from g
                except NoConsistentPointError as e:
                    self.status.state = "SUSPEND"
                    self.status.refused = str(e)
                    log.error("HA: refusing to sync from %s: %s", addr, e)
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as e:
                    log.info("HA: connection to master %s lost: %s", addr, e)
                except trio.TooSlowError:
                    log.info("HA: master %s silent; reconnecting", addr)
                except Exception as e:  # a protocol error: reconnect; the log says why
                    log.warning("HA: session with %s failed: %s", addr, e)
            self._session_scope = None
            # A refusal stays visible (SUSPEND) until a handshake agrees again.
            self.status.state = "SUSPEND" if self.status.refused else "READY"
            if self._master != addr:
                continue  # pointed at another master: connect to it now, not after RETRY_S
            with trio.move_on_after(RETRY_S):
                await self._changed.wait()

    async def _session(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        with trio.fail_after(3):
            tcp = await trio.open_tcp_stream(host, int(port))
        stream: trio.abc.Stream = tcp
        if self.tls is not None:
            try:
                stream = await tls_connect(tcp, self.tls, host)
            except BaseException:
                await tcp.aclose()
                raise
        async with stream:
            if self.credentials is not None:
                self.status.state = "AUTH"
                if await authenticate_master(stream, self.credentials):
                    raise HaAuthError("the master sent data before the handshake")
            self.status.state = "HANDSHAKE"
            dec = HaSlaveSideDecoder()
            await stream.send_all(
                encode_slave_handshake(
                    self.sync_from_last_file, self.async_learner, self.broker_id()
                )
            )
            with trio.fail_after(5):
                first, rest = await _first_record(stream, dec)
            if first[0] != "handshake":
                raise ValueError(f"master sent {first[0]} before its handshake")
            _, master_max, master_epoch, entries = first
            self._truncate(int(master_max), list(entries))  # type: ignore[call-overload]
            self.status.refused = None
            native = self.store.native
            reported = native.max_offset
            await stream.send_all(encode_slave_ack(reported))
            self.status.state = "TRANSFER"
            self.on_event(ev.SlaveFollowing(_int_or(master_max, -1), _int_or(master_epoch, -1)))
            self._apply_all(rest)
            if self.tls is None and isinstance(native, Store) and native_slave_loop_enabled():
                await self._transfer_native(tcp, dec, reported)
                return
            pending: list[tuple[object, ...]] = []
            last_ack = last_recv = trio.current_time()
            while True:
                self._apply_all(pending)
                if (
                    native.max_offset != reported
                    or trio.current_time() - last_ack > self.heartbeat_s
                ):
                    reported = native.max_offset
                    await stream.send_all(encode_slave_ack(reported))
                    last_ack = trio.current_time()
                # Nothing for the housekeeping interval: the master is gone or stopped
                # (its heartbeats come every heartbeat interval); reconnect.
                silent_left = self.housekeeping_s - (trio.current_time() - last_recv)
                if silent_left <= 0:
                    raise trio.TooSlowError
                pending = []
                with trio.move_on_after(min(self.heartbeat_s, silent_left)):
                    data = await stream.receive_some(RECV_BYTES)
                    if not data:
                        raise trio.BrokenResourceError("master closed the HA connection")
                    last_recv = trio.current_time()
                    pending = dec.feed(data)

    async def _transfer_native(
        self, tcp: trio.SocketStream, dec: HaSlaveSideDecoder, reported: int
    ) -> None:
        """TRANSFER in a native thread (issue 16): it receives, appends, records epochs, moves
        the confirm offset and acks, with `_apply`'s rules; this task only hears of progress,
        one wake-up for any number of batches, and tells the role core and parked pulls."""
        native = self.store.native
        # What the role core was told, read before the thread starts: read after, it could
        # already include bytes the thread appended (buffered ones, under load), and the
        # core never heard of them (a torn replica stayed owing a catch-up it had paid).
        told = (native.max_offset, native.confirm_offset)
        loop = HaSlaveLoop(
            native,
            self.epochs,
            tcp.socket.fileno(),
            dec.take_buffered(),
            reported,
            self.controller_mode,
            max(1, int(self.heartbeat_s * 1000)),
            max(1, int(self.housekeeping_s * 1000)),
        )
        try:
            while True:
                await trio.lowlevel.wait_readable(loop.wake_fd)
                max_off, confirm, _grew, visible, _n, _acked, end, why = loop.take()
                if (max_off, confirm) != told:
                    told = (max_off, confirm)
                    self.on_event(ev.LogGrew(max_off, confirm))
                if visible and self.on_visible is not None:
                    self.on_visible()
                if end is not None:
                    raise loop_error(end, why or end)
        finally:
            loop.stop()
            # The thread must be gone before anyone else touches this store as a slave or a
            # master (a new session's truncation, a promotion): wait, even when cancelled.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(loop.join)

    def _truncate(self, master_max: int, master_entries: list[tuple[int, int]]) -> None:
        native = self.store.native
        local = [(e, s) for e, s, _ in self.epochs.entries()]
        local_max = native.max_offset
        if not local:
            # A new replica: nothing to compare, nothing to cut (reference 2.6 step 1).
            return
        point = consistent_point(local, local_max, master_entries, master_max)
        if point is None:
            raise NoConsistentPointError(
                f"no epoch of this replica ({local}) matches the master's ({master_entries}); "
                "an operator must decide (rmq-ha admin reset-replica --confirm, with this "
                "broker stopped, backs its log up and lets it resync)"
            )
        if point < local_max:
            log.warning("HA: truncating the log from %d back to %d (diverged)", local_max, point)
            native.truncate_to(point)
            self.status.truncated_to = point
            # The role core must know the log is shorter now: its max offset goes into the
            # controller heartbeats (elections) and is where it would start an epoch if
            # elected before more bytes arrive (found by the group simulator, issue 14).
            self.on_event(ev.LogGrew(native.max_offset, native.confirm_offset))
        self.epochs.truncate_suffix_by_offset(point)

    def _apply_all(self, records: list[tuple[object, ...]]) -> None:
        """TRANSFER records in order, then one LogGrew for the role core."""
        for rec in records:
            if rec[0] != "transfer":
                raise ValueError(f"unexpected {rec[0]} record while transferring")
            self._apply(rec)
        if records:
            native = self.store.native
            self.on_event(ev.LogGrew(native.max_offset, native.confirm_offset))

    def _apply(self, rec: tuple[object, ...]) -> None:
        _, offset, epoch, epoch_start, confirm, body = rec
        offset, epoch, epoch_start, confirm = (
            int(offset),  # type: ignore[call-overload]
            int(epoch),  # type: ignore[call-overload]
            int(epoch_start),  # type: ignore[call-overload]
            int(confirm),  # type: ignore[call-overload]
        )
        native = self.store.native
        last = self.epochs.last_epoch()
        if last is None or epoch > last:
            self.epochs.append(epoch, epoch_start)
        elif epoch < last:
            raise ValueError(f"master sent epoch {epoch} below our last epoch {last}")
        assert isinstance(body, bytes)
        if body:
            if offset > native.max_offset == native.min_offset:
                # An empty replica and a master whose log starts later (syncFromLastFile, or
                # retention deleted its first segments): this log starts there too.
                log.info("HA: empty log starts at the master's offset %d", offset)
                native.start_at(offset)
            if offset != native.max_offset:
                raise ValueError(f"master sent offset {offset}, our max is {native.max_offset}")
            native.append_raw(offset, body)
        visible = bool(body) and not self.controller_mode
        if self.controller_mode:
            c = min(confirm, native.max_offset)
            if c > native.confirm_offset:
                native.set_confirm_offset(c)
                visible = True
        if visible and self.on_visible is not None:
            self.on_visible()


#: Set to "0" in the broker's environment: the TRANSFER phase runs in Python (per buffer),
#: as before issue 16 (the master's streaming too, master.py). TLS connections always do.
NATIVE_SLAVE_ENV = "RMQ_HA_NATIVE_HA"


def native_slave_loop_enabled() -> bool:
    return os.environ.get(NATIVE_SLAVE_ENV, "1") != "0"


def loop_error(kind: str, why: str) -> BaseException:
    """The exception `run` expects for each way the native loop ends."""
    if kind == "silent":
        return trio.TooSlowError(why)
    if kind in ("closed", "stopped"):
        return trio.BrokenResourceError(why)
    if kind == "io":
        return OSError(why)
    return ValueError(why)


async def _first_record(
    stream: trio.abc.Stream, dec: HaSlaveSideDecoder
) -> tuple[tuple[object, ...], list[tuple[object, ...]]]:
    while True:
        data = await stream.receive_some(RECV_BYTES)
        if not data:
            raise trio.BrokenResourceError("master closed before its handshake")
        recs = dec.feed(data)
        if recs:
            return recs[0], recs[1:]


def first_error(e: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups, for logging and matching."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def _int_or(value: object, default: int) -> int:
    return value if isinstance(value, int) else default
