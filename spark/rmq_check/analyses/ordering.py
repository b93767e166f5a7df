"""ordering: per key, acknowledged sends are delivered in send order; per consumer and queue,
deliveries never go backwards (nonmonotonic) and never skip a known message (poll-skip).

key order (a safety property): for each key and each group (consumer groups and the final
drain), take each acknowledged value's first delivery to that group. Value ``a`` precedes
``b`` when ``a``'s send completed before ``b``'s send was invoked (real-time order; concurrent
sends of one key are unordered). A violation is a value ``a`` whose first delivery comes after
the first delivery of some ``b`` that ``a`` precedes. Duplicates and missing values are not
ordering violations (they are counted by duplicated and lost). In ``auto`` mode, only keys
whose acknowledged sends all landed on one queue are checked (the ordered workload routes a
key to one queue); ``on`` checks every key.

nonmonotonic / poll-skip (reported, not safety: a consumer rebalance legally causes both):
successive deliveries to one process from one queue (in delivery order, within and across
polls) where the offset does not increase (nonmonotonic), or increases by more than one while
some offset in between is known to hold a message (acked or read by anyone: poll-skip).
"""

from __future__ import annotations

from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from rmq_check.analyses import UNKNOWN, result, verdict
from rmq_check.core import DRAIN_GID, POS_BITS, Frames, example_rows, qhash

BROADCAST_LIMIT = 1_000_000


def _group_name(fr: Frames, gid: int) -> str:
    return "<drain>" if gid == DRAIN_GID else fr.groups()[gid - 1]


def key_order(fr: Frames) -> dict[str, Any]:
    if not fr.order_enabled():
        return result(UNKNOWN, 0, [], applies=False, reason="no keyed sends (or --order off)")
    v = fr.values()
    c = F.col
    acked = v.where((c("ok") == 1) & c("key").isNotNull())
    keys = acked.groupBy("key").agg(
        F.min("ack_qh").alias("q0"), F.max("ack_qh").alias("q1"), F.count(F.lit(1)).alias("n")
    )
    if fr.cfg.order == "auto":
        ordered_keys = keys.where(c("q0") == c("q1"))
    else:
        ordered_keys = keys
    kc = keys.agg(
        F.count(F.lit(1)).alias("keys"),
        F.sum(F.when(c("q0") == c("q1"), 1).otherwise(0)).alias("single"),
    ).collect()[0]
    nkeys, single = int(kc["keys"] or 0), int(kc["single"] or 0)
    checked = nkeys if fr.cfg.order == "on" else single
    if checked == 0:
        return result(
            UNKNOWN, 0, [], applies=False, keys=nkeys, keys_checked=0, reason="no ordered keys"
        )
    # one row per acknowledged keyed value with its first delivery to every group (fd<g>),
    # shuffled once by key; each group's running maximum is a window over that partitioning
    # (one sort per group, no per-group union and no second shuffle for the key filter)
    groups = range(0, fr.tracked_groups() + 1)
    a = acked.where(F.greatest(*[c(f"fd{g}").isNotNull() for g in groups])).select(
        "key", "v", "inv_idx", "comp_idx", *[f"fd{g}" for g in groups]
    )
    if fr.cfg.order == "auto":
        a = a.join(ordered_keys.select("key"), "key", "left_semi")
    cols = [
        F.struct(
            F.lit(g).alias("gid"),
            c(f"fd{g}").alias("fd"),
            F.coalesce(
                F.max(F.when(c(f"fd{g}").isNotNull(), c("inv_idx"))).over(
                    Window.partitionBy("key")
                    .orderBy(f"fd{g}")
                    .rowsBetween(Window.unboundedPreceding, -1)
                )
                > c("comp_idx"),
                F.lit(False),
            ).alias("late"),
        ).alias(f"s{g}")
        for g in groups
    ]
    x = a.select("key", "v", "comp_idx", *cols)
    bad = fr.persist(
        x.select(
            "key", "v", "comp_idx", F.explode(F.array(*[c(f"s{g}") for g in groups])).alias("s")
        )
        .where(c("s.fd").isNotNull() & c("s.late"))
        .select(c("s.gid").alias("gid"), "key", "v", c("s.fd").alias("fd"), "comp_idx")
    )
    n = bad.count()
    ex: list[dict[str, Any]] = []
    if n:
        # for the examples only: a value sent after the late one yet delivered before it
        late = bad.orderBy("gid", "key", "v").limit(fr.cfg.examples)
        early: DataFrame = reduce(
            DataFrame.unionByName,
            [
                a.where(c(f"fd{g}").isNotNull()).select(
                    F.lit(g).alias("g2"),
                    c("key").alias("k2"),
                    c(f"fd{g}").alias("fd2"),
                    c("inv_idx").alias("inv2"),
                    c("v").alias("v2"),
                )
                for g in groups
            ],
        )
        pairs = (
            early.join(
                F.broadcast(late),
                (c("g2") == c("gid"))
                & (c("k2") == c("key"))
                & (c("fd2") < c("fd"))
                & (c("inv2") > c("comp_idx")),
            )
            .groupBy("gid", "key", "v", "comp_idx")
            .agg(F.min("v2").alias("delivered_before_it"))
            .orderBy("gid", "key", "v")
        )
        ex = [
            {
                "gid": r["gid"],
                "key_hash": r["key"],
                "late_value": r["v"],
                "delivered_before_it": r["delivered_before_it"],
                "comp_idx": r["comp_idx"],
            }
            for r in pairs.collect()
        ]
    for e in ex:
        e["group"] = _group_name(fr, int(e.pop("gid")))
    per_group = (
        {
            _group_name(fr, int(r["gid"])): int(r["n"])
            for r in bad.groupBy("gid").agg(F.count(F.lit(1)).alias("n")).collect()
        }
        if n
        else {}
    )
    return result(verdict(n), n, ex, keys=nkeys, keys_checked=checked, per_group=per_group)


def segments(fr: Frames) -> DataFrame:
    """Deliveries cut into runs, one row per run: (process, gid, qh, first, last, dpos, v).

    A poll whose messages all come from one queue at strictly consecutive increasing offsets
    (the common case) is one run, checked with array functions and never exploded; any other
    poll is exploded into one run per message. Order anomalies can then only sit between
    runs, so the window sorts one row per poll instead of one per message."""
    c = F.col
    m = c("value.messages")
    offs = m.getField("queue_offset")
    n = F.size(m)
    first = F.try_element_at(offs, F.lit(1))
    one_queue = (
        (F.size(F.array_distinct(m.getField("queue_id"))) == 1)
        & (F.size(F.array_distinct(m.getField("topic"))) == 1)
        & (F.size(F.array_distinct(m.getField("broker"))) == 1)
    )
    clean = one_queue & first.isNotNull() & (offs == F.sequence(first, first + n - 1))
    ops = fr.ops.where(c("f").isin("poll", "drain") & (c("type") == "ok") & (n > 0)).select(
        "index",
        "process",
        "f",
        c("value.group").alias("group"),
        m.alias("m"),
        clean.alias("clean"),
    )
    gid = F.when(c("f") == "drain", F.lit(DRAIN_GID)).otherwise(fr.gid(c("group")))
    head = F.try_element_at(c("m"), F.lit(1))
    runs = ops.where(c("clean")).select(
        "process",
        gid.alias("gid"),
        qhash(head.getField("topic"), head.getField("broker"), head.getField("queue_id")).alias(
            "qh"
        ),
        head.getField("queue_offset").alias("first"),
        F.try_element_at(c("m.queue_offset"), F.lit(-1)).alias("last"),
        (c("index") * F.lit(1 << POS_BITS)).alias("dpos"),
        head.getField("value").alias("v"),
        c("index").alias("idx"),
    )
    single = (
        ops.where(~c("clean"))
        .select("index", "process", "f", "group", F.posexplode("m").alias("pos", "x"))
        .where(c("x.queue_offset").isNotNull())
        .select(
            "process",
            gid.alias("gid"),
            qhash(c("x.topic"), c("x.broker"), c("x.queue_id")).alias("qh"),
            c("x.queue_offset").alias("first"),
            c("x.queue_offset").alias("last"),
            (c("index") * F.lit(1 << POS_BITS) + c("pos")).alias("dpos"),
            c("x.value").alias("v"),
            c("index").alias("idx"),
        )
    )
    return runs.unionByName(single)


def poll_order(fr: Frames) -> tuple[dict[str, Any], dict[str, Any]]:
    c = F.col
    w = Window.partitionBy("process", "gid", "qh").orderBy("dpos")
    x = segments(fr).select(
        "*",
        F.lag("last").over(w).alias("prev_off"),
        F.lag("idx").over(w).alias("prev_idx"),
    )
    x = x.withColumnRenamed("first", "off")
    odd = fr.persist(x.where((c("off") <= c("prev_off")) | (c("off") > c("prev_off") + 1)))
    nonmono = odd.where(c("off") <= c("prev_off"))
    cands = odd.where(c("off") > c("prev_off") + 1)
    n_nm = nonmono.count()
    cands = odd.where(c("off") > c("prev_off") + 1)
    n_c = cands.count()
    cols = ["process", "gid", "qh", "prev_off", "off", "prev_idx", "idx", "v"]
    nm_ex = example_rows(nonmono.select(*cols).orderBy("idx"), fr.cfg.examples) if n_nm else []
    skip_ex: list[dict[str, Any]] = []
    n_skip = 0
    if n_c:
        p = fr.positions().select(c("qh").alias("pqh"), c("off").alias("poff"))
        cs = cands.select("dpos", "qh", "prev_off", "off")
        cs = F.broadcast(cs) if n_c <= BROADCAST_LIMIT else cs
        hit = (
            p.join(cs, (c("pqh") == c("qh")) & (c("poff") > c("prev_off")) & (c("poff") < c("off")))
            .select("dpos")
            .distinct()
        )
        skips = cands.join(hit, "dpos", "left_semi")
        n_skip = skips.count()
        skip_ex = (
            example_rows(skips.select(*cols).orderBy("idx"), fr.cfg.examples) if n_skip else []
        )
    for e in nm_ex + skip_ex:
        e["group"] = _group_name(fr, int(e.pop("gid")))
    # rebalancing makes both legal, so they are reported without failing the run
    return (
        result(verdict(n_nm), n_nm, nm_ex),
        result(verdict(n_skip), n_skip, skip_ex, gaps_checked=n_c),
    )


def run(fr: Frames) -> dict[str, Any]:
    ko = key_order(fr)
    nm, ps = poll_order(fr)
    extra = {} if ko.get("applies", True) else {"applies": False}
    return result(
        ko["valid"],
        ko["count"],
        ko["examples"],
        **extra,
        key_order=ko,
        nonmonotonic=nm,
        poll_skip=ps,
    )
