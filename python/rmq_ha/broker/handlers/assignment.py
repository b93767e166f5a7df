"""QUERY_ASSIGNMENT (400), SET_MESSAGE_REQUEST_MODE (401) and GET_ALL_MESSAGE_REQUEST_MODE
(402, what a slave copies from its master): server-side load balancing for
consumers with clientRebalance=false and for groups switched to pop mode (see
``rmq_ha.broker.assignment``). The queues of a topic come from its route on the name servers
(every broker of the topic, as the client would see them), or from this broker's own config
when no name server answers."""

from __future__ import annotations

import logging

from rmq_ha.broker.assignment import MODES, RETRY_PREFIX, RequestModes, assign
from rmq_ha.broker.ports import Ports
from rmq_ha.errors import RmqHaError
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import GetRouteInfoRequestHeader
from rmq_ha.protocol.json_compat import BodyDecodeError
from rmq_ha.protocol.models import (
    MessageQueue,
    MessageQueueAssignment,
    QueryAssignmentRequestBody,
    QueryAssignmentResponseBody,
    SetMessageRequestModeRequestBody,
    TopicRouteData,
)
from rmq_ha.protocol.perm import is_readable

log = logging.getLogger(__name__)

#: Seconds a name server has to answer the route lookup.
ROUTE_TIMEOUT_S = 3.0


async def topic_queues(p: Ports, topic: str) -> list[MessageQueue] | None:
    """Every readable queue of `topic` (RocketMQ's topicRouteData2TopicSubscribeInfo), from
    the first name server that knows the topic; this broker's own queues when none answers;
    None when the topic is known nowhere."""
    for addr in p.cfg.namesrv_addrs:
        h = GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True)
        try:
            r = await p.outbound.invoke(
                addr, RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC, h.to_ext()),
                ROUTE_TIMEOUT_S,
            )  # fmt: skip
        except (RmqHaError, OSError) as e:
            log.debug("route of %s from %s failed: %s", topic, addr, e)
            continue
        if r.code != Resp.SUCCESS or not r.body:
            continue
        route = TopicRouteData.from_json(r.body)
        return [
            MessageQueue(topic=topic, broker_name=qd.broker_name, queue_id=i)
            for qd in route.queue_datas
            if is_readable(qd.perm)
            for i in range(qd.read_queue_nums)
        ]
    tc = p.topics.get(topic)
    if tc is None or not is_readable(tc.perm):
        return None
    return [
        MessageQueue(topic=topic, broker_name=p.cfg.broker_name, queue_id=i)
        for i in range(tc.read_queue_nums)
    ]


def register(d: Dispatcher, p: Ports, modes: RequestModes) -> None:
    async def query_assignment(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            req = QueryAssignmentRequestBody.from_json(cmd.body or b"{}")
        except BodyDecodeError as e:
            return cmd.response(Resp.INVALID_PARAMETER, f"bad query assignment body: {e}")
        mode = modes.get(req.topic, req.consumer_group)
        mqs = await topic_queues(p, req.topic)
        got = (
            None
            if mqs is None
            else assign(
                client_id=req.client_id,
                model=req.message_model,
                strategy=req.strategy_name,
                mq_all=mqs,
                cid_all=p.clients.consumer_ids(req.consumer_group),
                mode=mode.mode,
                pop_share=mode.pop_share_queue_num,
            )
        )
        if got is None:
            log.info(
                "no assignment for %s of group %s (client %s, strategy %r): %s",
                req.topic,
                req.consumer_group,
                req.client_id,
                req.strategy_name,
                "the topic is unknown" if mqs is None else "unsupported strategy",
            )
        body = QueryAssignmentResponseBody(
            message_queue_assignments=None
            if got is None
            else [MessageQueueAssignment(message_queue=q, mode=mode.mode) for q in got]
        )
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def set_request_mode(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            req = SetMessageRequestModeRequestBody.from_json(cmd.body or b"{}")
        except BodyDecodeError as e:
            return cmd.response(Resp.INVALID_PARAMETER, f"bad request mode body: {e}")
        if req.topic.startswith(RETRY_PREFIX):
            return cmd.response(Resp.NO_PERMISSION, "retry topic is not allowed to set mode")
        if not req.topic or not req.consumer_group or req.mode not in MODES:
            return cmd.response(
                Resp.INVALID_PARAMETER,
                f"bad request mode: topic {req.topic!r}, group {req.consumer_group!r}, mode"
                f" {req.mode!r} (one of {', '.join(MODES)})",
            )
        modes.set(req)
        log.info(
            "group %s reads %s by %s (popShareQueueNum %d)",
            req.consumer_group, req.topic, req.mode, req.pop_share_queue_num,
        )  # fmt: skip
        return cmd.response(Resp.SUCCESS)

    async def all_request_modes(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Resp.SUCCESS, None, None, modes.to_json())

    d.register(RC.GET_ALL_MESSAGE_REQUEST_MODE, all_request_modes)
    d.register(RC.QUERY_ASSIGNMENT, query_assignment)
    d.register(RC.SET_MESSAGE_REQUEST_MODE, set_request_mode)
