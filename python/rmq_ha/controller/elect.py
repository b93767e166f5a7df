"""Master election policy (RocketMQ's DefaultElectPolicy) and the liveness view it reads.

The state machine tracks no time: whoever drives it (the heartbeat manager of the Trio role, or
the simulator) passes a `LiveView`, a snapshot of the controller's heartbeat table at some
instant. A broker missing from the view is dead.

Order among candidates, best first (DefaultElectPolicy's comparator, confirmed in 5.3.3/HEAD):
higher epoch, then higher maxOffset, then LOWER electionPriority (brokerElectionPriority,
default Integer.MAX_VALUE; lower is preferred), then, our addition, lower broker id, so the
choice never depends on set iteration order. The values are compared as Python ints, never as
a difference cast to int, which is RocketMQ #10578 (a replica 2**31 bytes behind could win).

Eligibility (ours, issue 13; the argument is in docs/ha.md): a replica whose log ends below
what it is known to have held (it lost its unflushed tail, or recovery cut a damaged record)
reports `catchUpOffset`/`catchUpEpoch` in its heartbeat and is never elected, not even as the
live old master, until it has caught up from a replica that has the data. When every member
of the SyncStateSet is alive but must catch up, the group is not left masterless for ever: a
*recovery election* picks, from all replicas, the best one whose log covers what every member
is known to have held (its last epoch at least the member's catch-up epoch, its max offset at
least the member's catch-up offset). If a member is down, the group waits for it (it may hold
acknowledged writes nobody else has), as it does when the whole set is down.

Hearing (ours): a replica whose heartbeats reach the controller but whose answers do not come
back (a one-way partition) says so in its heartbeat (`unansweredMs`, how long this controller
has not answered it). It is not chosen as a *new* master while that exceeds half its heartbeat
timeout, nor while its last heartbeat is older than that (the other side of a one-way cut: its
heartbeats stopped arriving, and it counts as alive until it expires): it would never learn
that it was elected, and since the new master's SyncStateSet is itself alone, nobody else
could then be elected either, so the group would stay masterless for as long as the partition
lasts. A live old master that cannot hear stays master (electing another would not reach it
either, and it may be serving); such a replica is still alive, so it still blocks a recovery
election as a member of the set.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from rmq_ha.controller.state import BrokerSet, ControllerState

DEFAULT_ELECTION_PRIORITY = 2**31 - 1  # BrokerConfig.brokerElectionPriority (Integer.MAX_VALUE)


@dataclass(frozen=True)
class BrokerLiveInfo:
    """What the controller last heard from one replica (BROKER_HEARTBEAT, code 904)."""

    alive: bool
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = DEFAULT_ELECTION_PRIORITY
    last_heartbeat_ms: int = 0
    #: The replica once held every byte below this offset and lost some of them: not
    #: electable until its max offset is back at it (None: nothing lost).
    catch_up_offset: int | None = None
    #: The epoch of the last byte below `catch_up_offset` in the replica's epoch history.
    catch_up_epoch: int = 0
    #: False when the replica reports that this controller's answers stopped reaching it
    #: (see the module doc): alive, but not a candidate for a new master.
    hears_controller: bool = True

    @property
    def electable(self) -> bool:
        return self.alive and self.catch_up_offset is None

    @property
    def candidate(self) -> bool:
        """Electable, and would learn that it was elected."""
        return self.electable and self.hears_controller

    def covers(self, other: BrokerLiveInfo) -> bool:
        """Whether this replica's log holds what `other` must catch up to: the same history
        up to `other.catch_up_offset` (see the module doc)."""
        if other.catch_up_offset is None:
            return True
        return self.epoch >= other.catch_up_epoch and self.max_offset >= other.catch_up_offset


class BrokerKey(NamedTuple):
    cluster_name: str
    broker_name: str
    broker_id: int


LiveView = Mapping[BrokerKey, BrokerLiveInfo]
LiveInfoFn = Callable[[int], "BrokerLiveInfo | None"]


def live_info_fn(live: LiveView, bs: BrokerSet) -> LiveInfoFn:
    """The heartbeat entries of one broker set, by broker id."""
    return lambda broker_id: live.get(BrokerKey(bs.cluster_name, bs.broker_name, broker_id))


def is_alive(info: BrokerLiveInfo | None) -> bool:
    return info is not None and info.alive


def is_electable(info: BrokerLiveInfo | None) -> bool:
    return info is not None and info.electable


class Election(NamedTuple):
    """The policy's answer: the new master (None: nobody), how it was chosen, and why not
    when nobody was."""

    master: int | None
    recovery: bool = False
    why_none: str = ""


def rank_key(broker_id: int, info: BrokerLiveInfo) -> tuple[int, int, int, int]:
    """Sort key, smallest = best candidate."""
    return (-info.epoch, -info.max_offset, info.election_priority, broker_id)


def default_elect_policy(
    *,
    sync_state_set: Collection[int],
    replicas: Collection[int],
    unclean: bool,
    old_master: int | None,
    prefer_broker_id: int | None,
    live_info: LiveInfoFn,
) -> Election:
    """DefaultElectPolicy.elect plus the eligibility rule of the module doc: try the
    SyncStateSet; then, when every member is alive but must catch up, a recovery election
    among all `replicas` that cover them; then (only with `unclean`, RocketMQ's
    enableElectUncleanMaster) every electable replica."""
    chosen = _try_elect(sync_state_set, old_master, prefer_broker_id, live_info)
    if chosen is not None:
        return Election(chosen)
    recovered = _recovery_elect(sync_state_set, replicas, prefer_broker_id, live_info)
    if recovered is not None:
        return Election(recovered, recovery=True)
    if unclean:
        chosen = _try_elect(replicas, old_master, prefer_broker_id, live_info)
        if chosen is not None:
            return Election(chosen)
    return Election(None, why_none=_why_none(sync_state_set, replicas, live_info))


def _recovery_elect(
    sync_state_set: Collection[int],
    replicas: Collection[int],
    prefer: int | None,
    live_info: LiveInfoFn,
) -> int | None:
    """Every member alive and none electable (they all lost data): the best replica that
    covers what each of them is known to have held."""
    members = [m for i in sync_state_set if (m := live_info(i)) is not None and m.alive]
    if not members or len(members) < len(sync_state_set):
        return None  # a member that is down may hold writes nobody else has: wait for it
    if any(m.electable for m in members):
        return None  # a clean candidate exists (a designation that named another failed)
    pool = {
        i: info
        for i in replicas
        if (info := live_info(i)) is not None
        and info.candidate
        and all(info.covers(m) for m in members)
    }
    if not pool:
        return None
    if prefer is not None:
        return prefer if prefer in pool else None
    return min(pool, key=lambda i: rank_key(i, pool[i]))


def _why_none(
    sync_state_set: Collection[int], replicas: Collection[int], live_info: LiveInfoFn
) -> str:
    """Why no replica can be master, for the answer's remark and the logs."""
    parts = []
    for i in sorted(sync_state_set):
        info = live_info(i)
        if info is None or not info.alive:
            parts.append(f"SyncStateSet member {i} is down")
        elif info.catch_up_offset is not None:
            parts.append(
                f"SyncStateSet member {i} lost data and must catch up to offset "
                f"{info.catch_up_offset} (epoch {info.catch_up_epoch}); it is at "
                f"{info.max_offset} (epoch {info.epoch})"
            )
        elif not info.hears_controller:
            parts.append(
                f"SyncStateSet member {i} does not hear this controller (its last heartbeat "
                "is old, or says our answers do not reach it: a one-way partition?)"
            )
    if not sync_state_set:
        parts.append("the SyncStateSet is empty")
    others = []
    for i in sorted(set(replicas) - set(sync_state_set)):
        info = live_info(i)
        if info is not None and info.alive:
            others.append(f"{i} at {info.max_offset} (epoch {info.epoch})")
    if others:
        parts.append(
            "live replicas outside it, not electable without enableElectUncleanMaster (they may"
            " lack acknowledged writes): " + ", ".join(others)
        )
    return "; ".join(parts) or "the SyncStateSet is empty"


def _try_elect(
    pool: Collection[int],
    old_master: int | None,
    prefer: int | None,
    live_info: LiveInfoFn,
) -> int | None:
    alive = {i: info for i in pool if (info := live_info(i)) is not None and info.electable}
    # A live old master stays unless an admin designated someone else: no needless failover.
    if old_master in alive and prefer in (None, old_master):
        return old_master
    # A new master must be able to hear that it was elected (module doc).
    alive = {i: info for i, info in alive.items() if info.hears_controller}
    if not alive:
        return None
    # A designated broker is honoured only if it is a candidate; otherwise nobody is.
    if prefer is not None:
        return prefer if prefer in alive else None
    return min(alive, key=lambda i: rank_key(i, alive[i]))


def scan_need_reelect(state: ControllerState, live: LiveView) -> list[str]:
    """Broker sets whose master is dead, or alive but lost data it must catch up (issue 13),
    while some replica lives (scanNeedReelectBrokerSets).

    The leader runs this every scanInactiveMasterInterval and fires a controller-triggered
    election for each. A dead slave never lists a set (the RocketMQ #8380 scenario).
    """
    names = []
    for name, bs in sorted(state.broker_sets.items()):
        info = live_info_fn(live, bs)
        if bs.master_broker_id is None or is_electable(info(bs.master_broker_id)):
            continue
        if any(is_alive(info(i)) for i in bs.replicas):
            names.append(name)
    return names
