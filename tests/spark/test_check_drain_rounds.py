"""The final drain over several rounds and several drain processes, and values read only on
another topic (found by a probe with hand-written histories, /work/probeH): a queue whose
end went down between drain rounds lost what earlier rounds read past the new end; a max
answer is paired with its own invoke, not a concurrent drainer's; a value read only on a
foreign topic is unexpected, not lost."""

from __future__ import annotations

import pytest

from rmq_ha import history as h

pytestmark = pytest.mark.timeout(240)


def _offsets(hist, p: int, detail: str, off: int | None, *, q: int = 0, outcome: str = "ok"):
    val = h.Value(topic="T", queue_id=q, broker="b0", detail=detail)
    hist.op(p, "invoke", "offsets", val)
    _answer(hist, p, detail, off, q=q, outcome=outcome)


def _answer(hist, p: int, detail: str, off: int | None, *, q: int = 0, outcome: str = "ok"):
    if outcome == "ok":
        done = h.Value(topic="T", queue_id=q, broker="b0", detail=detail, offset=off)
        hist.op(p, "ok", "offsets", done)
    else:
        val = h.Value(topic="T", queue_id=q, broker="b0", detail=detail)
        hist.op(p, outcome, "offsets", val, error="boom", definite=True)


def _round(hist, p: int, lo: int, hi: int, msgs: list[tuple[int, int, int]], *, q: int = 0):
    """One drain round of queue q by process p: its min and max, then one read."""
    _offsets(hist, p, "min", lo, q=q)
    _offsets(hist, p, "max", hi, q=q)
    hist.poll(p, msgs, group="drain", f="drain")


def _three_acked(hist) -> None:
    for v in (1, 2, 3):
        hist.send(1, v, off=v - 1)


@pytest.mark.parametrize("case", ["consumer read", "only the drain read", "second drainer"])
def test_values_an_earlier_drain_round_read_past_the_final_end_are_lost(hist, run_check, case):
    """v1..v3 at offsets 0-2; drain round 1 reads [0, 3), the final round is [0, 1) and reads
    offset 0 only: v2 and v3 were there and are gone (probe d9c, d9, d9b). The earlier round's
    reads exempted them from vanished (VALID); without round 1 the same history was INVALID."""
    _three_acked(hist)
    if case == "consumer read":
        hist.poll(10, [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    _round(hist, 90, 0, 3, [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    _round(hist, 91 if case == "second drainer" else 90, 0, 1, [(0, 0, 1)])
    res = run_check(hist)
    lost = res["analyses"]["lost"]
    assert (lost["count"], lost["definite"], lost["vanished"]) == (2, 2, 2), lost
    assert {e["v"] for e in lost["examples"]} == {2, 3}
    assert res["analyses"]["lost-write"]["count"] == 2
    assert res["valid"] is False


def test_a_later_round_with_a_higher_end_keeps_what_earlier_rounds_read(hist, run_check):
    """Round 2 finds a larger queue and reads only the new tail: nothing is lost (the earlier
    round's reads lie inside the final [min, max))."""
    _three_acked(hist)
    _round(hist, 90, 0, 2, [(0, 0, 1), (0, 1, 2)])
    _round(hist, 90, 0, 3, [(0, 2, 3)])
    res = run_check(hist)
    lost = res["analyses"]["lost"]
    assert (lost["count"], lost["vanished"]) == (0, 0), lost
    assert res["valid"] is True


@pytest.mark.parametrize("other", ["fail", "ok"])
def test_the_end_used_is_paired_with_its_own_invoke(hist, run_check, other):
    """Drainer 90 asks q0's max before v2 is acknowledged at q0/1; drainer 91 asks after (its
    answer fails, or says 2); 90's answer (1) completes last and 90 reads offset 0. The end
    used was asked before the ack: v2 may sit past it, so its loss is undecided (probe d1b,
    d1). It was a definite loss: the latest max invoke of any drainer was taken as the
    answer's."""
    hist.send(1, 1, off=0)
    hist.send(1, 3, q=1, off=0)
    _offsets(hist, 90, "min", 0)
    hist.op(90, "invoke", "offsets", h.Value(topic="T", queue_id=0, broker="b0", detail="max"))
    hist.send(1, 2, off=1)
    _offsets(hist, 91, "max", 2, outcome=other)
    _answer(hist, 90, "max", 1)
    hist.poll(90, [(0, 0, 1)], group="drain", f="drain")
    _round(hist, 91, 0, 1, [(1, 0, 3)], q=1)
    res = run_check(hist)
    lost = res["analyses"]["lost"]
    assert (lost["count"], lost["definite"], lost["undecided"]) == (1, 0, 1), lost
    assert res["valid"] == "unknown"


def test_a_value_read_only_on_a_foreign_topic_is_unexpected_not_lost(hist, run_check):
    """v1 acknowledged at T q0/0 and read only by a poll of topic U; the drain of T q0 finds
    only v2 (probe o7). Unexpected (some read saw it), not lost and not a lost write (it was
    counted in all three)."""
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    hist.op(10, "invoke", "poll", h.Value(topic="U", group="g"))
    msgs = [h.Read("U", 0, 5, 1, None, "b0")]
    hist.op(10, "ok", "poll", h.Value(topic="U", group="g", messages=msgs))
    _round(hist, 90, 0, 2, [(0, 1, 2)])
    res = run_check(hist)
    a = res["analyses"]
    assert (a["unexpected"]["valid"], a["unexpected"]["count"]) == (False, 1)
    assert (a["lost"]["count"], a["lost"]["vanished"]) == (0, 0), a["lost"]
    assert a["lost-write"]["count"] == 0
    assert res["valid"] is False


@pytest.mark.parametrize("rounds", [1, 2])
def test_a_read_past_the_final_end_after_that_answer_is_the_final_drains(hist, run_check, rounds):
    """v1, v2 acknowledged at offsets 0, 1; the drain's max answer says 1 (stale, or the queue
    grew), then its read finds both (probe C6; C10: a first round read offset 0 only). The
    read past the end came after the answer: the queue did not shrink below it, and v2 is not
    lost. It was called lost (vanished): any drain read at or past the final max counted as
    read before the end went down."""
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    if rounds == 2:
        _round(hist, 90, 0, 1, [(0, 0, 1)])
    _round(hist, 90, 0, 1, [(0, 0, 1), (0, 1, 2)])
    res = run_check(hist)
    lost = res["analyses"]["lost"]
    assert (lost["count"], lost["vanished"]) == (0, 0), lost
    assert res["analyses"]["lost-write"]["count"] == 0
    assert res["valid"] is True


def test_a_read_past_the_end_before_the_final_answer_still_shows_the_end_went_down(hist, run_check):
    """The rule the fix keeps: round 1 reads offsets 0-1 before the final answer says 1 and
    round 2 reads offset 0 only: v2 was there and is gone."""
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    _round(hist, 90, 0, 2, [(0, 0, 1), (0, 1, 2)])
    _round(hist, 90, 0, 1, [(0, 0, 1)])
    res = run_check(hist)
    lost = res["analyses"]["lost"]
    assert (lost["count"], lost["vanished"]) == (1, 1), lost
    assert res["valid"] is False
