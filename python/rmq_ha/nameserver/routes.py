"""The name server's route tables (RocketMQ's RouteInfoManager), pure: time is passed in.

* clusters: cluster name -> broker names
* groups: broker name -> its cluster and replicas (broker id -> address)
* topics: topic -> broker name -> queue data (read/write queue counts, perm, sys flag)
* live: broker address -> last heartbeat, heartbeat timeout, data version, HA address

A master's registration carries its topic configs; slaves' registrations do not change topics,
except the "prime slave"'s in a slave-acting-master group (RIP-32, `support_acting_master`): the
live slave with the smallest id registers its topics with the write bit cleared when the group
has no master. Brokers whose heartbeat timed out are removed by `scan` (and the server removes
a broker whose connection closed, like RocketMQ's BrokerHousekeepingService).

Slave acting master: when a group with enableActingMaster loses its master, every queue data of
the group loses its write bit, and `route` presents the smallest-id live replica as id 0, so
clients read from it (perm 4, read-only) and send elsewhere. Topics named
`rmq_sys_SYNC_BROKER_MEMBER_<brokerName>` are never rewritten: brokers of old name servers read
their member group from that route. When a group's smallest id changes, `register`,
`unregister` and `scan` say so (`MinIdChange`), and the server sends
NOTIFY_MIN_BROKER_ID_CHANGE (905) when notifyMinBrokerIdChanged is on.

Routes come out as the protocol's `TopicRouteData` model, which emits RocketMQ's JSON shape
(standard JSON: the broker-id map has string keys, which every client parses).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from rmq_ha.protocol.models import (
    BrokerData,
    BrokerMemberGroup,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicRouteData,
)

MASTER_ID = 0
SYNC_BROKER_MEMBER_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"
PERM_WRITE_BIT = 2
PERM_READ_BIT = 4


@dataclass(frozen=True)
class MinIdChange:
    """A group's smallest live broker id changed: who to tell, and what (the 905 header)."""

    broker_name: str
    min_id: int
    min_addr: str
    offline_addr: str | None
    ha_addr: str | None
    recipients: tuple[str, ...]


@dataclass
class Live:
    cluster: str
    broker_name: str
    broker_id: int
    last_update_ms: int
    timeout_ms: int
    data_version: DataVersion
    ha_server_addr: str = ""


@dataclass
class RegisterResult:
    master_addr: str | None
    ha_server_addr: str | None
    refused: bool = False  # another live broker holds the id with a later stateVersion
    min_change: MinIdChange | None = None


@dataclass
class RouteTable:
    default_timeout_ms: int = 120_000
    clusters: dict[str, set[str]] = field(default_factory=dict)
    groups: dict[str, BrokerData] = field(default_factory=dict)
    topics: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    live: dict[str, Live] = field(default_factory=dict)

    def register(
        self,
        *,
        cluster: str,
        addr: str,
        broker_name: str,
        broker_id: int,
        now_ms: int,
        ha_server_addr: str = "",
        topics: dict[str, QueueData] | None = None,
        data_version: DataVersion | None = None,
        timeout_ms: int | None = None,
        enable_acting_master: bool = False,
        zone_name: str | None = None,
    ) -> RegisterResult:
        self.clusters.setdefault(cluster, set()).add(broker_name)
        group = self.groups.get(broker_name)
        first = group is None
        if group is None:
            group = BrokerData(cluster=cluster, broker_name=broker_name)
            self.groups[broker_name] = group
        old_min = min(group.broker_addrs) if group.broker_addrs else None
        group.enable_acting_master = enable_acting_master
        group.zone_name = zone_name
        dv = data_version or DataVersion()
        held_by = group.broker_addrs.get(broker_id)
        if held_by is not None and held_by != addr:
            holder = self.live.get(held_by)
            if holder is not None and holder.data_version.state_version > dv.state_version:
                # RocketMQ #6316: two brokers claim one id (an old master that came back, say);
                # the one registered in the later epoch (stateVersion) keeps it.
                self.live.pop(addr, None)
                return RegisterResult(None, None, refused=True)
        # One address has one id: a slave promoted to master re-registers with id 0 at the same
        # address, and its old entry must go.
        for bid, a in list(group.broker_addrs.items()):
            if a == addr and bid != broker_id:
                del group.broker_addrs[bid]
        group.broker_addrs[broker_id] = addr
        prev = self.live.get(addr)
        changed = prev is None or prev.data_version != dv
        # The prime slave: no master, and the smallest id of the group (RIP-32).
        prime_slave = (
            enable_acting_master
            and broker_id != MASTER_ID
            and MASTER_ID not in group.broker_addrs
            and broker_id == min(group.broker_addrs)
        )
        if (broker_id == MASTER_ID or prime_slave) and topics is not None and (changed or first):
            for topic, qd in topics.items():
                qd = copy.copy(qd)
                qd.broker_name = broker_name
                if prime_slave:
                    qd.perm &= ~PERM_WRITE_BIT
                self.topics.setdefault(topic, {})[broker_name] = qd
        self.live[addr] = Live(
            cluster,
            broker_name,
            broker_id,
            now_ms,
            timeout_ms if timeout_ms and timeout_ms > 0 else self.default_timeout_ms,
            dv,
            ha_server_addr,
        )
        change = None
        if old_min is None or broker_id < old_min:
            # A smaller id joined: everyone but the new minimum is told (RocketMQ's rule).
            others = tuple(a for b, a in sorted(group.broker_addrs.items()) if a != addr)
            if old_min is not None or not others:
                change = MinIdChange(
                    broker_name, broker_id, addr, None, ha_server_addr or None, others or (addr,)
                )
        if broker_id == MASTER_ID:
            return RegisterResult(None, None, min_change=change)
        master = group.broker_addrs.get(MASTER_ID)
        master_live = self.live.get(master) if master else None
        return RegisterResult(
            master, master_live.ha_server_addr if master_live else None, min_change=change
        )

    def heartbeat(self, addr: str, now_ms: int) -> bool:
        """A light heartbeat; False when the broker is not registered (it must register)."""
        lv = self.live.get(addr)
        if lv is None:
            return False
        lv.last_update_ms = now_ms
        return True

    def data_version_changed(self, addr: str, data_version: DataVersion, now_ms: int) -> bool:
        """QUERY_DATA_VERSION: also counts as a heartbeat."""
        lv = self.live.get(addr)
        if lv is None:
            return True
        lv.last_update_ms = now_ms
        return lv.data_version != data_version

    def unregister(self, addr: str) -> MinIdChange | None:
        """Drops a broker. When it was its group's master (id 0) and the group lives on, every
        queue data of the group loses its write bit (RIP-32: the group is read-only until the
        master is back). Returns the group's min-id change, if any."""
        lv = self.live.pop(addr, None)
        change = None
        for name, group in list(self.groups.items()):
            old_min = min(group.broker_addrs) if group.broker_addrs else None
            removed = [bid for bid, a in group.broker_addrs.items() if a == addr]
            for bid in removed:
                del group.broker_addrs[bid]
            if removed and group.broker_addrs:
                if MASTER_ID in removed:
                    for qs in self.topics.values():
                        qd = qs.get(name)
                        if qd is not None:
                            qd.perm &= ~PERM_WRITE_BIT
                new_min = min(group.broker_addrs)
                if new_min != old_min:
                    new_addr = group.broker_addrs[new_min]
                    new_live = self.live.get(new_addr)
                    change = MinIdChange(
                        name,
                        new_min,
                        new_addr,
                        addr,
                        (new_live.ha_server_addr or None) if new_live else None,
                        tuple(a for _, a in sorted(group.broker_addrs.items())),
                    )
            if not group.broker_addrs:
                del self.groups[name]
                names = self.clusters.get(group.cluster)
                if names is not None:
                    names.discard(name)
                    if not names:
                        del self.clusters[group.cluster]
                for topic in list(self.topics):
                    self.topics[topic].pop(name, None)
                    if not self.topics[topic]:
                        del self.topics[topic]
        del lv
        return change

    def credit(self, stall_ms: int, now_ms: int) -> None:
        """This name server did not run for `stall_ms` (clock.StallCredit): that time does not
        count against the brokers' heartbeats."""
        for lv in self.live.values():
            lv.last_update_ms = min(now_ms, lv.last_update_ms + stall_ms)

    def scan(self, now_ms: int) -> list[tuple[str, MinIdChange | None]]:
        """Unregisters brokers whose heartbeat expired; returns their addresses and the min-id
        changes that caused."""
        expired = [a for a, lv in self.live.items() if now_ms - lv.last_update_ms > lv.timeout_ms]
        return [(a, self.unregister(a)) for a in expired]

    def route(self, topic: str, *, acting_master: bool = False) -> TopicRouteData | None:
        """The topic's route, or None when it has none (TOPIC_NOT_EXIST). With
        `acting_master` (the name server's supportActingMaster), a group with acting master
        enabled, no id 0 and a read-only queue data shows its smallest-id replica as id 0
        (RocketMQ's pickupTopicRouteData)."""
        queues = self.topics.get(topic)
        if not queues:
            return None
        brokers = [copy.deepcopy(self.groups[n]) for n in sorted(queues) if n in self.groups]
        if not brokers:
            return None
        if acting_master and not topic.startswith(SYNC_BROKER_MEMBER_PREFIX):
            for bd in brokers:
                qd = queues.get(bd.broker_name)
                if (
                    bd.enable_acting_master
                    and bd.broker_addrs
                    and MASTER_ID not in bd.broker_addrs
                    and qd is not None
                    and not qd.perm & PERM_WRITE_BIT
                ):
                    bd.broker_addrs[MASTER_ID] = bd.broker_addrs.pop(min(bd.broker_addrs))
        return TopicRouteData(
            queue_datas=[copy.copy(q) for _, q in sorted(queues.items())],
            broker_datas=brokers,
        )

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={n: copy.deepcopy(g) for n, g in self.groups.items()},
            cluster_addr_table={c: set(ns) for c, ns in self.clusters.items()},
        )

    def member_group(self, cluster: str, broker_name: str) -> BrokerMemberGroup:
        """The group's replicas for GET_BROKER_MEMBER_GROUP (empty if unknown)."""
        g = self.groups.get(broker_name)
        addrs = dict(g.broker_addrs) if g is not None and g.cluster == cluster else {}
        return BrokerMemberGroup(cluster=cluster, broker_name=broker_name, broker_addrs=addrs)

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """Drops the topic's queues: of every broker, or of `cluster`'s brokers only."""
        queues = self.topics.get(topic)
        if queues is None:
            return
        if cluster is None:
            del self.topics[topic]
            return
        for name in self.clusters.get(cluster, set()):
            queues.pop(name, None)
        if not queues:
            del self.topics[topic]

    def set_write_perm(self, broker_name: str, writable: bool) -> int:
        """mqadmin wipeWritePerm / addWritePerm: every queue data of the group loses its write
        bit, or gets read and write back (RocketMQ sets perm to 6, whatever it was). Returns
        how many topics changed. A registration that carries new topic configs (a changed
        data version) sets the perms the broker sends again, as in RocketMQ."""
        n = 0
        for queues in self.topics.values():
            qd = queues.get(broker_name)
            if qd is None:
                continue
            qd.perm = qd.perm & ~PERM_WRITE_BIT if not writable else PERM_READ_BIT | PERM_WRITE_BIT
            n += 1
        return n

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self.clusters.get(cluster, set())
        return sorted(t for t, qs in self.topics.items() if names & qs.keys())
