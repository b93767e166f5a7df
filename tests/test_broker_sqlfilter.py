"""SQL92 filters on a running broker (enablePropertyFilter): pulls that carry an SQL92
subscription get only the messages whose properties match, and move past the others;
CHECK_CLIENT_CONFIG compiles the expression; with the key off (RocketMQ's default) both are
refused as RocketMQ refuses them. The Java client's push consumer is in tests/interop."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_ha.client import Admin, MessageQueue, Producer
from rmq_ha.client.api import PULL_FLAG_SUBSCRIPTION, PullStatus
from rmq_ha.client.errors import BrokerResponseError
from rmq_ha.protocol.admin import QueryConsumeQueueResponseBody
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.models import CheckClientRequestBody, SubscriptionData
from test_client_cluster import FAST_CLIENT, FAST_PRODUCER, client_cluster

pytestmark = pytest.mark.timeout(90)

MQ0 = MessageQueue("SqlT", "broker-a", 0)


async def _fill(ns: str) -> None:
    async with Admin(ns, config=FAST_CLIENT) as a:
        await a.create_topic("SqlT", cluster="DefaultCluster", queue_nums=1, wait_for_route_s=5)
    async with Producer("pg-sql", ns, config=FAST_PRODUCER) as p:
        for i in range(10):
            props = {"n": str(i), "color": "red" if i % 2 else "blue"}
            await p.send("SqlT", f"m{i}", tags=f"T{i % 3}", queue=MQ0, properties=props)


async def _pull(a: Admin, broker: str, sql: str, offset: int) -> tuple[PullStatus, list[str], int]:
    r = await a.instance.api.pull(
        broker, "broker-a", group="cg-sql", mq=MQ0, offset=offset, max_nums=32,
        sys_flag=PULL_FLAG_SUBSCRIPTION, subscription=sql, expression_type="SQL92",
    )  # fmt: skip
    return r.status, [m.body.decode() for m in r.messages], r.next_begin_offset


async def test_sql92_pulls_serve_only_matching_messages(tmp_path: Path) -> None:
    async with client_cluster(tmp_path, enable_property_filter=True) as env:
        await _fill(env.namesrv)
        async with Admin(env.namesrv, config=FAST_CLIENT) as a:
            code, bodies, nxt = await _pull(a, env.broker, "n BETWEEN 2 AND 6 AND color = 'red'", 0)
            assert (code, bodies, nxt) == (PullStatus.FOUND, ["m3", "m5"], 10)
            _, bodies, _ = await _pull(a, env.broker, "TAGS IN ('T0') OR n > 8", 0)
            assert bodies == ["m0", "m3", "m6", "m9"]
            _, bodies, _ = await _pull(a, env.broker, "nope IS NULL AND n < 2", 0)
            assert bodies == ["m0", "m1"]
            # nothing matches: the pull moves past what it read
            code, bodies, nxt = await _pull(a, env.broker, "n > 100", 0)
            assert (code, bodies, nxt) == (PullStatus.NO_MATCHED_MSG, [], 10)
            # an expression that does not compile
            with pytest.raises(BrokerResponseError) as e:
                await _pull(a, env.broker, "n >", 0)
            assert e.value.code == Resp.SUBSCRIPTION_PARSE_FAILED

            def check(sql: str) -> bytes:
                sub = SubscriptionData(topic="SqlT", sub_string=sql, expression_type="SQL92")
                return CheckClientRequestBody(
                    client_id="c", group="cg-sql", subscription_data=sub
                ).to_json()

            api = a.instance.api
            # the pulls' subscription is remembered for the group (RocketMQ's
            # compensateSubscribeData): queryCq shows it
            ext = {"topic": "SqlT", "queueId": "0", "index": "0", "count": "1",
                   "consumerGroup": "cg-sql"}  # fmt: skip
            r = await api.call(env.broker, RC.QUERY_CONSUME_QUEUE, ext)
            cq = QueryConsumeQueueResponseBody.from_json(r.body)
            assert cq.filter_data is None and cq.subscription_data is not None
            assert cq.subscription_data.expression_type == "SQL92"
            # a queue id the topic does not have: INVALID_PARAMETER, naming the consumer
            with pytest.raises(BrokerResponseError) as e:
                await a.instance.api.pull(
                    env.broker, "broker-a", group="cg-sql",
                    mq=MessageQueue("SqlT", "broker-a", 7), offset=0, max_nums=1,
                    sys_flag=PULL_FLAG_SUBSCRIPTION, subscription="*",
                )  # fmt: skip
            assert e.value.code == Resp.INVALID_PARAMETER and "consumer:[/127.0.0.1:" in str(
                e.value
            )
            r = await api.call(env.broker, RC.CHECK_CLIENT_CONFIG, None, check("n > 1"))
            assert r.code == Resp.SUCCESS
            with pytest.raises(BrokerResponseError) as e:
                await api.call(env.broker, RC.CHECK_CLIENT_CONFIG, None, check("n > 'x'"))
            assert e.value.code == Resp.SUBSCRIPTION_PARSE_FAILED
            assert "cannot be compared" in str(e.value)


async def test_sql92_is_refused_with_property_filters_off(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await _fill(env.namesrv)
        async with Admin(env.namesrv, config=FAST_CLIENT) as a:
            with pytest.raises(BrokerResponseError) as e:
                await _pull(a, env.broker, "n > 1", 0)
            assert e.value.code == Resp.SYSTEM_ERROR
            assert "does not support consumer to filter message by SQL92" in str(e.value)
