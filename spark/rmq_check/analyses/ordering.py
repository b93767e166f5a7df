"""ordering: per key, acknowledged sends are delivered in send order; per consumer and queue,
deliveries never go backwards (nonmonotonic) and never skip a known message (poll-skip).

key order (a safety property): for each key and each group (consumer groups and the final
drain), take each acknowledged value's first delivery to that group. Value ``a`` precedes
``b`` when ``a``'s send completed before ``b``'s send was invoked (real-time order; concurrent
sends of one key are unordered). A violation is a value ``a`` whose first delivery comes after
the first delivery of some ``b`` that ``a`` precedes, definitely: ``b``'s poll completed
before every poll that delivered ``a`` to the group was invoked, or ``b`` came earlier in
the same poll (overlapping polls order nothing; ``_definite``). Duplicates and missing
values are not ordering violations (they are counted by duplicated and lost). In ``auto``
mode, only keys whose acknowledged sends all landed on one queue are checked (the ordered
workload routes a key to one queue); ``on`` checks every key, except that the final drain
(which reads queue after queue) judges only keys on one queue.

nonmonotonic / poll-skip (reported, not safety: a consumer rebalance legally causes both):
successive deliveries to one process from one queue (in delivery order, within and across
polls) where the offset does not increase (nonmonotonic), or increases by more than one while
some offset in between is known to hold a message (acked or read by anyone: poll-skip).
"""

from __future__ import annotations

from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from rmq_check.analyses import UNKNOWN, result, verdict
from rmq_check.core import (
    DRAIN_GID,
    MULTI_INLINE,
    POS_BITS,
    Frames,
    example_rows,
    qhash,
    value_flags,
)

BROADCAST_LIMIT = 1_000_000


def _group_name(fr: Frames, gid: int) -> str:
    return "<drain>" if gid == DRAIN_GID else fr.groups()[gid - 1]


def key_order(fr: Frames) -> dict[str, Any]:
    if not fr.order_enabled():
        return result(UNKNOWN, 0, [], applies=False, reason="no keyed sends (or --order off)")
    v = fr.values()
    c = F.col
    # acknowledged as lost counts it: SEND_OK or no status (a non-OK status, e.g.
    # FLUSH_SLAVE_TIMEOUT, is kept apart)
    acked = v.where(value_flags(fr)["acked"] & c("key").isNotNull())
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
    # one row per acknowledged keyed value with its first delivery to every group (fd<g>)
    groups = range(0, fr.tracked_groups() + 1)
    # delivered to some group (the drain alone when no consumer group polls: one column)
    delivered = reduce(lambda x, y: x | y, [c(f"fd{g}").isNotNull() for g in groups])
    a = acked.where(delivered).select(
        "key", "v", "inv_idx", "comp_idx", "ack_qh", *[f"fd{g}" for g in groups]
    )
    if fr.cfg.order == "auto" and checked < nkeys:
        # some keys landed on several queues: only the others are checked
        ok_keys = ordered_keys.select("key")
        a = a.join(
            F.broadcast(ok_keys) if nkeys <= BROADCAST_LIMIT else ok_keys, "key", "left_semi"
        )
    # one row per (key, group, first delivery) and one window over them, partitioned by
    # (key, group) and ordered by the delivery: the running maximum of the send invokes
    # delivered before a value, against that value's completion (one shuffle, one sort of
    # narrow rows, whatever the number of groups)
    d = a.select(
        "key",
        "v",
        "inv_idx",
        "comp_idx",
        "ack_qh",
        F.explode(
            F.array(*[F.struct(F.lit(g).alias("gid"), c(f"fd{g}").alias("fd")) for g in groups])
        ).alias("s"),
    ).where(c("s.fd").isNotNull())
    d = d.select(
        "key", c("s.gid").alias("gid"), c("s.fd").alias("fd"), "v", "inv_idx", "comp_idx", "ack_qh"
    )
    if len(fr.groups()) > fr.tracked_groups():
        # groups past the tracked ones share a mask bit and have no fd column: their first
        # deliveries come from the reads themselves (a second aggregation, only then)
        fd = (
            fr.reads()
            .where(c("gid") > fr.tracked_groups())
            .groupBy("v", "gid")
            .agg(F.min("dpos").alias("fd"))
        )
        base = acked.select("key", "v", "inv_idx", "comp_idx", "ack_qh")
        if fr.cfg.order == "auto" and checked < nkeys:
            base = base.join(ordered_keys.select("key"), "key", "left_semi")
        d = d.unionByName(
            base.join(fd, "v").select("key", "gid", "fd", "v", "inv_idx", "comp_idx", "ack_qh")
        )
    if fr.cfg.order == "on" and checked > single:
        # the final drain reads queue after queue: its order across queues says nothing, so
        # a key whose values landed on several queues is not judged by it (probe: with --order
        # on, a clean history failed on the drain's order)
        whole = Window.partitionBy("key", "gid")
        d = (
            d.select(
                "*",
                (F.min("ack_qh").over(whole) == F.max("ack_qh").over(whole)).alias("one_q"),
            )
            .where((c("gid") != F.lit(DRAIN_GID)) | F.coalesce(c("one_q"), F.lit(False)))
            .drop("one_q")
        )
    earlier = (
        Window.partitionBy("key", "gid").orderBy("fd").rowsBetween(Window.unboundedPreceding, -1)
    )
    # candidates: a value whose first delivery's poll completed after that of some value
    # sent after it completed. Ordering by completion alone is a superset of the definite
    # violations (two polls that overlap in time are unordered); ``_definite`` keeps only
    # those, and runs only on the candidates
    cand = fr.persist(
        d.select("*", F.max("inv_idx").over(earlier).alias("before"))
        .where(c("before") > c("comp_idx"))
        .select("gid", "key", "v", "fd", "comp_idx")
    )
    n_cand = cand.count()
    bad = fr.persist(_definite(fr, d, cand, n_cand)) if n_cand else cand
    n = bad.count()
    ex: list[dict[str, Any]] = []
    if n:
        ex = [
            {
                "gid": r["gid"],
                "key_hash": r["key"],
                "late_value": r["v"],
                "delivered_before_it": r["delivered_before_it"],
                "comp_idx": r["comp_idx"],
            }
            for r in bad.orderBy("gid", "key", "v").limit(fr.cfg.examples).collect()
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


def _definite(fr: Frames, d: DataFrame, cand: DataFrame, n_cand: int) -> DataFrame:
    """The candidates (gid, key, v, fd, comp_idx) whose lateness is definite, one row each
    with the least value ``delivered_before_it``.

    ``a`` (a candidate) is late when some ``b`` of its key, sent after ``a``'s send completed,
    was delivered to the group before any delivery of ``a`` could have happened: for every
    delivery of ``a`` (poll P, place p), ``b`` has a delivery before it, in a poll that
    completed before P was invoked, or in P itself at a place before p. A poll hands its
    messages out at some moment between its invoke and its completion, so two polls that
    overlap in time (two consumers of one group during a rebalance) order nothing. ``d``
    holds every (key, gid, v, fd, inv_idx, comp_idx) first delivery (``fd``: the least
    completion position, so "a poll that completed before P was invoked" is ``fd`` against
    P's invoke); only the candidates' keys are joined, and the candidates' polls are read
    again, with their invokes and every value in them."""
    c = F.col

    def small(df: DataFrame) -> DataFrame:
        return F.broadcast(df) if n_cand <= BROADCAST_LIMIT else df

    low = F.lit((1 << POS_BITS) - 1).cast("long")
    cand_vg = cand.select("v", "gid").distinct()
    # every delivery of a candidate to its group, with its poll's invoke (paired by process);
    # a few candidates' polls are found by their values before any poll is exploded
    few = (
        sorted({int(r["v"]) for r in cand_vg.select("v").collect()})
        if n_cand <= MULTI_INLINE
        else None
    )
    dl = fr.persist(
        fr.reads(few)
        .join(small(cand_vg), ["v", "gid"], "left_semi")
        .select("v", "gid", "process", "idx", "dpos")
    )
    polls = (
        fr.pairs()
        .select("process", c("comp_idx").alias("idx"), c("inv_idx").alias("pinv"))
        .join(small(dl.select("process", "idx").distinct()), ["process", "idx"], "left_semi")
    )
    # every value in those polls, at its least place in each (for b's place beside a's)
    at = [int(r["idx"]) for r in dl.select("idx").distinct().limit(MULTI_INLINE + 1).collect()]
    if len(at) <= MULTI_INLINE:
        in_polls = fr.reads(at=at)
    else:
        in_polls = fr.reads().join(dl.select("idx").distinct(), "idx", "left_semi")
    places = in_polls.groupBy("idx", "v").agg(F.min(c("dpos").bitwiseAND(low)).alias("bplace"))
    places = places.select(c("idx").alias("pidx"), c("v").alias("pv"), "bplace")
    dl = dl.join(small(polls), ["process", "idx"], "left").select(
        c("v").alias("av"),
        c("gid").alias("ag"),
        c("idx").alias("aidx"),
        c("dpos").bitwiseAND(low).alias("aplace"),
        # a poll without its invoke (validation pairs every one) counts from its completion
        (F.coalesce(c("pinv"), c("idx")) * F.lit(1 << POS_BITS) + c("dpos").bitwiseAND(low)).alias(
            "lo"
        ),
    )
    # the values each candidate was first delivered after, with a send that followed its own
    later = d.select(
        c("key").alias("bk"),
        c("gid").alias("bg"),
        c("v").alias("bv"),
        c("fd").alias("bfd"),
        c("inv_idx").alias("binv"),
    ).join(
        small(cand),
        (c("bk") == c("key"))
        & (c("bg") == c("gid"))
        & (c("bfd") < c("fd"))
        & (c("binv") > c("comp_idx")),
    )
    # each delivery of the candidate against b: b's first completion before the poll's
    # invoke, or b earlier in the same poll
    before = (c("bfd") < c("lo")) | F.coalesce(c("bplace") < c("aplace"), F.lit(False))
    sure = (
        later.join(dl, (c("av") == c("v")) & (c("ag") == c("gid")))
        .join(
            F.broadcast(places) if len(at) <= MULTI_INLINE else places,
            (c("pidx") == c("aidx")) & (c("pv") == c("bv")),
            "left",
        )
        .groupBy("gid", "key", "v", "fd", "comp_idx", "bv")
        .agg(F.min(before.cast("int")).alias("every"))
        .where(c("every") == 1)
    )
    return sure.groupBy("gid", "key", "v", "fd", "comp_idx").agg(
        F.min("bv").alias("delivered_before_it")
    )


def _all_equal(arr: Column, nullable: bool = False) -> Column:
    """Every element of ``arr`` is the same (min == max: no hash set per poll); with
    ``nullable``, all null or none null, as ``size(array_distinct(arr)) == 1`` says."""
    same = F.array_min(arr) == F.array_max(arr)
    if not nullable:
        return same
    present = F.size(F.array_compact(arr))
    return F.coalesce(same, F.lit(True)) & ((present == 0) | (present == F.size(arr)))


def segments(fr: Frames) -> DataFrame:
    """Deliveries cut into runs, one row per run: (process, gid, qh, first, last, dpos, v).

    A poll whose messages all come from one queue at strictly consecutive increasing offsets
    (the common case) is one run, checked with array functions and never exploded; any other
    poll is exploded into one run per message. Order anomalies can then only sit between
    runs, so the window sorts one row per poll instead of one per message. One scan of the
    polls: each yields an array of runs (one, or one per message), exploded once."""
    c = F.col
    m = c("value.messages")
    offs = m.getField("queue_offset")
    n = F.size(m)
    first = F.try_element_at(offs, F.lit(1))
    one_queue = (
        _all_equal(m.getField("queue_id"))
        & _all_equal(m.getField("topic"))
        & _all_equal(m.getField("broker"), nullable=True)
    )
    # try_add: an offset near 2^63 makes the poll unclean (exploded), never an overflow
    last = F.try_add(first, n - 1)
    clean = one_queue & first.isNotNull() & last.isNotNull() & (offs == F.sequence(first, last))
    head = F.try_element_at(m, F.lit(1))

    def run(x: Column, last: Column, pos: Column) -> Column:
        return F.struct(
            qhash(x.getField("topic"), x.getField("broker"), x.getField("queue_id")).alias("qh"),
            x.getField("queue_offset").alias("first"),
            last.alias("last"),
            pos.cast("long").alias("pos"),
            x.getField("value").alias("v"),
        )

    whole = F.array(run(head, F.try_element_at(offs, F.lit(-1)), F.lit(0)))
    # a lambda is interpreted, not generated code: only the few unclean polls reach it
    each = F.transform(m, lambda x, i: run(x, x.getField("queue_offset"), i))
    gid = F.when(c("f") == "drain", F.lit(DRAIN_GID)).otherwise(fr.gid(c("value.group")))
    rows = fr.ops.where(c("f").isin("poll", "drain") & (c("type") == "ok") & (n > 0)).select(
        "index",
        "process",
        gid.alias("gid"),
        F.explode(F.when(clean, whole).otherwise(each)).alias("s"),
    )
    return rows.where(c("s.first").isNotNull()).select(
        "process",
        "gid",
        c("s.qh").alias("qh"),
        c("s.first").alias("first"),
        c("s.last").alias("last"),
        (c("index") * F.lit(1 << POS_BITS) + c("s.pos")).alias("dpos"),
        c("s.v").alias("v"),
        c("index").alias("idx"),
    )


def poll_order(fr: Frames) -> tuple[dict[str, Any], dict[str, Any]]:
    c = F.col
    w = Window.partitionBy("process", "gid", "qh").orderBy("dpos")
    x = segments(fr).select(
        "*",
        F.lag("last").over(w).alias("prev_off"),
        F.lag("idx").over(w).alias("prev_idx"),
    )
    x = x.withColumnRenamed("first", "off")
    gap = c("off") > F.try_add(c("prev_off"), F.lit(1))
    odd = fr.persist(x.where((c("off") <= c("prev_off")) | gap))
    nonmono = odd.where(c("off") <= c("prev_off"))
    n_nm = nonmono.count()
    cands = odd.where(gap)
    n_c = cands.count()
    cols = ["process", "gid", "qh", "prev_off", "off", "prev_idx", "idx", "v"]
    # by delivery position (the op's index, then the place in it): one poll can hold
    # several, and the index alone leaves their order (and the examples) to chance
    nm_ex = example_rows(nonmono.orderBy("dpos").select(*cols), fr.cfg.examples) if n_nm else []
    skip_ex: list[dict[str, Any]] = []
    n_skip = 0
    if n_c:
        # any offset known to hold something (acked or read), row by row: a gap is a skip
        # when one exists, so the rows need no grouping
        p = fr.position_rows().select(c("qh").alias("pqh"), c("off").alias("poff"))
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
            example_rows(skips.orderBy("dpos").select(*cols), fr.cfg.examples) if n_skip else []
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
