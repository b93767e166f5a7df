"""The broker's heartbeats to the controllers (broker/io/controller.py): each is a request
whose answer shows that the controller's messages still reach the broker; the next heartbeat
to that controller says how long it has not answered (`unansweredMs`), so a controller behind
a one-way partition does not elect a broker that cannot learn it was elected. A controller
that does not answer does not delay the heartbeats to the others. Under trio's MockClock."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import trio
import trio.testing

from rmq_ha.broker.core.role import RoleConfig, RoleCore
from rmq_ha.broker.io.controller import ControllerShell
from rmq_ha.config import BrokerConfig
from rmq_ha.errors import RemotingTimeoutError
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import BrokerHeartbeatRequestHeader

pytestmark = pytest.mark.timeout(30)

HEARD, DEAF = "10.0.0.2:9878", "10.0.0.3:9878"


class Outbound:
    """Controller DEAF receives every heartbeat (it is recorded) and its answer never comes
    back while `deaf`; HEARD answers at once."""

    def __init__(self) -> None:
        self.deaf = True
        self.beats: dict[str, list[tuple[float, BrokerHeartbeatRequestHeader]]] = {}
        self.closed: list[str] = []

    async def invoke(
        self, addr: str, cmd: RemotingCommand, timeout_s: float, close_on_timeout: bool = True
    ) -> RemotingCommand:
        assert not close_on_timeout, "a heartbeat must not close its connection on a timeout"
        assert cmd.code == RC.BROKER_HEARTBEAT and not cmd.is_oneway
        h = BrokerHeartbeatRequestHeader.from_ext(cmd.ext_fields)
        self.beats.setdefault(addr, []).append((trio.current_time(), h))
        if addr == DEAF and self.deaf:
            await trio.sleep(timeout_s)
            raise RemotingTimeoutError(f"no response from {addr} within {timeout_s} s")
        return cmd.response(Resp.SUCCESS)

    def close_connection(self, addr: str) -> None:
        self.closed.append(addr)


def _shell(tmp_path: Path, outbound: Outbound) -> ControllerShell:
    cfg = BrokerConfig(
        controller_addr=f"{HEARD};{DEAF}",
        enable_controller_mode=True,
        broker_heartbeat_interval_ms=1000,
        controller_heartbeat_timeout_ms=6000,
        store_path_root_dir=str(tmp_path),
    )
    shell = ControllerShell(
        cfg,
        outbound,  # type: ignore[arg-type]
        RoleCore(RoleConfig(controller_mode=True)),
        lambda ev: None,
        address="10.0.0.1:10911",
        last_epoch=lambda: 1,
    )
    shell.broker_id = 2
    return shell


async def test_a_controller_whose_answers_stop_is_told_how_long(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    out = Outbound()
    shell = _shell(tmp_path, out)
    async with trio.open_nursery() as n:
        n.start_soon(shell._heartbeat_loop)
        await trio.sleep(10.5)
        out.deaf = False
        await trio.sleep(3.0)
        n.cancel_scope.cancel()
    heard = [h.unanswered_ms for _, h in out.beats[HEARD]]
    deaf = [(t, h.unanswered_ms) for t, h in out.beats[DEAF]]
    # One heartbeat a second to the controller that answers, none held up by the other.
    assert len(heard) == 13 and all(u is not None and u <= 1000 for u in heard), heard
    # The deaf controller still receives every heartbeat, each saying how long it has been.
    assert len(deaf) == 13
    t0 = deaf[0][0]
    for t, unanswered in deaf[:10]:
        assert unanswered == round((t - t0) * 1000), deaf
    assert deaf[9][1] is not None and deaf[9][1] > 3000  # past half the 6 s timeout
    # a late answer is no reason to close the connection: the controller would drop this
    # broker at once (a live master deposed); the heartbeats say how long instead
    assert out.closed == []
    # Once it answers again, the count starts over.
    assert all(u is not None and u <= 1000 for _, u in deaf[-2:]), deaf


def test_heartbeat_waits_for_its_answer_less_than_half_the_timeout(tmp_path: Path) -> None:
    shell = _shell(tmp_path, Outbound())
    assert shell._heartbeat_wait_s() == 3.0  # three intervals, and at most half of 6 s
    shell.cfg = dataclasses.replace(shell.cfg, controller_heartbeat_timeout_ms=2000)
    assert shell._heartbeat_wait_s() == 1.0
