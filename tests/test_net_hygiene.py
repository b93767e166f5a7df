"""What a misbehaving or vanished peer may cost a role: throttled log lines
(rmq_ha.net.logthrottle), no secret in an ACL parse error, TCP keepalive on every connection."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from rmq_ha.net.connection import Connection
from rmq_ha.net.logthrottle import LogThrottle
from rmq_ha.protocol.command import RemotingCommand


def test_a_repeated_line_is_logged_once_per_period_and_the_next_says_how_many_were_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    t = LogThrottle(every_s=10.0, clock=lambda: now[0])
    log = logging.getLogger("test.throttle")
    with caplog.at_level(logging.WARNING, logger="test.throttle"):
        assert t.log(log, logging.WARNING, "tls", "closing %s", "a:1")
        for i in range(5000):  # a client reconnecting in a tight loop
            now[0] = i * 0.001
            assert not t.log(log, logging.WARNING, "tls", "closing %s", f"a:{i}")
        assert t.log(log, logging.WARNING, "frame", "other kind")  # keys are separate
        now[0] = 12.0
        assert t.log(log, logging.WARNING, "tls", "closing %s", "b:2")
        now[0] = 30.0
        assert t.log(log, logging.WARNING, "tls", "closing %s", "c:3")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "closing a:1",
        "other kind",
        "closing b:2 (and 5000 more like it in the last 12 s, not logged)",
        "closing c:3",
    ]


def test_a_yaml_error_in_the_acl_file_never_quotes_the_line() -> None:
    """PyYAML's message quotes the offending line: a broken secretKey line put the secret in
    the log (probe)."""
    from rmq_ha.security.acl import AclConfigError, load_acl_text

    text = "accounts:\n- accessKey: RocketMQ\n  secretKey: TOPSECRET-[x: {\n  admin: true\n"
    with pytest.raises(AclConfigError) as e:
        load_acl_text(text)
    assert "TOPSECRET" not in str(e.value)
    assert "not YAML" in str(e.value) and "line 3" in str(e.value), str(e.value)


async def test_accepted_connections_have_tcp_keepalive() -> None:
    """A client that vanished without closing its connection (power loss, a killed VM) kept
    its connection, file descriptor and held pulls for ever: keepalive was off (soak probe)."""
    import socket

    import trio

    from rmq_ha.net.server import KEEPALIVE_IDLE_S, RemotingServer

    async def handler(conn: object, cmd: object) -> None:
        return None

    async with trio.open_nursery() as n:
        server = RemotingServer(handler)  # type: ignore[arg-type]
        await n.start(server.serve)
        client = await trio.open_tcp_stream("127.0.0.1", server.port)
        with trio.fail_after(10):
            while not server.connections:
                await trio.sleep(0.01)
        (conn,) = server.connections
        sock = conn.stream.socket
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE_S
        await client.aclose()
        n.cancel_scope.cancel()


def _frame(code: int, opaque: int, body: bytes = b"") -> bytes:
    from rmq_ha._native import encode_frames

    return encode_frames([RemotingCommand(code=code, opaque=opaque, body=body).to_wire()])


async def _served(
    idle_s: float | None, hold: trio.Event | None = None
) -> tuple[Connection, trio.abc.Stream]:
    """A server-side Connection over an in-memory stream pair, and the peer's end."""
    server_end, peer = trio.testing.memory_stream_pair()

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if hold is not None:
            await hold.wait()
        return cmd.response(0, "")

    return Connection(server_end, handler, "peer:1", idle_s=idle_s), peer


async def test_a_silent_connection_is_closed_after_the_idle_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """RocketMQ closes a connection idle for serverChannelMaxIdleTimeSeconds (120 s); ours were
    kept for ever, as were ones stuck on half a frame (soak probe: 14 idle and 49 partial)."""
    import trio

    for partial in (False, True):
        conn, peer = await _served(120.0)
        async with trio.open_nursery() as n:
            n.start_soon(conn.run)
            await trio.sleep(100)
            await peer.send_all(_frame(10, 1)[:7] if partial else _frame(10, 1))
            t0 = trio.current_time()
            with trio.fail_after(1000):  # virtual seconds
                await conn.wait_closed()
            # traffic at 100 s moved the deadline: closed 120 s after it, not at 120 s
            assert trio.current_time() - t0 >= 120.0
            assert conn.closed_because == "idle"


async def test_a_held_request_keeps_its_connection_however_long(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A held pull answers after the client's suspend time; the connection must outlive the
    idle time while it is held, and close only after its answer was written and the idle
    time passed again."""
    import trio

    from rmq_ha._native import decode_frames

    hold = trio.Event()
    conn, peer = await _served(120.0, hold)
    async with trio.open_nursery() as n:
        n.start_soon(conn.run)
        await peer.send_all(_frame(11, 7))
        await trio.sleep(500)
        assert not conn.closed
        hold.set()
        frames, _ = decode_frames(await peer.receive_some(1 << 16))
        assert [RemotingCommand.from_wire(f).opaque for f in frames] == [7]
        t0 = trio.current_time()
        with trio.fail_after(1000):  # virtual seconds
            await conn.wait_closed()
        assert trio.current_time() - t0 >= 120.0
        assert conn.closed_because == "idle"


async def test_idle_time_zero_never_closes(autojump_clock: trio.testing.MockClock) -> None:
    import trio

    conn, peer = await _served(None)
    async with trio.open_nursery() as n:
        n.start_soon(conn.run)
        await trio.sleep(10_000)
        assert not conn.closed
        await peer.aclose()
        await conn.wait_closed()
        assert conn.closed_because is None


def test_the_idle_time_is_a_config_key_of_every_role() -> None:
    from rmq_ha.config import BrokerConfig, ControllerConfig, NamesrvConfig, from_mapping
    from rmq_ha.errors import ConfigError

    for cls in (BrokerConfig, NamesrvConfig, ControllerConfig):
        assert cls().server_channel_max_idle_time_sec == 120
        cfg, _ = from_mapping(cls, {"serverChannelMaxIdleTimeSeconds": "0"})
        assert cfg.server_channel_max_idle_time_sec == 0
        with pytest.raises(ConfigError, match="serverChannelMaxIdleTimeSeconds"):
            from_mapping(cls, {"serverChannelMaxIdleTimeSeconds": "-1"})
