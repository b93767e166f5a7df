"""`rmq-ha produce`, `rmq-ha consume` and `rmq-ha admin ...`: the Python client from a shell.

    rmq-ha produce -n 127.0.0.1:9876 -t Orders --count 10 --body hello --tags A
    rmq-ha consume -n 127.0.0.1:9876 -t Orders -g cg --count 10 [--orderly]
    rmq-ha admin cluster -n 127.0.0.1:9876
    rmq-ha admin create-topic -n 127.0.0.1:9876 -t Orders [-c DefaultCluster | -b host:port]
    rmq-ha admin route -n 127.0.0.1:9876 -t Orders
    rmq-ha admin offsets -n 127.0.0.1:9876 -t Orders [-g cg]

`-n` defaults to $NAMESRV_ADDR, then 127.0.0.1:9876 (as RocketMQ's tools). `--json` prints one
JSON object per line instead of text. Exit status: 0 when everything asked for succeeded, 1
when some operation failed, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from typing import Any

import trio

from rmq_ha.cliargs import positive_seconds
from rmq_ha.errors import RmqHaError


def _namesrv(args: argparse.Namespace) -> str:
    return str(args.namesrv or os.environ.get("NAMESRV_ADDR") or "127.0.0.1:9876")


def _emit(args: argparse.Namespace, obj: dict[str, Any], text: str) -> None:
    print(json.dumps(obj, sort_keys=True) if args.json else text, flush=True)


def _client_config(args: argparse.Namespace) -> Any:
    from rmq_ha.client import ClientConfig, SerializeType

    return ClientConfig(
        serialize_type=SerializeType[args.serialize],
        mq_client_api_timeout_s=args.api_timeout,
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namesrv", help="name servers host:port[;host:port] ($NAMESRV_ADDR)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--serialize", choices=["JSON", "ROCKETMQ"], default="JSON",
                   help="request header serialization")  # fmt: skip
    p.add_argument(
        "--api-timeout", type=positive_seconds, default=3.0, help="seconds per admin request"
    )
    p.add_argument("--log-level", default="warning")


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


# ---------------------------------------------------------------------------------------------
# produce


async def _produce(args: argparse.Namespace) -> int:
    from rmq_ha.client import Producer, ProducerConfig, SendError, SendResult

    cfg = ProducerConfig(client=_client_config(args), send_msg_timeout_s=args.timeout)
    ok = failed_definite = failed_unknown = 0
    t0 = time.monotonic()

    def report(i: int, r: SendResult) -> None:
        _emit(
            args,
            {"i": i, "status": r.status.value, "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id,
             "broker": r.queue.broker_name, "queueId": r.queue.queue_id,
             "queueOffset": r.queue_offset, "possibleDuplicate": r.possible_duplicate},
            f"{r.status.value} msgId={r.msg_id} queue={r.queue.broker_name}:{r.queue.queue_id} "
            f"offset={r.queue_offset}",
        )  # fmt: skip

    def report_error(i: int, e: RmqHaError) -> None:
        nonlocal failed_definite, failed_unknown
        if e.definite:
            failed_definite += 1
        else:
            failed_unknown += 1
        _emit(
            args,
            {"i": i, "error": type(e).__name__, "message": str(e), "definite": e.definite},
            f"FAILED ({'definite' if e.definite else 'outcome unknown'}): {e}",
        )

    async with Producer(args.group, _namesrv(args), config=cfg) as p:
        body = args.body
        if args.batch > 1:
            for start in range(0, args.count, args.batch):
                n = min(args.batch, args.count - start)
                try:
                    r = await p.send_batch(args.topic, [f"{body}-{start + k}" for k in range(n)])
                except RmqHaError as e:
                    report_error(start, e)
                    continue
                ok += n
                report(start, r)
        elif args.oneway:
            for i in range(args.count):
                try:
                    await p.send_oneway(args.topic, f"{body}-{i}", tags=args.tags, keys=args.keys)
                    ok += 1
                except RmqHaError as e:
                    report_error(i, e)
            _emit(args, {"oneway": ok}, f"{ok} oneway message(s) handed to the broker")
        else:
            for i in range(args.count):
                text = body if args.count == 1 else f"{body}-{i}"
                try:
                    r = await p.send(args.topic, text, tags=args.tags, keys=args.keys)
                except SendError as e:
                    report_error(i, e)
                    continue
                except RmqHaError as e:
                    report_error(i, e)
                    continue
                ok += 1
                report(i, r)
    failed = failed_definite + failed_unknown
    elapsed = time.monotonic() - t0
    _emit(
        args,
        {"summary": True, "ok": ok, "failedDefinite": failed_definite,
         "failedUnknown": failed_unknown, "seconds": round(elapsed, 3)},
        f"sent {ok}, failed {failed} ({failed_definite} definite, {failed_unknown} unknown) "
        f"in {elapsed:.3f} s",
    )  # fmt: skip
    return 0 if failed == 0 else 1


def run_produce(args: argparse.Namespace) -> int:
    _setup_logging(args.log_level)
    try:
        return trio.run(_produce, args)
    except RmqHaError as e:
        print(f"rmq-ha produce: {e}", file=sys.stderr)
        return 1


# ---------------------------------------------------------------------------------------------
# consume


async def _consume(args: argparse.Namespace) -> int:
    from rmq_ha.client import (
        ConsumeFrom,
        ConsumerConfig,
        ConsumeStatus,
        MessageExt,
        OrderlyStatus,
        PushConsumer,
    )

    cfg = ConsumerConfig(
        client=_client_config(args),
        consume_from=ConsumeFrom[args.consume_from.upper() + "_OFFSET"]
        if args.consume_from != "timestamp"
        else ConsumeFrom.TIMESTAMP,
        consume_timestamp_ms=args.timestamp,
    )
    count = 0
    done = trio.Event()
    last = time.monotonic()

    def show(msgs: list[MessageExt]) -> None:
        nonlocal count, last
        for m in msgs:
            count += 1
            last = time.monotonic()
            _emit(
                args,
                {"topic": m.topic, "broker": m.queue.broker_name, "queueId": m.queue.queue_id,
                 "queueOffset": m.queue_offset, "msgId": m.msg_id, "tags": m.tags,
                 "keys": m.keys, "reconsumeTimes": m.reconsume_times,
                 "body": m.body.decode("utf-8", "replace")},
                f"{m.queue.broker_name}:{m.queue.queue_id}@{m.queue_offset} msgId={m.msg_id} "
                f"tags={m.tags or ''} body={m.body.decode('utf-8', 'replace')}",
            )  # fmt: skip
        if args.count and count >= args.count:
            done.set()

    def concurrent(msgs: list[MessageExt], ctx: object) -> ConsumeStatus:
        show(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def orderly(msgs: list[MessageExt], ctx: object) -> OrderlyStatus:
        show(msgs)
        return OrderlyStatus.SUCCESS

    listener = orderly if args.orderly else concurrent
    said = None  # the route problem last printed: each new one once, not every round
    async with PushConsumer(
        args.group,
        _namesrv(args),
        args.topic,
        listener,
        expression=args.expression,
        orderly=args.orderly,
        config=cfg,
    ) as consumer:
        while not done.is_set():
            with trio.move_on_after(0.2):
                await done.wait()
            problem = consumer.route_problem(args.topic)
            if problem is not None and problem != said:
                print(f"rmq-ha consume: no route of {args.topic} yet: {problem}", file=sys.stderr)
            said = problem
            if args.idle_timeout and time.monotonic() - last > args.idle_timeout:
                break
    if not args.json:
        print(f"consumed {count} message(s)", file=sys.stderr)
    if count == 0 and said is not None:
        return 1  # it never reached the topic: not "nothing to consume"
    return 0 if not args.count or count >= args.count else 1


def run_consume(args: argparse.Namespace) -> int:
    _setup_logging(args.log_level)
    try:
        return trio.run(_consume, args)
    except KeyboardInterrupt:
        return 0
    except RmqHaError as e:
        print(f"rmq-ha consume: {e}", file=sys.stderr)
        return 1


# ---------------------------------------------------------------------------------------------
# admin


async def _admin(args: argparse.Namespace) -> int:
    from rmq_ha.client import Admin, MessageQueue
    from rmq_ha.protocol.perm import perm_to_string

    async with Admin(_namesrv(args), config=_client_config(args)) as admin:
        if args.admin == "cluster":
            info = await admin.cluster_info()
            for cluster in info.retrieve_all_cluster_names():
                for name in sorted(info.cluster_addr_table[cluster]):
                    bd = info.broker_addr_table.get(name)
                    for bid, addr in sorted((bd.broker_addrs if bd else {}).items()):
                        _emit(args, {"cluster": cluster, "brokerName": name, "brokerId": bid,
                                     "addr": addr},
                              f"{cluster:<20} {name:<20} {bid:>3} {addr}")  # fmt: skip
            return 0
        if args.admin == "route":
            route = await admin.route(args.topic)
            if args.json:
                print(json.dumps(route.to_obj(), sort_keys=True))
                return 0
            for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
                ids = ", ".join(f"{i}={a}" for i, a in sorted(bd.broker_addrs.items()))
                print(f"broker {bd.broker_name} (cluster {bd.cluster}): {ids}")
            for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
                perm = f"{qd.perm} ({perm_to_string(qd.perm)})"
                print(
                    f"queues {qd.broker_name}: read={qd.read_queue_nums} "
                    f"write={qd.write_queue_nums} perm={perm}"
                )
            return 0
        if args.admin == "create-topic":
            created = await admin.create_topic(
                args.topic,
                cluster=None if args.broker else args.cluster,
                broker_addr=args.broker,
                queue_nums=args.queues,
                perm=args.perm,
                order=args.order,
                wait_for_route_s=args.wait,
            )
            for a in created:
                _emit(args, {"topic": args.topic, "broker": a, "created": True},
                      f"create topic {args.topic} on {a}: OK")  # fmt: skip
            return 0
        if args.admin == "offsets":
            for q in await admin.topic_offsets(args.topic, args.group):
                found: int | None = None
                if args.timestamp is not None:
                    mq = MessageQueue(q.queue.topic, q.queue.broker_name, q.queue.queue_id)
                    found = await admin.search_offset(mq, args.timestamp)
                obj = dataclasses.asdict(q)
                obj.update(
                    queue=None, broker=q.queue.broker_name, queueId=q.queue.queue_id, lag=q.lag,
                    searched=found,
                )  # fmt: skip
                obj.pop("queue")
                text = (
                    f"{q.queue.broker_name}:{q.queue.queue_id} min={q.min_offset} "
                    f"max={q.max_offset}"
                )
                if args.group:
                    text += f" consumer={q.consumer_offset} lag={q.lag}"
                if found is not None:
                    text += f" at-timestamp={found}"
                _emit(args, obj, text)
            return 0
    return 2


def run_admin(args: argparse.Namespace) -> int:
    _setup_logging(args.log_level)
    try:
        return trio.run(_admin, args)
    except RmqHaError as e:
        print(f"rmq-ha admin {args.admin}: {e}", file=sys.stderr)
        return 1


# ---------------------------------------------------------------------------------------------
# parsers


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("produce", help="send messages with the Python client")
    _common(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", default="rmq-ha-cli-producer", help="producer group")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--body", default="hello", help="body text (suffixed -i when count > 1)")
    p.add_argument("--tags")
    p.add_argument("--keys")
    p.add_argument("--batch", type=int, default=1, help="send in batches of this many")
    p.add_argument("--oneway", action="store_true", help="oneway sends (no answer)")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds per send, retries included")
    p.set_defaults(func=run_produce)

    c = sub.add_parser("consume", help="consume messages with the Python push consumer")
    _common(c)
    c.add_argument("-t", "--topic", required=True)
    c.add_argument("-g", "--group", required=True, help="consumer group")
    c.add_argument("-e", "--expression", default="*", help='tag expression, e.g. "A || B"')
    c.add_argument("--count", type=int, default=0, help="stop after this many (0: never)")
    c.add_argument("--orderly", action="store_true", help="orderly consumption (queue locks)")
    c.add_argument("--from", dest="consume_from", choices=["last", "first", "timestamp"],
                   default="last", help="where a new group starts")  # fmt: skip
    c.add_argument("--timestamp", type=int, help="ms, with --from timestamp")
    c.add_argument("--idle-timeout", type=float, default=0.0,
                   help="stop after this many seconds without a message (0: never)")  # fmt: skip
    c.set_defaults(func=run_consume)

    a = sub.add_parser("admin", help="cluster, route, topic and offset administration")
    asub = a.add_subparsers(dest="admin", required=True)
    # mqadmin's controller commands (getSyncStateSet, getBrokerEpoch, electMaster, ...) under
    # `admin` too, taking the controller addresses with -a.
    from rmq_ha.controller.admin import controller_admin_parsers

    controller_admin_parsers(asub)
    from rmq_ha import storeadmin

    storeadmin.add_parsers(asub)
    cl = asub.add_parser("cluster", help="brokers of every cluster")
    _common(cl)
    r = asub.add_parser("route", help="the route of a topic")
    _common(r)
    r.add_argument("-t", "--topic", required=True)
    ct = asub.add_parser("create-topic", help="create or update a topic on a cluster's masters")
    _common(ct)
    ct.add_argument("-t", "--topic", required=True)
    ct.add_argument("-c", "--cluster", default="DefaultCluster")
    ct.add_argument("-b", "--broker", help="one broker host:port instead of a cluster")
    ct.add_argument("--queues", type=int, default=8, help="read and write queue count")
    ct.add_argument("--perm", type=int, default=6, help="2 write, 4 read, 6 both")
    ct.add_argument("--order", action="store_true")
    ct.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the route")
    of = asub.add_parser("offsets", help="min/max (and a group's) offsets of a topic's queues")
    _common(of)
    of.add_argument("-t", "--topic", required=True)
    of.add_argument("-g", "--group", help="also the group's committed offset and lag")
    of.add_argument("--timestamp", type=int, help="also the offset at this time (ms)")
    for p_ in (cl, r, ct, of):
        p_.set_defaults(func=run_admin)
