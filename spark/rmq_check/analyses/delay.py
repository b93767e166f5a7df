"""delay: delayed and timer messages come due, and not before.

A delayed send carries ``delay_ms`` (its DELAY level's or its timer's delay, counted from the
send's invoke), so the message is due at ``due = invoke time_ns + delay_ms``. The broker counts
from when it stored the message, which is after the invoke: ``due`` is the earliest moment a
correct broker may deliver it.

* *early* (safety): a delivery (any poll or the final drain) before ``due - tolerance``
  (``--delay-tolerance-ms``, default 250 ms: RocketMQ timers are precise to their timer
  precision, ours deliver up to 50 ms ahead). Not when a clock fault (``fault`` "clock")
  overlapped the value's wait [invoke, min(due, first read)]: the broker counts the delay on
  its own clock, which the fault moved; those are counted as ``early.during_clock_faults``
  and fail nothing.
* *lost* (safety): an acknowledged (SEND_OK) delayed send that no one read, the drain
  included; ``unknown`` where lost would say so (``core.undecided``: without a complete final
  drain, for an acknowledgment naming no queue or acknowledged after the drain's max query
  of its queue was invoked), and for a message not yet due when the drain began (the drain
  could not see it).
* *lateness* (reported, not a failure): first delivery to a consumer group minus ``due``,
  p50 / p99 / max in ms over the values a consumer group received; values only the final
  drain read are counted apart (the drain runs after recovery, so its time says nothing).
  The send's own latency is inside it (the broker's clock starts at the store).

A send is delayed when its invoke carries ``delay_ms``; the invoke's value is the one that
counts (a completion need not repeat it, and one naming a delay the invoke did not ask for
makes no delayed send). ``due`` is 64-bit integer arithmetic (``core.due_ns``, as lost's
"not due when the drain began"): exact whatever the clock.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from rmq_check.analyses import UNKNOWN, result
from rmq_check.analyses.availability import faults
from rmq_check.analyses.special import count_if, quantiles, timed_reads
from rmq_check.core import Frames, acked_ok, due_ns, example_rows, undecided_of

#: The nemesis family whose faults move a node's clock (history.md: fault-start's `fault`).
CLOCK_FAULT = "clock"


def run(fr: Frames) -> dict[str, Any]:
    c = F.col
    if not fr.stats()["special"]["delayed_sends"]:
        return result(UNKNOWN, 0, [], applies=False, reason="no delayed sends")
    send = (c("f") == "send") & (c("process") >= 0)
    invoke = c("type") == "invoke"
    # a send is delayed when its invoke carries delay_ms (its completion need not repeat it)
    delayed = fr.ops.where(send & invoke & c("value.delay_ms").isNotNull()).select(
        c("value.value").alias("v")
    )
    s = (
        fr.ops.where(send)
        .select(
            c("value.value").alias("v"),
            "type",
            "time_ns",
            "index",
            c("value.delay_ms").alias("delay_ms"),
            c("value.status").alias("status"),
            c("value.detail").alias("how"),
            c("value.queue_id").alias("qid"),
        )
        .join(delayed.distinct(), "v", "left_semi")
    )
    sends = s.groupBy("v").agg(
        F.min(F.when(invoke, c("time_ns"))).alias("inv_t"),
        F.min(F.when(invoke, c("index"))).alias("inv_idx"),
        # the invoke's delay and due time (core.due_ns: exact, in 64-bit integers)
        F.max(F.when(invoke, c("delay_ms"))).alias("delay_ms"),
        F.max(F.when(invoke, due_ns(c("time_ns"), c("delay_ms")))).alias("due_t"),
        F.max(F.when(invoke, c("how"))).alias("how"),
        F.max(F.when(acked_ok(c("type"), c("status")), 1).otherwise(0)).alias("acked"),
        F.max(F.when(c("type") == "ok", 1).otherwise(0)).alias("ok"),
        # the acknowledgment names its queue (else no drain can vouch for a loss)
        F.max(F.when((c("type") == "ok") & c("qid").isNotNull(), 1).otherwise(0)).alias("named"),
    )
    sends = fr.persist(sends.where(c("inv_t").isNotNull()))
    n_sends = sends.count()
    if n_sends == 0:
        return result(UNKNOWN, 0, [], applies=False, reason="no delayed sends")
    reads = timed_reads(fr, sends)
    # the drain's verdict on each value, as lost decides it (core.undecided: no queue named,
    # an undrained queue, acknowledged after the drain's max query, not due when it began)
    sends = sends.join(undecided_of(fr, sends, n_sends), "v", "left")
    per_v = reads.groupBy("v").agg(
        F.min("t").alias("first_read_t"),
        F.min(F.when(~c("drain"), c("t"))).alias("first_poll_t"),
        F.count(F.lit(1)).alias("reads"),
        # reads by consumer groups: the final drain re-reads every value once more, so it
        # does not count for read_more_than_once (probe: read once and drained counted twice)
        F.sum(F.when(~c("drain"), 1).otherwise(0)).alias("group_reads"),
    )
    tol_ns = int(fr.cfg.delay_tolerance_ms * 1_000_000)

    def ms_after_due(t: str) -> Column:
        # the difference exactly (decimal: no 64-bit overflow), then in ms as a double
        d = c(t).cast("decimal(20,0)") - c("due_t").cast("decimal(20,0)")
        return d.cast("double") / F.lit(1e6)

    x = fr.persist(
        sends.join(per_v, "v", "left").select(
            "v",
            "inv_idx",
            "inv_t",
            "delay_ms",
            "how",
            "acked",
            "ok",
            "named",
            "undecided",
            "reads",
            "group_reads",
            "due_t",
            "first_read_t",
            "first_poll_t",
            ms_after_due("first_read_t").alias("first_read_vs_due_ms"),
            ms_after_due("first_poll_t").alias("lateness_ms"),
        )
    )
    # read before due - tolerance, in 64-bit integers (no rounding; a due time within the
    # tolerance of the least long has nothing before it)
    early = F.coalesce(
        c("first_read_t") < F.try_subtract(c("due_t"), F.lit(tol_ns).cast("long")), F.lit(False)
    )
    # A clock fault moves the broker's clock, and the broker counts a delay on its own clock:
    # a value whose wait a clock fault overlapped can come early through the fault, not a
    # broker bug. Such early reads are counted apart and fail nothing. The wait runs from the
    # invoke to the due time or the first read, whichever came first: a fault that began
    # after the read cannot have caused it (checker probe)
    clock = [w for w in faults(fr) if w["fault"] == CLOCK_FAULT]
    excused: Column = F.lit(False)
    if clock:
        spans = F.array(
            *[
                F.struct(
                    F.lit(int(w["start_ns"])).cast("long").alias("s"),
                    F.lit(int(w["stop_ns"])).cast("long").alias("e"),
                )
                for w in clock
            ]
        )
        # interpreted per row, but only early rows (few) reach it
        waited = F.least(c("due_t"), c("first_read_t"))
        excused = F.exists(spans, lambda w: (c("inv_t") <= w["e"]) & (waited >= w["s"]))
    early_clock = early & excused
    early = early & ~excused
    lost = (c("acked") == 1) & c("first_read_t").isNull()
    start = fr.drain_start_ns()
    not_due = c("due_t") > F.lit(start).cast("long") if start is not None else F.lit(False)
    row = x.agg(
        count_if(early).alias("early"),
        count_if(early_clock).alias("early_clock"),
        count_if(lost).alias("lost"),
        count_if(lost & not_due).alias("lost_not_due"),
        count_if(
            lost & (not_due | (c("named") == 0) | F.coalesce(c("undecided"), F.lit(False)))
        ).alias("lost_open"),
        count_if(c("acked") == 1).alias("acked"),
        count_if(c("first_poll_t").isNotNull()).alias("delivered_to_group"),
        count_if(c("first_poll_t").isNull() & c("first_read_t").isNotNull()).alias("drain_only"),
        count_if(c("group_reads") > 1).alias("read_more_than_once"),
        count_if(c("how") == "timer").alias("timers"),
    ).collect()[0]
    n_early, n_lost = int(row["early"] or 0), int(row["lost"] or 0)
    n_not_due = int(row["lost_not_due"] or 0)
    n_open = int(row["lost_open"] or 0)
    drained = fr.drain_complete()
    cols = ["v", "delay_ms", "how", "inv_idx", "first_read_vs_due_ms", "lateness_ms", "reads"]
    early_ex = (
        example_rows(x.where(early).select(*cols).orderBy("v"), fr.cfg.examples) if n_early else []
    )
    lost_ex = (
        example_rows(x.where(lost).select(*cols).orderBy("v"), fr.cfg.examples) if n_lost else []
    )
    late = quantiles(x.where(c("lateness_ms").isNotNull()), "lateness_ms")
    latest = (
        example_rows(
            # the latest first; among equally late ones the smallest value (a total order:
            # the same history gives the same list, whatever its format or partitioning)
            x.where(c("lateness_ms").isNotNull())
            .select(*cols)
            .orderBy(c("lateness_ms").desc(), c("v").asc()),
            3,
        )
        if late["count"]
        else []
    )
    if n_early:
        valid: bool | str = False
    elif n_lost:
        # as lost decides, value by value (core.undecided, plus a message not yet due when
        # the drain began): one definite loss fails it, whatever other queue is undrained
        valid = False if n_lost > n_open else UNKNOWN
    else:
        valid = True
    return result(
        valid,
        n_early + n_lost,
        early_ex + lost_ex,
        delayed_sends=n_sends,
        timers=int(row["timers"] or 0),
        acknowledged=int(row["acked"] or 0),
        early={
            "count": n_early,
            "examples": early_ex,
            "tolerance_ms": fr.cfg.delay_tolerance_ms,
            "during_clock_faults": int(row["early_clock"] or 0),
        },
        lost={
            "count": n_lost,
            "examples": lost_ex,
            "drained": drained,
            "not_due_when_the_drain_began": n_not_due,
            "undecided": n_open,
        },
        lateness_ms=late,
        latest=latest,
        delivered_to_group=int(row["delivered_to_group"] or 0),
        delivered_only_by_drain=int(row["drain_only"] or 0),
        read_more_than_once=int(row["read_more_than_once"] or 0),
    )
