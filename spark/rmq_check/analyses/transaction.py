"""transaction: committed transactions are delivered, rolled-back ones never are.

A transactional send carries ``txn``: on its invoke the plan (what the producer's check
listener answers for it), on its completion the fate the producer decided once the half was
stored: ``commit`` or ``unknown-commit`` (left unknown by the local transaction, committed
by the check) complete ``ok``; ``rollback`` or ``unknown-rollback`` complete ``fail``.

Each transaction ends in one class:

* *committed*: completed ``ok`` with a committing fate, or ``ok`` with no fate (the
  producer completes a transaction ``ok`` only when it commits; the bench always records the
  fate, but the schema does not require it, so such a record is taken as committed, not as
  a malformed one). Must be delivered.
* *rolled back*: completed ``fail`` with a rolling-back fate. Must never be delivered.
* *failed*: completed ``fail`` without a fate (the half was certainly not stored).
* *indeterminate*: ``info`` or no completion: the half may be stored, and the check then
  answers the plan, so it may be delivered only if the plan commits.
* *inconsistent*: ``ok`` with a rolling-back fate, or ``fail`` with a committing one: no
  producer writes that; it fails the analysis (``inconsistent_records``).

Safety: *lost* (a committed transaction acknowledged SEND_OK that no one read, the final
drain included; ``unknown`` where lost would say so: ``core.undecided``) and *unexpected* (a
delivered rolled-back, failed, or indeterminate-with-a-rollback-plan transaction).
*Duplicated* (reported, like the queue workload's): a value read more than once by one
consumer group (a poll without a group is one group), or seen at two positions.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from rmq_check.analyses import UNKNOWN, result
from rmq_check.analyses.special import count_if, timed_reads
from rmq_check.core import Frames, acked_ok, example_rows, qhash, undecided_of

from rmq_ha.history import TXN_COMMITTED


def run(fr: Frames) -> dict[str, Any]:
    c = F.col
    if not fr.stats()["special"]["txn_sends"]:
        return result(UNKNOWN, 0, [], applies=False, reason="no transactional sends")
    committing = list(TXN_COMMITTED)
    s = fr.ops.where((c("f") == "send") & (c("process") >= 0) & c("value.txn").isNotNull()).select(
        c("value.value").alias("v"), "type", "index", c("value.txn").alias("txn")
    )
    # a failed half carries its plan only on the invoke: take the values of every attempt
    vals = s.select("v").distinct()
    all_s = (
        fr.ops.where((c("f") == "send") & (c("process") >= 0))
        .select(
            c("value.value").alias("v"),
            "type",
            "index",
            c("value.txn").alias("txn"),
            c("value.status").alias("status"),
        )
        .join(vals, "v", "left_semi")
    )
    comp = c("type") != "invoke"
    t = all_s.groupBy("v").agg(
        F.max(F.when(c("type") == "invoke", c("txn"))).alias("plan"),
        F.min(F.when(c("type") == "invoke", c("index"))).alias("inv_idx"),
        F.max(F.when(comp & c("txn").isNotNull(), c("txn"))).alias("fate"),
        F.max(F.when(c("type") == "ok", 1).otherwise(0)).alias("ok"),
        F.max(F.when(acked_ok(c("type"), c("status")), 1).otherwise(0)).alias("acked"),
        F.max(F.when(c("type") == "fail", 1).otherwise(0)).alias("fail"),
        F.min(F.when(comp, c("index"))).alias("comp_idx"),
    )
    rolls_back = c("fate").isNotNull() & ~c("fate").isin(*committing)
    klass = (
        # ok completes only a committing transaction: without a fate it committed too
        F.when((c("ok") == 1) & (c("fate").isNull() | c("fate").isin(*committing)), "committed")
        .when((c("fail") == 1) & rolls_back, "rolled-back")
        .when((c("fail") == 1) & c("fate").isNull(), "failed")
        # ok with a rolling-back fate, or fail with a committing one: a record the producer
        # cannot have written (committing fates complete ok, rolling-back ones fail)
        .when((c("ok") == 1) | (c("fail") == 1), "inconsistent")
        .otherwise("indeterminate")
    )
    t = fr.persist(t.select("*", klass.alias("class")))
    n_txn = t.count()
    if n_txn == 0:
        return result(UNKNOWN, 0, [], applies=False, reason="no transactional sends")
    reads = timed_reads(fr, t)
    per_v = reads.groupBy("v").agg(
        count_if(~c("drain")).alias("group_reads"),
        count_if(c("drain")).alias("drain_reads"),
        # a poll without a group is one group (as core.gid counts it), not none
        F.countDistinct(F.when(~c("drain"), F.coalesce(c("group"), F.lit("")))).alias("groups"),
        # a position is (queue, offset); a queue's missing broker counts as "" (core.qhash)
        F.countDistinct(qhash(c("topic"), c("broker"), c("queue_id")), c("off")).alias("positions"),
    )
    x = fr.persist(
        t.join(per_v, "v", "left")
        .join(undecided_of(fr, t, n_txn), "v", "left")
        .fillna(0, ["group_reads", "drain_reads"])
    )
    read_any = (c("group_reads") + c("drain_reads")) > 0
    # committed and acknowledged SEND_OK (a non-OK status is never counted lost)
    lost = (c("class") == "committed") & (c("acked") == 1) & ~read_any
    # the drain cannot vouch for it (core.undecided, as lost decides)
    lost_open = lost & F.coalesce(c("undecided"), F.lit(False))
    must_not = (c("class").isin("rolled-back", "failed")) | (
        (c("class") == "indeterminate") & ~c("plan").isin(*committing)
    )
    unexpected = must_not & read_any
    dup_group = c("group_reads") > F.coalesce(c("groups"), F.lit(0))
    dup_pos = F.coalesce(c("positions"), F.lit(0)) > 1
    aggs = [
        count_if(c("class") == k).alias(k.replace("-", "_"))
        for k in ("committed", "rolled-back", "failed", "indeterminate", "inconsistent")
    ]
    aggs += [
        count_if(lost).alias("lost"),
        count_if(lost_open).alias("lost_open"),
        count_if(unexpected).alias("unexpected"),
        count_if(dup_group | dup_pos).alias("duplicated"),
        count_if(dup_group).alias("redelivered"),
        count_if(dup_pos).alias("at_two_positions"),
        count_if((c("class") == "indeterminate") & read_any).alias("indeterminate_delivered"),
        count_if(c("fate") == "unknown-commit").alias("unknown_commit"),
        count_if(c("fate") == "unknown-rollback").alias("unknown_rollback"),
    ]
    row = x.agg(*aggs).collect()[0]
    n = {k: int(row[k] or 0) for k in row.asDict()}
    drained = fr.drain_complete()
    cols = ["v", "plan", "fate", "class", "inv_idx", "comp_idx", "group_reads", "drain_reads"]
    lost_ex = (
        example_rows(x.where(lost).select(*cols).orderBy("v"), fr.cfg.examples) if n["lost"] else []
    )
    unexp_ex = (
        example_rows(x.where(unexpected).select(*cols).orderBy("v"), fr.cfg.examples)
        if n["unexpected"]
        else []
    )
    dup_ex = (
        example_rows(x.where(dup_group | dup_pos).select(*cols).orderBy("v"), fr.cfg.examples)
        if n["duplicated"]
        else []
    )
    if n["unexpected"] or n["inconsistent"]:
        valid: bool | str = False
    elif n["lost"]:
        # as lost decides, value by value (core.undecided): one definite loss fails it,
        # whatever other queue is undrained
        valid = False if n["lost"] > n["lost_open"] else UNKNOWN
    else:
        valid = True
    return result(
        valid,
        n["lost"] + n["unexpected"] + n["inconsistent"],
        lost_ex + unexp_ex,
        transactions=n_txn,
        committed=n["committed"],
        rolled_back=n["rolled_back"],
        failed=n["failed"],
        indeterminate=n["indeterminate"],
        indeterminate_delivered=n["indeterminate_delivered"],
        resolved_by_check={"commit": n["unknown_commit"], "rollback": n["unknown_rollback"]},
        inconsistent_records=n["inconsistent"],
        lost={
            "count": n["lost"],
            "examples": lost_ex,
            "drained": drained,
            "undecided": n["lost_open"],
        },
        unexpected={"count": n["unexpected"], "examples": unexp_ex},
        duplicated={
            "count": n["duplicated"],
            "redelivered": n["redelivered"],
            "at_two_positions": n["at_two_positions"],
            "examples": dup_ex,
        },
    )
