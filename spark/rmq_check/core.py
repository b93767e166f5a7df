"""Frames derived once from the history and shared by the analyses.

* ``values`` (one row per message value): what happened to it, from its send (invoke,
  completion, acknowledged position) and from every read of it. Most analyses are a filter
  and a count over this frame; building it is the one big shuffle.
* ``position_rows`` (one row per (queue, offset, value) seen, from acks and reads) and
  ``position_stats`` (per queue: offsets holding something, rows, highest offset read; from
  the offsets of each word of 64 offsets of a queue as the bits of one long, no shuffle of
  the rows).
  ``positions`` groups by (queue, offset) only the words of 64 offsets where some offset
  holds two values.
* ``reads``: every message delivered by a poll or drain, with the delivering op.
* ``pairs``: non-send client ops (poll, drain, offsets, metadata) paired invoke -> completion.

A queue is (topic, broker, queue_id) and is carried as a 64-bit hash ``qh``; the readable
fields are looked up only for the bounded example lists. A delivery position ``dpos`` orders
reads: the completion index of the poll, then the message's place in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from rmq_ha import history as h

INVOKE, OK, FAIL, INFO, READ, DRAIN_READ, OK_WEAK = 0, 1, 2, 3, 4, 5, 6
DRAIN_GID = 0  # the final drain's reads are group 0; consumer groups are 1..n
MAX_GROUPS = 61  # consumer groups with their own bit in a 64-bit mask (the rest share bit 62)
SHARED_BIT = 1 << (MAX_GROUPS + 1)  # the bit the groups past the MAX_GROUPS-th share
#: Messages per op kept apart in dpos = index * 2^POS_BITS + place: validation bounds the
#: index and the messages per op (rmq_ha.history.MAX_INDEX / MAX_MESSAGES) so it fits 63 bits.
POS_BITS = h.MAX_MESSAGES.bit_length() - 1
assert (h.MAX_INDEX + 1) << POS_BITS <= 1 << 63
MULTI_INLINE = 10_000  # values at several positions matched inline before exploding reads
SEND_OK = "SEND_OK"
TXN_ROLLED_BACK = ("rollback", "unknown-rollback")
READ_FS = ("poll", "drain")
PAIRED_FS = ("poll", "drain", "offsets", "metadata")


@dataclass
class Config:
    examples: int = 8
    bin_ms: int = 10  # availability resolution
    exactly_once: bool = False  # duplicates fail the run (a safety property) when set
    order: str = "auto"  # "auto": per-key order where sends carry keys; "off"
    delay_tolerance_ms: float = 250.0  # a delayed message read this much before due is early
    persist: Any = field(default_factory=lambda: StorageLevel.MEMORY_AND_DISK)


def qhash(topic: Column, broker: Column, queue_id: Column) -> Column:
    return F.xxhash64(topic, F.coalesce(broker, F.lit("")), queue_id)


LONG_MAX, LONG_MIN = (1 << 63) - 1, -(1 << 63)


def due_ns(time_ns: Column, delay_ms: Column) -> Column:
    """When a delayed send is due on the history's clock: its invoke's ``time_ns`` +
    ``delay_ms``, in 64-bit integer arithmetic (a double holds 53 bits: beyond 2^53 ns it
    would round the boundary of early). Past the range of a long it saturates: due after
    2^63 - 1 ns is never due, before -2^63 always. Null without ``delay_ms``."""
    exact = F.try_add(time_ns, F.try_multiply(delay_ms, F.lit(1_000_000).cast("long")))
    edge = F.when(delay_ms < 0, F.lit(LONG_MIN).cast("long")).otherwise(
        F.lit(LONG_MAX).cast("long")
    )
    return F.when(delay_ms.isNotNull(), F.coalesce(exact, edge))


def key_hash(topic: Column, key: Column) -> Column:
    """A message key, per topic (one key on two topics is two orders); null without a key."""
    return F.when(key.isNotNull(), F.xxhash64(F.coalesce(topic, F.lit("")), key))


def topic_hash(topic: Column) -> Column:
    return F.when(topic.isNotNull(), F.xxhash64(topic))


def topic_bit(th: Column) -> Column:
    """A topic hash's bit in a 64-bit set of topics (hash mod 64)."""
    return F.call_function("shiftleft", F.lit(1).cast("long"), F.pmod(th, F.lit(64)).cast("int"))


def acked_ok(type_: Column, status: Column) -> Column:
    """A send completion that acknowledges as lost counts it: ``ok`` with SEND_OK or no
    status (a non-OK status such as FLUSH_SLAVE_TIMEOUT promised nothing)."""
    return (type_ == "ok") & (status.isNull() | (status == SEND_OK))


def empty_frame(spark: Any, **columns: str) -> DataFrame:
    """An empty frame with these column types, planned in the JVM.

    Not ``spark.createDataFrame([], schema)``: that parallelizes a Python list, so every job
    reading the frame runs Python worker tasks, and each finished task makes the JVM's DAG
    scheduler send an accumulator update to this Python driver and wait for its answer.
    That wait is where the checker's Spark session hung late in long test processes (the
    scheduler's event loop blocked in PythonAccumulatorV2.merge, docs/PERF.md). The check
    runs no Python task at all (tests/spark/test_check_no_python_tasks.py)."""
    df: DataFrame = spark.range(0).select(
        *[F.lit(None).cast(t).alias(name) for name, t in columns.items()]
    )
    return df


#: keys per word of the distinct-key counts (``word`` / ``word_distinct``)
WORD_BITS = 6


def word(name: str) -> Column:
    """The 64-key word a long column's value falls in (floor(k / 64), negatives too)."""
    return F.shiftright(F.col(name), WORD_BITS)


def word_distinct(name: str) -> Column:
    """Aggregate: how many distinct values of the long column ``name`` a group of rows of
    one ``word`` holds: the bits of one 64-bit OR, counted. A plain fixed-width hash
    aggregation (Spark's bitmap_construct_agg, with a 4 KiB binary buffer, is planned as a
    sort of every input row: 3.5x slower over 20M ops)."""
    bit = F.expr(f"shiftleft(CAST(1 AS BIGINT), CAST(pmod(`{name}`, 64) AS INT))")
    return F.bit_count(F.bit_or(bit))


class Frames:
    def __init__(self, ops: DataFrame, cfg: Config) -> None:
        self.ops = ops
        self.cfg = cfg
        self.spark = ops.sparkSession
        self._cache: list[DataFrame] = []
        self._stats: dict[str, Any] | None = None
        self._groups: list[str] | None = None
        self._values: DataFrame | None = None
        self._positions: DataFrame | None = None
        self._position_rows: DataFrame | None = None
        self._position_stats: dict[str, Any] | None = None
        self._pairs: DataFrame | None = None
        self._drain: dict[str, Any] | None = None
        self._looked: dict[int, int] = {}
        self._drain_lo: dict[int, int] = {}
        self._drain_moved: dict[int, tuple[int, int, int]] = {}
        #: fault windows from the nemesis ops (availability.faults; delay reads them too)
        self.fault_windows: list[dict[str, Any]] | None = None

    def persist(self, df: DataFrame) -> DataFrame:
        df = df.persist(self.cfg.persist)
        self._cache.append(df)
        return df

    def close(self) -> None:
        for df in self._cache:
            df.unpersist()
        self._cache.clear()

    # small global facts ------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counts per (f, type), the time span, and the consumer groups; one pass."""
        if self._stats is None:
            # one plain hash aggregation (no collect_set: an object aggregate, slower): the
            # polls' (group, topic) are part of the key, null for every other op
            c = F.col
            poll = c("f") == "poll"
            rows = (
                self.ops.groupBy(
                    "f",
                    "type",
                    F.when(poll, F.coalesce(c("value.group"), F.lit(""))).alias("g"),
                    F.when(poll, c("value.topic")).alias("t"),
                )
                .agg(
                    F.count(F.lit(1)).alias("n"),
                    F.min("time_ns").alias("t0"),
                    F.max("time_ns").alias("t1"),
                    # special sends, counted in the same pass (no scan when there are none)
                    F.count(c("value.delay_ms")).alias("delayed"),
                    F.count(c("value.txn")).alias("txn"),
                    F.count(c("value.key")).alias("keyed"),
                    F.count(F.when(c("value.txn").isin(*TXN_ROLLED_BACK), 1)).alias("rb"),
                    # acknowledged as loss counts it (read for send ok rows only)
                    F.count(F.when(acked_ok(c("type"), c("value.status")), 1)).alias("strict"),
                )
                .collect()
            )
            counts: dict[str, int] = {}
            first: dict[str, int] = {}
            for r in rows:
                k = f"{r['f']}:{r['type']}"
                counts[k] = counts.get(k, 0) + int(r["n"])
                if r["t0"] is not None:
                    first[k] = min(first.get(k, int(r["t0"])), int(r["t0"]))
            # which group polls which topic: a group is expected to read only the values of
            # topics it subscribes to (unseen_by_group)
            groups = sorted({r["g"] for r in rows if r["g"] is not None})
            subs = sorted(
                {(r["g"], r["t"]) for r in rows if r["g"] is not None and r["t"] is not None}
            )
            self._stats = {
                "ops": sum(counts.values()),
                "counts": counts,
                "t0_ns": min((r["t0"] for r in rows if r["t0"] is not None), default=0),
                "first_ns": first,
                "t1_ns": max((r["t1"] for r in rows if r["t1"] is not None), default=0),
                "groups": groups,
                "subscriptions": [list(x) for x in subs],
                "special": {
                    # sends, not ops: a send is delayed when its invoke carries delay_ms
                    "delayed_sends": sum(
                        int(r["delayed"])
                        for r in rows
                        if r["f"] == "send" and r["type"] == "invoke"
                    ),
                    "txn_sends": sum(int(r["txn"]) for r in rows if r["f"] == "send"),
                    "keyed_sends": sum(int(r["keyed"]) for r in rows if r["f"] == "send"),
                    "rollbacks": sum(
                        int(r["rb"]) for r in rows if r["f"] == "send" and r["type"] == "fail"
                    ),
                    "acked_send_ok": sum(
                        int(r["strict"]) for r in rows if r["f"] == "send" and r["type"] == "ok"
                    ),
                },
            }
        return self._stats

    def has(self, f: str, type_: str | None = None) -> bool:
        c = self.stats()["counts"]
        return any(k.split(":")[0] == f and (type_ is None or k.endswith(":" + type_)) for k in c)

    def groups(self) -> list[str]:
        """Consumer groups of polls (drain excluded), gid = position + 1."""
        return list(self.stats()["groups"])

    def gid(self, group: Column) -> Column:
        g = F.coalesce(group, F.lit(""))
        expr: Column = F.lit(None).cast("int")
        for i, name in enumerate(self.groups()):
            expr = F.when(g == name, F.lit(i + 1)).otherwise(expr)
        return expr

    def tracked_groups(self) -> int:
        return min(len(self.groups()), MAX_GROUPS)

    def subscriber_masks(self) -> dict[str, int]:
        """topic -> the bits (gid) of the tracked consumer groups that poll it: the groups a
        value of that topic should reach. Topics no group polls are absent (mask 0)."""
        gids = {name: i + 1 for i, name in enumerate(self.groups())}
        masks: dict[str, int] = {}
        for group, topic in self.stats()["subscriptions"]:
            gid = gids.get(group)
            if gid is not None and gid <= MAX_GROUPS:
                masks[topic] = masks.get(topic, 0) | (1 << gid)
        return masks

    def subscriber_mask(self, topic: Column) -> Column:
        expr: Column = F.lit(0).cast("long")
        for t, mask in sorted(self.subscriber_masks().items()):
            expr = F.when(topic == t, F.lit(mask).cast("long")).otherwise(expr)
        return expr

    # reads ----------------------------------------------------------------------------
    def reads(self, values: list[int] | None = None, at: list[int] | None = None) -> DataFrame:
        """Every message delivered by a poll or drain, with the delivering op; with
        ``values`` (at most ``MULTI_INLINE``), the deliveries of those values only, whose
        polls are found before any is exploded; with ``at`` (as many), those of the polls
        completed at these indexes only."""
        polls = F.col("f").isin(*READ_FS) & (F.col("type") == "ok")
        if at is not None:
            assert len(at) <= MULTI_INLINE
            polls = polls & F.col("index").isin(*at)
        if values is not None:
            assert len(values) <= MULTI_INLINE
            want = F.array(*[F.lit(x).cast("long") for x in values])
            polls = polls & F.coalesce(
                F.arrays_overlap(F.col("value.messages.value"), want), F.lit(False)
            )
        r = self.ops.where(polls).select(
            "index",
            "process",
            "f",
            F.col("value.group").alias("group"),
            F.posexplode("value.messages").alias("pos", "m"),
        )
        out: DataFrame = r.select(
            F.col("m.value").alias("v"),
            F.when(F.col("f") == "drain", F.lit(DRAIN_READ)).otherwise(F.lit(READ)).alias("kind"),
            F.col("index").alias("idx"),
            F.col("process"),
            F.when(F.col("f") == "drain", F.lit(DRAIN_GID))
            .otherwise(self.gid(F.col("group")))
            .alias("gid"),
            qhash(F.col("m.topic"), F.col("m.broker"), F.col("m.queue_id")).alias("qh"),
            F.col("m.queue_offset").alias("off"),
            key_hash(F.col("m.topic"), F.col("m.key")).alias("key"),
            topic_hash(F.col("m.topic")).alias("th"),
            (F.col("index") * F.lit(1 << POS_BITS) + F.col("pos")).alias("dpos"),
        )
        if values is not None:
            out = out.where(F.col("v").isin(*values))
        return out

    def _send_events(self) -> DataFrame:
        t = F.col("type")
        ok = t == "ok"
        # an acknowledgment names the value's queue with topic and queue_id (what the drain's
        # coverage is judged by), and its position with the offset too
        has_queue = ok & F.col("value.queue_id").isNotNull() & F.col("value.topic").isNotNull()
        has_pos = has_queue & F.col("value.queue_offset").isNotNull()
        return self.ops.where((F.col("f") == "send") & (F.col("process") >= 0)).select(
            F.col("value.value").alias("v"),
            F.when(t == "invoke", F.lit(INVOKE))
            .when(ok, F.lit(OK))
            .when(t == "fail", F.lit(FAIL))
            .otherwise(F.lit(INFO))
            .alias("kind"),
            F.col("index").alias("idx"),
            F.col("time_ns").alias("t"),
            key_hash(F.col("value.topic"), F.col("value.key")).alias("key"),
            topic_hash(F.col("value.topic")).alias("th"),
            (ok & F.col("value.status").isNotNull() & (F.col("value.status") != SEND_OK)).alias(
                "weak"
            ),
            F.when(
                has_queue,
                qhash(F.col("value.topic"), F.col("value.broker"), F.col("value.queue_id")),
            ).alias("qh"),
            F.when(has_pos, F.col("value.queue_offset")).alias("off"),
            self.subscriber_mask(F.col("value.topic")).alias("smask"),
            # when a delayed send is due on the history's clock: its invoke's delay_ms
            # decides (a completion need not repeat it; one alone makes no delayed send)
            F.when(t == "invoke", due_ns(F.col("time_ns"), F.col("value.delay_ms"))).alias("due"),
        )

    # values -----------------------------------------------------------------------------
    def values(self) -> DataFrame:
        if self._values is not None:
            return self._values
        ngroups = self.tracked_groups()
        # a delayed send's due time rides along only when the history has delayed sends
        delays = self.has_delays()
        due_r = [F.lit(None).cast("long").alias("due")] if delays else []
        due_s = ["due"] if delays else []
        # narrow rows, repartitioned by value before aggregating: the partial aggregation
        # would otherwise shuffle a wide buffer per (mostly unique) value
        r = self.reads().select(
            "v",
            "kind",
            F.col("dpos").alias("a"),
            F.lit(None).cast("long").alias("b"),
            "key",
            "th",
            "qh",
            "off",
            "gid",
            F.lit(None).cast("long").alias("smask"),
            *due_r,
        )
        s = self._send_events().select(
            "v",
            F.when(F.col("weak"), F.lit(OK_WEAK)).otherwise(F.col("kind")).alias("kind"),
            F.col("idx").alias("a"),
            F.col("t").alias("b"),
            "key",
            "th",
            "qh",
            "off",
            F.lit(None).cast("int").alias("gid"),
            "smask",
            *due_s,
        )
        u = s.unionByName(r).repartition("v")
        k = F.col("kind")
        # a queue that a drain round read outside its final [min, max) (rare: the bench
        # drains each queue once) is looked up; every other drain read is the final drain's
        moved = sorted(self.drain_moved().items())
        final_range: Column = F.lit(True)
        if moved:

            def bound(i: int) -> Column:
                kv = [F.lit(x).cast("long") for qh, b in moved for x in (qh, b[i])]
                return F.element_at(F.create_map(*kv), F.col("qh"))

            hi = bound(1)
            # past the end, a read after the final max answer is the final drain's too
            after_max = F.shiftright(F.col("a"), POS_BITS) > bound(2)
            final_range = F.coalesce(
                (F.col("off") >= bound(0))
                & ((F.col("off") < hi) | (hi == F.lit(LONG_MAX)) | after_max),
                F.lit(True),
            )
        comp = k.isin(OK, FAIL, INFO, OK_WEAK)
        is_read = k == READ
        any_read = k.isin(READ, DRAIN_READ)
        # positions: acks with SEND_OK and reads. An ack with another status (say
        # FLUSH_SLAVE_TIMEOUT: stored on the master, maybe not on a future master) promised
        # no position: a new master may give its offset to another value (checker probe)
        has_pos = F.col("qh").isNotNull() & F.col("off").isNotNull() & k.isin(OK, READ, DRAIN_READ)
        aggs = [
            F.bit_or(F.expr("shiftleft(1, kind)")).alias("kinds"),
            F.min(F.when(k == INVOKE, F.col("a"))).alias("inv_idx"),
            F.min(F.when(comp, F.col("a"))).alias("comp_idx"),
            F.min(F.when(k == INVOKE, F.col("b"))).alias("inv_t"),
            F.min(F.when(comp, F.col("b"))).alias("comp_t"),
            F.max(F.when(k.isin(INVOKE, OK, FAIL, INFO, OK_WEAK), F.col("key"))).alias("key"),
            # the topic the value was sent to (its invoke and completion name one), and the
            # least and greatest topic it was read on: the send's unless a read found it on
            # another topic
            F.max(F.when(k.isin(INVOKE, OK, FAIL, INFO, OK_WEAK), F.col("th"))).alias("th_send"),
            F.min(F.when(any_read, F.col("th"))).alias("th_rmin"),
            F.max(F.when(any_read, F.col("th"))).alias("th_rmax"),
            # the read topics as bits (hash mod 64): with three or more, the send's own may
            # lie between the least and the greatest
            F.bit_or(F.when(any_read, topic_bit(F.col("th")))).alias("th_rbits"),
            F.max(F.when(k.isin(OK, OK_WEAK), F.col("qh"))).alias("ack_qh"),
            F.max(F.when(k.isin(OK, OK_WEAK), F.col("off"))).alias("ack_off"),
            F.sum(F.when(is_read, 1).otherwise(0)).alias("n_read"),
            F.sum(F.when(k == DRAIN_READ, 1).otherwise(0)).alias("n_drain"),
            # drain reads inside the final drain's [min, max) of their queue: the final
            # drain's; one read past a later round's end was there and is gone
            F.sum(F.when((k == DRAIN_READ) & final_range, 1).otherwise(0)).alias("n_drain_fin"),
            # the queues the final drain read it on: least, greatest, and as bits (hash mod
            # 64), so that a value the drain found only on another queue of its topic is not
            # taken for one it found on its own (probe: that hid a loss)
            F.min(F.when((k == DRAIN_READ) & final_range, F.col("qh"))).alias("fd_qmin"),
            F.max(F.when((k == DRAIN_READ) & final_range, F.col("qh"))).alias("fd_qmax"),
            F.bit_or(F.when((k == DRAIN_READ) & final_range, topic_bit(F.col("qh")))).alias(
                "fd_qbits"
            ),
            F.bit_or(
                F.when(
                    is_read, F.expr(f"shiftleft(CAST(1 AS BIGINT), least(gid, {MAX_GROUPS + 1}))")
                )
            ).alias("gmask"),
            F.max(F.col("smask")).alias("smask"),
            F.min(F.when(has_pos, F.col("qh"))).alias("qh_min"),
            F.max(F.when(has_pos, F.col("qh"))).alias("qh_max"),
            F.min(F.when(has_pos, F.col("off"))).alias("off_min"),
            F.max(F.when(has_pos, F.col("off"))).alias("off_max"),
            # the first read's delivery position (its op's index << POS_BITS): a read that
            # completed before its send was invoked is impossible
            F.min(F.when(any_read, F.col("a"))).alias("first_read"),
        ]
        if delays:
            aggs.append(F.max("due").alias("due"))
        if self.order_enabled():
            for g in range(0, ngroups + 1):
                aggs.append(
                    F.min(F.when(any_read & (F.col("gid") == g), F.col("a"))).alias(f"fd{g}")
                )
        kinds = F.col("kinds")

        def bit(*kinds_: int) -> Column:
            m = sum(1 << x for x in kinds_)
            return F.when(kinds.bitwiseAND(F.lit(m)) != 0, 1).otherwise(0)

        v = self.persist(u.groupBy("v").agg(*aggs))
        # the flags are cheap to derive on every scan; not materialised in the cache
        self._values = v.select(
            "*",
            bit(INVOKE).alias("inv"),
            bit(OK, OK_WEAK).alias("ok"),
            bit(FAIL).alias("fail"),
            bit(INFO).alias("info"),
            bit(OK_WEAK).alias("weak"),
        )
        return self._values

    def order_enabled(self) -> bool:
        if self.cfg.order == "off":
            return False
        # keyed sends: any send op with a key (counted by stats, no scan of its own)
        return bool(self.stats()["special"]["keyed_sends"])

    def rollbacks(self) -> DataFrame:
        """Values of transactions the producer rolled back (a ``fail`` completion with a
        ``txn`` fate): deliberate, not a failure of the system."""
        c = F.col
        return (
            self.ops.where(
                (c("f") == "send") & (c("type") == "fail") & c("value.txn").isin(*TXN_ROLLED_BACK)
            )
            .select(c("value.value").alias("v"))
            .distinct()
        )

    def has_rollbacks(self) -> bool:
        return bool(self.stats()["special"]["rollbacks"])

    # positions -------------------------------------------------------------------------
    def position_rows(self) -> DataFrame:
        """One row per distinct (qh, off, v) seen, from acks and reads, with whether a read
        saw it (``read``); a null ``v`` is an unparseable read. Values seen at one position
        come from ``values`` (no second shuffle of every read); the rare values seen at
        several positions, and the null reads, are re-read from the ops (and kept). The rest
        is a scan of the cached ``values``."""
        if self._position_rows is not None:
            return self._position_rows
        v = self.values()
        single = v.where(
            F.col("v").isNotNull()
            & F.col("qh_min").isNotNull()
            & (F.col("qh_min") == F.col("qh_max"))
            & (F.col("off_min") == F.col("off_max"))
        ).select(
            F.col("qh_min").alias("qh"),
            F.col("off_min").alias("off"),
            "v",
            ((F.col("n_read") + F.col("n_drain")) > 0).alias("read"),
        )
        multi_v = v.where(
            F.col("v").isNotNull()
            & F.col("qh_min").isNotNull()
            & ((F.col("qh_min") != F.col("qh_max")) | (F.col("off_min") != F.col("off_max")))
        ).select("v")
        # a clean history has no value at two positions and no null read (value_counts
        # says so, no scan): then nothing is re-read. Otherwise the few such values, and
        # the polls holding a null, are picked out of the ops in one scan, before any
        # explode, and kept
        vc = value_counts(self)
        few = (
            [int(r["v"]) for r in multi_v.limit(MULTI_INLINE + 1).collect()]
            if vc["at_two_positions"]
            else []
        )
        inline = bool(few) and len(few) <= MULTI_INLINE
        has_nulls = vc["null_reads"] > 0
        msg_values = F.col("value.messages.value")
        read_cond: Column | None = None
        if inline:
            read_cond = F.arrays_overlap(msg_values, F.array(*[F.lit(x).cast("long") for x in few]))
        elif few:
            read_cond = F.lit(True)
        if has_nulls:
            null_cond = F.size(F.array_compact(msg_values)) < F.size(msg_values)
            read_cond = null_cond if read_cond is None else (read_cond | null_cond)
        is_read = F.col("f").isin(*READ_FS) & (F.col("type") == "ok")
        is_send = F.col("f") == "send"
        if read_cond is None and not few:
            # built in the JVM: createDataFrame([]) would parallelize a Python list, the
            # only Python tasks the check would run (see empty_frame)
            rare = empty_frame(self.spark, qh="long", off="long", v="long", read="boolean")
        else:
            want = F.lit(False)
            if few:
                want = want | (
                    is_send & (F.col("value.value").isin(*few) if inline else F.lit(True))
                )
            if read_cond is not None:
                want = want | (is_read & read_cond)
            picked = self.ops.where(want)
            # kept when it is a few polls and sends; thousands of values at two positions
            # re-read every send and poll (rare; a broken history), and are not kept
            sub = Frames(self.persist(picked) if inline or not few else picked, self.cfg)
            sub._stats = self.stats()
            acks = (
                sub._send_events()
                .where((F.col("kind") == OK) & F.col("qh").isNotNull() & F.col("off").isNotNull())
                .select("v", "qh", "off", F.lit(False).alias("read"))
            )
            rds = sub.reads().select("v", "qh", "off", F.lit(True).alias("read"))
            if few:
                multi = acks.unionByName(rds).join(F.broadcast(multi_v), "v", "left_semi")
            else:
                multi = rds.where(F.lit(False))
            # null values (unparseable reads) have no row in values' single set: keep them
            nulls = rds.where(F.col("v").isNull())
            rare = self.persist(
                multi.unionByName(nulls)
                .groupBy("qh", "off", "v")
                .agg(F.max(F.col("read").cast("int")).cast("boolean").alias("read"))
            )
        self._position_rows = single.unionByName(rare)
        return self._position_rows

    def position_stats(self) -> dict[str, Any]:
        """Per queue: how many distinct offsets hold something, how many (offset, value)
        rows there are, and the highest offset a read saw; from one aggregation over
        ``position_rows`` by (queue, word of 64 offsets) with the word's offsets as the bits
        of one long (no shuffle of the rows).

        A word whose rows outnumber its offsets has an offset holding two values (or a
        value and an unparseable read): a ``suspect`` word, the only ones ``positions``
        then groups row by row."""
        if self._position_stats is not None:
            return self._position_stats
        c = F.col
        blocks = self.persist(
            self.position_rows()
            .select("qh", "off", F.when(c("read"), c("off")).alias("read_off"))
            .groupBy("qh", word("off").alias("w"))
            .agg(
                word_distinct("off").alias("positions"),
                F.count(F.lit(1)).alias("rows"),
                F.max("read_off").alias("max_read"),
            )
        )
        rows = (
            blocks.groupBy("qh")
            .agg(
                F.sum("positions").alias("positions"),
                F.sum("rows").alias("rows"),
                F.max("max_read").alias("max_read"),
            )
            .collect()
        )
        queues = {
            int(r["qh"]): {
                "positions": int(r["positions"]),
                "rows": int(r["rows"]),
                "max_read": None if r["max_read"] is None else int(r["max_read"]),
            }
            for r in rows
            if r["qh"] is not None
        }
        suspect = [
            (int(r["qh"]), int(r["w"]))
            for r in blocks.where(c("rows") > c("positions"))
            .select("qh", "w")
            .limit(MULTI_INLINE + 1)
            .collect()
        ]
        self._position_stats = {
            "positions": sum(q["positions"] for q in queues.values()),
            "queues": queues,
            "suspect": sorted(suspect),
        }
        return self._position_stats

    def positions(self) -> DataFrame:
        """One row per (qh, off) of the suspect words of offsets (``position_stats``):
        smallest and largest value seen there, and how many unparseable reads. Every other
        word holds one value per offset."""
        if self._positions is not None:
            return self._positions
        suspect = self.position_stats()["suspect"]
        rows = self.position_rows()
        if not suspect:
            rows = rows.where(F.lit(False))
        elif len(suspect) <= MULTI_INLINE:
            w = word("off")
            by_queue: dict[int, list[int]] = {}
            for qh, b in suspect:
                by_queue.setdefault(qh, []).append(b)
            rows = rows.where(
                reduce(
                    lambda x, y: x | y,
                    [(F.col("qh") == qh) & w.isin(*ws) for qh, ws in by_queue.items()],
                )
            )
        p = rows.groupBy("qh", "off").agg(
            F.min("v").alias("vmin"),
            F.max("v").alias("vmax"),
            F.sum(F.when(F.col("v").isNull(), 1).otherwise(0)).alias("nnull"),
        )
        self._positions = self.persist(p)
        return self._positions

    # the final drain ---------------------------------------------------------------------
    def drain(self) -> dict[str, Any]:
        """How far the final drain read each queue that acknowledged a send.

        The bench's drain (rmq_jepsen.workload.drain) asks each queue for its min and max
        offset (``offsets`` ops) and then reads it (``drain`` ops, same process) from min to
        max. A queue is *drained* when that process's last ``min`` and ``max`` answers exist
        and it read a message at offset max - 1 (or min >= max: nothing to read). Every queue
        that acknowledged a send (an ``ok`` send naming topic and queue_id) must be drained
        before "never read" can mean "lost"."""
        if self._drain is not None:
            return self._drain
        c = F.col
        keys = ["topic", "broker", "queue_id"]

        def q(prefix: str) -> list[Column]:
            return [
                c(prefix + "topic").alias("topic"),
                F.coalesce(c(prefix + "broker"), F.lit("")).alias("broker"),
                c(prefix + "queue_id").alias("queue_id"),
            ]

        ops = self.ops
        named = c("value.topic").isNotNull() & c("value.queue_id").isNotNull()
        acked = ops.where(
            (c("f") == "send") & (c("type") == "ok") & (c("process") >= 0) & named
        ).select(*q("value."), F.lit(1).alias("acked"))
        drainers = ops.where(c("f") == "drain").select("process").distinct()
        # every queue the drain set out to read (asked its bounds, or read it) must be read
        # to its end as well: a delayed message may have been delivered to a queue no
        # acknowledgment named (escaped to another broker), and a drain that failed on a
        # queue did not run to completion
        tried = (
            ops.where(c("f").isin("offsets", "drain") & named)
            .join(F.broadcast(drainers), "process", "left_semi")
            .select(*q("value."), F.lit(0).alias("acked"))
        )
        queues = acked.unionByName(tried).groupBy(*keys).agg(F.max("acked").alias("acked"))
        detail = c("value.detail")
        bounds = (
            ops.where((c("f") == "offsets") & (c("type") == "ok") & detail.isin("min", "max"))
            .join(F.broadcast(drainers), "process", "left_semi")
            .select(
                *q("value."),
                "index",
                "process",
                detail.alias("detail"),
                c("value.offset").alias("off"),
            )
            .groupBy(*keys)
            .agg(
                F.max(F.when(c("detail") == "min", F.struct("index", "off")))["off"].alias("lo"),
                F.max(F.when(c("detail") == "min", F.struct("index", "off")))["index"].alias(
                    "lo_idx"
                ),
                F.max(F.when(c("detail") == "max", F.struct("index", "off")))["off"].alias("hi"),
                F.max(F.when(c("detail") == "max", F.struct("index", "off")))["index"].alias(
                    "hi_idx"
                ),
                # the process that gave that end: its own invoke is when it looked
                F.max(F.when(c("detail") == "max", F.struct("index", "process")))["process"].alias(
                    "hi_proc"
                ),
            )
        )
        # the invokes of the drain's max queries: a send acknowledged after the query that
        # gave a queue's end was invoked may lie past that end, where the drain never looked
        max_invokes = (
            ops.where((c("f") == "offsets") & (c("type") == "invoke") & (detail == "max"))
            .join(F.broadcast(drainers), "process", "left_semi")
            .select(*q("value."), "index", "process")
            .collect()
        )
        # the drain's reads, and those before the final min / max answers: a read past the
        # final max, or below the final min, shows the queue's end went down (its start up)
        # only if it came before that answer; one after it read a queue that grew since, or
        # a max answered stale (probe C6: a value the drain read was called lost)
        # per drain op and queue first (a few rows), then against the final answers
        per_op = (
            ops.where((c("f") == "drain") & (c("type") == "ok"))
            .select("index", F.explode("value.messages").alias("m"))
            .select("index", *q("m."), c("m.queue_offset").alias("off"))
            .groupBy("index", *keys)
            .agg(F.max("off").alias("op_max"), F.min("off").alias("op_min"))
        )
        reads = (
            per_op.join(F.broadcast(bounds.select(*keys, "lo_idx", "hi_idx")), keys, "left")
            .groupBy(*keys)
            .agg(
                F.max("op_max").alias("read_max"),
                F.max(F.when(c("index") < c("hi_idx"), c("op_max"))).alias("read_max_before"),
                F.min(F.when(c("index") < c("lo_idx"), c("op_min"))).alias("read_min_before"),
            )
        )
        rows = (
            queues.join(bounds, keys, "left")
            .join(reads, keys, "left")
            .select(
                *keys,
                "acked",
                "lo",
                "hi",
                "hi_idx",
                "hi_proc",
                "read_max",
                "read_max_before",
                "read_min_before",
                qhash(c("topic"), c("broker"), c("queue_id")).alias("qh"),
            )
            .collect()
        )
        invokes: dict[tuple[Any, Any, Any], list[tuple[int, int]]] = {}
        for r in max_invokes:
            invokes.setdefault((r["topic"], r["broker"], r["queue_id"]), []).append(
                (int(r["index"]), int(r["process"]))
            )
        # per drained queue: the index of the invoke of the max query that gave its end: the
        # answering process's own invoke (its last before the answer: a process runs one op
        # at a time), never a concurrent drainer's, which may have been invoked later (a send
        # acknowledged between the two may sit past the end the answer gives)
        looked: dict[int, int] = {}
        for r in rows:
            if r["hi_idx"] is None:
                continue
            before = [
                i
                for i, p in invokes.get((r["topic"], r["broker"], r["queue_id"]), [])
                if i < r["hi_idx"] and p == r["hi_proc"]
            ]
            looked[int(r["qh"])] = max(before) if before else int(r["hi_idx"])
        incomplete = []
        for r in rows:
            lo, hi, top = r["lo"], r["hi"], r["read_max"]
            done = (
                lo is not None
                and hi is not None
                and (lo >= hi or (top is not None and top >= hi - 1))
            )
            if not done:
                why = (
                    "no ok answer to the drain's min/max offsets requests"
                    if lo is None or hi is None
                    else f"read to offset {top} of [{lo}, {hi})"
                    if top is not None
                    else f"nothing read of [{lo}, {hi})"
                )
                incomplete.append(
                    {
                        "queue": f"{r['broker']}/{r['topic']}/{r['queue_id']}",
                        "qh": int(r["qh"]),
                        "topic": r["topic"],
                        "acked": bool(r["acked"]),
                        "why": why,
                    }
                )
        incomplete.sort(key=lambda x: str(x["queue"]))
        ran = self.has("drain")
        # acknowledged sends need a drain even when none named its queue
        any_ack = bool(self.stats()["counts"].get("send:ok"))
        self._drain = {
            "ran": ran,
            "acked_queues": sum(1 for r in rows if r["acked"]),
            "queues": len(rows),
            "complete": not incomplete and (ran or not any_ack),
            "incomplete": incomplete,
        }
        self._looked = looked
        self._drain_lo = {int(r["qh"]): int(r["lo"]) for r in rows if r["lo"] is not None}
        # queues some drain round read outside the final [min, max) before the answer that
        # set that bound: its end went down (or its start up) after an earlier round read
        # there (a max of 2^63 - 1 cannot say one past an offset 2^63 - 1: it ends nothing)
        self._drain_moved = {
            int(r["qh"]): (int(r["lo"]), int(r["hi"]), int(r["hi_idx"]))
            for r in rows
            if r["lo"] is not None
            and r["hi"] is not None
            and (
                (
                    r["read_max_before"] is not None
                    and r["read_max_before"] >= r["hi"]
                    and r["hi"] != LONG_MAX
                )
                or (r["read_min_before"] is not None and r["read_min_before"] < r["lo"])
            )
        }
        return self._drain

    def drain_complete(self) -> bool:
        return bool(self.drain()["complete"])

    def drain_lows(self) -> dict[int, int]:
        """Per queue the drain asked (qh): the min offset it answered, where the drain began
        reading it (below it, retention may have removed a message)."""
        self.drain()
        return dict(self._drain_lo)

    def drain_moved(self) -> dict[int, tuple[int, int, int]]:
        """Per queue (qh) that some drain round read outside the final drain's [min, max)
        (the last min and max answers) before the answer that set that bound: those bounds
        and the index of the max answer. A drain read outside them before that answer is not
        the final drain's: the queue's end went down below it (or its start up) after that
        read. One after the max answer is (the queue grew since it was asked)."""
        self.drain()
        return dict(self._drain_moved)

    def looked(self) -> dict[int, int]:
        """Per drained queue (qh): the index of the invoke of the drain's max query that gave
        its end. A send acknowledged after it may sit past that end."""
        self.drain()
        return dict(self._looked)

    def has_delays(self) -> bool:
        return bool(self.stats()["special"]["delayed_sends"])

    def drain_start_ns(self) -> int | None:
        """When the final drain's first read was invoked (None: no drain)."""
        t = self.stats()["first_ns"].get("drain:invoke")
        return None if t is None else int(t)

    def undrained(self) -> list[int]:
        """Hashes (qh) of the acknowledging queues the drain did not read to their end."""
        return [int(x["qh"]) for x in self.drain()["incomplete"]]

    # paired non-send ops ----------------------------------------------------------------
    def pairs(self) -> DataFrame:
        """Poll, drain, offsets and metadata completions with their invoke (the previous op of
        the same process: a process runs one op at a time)."""
        if self._pairs is not None:
            return self._pairs
        from pyspark.sql.window import Window

        w = Window.partitionBy("process").orderBy("index")
        o = self.ops.where(F.col("f").isin(*PAIRED_FS) & (F.col("process") >= 0)).select(
            "process",
            "index",
            "time_ns",
            "type",
            "f",
            F.col("value.broker").alias("broker"),
            F.col("value.master").alias("master"),
            F.col("value.epoch").alias("epoch"),
        )
        o = o.select(
            "*",
            F.lag("type").over(w).alias("ptype"),
            F.lag("index").over(w).alias("pindex"),
            F.lag("time_ns").over(w).alias("ptime"),
        ).where((F.col("type") != "invoke") & (F.col("ptype") == "invoke"))
        p = o.select(
            "process",
            "f",
            "type",
            F.col("pindex").alias("inv_idx"),
            F.col("ptime").alias("inv_t"),
            F.col("index").alias("comp_idx"),
            F.col("time_ns").alias("comp_t"),
            "broker",
            "master",
            "epoch",
        )
        self._pairs = self.persist(p)
        return self._pairs


def example_rows(df: DataFrame, n: int) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.limit(n).collect()]


def value_flags(fr: Frames) -> dict[str, Column]:
    """Per-value predicates over ``values``; each analysis counts one of them."""
    c = F.col
    nonnull = c("v").isNotNull()
    read_any = (c("n_read") + c("n_drain")) > 0
    attempted = (c("inv") + c("ok") + c("fail") + c("info")) > 0
    acked = (c("ok") == 1) & (c("weak") == 0)
    weak = (c("ok") == 1) & (c("weak") == 1)
    excess = c("n_read") - F.coalesce(F.bit_count(c("gmask")), F.lit(0))
    two_pos = (c("qh_min") != c("qh_max")) | (c("off_min") != c("off_max"))
    # read only on topics it was not sent to: its own is neither the least nor the greatest
    # read topic; read on three or more topics, the read topics' bits decide (a foreign
    # topic whose bit is the send's hides it: 1 in 64 per such topic). Unexpected, not lost
    foreign_only = F.coalesce(
        (c("th_send") != c("th_rmin"))
        & (c("th_send") != c("th_rmax"))
        & (
            (c("th_rmin") == c("th_rmax"))
            | (c("th_rbits").bitwiseAND(topic_bit(c("th_send"))) == F.lit(0))
        ),
        F.lit(False),
    )
    # read on its own topic (by a consumer, or by a drain round whose read lies outside the
    # final drain's [min, max): the queue's end went down after it), then gone: the final
    # drain read the value's queue from its min offset (at or below the acknowledged offset)
    # to its end and did not find it anywhere (truncated and overwritten, or cut): lost,
    # though someone saw it once. A value read only on other topics is unexpected instead
    # (some read saw it)
    lows = sorted(fr.drain_lows().items())
    if lows:
        lo = F.element_at(
            F.create_map(*[F.lit(x).cast("long") for kv in lows for x in kv]), c("ack_qh")
        )
        from_lo = F.coalesce(c("ack_off") >= lo, F.lit(False))
    else:
        from_lo = F.lit(False)
    # the final drain read the value on its acknowledged queue: exact with one or two drain
    # reads (the least and the greatest queue); with three or more (a duplicate anyway) and
    # the acknowledged queue between them, by its bit (another queue's bit may stand for it)
    drained_own = F.coalesce(
        (c("n_drain_fin") > 0)
        & (
            (c("fd_qmin") == c("ack_qh"))
            | (c("fd_qmax") == c("ack_qh"))
            | (
                (c("n_drain_fin") > 2)
                & (c("fd_qmin") < c("ack_qh"))
                & (c("ack_qh") < c("fd_qmax"))
                & (c("fd_qbits").bitwiseAND(topic_bit(c("ack_qh"))) != F.lit(0))
            )
        ),
        F.lit(False),
    )
    vanished = (
        nonnull
        & acked
        & read_any
        & ~foreign_only
        & ~drained_own
        & from_lo
        & ~F.coalesce(undecided(fr), F.lit(False))
    )
    flags = {
        "acked": nonnull & acked,
        "acked_weak": nonnull & weak,
        "attempted": nonnull & attempted,
        "read": nonnull & read_any,
        "lost": (nonnull & acked & ~read_any) | vanished,
        "vanished": vanished,
        "lost_weak": nonnull & weak & ~read_any,
        # missed by a group that polls the value's topic (not by groups of other topics)
        "unseen_by_group": nonnull
        & acked
        & (F.coalesce(c("smask"), F.lit(0)) != F.lit(0))
        & (F.coalesce(c("gmask"), F.lit(0)).bitwiseAND(c("smask")) != c("smask")),
        "unexpected": read_any
        & (
            ~nonnull
            | ~attempted
            # read before its send was invoked (a completed read precedes the invoke)
            | F.coalesce(F.shiftright(c("first_read"), POS_BITS) < c("inv_idx"), F.lit(False))
            # read only on topics it was not sent to (also read on its own, it is duplicated
            # instead)
            | foreign_only
        ),
        "redelivered": nonnull & (excess > 0),
        "at_two_positions": nonnull & F.coalesce(two_pos, F.lit(False)),
        "aborted": nonnull & read_any & (c("fail") == 1) & (c("ok") == 0),
        "recovered": nonnull & read_any & (c("ok") == 0) & (c("fail") == 0) & (c("inv") == 1),
    }
    flags["duplicated"] = flags["redelivered"] | flags["at_two_positions"]
    return flags


def value_counts(fr: Frames) -> dict[str, int]:
    """All per-value counts in one job over ``values`` (cached on the Frames)."""
    cached: dict[str, int] | None = getattr(fr, "_value_counts", None)
    if cached is not None:
        return cached
    flags = value_flags(fr)
    c = F.col
    ng = fr.tracked_groups()
    excess = c("n_read") - F.coalesce(F.bit_count(c("gmask")), F.lit(0))
    aggs = [F.sum(F.when(e, 1).otherwise(0)).alias(k) for k, e in flags.items()]
    aggs += [
        # lost values the final drain cannot vouch for (lost counts them undecided)
        F.sum(F.when(flags["lost"] & undecided(fr), 1).otherwise(0)).alias("lost_undecided"),
        # sends with no definite outcome (recovered's denominator)
        F.sum(F.when((c("inv") == 1) & (c("ok") == 0) & (c("fail") == 0), 1).otherwise(0)).alias(
            "indeterminate"
        ),
        F.sum(F.when(c("v").isNotNull() & (excess > 0), excess).otherwise(0)).alias(
            "excess_deliveries"
        ),
        # redeliveries that groups sharing the last mask bit cannot explain: no read by them,
        # or more extra reads than there are such groups less one (each may read once)
        F.sum(
            F.when(
                c("v").isNotNull()
                & (excess > 0)
                & (
                    (F.coalesce(c("gmask"), F.lit(0)).bitwiseAND(F.lit(SHARED_BIT)) == 0)
                    | (excess > F.lit(max(len(fr.groups()) - MAX_GROUPS, 0) - 1))
                ),
                1,
            ).otherwise(0)
        ).alias("redelivered_sure"),
        F.sum(c("n_read")).alias("group_reads"),
        F.sum(c("n_drain")).alias("drain_reads"),
        F.sum(F.when(c("v").isNull(), c("n_read") + c("n_drain")).otherwise(0)).alias("null_reads"),
    ]
    row = fr.values().agg(*aggs).collect()[0]
    out = {k: int(row[k] or 0) for k in row.asDict()}
    out["tracked_groups"] = ng
    fr._value_counts = out  # type: ignore[attr-defined]
    return out


def undecided(fr: Frames) -> Column:
    """Acknowledged values the final drain cannot show lost ("never read" says nothing about
    them): acknowledged on a queue the drain did not read to its end, or naming no queue;
    acknowledged after the drain's query for their queue's end was invoked (they may sit past
    that end); or delayed sends not yet due when the drain began."""
    col = F.col("ack_qh")
    cond = col.isNull()
    if not fr.drain_complete():
        bad = fr.undrained()
        if bad:
            cond = cond | col.isin(*bad)
    looked = sorted(fr.looked().items())
    if looked:
        asked = F.element_at(
            F.create_map(*[F.lit(x).cast("long") for kv in looked for x in kv]), col
        )
        cond = cond | F.coalesce(F.col("comp_idx") > asked, F.lit(False))
    start = fr.drain_start_ns()
    if fr.has_delays() and start is not None:
        cond = cond | F.coalesce(F.col("due") > F.lit(start), F.lit(False))
    if fr.has_delays() and not fr.drain_complete():
        # a delayed message may be delivered to another queue of its topic than the one its
        # acknowledgment names (escaped to another broker group): any undrained queue of the
        # topic leaves it undecided
        topics = sorted({x["topic"] for x in fr.drain()["incomplete"] if x["topic"] is not None})
        if topics:
            hashes = [topic_hash(F.lit(t)) for t in topics]
            cond = cond | (F.col("due").isNotNull() & F.col("th_send").isin(*hashes))
    return cond


#: values joined to a per-value frame by broadcast up to this many (``undecided_of``)
BROADCAST_VALUES = 1_000_000


def undecided_of(fr: Frames, vals: DataFrame, n: int) -> DataFrame:
    """(v, undecided) for the ``n`` values of ``vals`` (a frame with a column ``v``):
    whether the final drain cannot vouch for them (``undecided``, the rule lost applies),
    so the special analyses' losses are undecided exactly when lost's are."""
    keys = vals.select("v").distinct()
    return (
        fr.values()
        .select("v", undecided(fr).alias("undecided"))
        .join(F.broadcast(keys) if n <= BROADCAST_VALUES else keys, "v", "left_semi")
    )


#: value flags whose analyses show examples, and the columns of ``values`` they show
EXAMPLE_FLAGS = ("lost", "lost_weak", "duplicated", "unexpected", "aborted", "recovered")
EXAMPLE_COLUMNS = (
    "v",
    "key",
    "inv_idx",
    "comp_idx",
    "ack_off",
    "n_read",
    "n_drain",
    "gmask",
    "off_min",
    "off_max",
    "qh_min",
    "qh_max",
    "info",
)


def value_examples(fr: Frames) -> dict[str, list[dict[str, Any]]]:
    """The first ``cfg.examples`` values (by value, nulls first) of every flag in
    ``EXAMPLE_FLAGS`` that holds for some value, in one job over ``values`` (one scan; only
    the flagged rows are sorted), cached on the Frames. Each analysis picks its fields."""
    cached: dict[str, list[dict[str, Any]]] | None = getattr(fr, "_value_examples", None)
    if cached is not None:
        return cached
    from pyspark.sql.window import Window

    counts = value_counts(fr)
    names = [n for n in EXAMPLE_FLAGS if counts[n]]
    out: dict[str, list[dict[str, Any]]] = {n: [] for n in EXAMPLE_FLAGS}
    if names:
        flags = value_flags(fr)
        c = F.col
        tagged = fr.values().select(
            *EXAMPLE_COLUMNS,
            F.array_compact(F.array(*[F.when(flags[n], F.lit(n)) for n in names])).alias("_fl"),
        )
        one = tagged.where(F.size("_fl") > 0).select(
            *EXAMPLE_COLUMNS, F.explode("_fl").alias("_flag")
        )
        rank = F.row_number().over(Window.partitionBy("_flag").orderBy(c("v").asc_nulls_first()))
        rows = one.select("*", rank.alias("_rank")).where(c("_rank") <= fr.cfg.examples).collect()
        for r in sorted(rows, key=lambda r: (r["_flag"], r["_rank"])):
            d = r.asDict()
            out[d.pop("_flag")].append({k: d[k] for k in EXAMPLE_COLUMNS})
    fr._value_examples = out  # type: ignore[attr-defined]
    return out
