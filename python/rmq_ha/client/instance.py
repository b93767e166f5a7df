"""One client identity (RocketMQ's MQClientInstance): the client id, one remoting client, the
route cache, the broker API, and the periodic jobs every producer and consumer needs: route
polling (pollNameServerInterval) and heartbeats to every broker (heartbeatBrokerInterval).

It also answers what brokers send to clients: NOTIFY_CONSUMER_IDS_CHANGED (code 40) triggers
an immediate rebalance of the named group."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Protocol, runtime_checkable

import trio

from rmq_ha.client.api import BrokerApi
from rmq_ha.client.config import ClientConfig, default_instance_name
from rmq_ha.client.errors import ClientStateError
from rmq_ha.client.routes import RouteCache
from rmq_ha.net.client import RemotingClient
from rmq_ha.net.connection import Connection
from rmq_ha.protocol.admin import ResetOffsetBody, ResetOffsetRequestHeader
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headerbase import HeaderError
from rmq_ha.protocol.headers import NotifyConsumerIdsChangedRequestHeader
from rmq_ha.protocol.json_compat import BodyDecodeError
from rmq_ha.protocol.models import ConsumerData, HeartbeatData, MessageQueue, ProducerData
from rmq_ha.security.signing import request_signer

log = logging.getLogger(__name__)

RequestHandler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand | None]]


class ConsumerHook(Protocol):
    """What the instance needs from a consumer: its heartbeat data, its topics, and a way to
    ask it to rebalance now."""

    def consumer_data(self) -> ConsumerData: ...

    def topics(self) -> Iterable[str]: ...

    def rebalance_now(self) -> None: ...


@runtime_checkable
class ResettableConsumer(Protocol):
    """A consumer that holds offsets in memory and takes a broker's reset (push and lite-pull
    consumers; a pop consumer's offsets live on the broker)."""

    async def reset_offsets(self, topic: str, table: Mapping[MessageQueue, int]) -> None: ...


class ClientInstance:
    def __init__(self, namesrv_addrs: Sequence[str], cfg: ClientConfig) -> None:
        self.cfg = cfg
        instance = cfg.instance_name or default_instance_name()
        self.client_id = f"{cfg.client_ip}@{instance}"
        if cfg.unit_name:
            self.client_id += f"@{cfg.unit_name}"
        self.remoting = RemotingClient(
            handler=self._on_request,
            signer=None if cfg.credentials is None else request_signer(cfg.credentials),
            tls=cfg.tls,
        )
        ser = cfg.serialize_type.value
        self.routes = RouteCache(
            self.remoting, namesrv_addrs, timeout_s=cfg.mq_client_api_timeout_s, serialize_type=ser
        )
        self.api = BrokerApi(
            self.remoting, timeout_s=cfg.mq_client_api_timeout_s, serialize_type=ser
        )
        self.producer_groups: set[str] = set()
        #: Handlers of other broker -> client requests by code (e.g. CHECK_TRANSACTION_STATE,
        #: registered by a transactional producer).
        self.request_handlers: dict[int, RequestHandler] = {}
        self.consumers: dict[str, ConsumerHook] = {}
        self._stack: AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._closed = False

    # ---- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> ClientInstance:
        stack = AsyncExitStack()
        await stack.enter_async_context(self.remoting)
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        self._stack = stack
        self._nursery.start_soon(self._poll_routes)
        self._nursery.start_soon(self._heartbeat_loop)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self._closed = True
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        assert self._stack is not None
        # The body's exception is not passed into the nurseries, so it reaches the caller as
        # raised (not wrapped in an ExceptionGroup).
        await self._stack.aclose()
        return None

    @property
    def nursery(self) -> trio.Nursery:
        if self._nursery is None or self._closed:
            raise ClientStateError("the client is not started (use `async with`)")
        return self._nursery

    # ---- periodic jobs ---------------------------------------------------------------------

    def topics(self) -> set[str]:
        out: set[str] = set()
        for c in self.consumers.values():
            out.update(c.topics())
        return out

    async def _poll_routes(self) -> None:
        await self.routes.poll_forever(self.cfg.poll_name_server_interval_s, self.topics)

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.heartbeat_broker_interval_s)
            await self.send_heartbeat_to_all_brokers()

    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            client_id=self.client_id,
            producer_data_set=[ProducerData(group_name=g) for g in sorted(self.producer_groups)],
            consumer_data_set=[c.consumer_data() for _, c in sorted(self.consumers.items())],
        )

    async def send_heartbeat_to_all_brokers(self) -> int:
        """HEART_BEAT to every known broker (only masters when there is no consumer, as
        RocketMQ); returns how many answered."""
        data = self.heartbeat_data()
        if not data.producer_data_set and not data.consumer_data_set:
            return 0
        targets = self.routes.all_broker_addrs(masters_only=not data.consumer_data_set)
        ok = 0

        async def one(addr: str) -> None:
            nonlocal ok
            try:
                await self.api.heartbeat(addr, data)
                ok += 1
            except Exception as e:  # a dead broker must not stop heartbeats to the others
                log.info("heartbeat to %s failed: %s", addr, e)

        async with trio.open_nursery() as n:
            for _, _, addr in targets:
                n.start_soon(one, addr)
        return ok

    async def unregister_client(
        self, *, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        """UNREGISTER_CLIENT at every known broker (best effort, bounded by the API timeout)."""

        async def one(addr: str) -> None:
            try:
                await self.api.unregister_client(
                    addr,
                    self.client_id,
                    producer_group=producer_group,
                    consumer_group=consumer_group,
                )
            except Exception as e:  # shutting down: log and go on
                log.info("unregister at %s failed: %s", addr, e)

        async with trio.open_nursery() as n:
            for _, _, addr in self.routes.all_broker_addrs():
                n.start_soon(one, addr)

    # ---- requests from brokers -------------------------------------------------------------

    async def _reset_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """RESET_CONSUMER_CLIENT_OFFSET (220): a broker reset a group's offsets on a topic
        (oneway; a reply is sent only when the notice is malformed)."""
        try:
            h = ResetOffsetRequestHeader.from_ext(cmd.ext_fields)
            body = ResetOffsetBody.from_json(cmd.body)
        except (HeaderError, BodyDecodeError) as e:
            return None if cmd.is_oneway else cmd.response(Resp.SYSTEM_ERROR, str(e))
        consumer = self.consumers.get(h.group)
        if isinstance(consumer, ResettableConsumer):
            await consumer.reset_offsets(h.topic, body.offset_table)
        return None

    async def _on_request(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RC.NOTIFY_CONSUMER_IDS_CHANGED:
            try:
                h = NotifyConsumerIdsChangedRequestHeader.from_ext(cmd.ext_fields)
            except HeaderError as e:
                return cmd.response(Resp.SYSTEM_ERROR, str(e))
            consumer = self.consumers.get(h.consumer_group)
            log.info("consumer ids of %s changed (from %s): rebalance", h.consumer_group, conn.peer)
            if consumer is not None:
                consumer.rebalance_now()
            return None
        if cmd.code == RC.RESET_CONSUMER_CLIENT_OFFSET:
            return await self._reset_offset(conn, cmd)
        handler = self.request_handlers.get(cmd.code)
        if handler is not None:
            return await handler(conn, cmd)
        return cmd.response(
            Resp.REQUEST_CODE_NOT_SUPPORTED, f"the python client does not handle code {cmd.code}"
        )
