"""Master election policy (RocketMQ's DefaultElectPolicy) and the liveness view it reads.

The state machine tracks no time: whoever drives it (the heartbeat manager of the Trio role, or
the simulator) passes a `LiveView`, a snapshot of the controller's heartbeat table at some
instant. A broker missing from the view is dead.

Order among candidates, best first (DefaultElectPolicy's comparator, confirmed in 5.3.3/HEAD):
higher epoch, then higher maxOffset, then LOWER electionPriority (brokerElectionPriority,
default Integer.MAX_VALUE; lower is preferred), then, our addition, lower broker id, so the
choice never depends on set iteration order. The values are compared as Python ints, never as
a difference cast to int, which is RocketMQ #10578 (a replica 2**31 bytes behind could win).
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


def rank_key(broker_id: int, info: BrokerLiveInfo) -> tuple[int, int, int, int]:
    """Sort key, smallest = best candidate."""
    return (-info.epoch, -info.max_offset, info.election_priority, broker_id)


def default_elect_policy(
    *,
    sync_state_set: Collection[int],
    all_replicas: Collection[int] | None,
    old_master: int | None,
    prefer_broker_id: int | None,
    live_info: LiveInfoFn,
) -> int | None:
    """DefaultElectPolicy.elect: try the SyncStateSet, then (only when unclean election is on,
    signalled by `all_replicas` not None) every replica. None means no candidate."""
    chosen = _try_elect(sync_state_set, old_master, prefer_broker_id, live_info)
    if chosen is None and all_replicas is not None:
        chosen = _try_elect(all_replicas, old_master, prefer_broker_id, live_info)
    return chosen


def _try_elect(
    pool: Collection[int],
    old_master: int | None,
    prefer: int | None,
    live_info: LiveInfoFn,
) -> int | None:
    alive = {i: info for i in pool if (info := live_info(i)) is not None and info.alive}
    if not alive:
        return None
    # A live old master stays unless an admin designated someone else: no needless failover.
    if old_master in alive and prefer in (None, old_master):
        return old_master
    # A designated broker is honoured only if it is a candidate; otherwise nobody is.
    if prefer is not None:
        return prefer if prefer in alive else None
    return min(alive, key=lambda i: rank_key(i, alive[i]))


def scan_need_reelect(state: ControllerState, live: LiveView) -> list[str]:
    """Broker sets whose master is dead while some replica lives (scanNeedReelectBrokerSets).

    The leader runs this every scanInactiveMasterInterval and fires a controller-triggered
    election for each. A dead slave never lists a set (the RocketMQ #8380 scenario).
    """
    names = []
    for name, bs in sorted(state.broker_sets.items()):
        info = live_info_fn(live, bs)
        if bs.master_broker_id is None or is_alive(info(bs.master_broker_id)):
            continue
        if any(is_alive(info(i)) for i in bs.replicas):
            names.append(name)
    return names
