"""Server-side load balancing (QUERY_ASSIGNMENT / SET_MESSAGE_REQUEST_MODE): the pure
allocation and the persisted table of request modes. The real Java client runs it in
tests/interop (test_server_side_rebalance)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_ha.broker.assignment import POP, PULL, RequestModes, assign
from rmq_ha.protocol.models import MessageQueue, SetMessageRequestModeRequestBody

pytestmark = pytest.mark.timeout(60)


def queues(brokers: int, per: int, topic: str = "T") -> list[MessageQueue]:
    return [
        MessageQueue(topic=topic, broker_name=f"b{b}", queue_id=q)
        for b in range(brokers)
        for q in range(per)
    ]


@given(
    st.integers(1, 3),
    st.integers(1, 9),
    st.integers(1, 12),
    st.sampled_from(["AVG", "AVG_BY_CIRCLE"]),
)
def test_pull_mode_gives_every_queue_to_exactly_one_client(
    brokers: int, per: int, clients: int, strategy: str
) -> None:
    mqs = queues(brokers, per)
    cids = [f"10.0.0.{i}@c{i}" for i in range(clients)]
    shares = [
        assign(client_id=c, model="CLUSTERING", strategy=strategy, mq_all=mqs[::-1], cid_all=cids)
        for c in cids
    ]
    got = [(q.broker_name, q.queue_id) for share in shares for q in share or []]
    assert sorted(got) == sorted((q.broker_name, q.queue_id) for q in mqs)


def test_answers_for_broadcast_pop_unknown_clients_and_strategies() -> None:
    mqs = queues(2, 4)
    cids = ["a", "b", "c"]
    kw = {"mq_all": mqs, "cid_all": cids}
    assert assign(client_id="a", model="BROADCASTING", strategy="AVG", **kw) == mqs
    # not (yet) in the group's heartbeats: nothing, until the next rebalance
    assert assign(client_id="zz", model="CLUSTERING", strategy="AVG", **kw) == []
    # an unknown strategy: no valid answer (the client keeps its queues)
    assert assign(client_id="a", model="CLUSTERING", strategy="CONSISTENT_HASH", **kw) is None
    # pop with no share limit: every broker, any queue (-1), for every client
    every = assign(client_id="b", model="CLUSTERING", strategy="AVG", mode=POP, **kw)
    assert [(q.broker_name, q.queue_id) for q in every or []] == [("b0", -1), ("b1", -1)]
    # pop sharing with the next client: its own share plus the next one's
    own = assign(client_id="a", model="CLUSTERING", strategy="AVG", **kw) or []
    nxt = assign(client_id="b", model="CLUSTERING", strategy="AVG", **kw) or []
    shared = assign(client_id="a", model="CLUSTERING", strategy="AVG", mode=POP, pop_share=1, **kw)
    assert shared == own + nxt


def test_request_modes_persist_and_retry_topics_stay_pull(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config" / "messageRequestMode.json"
    m = RequestModes(path)
    assert m.get("T", "g").mode == PULL
    m.set(SetMessageRequestModeRequestBody(topic="T", consumer_group="g", mode=POP,
                                           pop_share_queue_num=2))  # fmt: skip
    m.set(SetMessageRequestModeRequestBody(topic="%RETRY%g", consumer_group="g", mode=POP))
    again = RequestModes(path)
    got = again.get("T", "g")
    assert (got.mode, got.pop_share_queue_num) == (POP, 2)
    assert again.get("%RETRY%g", "g").mode == PULL
    # a damaged file is read from its backup, as the other config files are
    m.set(SetMessageRequestModeRequestBody(topic="U", consumer_group="g", mode=POP))
    path.write_bytes(b'{"messageRequestModeMap": {"T": {"g": {"mode": "SIDEWAYS"}}}}')
    with caplog.at_level(logging.WARNING):
        back = RequestModes(path)
    assert back.get("T", "g").mode == POP and back.get("U", "g").mode == PULL
