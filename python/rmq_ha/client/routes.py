"""Topic routes from the name servers (RocketMQ's MQClientInstance route tables).

A `RouteCache` asks a name server for GET_ROUTEINFO_BY_TOPIC when a topic is first used, on
demand (`update`), and for every known topic every pollNameServerInterval (`poll_forever`).
With several name servers it sticks to the one that answered last and moves to the next one
on a network error (a TOPIC_NOT_EXIST answer is an answer: it is not retried elsewhere).

From a route it derives:
* publish info: the writable queues of brokers that have a master (brokerId 0), ordered by
  broker name then queue id (topicRouteData2TopicPublishInfo), or the brokers named by the
  route's orderTopicConf;
* subscribe info: every readable queue (topicRouteData2TopicSubscribeInfo);
* broker addresses by name: the master (id 0) for writes, any replica for reads.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import trio

from rmq_ha.client.errors import RouteNotFoundError
from rmq_ha.errors import RemotingError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import GetRouteInfoRequestHeader
from rmq_ha.protocol.json_compat import BodyDecodeError
from rmq_ha.protocol.models import MASTER_ID, MessageQueue, QueueData, TopicRouteData
from rmq_ha.protocol.perm import is_readable, is_writeable

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TopicPublishInfo:
    topic: str
    queues: tuple[MessageQueue, ...]
    order_topic: bool = False
    #: Built from the auto-create default topic (TBW102) because the topic has no route yet.
    from_default_topic: bool = False

    @property
    def ok(self) -> bool:
        return bool(self.queues)


def publish_info(
    topic: str, route: TopicRouteData, *, from_default: bool = False
) -> TopicPublishInfo:
    """RocketMQ's topicRouteData2TopicPublishInfo."""
    if route.order_topic_conf:
        queues: list[MessageQueue] = []
        for item in route.order_topic_conf.split(";"):
            name, _, num = item.partition(":")
            if name and num.strip().isdigit():
                queues.extend(MessageQueue(topic, name, i) for i in range(int(num)))
        return TopicPublishInfo(topic, tuple(queues), order_topic=True)
    masters = {bd.broker_name for bd in route.broker_datas if MASTER_ID in bd.broker_addrs}
    queues = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if is_writeable(qd.perm) and qd.broker_name in masters:
            queues.extend(
                MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums)
            )
    return TopicPublishInfo(topic, tuple(queues), from_default_topic=from_default)


def subscribe_queues(topic: str, route: TopicRouteData) -> frozenset[MessageQueue]:
    """RocketMQ's topicRouteData2TopicSubscribeInfo: every readable queue."""
    return frozenset(
        MessageQueue(topic, qd.broker_name, i)
        for qd in route.queue_datas
        if is_readable(qd.perm)
        for i in range(qd.read_queue_nums)
    )


class RouteCache:
    def __init__(
        self,
        remoting: RemotingClient,
        namesrv_addrs: Sequence[str],
        *,
        timeout_s: float = 3.0,
        serialize_type: int = 0,
    ) -> None:
        if not namesrv_addrs:
            raise ValueError("at least one name server address is required")
        self.remoting = remoting
        self.namesrv_addrs = tuple(namesrv_addrs)
        self.timeout_s = timeout_s
        self.serialize_type = serialize_type
        #: Where the name-server rotation starts: random, as RocketMQ's client does
        #: (NettyRemotingClient's initValueIndex), so that clients spread over the name
        #: servers. All starting at the first one made every client of a campaign read its
        #: stale route while that name server was cut off with the old master.
        self._ns_index = random.randrange(len(self.namesrv_addrs))
        self._routes: dict[str, TopicRouteData] = {}
        #: Why the last fetch of a topic found no route (shown when a send finds none).
        self._last_error: dict[str, str] = {}
        self._locks: dict[str, trio.Lock] = {}
        #: brokerName -> {brokerId: addr}, merged from every cached route.
        self._brokers: dict[str, dict[int, str]] = {}

    # ---- name servers ----------------------------------------------------------------------

    async def invoke_namesrv(
        self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None
    ) -> RemotingCommand:
        """Sends a request to one name server, moving on to the next on a network error."""
        errors: list[str] = []
        n = len(self.namesrv_addrs)
        for k in range(n):
            i = (self._ns_index + k) % n
            addr = self.namesrv_addrs[i]
            cmd = RemotingCommand.request(code, ext, body, serialize_type=self.serialize_type)
            try:
                resp = await self.remoting.invoke(addr, cmd, self.timeout_s)
            except RemotingError as e:
                errors.append(f"{addr}: {e}")
                continue
            self._ns_index = i
            return resp
        raise RouteNotFoundError(
            f"no name server answered (code {code}): {'; '.join(errors)}", topic=""
        )

    async def fetch_route(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC; RouteNotFoundError when no name server has it."""
        h = GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True)
        try:
            resp = await self.invoke_namesrv(RC.GET_ROUTEINFO_BY_TOPIC, h.to_ext())
        except RouteNotFoundError as e:
            raise RouteNotFoundError(str(e), topic) from None
        if resp.code == Resp.TOPIC_NOT_EXIST:
            raise RouteNotFoundError(f"no route info of this topic: {topic}", topic)
        if resp.code != Resp.SUCCESS:
            raise RouteNotFoundError(
                f"route of {topic}: name server answered {resp.code}: {resp.remark}", topic
            )
        try:
            return TopicRouteData.from_json(resp.body)
        except BodyDecodeError as e:
            raise RouteNotFoundError(f"route of {topic} does not decode: {e}", topic) from None

    # ---- the cache -------------------------------------------------------------------------

    async def update(self, topic: str) -> TopicRouteData | None:
        """Refreshes one topic; None (and the old route, if any, kept) when it has none."""
        lock = self._locks.setdefault(topic, trio.Lock())
        async with lock:
            try:
                route = await self.fetch_route(topic)
            except RouteNotFoundError as e:
                log.debug("route update of %s: %s", topic, e)
                self._last_error[topic] = str(e)
                return None
            self._last_error.pop(topic, None)
            self._store(topic, route)
            return route

    def _store(self, topic: str, route: TopicRouteData) -> None:
        self._routes[topic] = route
        for bd in route.broker_datas:
            # The newest route is the truth for a broker group (a replaced master, a removed
            # slave), so the whole address map is replaced.
            new = dict(bd.broker_addrs)
            old = self._brokers.get(bd.broker_name)
            if old is not None and old != new:
                # As RocketMQ's client logs a changed route: which name server said what.
                log.info(
                    "route of %s (topic %s) changed, from name server %s: %s -> %s",
                    bd.broker_name,
                    topic,
                    self.namesrv_addrs[self._ns_index],
                    dict(sorted(old.items())),
                    dict(sorted(new.items())),
                )
            self._brokers[bd.broker_name] = new

    async def get(self, topic: str) -> TopicRouteData | None:
        """The cached route, fetched first if the topic is new."""
        route = self._routes.get(topic)
        if route is None:
            route = await self.update(topic)
        return route

    def route(self, topic: str) -> TopicRouteData | None:
        return self._routes.get(topic)

    def missing_because(self, topic: str) -> str | None:
        """Why `topic` has no route yet (the last lookup's error); None once it has one or
        before the first lookup failed."""
        if topic in self._routes:
            return None
        return self._last_error.get(topic)

    def topics(self) -> list[str]:
        return list(self._routes)

    def forget(self, topic: str) -> None:
        self._routes.pop(topic, None)

    async def publish_info(
        self, topic: str, *, default_topic: str | None = None, default_queue_nums: int = 4
    ) -> TopicPublishInfo:
        """Writable queues of `topic`. A topic with no route yet is sent through the default
        topic's brokers (tryToFindTopicPublishInfo): the broker creates it on first send."""
        route = await self.get(topic)
        if route is not None:
            info = publish_info(topic, route)
            if info.ok:
                return info
        if default_topic:
            try:
                base = await self.fetch_route(default_topic)
            except RouteNotFoundError:
                base = None
            if base is not None:
                for bd in base.broker_datas:
                    self._brokers.setdefault(bd.broker_name, dict(bd.broker_addrs))
                n = default_queue_nums
                shaped = TopicRouteData(
                    queue_datas=[
                        QueueData(
                            broker_name=qd.broker_name,
                            read_queue_nums=min(n, qd.read_queue_nums),
                            write_queue_nums=min(n, qd.read_queue_nums),
                            perm=qd.perm,
                            topic_sys_flag=qd.topic_sys_flag,
                        )
                        for qd in base.queue_datas
                    ],
                    broker_datas=base.broker_datas,
                )
                info = publish_info(topic, shaped, from_default=True)
                if info.ok:
                    return info
        # Say why when the name server refused (an ACL refusal, say), not only that it had none.
        why = self._last_error.get(topic, "")
        if why and not why.startswith("no route info"):
            raise RouteNotFoundError(f"no route info of this topic: {topic} ({why})", topic)
        raise RouteNotFoundError(f"no route info of this topic: {topic}", topic)

    async def subscribe_queues(self, topic: str) -> frozenset[MessageQueue] | None:
        route = await self.get(topic)
        return subscribe_queues(topic, route) if route is not None else None

    # ---- brokers ---------------------------------------------------------------------------

    def find_broker_addr(
        self, broker_name: str, broker_id: int = MASTER_ID, *, only_this_broker: bool = False
    ) -> str | None:
        """findBrokerAddressInSubscribe: the wanted replica, else (unless `only_this_broker`)
        any replica of the group, lowest id first."""
        addrs = self._brokers.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        if addr is not None or only_this_broker:
            return addr
        return addrs[min(addrs)]

    def master_addr(self, broker_name: str) -> str | None:
        """findBrokerAddressInPublish: the master only."""
        return self._brokers.get(broker_name, {}).get(MASTER_ID)

    def broker_names(self) -> list[str]:
        return sorted(self._brokers)

    def all_broker_addrs(self, *, masters_only: bool = False) -> list[tuple[str, int, str]]:
        """(brokerName, brokerId, addr) of every known broker."""
        return [
            (name, bid, addr)
            for name, addrs in sorted(self._brokers.items())
            for bid, addr in sorted(addrs.items())
            if not masters_only or bid == MASTER_ID
        ]

    def any_broker_addr_of_topic(self, topic: str) -> str | None:
        """findBrokerAddrByTopic: a broker serving the topic (master preferred)."""
        route = self._routes.get(topic)
        if route is None:
            return None
        for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = bd.select_broker_addr()
            if addr is not None:
                return addr
        return None

    # ---- polling ---------------------------------------------------------------------------

    async def poll_forever(self, interval_s: float, topics: Callable[[], Iterable[str]]) -> None:
        """Refreshes every topic of `topics()` (and every cached one) each `interval_s`."""
        while True:
            await trio.sleep(interval_s)
            await self.update_all(topics())

    async def update_all(self, topics: Iterable[str]) -> None:
        for topic in sorted(set(topics) | set(self._routes)):
            try:
                await self.update(topic)
            except Exception as e:  # one bad topic must not stop the others
                log.warning("route update of %s failed: %s", topic, e)
