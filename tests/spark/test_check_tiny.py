"""Hand-written histories with a known answer for every analysis (docs/checker.md)."""

from __future__ import annotations

import pytest

from rmq_ha import history as h

pytestmark = pytest.mark.timeout(240)


def test_lost_needs_every_reader_to_miss_it(hist, run_check):
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    hist.send(1, 3, off=2, status="FLUSH_SLAVE_TIMEOUT")  # acked, non-OK status
    hist.send(1, 4, "fail")
    hist.poll(10, [(0, 0, 1)])
    hist.drain(20, [(0, 0, 1)])
    r = run_check(hist, only=["lost"])["analyses"]["lost"]
    assert (r["valid"], r["count"]) == (False, 1)
    assert [e["v"] for e in r["examples"]] == [2]
    assert r["lost_non_ok_status"] == 1
    assert r["unseen_by_group"] == 1


def test_lost_without_a_drain_is_unknown(hist, run_check):
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    hist.poll(10, [(0, 0, 1)])
    r = run_check(hist, only=["lost"])["analyses"]["lost"]
    assert (r["valid"], r["count"]) == ("unknown", 1)


def test_drain_reads_count_against_loss_but_not_for_the_group(hist, run_check):
    hist.send(1, 1, off=0)
    hist.drain(20, [(0, 0, 1)])
    hist.poll(10, [])
    r = run_check(hist, only=["lost"])["analyses"]["lost"]
    assert (r["valid"], r["count"], r["unseen_by_group"]) == (True, 0, 1)


def test_lost_write_is_a_hole_below_the_highest_read_offset(hist, run_check):
    for v in range(4):
        hist.send(1, v, off=v)
    hist.poll(10, [(0, 0, 0), (0, 2, 2)])  # offset 1 is a hole; offset 3 is past the end
    hist.drain(20, [(0, 0, 0), (0, 2, 2)])
    a = run_check(hist, only=["lost", "lost-write"])["analyses"]
    assert a["lost"]["count"] == 2
    assert (a["lost-write"]["valid"], a["lost-write"]["count"]) == (False, 1)
    assert a["lost-write"]["examples"][0]["v"] == 1


def test_lost_write_counts_a_value_acked_at_the_highest_read_offset(hist, run_check):
    """ "At or below": the reader saw another value at the lost one's offset (a truncated and
    rewritten log); that value's offset is the highest read, and the acked one is gone."""
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    hist.poll(10, [(0, 0, 1), (0, 1, 9)])
    hist.drain(20, [(0, 0, 1), (0, 1, 9)])
    a = run_check(hist, only=["lost", "lost-write"])["analyses"]
    assert (a["lost"]["count"], a["lost-write"]["count"]) == (1, 1)


def test_lost_write_is_per_queue(hist, run_check):
    hist.send(1, 1, q=0, off=5)
    hist.send(1, 2, q=1, off=0)
    hist.poll(10, [(1, 0, 2)])
    hist.drain(20, [(1, 0, 2)])
    a = run_check(hist, only=["lost", "lost-write"])["analyses"]
    assert (a["lost"]["count"], a["lost-write"]["count"]) == (1, 0)


def test_unexpected_counts_values_never_sent_and_unparseable_reads(hist, run_check):
    hist.send(1, 1, off=0)
    hist.invoke_send(2, 5)  # attempted, never completed: not unexpected when read
    hist.poll(10, [(0, 0, 1), (0, 1, 99), (0, 2, None), (0, 3, 5)])
    r = run_check(hist, only=["unexpected"])["analyses"]["unexpected"]
    assert (r["valid"], r["count"], r["null_reads"]) == (False, 2, 1)


def test_duplicated_by_group_and_by_offset(hist, run_check):
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    hist.send(1, 3, off=2)
    hist.poll(10, [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    hist.poll(11, [(0, 0, 1)])  # second delivery of 1 to group g
    hist.poll(12, [(0, 1, 2)], group="other")  # another group: not a duplicate
    hist.drain(20, [(0, 0, 1), (0, 1, 2), (0, 2, 3), (0, 3, 3)])  # 3 also at offset 3
    r = run_check(hist, only=["duplicated"])["analyses"]["duplicated"]
    assert (r["valid"], r["count"]) == (True, 2)
    assert (r["redelivered"], r["at_two_positions"], r["excess_deliveries"]) == (1, 1, 1)
    assert r["guarantee"] == "at-least-once"
    assert r["rate"] == pytest.approx(2 / 3)
    r = run_check(hist, only=["duplicated"], exactly_once=True)["analyses"]["duplicated"]
    assert r["valid"] is False


def test_exactly_once_when_nothing_lost_or_duplicated(hist, run_check):
    hist.send(1, 1, off=0)
    hist.poll(10, [(0, 0, 1)])
    hist.drain(20, [(0, 0, 1)])
    res = run_check(hist)
    assert res["valid"] is True and res["guarantee"] == "exactly-once"
    assert res["safety_failed"] == []


def test_inconsistent_offsets_from_acks_and_reads(hist, run_check):
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    hist.poll(10, [(0, 0, 1), (0, 1, 2)])
    hist.drain(20, [(0, 0, 7), (0, 1, 2)])  # offset 0 now holds 7; 7 was never sent
    hist.send(1, 3, off=1, broker="b1")  # same offset on another broker's queue: fine
    r = run_check(hist, only=["inconsistent-offsets"])["analyses"]["inconsistent-offsets"]
    assert (r["valid"], r["count"]) == (False, 1)
    assert (r["examples"][0]["off"], r["examples"][0]["vmin"], r["examples"][0]["vmax"]) == (
        0,
        1,
        7,
    )


def test_positions_are_counted_per_offset_and_a_clean_log_has_no_inconsistency(hist, run_check):
    """Offsets far apart (other blocks of the per-queue offset bitmap), two queues, a value
    read twice at its offset: every offset holds one value, and the count of positions is
    the distinct (queue, offset) pairs."""
    for v, (q, off) in enumerate([(0, 0), (0, 1), (0, 40_000), (1, 0), (1, 70_000)], start=1):
        hist.send(1, v, q=q, off=off)
    reads = [(0, 0, 1), (0, 1, 2), (0, 40_000, 3), (1, 0, 4), (1, 70_000, 5)]
    hist.poll(10, reads)
    hist.drain(20, reads)
    r = run_check(hist, only=["inconsistent-offsets"])["analyses"]["inconsistent-offsets"]
    assert (r["valid"], r["count"], r["positions"]) == (True, 0, 5)


def test_an_unparseable_read_beside_a_value_is_an_inconsistent_offset(hist, run_check):
    """A null read where a value was acked: that offset holds two things. Null reads alone
    at an offset (nothing acked or read there) are unexpected, not inconsistent. Another
    block of the same queue holds a second inconsistency (two values)."""
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    hist.send(1, 3, off=50_000)
    hist.poll(10, [(0, 0, None), (0, 1, 2), (0, 2, None), (0, 50_000, 9)])
    hist.drain(20, [(0, 0, 1), (0, 1, 2), (0, 2, None), (0, 50_000, 3)])
    r = run_check(hist, only=["inconsistent-offsets"])["analyses"]["inconsistent-offsets"]
    assert (r["valid"], r["count"], r["positions"]) == (False, 2, 4)
    assert [(e["off"], e["vmin"], e["vmax"], e["nnull"]) for e in r["examples"]] == [
        (0, 1, 1, 1),
        (50_000, 3, 9, 0),
    ]


def test_key_order_follows_real_time_send_order(hist, run_check):
    # key a: 1 then 2 (sequential) delivered 2 then 1: one late value per group that sees it
    hist.send(1, 1, key="a", off=1)
    hist.send(1, 2, key="a", off=0)
    # key b: 3 and 4 concurrent, delivered 4 then 3: no order between them
    hist.invoke_send(2, 3, key="b")
    hist.invoke_send(3, 4, key="b")
    hist.complete_send(2, 3, key="b", off=2)
    hist.complete_send(3, 4, key="b", off=3)
    hist.poll(10, [(0, 0, 2), (0, 1, 1)], key="a")
    hist.poll(12, [(0, 3, 4)], key="b")
    hist.poll(11, [(0, 2, 3)], key="b")
    hist.drain(20, [(0, 0, 2), (0, 1, 1), (0, 2, 3), (0, 3, 4)])
    r = run_check(hist, only=["ordering"])["analyses"]["ordering"]
    ko = r["key_order"]
    assert (r["valid"], r["count"]) == (False, 2)
    assert ko["per_group"] == {"g": 1, "<drain>": 1}
    assert {e["late_value"] for e in ko["examples"]} == {1}
    assert r["nonmonotonic"]["count"] == 0, r["nonmonotonic"]
    assert r["poll_skip"]["count"] == 0, r["poll_skip"]


def test_key_order_ignores_keys_spread_over_queues_in_auto_mode(hist, run_check):
    hist.send(1, 1, key="a", q=0, off=0)
    hist.send(1, 2, key="a", q=1, off=0)
    hist.poll(10, [(1, 0, 2)], key="a")
    hist.poll(11, [(0, 0, 1)], key="a")
    r = run_check(hist, only=["ordering"])["analyses"]["ordering"]["key_order"]
    assert (r["valid"], r["keys"], r["keys_checked"]) == ("unknown", 1, 0)
    r = run_check(hist, only=["ordering"], order="on")["analyses"]["ordering"]["key_order"]
    assert (r["valid"], r["count"]) == (False, 1)


def test_key_order_on_does_not_judge_a_key_over_queues_by_the_drains_order(hist, run_check):
    """Probe (session 17): with --order on, a consumer read a key's values in send order over
    two queues, and the final drain, reading queue 1 before queue 0, failed the history. The
    drain's order across queues says nothing; within one queue it still counts."""
    hist.send(1, 1, key="a", q=0, off=0)
    hist.send(1, 2, key="a", q=1, off=0)
    hist.poll(10, [(0, 0, 1), (1, 0, 2)], key="a")
    hist.drain(20, [(1, 0, 2), (0, 0, 1)])
    r = run_check(hist, only=["ordering"], order="on")["analyses"]["ordering"]["key_order"]
    assert (r["valid"], r["count"]) == (True, 0), r
    # one queue, the drain reading it backwards: still a violation
    hist2 = type(hist)()
    hist2.send(1, 1, key="b", off=0)
    hist2.send(1, 2, key="b", off=1)
    hist2.drain(20, [(0, 1, 2), (0, 0, 1)])
    r = run_check(hist2, only=["ordering"], order="on")["analyses"]["ordering"]["key_order"]
    assert (r["valid"], r["count"]) == (False, 1), r


def test_nonmonotonic_and_poll_skip_per_consumer_and_queue(hist, run_check):
    for v in range(6):
        hist.send(1, v, off=v)
    hist.poll(10, [(0, 0, 0), (0, 1, 1)])
    hist.poll(10, [(0, 1, 1), (0, 3, 3)])  # back to 1 (nonmonotonic), then skips known 2
    hist.poll(11, [(0, 2, 2)])  # another process: its own sequence
    hist.poll(12, [(0, 4, 4), (0, 9, 9)])  # nothing known at 5..8? 5 is acked: a skip
    hist.poll(13, [(0, 7, 7), (0, 9, 9)])  # 8 unknown: no skip
    hist.poll(10, [(1, 5, 5)])  # another queue for process 10: no skip from queue 0
    r = run_check(hist, only=["ordering"])["analyses"]["ordering"]
    assert r["key_order"]["valid"] == "unknown"
    assert (r["nonmonotonic"]["valid"], r["nonmonotonic"]["count"]) == (False, 1)
    assert (r["poll_skip"]["valid"], r["poll_skip"]["count"]) == (False, 2)
    assert r["valid"] == "unknown"  # poll order is reported, not a safety failure


def test_aborted_read_and_recovered(hist, run_check):
    hist.send(1, 1, "fail")
    hist.send(2, 2, "info")
    hist.send(3, 3, "info")  # indeterminate, never read: not recovered
    hist.invoke_send(4, 4)  # never completed: indeterminate
    hist.poll(10, [(0, 0, 1), (0, 1, 2), (0, 2, 4)])
    a = run_check(hist, only=["aborted-read", "recovered"])["analyses"]
    assert (a["aborted-read"]["valid"], a["aborted-read"]["count"]) == (False, 1)
    assert a["aborted-read"]["examples"][0]["v"] == 1
    assert (a["recovered"]["valid"], a["recovered"]["count"]) == (True, 2)
    assert a["recovered"]["indeterminate"] == 3


def test_availability_windows_and_rto(hist, run_check):
    hist.fault(1, 10_000, 20_000)
    hist.send(1, 1, at_ms=(1_000, 1_010), off=0)
    hist.send(1, 2, "info", at_ms=(12_000, 12_500))  # unavailable from 12 s
    hist.send(2, 3, at_ms=(11_900, 13_000), off=1)  # invoked before the failure: no end
    hist.send(3, 4, at_ms=(13_200, 13_500), off=2)  # first good op invoked after: 13.5 s
    hist.send(1, 5, "fail", at_ms=(30_000, 30_001))  # outside any fault
    hist.send(1, 6, at_ms=(30_100, 30_200), off=3)
    r = run_check(hist, only=["availability"], bin_ms=10)["analyses"]["availability"]
    send = r["per_f"]["send"]
    assert r["valid"] is True and r["count"] == 2
    assert [round(w["duration_ms"]) for w in send["windows"]] == [1500, 200]
    rto = send["rto"][0]
    assert (rto["outcome"], round(rto["rto_ms"])) == ("recovered-during-fault", 1500)
    assert send["unexpected_windows"] == 1
    assert r["latency_ms"]["send"]["n"] == 4
    assert r["latency_ms"]["send"]["max"] == pytest.approx(1100.0)


def test_availability_never_recovered(hist, run_check):
    hist.fault(1, 1_000, None)
    hist.send(1, 1, at_ms=(500, 600), off=0)
    hist.send(1, 2, "info", at_ms=(1_500, 2_500))
    hist.send(1, 3, "fail", at_ms=(3_000, 3_100))
    r = run_check(hist, only=["availability"])["analyses"]["availability"]
    assert r["valid"] is False
    assert r["per_f"]["send"]["rto"][0]["outcome"] == "not-recovered"
    assert r["per_f"]["send"]["not_recovered"] == 1


def test_metadata_epoch_backwards_and_two_masters(hist, run_check):
    hist.metadata(50, "bg0", "n1", 1)
    hist.metadata(50, "bg0", "n2", 2)
    hist.metadata(51, "bg0", "n1", 1)  # after epoch 2 was seen: backwards
    hist.metadata(50, "bg1", "n1", 4)
    hist.metadata(51, "bg1", "n3", 4)  # two masters in epoch 4
    # concurrent observations may disagree: 60 reads 7 while 61 (overlapping) reads 6
    hist.op(60, "invoke", "metadata", h.Value(broker="bg2"))
    hist.op(61, "invoke", "metadata", h.Value(broker="bg2"))
    hist.op(60, "ok", "metadata", h.Value(broker="bg2", master="n1", epoch=7))
    hist.op(61, "ok", "metadata", h.Value(broker="bg2", master="n2", epoch=6))
    r = run_check(hist, only=["metadata"])["analyses"]["metadata"]
    assert (r["valid"], r["count"]) == (False, 2)
    assert r["epoch_backwards"]["count"] == 1
    assert r["epoch_backwards"]["examples"][0]["broker"] == "bg0"
    assert r["two_masters"]["examples"][0]["masters"] == ["n1", "n3"]


def test_metadata_unknown_without_observations(hist, run_check):
    hist.send(1, 1, off=0)
    r = run_check(hist, only=["metadata"])["analyses"]["metadata"]
    assert r["valid"] == "unknown"


def test_nothing_acknowledged_gives_no_delivery_guarantee(hist, run_check):
    """No send completed ok and no drain ran: nothing can be shown delivered or lost, so the
    guarantee is unknown (it said exactly-once: the vacuously complete drain)."""
    hist.send(1, 1, "fail")
    hist.send(1, 2, "info")
    hist.poll(10, [])
    r = run_check(hist)
    assert r["valid"] == "unknown" and r["guarantee"] == "unknown", r["unknown_because"]
    assert r["analyses"]["duplicated"]["guarantee"] == "unknown"


def test_key_order_counts_only_acknowledged_sends(hist, run_check):
    """Acknowledged is SEND_OK (or no status), as for lost: a non-OK ack (FLUSH_SLAVE_TIMEOUT)
    is kept apart, so its late delivery is no key-order violation. With both SEND_OK it is."""
    hist.send(1, 1, key="a", off=0, status="FLUSH_SLAVE_TIMEOUT")
    hist.send(1, 2, key="a", off=1)
    hist.poll(10, [(0, 1, 2)], key="a")
    hist.poll(10, [(0, 0, 1)], key="a")
    hist.drain(20, [(0, 0, 1), (0, 1, 2)])
    r = run_check(hist, only=["ordering"])["analyses"]["ordering"]["key_order"]
    assert (r["valid"], r["count"]) == (True, 0), r
    hist.ops.clear()
    hist.send(1, 1, key="a", off=0)
    hist.send(1, 2, key="a", off=1)
    hist.poll(10, [(0, 1, 2)], key="a")
    hist.poll(10, [(0, 0, 1)], key="a")
    hist.drain(20, [(0, 0, 1), (0, 1, 2)])
    r = run_check(hist, only=["ordering"])["analyses"]["ordering"]["key_order"]
    assert (r["valid"], r["count"]) == (False, 1), r


def test_extreme_offsets_and_delays_are_checked_without_overflow(hist, run_check):
    """Spark runs with ANSI arithmetic: an offset at 2^63 - 1 (a poll's next offset, a run's
    end) or a delay of 2^62 ms must not stop the check with an overflow."""
    top = (1 << 63) - 1
    hist.send(1, 1, off=top - 1)
    hist.send(1, 2, off=top)
    hist.op(1, "invoke", "send", h.Value(topic="T", value=3, delay_ms=1 << 62))
    hist.op(1, "ok", "send", h.Value(topic="T", value=3, queue_id=1, queue_offset=0, broker="b0"))
    hist.poll(10, [(0, top - 1, 1), (0, top, 2)])  # one clean run ending at 2^63 - 1
    hist.poll(10, [(0, top, 2), (0, top, 2)])  # unclean: a run from 2^63 - 1 cannot grow
    hist.poll(10, [(0, top - 1, 1)])  # after 2^63 - 1: back (nonmonotonic)
    hist.drain(20, [(0, top - 1, 1), (0, top, 2), (1, 0, 3)], ends={0: top, 1: 1})
    r = run_check(hist)
    o = r["analyses"]["ordering"]
    assert o["nonmonotonic"]["count"] == 3 and o["poll_skip"]["count"] == 0, o
    assert r["analyses"]["lost"]["count"] == 0
    assert r["analyses"]["delay"]["count"] >= 1  # read long before its due time: early


def test_examples_are_the_smallest_values_of_each_anomaly_from_one_pass(hist, run_check):
    """Every value analysis takes its examples from one shared job (core.value_examples):
    each list holds the smallest ``examples`` values of its own anomaly, however many there
    are, and no value of another anomaly."""
    for v in range(20, 0, -1):  # 20 lost (acknowledged, never read), sent in reverse order
        hist.send(1, 100 + v, off=v)
    for v in (7, 3, 5):  # definitely failed sends that were read: aborted reads
        hist.send(2, v, "fail")
    hist.poll(10, [(1, 50, 3), (1, 51, 5), (1, 52, 7), (1, 53, 9), (1, 54, 9)])  # 9: unsent
    hist.drain(20, [(1, 50 + i, v) for i, v in enumerate((3, 5, 7, 9))])
    a = run_check(hist, examples=4)["analyses"]
    assert a["lost"]["count"] == 20
    assert [e["v"] for e in a["lost"]["examples"]] == [101, 102, 103, 104]
    assert [e["v"] for e in a["aborted-read"]["examples"]] == [3, 5, 7]
    assert [e["v"] for e in a["unexpected"]["examples"]] == [9]
    assert a["unexpected"]["examples"][0]["reads"] == 3
    assert [e["v"] for e in a["duplicated"]["examples"]] == [9]
    assert a["duplicated"]["examples"][0]["n_read"] == 2


def _on(hist, p: int, f: str, topic: str, msgs: list[tuple[int, int, int]], **kw) -> None:
    """A poll (or the drain, with its bounds: those of `topic`'s queues) of `topic`: msgs
    are (queue_id, offset, value)."""
    reads = [h.Read(topic, q, o, v, kw.get("key"), "b0") for q, o, v in msgs]
    if f == "drain":
        hist.bounds(p, reads, ends=kw.get("ends"), topics={topic})
    val = h.Value(topic=topic, group=kw.get("group", "drain" if f == "drain" else "g"))
    hist.op(p, "invoke", f, val)
    hist.op(p, "ok", f, h.Value(topic=val.topic, group=val.group, messages=reads))


def test_a_value_read_only_on_another_topic_is_unexpected(hist, run_check):
    """Acknowledged on T at offset 0, T drained empty, the value found on U: not a delivery
    of the send (lost said 0 and the run was VALID), but a read of a message U never got."""
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    _on(hist, 20, "drain", "T", [(0, 1, 2)], ends={("T", 0): 2})
    _on(hist, 20, "drain", "U", [(0, 0, 1)])
    res = run_check(hist)
    a = res["analyses"]
    assert (a["unexpected"]["valid"], a["unexpected"]["count"]) == (False, 1)
    assert [e["v"] for e in a["unexpected"]["examples"]] == [1]
    assert res["valid"] is False


def test_key_order_is_per_topic(hist, run_check):
    """One key on two topics is two orders: T's reordering is found though the key's sends
    to U landed on another queue (in auto mode a key on two queues is not checked)."""
    for v, t in ((1, "T"), (2, "T"), (3, "U")):
        hist.op(1, "invoke", "send", h.Value(topic=t, value=v, key="k"))
        hist.op(1, "ok", "send", h.Value(topic=t, value=v, key="k", queue_id=v // 3,
                                         queue_offset=v - 1 if t == "T" else 0,
                                         broker="b0", status="SEND_OK"))  # fmt: skip
    _on(hist, 10, "poll", "T", [(0, 1, 2), (0, 0, 1)], key="k")
    _on(hist, 10, "poll", "U", [(1, 0, 3)], key="k")
    _on(hist, 20, "drain", "T", [(0, 0, 1), (0, 1, 2)], key="k")
    _on(hist, 20, "drain", "U", [(1, 0, 3)], key="k")
    o = run_check(hist, only=["ordering"])["analyses"]["ordering"]
    assert (o["valid"], o["count"]) == (False, 1), o
    assert o["key_order"]["keys"] == 2


def test_a_drain_that_failed_on_a_queue_no_ack_named_is_unknown(hist, run_check):
    """Every queue the drain set out to read must be read to its end (the doc's exit
    table: a drain that failed is unknown); this one acknowledged nothing, so the other
    queue's loss stays definite."""
    hist.send(1, 1, off=0)
    hist.send(1, 2, off=1)
    val = h.Value(topic="T", queue_id=3, broker="b1", detail="max")
    hist.op(20, "invoke", "offsets", val)
    hist.op(20, "info", "offsets", val, error="timeout")
    hist.drain(20, [(0, 0, 1), (0, 1, 2)])
    res = run_check(hist)
    assert res["valid"] == "unknown", res["unknown_because"]
    assert "b1/T/3" in res["unknown_because"][0]
    assert "0 of the 1 that acknowledged" in res["unknown_because"][0]
    # acknowledged at offset 2 of the drained queue, whose end the broker then said was 2
    # (the message is gone): still a definite loss
    hist.send(1, 3, off=2)
    hist.drain(20, [(0, 0, 1), (0, 1, 2)], ends={0: 2})
    res = run_check(hist)
    assert res["analyses"]["lost"]["count"] == 1 and res["valid"] is False


def test_read_on_its_own_topic_and_two_others_is_a_duplicate_whichever_the_send_topic(
    hist, run_check
):
    """A value read on its own topic and on two others: a duplicate (at several positions),
    never unexpected, whichever of the three it was sent to. The three topic hashes are
    ordered somehow, so one rotation puts the send's own topic between the least and the
    greatest read topic (that one was reported unexpected)."""
    topics = ("A", "B", "C")
    for i, own in enumerate(topics):
        hist.op(1, "invoke", "send", h.Value(topic=own, value=i + 1))
        hist.op(1, "ok", "send", h.Value(topic=own, value=i + 1, queue_id=0, queue_offset=i,
                                         broker="b0", status="SEND_OK"))  # fmt: skip
    for t in topics:
        _on(hist, 20, "drain", t, [(0, i, i + 1) for i in range(3)], ends={(t, 0): 3})
    a = run_check(hist)["analyses"]
    assert (a["unexpected"]["valid"], a["unexpected"]["count"]) == (True, 0)
    assert a["duplicated"]["count"] == 3
    assert a["lost"]["count"] == 0


def _groups_poll(hist, groups, swapped=()):
    for g in groups:
        msgs = [(0, 1, 2), (0, 0, 1)] if g in swapped else [(0, 0, 1), (0, 1, 2)]
        hist.poll(10, msgs, group=g, key="a")


def test_key_order_is_checked_for_every_group_past_the_61_with_their_own_bit(hist, run_check):
    """63 consumer groups: the 63rd shares a mask bit with others and had no first-delivery
    column, so its reordering of one key went unchecked (VALID, exit 0)."""
    hist.send(1, 1, off=0, key="a")
    hist.send(1, 2, off=1, key="a")
    groups = [f"g{i:02d}" for i in range(63)]
    _groups_poll(hist, groups, swapped={"g62"})
    hist.drain(20, [(0, 0, 1), (0, 1, 2)], key="a")
    res = run_check(hist)
    o = res["analyses"]["ordering"]
    assert (o["valid"], o["count"]) == (False, 1), o
    assert o["key_order"]["per_group"] == {"g62": 1}
    assert [e["group"] for e in o["key_order"]["examples"]] == ["g62"]
    assert res["valid"] is False


def test_many_groups_each_reading_once_is_not_a_definite_duplicate(hist, run_check):
    """64 groups each read the value once. Groups past the 61st share a mask bit, so the
    value looks redelivered; under --exactly-once that is unknown, not a failure (it was
    INVALID: duplicated). A value at two positions stays a definite duplicate."""
    hist.send(1, 1, off=0)
    groups = [f"g{i:02d}" for i in range(64)]
    for g in groups:
        hist.poll(10, [(0, 0, 1)], group=g)
    hist.drain(20, [(0, 0, 1)])
    d = run_check(hist, exactly_once=True)["analyses"]["duplicated"]
    assert d["valid"] == "unknown" and d["at_two_positions"] == 0, d
    assert d["guarantee"] == "unknown"


@pytest.mark.parametrize("past", [0, 2])
def test_a_redelivery_the_shared_groups_cannot_explain_is_definite(hist, run_check, past):
    """62 groups read values 1 and 2 once each; group g00 (its own mask bit) reads 2 again.
    That is a duplicate whatever the groups sharing a bit did (checker probe: the whole
    history became unknown under --exactly-once). With `past` groups beyond the 62 it still
    is (the doubtful case is test_many_groups_each_reading_once_is_not_a_definite_duplicate)."""
    for v in (1, 2, 3):
        hist.send(1, v, off=v - 1)
    groups = [f"g{i:02d}" for i in range(62 + past)]
    for g in groups:
        hist.poll(10, [(0, 0, 1), (0, 1, 2)], group=g)
    hist.poll(10, [(0, 1, 2)], group="g00")
    hist.poll(10, [(0, 2, 3)], group=groups[-1])
    hist.drain(20, [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    d = run_check(hist, exactly_once=True)["analyses"]["duplicated"]
    assert (d["valid"], d["guarantee"]) == (False, "at-least-once"), d


def test_a_value_read_then_gone_from_a_complete_drain_is_lost(hist, run_check):
    """Acknowledged, read by the consumer group, and then not in a final drain that read its
    queue from below its offset to the end (a master truncated and rewrote it, or a slave
    elected after losing its tail): lost, and a lost write. It was counted neither (the run
    said exactly-once; only inconsistent-offsets caught the rewritten case, and a cut tail
    with no rewrite was VALID). Below the drain's min offset (retention) it is not lost, nor
    on a queue the drain did not finish."""
    for v in range(1, 5):
        hist.send(1, v, off=v - 1)
    hist.send(1, 5, q=1, off=0)
    hist.poll(10, [(0, 0, 1), (0, 1, 2), (0, 2, 3), (0, 3, 4), (1, 0, 5)])
    # queue 0: offsets 2 and 3 hold other values now (2 rewritten by 9; 3 cut); offset 0 is
    # below the drain's min (retention). queue 1: the drain stopped short of its end
    hist.send(2, 9, off=2)
    hist.drain(20, [(0, 1, 2), (0, 2, 9)], lows={0: 1}, ends={0: 3, 1: 2})
    res = run_check(hist)
    a = res["analyses"]
    # 3 (overwritten at offset 2) and 4 (offset 3, past the drain's end of 3: cut); not 1
    # (below the min), 2 (drained) or 5 (its queue was not drained to the end)
    assert (a["lost"]["count"], a["lost"]["vanished"], a["lost"]["definite"]) == (2, 2, 2), a[
        "lost"
    ]
    assert {e["v"] for e in a["lost"]["examples"]} == {3, 4}
    assert a["lost-write"]["count"] >= 1
    assert a["duplicated"]["guarantee"] != "exactly-once"
    assert res["valid"] is False


def _overlapping_polls(hist, first: tuple[int, int, int], second: tuple[int, int, int]) -> None:
    """Two consumers of group g poll the same queue at once: process 10 is invoked, then
    process 11 is invoked and completes, then process 10 completes. msgs: (q, off, value)."""
    hist.op(10, "invoke", "poll", h.Value(topic="T", group="g"))
    hist.op(11, "invoke", "poll", h.Value(topic="T", group="g"))
    hist.op(
        11, "ok", "poll", h.Value(topic="T", group="g", messages=[h.Read("T", *second, "a", "b0")])
    )
    hist.op(
        10, "ok", "poll", h.Value(topic="T", group="g", messages=[h.Read("T", *first, "a", "b0")])
    )


def test_key_order_leaves_deliveries_of_overlapping_polls_unordered(hist, run_check):
    """Value 1 was sent before value 2; 2 is in a poll that completed first, 1 in a poll
    invoked before that one completed. Either message may have been handed out first: no
    violation (the checker once ordered deliveries by their poll's completion alone and
    failed this clean run)."""
    hist.send(1, 1, key="a", off=0)
    hist.send(1, 2, key="a", off=1)
    _overlapping_polls(hist, (0, 0, 1), (0, 1, 2))
    hist.drain(20, [(0, 0, 1), (0, 1, 2)])
    ko = run_check(hist, only=["ordering"])["analyses"]["ordering"]["key_order"]
    assert (ko["valid"], ko["count"]) == (True, 0), ko


def test_key_order_counts_a_poll_that_completed_before_the_other_was_invoked(hist, run_check):
    """The same two deliveries, but the polls one after the other: 2 was handed out
    before 1's poll began, a definite violation; so is a reordering inside one poll, and a
    redelivery of the late value in a later poll does not excuse it."""
    hist.send(1, 1, key="a", off=0)
    hist.send(1, 2, key="a", off=1)
    hist.send(1, 3, key="b", off=2, q=1)
    hist.send(1, 4, key="b", off=3, q=1)
    hist.poll(11, [(0, 1, 2)], key="a")
    hist.poll(10, [(0, 0, 1)], key="a")
    hist.poll(12, [(1, 3, 4), (1, 2, 3)], key="b")
    hist.poll(12, [(1, 2, 3)], key="b")
    hist.drain(20, [(0, 0, 1), (0, 1, 2), (1, 2, 3), (1, 3, 4)])
    ko = run_check(hist, only=["ordering"])["analyses"]["ordering"]["key_order"]
    assert (ko["valid"], ko["count"]) == (False, 2), ko
    assert ko["per_group"] == {"g": 2}
    got = {(e["late_value"], e["delivered_before_it"]) for e in ko["examples"]}
    assert got == {(1, 2), (3, 4)}


def test_key_order_takes_a_late_values_earliest_possible_delivery(hist, run_check):
    """Value 1 is delivered twice to g: in a poll that overlaps 2's and in a later one.
    Its first delivery may have come before 2's: no violation."""
    hist.send(1, 1, key="a", off=0)
    hist.send(1, 2, key="a", off=1)
    _overlapping_polls(hist, (0, 0, 1), (0, 1, 2))
    hist.poll(10, [(0, 0, 1)], key="a")
    hist.drain(20, [(0, 0, 1), (0, 1, 2)])
    ko = run_check(hist, only=["ordering"])["analyses"]["ordering"]["key_order"]
    assert (ko["valid"], ko["count"]) == (True, 0), ko


def test_key_order_checks_many_candidates_without_inlining_or_broadcast(
    hist, run_check, monkeypatch
):
    """Past MULTI_INLINE candidates their polls are exploded and filtered by a join, past
    BROADCAST_LIMIT nothing is broadcast: the same answers (limits set to 0 here)."""
    from rmq_check.analyses import ordering

    monkeypatch.setattr(ordering, "MULTI_INLINE", 0)
    monkeypatch.setattr(ordering, "BROADCAST_LIMIT", 0)
    hist.send(1, 1, key="a", off=0)
    hist.send(1, 2, key="a", off=1)
    hist.send(1, 3, key="b", off=2, q=1)
    hist.send(1, 4, key="b", off=3, q=1)
    _overlapping_polls(hist, (0, 0, 1), (0, 1, 2))
    hist.poll(11, [(1, 3, 4)], key="b")
    hist.poll(10, [(1, 2, 3)], key="b")
    hist.drain(20, [(0, 0, 1), (0, 1, 2), (1, 2, 3), (1, 3, 4)])
    ko = run_check(hist, only=["ordering"])["analyses"]["ordering"]["key_order"]
    assert (ko["valid"], ko["count"]) == (False, 1), ko
    assert [(e["late_value"], e["delivered_before_it"]) for e in ko["examples"]] == [(3, 4)]


@pytest.mark.parametrize("again", [False, True])
def test_key_order_counts_a_reordering_inside_one_poll_beside_an_overlapping_one(
    hist, run_check, again
):
    """Process 10's poll hands out 2 then 1 (1 sent first): a definite violation, which an
    overlapping poll of the group delivering 2 again must not hide; nor must 1 delivered
    once more later (fault probe: the first fix for overlapping polls compared 1 only with
    2's first completed delivery, in the other poll, and said valid)."""
    hist.send(1, 1, key="a", off=0)
    hist.send(1, 2, key="a", off=1)
    g = h.Value(topic="T", group="g")
    hist.op(10, "invoke", "poll", g)
    hist.op(11, "invoke", "poll", g)
    two, one = h.Read("T", 0, 1, 2, "a", "b0"), h.Read("T", 0, 0, 1, "a", "b0")
    hist.op(11, "ok", "poll", h.Value(topic="T", group="g", messages=[two]))
    hist.op(10, "ok", "poll", h.Value(topic="T", group="g", messages=[two, one]))
    if again:
        hist.poll(10, [(0, 0, 1)], key="a")
    hist.drain(20, [(0, 0, 1), (0, 1, 2)])
    ko = run_check(hist, only=["ordering"])["analyses"]["ordering"]["key_order"]
    assert (ko["valid"], ko["count"]) == (False, 1), ko
    assert [(e["late_value"], e["delivered_before_it"]) for e in ko["examples"]] == [(1, 2)]


def test_an_ack_without_send_ok_names_no_position(hist, run_check):
    """Value 1 acknowledged FLUSH_SLAVE_TIMEOUT at offset 0 (stored on the master, maybe not
    on a future master); after a failover value 2 is stored at offset 0 with SEND_OK and
    read there. Legal: the weak ack promised nothing (checker probe: inconsistent-offsets
    failed the run). A reader seeing two values at one offset still fails it."""
    hist.send(1, 1, off=0, status="FLUSH_SLAVE_TIMEOUT")
    hist.send(1, 2, off=0)
    hist.poll(10, [(0, 0, 2)])
    hist.drain(20, [(0, 0, 2)])
    res = run_check(hist)
    assert res["analyses"]["inconsistent-offsets"]["count"] == 0, res["analyses"]
    assert res["valid"] is True, res["safety_failed"]
