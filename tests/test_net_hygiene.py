"""What a misbehaving or vanished peer may cost a role: throttled log lines
(rmq_ha.net.logthrottle), no secret in an ACL parse error, TCP keepalive on every connection."""

from __future__ import annotations

import logging

import pytest

from rmq_ha.net.logthrottle import LogThrottle


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
        sock = conn.stream.socket  # type: ignore[attr-defined]
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE_S
        await client.aclose()
        n.cancel_scope.cancel()
