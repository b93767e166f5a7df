"""TLS on the remoting port (tls.server.mode disabled / permissive / enforcing, server and
client certificates; certificates from scripts/gen_test_certs.sh). Failures close that
connection only: the server goes on serving others."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from rmq_ha.client import Producer, ProducerConfig
from rmq_ha.config import BrokerConfig, NamesrvConfig, TlsClientAuth, TlsMode
from rmq_ha.errors import ConfigError, RemotingError
from rmq_ha.nameserver.server import Nameserver
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.security.tls import make_client_context, server_context
from test_client_cluster import FAST_CLIENT

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for test certs"),
]

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gen_test_certs.sh"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run(["bash", str(SCRIPT), str(d)], check=True, capture_output=True, timeout=120)
    return d


def ns_config(certs: Path, mode: TlsMode, **kw: object) -> NamesrvConfig:
    values: dict[str, object] = {
        "tls_server_mode": mode,
        "tls_server_cert_path": str(certs / "server.pem"),
        "tls_server_key_path": str(certs / "server.key"),
        **kw,
    }
    return replace(NamesrvConfig(listen_port=0), **values)  # type: ignore[arg-type]


async def route(c: RemotingClient, addr: str) -> int:
    q = RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    return (await c.invoke(addr, q, timeout_s=5)).code


async def test_enforcing_port(certs: Path) -> None:
    async with trio.open_nursery() as n:
        ns = Nameserver(ns_config(certs, TlsMode.ENFORCING))
        await n.start(ns.serve)
        trusted = make_client_context(trust=str(certs / "ca.pem"))
        async with RemotingClient(tls=trusted) as c:
            assert await route(c, ns.address) == Code.TOPIC_NOT_EXIST
            # a plaintext client on the same port: its connection is closed ...
            async with RemotingClient() as plain:
                with pytest.raises(RemotingError):
                    await route(plain, ns.address)
            # ... a client trusting another CA refuses the server ...
            async with RemotingClient(tls=make_client_context(str(certs / "other-ca.pem"))) as w:
                with pytest.raises(RemotingError, match=r"TLS to .* failed"):
                    await route(w, ns.address)
            # ... and the TLS client's connection goes on working.
            assert await route(c, ns.address) == Code.TOPIC_NOT_EXIST
        # no trust configured: encrypted, server not verified (RocketMQ's client default)
        async with RemotingClient(tls=make_client_context()) as c:
            assert await route(c, ns.address) == Code.TOPIC_NOT_EXIST
        assert ns.server.tls_refused >= 2
        n.cancel_scope.cancel()


async def test_permissive_port_takes_both(certs: Path) -> None:
    async with trio.open_nursery() as n:
        ns = Nameserver(ns_config(certs, TlsMode.PERMISSIVE))
        await n.start(ns.serve)
        async with RemotingClient() as plain, RemotingClient(tls=make_client_context()) as tls:
            assert await route(plain, ns.address) == Code.TOPIC_NOT_EXIST
            assert await route(tls, ns.address) == Code.TOPIC_NOT_EXIST
        n.cancel_scope.cancel()


async def test_client_certificates(certs: Path) -> None:
    cfg = ns_config(
        certs,
        TlsMode.ENFORCING,
        tls_server_need_client_auth=TlsClientAuth.REQUIRE,
        tls_server_trust_cert_path=str(certs / "ca.pem"),
    )
    ca = str(certs / "ca.pem")
    async with trio.open_nursery() as n:
        ns = Nameserver(cfg)
        await n.start(ns.serve)
        good = make_client_context(ca, str(certs / "client.pem"), str(certs / "client.key"))
        async with RemotingClient(tls=good) as c:
            assert await route(c, ns.address) == Code.TOPIC_NOT_EXIST
        for ctx in (
            make_client_context(ca),  # no certificate
            make_client_context(ca, str(certs / "stranger.pem"), str(certs / "stranger.key")),
        ):
            async with RemotingClient(tls=ctx) as c:
                with pytest.raises(RemotingError):
                    await route(c, ns.address)
        n.cancel_scope.cancel()


async def test_stalled_and_garbage_clients_are_cut_alone(certs: Path) -> None:
    async with trio.open_nursery() as n:
        ns = Nameserver(ns_config(certs, TlsMode.ENFORCING))
        await n.start(ns.serve)
        host, _, port = ns.address.rpartition(":")
        stalled = await trio.open_tcp_stream(host, int(port))  # sends nothing at all
        junk = await trio.open_tcp_stream(host, int(port))
        await junk.send_all(b"\x16\x03\x01\x00\x05hello")  # a broken ClientHello
        with trio.fail_after(15):  # the server answers (an alert, maybe) and closes
            try:
                while await junk.receive_some(100):
                    pass
            except trio.BrokenResourceError:
                pass
        await junk.aclose()
        assert ns.server.tls_refused == 1
        async with RemotingClient(tls=make_client_context()) as c:
            assert await route(c, ns.address) == Code.TOPIC_NOT_EXIST
        await stalled.aclose()
        n.cancel_scope.cancel()


def test_bad_tls_config_names_the_key(certs: Path, tmp_path: Path) -> None:
    from rmq_ha import config

    with pytest.raises(ConfigError, match=r"tls\.server\.certPath: required"):
        config.from_mapping(config.NamesrvConfig, {"tls.server.mode": "enforcing"})
    with pytest.raises(ConfigError, match=r"tls\.server\.mode"):
        config.from_mapping(config.NamesrvConfig, {"tls.server.mode": "sometimes"})
    with pytest.raises(ConfigError, match=r"tls\.server\.trustCertPath: required"):
        config.from_mapping(config.NamesrvConfig, {"tls.server.need.client.auth": "require"})
    bad = ns_config(certs, TlsMode.ENFORCING, tls_server_key_path=str(tmp_path / "nope.key"))
    with pytest.raises(ConfigError, match="cannot load"):
        server_context(bad)


async def test_a_cluster_over_tls(certs: Path, tmp_path: Path) -> None:
    """Name server and broker enforcing TLS; the broker's own connections use TLS too
    (tlsEnable, verifying the name server against the CA); our producer sends over TLS."""
    ca = str(certs / "ca.pem")
    async with trio.open_nursery() as n:
        ns = Nameserver(ns_config(certs, TlsMode.ENFORCING))
        await n.start(ns.serve)
        bcfg = replace(
            BrokerConfig(
                listen_port=0,
                namesrv_addr=ns.address,
                store_path_root_dir=str(tmp_path / "store"),
                commitlog_segment_bytes=1 << 20,
            ),
            tls_server_mode=TlsMode.ENFORCING,
            tls_server_cert_path=str(certs / "server.pem"),
            tls_server_key_path=str(certs / "server.key"),
            tls_enable=True,
            tls_client_trust_cert_path=ca,
        )
        from rmq_ha.broker.broker import open_broker

        async with open_broker(bcfg):
            client = replace(FAST_CLIENT, tls=make_client_context(ca))
            async with Producer("pg", ns.address, config=ProducerConfig(client=client)) as p:
                with trio.fail_after(20):
                    while True:
                        try:
                            r = await p.send("TBW102", b"over tls")
                            break
                        except RemotingError:
                            await trio.sleep(0.1)  # until the broker's registration lands
                assert r.ok
        n.cancel_scope.cancel()


async def test_master_and_slave_replicate_over_tls_and_plaintext_is_cut(
    certs: Path, tmp_path: Path
) -> None:
    """HA port with TLS enforcing (and ACL: the slave authenticates inside TLS)."""
    from rmq_ha._native import encode_slave_handshake
    from rmq_ha.broker.broker import open_broker
    from rmq_ha.config import BrokerRole
    from securityutil import INNER, USER

    ca = str(certs / "ca.pem")
    acl = tmp_path / "plain_acl.yml"
    from securityutil import ACL_TEXT

    acl.write_text(ACL_TEXT)
    tls = {
        "tls_server_mode": TlsMode.ENFORCING,
        "tls_server_cert_path": str(certs / "server.pem"),
        "tls_server_key_path": str(certs / "server.key"),
        "tls_enable": True,
        "tls_client_trust_cert_path": ca,
        "acl_enable": True,
        "plain_acl_file": str(acl),
        "inner_client_authentication_credentials": INNER,
    }
    async with trio.open_nursery() as n:
        ns = Nameserver(ns_config(certs, TlsMode.ENFORCING))
        await n.start(ns.serve)
        mcfg = replace(
            BrokerConfig(
                listen_port=0,
                namesrv_addr=ns.address,
                store_path_root_dir=str(tmp_path / "m"),
                commitlog_segment_bytes=1 << 20,
            ),
            **tls,  # type: ignore[arg-type]
        )
        scfg = replace(
            mcfg,
            broker_id=1,
            broker_role=BrokerRole.SLAVE,
            store_path_root_dir=str(tmp_path / "s"),
            ha_send_heartbeat_interval_ms=200,
        )
        async with open_broker(mcfg) as master, open_broker(scfg) as slave:
            client = replace(FAST_CLIENT, tls=make_client_context(ca), credentials=USER)
            async with Producer("pg", ns.address, config=ProducerConfig(client=client)) as p:
                with trio.fail_after(20):
                    while True:
                        try:
                            r = await p.send("TBW102", b"over tls")
                            break
                        except RemotingError:
                            await trio.sleep(0.1)
                assert r.ok
            with trio.fail_after(20):
                while slave.store.native.max_offset < master.store.native.max_offset:
                    await trio.sleep(0.05)
            assert set(master.ha.master.connections) == {1}
            # plaintext on the TLS HA port: closed, nothing joins
            plain = await trio.open_tcp_stream("127.0.0.1", master.ha.port)
            await plain.send_all(encode_slave_handshake(False, False, 9))
            with trio.fail_after(15):
                try:
                    while await plain.receive_some(100):
                        pass
                except trio.BrokenResourceError:
                    pass
            await plain.aclose()
            assert set(master.ha.master.connections) == {1}
        n.cancel_scope.cancel()


async def test_tls_stream_returns_every_received_record_at_once_and_eof(certs: Path) -> None:
    """A coalesced batch of frames must not be cut at TLS record boundaries: one read returns
    every record already received; a peer's close reads as b""."""
    import trio.testing

    from rmq_ha.security.tls import TlsStream

    cfg = ns_config(certs, TlsMode.ENFORCING)
    ctx = server_context(cfg)
    assert ctx is not None
    a, b = trio.testing.memory_stream_pair()
    server = TlsStream(a, ctx, server_side=True)
    client = TlsStream(b, make_client_context(str(certs / "ca.pem")), server_side=False,
                       server_hostname="localhost")  # fmt: skip
    async with trio.open_nursery() as n:
        n.start_soon(server.do_handshake)
        n.start_soon(client.do_handshake)
    for i in range(5):
        await client.send_all(b"record-%d;" % i)  # five TLS records
    # all five are in the server's transport by now: one read returns them all
    assert await server.receive_some(1 << 20) == b"".join(b"record-%d;" % i for i in range(5))
    await server.send_all(b"answer")
    assert await client.receive_some(100) == b"answer"
    await client.aclose()
    assert await server.receive_some(100) == b""
