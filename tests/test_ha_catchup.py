"""Issue 13 with real processes: an elected master that lost its unflushed tail.

Three name servers with embedded controllers and one group of three replicas
(allAckInSyncStateSet). Nothing the brokers write becomes durable during a test
(flushIntervalCommitLog is an hour), so a power loss may tear anything: the test kills a broker
and zeroes part of its commitlog's tail, as the bench's file-truncate nemesis does.

Before the fix, the torn new master was the only SyncStateSet member, every election picked
it, and it died in change_to_master with EpochConflictError; the naive fix (become master on
the shorter log) would have made the others cut acknowledged messages.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from hautil import Acked, HaCluster, read_all, send_values
from rmq_ha.controller import ElectMasterRequest
from rmq_ha.controller.client import ControllerClient
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import ResponseCode as Resp

pytestmark = pytest.mark.timeout(240)

TOPIC = "TopicCatchUp"
#: No byte becomes durable while a test runs: a torn tail may reach anything written.
NEVER_FLUSH = {"flushIntervalCommitLog": 3_600_000}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[HaCluster]:
    c = HaCluster(tmp_path, broker=NEVER_FLUSH)
    try:
        await c.start()
        yield c
    finally:
        c.stop()


def tear(store_root: Path, start: int, end: int) -> None:
    """A power loss: the bytes [start, end) of the commitlog never reached the disk."""
    segs = sorted(
        (int(p.name), p) for p in (store_root / "commitlog").iterdir() if p.name.isdigit()
    )
    for base, path in segs:
        size = path.stat().st_size
        lo, hi = max(start, base), min(end, base + size)
        if lo < hi:
            with open(path, "r+b") as f:
                f.seek(lo - base)
                f.write(b"\0" * (hi - lo))


async def statuses(c: HaCluster, ids: list[int]) -> dict[int, dict[str, Any]]:
    out = {}
    for i in ids:
        st = await c.status(i)
        if st is not None:
            out[i] = st
    return out


async def wait_until(c: HaCluster, what: str, pred: Any, timeout_s: float = 60) -> Any:
    """Polls broker states until `pred(states)` is truthy (states of the live brokers)."""
    with trio.move_on_after(timeout_s):
        while True:
            live = [i for i, p in enumerate(c.brokers) if p.alive]
            got = pred(await statuses(c, live))
            if got:
                return got
            await trio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{c.logs()}")


async def wait_log(c: HaCluster, i: int, text: str, timeout_s: float = 60) -> None:
    with trio.move_on_after(timeout_s):
        while text not in c.brokers[i].log.read_text():
            await trio.sleep(0.1)
        return
    raise AssertionError(f"broker {i} never logged {text!r}\n{c.logs()}")


def same_log(states: dict[int, dict[str, Any]], ids: list[int]) -> bool:
    if not all(i in states for i in ids):
        return False
    return len({states[i]["maxOffset"] for i in ids}) == 1


async def controller_says(c: HaCluster) -> str:
    """Asks the controller for an election; its answer's remark says why nobody can serve."""
    async with RemotingClient() as rc:
        resp = await ControllerClient(rc, c.ns_addrs).request(
            ElectMasterRequest.of_controller_trigger(c.broker_name)
        )
    assert not resp.ok, f"unexpectedly elected {resp.master_broker_id}"
    return str(resp.remark)


async def elect_then_tear(
    c: HaCluster, acked: Acked, *, lagging: bool
) -> tuple[int, int, int, int, int]:
    """Freezes one slave (so it cannot rejoin the next master), kills the master, waits for the
    other slave to be elected (its set is itself alone), kills it before its first flush and
    tears its log below its epoch's start offset. With `lagging`, the "frozen" replica is
    killed instead (restart it to resume) and misses the last writes, so the torn replica
    holds data it lacks. Not stopped: a stopped process keeps its HA connection, and what the
    master streamed into its socket buffer before it died is applied as soon as it resumes
    (the native slave loop does so at once), which gives it the data after all.

    Returns (old master, frozen replica, torn replica, its epoch's start, the frozen max)."""
    m = await c.master()
    await c.wait_sync_state_set(m, 3)
    assert await send_values(c.ns_addrs[0], TOPIC, [f"a{i}" for i in range(30)], acked) == []
    states = await wait_until(c, "equal logs", lambda s: same_log(s, [0, 1, 2]) and s)
    x, y = (i for i in range(3) if i != m)
    frozen_max = states[x]["maxOffset"]
    if lagging:
        c.brokers[x].kill()
    else:
        c.brokers[x].signal(signal.SIGSTOP)
    if lagging:
        # Writes go on without the frozen replica once the master dropped it from its set
        # (it falls behind only once there is something to send; these may time out first).
        await send_values(c.ns_addrs[0], TOPIC, [f"p{i}" for i in range(3)], acked)
        await c.wait_sync_state_set(m, 2)
        values = [f"b{i}" for i in range(60)]
        assert await send_values(c.ns_addrs[0], TOPIC, values, acked) == []
    await wait_until(c, "the other slave in sync", lambda s: same_log(s, [m, y]))
    c.brokers[m].kill()
    assert await c.master(exclude=m, timeout_s=60) == y
    st = await c.status(y)
    assert st is not None
    start = int(st["epochList"][-1]["startOffset"])
    assert start > frozen_max if lagging else start >= frozen_max
    c.brokers[y].kill()
    # Cut below the epoch's start (and, when the frozen replica lags, above its end).
    tear(c.tmp / f"broker-{y}", (frozen_max + start) // 2 if lagging else start // 2, start)
    c.brokers[y].start()
    await c.brokers[y].wait_ready()
    return m, x, y, start, frozen_max


async def test_issue_13_a_torn_new_master_stays_up_unelected_and_catches_up(
    cluster: HaCluster,
) -> None:
    """The crash loop, deterministic: the torn replica restarts below its epoch's start, is
    never made master again (it stays up and says why), a replica that holds the data is
    elected once one is back, the torn one catches up, nothing acknowledged is lost, and the
    epoch files of all replicas agree."""
    c = cluster
    acked = Acked()
    m, x, y, start, _ = await elect_then_tear(c, acked, lagging=False)
    st = await c.status(y)
    assert st is not None and st["maxOffset"] < start
    assert st["catchUp"] is not None and st["catchUp"]["offset"] == start
    assert st["role"] != "MASTER"
    # With the holders gone (one dead, one frozen), nobody may serve, and everyone says why.
    await wait_log(c, y, "election refused")
    assert "must catch up to offset" in await controller_says(c)
    assert c.brokers[y].alive
    assert "EpochConflictError" not in c.brokers[y].log.read_text()
    # The replicas that hold the data come back: one is elected, the torn one catches up.
    c.brokers[x].signal(signal.SIGCONT)
    c.brokers[m].start()
    await c.brokers[m].wait_ready()
    master = await c.master(exclude=y, timeout_s=60)
    await wait_until(
        c,
        "the torn replica caught up",
        lambda s: (
            y in s
            and s[y]["catchUp"] is None
            and s[y]["role"] == "SLAVE"
            and same_log(s, [master, y])
        ),
    )
    assert await send_values(c.ns_addrs[0], TOPIC, [f"c{i}" for i in range(20)], acked) == []
    got = await read_all(c.ns_addrs[0], TOPIC, timeout_s=60)
    assert not set(acked.values) - set(got), "acknowledged messages lost"
    states = await wait_until(c, "all three in sync", lambda s: same_log(s, [0, 1, 2]) and s)
    assert states[0]["epochList"] == states[1]["epochList"] == states[2]["epochList"]


async def test_issue_13_data_only_the_torn_replica_had_is_never_cut_away(
    cluster: HaCluster,
) -> None:
    """The torn replica still holds acknowledged writes the only other live replica lacks:
    electing that replica would make the torn one cut them at its handshake. The group stays
    masterless and says why until a replica that holds everything is back; then nothing
    acknowledged is lost."""
    c = cluster
    acked = Acked()
    m, x, y, start, frozen_max = await elect_then_tear(c, acked, lagging=True)
    c.brokers[x].start()
    await c.brokers[x].wait_ready()
    torn = await c.status(y)
    assert torn is not None and frozen_max < torn["maxOffset"] < start
    await wait_log(c, y, "election refused")
    states = await statuses(c, [x, y])
    # Once the resumed replica heartbeats again, the controller names it as not holding it.
    with trio.fail_after(60):
        while f"{states[x]['brokerId']} at {frozen_max}" not in (why := await controller_says(c)):
            await trio.sleep(0.2)
    assert "must catch up to offset" in why
    assert all(s["role"] != "MASTER" for s in states.values())
    assert states[y]["maxOffset"] == torn["maxOffset"], "the torn replica cut its data"
    c.brokers[m].start()
    await c.brokers[m].wait_ready()
    master = await c.master(timeout_s=60)
    assert master == m, c.logs()
    got = await read_all(c.ns_addrs[0], TOPIC, timeout_s=60)
    assert not set(acked.values) - set(got), "acknowledged messages lost"
    await wait_until(c, "all three in sync", lambda s: same_log(s, [0, 1, 2]))


async def test_a_classic_master_that_lost_durable_data_stays_down_and_its_slave_keeps_it(
    tmp_path: Path,
) -> None:
    """Classic mode has no election: a master whose disk lost bytes it had made durable went
    online anyway, and its slave cut those acknowledged bytes at the handshake to follow it
    (probe: SEND_OK writes lost in classic and acting-master campaigns). It stays down now,
    saying why; the slave keeps every byte and serves the reads."""
    c = HaCluster(tmp_path, replicas=2, controller_mode=False)
    try:
        await c.start()
        # a SYNC_MASTER answers SLAVE_NOT_AVAILABLE until its slave is there
        await wait_until(
            c, "the slave connected", lambda s: 1 in s and s[1].get("slaveState") == "TRANSFER"
        )
        acked = Acked()
        values = [f"v{i}" for i in range(40)]
        assert await send_values(c.ns_addrs[0], TOPIC, values, acked) == []
        states = await wait_until(c, "the slave caught up", lambda s: same_log(s, [0, 1]) and s)
        end = int(states[0]["maxOffset"])
        c.brokers[0].stop()  # a clean stop: its checkpoint says every byte is durable
        tear(c.tmp / "broker-0", end // 2, end)  # then the disk loses the second half
        c.brokers[0].start()
        said = "Not taking the master role"
        await wait_until(
            c,
            "the restarted master decided",
            lambda s: 0 in s and (s[0]["role"] == "MASTER" or said in c.brokers[0].log.read_text()),
        )
        got = await read_all(c.ns_addrs[0], TOPIC, timeout_s=60)
        assert not set(acked.values) - set(got), "acknowledged messages lost"
        assert said in c.brokers[0].log.read_text()
        st = await c.status(0)
        assert st is not None and st["role"] != "MASTER" and st["maxOffset"] < end, st
        st = await c.status(1)
        assert st is not None and st["maxOffset"] == end, st
    finally:
        c.stop()


def _log_bytes(store_root: Path, end: int) -> bytes:
    """The commitlog's bytes [0, end) as the files hold them."""
    out = bytearray()
    segs = sorted(
        (int(p.name), p) for p in (store_root / "commitlog").iterdir() if p.name.isdigit()
    )
    for base, path in segs:
        if base >= end:
            break
        out += path.read_bytes()[: end - base]
    return bytes(out[:end])


async def test_a_classic_slave_ahead_of_a_restarted_master_is_cut_not_left_diverged(
    tmp_path: Path,
) -> None:
    """A classic master loses its unflushed tail (a power loss, ASYNC flush: it owes nothing)
    that its slave had received, restarts and writes past the slave's end before the slave
    reconnects. With epoch 1 for ever nothing was cut (same epoch, the slave behind): the
    slave kept its copies of the lost bytes under the master's new ones and every transfer
    after failed (probe). A new epoch at each start: the slave is cut to the master's restart
    point and then holds exactly the master's log."""
    from test_ha_controller import send_codes_direct

    c = HaCluster(tmp_path, replicas=2, controller_mode=False, broker=NEVER_FLUSH)
    try:
        await c.start()
        await wait_until(
            c, "the slave connected", lambda s: 1 in s and s[1].get("slaveState") == "TRANSFER"
        )
        assert (
            await send_codes_direct(c.broker_addr(0), [f"a{i}" for i in range(40)])
            == [Resp.SUCCESS] * 40
        )
        states = await wait_until(c, "the slave caught up", lambda s: same_log(s, [0, 1]) and s)
        end = int(states[0]["maxOffset"])
        c.brokers[1].stop()
        c.brokers[0].kill()
        tear(c.tmp / "broker-0", end // 2, end)  # never flushed: lost in the power loss
        c.brokers[0].start()
        await c.brokers[0].wait_ready()
        st = await c.status(0)
        assert st is not None and st["role"] == "MASTER" and st["maxOffset"] < end, st
        while (st := await c.status(0)) is not None and st["maxOffset"] <= end:
            codes = await send_codes_direct(c.broker_addr(0), ["b" * 200] * 10)
            assert set(codes) <= {Resp.SUCCESS, Resp.SLAVE_NOT_AVAILABLE}, codes
        c.brokers[1].start()
        await c.brokers[1].wait_ready()
        states = await wait_until(c, "the slave caught up", lambda s: same_log(s, [0, 1]) and s)
        upto = int(states[0]["maxOffset"])
        assert _log_bytes(c.tmp / "broker-0", upto) == _log_bytes(c.tmp / "broker-1", upto)
    finally:
        c.stop()
