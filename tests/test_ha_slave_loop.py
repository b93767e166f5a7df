"""Replication loops (issue 16). The slave's TRANSFER phase, native (`HaSlaveLoop`, a thread
per connection) and Python (`RMQ_HA_NATIVE_HA=0`, and every TLS connection), follows the same
rules: a scripted master on loopback sends a handshake and TRANSFER records cut at awkward
places to the real `HaSlave` on a real store and epoch file. Then a group of real processes
replicates through the native loops of both sides."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from rmq_ha._native import (
    EpochFile,
    HaMasterSideDecoder,
    Message,
    Store,
    encode_master_handshake,
    encode_transfer_header,
)
from rmq_ha.broker.core import events as ev
from rmq_ha.broker.ha import slave as slave_mod
from rmq_ha.broker.ha.slave import HaSlave
from rmq_ha.store import AsyncStore

pytestmark = pytest.mark.timeout(60)

SEG = 1 << 20


def master_log(tmp: Path, n: int = 120) -> tuple[Store, bytes]:
    m = Store(tmp / "master", segment_size=SEG)
    for i in range(n):
        m.append_batch([Message("T", i % 4, b"v%05d-" % i + b"y" * (40 + i % 90))])
    return m, bytes(m.read_range(0, SEG))


def records(log: bytes) -> list[tuple[int, bytes]]:
    """(offset, bytes) of each stored record (4-byte big-endian total size first)."""
    out, pos = [], 0
    while pos < len(log):
        size = int.from_bytes(log[pos : pos + 4], "big")
        out.append((pos, log[pos : pos + size]))
        pos += size
    return out


def transfer(offset: int, epoch: int, start: int, confirm: int, body: bytes = b"") -> bytes:
    return encode_transfer_header(offset, epoch, start, confirm, len(body)) + body


@dataclass
class Master:
    """A scripted master: accepts slaves, runs `script(stream, acks)` on each connection."""

    script: Callable[[trio.SocketStream, trio.MemoryReceiveChannel[int]], object]
    connections: int = 0
    acks: list[int] = field(default_factory=list)
    port: int = 0

    async def serve(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._one, listeners)

    async def _one(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        send, recv = trio.open_memory_channel[int](1000)
        dec = HaMasterSideDecoder()

        async def reader() -> None:
            try:
                async for data in stream:
                    for rec in dec.feed(data):
                        if rec[0] == "ack":
                            self.acks.append(int(rec[1]))  # type: ignore[call-overload]
                            await send.send(int(rec[1]))  # type: ignore[call-overload]
            except trio.BrokenResourceError:
                pass  # the slave reset the connection: no more acks (see below)

        async with stream, trio.open_nursery() as n:
            n.start_soon(reader)
            try:
                await self.script(stream, recv)  # type: ignore[misc]
            except trio.BrokenResourceError:
                # The slave closed the connection (it was pointed elsewhere, or gave up on
                # this master): the script's turn is over, as a real master's would be. A
                # loaded run hit this between a promotion and the end of the test.
                pass
            n.cancel_scope.cancel()


def make_slave(tmp: Path, hk_ms: int = 3000) -> tuple[HaSlave, Store, EpochFile, list[ev.Event]]:
    native = Store(tmp / "slave", segment_size=SEG, confirm_follows_max=False)
    epochs = EpochFile(tmp / "slave-epochs")
    s = HaSlave(
        AsyncStore(native),
        epochs,
        lambda: 2,
        async_learner=False,
        sync_from_last_file=False,
        heartbeat_interval_ms=100,
        housekeeping_ms=hk_ms,
        controller_mode=True,
    )
    seen: list[ev.Event] = []
    s.on_event = seen.append
    return s, native, epochs, seen


async def against(master: Master, slave: HaSlave, until: Callable[[], Awaitable[object]]) -> None:
    """Runs `master` and `slave` (pointed at it) until `until()` returns (30 s at most)."""
    async with trio.open_nursery() as n:
        port = await n.start(master.serve)
        n.start_soon(slave.run)
        slave.set_master(f"127.0.0.1:{port}")
        with trio.fail_after(30):
            await until()
        n.cancel_scope.cancel()


async def until_confirm(native: Store, offset: int) -> None:
    while native.confirm_offset < offset:
        await trio.sleep(0.01)


@pytest.fixture(params=["native", "python"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test on each path; counts the native loops started."""
    if request.param == "python":
        monkeypatch.setenv(slave_mod.NATIVE_SLAVE_ENV, "0")
    else:
        monkeypatch.delenv(slave_mod.NATIVE_SLAVE_ENV, raising=False)
    return str(request.param)


class LoopCounter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = slave_mod.HaSlaveLoop

        def counted(*a: object) -> object:
            self.n += 1
            return real(*a)  # type: ignore[arg-type]

        monkeypatch.setattr(slave_mod, "HaSlaveLoop", counted)


async def test_a_stream_cut_anywhere_gives_the_masters_log_epochs_and_confirm(
    tmp_path: Path, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, log = master_log(tmp_path)
    recs = records(log)
    half = recs[len(recs) // 2][0]
    stream = bytearray(encode_master_handshake(len(log), 2, [(1, 0), (2, half)]))
    # batches of 1-3 records, never across the epoch boundary (as the master sends them)
    batches: list[list[tuple[int, bytes]]] = [[]]
    for i, (off, rec) in enumerate(recs):
        if batches[-1] and (off == half or len(batches[-1]) == 1 + i % 3):
            batches.append([])
        batches[-1].append((off, rec))
    for b in batches:
        off = b[0][0]
        epoch, start = (1, 0) if off < half else (2, half)
        stream += transfer(off, epoch, start, off, b"".join(r for _, r in b))
    stream += transfer(len(log), 2, half, len(log))  # a heartbeat carries the last confirm
    counter = LoopCounter(monkeypatch)
    done = trio.Event()

    async def script(s: trio.SocketStream, acks: trio.MemoryReceiveChannel[int]) -> None:
        for cut in range(0, len(stream), 777):  # pieces that split headers and records
            await s.send_all(bytes(stream[cut : cut + 777]))
        async for a in acks:
            if a == len(log):
                break
        await done.wait()

    master = Master(script)
    slave, native, epochs, seen = make_slave(tmp_path)
    await against(master, slave, lambda: until_confirm(native, len(log)))
    done.set()
    assert bytes(native.read_range(0, SEG)) == log
    assert [(e, s) for e, s, _ in epochs.entries()] == [(1, 0), (2, half)]
    assert native.confirm_offset == len(log)
    assert ev.LogGrew(len(log), len(log)) in seen
    assert counter.n == (1 if path == "native" else 0)


@pytest.mark.parametrize(
    "bad, reason",
    [
        (lambda end: transfer(end, 1, 0, end), "epoch 1 below our last epoch 2"),
        (lambda end: transfer(end + 8, 2, 0, end, b"x" * 8), "master sent offset"),
        (lambda end: encode_master_handshake(end, 2, [(2, 0)]), "handshake"),
    ],
)
async def test_a_record_the_slave_must_not_apply_ends_the_session_and_it_reconnects(
    tmp_path: Path,
    path: str,
    bad: Callable[[int], bytes],
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, log = master_log(tmp_path, 10)
    second = trio.Event()

    async def script(s: trio.SocketStream, acks: trio.MemoryReceiveChannel[int]) -> None:
        if master.connections > 1:
            second.set()
            await trio.sleep_forever()
        await s.send_all(encode_master_handshake(len(log), 2, [(2, 0)]))
        await s.send_all(transfer(0, 2, 0, len(log), log))
        async for a in acks:
            if a == len(log):
                break
        await s.send_all(bad(len(log)))
        await trio.sleep_forever()

    master = Master(script)
    slave, native, _epochs, _seen = make_slave(tmp_path)
    await against(master, slave, second.wait)
    assert native.max_offset == len(log)  # what came before the bad record stays
    assert any(reason in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]


async def test_a_silent_master_is_left_after_the_housekeeping_interval(
    tmp_path: Path, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A master that stops sending (a paused process keeps its TCP connection open) is left,
    and the slave connects again. The Python path never did: each receive was cut at the
    heartbeat interval, so the housekeeping timeout around it never fired."""
    caplog.set_level(logging.INFO, logger=slave_mod.__name__)
    second = trio.Event()

    async def script(s: trio.SocketStream, acks: trio.MemoryReceiveChannel[int]) -> None:
        if master.connections > 1:
            second.set()
            await trio.sleep_forever()
        await s.send_all(encode_master_handshake(0, 1, [(1, 0)]))
        await trio.sleep_forever()  # silence, the connection open

    master = Master(script)
    slave, _native, _epochs, _seen = make_slave(tmp_path, hk_ms=400)
    await against(master, slave, second.wait)
    assert any("silent" in r.getMessage() for r in caplog.records)


async def test_pointing_the_slave_elsewhere_stops_the_native_thread_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """set_master(None) (a promotion) returns only after the thread has ended: nothing is
    appended as a slave once the broker acts on its new role."""
    monkeypatch.delenv(slave_mod.NATIVE_SLAVE_ENV, raising=False)
    loops: list[object] = []
    real = slave_mod.HaSlaveLoop

    def keep(*a: object) -> object:
        lp = real(*a)  # type: ignore[arg-type]
        loops.append(lp)
        return lp

    monkeypatch.setattr(slave_mod, "HaSlaveLoop", keep)
    _, log = master_log(tmp_path, 10)

    async def script(s: trio.SocketStream, acks: trio.MemoryReceiveChannel[int]) -> None:
        await s.send_all(encode_master_handshake(len(log), 1, [(1, 0)]))
        await s.send_all(transfer(0, 1, 0, len(log), log))
        while True:
            await s.send_all(transfer(len(log), 1, 0, len(log)))
            await trio.sleep(0.05)

    master = Master(script)
    slave, native, _epochs, _seen = make_slave(tmp_path)

    async def promoted() -> None:
        await until_confirm(native, len(log))
        slave.set_master(None)
        while slave.status.state != "READY":
            await trio.sleep(0.01)

    await against(master, slave, promoted)
    assert len(loops) == 1
    assert loops[0].take()[6] == "stopped"  # type: ignore[attr-defined]


# ---- a real group: the native loops are the ones replicating -----------------------------------


def thread_names(pid: int) -> list[str]:
    out = []
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            out.append((t / "comm").read_text().strip())
        except OSError:
            pass  # the thread ended
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("native", [True, False])
async def test_a_group_replicates_through_the_native_loops(
    tmp_path: Path, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three replicas: with the native loops on (the default), the master runs one streaming
    thread per slave and each slave one receiving thread, and every acknowledged send is read
    back; `RMQ_HA_NATIVE_HA=0` runs neither thread and replicates as well."""
    from hautil import Acked, HaCluster, read_all, send_values

    monkeypatch.setenv(slave_mod.NATIVE_SLAVE_ENV, "1" if native else "0")
    c = HaCluster(tmp_path, replicas=3)
    try:
        await c.start()
        m = await c.master()
        await c.wait_sync_state_set(m, 3, timeout_s=60)
        acked = Acked()
        values = [f"n{i}-" + "z" * 200 for i in range(60)]
        assert await send_values(c.ns_addrs[0], "TopicNativeHa", values, acked) == []
        got = await read_all(c.ns_addrs[0], "TopicNativeHa")
        assert set(values) <= set(got)

        def counts() -> list[tuple[int, str, int]]:
            out = []
            for i, b in enumerate(c.brokers):
                name = "rmq-ha-master" if i == m else "rmq-ha-slave"
                out.append((i, name, thread_names(b.pid).count(name)))
            return out

        want = [(i, n, (2 if i == m else 1) if native else 0) for i, n, _ in counts()]
        # a slave reconnecting at the wrong moment (a loaded machine) changes a count briefly
        with trio.move_on_after(20):
            while counts() != want:
                await trio.sleep(0.1)
        assert counts() == want
    finally:
        c.stop()


async def test_the_role_core_hears_of_bytes_the_native_thread_applied_before_it_was_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The native loop applies buffered bytes as soon as it starts. `_transfer_native` read
    what it had told the role core after starting it, so under load that already included
    those bytes and no LogGrew came for them (CI: a torn replica that had caught up stayed
    owing its catch-up). Forced here: the loop starts with the whole transfer buffered and
    its constructor returns only once its thread has applied it."""
    monkeypatch.delenv(slave_mod.NATIVE_SLAVE_ENV, raising=False)
    _, log = master_log(tmp_path)
    handshake = encode_master_handshake(len(log), 1, [(1, 0)])
    data = transfer(0, 1, 0, 0, log) + transfer(len(log), 1, 0, len(log))
    real = slave_mod.HaSlaveLoop

    def started_late(
        native: Store, epochs: object, fd: int, buffered: bytes, *rest: object
    ) -> object:
        loop = real(native, epochs, fd, bytes(buffered) + data, *rest)  # type: ignore[arg-type]
        deadline = time.monotonic() + 20
        while native.max_offset < len(log) or native.confirm_offset < len(log):
            assert time.monotonic() < deadline, "the native thread applied nothing"
            time.sleep(0.01)
        return loop

    monkeypatch.setattr(slave_mod, "HaSlaveLoop", started_late)
    done = trio.Event()

    async def script(s: trio.SocketStream, acks: trio.MemoryReceiveChannel[int]) -> None:
        await s.send_all(handshake)
        await done.wait()

    slave, _, _, seen = make_slave(tmp_path)

    async def told() -> None:
        while ev.LogGrew(len(log), len(log)) not in seen:
            await trio.sleep(0.01)

    await against(Master(script), slave, told)
    done.set()
