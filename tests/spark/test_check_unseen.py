"""unseen_by_group counts a value only against the consumer groups that poll its topic
(issue 17: with several workloads, each group on its own topic, it used to equal the
acknowledged count because every group was expected to read every value)."""

from __future__ import annotations

import pytest

from rmq_ha import history as h

pytestmark = pytest.mark.timeout(240)


def _send(hist, p: int, topic: str, v: int, off: int) -> None:  # type: ignore[no-untyped-def]
    hist.op(p, "invoke", "send", h.Value(topic=topic, value=v))
    ok = h.Value(topic=topic, value=v, queue_id=0, queue_offset=off, broker="b0", status="SEND_OK")
    hist.op(p, "ok", "send", ok)


def _poll(hist, p: int, topic: str, group: str, msgs: list[tuple[int, int]]) -> None:  # type: ignore[no-untyped-def]
    hist.op(p, "invoke", "poll", h.Value(topic=topic, group=group))
    reads = [h.Read(topic, 0, off, v, None, "b0") for off, v in msgs]
    hist.op(p, "ok", "poll", h.Value(topic=topic, group=group, messages=reads))


def test_unseen_by_group_counts_only_groups_that_subscribe_to_the_topic(hist, run_check):
    _send(hist, 1, "A", 1, 0)
    _send(hist, 1, "A", 2, 1)  # group ga never reads it: unseen by its one subscriber
    _send(hist, 2, "B", 3, 0)
    _send(hist, 2, "C", 4, 0)  # no group polls topic C: no group expected to read it
    _poll(hist, 10, "A", "ga", [(0, 1)])
    _poll(hist, 11, "B", "gb", [(0, 3)])
    r = run_check(hist, only=["lost"])["analyses"]["lost"]
    assert r["acknowledged"] == 4
    assert r["consumer_groups"] == ["ga", "gb"]
    assert r["unseen_by_group"] == 1


def test_unseen_by_group_needs_every_subscribing_group(hist, run_check):
    _send(hist, 1, "A", 1, 0)
    _send(hist, 1, "A", 2, 1)
    _poll(hist, 10, "A", "g1", [(0, 1), (1, 2)])
    _poll(hist, 11, "A", "g2", [(0, 1)])  # g2 misses value 2
    _poll(hist, 12, "B", "g3", [])  # another topic's group expects nothing of topic A
    r = run_check(hist, only=["lost"])["analyses"]["lost"]
    assert r["unseen_by_group"] == 1
