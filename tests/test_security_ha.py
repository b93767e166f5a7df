"""Cluster credentials on the HA port: a slave proves an admin account of the master's
plain_acl.yml before RocketMQ's handshake, and the master proves it back. A "slave" that is not
the cluster (no authentication, a wrong secret, a non-admin account, garbage) is refused before
the handshake and takes no part in replication; a fake master cannot make a slave truncate."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_ha._native import encode_slave_handshake
from rmq_ha.client import Producer, ProducerConfig
from rmq_ha.security.acl import load_acl_text
from rmq_ha.security.ha_auth import (
    NONCE_BYTES,
    HaAuthError,
    authenticate_master,
    authenticate_slave,
    encode_hello,
    mac,
)
from rmq_ha.security.signing import Credentials
from securityutil import ACL_TEXT, ADMIN, USER, secure_cluster
from test_client_cluster import FAST_CLIENT

pytestmark = pytest.mark.timeout(60)

ACL = load_acl_text(ACL_TEXT)


async def exchange(
    slave_creds: Credentials,
) -> tuple[BaseException | tuple[str, bytes], BaseException | bytes]:
    a, b = trio.testing.memory_stream_pair()
    out: dict[str, object] = {}

    async def master() -> None:
        try:
            out["m"] = await authenticate_slave(a, lambda: ACL)
        except HaAuthError as e:
            out["m"] = e
            await a.aclose()

    async def slave() -> None:
        try:
            out["s"] = await authenticate_master(b, slave_creds)
        except HaAuthError as e:
            out["s"] = e

    async with trio.open_nursery() as n:
        n.start_soon(master)
        n.start_soon(slave)
    return out["m"], out["s"]  # type: ignore[return-value]


async def test_exchange_good_and_bad_credentials() -> None:
    m, s = await exchange(ADMIN)
    assert m == (ADMIN.access_key, b"") and s == b""
    for creds, why in (
        (Credentials(ADMIN.access_key, "wrong-secret"), "HA authentication failed"),
        (USER, "No cluster account client01"),  # not admin
        (Credentials("stranger", "whatever1"), "No cluster account stranger"),
    ):
        m, s = await exchange(creds)
        assert isinstance(m, HaAuthError) and why in str(m)
        assert isinstance(s, HaAuthError) and why in str(s)


async def test_a_fake_master_is_caught_by_the_slave() -> None:
    a, b = trio.testing.memory_stream_pair()
    got: list[BaseException] = []

    async def fake_master() -> None:
        await a.receive_some(1024)
        await a.send_all(b"\x00" * NONCE_BYTES)
        await a.receive_some(1024)
        await a.send_all(b"\x00" + b"\x11" * 20)  # claims success without the secret

    async def slave() -> None:
        try:
            await authenticate_master(b, ADMIN)
        except HaAuthError as e:
            got.append(e)

    async with trio.open_nursery() as n:
        n.start_soon(fake_master)
        n.start_soon(slave)
    assert got and "could not prove" in str(got[0])


@pytest.mark.parametrize(
    "first",
    [
        encode_slave_handshake(False, False, 7),  # RocketMQ's handshake, no authentication
        b"RMQHAUTH\x02\x00\x01a",  # unknown version
        b"RMQHAUTH\x01\x00\x00",  # empty key
        b"RMQHAUTH\x01\xff\xff",  # key too long
        b"GET / HTTP/1.1\r\n\r\n",
    ],
)
async def test_master_refuses_what_is_not_an_authentication(first: bytes) -> None:
    a, b = trio.testing.memory_stream_pair()
    await b.send_all(first)
    with pytest.raises(HaAuthError):
        await authenticate_slave(a, lambda: ACL)


async def test_a_silent_peer_times_out(autojump_clock: trio.testing.MockClock) -> None:
    a, _b = trio.testing.memory_stream_pair()
    with pytest.raises(trio.TooSlowError):
        await authenticate_slave(a, lambda: ACL)


def test_hello_encoding() -> None:
    nonce = bytes(range(16))
    assert encode_hello("ak", nonce) == b"RMQHAUTH" + struct.pack(">BH", 1, 2) + b"ak" + nonce
    with pytest.raises(ValueError):
        encode_hello("", nonce)
    assert mac("s", b"slave", nonce, nonce, "ak") != mac("s", b"master", nonce, nonce, "ak")


# ---- a real master and slave -----------------------------------------------------------------


async def fake_slave(addr: str, payload: bytes) -> bytes:
    """Connects to the HA port, sends `payload`, returns what comes back until close."""
    host, _, port = addr.rpartition(":")
    stream = await trio.open_tcp_stream(host, int(port))
    got = b""
    async with stream:
        await stream.send_all(payload)
        with trio.fail_after(15):
            while data := await stream.receive_some(4096):
                got += data
    return got


async def test_master_and_slave_replicate_authenticated_and_strangers_are_refused(
    tmp_path: Path,
) -> None:
    async with secure_cluster(tmp_path, slave=True) as env:
        assert env.slave is not None
        master, slave = env.node, env.slave
        assert master.ha.master.auth is not None and slave.ha.slave.credentials == ADMIN
        cfg = ProducerConfig(client=replace(FAST_CLIENT, credentials=USER))
        async with Producer("pg", env.namesrv, config=cfg) as p:
            for i in range(5):
                assert (await p.send("TBW102", f"m{i}".encode())).ok
        with trio.fail_after(20):  # replicated over the authenticated HA connection
            while slave.store.native.max_offset < master.store.native.max_offset:
                await trio.sleep(0.05)
        assert set(master.ha.master.connections) == {1}
        ha_addr = f"127.0.0.1:{master.ha.port}"
        before = master.store.native.max_offset
        # RocketMQ's handshake without authentication: closed with no answer
        assert await fake_slave(ha_addr, encode_slave_handshake(False, False, 9)) == b""
        # a hello with a key that is not the cluster's, then any MAC: refused with a reason
        hello = encode_hello(USER.access_key, b"\x01" * NONCE_BYTES)
        answer = await fake_slave(ha_addr, hello + b"\x00" * 20)
        assert answer[NONCE_BYTES] == 1 and b"No cluster account client01" in answer
        hello = encode_hello(ADMIN.access_key, b"\x02" * NONCE_BYTES)
        answer = await fake_slave(ha_addr, hello + b"\x00" * 20)
        assert b"HA authentication failed for accessKey=clusterAdmin" in answer
        # nothing changed: still only the real slave, same log
        assert set(master.ha.master.connections) == {1}
        assert master.store.native.max_offset == before


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=80))
def test_random_bytes_to_the_master_end_in_a_refusal(data: bytes) -> None:
    """Whatever a stranger sends first, the master answers with a refusal or closes; it never
    accepts and never fails otherwise."""

    async def main() -> None:
        a, b = trio.testing.memory_stream_pair()
        await b.send_all(data)
        await b.send_eof()
        with pytest.raises((HaAuthError, trio.TooSlowError)):
            await authenticate_slave(a, lambda: ACL)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
