"""UPDATE_AND_CREATE_TOPIC (and its _LIST form), GET_ALL_TOPIC_CONFIG and GET_TOPIC_CONFIG."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import fields

from rmq_ha.broker.ports import Ports
from rmq_ha.broker.topics import SYSTEM_TOPIC_SET, check_topic_name, topic_config_problem
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.admin import (
    CreateTopicListRequestBody,
    GetTopicConfigRequestHeader,
    TopicConfigAndQueueMapping,
    TopicList,
)
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import CreateTopicRequestHeader
from rmq_ha.protocol.json_compat import BodyDecodeError
from rmq_ha.protocol.models import TopicConfig, TopicConfigSerializeWrapper

#: Makes a created topic known before the answer: forwarded to the other replicas of a
#: controller-mode master (RocketMQ #9804) and registered with the name servers.
Announce = Callable[[RemotingCommand], Awaitable[None]]


def system_conflict(topic: str) -> str:
    """RocketMQ's answer to updateTopic of a system topic (or one of the broker's own routes):
    changing SCHEDULE_TOPIC_XXXX's queues, or TBW102's perm, is not an admin's to do."""
    return f"The topic[{topic}] is conflict with system topic."


def register(d: Dispatcher, p: Ports, announce: Announce) -> None:
    async def create_topic(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext(cmd.ext_fields)
        why = check_topic_name(h.topic)
        if why is not None:
            return cmd.response(Resp.SYSTEM_ERROR, why)
        if p.topics.protected(h.topic):
            return cmd.response(Resp.SYSTEM_ERROR, system_conflict(h.topic))
        tc = TopicConfig(
            topic_name=h.topic,
            read_queue_nums=h.read_queue_nums,
            write_queue_nums=h.write_queue_nums,
            perm=h.perm,
            topic_sys_flag=h.topic_sys_flag or 0,
            order=bool(h.order),
        )
        why = topic_config_problem(tc)
        if why is not None:
            return cmd.response(Resp.INVALID_PARAMETER, why)
        p.topics.update(tc)
        p.topics.changed()
        await announce(cmd)
        return cmd.response(Resp.SUCCESS)

    async def create_topics(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC_LIST: all or none (every name is checked before any topic
        is stored), then announced like one topic."""
        try:
            tcs = CreateTopicListRequestBody.from_json(cmd.body).topic_config_list
        except BodyDecodeError as e:
            return cmd.response(Resp.INVALID_PARAMETER, f"bad topic config list: {e}")
        for tc in tcs:
            why = topic_config_problem(tc)
            if why is not None:
                return cmd.response(Resp.INVALID_PARAMETER, why)
            if p.topics.protected(tc.topic_name or ""):
                return cmd.response(Resp.SYSTEM_ERROR, system_conflict(tc.topic_name or ""))
        for tc in tcs:
            p.topics.update(tc)
        if tcs:
            p.topics.changed()
            await announce(cmd)
        return cmd.response(Resp.SUCCESS)

    async def all_topic_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        w = TopicConfigSerializeWrapper(
            topic_config_table=p.topics.table, data_version=p.topics.data_version
        )
        return cmd.response(Resp.SUCCESS, None, None, w.to_json())

    async def topic_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetTopicConfigRequestHeader.from_ext(cmd.ext_fields)
        tc = p.topics.get(h.topic)
        if tc is None:
            return cmd.response(Resp.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {h.topic}")
        body = TopicConfigAndQueueMapping(**{f.name: getattr(tc, f.name) for f in fields(tc)})
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    d.register(RC.UPDATE_AND_CREATE_TOPIC, create_topic)
    d.register(RC.UPDATE_AND_CREATE_TOPIC_LIST, create_topics)
    d.register(RC.GET_TOPIC_CONFIG, topic_config)
    d.register(RC.GET_ALL_TOPIC_CONFIG, all_topic_config)

    async def system_topics(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_SYSTEM_TOPIC_LIST_FROM_BROKER: RocketMQ's TopicValidator system topic set, with
        the cluster's and broker's own names (which its broker adds to that set); admin tools
        and the dashboard tell user topics from it."""
        names = set(SYSTEM_TOPIC_SET) | {p.cfg.cluster_name, p.cfg.broker_name}
        return cmd.response(Resp.SUCCESS, None, None, TopicList(topic_list=names).to_json())

    d.register(RC.GET_SYSTEM_TOPIC_LIST_FROM_BROKER, system_topics)
