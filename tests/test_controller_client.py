"""The controller client's leader lookup and request deadline (controller/client.py) when a
node cannot be reached: a partition drops its packets, so connecting to it hangs until a
timeout. Fault probe (session 17): the lookup asked the nodes one after the other, a dead one
cost its connect timeout each, and a SyncStateSet change took 10.7 s to fail instead of its
3 s. Under trio's MockClock."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from rmq_ha.controller import messages as m
from rmq_ha.controller.client import ControllerClient, NoLeaderError
from rmq_ha.errors import RemotingError
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import GetMetaDataResponseHeader

pytestmark = pytest.mark.timeout(30)

DEAD, FOLLOWER, LEADER = "10.0.0.1:9878", "10.0.0.2:9878", "10.0.0.3:9878"


class Network:
    """DEAD never answers (a connect that hangs); FOLLOWER and LEADER answer metadata; the
    leader answers requests. `leader_up` False: no node is leader."""

    def __init__(self) -> None:
        self.leader_up = True
        self.asked: list[tuple[float, str, int]] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        self.asked.append((trio.current_time(), addr, cmd.code))
        if addr == DEAD:
            await trio.sleep_forever()
        if cmd.code == RC.CONTROLLER_GET_METADATA_INFO:
            meta = GetMetaDataResponseHeader(is_leader=addr == LEADER and self.leader_up)
            return cmd.response(Code.SUCCESS, None, meta.to_ext())
        if addr != LEADER or not self.leader_up:
            return cmd.response(Code.CONTROLLER_NOT_LEADER, "not leader")
        return cmd.response(Code.SUCCESS)


def _client(net: Network, addrs: list[str]) -> ControllerClient:
    return ControllerClient(net, addrs, timeout_s=3.0)  # type: ignore[arg-type]


async def test_the_leader_is_found_without_waiting_for_a_dead_node(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    cc = _client(net, [DEAD, FOLLOWER, LEADER])
    t0 = trio.current_time()
    assert await cc.find_leader() == LEADER
    assert trio.current_time() - t0 < 0.5, "the dead node was waited for"
    assert {a for _, a, _ in net.asked} == {DEAD, FOLLOWER, LEADER}


async def test_a_request_to_a_stale_leader_fails_within_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    cc = _client(net, [DEAD, FOLLOWER, LEADER])
    cc.leader = DEAD  # the leader it knew is now behind a partition
    t0 = trio.current_time()
    resp = await cc.invoke(RemotingCommand.request(RC.CONTROLLER_GET_SYNC_STATE_DATA), 10.0)
    assert resp.code == Code.SUCCESS
    # the try on the dead node was cut at the deadline; the lookup then found the leader
    net.leader_up = False
    cc.leader = DEAD
    t0 = trio.current_time()
    with pytest.raises(RemotingError):
        await cc.request(m.GetSyncStateDataRequest(("broker-a",)))
    assert trio.current_time() - t0 <= 3.0 + 0.2, "a try outlived the 3 s deadline"


async def test_no_leader_names_the_last_error(autojump_clock: trio.testing.MockClock) -> None:
    net = Network()
    net.leader_up = False
    cc = _client(net, [FOLLOWER])
    with pytest.raises(NoLeaderError):
        await cc.find_leader()
