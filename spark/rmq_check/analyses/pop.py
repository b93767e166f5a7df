"""pop: every acknowledged send to a popped topic is eventually acked by a pop consumer.

Pop topics are the topics of ``pop`` ops. For each value sent to one:

* *lost* (safety): the send was acknowledged (SEND_OK) and no ``ack`` of the value completed
  ``ok`` (nor ``info``, nor stayed open with no completion: an ack that may have landed is
  reported as ``ack_indeterminate``).
  The bench pops and acks whatever is left before its final drain, so a loss the final drain
  cannot vouch for is ``undecided`` (``core.undecided``, value by value as lost decides: its
  queue not drained, its acknowledgment naming no queue or completed after the drain's max
  query of it); the row fails on a definite loss, and is ``unknown`` when every loss is
  undecided.
* *unexpected* (safety): a popped value that no send attempted, or whose send definitely
  failed, or that a pop completed before its send was invoked, or a popped message whose
  body did not parse (null value).
* *redelivery* (reported, not an anomaly): a value popped more than once. Pop consumption
  is at-least-once by design: a message not acked within its invisible time, or whose
  invisible time was changed, comes back. Counted per consumer group (each pop group
  consumes every message once; a group's first pop of a value is no redelivery, and only
  the group's own acks and invisible-time changes count for it): values popped more than
  once by one group, those popped again by a group after an ``ok`` ack of them by that
  group completed (``after_ack``; the ack was lost, e.g. across a failover), and
  ``excess_pops``, the pops beyond each (group, value)'s first.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from rmq_check.analyses import UNKNOWN, result
from rmq_check.analyses.special import count_if
from rmq_check.core import Frames, acked_ok, example_rows, undecided_of

#: popped topics listed in the result (all are checked)
TOPICS_SHOWN = 50


def run(fr: Frames) -> dict[str, Any]:
    c = F.col
    if not fr.has("pop"):
        return result(UNKNOWN, 0, [], applies=False, reason="no pop ops")
    # the popped topics: those pops name, and those of the messages they popped (a pop op's
    # topic is optional); as a frame, however many there are (a list of 1000 at most dropped
    # the sends of the others, which then counted as unexpected)
    pop_ops = fr.ops.where(c("f") == "pop")
    topics_df = (
        pop_ops.where(c("value.topic").isNotNull())
        .select(c("value.topic").alias("t"))
        .unionByName(
            pop_ops.where(c("type") == "ok")
            .select(F.explode("value.messages.topic").alias("t"))
            .where(c("t").isNotNull())
        )
        .distinct()
    )
    topics = [r["t"] for r in topics_df.orderBy("t").limit(TOPICS_SHOWN + 1).collect()]
    if not topics:
        return result(UNKNOWN, 0, [], applies=False, reason="no pop ops")
    n_topics = topics_df.count() if len(topics) > TOPICS_SHOWN else len(topics)
    # a send's topic is its invoke's (a completion need not repeat it)
    sends = (
        fr.ops.where((c("f") == "send") & (c("process") >= 0))
        .groupBy(c("value.value").alias("v"))
        .agg(
            F.max("value.topic").alias("t"),
            F.max(F.when(acked_ok(c("type"), c("value.status")), 1).otherwise(0)).alias("acked"),
            F.max(F.when(c("type") == "fail", 1).otherwise(0)).alias("failed"),
            F.max(F.when(c("type") == "ok", 1).otherwise(0)).alias("ok"),
            F.min(F.when(c("type") == "invoke", c("index"))).alias("inv_idx"),
        )
        .join(F.broadcast(topics_df), "t", "left_semi")
        .drop("t")
    )
    # a pop group of its own: a pop or ack without a group is the group ""
    group = F.coalesce(c("value.group"), F.lit("")).alias("g")
    pops = (
        fr.ops.where((c("f") == "pop") & (c("type") == "ok"))
        .select("index", group, F.explode("value.messages").alias("m"))
        .select(c("m.value").alias("v"), "g", c("index").alias("idx"))
    )
    null_pops = pops.where(c("v").isNull()).count()
    # per (value, group): each consumer group pops every message once; redelivery is a
    # group popping a value again, after_ack popping it again after the group's own ack
    popped_g = (
        pops.where(c("v").isNotNull())
        .groupBy("v", "g")
        .agg(
            F.count(F.lit(1)).alias("pops"),
            F.max("idx").alias("last_pop_idx"),
            F.min("idx").alias("first_pop_idx"),
        )
    )
    is_ack = c("f") == "ack"
    acks_g = (
        fr.ops.where(c("f").isin("ack", "change-invisible"))
        .where(c("value.value").isNotNull())
        .groupBy(c("value.value").alias("v"), group)
        .agg(
            F.min(F.when(is_ack & (c("type") == "ok"), c("index"))).alias("first_ack_idx"),
            count_if(is_ack & (c("type") == "ok")).alias("acks_ok"),
            # an ack that may have landed: info, or an invoke that never completed (more ack
            # invokes than completions: a process's last op may stay open)
            (
                count_if(is_ack & (c("type") == "info"))
                + F.greatest(
                    count_if(is_ack & (c("type") == "invoke"))
                    - count_if(is_ack & (c("type") != "invoke")),
                    F.lit(0),
                )
            ).alias("acks_info"),
            count_if((c("f") == "change-invisible") & (c("type") == "ok")).alias("changes"),
        )
    )
    g_again = c("pops") > 1
    per_v = (
        popped_g.join(acks_g, ["v", "g"], "full_outer")
        .fillna(0, ["pops", "acks_ok", "acks_info", "changes"])
        .groupBy("v")
        .agg(
            F.sum("pops").alias("pops"),
            F.min("first_pop_idx").alias("first_pop_idx"),
            F.sum("acks_ok").alias("acks_ok"),
            F.sum("acks_info").alias("acks_info"),
            F.sum("changes").alias("changes"),
            F.max(g_again.cast("int")).alias("redelivered"),
            F.max((g_again & (c("last_pop_idx") > c("first_ack_idx"))).cast("int")).alias(
                "after_ack"
            ),
            F.max((g_again & (c("changes") > 0)).cast("int")).alias("after_change"),
            F.sum(F.when(g_again, c("pops") - 1).otherwise(0)).alias("excess_pops"),
        )
    )
    x = fr.persist(
        sends.join(per_v, "v", "full_outer").fillna(
            0,
            [
                "acked",
                "failed",
                "ok",
                "pops",
                "acks_ok",
                "acks_info",
                "changes",
                "redelivered",
                "after_ack",
                "after_change",
                "excess_pops",
            ],
        )
    )
    sent = c("inv_idx").isNotNull()
    lost = (c("acked") == 1) & (c("acks_ok") == 0) & (c("acks_info") == 0)
    unexpected = (c("pops") > 0) & (
        ~sent
        | ((c("failed") == 1) & (c("ok") == 0))
        # popped by a pop that completed before the send was invoked
        | F.coalesce(c("first_pop_idx") < c("inv_idx"), F.lit(False))
    )
    redelivered = c("redelivered") == 1
    row = x.agg(
        count_if(c("acked") == 1).alias("acknowledged"),
        count_if(lost).alias("lost"),
        count_if(unexpected).alias("unexpected"),
        count_if((c("acked") == 1) & (c("acks_ok") == 0) & (c("acks_info") > 0)).alias(
            "ack_indeterminate"
        ),
        count_if(c("acks_ok") > 0).alias("acked_by_consumer"),
        count_if(c("pops") > 0).alias("popped"),
        count_if(redelivered).alias("redelivered"),
        count_if(c("after_ack") == 1).alias("after_ack"),
        count_if(c("after_change") == 1).alias("after_change"),
        F.sum("excess_pops").alias("excess_pops"),
        F.sum("changes").alias("changes"),
    ).collect()[0]
    n = {k: int(row[k] or 0) for k in row.asDict()}
    n_unexpected = n["unexpected"] + null_pops
    drained = fr.drain_complete()
    # the final drain's verdict on each lost value, as lost decides it (core.undecided: its
    # queue undrained, no queue named, acknowledged after the drain's max query of it)
    n_open = 0
    if n["lost"]:
        lost_v = x.where(lost).select("v")
        n_open = (
            lost_v.join(undecided_of(fr, lost_v, n["lost"]), "v", "left")
            .where(F.coalesce(c("undecided"), F.lit(False)))
            .count()
        )
    cols = ["v", "inv_idx", "acked", "pops", "acks_ok", "acks_info", "changes"]
    lost_ex = (
        example_rows(x.where(lost).select(*cols).orderBy("v"), fr.cfg.examples) if n["lost"] else []
    )
    unexp_ex = (
        example_rows(x.where(unexpected).select(*cols).orderBy("v"), fr.cfg.examples)
        if n["unexpected"]
        else []
    )
    redel_ex = (
        example_rows(x.where(redelivered).select(*cols).orderBy("v"), fr.cfg.examples)
        if n["redelivered"]
        else []
    )
    if n_unexpected:
        valid: bool | str = False
    elif n["lost"]:
        # one definite loss fails it, whatever other queue is undrained
        valid = False if n["lost"] > n_open else UNKNOWN
    else:
        valid = True
    return result(
        valid,
        n["lost"] + n_unexpected,
        lost_ex + unexp_ex,
        topics=topics[:TOPICS_SHOWN],
        n_topics=n_topics,
        acknowledged=n["acknowledged"],
        popped=n["popped"],
        acked_by_consumer=n["acked_by_consumer"],
        ack_indeterminate=n["ack_indeterminate"],
        lost={"count": n["lost"], "examples": lost_ex, "drained": drained, "undecided": n_open},
        unexpected={"count": n_unexpected, "null_pops": null_pops, "examples": unexp_ex},
        redelivery={
            "values": n["redelivered"],
            "excess_pops": n["excess_pops"],
            "after_ack": n["after_ack"],
            "after_change_invisible": n["after_change"],
            "examples": redel_ex,
        },
        change_invisible_ok=n["changes"],
    )
