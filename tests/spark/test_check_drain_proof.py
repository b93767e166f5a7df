"""Histories where the final drain cannot vouch for a loss, and inputs that crashed the checker
or passed when they must not (found by a probe with hand-written histories): the checker
never claims a loss it cannot prove, and never passes a run that did not prove there was none."""

from __future__ import annotations

import pytest

from rmq_ha import history as h

pytestmark = pytest.mark.timeout(240)


def _ack_without_queue(hist, p: int, v: int, *, off: int | None = None) -> None:
    """A send acknowledged without naming its queue (the schema allows it)."""
    hist.invoke_send(p, v)
    hist.op(p, "ok", "send", h.Value(topic="T", value=v, queue_offset=off, status="SEND_OK"))


def test_keyed_sends_read_only_by_the_drain_are_checked_for_order(hist, run_check):
    """No consumer group polls: the ordering analysis used to crash (greatest() of one column)
    and the run ended with exit 2, as if the history broke the schema."""
    hist.send(1, 1, key="k", off=0)
    hist.send(1, 2, key="k", off=1)
    hist.drain(20, [(0, 0, 2), (0, 1, 1)])  # stored and read in the reverse of send order
    r = run_check(hist)
    o = r["analyses"]["ordering"]
    assert (o["valid"], o["count"]) == (False, 1)
    assert r["valid"] is False


def test_acknowledgments_naming_no_queue_need_a_drain(hist, run_check):
    """Every send read, but no drain ran: unknown, not valid "exactly-once" (the drain's
    coverage counted only acknowledgments naming a queue, so none meant complete)."""
    _ack_without_queue(hist, 1, 1)
    _ack_without_queue(hist, 1, 2)
    hist.poll(10, [(0, 0, 1), (0, 1, 2)])
    r = run_check(hist)
    assert r["drain"]["complete"] is False
    assert r["valid"] == "unknown"
    assert any("no final drain" in x for x in r["unknown_because"])


@pytest.mark.parametrize("off", [None, 7])
def test_an_unread_value_acknowledged_on_no_queue_is_not_a_definite_loss(
    hist, run_check, off: int | None
) -> None:
    """Without queue_id (with or without an offset) no drain can show the value lost: with an
    offset, its queue hash was built from a null queue id and looked drained."""
    hist.send(1, 1, off=0)
    _ack_without_queue(hist, 1, 2, off=off)
    hist.drain(20, [(0, 0, 1)])
    r = run_check(hist)
    lost = r["analyses"]["lost"]
    assert (lost["count"], lost["definite"], lost["undecided"]) == (1, 0, 1)
    assert r["valid"] == "unknown"
    assert r["guarantee"] == "unknown"


def test_a_send_acknowledged_after_the_drain_asked_for_its_queues_end_is_undecided(hist, run_check):
    hist.send(1, 1, off=0)
    hist.drain(20, [(0, 0, 1)])  # max = 1
    hist.send(2, 2, off=1)  # acknowledged at offset 1, after the drain looked
    r = run_check(hist)
    lost = r["analyses"]["lost"]
    assert (lost["count"], lost["definite"], lost["undecided"]) == (1, 0, 1)
    assert r["valid"] == "unknown"


def test_a_send_acknowledged_before_the_drain_is_still_a_definite_loss(hist, run_check):
    """The same loss acknowledged before the drain's max query: the drain vouches for it (the
    log lost an acknowledged message past the end it reported)."""
    hist.send(1, 1, off=0)
    hist.send(2, 2, off=1)
    hist.drain(20, [(0, 0, 1)])  # max = 1: offset 1 is gone
    r = run_check(hist)
    lost = r["analyses"]["lost"]
    assert (lost["count"], lost["definite"]) == (1, 1)
    assert r["valid"] is False


def test_a_delayed_message_not_yet_due_when_the_drain_began_is_not_a_definite_loss(hist, run_check):
    hist.send(1, 1, off=0)
    hour = 3_600_000  # due an hour after its invoke, long after the drain
    hist.op(2, "invoke", "send", h.Value(topic="T", value=2, delay_ms=hour))
    done = h.Value(
        topic="T", value=2, delay_ms=hour, queue_id=0, queue_offset=1, broker="b0", status="SEND_OK"
    )
    hist.op(2, "ok", "send", done)
    hist.drain(20, [(0, 0, 1)], ends={0: 1})
    r = run_check(hist)
    lost = r["analyses"]["lost"]
    assert (lost["count"], lost["definite"]) == (1, 0)
    d = r["analyses"]["delay"]
    assert d["lost"]["not_due_when_the_drain_began"] == 1
    assert d["valid"] == "unknown"
    assert r["valid"] == "unknown"


def test_sends_acknowledged_only_with_another_status_acknowledge_nothing(hist, run_check):
    hist.send(1, 1, off=0, status="FLUSH_SLAVE_TIMEOUT")
    hist.drain(20, [(0, 0, 1)])
    r = run_check(hist)
    assert r["valid"] == "unknown"
    assert any("SEND_OK" in x for x in r["unknown_because"])


def test_a_read_that_completed_before_its_send_was_invoked_is_unexpected(hist, run_check):
    hist.poll(10, [(0, 0, 5)])
    hist.send(1, 5, off=0)
    hist.drain(20, [(0, 0, 5)])
    r = run_check(hist)
    u = r["analyses"]["unexpected"]
    assert (u["valid"], u["count"]) == (False, 1)
    assert r["valid"] is False


@pytest.mark.parametrize("reader", ["drain", "consumer"])
def test_a_value_found_only_on_another_queue_of_its_topic_is_lost_from_its_own(
    hist, run_check, reader: str
) -> None:
    """Probe (session 17): v1 acknowledged on queue 0 at offset 0; the final drain read queue 0
    from 0 to its end without it, and found it on queue 1. It vanished from where it was
    acknowledged: lost (and at two positions). When the drain was the one to read it on queue
    1 it passed as valid (any final drain read of the value counted as its own queue's); a
    consumer's read there was already judged lost."""
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    if reader == "consumer":
        hist.poll(5, [(1, 0, 1)])
        hist.drain(20, [(0, 1, 2), (1, 0, 1)], ends={0: 2, 1: 1})
    else:
        hist.drain(20, [(0, 1, 2), (1, 0, 1)], ends={0: 2, 1: 1})
    r = run_check(hist)
    lost = r["analyses"]["lost"]
    assert (lost["count"], lost["definite"]) == (1, 1), lost
    assert r["valid"] is False


def test_a_value_the_drain_read_twice_on_its_own_queue_and_elsewhere_is_not_lost(
    hist, run_check
) -> None:
    """The other way round: the drain found the value on its own queue (and once more on
    another): duplicated, not lost."""
    hist.send(1, 1, off=0)
    hist.drain(20, [(0, 0, 1), (1, 0, 1), (2, 0, 1)], ends={0: 1, 1: 1, 2: 1})
    r = run_check(hist)
    assert r["analyses"]["lost"]["count"] == 0
    assert r["analyses"]["duplicated"]["count"] == 1
