"""The broker's registration with name servers (broker/io/namesrv.py): a name server whose
registration failed is asked again after a short back-off, not only at the next
registerNameServerPeriod. Under trio's MockClock: virtual time, no waiting."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from rmq_ha.broker.assignment import RequestModes
from rmq_ha.broker.core import events as e
from rmq_ha.broker.core.role import RoleConfig, RoleCore
from rmq_ha.broker.io.namesrv import REGISTER_RETRY_S, NamesrvShell
from rmq_ha.broker.offsets import ConsumerOffsetManager
from rmq_ha.broker.subgroups import SubscriptionGroupManager
from rmq_ha.broker.topics import TopicConfigManager
from rmq_ha.config import BrokerConfig
from rmq_ha.errors import RemotingTimeoutError
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand

pytestmark = pytest.mark.timeout(30)

PERIOD_S = 30.0


class Outbound:
    """Name server `down` does not answer until `up_at` (virtual seconds); the others answer
    SUCCESS. Every request is recorded as (time, address)."""

    def __init__(self, down: str, up_at: float) -> None:
        self.down, self.up_at = down, up_at
        self.calls: list[tuple[float, str]] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        now = trio.current_time()
        self.calls.append((now, addr))
        if addr == self.down and now < self.up_at:
            await trio.sleep(timeout_s)
            raise RemotingTimeoutError(f"no response from {addr} within {timeout_s} s")
        return cmd.response(Resp.SUCCESS)


def _shell(tmp_path: Path, outbound: Outbound) -> NamesrvShell:
    cfg = BrokerConfig(
        namesrv_addr="ns1:9876;ns2:9876",
        register_name_server_period_ms=int(PERIOD_S * 1000),
        store_path_root_dir=str(tmp_path),
    )
    core = RoleCore(RoleConfig(controller_mode=False, broker_id=0))
    core.step(e.Started("10.0.0.1:10911", 0, 0, None, 0), 0)
    assert core.registers
    topics = TopicConfigManager(
        tmp_path / "topics.json",
        cluster_name=cfg.cluster_name,
        broker_name=cfg.broker_name,
        broker_permission=cfg.broker_permission,
        auto_create=True,
        default_queue_nums=4,
    )
    return NamesrvShell(
        cfg,
        outbound,  # type: ignore[arg-type]
        core,
        lambda ev: None,
        address="10.0.0.1:10911",
        ha_address=lambda: "10.0.0.1:10912",
        topics=topics,
        offsets=ConsumerOffsetManager(tmp_path / "offsets.json", 500),
        subgroups=SubscriptionGroupManager(tmp_path / "subscriptionGroup.json"),
        request_modes=RequestModes(tmp_path / "messageRequestMode.json"),
        delay=None,  # type: ignore[arg-type]
        delay_running=lambda: False,
        adopt_topics=lambda: None,
        log_queues=lambda: [],
        acting_enabled=False,
    )


async def test_a_failed_registration_is_retried_with_back_off_not_a_period_later(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    out = Outbound("ns2:9876", up_at=12.0)
    shell = _shell(tmp_path, out)
    t0 = trio.current_time()
    async with trio.open_nursery() as n:
        await shell.register_all()  # as the broker does once it is up (3 s: ns2's timeout)
        n.start_soon(shell._registration_loop)
        await trio.sleep(PERIOD_S + 20)  # one full round at 30 s
        n.cancel_scope.cancel()
    ns2 = [round(t - t0, 1) for t, a in out.calls if a == "ns2:9876"]
    ns1 = [round(t - t0, 1) for t, a in out.calls if a == "ns1:9876"]
    # The first round fails on ns2 (a 3 s timeout) ...
    assert ns1[0] == ns2[0] == 0.0
    # ... then ns2 alone after a back-off of 1, 2, 4 s from the end of each failed attempt:
    # at 4 and 9 (no answer, 3 s each), and at 16, when it answers (up since 12) ...
    assert REGISTER_RETRY_S == 1.0
    assert ns2[1:4] == [4.0, 9.0, 16.0], ns2
    # ... then only the full round, a period after the loop started (at 3 s); ns1 is not
    # asked between rounds.
    assert ns2[4:] == [3 + PERIOD_S] and ns1[1:] == [3 + PERIOD_S], (ns1, ns2)
    assert shell.failed == set() and shell._retry_s == REGISTER_RETRY_S
