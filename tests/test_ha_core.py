"""HaCore, the master's pure replication bookkeeping: each rule named after the RocketMQ issue
whose failure it prevents (reference section 2.7-2.9)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_ha.broker.ha.core import NO_LIMIT, HaCore, Replica


def core(members: set[int], all_ack: bool = True, **kw: int) -> HaCore:
    return HaCore(self_id=1, all_ack=all_ack, sync_state_set=frozenset(members), **kw)


def test_without_all_ack_or_alone_confirm_is_the_max_offset() -> None:
    """#7656: allAckInSyncStateSet=false (or a one-member set) exposes everything written."""
    c = core({1, 2}, all_ack=False)
    assert c.recompute_confirm(500) == 500
    alone = core({1})
    assert alone.recompute_confirm(700) == 700


def test_confirm_is_the_minimum_ack_over_the_set() -> None:
    c = core({1, 2, 3})
    c.connected(2, False, 0)
    c.connected(3, False, 0)
    c.acked(3, 200, 500, 1)
    c.acked(2, 300, 500, 1)
    assert c.confirm == 200
    c.acked(3, 450, 500, 2)
    assert c.confirm == 300


def test_a_member_without_a_connection_freezes_confirm() -> None:
    """#6662: an isolated master with one of two slaves must not move the confirm offset."""
    c = core({1, 2, 3})
    c.connected(2, False, 0)
    c.connected(3, False, 0)
    c.acked(2, 100, 100, 1)
    c.acked(3, 100, 100, 1)
    assert c.confirm == 100
    c.disconnected(3)
    c.acked(2, 400, 400, 2)
    assert c.confirm == 100
    assert not c.write_acked(400)


def test_fresh_connections_without_an_ack_are_skipped() -> None:
    """#6728: a connection that has not acked yet (-1) does not drag confirm to -1."""
    c = core({1, 2, 3})
    c.connected(2, False, 0)
    c.connected(3, False, 0)
    c.acked(2, 250, 300, 1)
    assert c.confirm == 250
    assert c.replicas[3].ack == -1


def test_confirm_never_goes_backwards_when_a_slave_reconnects_lower() -> None:
    c = core({1, 2})
    c.connected(2, False, 0)
    c.acked(2, 300, 300, 1)
    c.disconnected(2)
    c.connected(2, False, 2)
    c.acked(2, 100, 300, 3)
    assert c.confirm == 300


def test_expansion_is_proposed_and_counts_before_the_controller_answers() -> None:
    """#5663: while an expansion is pending, the union of old and new set must ack a write,
    and the in-sync count is the larger set's."""
    c = core({1, 2})
    c.connected(2, False, 0)
    c.connected(3, False, 0)
    c.acked(2, 100, 100, 1)
    proposal = c.acked(3, 100, 100, 1)
    assert proposal == frozenset({1, 2, 3})
    assert c.effective_set() == {1, 2, 3} and c.in_sync_count() == 3
    c.acked(2, 200, 200, 2)
    assert not c.write_acked(200)  # member 3 (only proposed) has not acked 200
    c.acked(3, 200, 200, 2)
    assert c.write_acked(200)
    assert c.apply_set(frozenset({1, 2, 3}), 5, 200)
    assert c.proposed is None and c.sync_state_set == {1, 2, 3}
    assert not c.apply_set(frozenset({1}), 4, 200)  # stale epoch ignored


def test_expansion_needs_confirm_and_the_current_epoch_start() -> None:
    c = core({1}, epoch_start_offset=1000)
    c.connected(2, False, 0)
    assert c.acked(2, 900, 1200, 1) is None  # below the epoch start
    assert c.acked(2, 1200, 1200, 2) == frozenset({1, 2})


def test_async_learners_never_join_the_set() -> None:
    c = core({1})
    c.connected(2, True, 0)
    assert c.acked(2, 100, 100, 1) is None
    assert c.effective_set() == {1}


def test_shrink_drops_lagging_and_disconnected_members_but_never_self() -> None:
    c = core({1, 2, 3}, max_not_catchup_ms=1000)
    c.connected(2, False, 0)
    c.connected(3, False, 0)
    c.transferring(2, 500, 10)
    c.acked(2, 500, 500, 20)  # caught up at 20
    c.transferring(3, 500, 10)
    c.acked(3, 100, 500, 20)  # behind since it connected at 0
    assert c.maybe_shrink(900) is None
    c.idle(2, 1400)  # nothing left to send to 2: caught up now
    assert c.maybe_shrink(1500) == frozenset({1, 2})
    c.cancel_proposal()
    c.disconnected(2)
    assert c.maybe_shrink(1500) == frozenset({1})


def test_in_sync_replicas_without_all_ack() -> None:
    c = core({1}, all_ack=False, in_sync_replicas=2)
    c.connected(2, False, 0)
    assert not c.write_acked(100)
    c.acked(2, 100, 100, 1)
    assert c.write_acked(100) and not c.write_acked(101)


def test_an_empty_members_ack_of_zero_holds_the_confirm_offset() -> None:
    """An ack of 0 is an ack (an empty member holds nothing): only a connection with no ack
    at all (-1) is skipped (#6728). Found by the group simulator: skipping 0 let the confirm
    offset pass bytes a member lacked, and consumers saw messages a handshake later cut."""
    c = core({1, 2, 3})
    c.connected(2, False, 0)
    c.connected(3, False, 0)
    c.acked(3, 0, 300, 1)
    c.acked(2, 250, 300, 1)
    assert c.confirm == 0
    c.acked(3, 120, 300, 2)
    assert c.confirm == 120


def test_min_in_sync_replicas_holds_acks_when_a_proposed_set_falls_back() -> None:
    """minInSyncReplicas=2: a write accepted while {1, 2} was proposed (in-sync count 2) must
    not be acknowledged by the master alone once the controller refused the proposal (group
    simulator seed 5147 acknowledged such a write, then lost it with the master's tail)."""
    c = core({1}, min_in_sync_replicas=2)
    c.connected(2, False, 0)
    assert c.acked(2, 0, 0, 1) == frozenset({1, 2})
    assert c.in_sync_count() == 2
    assert not c.write_acked(100)  # the member has not acked it yet
    c.cancel_proposal()
    assert not c.write_acked(100), "acknowledged by the master alone"
    assert c.apply_set(frozenset({1, 2}), 2, 100)
    assert not c.write_acked(100)
    c.acked(2, 100, 100, 3)
    assert c.write_acked(100)


def test_a_replica_that_qualified_during_a_pending_proposal_is_taken_in_later() -> None:
    """Two slaves of an idle master ack at their handshakes while the first expansion is
    pending: the second gets no proposal then, and no ack follows for a whole
    haSendHeartbeatInterval. The periodic check proposes it (seen as a 3-replica group
    stuck at 2 members with a 600 s HA heartbeat)."""
    c = core({1})
    c.connected(2, False, 0)
    c.connected(3, False, 0)
    assert c.acked(2, 0, 0, 1) == frozenset({1, 2})
    assert c.acked(3, 0, 0, 1) is None  # one proposal at a time
    assert c.maybe_expand() is None
    assert c.apply_set(frozenset({1, 2}), 2, 0)
    assert c.maybe_expand() == frozenset({1, 2, 3})
    assert c.maybe_expand() is None  # pending


def test_maybe_expand_skips_learners_and_replicas_behind() -> None:
    c = core({1, 2})
    c.connected(2, False, 0)
    c.connected(3, True, 0)
    c.connected(4, False, 0)
    c.acked(2, 500, 500, 1)
    c.acked(3, 500, 500, 1)
    c.acked(4, 100, 500, 1)
    assert c.confirm == 500
    assert c.maybe_expand() is None


# ---- the ack watermark (issue 16: producers released per change, not per ack) ---------------


@st.composite
def ha_states(draw: st.DrawFn) -> HaCore:
    ids = draw(st.lists(st.integers(2, 6), unique=True, max_size=4))
    members = frozenset(draw(st.lists(st.sampled_from([1, *ids]), unique=True)) or [1])
    core = HaCore(
        self_id=1,
        all_ack=draw(st.booleans()),
        in_sync_replicas=draw(st.integers(1, 4)),
        min_in_sync_replicas=draw(st.integers(1, 4)),
        sync_state_set=members,
    )
    if draw(st.booleans()) and ids:
        core.proposed = frozenset(draw(st.lists(st.sampled_from([1, *ids]), unique=True)))
    for rid in ids:
        if draw(st.booleans()):  # connected (else a member without a connection)
            core.replicas[rid] = Replica(rid, ack=draw(st.integers(-1, 50)))
    return core


@settings(max_examples=400, deadline=None)
@given(ha_states(), st.integers(0, 60))
def test_write_acked_is_exactly_at_or_below_the_watermark(core: HaCore, offset: int) -> None:
    assert core.write_acked(offset) == (offset <= core.ack_watermark())


def test_watermark_examples() -> None:
    core = HaCore(self_id=1, all_ack=True, sync_state_set=frozenset({1, 2, 3}))
    core.replicas = {2: Replica(2, ack=40), 3: Replica(3, ack=25)}
    assert core.ack_watermark() == 25
    del core.replicas[3]  # a member without a connection holds everything back
    assert core.ack_watermark() == -1
    single = HaCore(self_id=1, all_ack=False, in_sync_replicas=1)
    assert single.ack_watermark() == NO_LIMIT
    two = HaCore(self_id=1, all_ack=False, in_sync_replicas=2)
    two.replicas = {2: Replica(2, ack=7), 3: Replica(3, ack=9)}
    assert two.ack_watermark() == 9


async def test_master_wakes_only_acknowledged_writes_and_drops_timed_out_waiters(
    autojump_clock: object,
) -> None:
    """HaMaster's waiting producers (a heap by offset): an ack wakes the writes at or below the
    watermark and no others; producers that timed out do not pile up."""
    from typing import Any, cast

    import trio

    from rmq_ha.broker.ha.master import HaMaster

    c = HaCore(self_id=1, all_ack=True, sync_state_set=frozenset({1, 2}))
    c.replicas = {2: Replica(2, ack=0)}
    m = HaMaster(
        cast(Any, None),
        cast(Any, None),
        lambda: c,
        lambda _e: None,
        batch_bytes=1,
        heartbeat_interval_ms=1000,
        controller_mode=True,
    )
    # 300 writes time out (the slave never acks): their entries are dropped in bulk.
    async with trio.open_nursery() as n:
        for i in range(300):
            n.start_soon(m.wait_acked, 10 + i, 1.0)
    assert len(m._waiters) <= 150
    done: dict[int, bool] = {}

    async def wait(off: int) -> None:
        done[off] = await m.wait_acked(off, 100.0)

    async with trio.open_nursery() as n:
        for off in (100, 200, 300):
            n.start_soon(wait, off)
        await trio.sleep(1)
        c.replicas[2].ack = 250
        m.woke()
        await trio.sleep(1)
        assert done == {100: True, 200: True}
        c.replicas[2].ack = 300
        m.woke()
    assert done == {100: True, 200: True, 300: True}


async def test_writes_waiting_without_a_task_are_released_in_batches_and_expire(
    autojump_clock: object,
) -> None:
    """HaMaster.on_acked (the native send path's waits, issue 16): one `woke` releases every
    write at or below the watermark, in offset order; a replaced HaCore fails every write
    registered under the old one; a deadline fails a write; fired entries do not pile up."""
    from typing import Any, cast

    import trio

    from rmq_ha.broker.ha.master import HaMaster

    c = HaCore(self_id=1, all_ack=True, sync_state_set=frozenset({1, 2}))
    c.replicas = {2: Replica(2, ack=0)}
    core = [c]
    m = HaMaster(
        cast(Any, None),
        cast(Any, None),
        lambda: core[0],
        lambda _e: None,
        batch_bytes=1,
        heartbeat_interval_ms=1000,
        controller_mode=True,
    )
    got: list[tuple[int, bool]] = []

    def wait(off: int, timeout_s: float = 100.0) -> None:
        m.on_acked(off, timeout_s, lambda ok: got.append((off, ok)))

    async with trio.open_nursery() as n:
        n.start_soon(m.expire_loop)
        wait(0)  # acknowledged already: answered at once
        assert got == [(0, True)]
        for off in (300, 100, 200):
            wait(off)
        c.replicas[2].ack = 250
        m.woke()
        assert got[1:] == [(100, True), (200, True)]
        # a deadline
        wait(400, timeout_s=1.0)
        await trio.sleep(2)
        assert (400, False) in got and (300, True) not in got
        # 1,000 writes that time out while replication is stalled: the heap stays bounded
        for i in range(1000):
            wait(1000 + i, timeout_s=0.5)
            if i % 100 == 0:
                await trio.sleep(1)
        assert len(m._callbacks) < 300
        # a new HaCore (a new term): what waits under the old one fails, new writes wait
        core[0] = HaCore(self_id=1, all_ack=True, sync_state_set=frozenset({1, 2}))
        core[0].replicas = {2: Replica(2, ack=0)}
        core[0].epoch = c.epoch + 1
        wait(10)
        assert (300, False) in got
        m.woke()
        assert (10, True) not in got
        core[0].replicas[2].ack = 10
        m.woke()
        assert got[-1] == (10, True)
        n.cancel_scope.cancel()


def test_a_refused_expansion_is_not_proposed_again_on_every_ack() -> None:
    """Fault probe (one-way cut): a slave that replicates fine but whose heartbeats do not
    reach the controller ("replica 3 is not alive") drew a refused ALTER_SYNC_STATE_SET on
    every ack, 40 in 0.4 s. After a refusal, acks propose it again only a while later; a
    stale or unanswered proposal is not a refusal, and a refused shrink holds nothing back."""
    from rmq_ha.broker.ha.core import REFUSED_EXPANSION_BACKOFF_MS as WAIT

    c = core({1})
    c.connected(3, False, 0)
    assert c.acked(3, 0, 0, 10) == frozenset({1, 3})
    c.cancel_proposal(refused_at_ms=10)
    for t in range(11, 10 + WAIT, 50):
        assert c.acked(3, 0, 0, t) is None, t
    assert c.acked(3, 0, 0, 10 + WAIT) == frozenset({1, 3})
    c.cancel_proposal()  # not a refusal (stale, or no answer): the next ack proposes again
    assert c.acked(3, 0, 0, 11 + WAIT) == frozenset({1, 3})
    # a refused shrink does not delay expansions
    d = core({1, 2})
    d.connected(3, False, 0)
    d.proposed = frozenset({1})
    d.cancel_proposal(refused_at_ms=5)
    assert d.acked(3, 0, 0, 6) == frozenset({1, 2, 3})
