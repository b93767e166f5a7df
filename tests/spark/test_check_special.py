"""Known answers for the special-message analyses (delay, transaction, pop; docs/checker.md):
one valid history each, and one history per anomaly that must be reported."""

from __future__ import annotations

from typing import Any

import pytest

from rmq_ha import history as h

pytestmark = pytest.mark.timeout(240)


# ---- history helpers --------------------------------------------------------------------------


def send(
    hist: Any,
    p: int,
    v: int,
    *,
    topic: str,
    outcome: str = "ok",
    at: tuple[float, float] | None = None,
    status: str | None = "SEND_OK",
    off: int | None = None,
    invoke: dict[str, Any] | None = None,
    done: dict[str, Any] | None = None,
) -> None:
    """A send of value `v` to `topic`: invoke (+ `invoke` fields) and, unless `outcome` is
    None, its completion (+ `done` fields)."""
    hist.op(
        p,
        "invoke",
        "send",
        h.Value(topic=topic, value=v, **(invoke or {})),
        at_ms=at[0] if at else None,
    )
    if outcome is None:
        return
    fields: dict[str, Any] = dict(done or {})
    if outcome == "ok":
        fields.update(broker="b0", queue_id=0, queue_offset=off, status=status)
    hist.op(
        p,
        outcome,
        "send",
        h.Value(topic=topic, value=v, **fields),
        at_ms=at[1] if at else None,
        error=None if outcome == "ok" else "boom",
        definite=True if outcome == "fail" else None,
    )


def delayed(
    hist: Any, p: int, v: int, delay_ms: int, at: tuple[float, float] | None, **kw: Any
) -> None:
    how = {"delay_ms": delay_ms, "detail": "timer"}
    send(hist, p, v, topic="D", at=at, invoke=how, done=how, **kw)


def txn(hist: Any, p: int, v: int, plan: str, fate: str | None, outcome: str | None) -> None:
    """A transactional send planned `plan`, invoked at 100 * v ms; `fate` is what the
    completion records."""
    send(
        hist,
        p,
        v,
        topic="X",
        outcome=outcome,
        at=(100 * v, 100 * v + 10),
        invoke={"txn": plan},
        done={"txn": fate} if fate else {},
        status="SEND_OK" if outcome == "ok" else None,
    )


def read(
    hist: Any,
    p: int,
    msgs: list[tuple[int, int, int | None]],
    *,
    group: str,
    at: float | None = None,
    f: str = "poll",
    topic: str = "D",
) -> None:
    """A poll (or drain) by `group` delivering (queue_id, offset, value) messages, completing
    at `at` ms."""
    hist.op(p, "invoke", f, h.Value(topic=topic, group=group), at_ms=None if at is None else at - 1)
    reads = [h.Read(topic, q, o, v, None, "b0") for q, o, v in msgs]
    hist.op(p, "ok", f, h.Value(topic=topic, group=group, messages=reads), at_ms=at)


def drain(hist: Any, msgs: list[tuple[int, int, int | None]], **kw: Any) -> None:
    """The final drain: min / max offsets of every queue (conftest.Hist.bounds), then the
    reads."""
    topic = kw.get("topic", "D")
    hist.bounds(90, [h.Read(topic, q, o, v, None, "b0") for q, o, v in msgs])
    read(hist, 90, msgs, group="drain", f="drain", **kw)


def pop(
    hist: Any, p: int, values: list[int | None], *, topic: str = "P", group: str = "gp"
) -> None:
    hist.op(p, "invoke", "pop", h.Value(topic=topic, group=group, invisible_ms=3000))
    reads = [h.Read(topic, 0, i, v, None, "b0") for i, v in enumerate(values)]
    hist.op(p, "ok", "pop", h.Value(topic=topic, group=group, messages=reads, invisible_ms=3000))


def ack(hist: Any, p: int, v: int, outcome: str = "ok", f: str = "ack", group: str = "gp") -> None:
    val = h.Value(topic="P", group=group, value=v, broker="b0", queue_id=0, queue_offset=0)
    if f == "change-invisible":
        val.invisible_ms = 1000
    hist.op(p, "invoke", f, val)
    hist.op(
        p,
        outcome,
        f,
        val,
        error=None if outcome == "ok" else "boom",
        definite=True if outcome == "fail" else None,
    )


def other_topic_undrained(hist: Any) -> None:
    """A send to topic OTHER, acknowledged after the final drain asked its queues for their
    bounds (so it never asked OTHER's) and read by a poll: the drain is incomplete, on a
    queue of no other topic."""
    send(hist, 7, 500, topic="OTHER", off=0)
    read(hist, 17, [(0, 0, 500)], group="go", topic="OTHER")


# ---- delay ------------------------------------------------------------------------------------


def valid_delays(hist: Any) -> None:
    delayed(hist, 1, 1, 1000, (100, 110))  # due at 1100
    delayed(hist, 1, 2, 2000, (200, 210))  # due at 2200
    delayed(hist, 1, 3, 1000, (300, 310))  # due at 1300
    read(hist, 10, [(0, 0, 1)], group="gd", at=1_150)  # 50 ms late
    read(hist, 10, [(0, 1, 3)], group="gd", at=1_200)  # 100 ms early: within the tolerance
    read(hist, 10, [(0, 2, 2)], group="gd", at=2_300)  # 100 ms late
    drain(hist, [(0, 0, 1), (0, 1, 3), (0, 2, 2)], at=9_000)


def test_delay_valid_history_reports_lateness(hist, run_check):
    valid_delays(hist)
    res = run_check(hist)
    r = res["analyses"]["delay"]
    assert (r["valid"], r["count"]) == (True, 0)
    assert (r["delayed_sends"], r["acknowledged"], r["timers"]) == (3, 3, 3)
    q = r["lateness_ms"]
    assert (q["count"], q["p50"], q["max"]) == (3, pytest.approx(50), pytest.approx(100))
    assert r["early"]["count"] == 0 and r["lost"]["count"] == 0
    assert r["delivered_to_group"] == 3 and r["delivered_only_by_drain"] == 0
    # each read once by its group, and once more by the final drain: not read more than once
    assert r["read_more_than_once"] == 0
    assert r["latest"][0]["v"] == 2
    # the generic analyses accept sends without an acknowledged position
    assert res["valid"] is True and res["safety_failed"] == []
    assert res["analyses"]["inconsistent-offsets"]["count"] == 0


def test_delay_early_delivery_is_an_anomaly(hist, run_check):
    valid_delays(hist)
    delayed(hist, 2, 4, 1000, (400, 410))  # due at 1400
    read(hist, 11, [(1, 0, 4)], group="gd", at=1_100)  # 300 ms early
    drain(hist, [(1, 0, 4)], at=9_100)
    r = run_check(hist, only=["delay"])["analyses"]["delay"]
    assert (r["valid"], r["count"], r["early"]["count"]) == (False, 1, 1)
    e = r["early"]["examples"][0]
    assert e["v"] == 4 and e["first_read_vs_due_ms"] == pytest.approx(-300)
    # 300 ms early is fine under a 400 ms tolerance
    r = run_check(hist, only=["delay"], delay_tolerance_ms=400)["analyses"]["delay"]
    assert (r["valid"], r["early"]["count"]) == (True, 0)


@pytest.mark.parametrize(
    ("kind", "window", "excused"),
    [
        ("clock", (900, 1_000), True),  # inside the wait [400, 1100 (the read)]
        ("clock", (100, 450), True),  # began before the invoke, ended during the wait
        ("clock", (1_500, 2_000), False),  # after the due time: not the cause
        ("clock", (1_150, 1_300), False),  # after the read, before the due time: neither
        ("kill", (900, 1_000), False),  # another fault moves no clock
    ],
)
def test_delay_early_delivery_through_a_clock_fault_fails_nothing(
    hist, run_check, kind, window, excused
):
    """Fault probe D2: a clock fault moves the broker's clock, on which it counts a delay, so
    a message can come early through the fault. An early read of a value whose wait
    [invoke, due] a clock fault overlapped is counted apart (early.during_clock_faults) and
    fails nothing; any other early read still fails the analysis."""
    valid_delays(hist)
    delayed(hist, 2, 4, 1000, (400, 410))  # due at 1400
    read(hist, 11, [(1, 0, 4)], group="gd", at=1_100)  # 300 ms early
    drain(hist, [(1, 0, 4)], at=9_100)
    hist.fault(1, *window, kind=kind)
    r = run_check(hist, only=["delay"])["analyses"]["delay"]
    if excused:
        assert (r["valid"], r["early"]["count"], r["early"]["during_clock_faults"]) == (
            True,
            0,
            1,
        )
    else:
        assert (r["valid"], r["early"]["count"], r["early"]["during_clock_faults"]) == (
            False,
            1,
            0,
        )


def _stop(hist: Any, fid: int, at_ms: float) -> None:
    from rmq_ha import history as hh

    hist.op(-1, "info", "fault-stop", hh.Value(fault="clock", fault_id=fid, targets=["n1"]),
            at_ms=at_ms)  # fmt: skip


def _start(hist: Any, fid: int, at_ms: float) -> None:
    from rmq_ha import history as hh

    hist.op(-1, "info", "fault-start", hh.Value(fault="clock", fault_id=fid, targets=["n1"]),
            at_ms=at_ms)  # fmt: skip


@pytest.mark.parametrize("case", ["stopped-twice", "id-reused", "past-10000-nemesis-ops"])
def test_a_clock_window_is_its_own_start_to_its_own_stop(hist, run_check, case):
    """Probe (session 17): a second fault-stop of one fault_id moved the window's end past
    the early read (excused it); a start that reused the id replaced the earlier window (an
    early read inside it failed); nemesis ops past the 10,000th were dropped, so a clock
    window closed by the 10,001st stayed open to the end of the history (excused it). The
    early read at 1,100 (due at 1,400) is after the clock fault [100, 300] and inside none."""
    if case == "past-10000-nemesis-ops":
        # 9,999 nemesis ops before the clock fault's start (the 10,000th) and stop
        for i in range(4_999):
            hist.fault(10_000 + i, 1 + i / 10_000, 2 + i / 10_000)
        hist.fault(99_999, 3, None)
    valid_delays(hist)
    delayed(hist, 2, 4, 1000, (400, 410))  # due at 1400
    read(hist, 11, [(1, 0, 4)], group="gd", at=1_100)  # 300 ms early
    drain(hist, [(1, 0, 4)], at=9_100)
    _start(hist, 1, 100)
    _stop(hist, 1, 300)
    if case == "stopped-twice":
        _stop(hist, 1, 5_000)
    elif case == "id-reused":
        _start(hist, 1, 6_000)
        _stop(hist, 1, 6_100)
    r = run_check(hist, only=["delay"])["analyses"]["delay"]
    assert (r["valid"], r["early"]["count"], r["early"]["during_clock_faults"]) == (False, 1, 0)


def test_a_clock_window_reused_later_still_excuses_its_own_reads(hist, run_check):
    valid_delays(hist)
    delayed(hist, 2, 4, 1000, (400, 410))  # due at 1400
    read(hist, 11, [(1, 0, 4)], group="gd", at=1_100)  # 300 ms early, inside [1,000, 1,200]
    drain(hist, [(1, 0, 4)], at=9_100)
    _start(hist, 1, 1_000)
    _stop(hist, 1, 1_200)
    _start(hist, 1, 6_000)  # the id used again later
    _stop(hist, 1, 6_100)
    r = run_check(hist, only=["delay"])["analyses"]["delay"]
    assert (r["valid"], r["early"]["count"], r["early"]["during_clock_faults"]) == (True, 0, 1)


def test_delay_early_delivery_to_the_drain_counts_too(hist, run_check):
    delayed(hist, 1, 1, 60_000, (100, 110))
    drain(hist, [(0, 0, 1)], at=5_000)
    r = run_check(hist, only=["delay"])["analyses"]["delay"]
    assert (r["valid"], r["early"]["count"], r["delivered_only_by_drain"]) == (False, 1, 1)
    assert r["lateness_ms"]["count"] == 0


def test_delay_lost_delayed_message(hist, run_check):
    valid_delays(hist)
    delayed(hist, 2, 5, 1000, (500, 510))  # acknowledged, never read
    delayed(hist, 2, 6, 1000, (600, 610), status="FLUSH_SLAVE_TIMEOUT")  # not promised
    delayed(hist, 2, 7, 1000, (700, 710), outcome="fail")  # definitely not sent
    drain(hist, [], at=9_200)
    res = run_check(hist)
    r = res["analyses"]["delay"]
    assert (r["valid"], r["count"], r["lost"]["count"]) == (False, 1, 1)
    assert [e["v"] for e in r["lost"]["examples"]] == [5]
    assert set(res["safety_failed"]) == {"delay", "lost"}


def test_delay_lost_without_a_drain_is_unknown(hist, run_check):
    delayed(hist, 1, 1, 1000, (100, 110))
    delayed(hist, 1, 2, 1000, (200, 210))
    read(hist, 10, [(0, 0, 1)], group="gd", at=1_200)
    r = run_check(hist, only=["delay"])["analyses"]["delay"]
    assert (r["valid"], r["lost"]["count"]) == ("unknown", 1)


def test_delay_counts_a_send_whose_completion_omits_delay_ms(hist, run_check):
    """delay_ms on the invoke alone makes the send delayed: its acknowledgment counts."""
    valid_delays(hist)
    send(hist, 2, 5, topic="D", at=(500, 510), invoke={"delay_ms": 1000, "detail": "timer"})
    drain(hist, [(0, 0, 1), (0, 1, 3), (0, 2, 2)], at=9_200)
    r = run_check(hist, only=["delay"])["analyses"]["delay"]
    assert (r["acknowledged"], r["lost"]["count"], r["valid"]) == (4, 1, False)


def test_delay_loss_acknowledged_after_the_drains_max_query_is_undecided(hist, run_check):
    """As lost decides (core.undecided): the drain asked the queue for its end before the
    send was acknowledged, so the message may sit past the end the drain read to."""
    delayed(hist, 1, 1, 1000, (100, 110))
    read(hist, 10, [(0, 0, 1)], group="gd", at=1_150)
    how = {"delay_ms": 1, "detail": "timer"}
    hist.op(2, "invoke", "send", h.Value(topic="D", value=2, **how), at_ms=1_200)
    hist.bounds(90, [h.Read("D", 0, 0, 1, None, "b0")])
    done = h.Value(topic="D", value=2, broker="b0", queue_id=0, queue_offset=1,
                   status="SEND_OK", **how)  # fmt: skip
    hist.op(2, "ok", "send", done)
    read(hist, 90, [(0, 0, 1)], group="drain", f="drain")
    res = run_check(hist)
    d, lost = res["analyses"]["delay"], res["analyses"]["lost"]
    assert (d["lost"]["count"], d["lost"]["undecided"], d["valid"]) == (1, 1, "unknown")
    assert lost["valid"] == "unknown"
    assert res["valid"] == "unknown"


def _failed_bounds(hist: Any, broker: str, topic: str = "D") -> None:
    """The drain asked a queue of `broker` for its bounds and got no answer."""
    val = h.Value(topic=topic, queue_id=0, broker=broker, detail="min")
    hist.op(90, "invoke", "offsets", val)
    hist.op(90, "fail", "offsets", val, error="boom", definite=True)


def test_a_delayed_loss_is_undecided_while_a_queue_of_its_topic_is_undrained(hist, run_check):
    """A delayed message may be delivered to another broker's queue of its topic (escaped
    by an acting slave): with that queue undrained its absence proves nothing."""
    delayed(hist, 1, 1, 1000, (100, 110))
    delayed(hist, 1, 2, 1000, (200, 210))
    read(hist, 10, [(0, 0, 1)], group="gd", at=1_200)
    _failed_bounds(hist, "b1")
    drain(hist, [(0, 0, 1)], at=9_000)
    res = run_check(hist)
    d, lost = res["analyses"]["delay"], res["analyses"]["lost"]
    assert (d["lost"]["count"], d["lost"]["undecided"], d["valid"]) == (1, 1, "unknown")
    assert (lost["count"], lost["valid"]) == (1, "unknown")
    assert res["valid"] == "unknown"
    assert "b1/D/0" in res["unknown_because"][0]


def test_a_definite_delayed_loss_fails_though_another_topic_is_undrained(hist, run_check):
    """As lost decides, value by value: a delayed send acknowledged on a queue the drain read
    to its end, due long before it, and never read is a definite loss, whatever the drain
    left undone on another topic's queue (it made delay unknown)."""
    valid_delays(hist)
    delayed(hist, 2, 5, 1000, (500, 510))  # due at 1500, never read
    drain(hist, [(0, 0, 1), (0, 1, 3), (0, 2, 2)], at=9_000)
    other_topic_undrained(hist)
    res = run_check(hist)
    d, lost = res["analyses"]["delay"], res["analyses"]["lost"]
    assert (lost["valid"], lost["definite"], lost["drained"]) == (False, 1, False)
    assert (d["lost"]["count"], d["lost"]["undecided"], d["valid"]) == (1, 0, False)
    assert set(res["safety_failed"]) == {"delay", "lost"}


def test_delay_latest_breaks_ties_by_value(hist, run_check):
    """Equally late values are listed smallest first: the examples are the same whatever
    the history's format or its partitioning."""
    for i, v in enumerate((107, 103, 110, 101, 105, 109, 102, 108, 104, 106)):
        delayed(hist, 1, v, 1000, (100 * i, 100 * i + 5))
        read(hist, 10, [(0, i, v)], group="gd", at=100 * i + 1_050)  # 50 ms late, each
    drain(hist, [(0, i, v) for i, v in enumerate((107, 103, 110, 101, 105))], at=9_000)
    r = run_check(hist, only=["delay"])["analyses"]["delay"]
    assert [e["v"] for e in r["latest"]] == [101, 102, 103]
    assert {e["lateness_ms"] for e in r["latest"]} == {50.0}


def test_a_delay_only_on_the_completion_makes_no_delayed_send(hist, run_check):
    """A send is delayed when its invoke carries delay_ms (docs/checker.md), as core's due
    time has it: a completion naming a delay the invoke did not ask for is a plain send,
    and reading it at once is not early."""
    send(hist, 1, 1, topic="D", at=(0, 5), done={"delay_ms": 10_000, "detail": "timer"})
    read(hist, 10, [(0, 0, 1)], group="gd", at=50)
    drain(hist, [(0, 0, 1)], at=200)
    res = run_check(hist)
    d = res["analyses"]["delay"]
    assert (d["valid"], d.get("applies")) == ("unknown", False)
    assert res["stats"]["special"]["delayed_sends"] == 0
    assert res["valid"] is True


def test_stats_count_delayed_sends_not_ops(hist, run_check):
    valid_delays(hist)  # three sends, delay_ms on invoke and completion
    send(hist, 2, 4, topic="D", at=(400, 410), invoke={"delay_ms": 1000, "detail": "timer"})
    res = run_check(hist, only=["delay"])
    assert res["stats"]["special"]["delayed_sends"] == 4
    assert res["analyses"]["delay"]["delayed_sends"] == 4


def test_delay_due_time_is_exact_on_a_clock_beyond_2_to_the_53(hist, run_check):
    """due = invoke time_ns + delay_ms in 64-bit integers: a read exactly at due - tolerance
    is not early (in doubles, time_ns near 2^62 rounds to 1024 ns and it was)."""

    def at_ns(t: int) -> None:
        hist.t = t - 1_000_000  # the next op lands at t

    base = (1 << 62) + 513
    at_ns(base)
    delayed(hist, 1, 1, 1000, None)  # invoke at base, due at base + 1 s
    at_ns(base + 749_000_000)
    read(hist, 10, [(0, 0, 1)], group="gd")  # completes at base + 750 ms: due - 250 ms
    drain(hist, [(0, 0, 1)])
    r = run_check(hist, only=["delay"])["analyses"]["delay"]
    assert hist.ops[3].time_ns == base + 750_000_000
    assert (r["valid"], r["early"]["count"]) == (True, 0)
    assert r["latest"][0]["lateness_ms"] == -250.0


def test_delay_unknown_without_delayed_sends(hist, run_check):
    hist.send(1, 1, off=0)
    r = run_check(hist, only=["delay", "transaction", "pop"])["analyses"]
    assert {k: v["valid"] for k, v in r.items()} == {
        "delay": "unknown",
        "transaction": "unknown",
        "pop": "unknown",
    }


# ---- transaction ------------------------------------------------------------------------------


def valid_txns(hist: Any) -> None:
    txn(hist, 1, 1, "commit", "commit", "ok")
    txn(hist, 1, 2, "rollback", "rollback", "fail")
    txn(hist, 1, 3, "unknown-commit", "unknown-commit", "ok")
    txn(hist, 1, 4, "unknown-rollback", "unknown-rollback", "fail")
    txn(hist, 1, 5, "commit", "rollback", "fail")  # half stored with a non-OK status
    txn(hist, 2, 6, "commit", None, "info")  # may be stored; its check commits it
    txn(hist, 3, 7, "rollback", None, "info")  # may be stored; its check rolls it back
    txn(hist, 4, 8, "unknown-commit", None, "fail")  # the half certainly not stored
    txn(hist, 5, 10, "commit", "commit", "ok")
    read(hist, 10, [(0, 0, 1), (0, 1, 3)], group="gx", topic="X")
    read(hist, 10, [(0, 1, 3)], group="gx", topic="X")  # a redelivery of 3
    read(hist, 10, [(0, 2, 6), (0, 3, 10)], group="gx", topic="X")


TXN_READ = [(0, 0, 1), (0, 1, 3), (0, 2, 6), (0, 3, 10)]


def test_transaction_valid_history(hist, run_check):
    valid_txns(hist)
    drain(hist, TXN_READ, topic="X")
    res = run_check(hist)
    r = res["analyses"]["transaction"]
    assert (r["valid"], r["count"]) == (True, 0)
    assert (r["transactions"], r["committed"], r["rolled_back"]) == (9, 3, 3)
    assert (r["failed"], r["indeterminate"], r["indeterminate_delivered"]) == (1, 2, 1)
    assert r["resolved_by_check"] == {"commit": 1, "rollback": 1}
    assert (r["duplicated"]["count"], r["duplicated"]["redelivered"]) == (1, 1)
    assert r["duplicated"]["examples"][0]["v"] == 3
    assert res["valid"] is True and res["safety_failed"] == []
    # rolled-back transactions are not unavailability: one window, from the first
    # indeterminate send (6) to the completion of the next good one (10)
    av = res["analyses"]["availability"]
    assert av["valid"] is True
    assert [round(w["start_s"], 1) for w in av["per_f"]["send"]["windows"]] == [0.5]


@pytest.mark.parametrize(
    "v, why",
    [
        (2, "rolled back by the producer"),
        (4, "left unknown, rolled back by the check"),
        (5, "rolled back after a non-OK half"),
        (7, "indeterminate, planned to roll back"),
        (8, "the half was never stored"),
    ],
)
def test_transaction_delivered_though_not_committed(hist, run_check, v, why):
    valid_txns(hist)
    read(hist, 11, [(1, 0, v)], group="gx", topic="X")
    drain(hist, [*TXN_READ, (1, 0, v)], topic="X")
    r = run_check(hist, only=["transaction"])["analyses"]["transaction"]
    assert (r["valid"], r["count"], r["unexpected"]["count"]) == (False, 1, 1), why
    assert r["unexpected"]["examples"][0]["v"] == v


def test_transaction_lost_committed(hist, run_check):
    valid_txns(hist)
    txn(hist, 6, 11, "unknown-commit", "unknown-commit", "ok")  # committed by a check
    drain(hist, TXN_READ, topic="X")
    res = run_check(hist)
    r = res["analyses"]["transaction"]
    assert (r["valid"], r["count"], r["lost"]["count"]) == (False, 1, 1)
    assert r["lost"]["examples"][0]["v"] == 11
    assert set(res["safety_failed"]) == {"transaction", "lost"}


def test_transaction_lost_the_drain_cannot_vouch_for_is_undecided(hist, run_check):
    """A committed transaction acknowledged without naming its queue: lost says unknown,
    and so does transaction (it had no undecided rule)."""
    valid_txns(hist)
    hist.op(6, "invoke", "send", h.Value(topic="X", value=11, txn="commit"))
    hist.op(6, "ok", "send", h.Value(topic="X", value=11, txn="commit", status="SEND_OK"))
    drain(hist, TXN_READ, topic="X")
    res = run_check(hist)
    r = res["analyses"]["transaction"]
    assert (r["lost"]["count"], r["lost"]["undecided"], r["valid"]) == (1, 1, "unknown")
    assert res["analyses"]["lost"]["valid"] == "unknown"
    assert res["valid"] == "unknown"


def test_transaction_commit_with_a_non_ok_status_is_not_counted_lost(hist, run_check):
    valid_txns(hist)
    send(hist, 6, 11, topic="X", at=(1_100, 1_110), invoke={"txn": "commit"},
         done={"txn": "commit"}, status="FLUSH_SLAVE_TIMEOUT")  # fmt: skip
    drain(hist, TXN_READ, topic="X")
    res = run_check(hist)
    r = res["analyses"]["transaction"]
    assert (r["lost"]["count"], r["valid"]) == (0, True)
    assert res["valid"] is True


def test_transaction_read_once_by_a_poll_without_a_group_is_not_redelivered(hist, run_check):
    txn(hist, 1, 1, "commit", "commit", "ok")
    hist.op(10, "invoke", "poll", h.Value(topic="X"))
    msg = h.Read("X", 0, 0, 1, None, "b0")
    hist.op(10, "ok", "poll", h.Value(topic="X", messages=[msg]))
    drain(hist, [(0, 0, 1)], topic="X")
    r = run_check(hist, only=["transaction", "duplicated"])["analyses"]
    assert r["transaction"]["duplicated"]["redelivered"] == 0
    assert r["duplicated"]["count"] == 0


def test_a_definite_transaction_loss_fails_though_another_topic_is_undrained(hist, run_check):
    """As lost decides, value by value: a committed transaction acknowledged on a queue the
    drain read to its end and never read is a definite loss (it made transaction unknown)."""
    valid_txns(hist)
    txn(hist, 6, 11, "commit", "commit", "ok")  # committed, never read
    drain(hist, TXN_READ, topic="X")
    other_topic_undrained(hist)
    res = run_check(hist)
    r, lost = res["analyses"]["transaction"], res["analyses"]["lost"]
    assert (lost["valid"], lost["definite"], lost["drained"]) == (False, 1, False)
    assert (r["lost"]["count"], r["lost"]["undecided"], r["valid"]) == (1, 0, False)
    assert set(res["safety_failed"]) == {"transaction", "lost"}


def test_transaction_ok_without_a_fate_is_committed(hist, run_check):
    """The schema lets an ok completion leave out txn: ok completes only a committing
    transaction, so it is committed (not an inconsistent record failing the run)."""
    valid_txns(hist)
    hist.op(6, "invoke", "send", h.Value(topic="X", value=11, txn="commit"), at_ms=1_100)
    done = h.Value(topic="X", value=11, broker="b0", queue_id=0, status="SEND_OK")
    hist.op(6, "ok", "send", done, at_ms=1_110)
    read(hist, 10, [(0, 4, 11)], group="gx", topic="X")
    drain(hist, [*TXN_READ, (0, 4, 11)], topic="X")
    res = run_check(hist)
    r = res["analyses"]["transaction"]
    assert (r["valid"], r["inconsistent_records"], r["committed"]) == (True, 0, 4)
    assert res["valid"] is True


def test_transaction_at_two_positions_without_a_broker(hist, run_check):
    """A queue's missing broker counts as "" (docs/checker.md): a committed transaction
    stored twice in a queue named without a broker is at two positions."""
    for v in (1, 2):
        hist.op(1, "invoke", "send", h.Value(topic="X", value=v, txn="commit"))
        done = h.Value(topic="X", value=v, queue_id=0, status="SEND_OK", txn="commit")
        hist.op(1, "ok", "send", done)
    reads = [h.Read("X", 0, o, v, None, None) for o, v in ((0, 1), (1, 1), (2, 2))]
    hist.op(10, "invoke", "poll", h.Value(topic="X", group="gx"))
    hist.op(10, "ok", "poll", h.Value(topic="X", group="gx", messages=reads))
    hist.bounds(90, reads)
    hist.op(90, "invoke", "drain", h.Value(topic="X", group="drain"))
    hist.op(90, "ok", "drain", h.Value(topic="X", group="drain", messages=reads))
    res = run_check(hist, only=["transaction", "duplicated"])
    d = res["analyses"]["transaction"]["duplicated"]
    assert (d["count"], d["redelivered"], d["at_two_positions"]) == (1, 1, 1)
    assert res["analyses"]["duplicated"]["at_two_positions"] == 1


def test_transaction_lost_without_a_drain_is_unknown(hist, run_check):
    txn(hist, 1, 1, "commit", "commit", "ok")
    r = run_check(hist, only=["transaction"])["analyses"]["transaction"]
    assert (r["valid"], r["lost"]["count"]) == ("unknown", 1)


# ---- pop --------------------------------------------------------------------------------------


def valid_pops(hist: Any) -> None:
    for v in (1, 2, 3, 4):
        send(hist, 1, v, topic="P", off=v - 1)
    send(hist, 1, 5, topic="P", outcome="info")  # never popped: not required
    pop(hist, 20, [1, 2, 3, 4])
    ack(hist, 20, 1)
    ack(hist, 20, 2)
    ack(hist, 20, 3, f="change-invisible")
    ack(hist, 20, 3)  # acked with the new handle
    # 4 is left to come back after its invisible time
    pop(hist, 21, [4])
    ack(hist, 21, 4)


def test_pop_valid_history_counts_redeliveries(hist, run_check):
    valid_pops(hist)
    drain(hist, [(0, i, v) for i, v in enumerate((1, 2, 3, 4))], topic="P")
    res = run_check(hist)
    r = res["analyses"]["pop"]
    assert (r["valid"], r["count"]) == (True, 0)
    assert (r["acknowledged"], r["popped"], r["acked_by_consumer"]) == (4, 4, 4)
    assert r["redelivery"] == {
        "values": 1,
        "excess_pops": 1,
        "after_ack": 0,
        "after_change_invisible": 0,
        "examples": r["redelivery"]["examples"],
    }
    assert r["redelivery"]["examples"][0]["v"] == 4
    assert r["change_invisible_ok"] == 1
    assert res["valid"] is True and res["safety_failed"] == []


def test_pop_redelivery_after_an_ack_is_reported_not_failed(hist, run_check):
    valid_pops(hist)
    pop(hist, 22, [1, 3])  # both were acked before
    ack(hist, 22, 1)
    ack(hist, 22, 3)
    drain(hist, [(0, i, v) for i, v in enumerate((1, 2, 3, 4))], topic="P")
    r = run_check(hist, only=["pop"])["analyses"]["pop"]
    assert r["valid"] is True
    rd = r["redelivery"]
    assert (rd["values"], rd["excess_pops"], rd["after_ack"], rd["after_change_invisible"]) == (
        3,
        3,
        2,
        1,
    )


def test_pop_message_never_acked(hist, run_check):
    valid_pops(hist)
    send(hist, 1, 6, topic="P", off=4)  # popped, never acked
    send(hist, 1, 7, topic="P", off=5)  # never even popped
    send(hist, 1, 8, topic="P", off=6)  # its only ack may have landed
    send(hist, 1, 9, topic="P", off=7, status="SLAVE_NOT_AVAILABLE")  # not promised
    pop(hist, 22, [6, 8])
    ack(hist, 22, 6, outcome="fail")
    ack(hist, 22, 8, outcome="info")
    drain(hist, [], topic="P")
    res = run_check(hist)
    r = res["analyses"]["pop"]
    assert (r["valid"], r["count"], r["lost"]["count"]) == (False, 2, 2)
    assert [e["v"] for e in r["lost"]["examples"]] == [6, 7]
    assert r["ack_indeterminate"] == 1
    assert "pop" in res["safety_failed"]
    # the example carries its history: the send, the pop that read it, the failed ack
    trace = r["lost"]["examples"][0]["history"]["6"]
    assert [(x["f"], x["type"]) for x in trace] == [
        ("send", "invoke"),
        ("send", "ok"),
        ("pop", "ok"),
        ("ack", "invoke"),
        ("ack", "fail"),
    ]
    # without a final drain "never acked" cannot be told from "not acked yet"
    del hist.ops[-2:]
    r = run_check(hist, only=["pop"])["analyses"]["pop"]
    assert (r["valid"], r["lost"]["count"]) == ("unknown", 2)


def test_a_definite_pop_loss_fails_though_another_topic_is_undrained(hist, run_check):
    """As lost decides, value by value: a value acknowledged on a queue the drain read to
    its end and never acked by a pop consumer is a definite pop loss, whatever the drain
    left undone on another topic's queue (it made pop unknown)."""
    valid_pops(hist)
    send(hist, 1, 6, topic="P", off=4)  # never popped, never acked
    drain(hist, [(0, i, v) for i, v in enumerate((1, 2, 3, 4, 6))], topic="P")
    other_topic_undrained(hist)
    res = run_check(hist)
    r = res["analyses"]["pop"]
    assert (r["valid"], r["lost"]["count"], r["lost"]["undecided"]) == (False, 1, 0)
    assert [e["v"] for e in r["lost"]["examples"]] == [6]
    assert (res["analyses"]["lost"]["valid"], res["valid"]) == ("unknown", False)
    assert res["safety_failed"] == ["pop"]


def test_pop_losses_are_decided_per_queue(hist, run_check):
    """A pop loss on the queue the drain did not read to its end is undecided, one on the
    queue it drained is definite: the row fails."""
    valid_pops(hist)
    hist.op(1, "invoke", "send", h.Value(topic="P", value=6))
    done = h.Value(topic="P", value=6, broker="b0", queue_id=1, queue_offset=0, status="SEND_OK")
    hist.op(1, "ok", "send", done)  # never popped; its queue 1 is not drained
    send(hist, 1, 7, topic="P", off=4)  # never popped; queue 0 is drained
    reads = [(0, i, v) for i, v in enumerate((1, 2, 3, 4, 7))]
    hist.bounds(90, [h.Read("P", q, o, v, None, "b0") for q, o, v in reads], ends={("P", 1): 1})
    read(hist, 90, reads, group="drain", f="drain", topic="P")
    res = run_check(hist, only=["pop", "lost"])
    r, lost = res["analyses"]["pop"], res["analyses"]["lost"]
    assert (lost["count"], lost["undecided"], lost["valid"]) == (1, 1, "unknown")
    assert (r["lost"]["count"], r["lost"]["undecided"], r["valid"]) == (2, 1, False)


def test_pop_first_pop_by_a_second_group_is_no_redelivery(hist, run_check):
    """Each pop consumer group consumes every message: one group's first pop of a value
    another group popped and acked is neither a redelivery nor one after an ack."""
    for v in (1, 2, 3, 4):
        send(hist, 1, v, topic="P", off=v - 1)
    for p, group in ((20, "gp"), (30, "gq")):
        pop(hist, p, [1, 2, 3, 4], group=group)
        for v in (1, 2, 3, 4):
            ack(hist, p, v, group=group)
    drain(hist, [(0, i, v) for i, v in enumerate((1, 2, 3, 4))], topic="P")
    r = run_check(hist, only=["pop"])["analyses"]["pop"]
    rd = r["redelivery"]
    assert (r["valid"], r["popped"], r["acked_by_consumer"]) == (True, 4, 4)
    assert (rd["values"], rd["excess_pops"], rd["after_ack"], rd["examples"]) == (0, 0, 0, [])
    # a group popping a value again after its own ack still counts
    pop(hist, 31, [2], group="gq")
    ack(hist, 31, 2, group="gq")
    rd = run_check(hist, only=["pop"])["analyses"]["pop"]["redelivery"]
    assert (rd["values"], rd["excess_pops"], rd["after_ack"]) == (1, 1, 1)


def test_pop_of_a_value_never_sent_or_failed_is_unexpected(hist, run_check):
    valid_pops(hist)
    send(hist, 1, 10, topic="P", outcome="fail")
    send(hist, 1, 11, topic="Q", off=0)  # sent to another topic
    pop(hist, 22, [99, 10, 11, None])
    drain(hist, [(0, i, v) for i, v in enumerate((1, 2, 3, 4))], topic="P")
    r = run_check(hist, only=["pop"])["analyses"]["pop"]
    assert (r["valid"], r["unexpected"]["count"], r["unexpected"]["null_pops"]) == (False, 4, 1)
    assert sorted(e["v"] for e in r["unexpected"]["examples"]) == [10, 11, 99]


def test_pop_completed_before_the_send_was_invoked_is_unexpected(hist, run_check):
    valid_pops(hist)
    pop(hist, 22, [12])  # popped before anyone sent it
    send(hist, 1, 12, topic="P", off=4)
    ack(hist, 22, 12)
    drain(hist, [(0, i, v) for i, v in enumerate((1, 2, 3, 4, 12))], topic="P")
    r = run_check(hist, only=["pop"])["analyses"]["pop"]
    assert (r["valid"], r["unexpected"]["count"]) == (False, 1)
    assert [e["v"] for e in r["unexpected"]["examples"]] == [12]


# ---- schema versions --------------------------------------------------------------------------


def test_a_version_1_parquet_history_still_checks(spark, tmp_path):
    """Histories written before the special workloads (no delay_ms / txn / invisible_ms
    columns) load with the current schema: the new fields read as null."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rmq_check.check import check
    from rmq_check.load import load

    full = h.arrow_schema()
    vt = full.field("value").type
    old_value = pa.struct(
        [
            vt.field(i)
            for i in range(vt.num_fields)
            if vt.field(i).name not in ("delay_ms", "txn", "invisible_ms")
        ]
    )
    old = pa.schema([pa.field("value", old_value) if f.name == "value" else f for f in full])
    assert len(old_value) == len(vt) - 3
    ops = [
        h.Op(0, 1, 1, "invoke", "send", h.Value(topic="T", value=1)),
        h.Op(
            1,
            2,
            1,
            "ok",
            "send",
            h.Value(topic="T", value=1, queue_id=0, queue_offset=0, broker="b0", status="SEND_OK"),
        ),
        # the drain's bounds of the queue, then its read
        *[
            h.Op(
                2 + 2 * i + k,
                3,
                9,
                ("invoke", "ok")[k],
                "offsets",
                h.Value(topic="T", queue_id=0, broker="b0", detail=d, offset=(None, off)[k]),
            )
            for i, (d, off) in enumerate((("min", 0), ("max", 1)))
            for k in (0, 1)
        ],
        h.Op(6, 3, 9, "invoke", "drain", h.Value(topic="T", group="d")),
        h.Op(
            7,
            4,
            9,
            "ok",
            "drain",
            h.Value(topic="T", group="d", messages=[h.Read("T", 0, 0, 1, None, "b0")]),
        ),
    ]
    rows = []
    for op in ops:
        d = op.to_json()
        d["value"] = {f.name: d["value"].get(f.name) for f in old_value}
        rows.append(d)
    pq.write_table(pa.Table.from_pylist(rows, schema=old), tmp_path / "history.parquet")
    res = check(load(spark, tmp_path))
    assert res["valid"] is True and res["analyses"]["lost"]["count"] == 0
    assert res["analyses"]["delay"]["valid"] == "unknown"
    assert res["analyses"]["transaction"]["valid"] == "unknown"


# ---- found by the checker probe of session 15 ----------------------------------------------


def test_pop_with_more_than_a_thousand_topics_checks_every_topic(hist, run_check):
    """The pop topics were a list of at most 1000: with 1001, one topic's sends were dropped
    and its popped value counted unexpected (probe P13: INVALID on a correct history)."""
    n = 1001
    for i in range(n):
        send(hist, 1, i + 1, topic=f"P{i}", off=0)
    for i in range(n):
        pop(hist, 20, [i + 1], topic=f"P{i}")
        hist.op(20, "invoke", "ack", h.Value(topic=f"P{i}", group="gp", value=i + 1))
        done = h.Value(topic=f"P{i}", group="gp", value=i + 1, broker="b0", queue_id=0)
        hist.op(20, "ok", "ack", done)
    hist.bounds(90, [h.Read(f"P{i}", 0, 0, i + 1, None, "b0") for i in range(n)])
    r = run_check(hist, only=["pop"])["analyses"]["pop"]
    assert (r["valid"], r["unexpected"]["count"], r["acknowledged"]) == (True, 0, n), r
    assert (r["n_topics"], len(r["topics"])) == (n, 50)


def test_pop_an_ack_that_never_completed_may_have_landed(hist, run_check):
    """An ack invoke with no completion is indeterminate, as an info ack is (probe P3: it
    counted as never acked, a definite loss)."""
    send(hist, 1, 1, topic="P", off=0)
    pop(hist, 20, [1])
    hist.op(21, "invoke", "ack", h.Value(topic="P", group="gp", value=1, broker="b0"))
    drain(hist, [(0, 0, 1)], topic="P")
    r = run_check(hist, only=["pop"])["analyses"]["pop"]
    assert (r["valid"], r["lost"]["count"], r["ack_indeterminate"]) == (True, 0, 1), r


def test_pop_topics_come_from_the_messages_and_sends_from_their_invokes(hist, run_check):
    """A pop op need not name its topic, nor a send's completion: the popped messages name
    theirs, the invoke the send's. A popped value whose send failed, its fail naming no
    topic, was missed (probe P10: VALID), and pops without a topic made the analysis n/a
    (probe P12: VALID with a value never acked)."""
    hist.op(1, "invoke", "send", h.Value(topic="P", value=1))
    hist.op(1, "fail", "send", h.Value(value=1), error="refused", definite=True)
    send(hist, 1, 2, topic="P", off=0)
    hist.op(20, "invoke", "pop", h.Value(group="gp", invisible_ms=3000))
    reads = [h.Read("P", 0, 0, 2, None, "b0"), h.Read("P", 0, 1, 1, None, "b0")]
    hist.op(20, "ok", "pop", h.Value(group="gp", messages=reads, invisible_ms=3000))
    drain(hist, [(0, 0, 2)], topic="P")
    r = run_check(hist, only=["pop"])["analyses"]["pop"]
    assert r.get("applies", True) and r["topics"] == ["P"]
    assert (r["unexpected"]["count"], r["lost"]["count"], r["valid"]) == (1, 1, False), r


def test_transaction_failed_with_a_committing_fate_is_inconsistent(hist, run_check):
    """A committing fate completes ok: `fail` with one cannot come from the producer and was
    taken as indeterminate (probe X5: VALID)."""
    txn(hist, 1, 1, "commit", "commit", "fail")
    drain(hist, [], topic="X")
    r = run_check(hist, only=["transaction"])["analyses"]["transaction"]
    assert (r["valid"], r["inconsistent_records"], r["indeterminate"]) == (False, 1, 0), r
