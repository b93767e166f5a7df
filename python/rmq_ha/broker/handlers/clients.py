"""Client connections: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP,
CHECK_CLIENT_CONFIG, and the NOTIFY_CONSUMER_IDS_CHANGED pushes when a group's membership
changes (a connection closed, a client expired or unregistered)."""

from __future__ import annotations

import logging

from rmq_ha._native import client_record
from rmq_ha.broker.clients import ClientInfo
from rmq_ha.broker.ports import Ports
from rmq_ha.broker.sqlfilter import SqlFilterError, compile_sql
from rmq_ha.broker.topics import RETRY_GROUP_TOPIC_PREFIX, check_topic_name
from rmq_ha.clock import wall_ms as now_ms
from rmq_ha.errors import RemotingError, RemotingTimeoutError, RmqHaError
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.admin import GetConsumerStatusBody, GetConsumerStatusRequestHeader
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    UnregisterClientRequestHeader,
)
from rmq_ha.protocol.json_compat import BodyDecodeError
from rmq_ha.protocol.message import parse_offset_msg_id
from rmq_ha.protocol.models import (
    CheckClientRequestBody,
    ExpressionType,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
)

log = logging.getLogger(__name__)


async def notify_consumer_ids_changed(p: Ports, group: str) -> None:
    g = p.clients.consumers.get(group)
    if g is None:
        return
    h = NotifyConsumerIdsChangedRequestHeader(consumer_group=group)
    for c in list(g.clients.values()):
        try:
            cmd = RemotingCommand.request(RC.NOTIFY_CONSUMER_IDS_CHANGED, h.to_ext(), oneway=True)
            await c.conn.send(cmd)
        except Exception as e:  # a client that went away is dropped by its close hook
            log.debug("notify %s failed: %s", c.client_id, e)


async def watch_connection(p: Ports, conn: Connection) -> None:
    """Waits until `conn` closes, then drops its clients (the groups' members are told)."""
    await conn.wait_closed()
    for group in p.clients.drop_connection(conn):
        await notify_consumer_ids_changed(p, group)


async def expire(p: Ports) -> None:
    for group in p.clients.expire(now_ms()):
        await notify_consumer_ids_changed(p, group)


#: How long a heartbeat that created a retry topic waits for its registration: well inside
#: the clients' heartbeat timeout (3 s) even when a name server does not answer.
HEARTBEAT_ANNOUNCE_S = 1.0

#: Broker2Client.callClient's wait for a client's answer.
CALL_CLIENT_TIMEOUT_S = 10.0


def register(d: Dispatcher, p: Ports) -> None:
    async def heartbeat(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        hb = HeartbeatData.from_json(cmd.body or b"{}")
        info = ClientInfo(hb.client_id, conn, cmd.language, cmd.version, now_ms())
        for prod in hb.producer_data_set:
            p.clients.register_producer(prod.group_name, info)
        new_retry = False
        for c in hb.consumer_data_set:
            # A new group's default config and retry topic are written by the broker's
            # housekeeping off the event loop (written here, each cost every request a stall
            # that grew with the number of groups: 150 ms at 2,300 groups); a crash before it
            # loses only defaults the next heartbeat makes again.
            if p.cfg.auto_create_subscription_group and check_topic_name(c.group_name) is None:
                p.subgroups.ensure(c.group_name, persist_now=False)
            # Every consumer group has a retry topic its members subscribe to.
            retry = RETRY_GROUP_TOPIC_PREFIX + c.group_name
            new_retry = new_retry or p.topics.get(retry) is None
            p.topics.system(retry, persist_now=False)
            if p.clients.register_consumer(c, info):
                await notify_consumer_ids_changed(p, c.group_name)
        if new_retry:
            # A new retry topic is routed before the answer (as a send's auto-created topic
            # is): a client looks its route up once it started and then every 30 s, and one
            # that looked too early pulled no retried message for up to 30 s (Go probe).
            await p.topics.announced(HEARTBEAT_ANNOUNCE_S)
        return cmd.response(Resp.SUCCESS)

    async def unregister_client(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_ext(cmd.ext_fields)
        for group in p.clients.unregister(h.client_id, h.producer_group, h.consumer_group, conn):
            await notify_consumer_ids_changed(p, group)
        return cmd.response(Resp.SUCCESS)

    async def consumer_list(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumerListByGroupRequestHeader.from_ext(cmd.ext_fields)
        ids = p.clients.consumer_ids(h.consumer_group)
        if not ids:
            return cmd.response(
                Resp.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}"
            )
        body = GetConsumerListByGroupResponseBody(consumer_id_list=ids)
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def check_client_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        # A consumer asks before it starts. Tag expressions are always served; SQL92 ones
        # when enablePropertyFilter is on (and they compile); otherwise the start fails with
        # the remark a RocketMQ broker gives.
        try:
            body = CheckClientRequestBody.from_json(cmd.body) if cmd.body else None
        except (ValueError, TypeError) as e:
            return cmd.response(Resp.SYSTEM_ERROR, f"bad CHECK_CLIENT_CONFIG body: {e}")
        sub = body.subscription_data if body is not None else None
        # RocketMQ's ExpressionType.isTagType: null, empty or exactly "TAG"
        etype = (sub.expression_type or ExpressionType.TAG) if sub is not None else None
        if sub is None or etype == ExpressionType.TAG:
            return cmd.response(Resp.SUCCESS)
        if etype != ExpressionType.SQL92 or not p.cfg.enable_property_filter:
            return cmd.response(
                Resp.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {etype}",
            )
        try:
            compile_sql(sub.sub_string)
        except SqlFilterError as e:
            return cmd.response(Resp.SUBSCRIPTION_PARSE_FAILED, str(e))
        return cmd.response(Resp.SUCCESS)

    async def call_consumer(
        cmd: RemotingCommand, ext: dict[str, str], body: bytes | None
    ) -> RemotingCommand:
        """Asks the consumer named by consumerGroup/clientId over its own connection and
        relays its answer as it is (RocketMQ's AdminBrokerProcessor.callConsumer)."""
        group = ext.get("consumerGroup", "")
        client_id = ext.get("clientId", "")
        target = p.clients.consumer_connection(group, client_id)
        if target is None:
            return cmd.response(
                Resp.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        ask = RemotingCommand.request(cmd.code, ext, body)
        try:
            answer = await target.request(ask, CALL_CLIENT_TIMEOUT_S)
        except RemotingTimeoutError as e:
            return cmd.response(
                Resp.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {e}"
            )
        except RemotingError as e:
            return cmd.response(
                Resp.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {e}"
            )
        return cmd.response(answer.code, answer.remark, dict(answer.ext_fields), answer.body)

    async def consumer_running_info(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (307: mqadmin consumerStatus, the dashboard's client
        view): asked of the consumer itself."""
        return await call_consumer(cmd, dict(cmd.ext_fields), cmd.body)

    async def consume_message_directly(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY (309: the dashboard's "resend", mqadmin
        consumeMessage): the stored message named by msgId (an offset message id) is handed
        to one consumer client, which consumes it and answers how that went."""
        ext = dict(cmd.ext_fields)
        ext["brokerName"] = p.cfg.broker_name
        tc = p.topics.get(ext.get("topic") or "")
        if tc is not None:
            ext["topicSysFlag"] = str(tc.topic_sys_flag)
        group_cfg = p.subgroups.get(ext.get("consumerGroup") or "")
        if group_cfg is not None:
            ext["groupSysFlag"] = str(group_cfg.group_sys_flag)
        try:
            offset = parse_offset_msg_id(ext.get("msgId") or "")[2]
            # as clients are served records: without the whole-record CRC trailer
            record = client_record(p.store.native.read_record(offset).tobytes())
        except (ValueError, RmqHaError) as e:
            return cmd.response(Resp.SYSTEM_ERROR, f"no message {ext.get('msgId')!r}: {e}")
        return await call_consumer(cmd, ext, record)

    async def consumer_status(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223, mqadmin getConsumerStatus): each online
        client of the group (or the one named) is asked for the offsets it holds for the
        topic (GET_CONSUMER_STATUS_FROM_CLIENT, 221); a client that does not answer is left
        out, as in RocketMQ's Broker2Client.getConsumeStatus."""
        h = GetConsumerStatusRequestHeader.from_ext(cmd.ext_fields)
        g = p.clients.consumers.get(h.group)
        if g is None or not g.clients:
            return cmd.response(
                Resp.SYSTEM_ERROR, f"No Any Consumer online in the consumer group: [{h.group}]"
            )
        ask_ext = GetConsumerStatusRequestHeader(topic=h.topic, group=h.group).to_ext()
        table = {}
        for (cid, _), info in sorted(g.clients.items()):
            if h.client_addr and h.client_addr != cid:
                continue
            ask = RemotingCommand.request(RC.GET_CONSUMER_STATUS_FROM_CLIENT, ask_ext)
            try:
                answer = await info.conn.request(ask, CALL_CLIENT_TIMEOUT_S)
                if answer.code == Resp.SUCCESS and answer.body:
                    table[cid] = GetConsumerStatusBody.from_json(answer.body).message_queue_table
            except (RemotingError, BodyDecodeError) as e:
                log.warning("consumer status of %s (%s) not known: %s", cid, h.group, e)
        body = GetConsumerStatusBody(consumer_table=table)
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    d.register(RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, consumer_status)
    d.register(RC.GET_CONSUMER_RUNNING_INFO, consumer_running_info)
    d.register(RC.CONSUME_MESSAGE_DIRECTLY, consume_message_directly)
    d.register(RC.HEART_BEAT, heartbeat)
    d.register(RC.CHECK_CLIENT_CONFIG, check_client_config)
    d.register(RC.UNREGISTER_CLIENT, unregister_client)
    d.register(RC.GET_CONSUMER_LIST_BY_GROUP, consumer_list)
