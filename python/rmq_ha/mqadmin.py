"""`rmq-ha mqadmin <command>`: RocketMQ's mqadmin commands, with mqadmin's names and flags.

    rmq-ha mqadmin clusterList -n 127.0.0.1:9876
    rmq-ha mqadmin updateTopic -n 127.0.0.1:9876 -c DefaultCluster -t Orders -r 8 -w 8
    rmq-ha mqadmin getSyncStateSet -a 127.0.0.1:9878 -b broker-a
    rmq-ha mqadmin updateBrokerConfig -n 127.0.0.1:9876 -b 127.0.0.1:10911 -k maxMessageSize -v 1024

Flags as mqadmin's: -n name servers (host:port;host:port, default $NAMESRV_ADDR), -c cluster,
-b broker address (broker name where mqadmin takes a name), -t topic, -g group, -a controller
address(es) (default $CONTROLLER_ADDR). Output is a table of plain columns; `--json` prints one
JSON document instead (an array of the rows, or an object for key/value output). Every command
speaks the remoting protocol with RocketMQ's request codes, so it works against RocketMQ too.

Exit status: 0 done, 1 the server refused or failed (the reason on stderr), 2 usage.
`main_async(argv)` runs a command in the caller's Trio loop (tests use it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import trio

from rmq_ha.cliargs import positive_seconds
from rmq_ha.client import Admin, ClientConfig, MessageQueue
from rmq_ha.client.errors import BrokerResponseError
from rmq_ha.client.message import MessageExt
from rmq_ha.controller import messages as m
from rmq_ha.controller.admin import broker_epoch, info_obj
from rmq_ha.controller.client import ControllerClient, split_addrs
from rmq_ha.errors import RmqHaError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.admin import SubscriptionGroupConfig
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.models import EpochEntryCache
from rmq_ha.protocol.perm import perm_to_string
from rmq_ha.security import cliopts

# ---------------------------------------------------------------------------------------------
# output


@dataclass
class Output:
    """What a command shows: a table (columns, rows) or, for `--json`, `doc` when set."""

    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    doc: Any = None
    failed: bool = False

    def add(self, **row: Any) -> None:
        self.rows.append(row)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list | tuple | set):
        return ",".join(_cell(x) for x in v)
    return str(v)


def render(out: Output, as_json: bool, stream: TextIO) -> None:
    if as_json:
        doc = out.doc if out.doc is not None else out.rows
        stream.write(json.dumps(doc, sort_keys=True, default=str) + "\n")
        return
    cols = out.columns or sorted({k for r in out.rows for k in r})
    cells = [[_cell(r.get(c)) for c in cols] for r in out.rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    stream.write("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip() + "\n")
    for row in cells:
        line = "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True))
        stream.write(line.rstrip() + "\n")


def _kv(table: dict[str, str]) -> Output:
    out = Output(["key", "value"], doc=dict(table))
    for k in sorted(table):
        out.add(key=k, value=table[k])
    return out


# ---------------------------------------------------------------------------------------------
# argument types


class UsageError(Exception):
    """A bad flag value: exit 2 with the message."""


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def parse_time_ms(text: str) -> int:
    """mqadmin's timestamp forms: milliseconds, "now", or yyyy-MM-dd#HH:mm:ss:SSS (local)."""
    t = text.strip()
    if t == "now":
        return int(time.time() * 1000)
    if t.lstrip("-").isdigit():
        return int(t)
    try:
        dt = datetime.datetime.strptime(t, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: give milliseconds, now, or yyyy-MM-dd#HH:mm:ss:SSS"
        ) from None
    return int(dt.timestamp() * 1000)


def _msg_row(msg: MessageExt) -> dict[str, Any]:
    return {
        "msgId": msg.msg_id,
        "offsetMsgId": msg.offset_msg_id,
        "topic": msg.topic,
        "brokerName": msg.queue.broker_name,
        "queueId": msg.queue.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.commit_log_offset,
        "tags": msg.tags,
        "keys": " ".join(msg.keys),
        "storeHost": msg.store_host,
        "bornHost": msg.born_host,
        "storeTimestamp": msg.store_timestamp_ms,
        "bornTimestamp": msg.born_timestamp_ms,
        "reconsumeTimes": msg.reconsume_times,
        "properties": dict(msg.properties),
        "body": msg.body.decode("utf-8", "replace"),
    }


_MSG_COLUMNS = [
    "msgId",
    "topic",
    "brokerName",
    "queueId",
    "queueOffset",
    "tags",
    "keys",
    "storeTimestamp",
    "body",
]

# ---------------------------------------------------------------------------------------------
# name server / broker commands (an Admin on -n)

AdminCommand = Callable[[Admin, argparse.Namespace], Awaitable[Output]]


async def cluster_list(a: Admin, args: argparse.Namespace) -> Output:
    info = await a.cluster_info()
    out = Output(["cluster", "brokerName", "brokerId", "addr", "version", "role", "epoch"])
    for cluster in info.retrieve_all_cluster_names():
        for name in sorted(info.cluster_addr_table[cluster]):
            bd = info.broker_addr_table.get(name)
            for bid, addr in sorted((bd.broker_addrs if bd else {}).items()):
                try:
                    rt = await a.broker_runtime_info(addr)
                except RmqHaError:
                    rt = {}
                out.add(
                    cluster=cluster,
                    brokerName=name,
                    brokerId=bid,
                    addr=addr,
                    version=rt.get("brokerVersionDesc"),
                    role=rt.get("role"),
                    epoch=rt.get("masterEpoch"),
                )
    return out


async def topic_list(a: Admin, args: argparse.Namespace) -> Output:
    if not args.cluster_model:
        out = Output(["topic"])
        for t in await a.topic_list():
            out.add(topic=t)
        out.doc = [r["topic"] for r in out.rows]
        return out
    # -c (mqadmin's clusterModel): each cluster's topics and the groups consuming them.
    out = Output(["cluster", "topic", "consumerGroups"])
    info = await a.cluster_info()
    for cluster in info.retrieve_all_cluster_names():
        for t in await a.topic_list(cluster):
            try:
                groups = await a.topic_consumed_by(t)
            except RmqHaError:  # a topic with no route (a system topic) has no consumers here
                groups = []
            out.add(cluster=cluster, topic=t, consumerGroups=groups)
    return out


async def topic_route(a: Admin, args: argparse.Namespace) -> Output:
    route = await a.route(args.topic)
    out = Output(
        ["brokerName", "cluster", "brokerAddrs", "readQueueNums", "writeQueueNums", "perm"],
        doc=route.to_obj(),
    )
    queues = {q.broker_name: q for q in route.queue_datas}
    for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
        q = queues.get(bd.broker_name)
        out.add(
            brokerName=bd.broker_name,
            cluster=bd.cluster,
            brokerAddrs=[f"{i}={x}" for i, x in sorted(bd.broker_addrs.items())],
            readQueueNums=q.read_queue_nums if q else None,
            writeQueueNums=q.write_queue_nums if q else None,
            perm=perm_to_string(q.perm) if q else None,
        )
    return out


async def topic_status(a: Admin, args: argparse.Namespace) -> Output:
    stats = await a.topic_stats(args.topic)
    out = Output(["brokerName", "queueId", "minOffset", "maxOffset", "lastUpdateTimestamp"])
    for mq, off in sorted(stats.offset_table.items()):
        out.add(
            brokerName=mq.broker_name,
            queueId=mq.queue_id,
            minOffset=off.min_offset,
            maxOffset=off.max_offset,
            lastUpdateTimestamp=off.last_update_timestamp,
        )
    return out


async def update_topic(a: Admin, args: argparse.Namespace) -> Output:
    addrs = await a.create_topic(
        args.topic,
        cluster=None if args.broker else args.cluster,
        broker_addr=args.broker,
        read_queue_nums=args.read_queue_nums,
        write_queue_nums=args.write_queue_nums,
        perm=args.perm,
        order=args.order,
    )
    out = Output(["topic", "broker", "readQueueNums", "writeQueueNums", "perm", "result"])
    for addr in addrs:
        out.add(
            topic=args.topic,
            broker=addr,
            readQueueNums=args.read_queue_nums,
            writeQueueNums=args.write_queue_nums,
            perm=args.perm,
            result="OK",
        )
    return out


async def delete_topic(a: Admin, args: argparse.Namespace) -> Output:
    addrs = await a.delete_topic(args.topic, args.cluster)
    out = Output(["topic", "cluster", "brokers", "result"])
    out.add(topic=args.topic, cluster=args.cluster, brokers=addrs, result="OK")
    return out


async def wipe_write_perm(a: Admin, args: argparse.Namespace) -> Output:
    return await _write_perm(a, args, writable=False)


async def add_write_perm(a: Admin, args: argparse.Namespace) -> Output:
    return await _write_perm(a, args, writable=True)


async def _write_perm(a: Admin, args: argparse.Namespace, *, writable: bool) -> Output:
    """Every name server of -n, as mqadmin does: each keeps its own routes."""
    out = Output(["namesrv", "brokerName", "topics", "result"])
    for addr, r in await a.set_write_perm(args.broker_name, writable):
        if isinstance(r, str):
            out.failed = True
            out.add(namesrv=addr, brokerName=args.broker_name, topics="", result=r)
        else:
            out.add(namesrv=addr, brokerName=args.broker_name, topics=r, result="OK")
    return out


async def clone_group_offset(a: Admin, args: argparse.Namespace) -> Output:
    addrs = await a.clone_group_offset(args.src, args.dest, args.topic, offline=args.offline)
    out = Output(["srcGroup", "destGroup", "topic", "brokers", "result"])
    out.add(srcGroup=args.src, destGroup=args.dest, topic=args.topic, brokers=addrs, result="OK")
    return out


async def update_sub_group(a: Admin, args: argparse.Namespace) -> Output:
    cfg = SubscriptionGroupConfig(
        group_name=args.group,
        consume_enable=args.consume_enable,
        consume_from_min_enable=args.consume_from_min_enable,
        consume_broadcast_enable=args.consume_broadcast_enable,
        consume_message_orderly=args.consume_message_orderly,
        retry_queue_nums=args.retry_queue_nums,
        retry_max_times=args.retry_max_times,
        broker_id=args.broker_id,
        which_broker_when_consume_slowly=args.which_broker_when_consume_slowly,
        notify_consumer_ids_changed_enable=args.notify_consumer_ids_changed,
    )
    out = Output(["group", "broker", "result"])
    for addr in await a.broker_addrs(cluster=args.cluster, broker_addr=args.broker):
        await a.update_subscription_group(addr, cfg)
        out.add(group=args.group, broker=addr, result="OK", config=cfg.to_obj())
    return out


async def delete_sub_group(a: Admin, args: argparse.Namespace) -> Output:
    out = Output(["group", "broker", "removeOffset", "result"])
    for addr in await a.broker_addrs(cluster=args.cluster, broker_addr=args.broker):
        await a.delete_subscription_group(addr, args.group, clean_offset=args.remove_offset)
        out.add(group=args.group, broker=addr, removeOffset=args.remove_offset, result="OK")
    return out


async def broker_status(a: Admin, args: argparse.Namespace) -> Output:
    addrs = [args.broker] if args.broker else await a.broker_addrs(cluster=args.cluster)
    if len(addrs) == 1:
        return _kv(await a.broker_runtime_info(addrs[0]))
    out = Output(["broker", "key", "value"], doc={})
    for addr in addrs:
        table = await a.broker_runtime_info(addr)
        out.doc[addr] = table
        for k in sorted(table):
            out.add(broker=addr, key=k, value=table[k])
    return out


async def stats_all(a: Admin, args: argparse.Namespace) -> Output:
    """mqadmin statsAll: per topic and consuming group, the backlog, in/out TPS over the last
    minute and messages in/out over the last day (since the broker started). `-a`: only
    topics with traffic."""
    out = Output(["topic", "group", "accumulation", "inTps", "outTps", "inMsg24Hour",
                  "outMsg24Hour"])  # fmt: skip
    topics = [args.topic] if args.topic else await a.topic_list()
    for topic in topics:
        if topic.startswith(("%", "rmq_sys_", "RMQ_SYS_")) or topic == "TBW102":
            continue
        try:
            put = await a.topic_stats_data(topic)
            groups = await a.topic_consumed_by(topic)
        except RmqHaError:
            continue  # no route any more
        in_tps, in_day = put or (0.0, 0)
        if not groups:
            if not args.active or in_day > 0:
                out.add(topic=topic, group="", accumulation=0, inTps=round(in_tps, 2),
                        outTps="", inMsg24Hour=in_day, outMsg24Hour="NO_CONSUMER")  # fmt: skip
            continue
        for group in sorted(groups):
            got = await a.topic_stats_data(topic, group)
            out_tps, out_day = got or (0.0, 0)
            stats = await a.consume_stats(group, topic)
            if not args.active or in_day > 0 or out_day > 0:
                out.add(topic=topic, group=group, accumulation=stats.total_diff(),
                        inTps=round(in_tps, 2), outTps=round(out_tps, 2),
                        inMsg24Hour=in_day, outMsg24Hour=out_day)  # fmt: skip
    return out


async def broker_consume_stats(a: Admin, args: argparse.Namespace) -> Output:
    """mqadmin brokerConsumeStats: per group, topic and queue of one broker, its lag."""
    body = await a.broker_consume_stats(args.broker, is_order=args.order)
    out = Output(
        ["group", "topic", "queueId", "brokerOffset", "consumerOffset", "diff", "lastTimestamp"]
    )
    for entry in body.consume_stats_list:
        for group, stats in sorted(entry.items()):
            for cs in stats:
                for mq, w in sorted(cs.offset_table.items()):
                    out.add(
                        group=group,
                        topic=mq.topic,
                        queueId=mq.queue_id,
                        brokerOffset=w.broker_offset,
                        consumerOffset=w.consumer_offset,
                        diff=w.diff,
                        lastTimestamp=w.last_timestamp,
                    )
    out.doc = {"brokerAddr": body.broker_addr, "totalDiff": body.total_diff, "queues": out.rows}
    return out


async def consumer_progress(a: Admin, args: argparse.Namespace) -> Output:
    if not args.group:
        return await _all_groups_progress(a, args)
    stats = await a.consume_stats(args.group, args.topic, cluster=args.cluster)
    out = Output(
        [
            "topic",
            "brokerName",
            "queueId",
            "brokerOffset",
            "consumerOffset",
            "diff",
            "lastTimestamp",
        ]
    )
    total = 0
    for mq, w in sorted(stats.offset_table.items()):
        diff = w.diff
        total += diff
        out.add(
            topic=mq.topic,
            brokerName=mq.broker_name,
            queueId=mq.queue_id,
            brokerOffset=w.broker_offset,
            consumerOffset=w.consumer_offset,
            diff=diff,
            lastTimestamp=w.last_timestamp,
        )
    out.doc = {
        "group": args.group,
        "consumeTps": stats.consume_tps,
        "diffTotal": total,
        "queues": out.rows,
    }
    return out


async def _all_groups_progress(a: Admin, args: argparse.Namespace) -> Output:
    """consumerProgress without -g: one line per group (mqadmin's summary)."""
    out = Output(["group", "count", "consumeType", "messageModel", "consumeTps", "diffTotal"])
    for group in await a.consumer_groups(args.cluster):
        stats = await a.consume_stats(group, args.topic, cluster=args.cluster)
        diff = stats.total_diff()
        try:
            cc = await a.consumer_connection(group, args.cluster)
            count, ctype, model = len(cc.connection_set), cc.consume_type, cc.message_model
        except BrokerResponseError:  # CONSUMER_NOT_ONLINE
            count, ctype, model = 0, None, None
        out.add(
            group=group,
            count=count,
            consumeType=ctype,
            messageModel=model,
            consumeTps=stats.consume_tps,
            diffTotal=diff,
        )
    return out


async def consumer_connection(a: Admin, args: argparse.Namespace) -> Output:
    cc = await a.consumer_connection(args.group, args.cluster)
    out = Output(["clientId", "clientAddr", "language", "version"])
    for c in sorted(cc.connection_set, key=lambda c: c.client_id):
        out.add(
            clientId=c.client_id, clientAddr=c.client_addr, language=c.language, version=c.version
        )
    out.doc = cc.to_obj()
    return out


async def producer_connection(a: Admin, args: argparse.Namespace) -> Output:
    pc = await a.producer_connection(args.group, args.topic)
    out = Output(["clientId", "clientAddr", "language", "version"], doc=pc.to_obj())
    for c in sorted(pc.connection_set, key=lambda c: c.client_id):
        out.add(
            clientId=c.client_id, clientAddr=c.client_addr, language=c.language, version=c.version
        )
    return out


def _messages(msgs: Sequence[MessageExt]) -> Output:
    out = Output(list(_MSG_COLUMNS))
    for msg in msgs:
        out.rows.append(_msg_row(msg))
    out.doc = out.rows
    return out


async def query_msg_by_id(a: Admin, args: argparse.Namespace) -> Output:
    """An id is a client (unique) message id or an offset message id; both are 32 hex digits.
    With -t the topic is searched for the unique id first, then the id is read as an offset
    id (store address + commitlog offset); without -t only the latter."""
    msgs: list[MessageExt] = []
    for raw in args.msg_id.split(","):
        msg_id = raw.strip()
        if args.topic:
            found = await a.query_message(args.topic, msg_id, max_num=1, unique=True)
            if found:
                msgs += found
                continue
        try:
            msgs.append(await a.view_message(msg_id))
        except ValueError as e:
            raise UsageError(f"{msg_id}: {e}") from None
    return _messages(msgs)


async def query_msg_by_key(a: Admin, args: argparse.Namespace) -> Output:
    msgs = await a.query_message(
        args.topic, args.key, max_num=args.max_num, begin_ms=args.begin, end_ms=args.end
    )
    return _messages(msgs)


async def query_msg_by_offset(a: Admin, args: argparse.Namespace) -> Output:
    mq = MessageQueue(args.topic, args.broker_name, args.queue_id)
    msg = await a.query_by_offset(mq, args.offset)
    if msg is None:
        raise BrokerResponseError(
            Code.QUERY_NOT_FOUND, f"no message at offset {args.offset} of {mq}", args.broker_name
        )
    return _messages([msg])


async def reset_offset_by_time(a: Admin, args: argparse.Namespace) -> Output:
    table = await a.reset_offset_by_time(args.group, args.topic, args.timestamp, force=args.force)
    out = Output(["topic", "brokerName", "queueId", "offset"])
    for mq, off in sorted(table.items()):
        out.add(topic=mq.topic, brokerName=mq.broker_name, queueId=mq.queue_id, offset=off)
    return out


async def skip_accumulated_message(a: Admin, args: argparse.Namespace) -> Output:
    """mqadmin's skipAccumulatedMessage: a forced reset to timestamp -1, which each broker
    takes as the end of every queue."""
    args.timestamp, args.force = -1, True
    return await reset_offset_by_time(a, args)


async def get_broker_epoch(a: Admin, args: argparse.Namespace) -> Output:
    info = await a.cluster_info()
    names = (
        [args.broker_name]
        if args.broker_name
        else sorted(info.cluster_addr_table.get(args.cluster, set()))
    )
    if not names:
        raise UsageError(f"cluster {args.cluster!r} has no broker")
    out = Output(["brokerName", "brokerId", "addr", "epoch", "startOffset", "endOffset"])
    docs = []
    for name in names:
        bd = info.broker_addr_table.get(name)
        if bd is None:
            raise BrokerResponseError(Code.SYSTEM_ERROR, f"broker {name} not found", name)
        async with _remoting(args) as rc:
            for bid, addr in sorted(bd.broker_addrs.items()):
                got = await broker_epoch(rc, addr, args.api_timeout)
                if not isinstance(got, EpochEntryCache):
                    out.failed = True
                    out.add(brokerName=name, brokerId=bid, addr=addr, epoch=got)
                    docs.append({"brokerName": name, "brokerId": bid, "addr": addr, "error": got})
                    continue
                docs.append(
                    {
                        "brokerName": name,
                        "brokerId": bid,
                        "addr": addr,
                        "maxOffset": got.max_offset,
                        "epochs": [e.to_obj() for e in got.epoch_list],
                    }
                )
                for e in got.epoch_list:
                    out.add(
                        brokerName=name,
                        brokerId=bid,
                        addr=addr,
                        epoch=e.epoch,
                        startOffset=e.start_offset,
                        endOffset=e.end_offset,
                    )
    out.doc = docs
    return out


async def get_broker_config(a: Admin, args: argparse.Namespace) -> Output:
    addrs = [args.broker] if args.broker else await a.broker_addrs(cluster=args.cluster)
    if len(addrs) == 1:
        return _kv(await a.broker_config(addrs[0]))
    out = Output(["broker", "key", "value"], doc={})
    for addr in addrs:
        table = await a.broker_config(addr)
        out.doc[addr] = table
        for k in sorted(table):
            out.add(broker=addr, key=k, value=table[k])
    return out


async def update_broker_config(a: Admin, args: argparse.Namespace) -> Output:
    addrs = [args.broker] if args.broker else await a.broker_addrs(cluster=args.cluster)
    out = Output(["broker", "key", "value", "result"])
    for addr in addrs:
        await a.update_broker_config(addr, {args.key: args.value})
        out.add(broker=addr, key=args.key, value=args.value, result="OK")
    return out


# ---------------------------------------------------------------------------------------------
# controller commands (-a)

ControllerCommand = Callable[[ControllerClient, argparse.Namespace], Awaitable[Output]]


class Refused(RmqHaError):
    """The controller answered with an error code."""

    definite = True


def _check(resp: m.Response) -> None:
    if not resp.ok and resp.code != Code.CONTROLLER_MASTER_STILL_EXIST:
        name = resp.code.name if isinstance(resp.code, Code) else str(resp.code)
        raise Refused(f"refused: {name} {resp.remark or ''}".strip())


async def get_controller_metadata(cc: ControllerClient, args: argparse.Namespace) -> Output:
    out = Output(["addr", "group", "leaderId", "leaderAddress", "isLeader", "peers"])
    reached = 0
    for addr in cc.addrs:
        try:
            h = await cc.metadata(addr)
        except RmqHaError as e:
            out.add(addr=addr, error=str(e))
            continue
        reached += 1
        out.add(
            addr=addr,
            group=h.group,
            leaderId=h.controller_leader_id,
            leaderAddress=h.controller_leader_address,
            isLeader=h.is_leader,
            peers=h.peers,
        )
    out.failed = reached == 0
    return out


async def _names_of_cluster(args: argparse.Namespace) -> list[str]:
    if args.broker_name:
        return [n.strip() for n in args.broker_name.split(",") if n.strip()]
    if not args.cluster:
        raise UsageError("give broker names (-b) or a cluster (-c, with -n)")
    async with Admin(_namesrv(args), config=_client_config(args)) as a:
        info = await a.cluster_info()
    names = sorted(info.cluster_addr_table.get(args.cluster, set()))
    if not names:
        raise UsageError(f"cluster {args.cluster!r} has no broker on the name servers")
    return names


async def get_sync_state_set(cc: ControllerClient, args: argparse.Namespace) -> Output:
    names = await _names_of_cluster(args)
    resp: m.GetSyncStateDataResponse = await cc.request(m.GetSyncStateDataRequest(tuple(names)))
    _check(resp)
    out = Output(
        [
            "brokerName",
            "masterBrokerId",
            "masterAddress",
            "masterEpoch",
            "syncStateSetEpoch",
            "inSyncReplicas",
            "notInSyncReplicas",
        ]
    )
    docs = []
    for name in names:
        info = resp.replicas_info.get(name)
        if info is None:
            out.failed = True
            out.add(brokerName=name, masterAddress="not in the controller")
            docs.append({"brokerName": name, "error": "not in the controller"})
            continue
        doc = info_obj(name, info)
        docs.append(doc)

        def ids(rs: list[dict[str, Any]]) -> list[str]:
            return [
                f"{r['brokerId']}@{r['brokerAddress']}{'' if r['alive'] else '(dead)'}" for r in rs
            ]

        out.add(
            **{
                **doc,
                "inSyncReplicas": ids(doc["inSyncReplicas"]),
                "notInSyncReplicas": ids(doc["notInSyncReplicas"]),
            }
        )
    out.doc = docs
    return out


async def elect_master(cc: ControllerClient, args: argparse.Namespace) -> Output:
    req = m.ElectMasterRequest.of_admin_trigger(args.cluster, args.broker_name, args.broker_id)
    resp: m.ElectMasterResponse = await cc.request(req)
    _check(resp)
    out = Output(
        [
            "brokerName",
            "result",
            "masterBrokerId",
            "masterAddress",
            "masterEpoch",
            "syncStateSetEpoch",
            "syncStateSet",
        ]
    )
    out.add(
        brokerName=args.broker_name,
        result=resp.code.name if isinstance(resp.code, Code) else str(resp.code),
        masterBrokerId=resp.master_broker_id,
        masterAddress=resp.master_address,
        masterEpoch=resp.master_epoch,
        syncStateSetEpoch=resp.sync_state_set_epoch,
        syncStateSet=sorted(resp.sync_state_set),
    )
    out.doc = out.rows[0]
    return out


async def clean_broker_metadata(cc: ControllerClient, args: argparse.Namespace) -> Output:
    req = m.CleanBrokerDataRequest(
        args.cluster, args.broker_name, args.broker_ids, args.clean_living_broker
    )
    resp: m.CleanBrokerDataResponse = await cc.request(req)
    _check(resp)
    out = Output(["brokerName", "cleaned", "result"])
    out.add(brokerName=args.broker_name, cleaned=args.broker_ids or "all", result="OK")
    out.doc = out.rows[0]
    return out


async def _each_controller(
    cc: ControllerClient, code: int, body: bytes | None
) -> list[tuple[str, RemotingCommand]]:
    """GET/UPDATE_CONTROLLER_CONFIG go to each controller named (not only the leader)."""
    got = []
    for addr in cc.addrs:
        resp = await cc.client.invoke(addr, RemotingCommand.request(code, None, body), cc.timeout_s)
        if resp.code != Code.SUCCESS:
            raise Refused(f"{addr}: refused: {resp.code} {resp.remark or ''}".strip())
        got.append((addr, resp))
    return got


async def get_controller_config(cc: ControllerClient, args: argparse.Namespace) -> Output:
    from rmq_ha.config import parse_properties

    out = Output(["controller", "key", "value"], doc={})
    for addr, resp in await _each_controller(cc, RC.GET_CONTROLLER_CONFIG, None):
        table = parse_properties((resp.body or b"").decode("utf-8", "replace"))
        out.doc[addr] = table
        for k in sorted(table):
            out.add(controller=addr, key=k, value=table[k])
    return out


async def update_controller_config(cc: ControllerClient, args: argparse.Namespace) -> Output:
    body = f"{args.key}={args.value}\n".encode()
    out = Output(["controller", "key", "value", "result"])
    for addr, _ in await _each_controller(cc, RC.UPDATE_CONTROLLER_CONFIG, body):
        out.add(controller=addr, key=args.key, value=args.value, result="OK")
    return out


# ---------------------------------------------------------------------------------------------
# running


def _namesrv(args: argparse.Namespace) -> str:
    return str(args.namesrv or os.environ.get("NAMESRV_ADDR") or "127.0.0.1:9876")


def _client_config(args: argparse.Namespace) -> ClientConfig:
    return ClientConfig(
        mq_client_api_timeout_s=args.api_timeout,
        credentials=cliopts.credentials_of(args),
        tls=cliopts.tls_of(args),
    )


def _remoting(args: argparse.Namespace) -> RemotingClient:
    """A client for direct requests, signed and over TLS as the options say."""
    return RemotingClient(signer=cliopts.signer_of(args), tls=cliopts.tls_of(args))


async def _guarded(fn: Any, target: Any, args: argparse.Namespace) -> Output | Exception:
    """The command's output, or the error that ended it (returned, not raised, so that no
    nursery of the client around it wraps it in an exception group)."""
    try:
        out: Output = await fn(target, args)
    except (UsageError, RmqHaError, ValueError) as e:
        return e
    return out


async def run_parsed(args: argparse.Namespace, stream: TextIO | None = None) -> int:
    """Runs one parsed command; prints its output to `stream` (stdout) and errors to stderr."""
    stream = stream or sys.stdout
    got: Output | Exception
    try:
        if args.kind == "controller":
            addrs = split_addrs(args.controller or os.environ.get("CONTROLLER_ADDR", ""))
            if not addrs:
                got = UsageError("no controller address: use -a host:port[;host:port]")
            else:
                async with _remoting(args) as rc:
                    got = await _guarded(
                        args.run, ControllerClient(rc, addrs, args.api_timeout), args
                    )
        else:
            async with Admin(_namesrv(args), config=_client_config(args)) as a:
                got = await _guarded(args.run, a, args)
    except (RmqHaError, ValueError) as e:  # starting the client failed
        got = e
    if isinstance(got, Exception):
        print(f"{args.mqadmin}: {got}", file=sys.stderr)
        return 2 if isinstance(got, UsageError) else 1
    render(got, args.json, stream)
    # a row's error that the table has no column for still reaches the operator
    for row in got.rows:
        if row.get("error") and "error" not in got.columns and not args.json:
            where = row.get("addr") or row.get("broker") or ""
            print(f"{args.mqadmin}: {where}: {row['error']}", file=sys.stderr)
    return 1 if got.failed else 0


async def main_async(argv: Sequence[str], stream: TextIO | None = None) -> int:
    """`rmq-ha mqadmin ARGV...` inside the caller's Trio loop."""
    p = argparse.ArgumentParser(prog="rmq-ha mqadmin")
    add_commands(p.add_subparsers(dest="mqadmin", required=True))
    try:
        args = p.parse_args(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    return await run_parsed(args, stream)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.WARNING), stream=sys.stderr
    )
    return trio.run(run_parsed, args)


# ---------------------------------------------------------------------------------------------
# parsers


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    p.add_argument("--api-timeout", type=positive_seconds, default=3.0, help="seconds per request")
    p.add_argument("--log-level", default="warning")
    cliopts.add_args(p)


def _ns(sub: Any, name: str, fn: AdminCommand, help_: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_, description=help_)
    p.add_argument(
        "-n",
        "--namesrvAddr",
        dest="namesrv",
        help="name servers host:port[;host:port] ($NAMESRV_ADDR)",
    )
    _common(p)
    p.set_defaults(func=run, run=fn, kind="namesrv")
    return p


def _ctl(sub: Any, name: str, fn: ControllerCommand, help_: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_, description=help_)
    p.add_argument(
        "-a",
        "--controllerAddress",
        dest="controller",
        help="controllers host:port[;host:port] ($CONTROLLER_ADDR)",
    )
    _common(p)
    p.set_defaults(func=run, run=fn, kind="controller")
    return p


def _target(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """-b broker address | -c cluster (one of them)."""
    g = p.add_mutually_exclusive_group(required=required)
    g.add_argument("-b", "--brokerAddr", dest="broker", help="broker host:port")
    g.add_argument("-c", "--clusterName", dest="cluster", help="every master of the cluster")


def add_commands(sub: Any) -> None:
    """Adds every mqadmin command to the subparser group `sub`."""
    _ns(sub, "clusterList", cluster_list, "brokers of every cluster, with role and epoch")
    p = _ns(sub, "topicList", topic_list, "every topic on the name servers")
    p.add_argument(
        "-c",
        "--clusterModel",
        dest="cluster_model",
        action="store_true",
        help="per cluster, with the groups consuming each topic",
    )
    p = _ns(sub, "topicRoute", topic_route, "the route of a topic")
    p.add_argument("-t", "--topic", required=True)
    p = _ns(sub, "topicStatus", topic_status, "min/max offset of every queue of a topic")
    p.add_argument("-t", "--topic", required=True)
    p = _ns(sub, "updateTopic", update_topic, "create or update a topic")
    p.add_argument("-t", "--topic", required=True)
    _target(p)
    p.add_argument("-r", "--readQueueNums", dest="read_queue_nums", type=int, default=8)
    p.add_argument("-w", "--writeQueueNums", dest="write_queue_nums", type=int, default=8)
    p.add_argument("-p", "--perm", type=int, default=6, help="2 write, 4 read, 6 both")
    p.add_argument("-o", "--order", type=_bool, default=False)
    p = _ns(sub, "deleteTopic", delete_topic, "delete a topic from a cluster and the name servers")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--clusterName", dest="cluster", required=True)
    p = _ns(
        sub,
        "wipeWritePerm",
        wipe_write_perm,
        "producers stop sending to a broker group (its queues lose the write bit on every name "
        "server), e.g. to drain it before maintenance",
    )
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True)
    p = _ns(sub, "addWritePerm", add_write_perm, "give a broker group's queues read+write back")
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True)
    p = _ns(
        sub,
        "cloneGroupOffset",
        clone_group_offset,
        "copy a group's committed offsets on a topic to another group (on every master)",
    )
    p.add_argument("-s", "--srcGroup", dest="src", required=True)
    p.add_argument("-d", "--destGroup", dest="dest", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-o", "--offline", type=_bool, default=False, help="the source group is offline")
    p = _ns(sub, "updateSubGroup", update_sub_group, "create or update a subscription group")
    p.add_argument("-g", "--groupName", dest="group", required=True)
    _target(p)
    p.add_argument("-s", "--consumeEnable", dest="consume_enable", type=_bool, default=True)
    p.add_argument(
        "-m", "--consumeFromMinEnable", dest="consume_from_min_enable", type=_bool, default=True
    )
    p.add_argument(
        "-d", "--consumeBroadcastEnable", dest="consume_broadcast_enable", type=_bool, default=True
    )
    p.add_argument(
        "-o", "--consumeMessageOrderly", dest="consume_message_orderly", type=_bool, default=False
    )
    p.add_argument("-q", "--retryQueueNums", dest="retry_queue_nums", type=int, default=1)
    p.add_argument("-r", "--retryMaxTimes", dest="retry_max_times", type=int, default=16)
    p.add_argument("-i", "--brokerId", dest="broker_id", type=int, default=0)
    p.add_argument(
        "-w",
        "--whichBrokerWhenConsumeSlowly",
        dest="which_broker_when_consume_slowly",
        type=int,
        default=1,
    )
    p.add_argument(
        "-a",
        "--notifyConsumerIdsChanged",
        dest="notify_consumer_ids_changed",
        type=_bool,
        default=True,
    )
    p = _ns(sub, "deleteSubGroup", delete_sub_group, "delete a subscription group")
    p.add_argument("-g", "--groupName", dest="group", required=True)
    _target(p)
    p.add_argument("-r", "--removeOffset", dest="remove_offset", type=_bool, default=False)
    p = _ns(sub, "brokerStatus", broker_status, "a broker's runtime info")
    _target(p)
    p = _ns(
        sub,
        "statsAll",
        stats_all,
        "per topic and group: backlog, in/out TPS (last minute), in/out messages (last day)",
    )
    p.add_argument("-t", "--topic", help="one topic (default: every topic)")
    p.add_argument("-a", "--activeTopic", dest="active", action="store_true",
                   help="only topics with traffic in the last day")  # fmt: skip
    p = _ns(sub, "brokerConsumeStats", broker_consume_stats, "every group's lag on one broker")
    p.add_argument("-b", "--brokerAddr", dest="broker", required=True, help="broker host:port")
    p.add_argument("-o", "--order", type=_bool, default=False, help="orderly topics only")
    p = _ns(
        sub,
        "consumerProgress",
        consumer_progress,
        "a group's offsets and lag per queue (every group's total without -g)",
    )
    p.add_argument("-g", "--groupName", dest="group", help="one group (default: all)")
    p.add_argument("-t", "--topicName", dest="topic", help="only this topic")
    p.add_argument("-c", "--clusterName", dest="cluster", help="only this cluster's masters")
    p = _ns(sub, "consumerConnection", consumer_connection, "a consumer group's live clients")
    p.add_argument("-g", "--consumerGroup", dest="group", required=True)
    p.add_argument("-c", "--clusterName", dest="cluster", help="only this cluster's masters")
    p = _ns(sub, "producerConnection", producer_connection, "a producer group's live clients")
    p.add_argument("-g", "--producerGroup", dest="group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p = _ns(sub, "queryMsgById", query_msg_by_id, "messages by offset or client message id")
    p.add_argument("-i", "--msgId", dest="msg_id", required=True, help="id[,id]")
    p.add_argument("-t", "--topic", help="topic of a client (unique) message id")
    p = _ns(sub, "queryMsgByKey", query_msg_by_key, "messages of a topic by key")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--msgKey", dest="key", required=True)
    p.add_argument("-b", "--beginTimestamp", dest="begin", type=parse_time_ms, default=0)
    p.add_argument("-e", "--endTimestamp", dest="end", type=parse_time_ms, default=2**63 - 1)
    p.add_argument("-c", "--maxNum", dest="max_num", type=int, default=64)
    p = _ns(sub, "queryMsgByOffset", query_msg_by_offset, "the message at a queue offset")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True)
    p.add_argument("-i", "--queueId", dest="queue_id", type=int, required=True)
    p.add_argument("-o", "--offset", type=int, required=True)
    p = _ns(sub, "resetOffsetByTime", reset_offset_by_time, "move a group's offsets to a time")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument(
        "-s",
        "--timestamp",
        type=parse_time_ms,
        required=True,
        help="ms, now, or yyyy-MM-dd#HH:mm:ss:SSS",
    )
    p.add_argument("-f", "--force", type=_bool, default=True)
    p = _ns(
        sub,
        "skipAccumulatedMessage",
        skip_accumulated_message,
        "move a group's offsets to the end of every queue (skip its backlog)",
    )
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p = _ns(sub, "getBrokerEpoch", get_broker_epoch, "the epoch entries of each replica")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("-b", "--brokerName", dest="broker_name")
    g.add_argument("-c", "--clusterName", dest="cluster")
    p = _ns(sub, "getBrokerConfig", get_broker_config, "a broker's config")
    _target(p)
    p = _ns(
        sub, "updateBrokerConfig", update_broker_config, "change a runtime-safe broker config key"
    )
    _target(p)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)

    _ctl(sub, "getControllerMetaData", get_controller_metadata, "each controller's view")
    p = _ctl(
        sub, "getSyncStateSet", get_sync_state_set, "master, epochs and SyncStateSet of groups"
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("-b", "--brokerName", dest="broker_name", help="name[,name]")
    g.add_argument("-c", "--clusterName", dest="cluster", help="every group of the cluster")
    p.add_argument("-n", "--namesrvAddr", dest="namesrv", help="name servers, with -c")
    p = _ctl(sub, "electMaster", elect_master, "elect this replica master")
    p.add_argument("-c", "--clusterName", dest="cluster", default="DefaultCluster")
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True)
    p.add_argument("-i", "--brokerId", dest="broker_id", type=int, required=True)
    p = _ctl(
        sub,
        "cleanBrokerMetadata",
        clean_broker_metadata,
        "drop a group's or some replicas' controller metadata",
    )
    p.add_argument("-c", "--clusterName", dest="cluster", default="DefaultCluster")
    p.add_argument("-bn", "--brokerName", dest="broker_name", required=True)
    p.add_argument(
        "-b",
        "--brokerControllerIdsToClean",
        dest="broker_ids",
        help='controller ids to clean, "1;2" (default: the whole group)',
    )
    p.add_argument("-l", "--cleanLivingBroker", dest="clean_living_broker", action="store_true")
    _ctl(sub, "getControllerConfig", get_controller_config, "each controller's config")
    p = _ctl(
        sub,
        "updateControllerConfig",
        update_controller_config,
        "change a runtime-safe controller config key",
    )
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)


def add_parsers(sub: Any) -> None:
    """`rmq-ha mqadmin ...`."""
    p = sub.add_parser(
        "mqadmin", help="RocketMQ's mqadmin commands (clusterList, updateTopic, ...)"
    )
    add_commands(p.add_subparsers(dest="mqadmin", required=True))
