"""Synthetic histories: a large clean run of the ordered queue workload, with a known number of
each anomaly injected. The known-answer tests and `rmq-ha bench check` both use it.

Shape of the clean history (all in the shared schema, ``rmq_ha.history``):

* Blocks of ``batch`` sends to one queue (queue = block mod ``queues``), sent two at a time
  (invoke a, invoke b, ok a, ok b) by one producer process per key (``keys_per_queue`` keys per
  queue, key -> queue fixed, so each key has one producer and its sends never overlap), then
  one poll by the consumer process that owns the queue, reading the block in offset order.
* Fault windows (``fault-start``/``fault-stop``, process -1): the first blocks of each window
  fail (sends alternate ``fail`` and ``info``, polls come back empty); every fault-start bumps
  the controller epoch that a metadata observer reports every ``metadata_every`` blocks.
* Every 1000th acknowledged send carries status FLUSH_SLAVE_TIMEOUT (acknowledged, non-OK).
* A final drain (process 200) asks every queue for its min and max offset (``offsets``) and
  reads it from offset 0 to its end (``drain``), as the bench does.

Each injected anomaly touches its own block and moves exactly the counts ``expected()``
returns; how each one moves the others is written next to it there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rmq_check.schema import READ_TYPE, SCHEMA, VALUE_FIELDS

TOPIC = "T"
GROUP = "g"
DRAIN_GROUP = "rmq-check-drain"
DRAIN_PROCESS = 200
METADATA_PROCESS = 300
CONSUMER_BASE = 100
T0_NS = 1_000_000_000
DT_NS = (20_000, 50_000, 1_000_000)  # per op: normal, inside a fault window, failing block
FAILING_BLOCKS = 8  # failing blocks at the start of each fault window
WINDOW_BLOCKS = 64  # blocks per fault window
DRAIN_CHUNK = 1024  # messages per drain op


@dataclass
class Anomalies:
    """How many of each anomaly to inject."""

    lost_tail: int = 0  # acked sends past the end of what anyone read
    lost_write: int = 0  # acked message removed from its poll and from the drain
    poll_skip: int = 0  # message removed from its consumer's poll only (the drain reads it)
    unexpected: int = 0  # a read of a value never sent
    dup_redeliver: int = 0  # a second delivery of a message to the consumer group
    dup_offset: int = 0  # a message read again (by a drain) at a second offset
    nonmonotonic: int = 0  # a consumer's poll repeats a message right after itself
    inconsistent: int = 0  # the drain reads another acked value at a message's offset
    ordering: int = 0  # two sends of one key swap places in the log
    aborted: int = 0  # a read message whose send completed as fail
    recovered: int = 0  # a read message whose send completed as info
    epoch_backwards: int = 0  # a metadata observation with a lower epoch than one before
    two_masters: int = 0  # two masters observed for one (broker, epoch)

    def total(self) -> int:
        return sum(asdict(self).values())


def expected(a: Anomalies) -> dict[str, int]:
    """The counts the checker must report for a history generated with ``a``."""
    return {
        # lost-write victims are lost too, and so is an inconsistent-offsets victim: the
        # consumer read it, then the drain found another value at its offset (it vanished
        # below the highest offset read: a lost write)
        "lost": a.lost_tail + a.lost_write + a.inconsistent,
        "lost-write": a.lost_write + a.inconsistent,
        # the consumer group never sees: lost ones, skipped ones, and the inconsistent
        # victim's rival value (only the drain reads it)
        "unseen-by-group": a.lost_tail + a.lost_write + a.poll_skip + a.inconsistent,
        "unexpected": a.unexpected,
        # a nonmonotonic repeat is also a second delivery to the group
        "duplicated": a.dup_redeliver + a.dup_offset + a.nonmonotonic,
        "redelivered": a.dup_redeliver + a.nonmonotonic,
        "at-two-positions": a.dup_offset,
        "inconsistent-offsets": a.inconsistent,
        # both the consumer group and the drain see the swapped pair out of order
        "ordering": 2 * a.ordering,
        "nonmonotonic": a.nonmonotonic,
        # a lost-write hole is skipped by its consumer and by the drain
        "poll-skip": a.poll_skip + 2 * a.lost_write,
        "aborted-read": a.aborted,
        "recovered": a.recovered,
        "epoch-backwards": a.epoch_backwards,
        "two-masters": a.two_masters,
        "metadata": a.epoch_backwards + a.two_masters,
    }


@dataclass
class Synth:
    ops: int = 1_000_000
    queues: int = 8
    batch: int = 16
    keys_per_queue: int = 4
    consumers: int = 4
    faults: int | None = None  # fault windows; default about one per 30k blocks, at least 1
    metadata_every: int = 500
    seed: int = 7
    anomalies: Anomalies = field(default_factory=Anomalies)
    chunk_blocks: int = 1 << 15

    def __post_init__(self) -> None:
        if self.batch < 8 or self.batch % 2:
            raise ValueError("batch must be even and >= 8")
        if self.keys_per_queue < 2 or self.keys_per_queue * 2 > self.batch:
            raise ValueError("need 2 <= keys_per_queue <= batch/2")


@dataclass
class Summary:
    ops: int
    sends: int
    reads: int
    expected: dict[str, int]
    fault_windows: int


class _Plan:
    """Block-level layout and the victims of each injection."""

    def __init__(self, s: Synth) -> None:
        self.s = s
        self.B = s.batch
        self.Q = s.queues
        per_block = 2 * self.B + 2
        self.nblocks = max(self.Q * 8, s.ops // per_block)
        n = self.nblocks
        faults = s.faults if s.faults is not None else max(1, n // 30_000)
        faults = min(faults, max(0, n // (WINDOW_BLOCKS * 3)))
        self.fault_starts = [
            int((i + 1) * n // (faults + 1)) for i in range(faults)
        ]  # block where window i starts
        self.window = np.zeros(n, dtype=np.int8)  # 0 normal, 1 in window, 2 failing
        self.epoch_at = np.ones(n, dtype=np.int32)
        for st in self.fault_starts:
            self.window[st : st + WINDOW_BLOCKS] = 1
            self.window[st : st + FAILING_BLOCKS] = 2
            self.epoch_at[st:] += 1
        self.ok = self.window != 2
        self.ok_rank = np.zeros(n, dtype=np.int64)
        self.qlen = np.zeros(self.Q, dtype=np.int64)  # messages per queue
        for q in range(self.Q):
            idx = np.arange(q, n, self.Q)
            okq = self.ok[idx].astype(np.int64)
            self.ok_rank[idx] = np.cumsum(okq) - okq
            self.qlen[q] = int(okq.sum()) * self.B
        self._pick_victims()

    def _pick_victims(self) -> None:
        a = self.s.anomalies
        rng = np.random.default_rng(self.s.seed)
        n, Q = self.nblocks, self.Q
        last_rank = {q: self.qlen[q] // self.B - 1 for q in range(Q)}
        q_of = np.arange(n) % Q
        eligible = np.flatnonzero(
            self.ok
            & (self.ok_rank >= 1)
            & (self.ok_rank < np.array([last_rank[q] for q in range(Q)])[q_of])
            & (self.window == 0)
        )
        need = (
            a.lost_write
            + a.poll_skip
            + a.dup_redeliver
            + a.dup_offset
            + a.nonmonotonic
            + a.inconsistent
            + a.ordering
            + a.aborted
            + a.recovered
        )
        if need > len(eligible):
            raise ValueError(f"{need} block victims but only {len(eligible)} eligible blocks")
        blocks = rng.choice(eligible, size=need, replace=False)
        B = self.B
        it = iter(blocks.tolist())

        def take(k: int, lo: int, hi: int) -> list[tuple[int, int]]:
            return [(next(it), int(rng.integers(lo, hi + 1))) for _ in range(k)]

        self.lost_write = take(a.lost_write, 1, B - 2)
        self.poll_skip = take(a.poll_skip, 1, B - 2)
        self.dup_redeliver = take(a.dup_redeliver, 0, B - 1)
        self.dup_offset = take(a.dup_offset, 0, B - 1)
        self.nonmonotonic = take(a.nonmonotonic, 0, B - 1)
        self.inconsistent = take(a.inconsistent, 0, B - 1)
        self.ordering = take(a.ordering, 0, B - 1 - self.s.keys_per_queue)
        self.aborted = take(a.aborted, 0, B - 1)
        self.recovered = take(a.recovered, 0, B - 1)
        # values for the extra sends
        self.v_extra = n * B + 1000
        self.inconsistent_values: list[int] = []

    # message identity ---------------------------------------------------------------
    def value(self, b: int, j: int) -> int:
        return b * self.B + j

    def key_id(self, q: Any, j: Any) -> Any:
        return q + self.Q * (j % self.s.keys_per_queue)

    def offset(self, b: int, j: int) -> int:
        return int(self.ok_rank[b]) * self.B + j

    def broker(self, q: int) -> str:
        return f"broker-{q % 2}"

    def queue_id(self, q: int) -> int:
        return q // 2


def _pick(mask: Any, a: Any, b: Any) -> Any:
    """np.where for object columns (None allowed): a where mask, else b (scalars or arrays)."""
    out = np.empty(len(mask), dtype=object)
    out[:] = b if not isinstance(b, np.ndarray) else b.astype(object)
    if isinstance(a, np.ndarray):
        out[mask] = a.astype(object)[mask]
    else:
        out[mask] = a
    return out


def _col(n: int, typ: Any, v: Any) -> Any:
    if v is None:
        return pa.nulls(n, typ)
    if isinstance(v, (pa.Array, pa.ChunkedArray)):
        return v
    if isinstance(v, np.ndarray):
        return pa.array(v, type=typ)
    if isinstance(v, list):
        return pa.array(v, type=typ)
    return pa.repeat(pa.scalar(v, type=typ), n)


_VTYPES = dict(VALUE_FIELDS)


def _rows(
    n: int,
    order: Any,
    dtc: Any,
    top: dict[str, Any],
    val: dict[str, Any],
) -> Any:
    """A table of ``n`` rows in the schema plus helper columns ord (sort key) and dtc (time
    class); fields not given are null."""
    vfields = [_col(n, t, val.get(name)) for name, t in VALUE_FIELDS]
    value = pa.StructArray.from_arrays(vfields, fields=list(SCHEMA.field("value").type))
    cols: dict[str, Any] = {}
    for f in SCHEMA:
        if f.name == "value":
            cols["value"] = value
        elif f.name in ("index", "time_ns"):
            cols[f.name] = pa.nulls(n, f.type)
        else:
            cols[f.name] = _col(n, f.type, top.get(f.name))
    cols["ord"] = _col(n, pa.int64(), order)
    cols["dtc"] = _col(n, pa.int8(), dtc)
    return pa.table(cols)


def _messages(
    counts: Any, topic: Any, queue_id: Any, offset: Any, value: Any, key: Any, broker: Any
) -> Any:
    """A list<read> column: row i holds the next counts[i] messages of the flat arrays."""
    n = len(value)
    children = [
        _col(n, pa.string(), topic),
        _col(n, pa.int32(), queue_id),
        _col(n, pa.int64(), offset),
        _col(n, pa.int64(), value),
        _col(n, pa.string(), key),
        _col(n, pa.string(), broker),
    ]
    flat = pa.StructArray.from_arrays(children, fields=list(READ_TYPE))
    offs = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offs[1:])
    return pa.ListArray.from_arrays(pa.array(offs, pa.int32()), flat)


class _Strings:
    """Interned string columns built with take (no per-row Python strings)."""

    def __init__(self, names: list[str]) -> None:
        self.dict = pa.array(names, pa.string())

    def take(self, idx: Any) -> Any:
        return self.dict.take(pa.array(np.asarray(idx, dtype=np.int64)))


def _chunk(p: _Plan, b0: int, b1: int, keys: _Strings, brokers: _Strings) -> Any:
    s, B, Q = p.s, p.B, p.Q
    blocks = np.arange(b0, b1)
    nb = len(blocks)
    q = blocks % Q
    j = np.arange(B)
    bb = np.repeat(blocks, B)
    jj = np.tile(j, nb)
    qq = bb % Q
    okb = p.ok[blocks]
    okm = np.repeat(okb, B)
    values = bb * B + jj
    key_ids = p.key_id(qq, jj)
    offsets = np.repeat(p.ok_rank[blocks], B) * B + jj
    # sends: slot of invoke / completion inside the block (pairs run concurrently)
    pair, second = jj // 2, jj % 2
    inv_slot = 4 * pair + second
    ok_slot = 4 * pair + 2 + second
    base_ord = bb * 64 + 2
    dtc = np.repeat(p.window[blocks], B)
    # completions: ok, or fail/info alternately in failing blocks
    even = jj % 2 == 0
    ctype = _pick(okm, "ok", _pick(even, "fail", "info"))
    status = _pick(okm, "SEND_OK", None)
    weak = okm & (values % 1000 == 999)
    status[weak] = "FLUSH_SLAVE_TIMEOUT"
    definite = _pick(okm, None, _pick(even, True, False))
    error = _pick(okm, None, _pick(even, "CONNECT_FAILED", "TIMEOUT"))
    ack_off = offsets.copy()
    has_ack = okm.copy()
    # per-message consumer-read multiplicity (0 removed, 2 repeated)
    mult = np.where(okm, 1, 0).astype(np.int32)
    read_val = values.copy()

    def at(b: int, jv: int) -> int:
        return (b - b0) * B + jv

    for b, jv in p.lost_write + p.poll_skip:
        if b0 <= b < b1:
            mult[at(b, jv)] = 0
    for b, jv in p.nonmonotonic:
        if b0 <= b < b1:
            mult[at(b, jv)] = 2
    for b, jv in p.ordering:
        if b0 <= b < b1:
            i1, i2 = at(b, jv), at(b, jv + s.keys_per_queue)
            ack_off[i1], ack_off[i2] = ack_off[i2], ack_off[i1]
            read_val[i1], read_val[i2] = read_val[i2], read_val[i1]
    for victims, t, err, dfn in (
        (p.aborted, "fail", "SERVICE_NOT_AVAILABLE", True),
        (p.recovered, "info", "TIMEOUT", False),
    ):
        for b, jv in victims:
            if b0 <= b < b1:
                i = at(b, jv)
                ctype[i], error[i], definite[i], status[i] = t, err, dfn, None
                has_ack[i] = False

    n = nb * B
    tables = []
    qid = (qq // 2).astype(np.int32)
    bro = brokers.take(qq % 2)
    kstr = keys.take(key_ids)
    tables.append(
        _rows(
            n,
            base_ord + inv_slot,
            dtc,
            {"process": key_ids.astype(np.int32), "type": "invoke", "f": "send"},
            {"topic": TOPIC, "value": values, "key": kstr},
        )
    )
    tables.append(
        _rows(
            n,
            base_ord + ok_slot,
            dtc,
            {
                "process": key_ids.astype(np.int32),
                "type": pa.array(ctype, pa.string()),
                "f": "send",
                "error": pa.array(error, pa.string()),
                "definite": pa.array(definite, pa.bool_()),
                "node": "n1",
            },
            {
                "topic": TOPIC,
                "value": values,
                "key": kstr,
                "queue_id": pa.array(qid, pa.int32(), mask=~has_ack),
                "queue_offset": pa.array(ack_off, pa.int64(), mask=~has_ack),
                "broker": pc.if_else(pa.array(has_ack), bro, pa.scalar(None, pa.string())),
                "status": pa.array(status, pa.string()),
            },
        )
    )
    # polls: one per block by the queue's consumer
    cons = (CONSUMER_BASE + q % s.consumers).astype(np.int32)
    counts = mult.reshape(nb, B).sum(axis=1)
    sel = np.repeat(np.arange(n), mult)
    rq = qq[sel]
    msgs = _messages(
        counts,
        TOPIC,
        pa.array(qid[sel], pa.int32()),
        pa.array(offsets[sel], pa.int64()),
        pa.array(read_val[sel], pa.int64()),
        keys.take(p.key_id(rq, (read_val[sel] % B))),
        brokers.take(rq % 2),
    )
    pdtc = p.window[blocks]
    tables.append(
        _rows(
            nb,
            blocks * 64 + 2 + 2 * B,
            pdtc,
            {"process": cons, "type": "invoke", "f": "poll"},
            {"topic": TOPIC, "group": GROUP},
        )
    )
    tables.append(
        _rows(
            nb,
            blocks * 64 + 3 + 2 * B,
            pdtc,
            {"process": cons, "type": "ok", "f": "poll", "node": "n1"},
            {"topic": TOPIC, "group": GROUP, "messages": msgs},
        )
    )
    # nemesis and metadata
    for fid, st in enumerate(p.fault_starts):
        for b, fn, o in ((st, "fault-start", 0), (st + WINDOW_BLOCKS - 1, "fault-stop", 40)):
            if b0 <= b < b1:
                tables.append(
                    _rows(
                        1,
                        np.array([b * 64 + o]),
                        np.array([0], np.int8),
                        {"process": -1, "type": "info", "f": fn},
                        {
                            "fault": "kill",
                            "fault_id": fid,
                            "targets": [["n1"]],
                            "detail": "synthetic",
                        },
                    )
                )
    mblocks = blocks[blocks % s.metadata_every == 0]
    if len(mblocks):
        ep = p.epoch_at[mblocks]
        masters = pa.array([f"n{e % 3 + 1}" for e in ep.tolist()], pa.string())
        for o, t in ((36, "invoke"), (37, "ok")):
            val: dict[str, Any] = {"broker": "broker-0"}
            if t == "ok":
                val |= {"master": masters, "epoch": ep.astype(np.int32)}
            tables.append(
                _rows(
                    len(mblocks),
                    mblocks * 64 + o,
                    np.zeros(len(mblocks), np.int8),
                    {"process": METADATA_PROCESS, "type": t, "f": "metadata"},
                    val,
                )
            )
    return pa.concat_tables(tables)


def _extras_pre_drain(p: _Plan) -> Any:
    """Acked sends nobody reads (lost_tail) and rival sends for inconsistent offsets."""
    a = p.s.anomalies
    rows: list[dict[str, Any]] = []
    v = p.v_extra
    for i in range(a.lost_tail):
        q = i % p.Q
        rows.append({"v": v, "q": q, "off": int(p.qlen[q]) + i // p.Q, "proc": 400})
        v += 1
    for b, jv in p.inconsistent:
        rows.append({"v": v, "q": b % p.Q, "off": p.offset(b, jv), "proc": 401})
        v += 1
    p.inconsistent_values = [r["v"] for r in rows[a.lost_tail :]]
    tables = []
    for i, r in enumerate(rows):
        common = {"topic": TOPIC, "value": r["v"]}
        tables.append(
            _rows(1, [2 * i], [0], {"process": r["proc"], "type": "invoke", "f": "send"}, common)
        )
        tables.append(
            _rows(
                1,
                [2 * i + 1],
                [0],
                {"process": r["proc"], "type": "ok", "f": "send", "node": "n1"},
                common
                | {
                    "queue_id": p.queue_id(r["q"]),
                    "queue_offset": r["off"],
                    "broker": p.broker(r["q"]),
                    "status": "SEND_OK",
                },
            )
        )
    return pa.concat_tables(tables) if tables else None


def _drain(p: _Plan, keys: _Strings, brokers: _Strings) -> Iterator[Any]:
    """The final drain: each queue from offset 0 to its end, DRAIN_CHUNK messages per op."""
    B, Q = p.B, p.Q
    removed = {p.value(b, j) for b, j in p.lost_write}
    replace = {
        p.value(b, j): w for (b, j), w in zip(p.inconsistent, p.inconsistent_values, strict=True)
    }
    swap: dict[int, int] = {}
    for b, j in p.ordering:
        v1, v2 = p.value(b, j), p.value(b, j + p.s.keys_per_queue)
        swap[v1], swap[v2] = v2, v1
    ordn = 0
    for q in range(Q):
        # the bench asks each queue for its min and max offset before reading it
        bounds = []
        for k, (detail, off) in enumerate((("min", 0), ("max", int(p.qlen[q])))):
            where = {"topic": TOPIC, "queue_id": p.queue_id(q), "broker": p.broker(q)}
            for t in ("invoke", "ok"):
                bounds.append(
                    _rows(
                        1,
                        np.array([ordn + 2 * k + (t == "ok")]),
                        np.zeros(1, np.int8),
                        {"process": DRAIN_PROCESS, "type": t, "f": "offsets"},
                        where | {"detail": detail} | ({"offset": off} if t == "ok" else {}),
                    )
                )
        ordn += 4
        yield pa.concat_tables(bounds)
        qblocks = np.arange(q, p.nblocks, Q)
        qblocks = qblocks[p.ok[qblocks]]
        step = max(1, (1 << 20) // B)
        for c0 in range(0, len(qblocks), step):
            cb = qblocks[c0 : c0 + step]
            vals = (cb[:, None] * B + np.arange(B)).ravel()
            offs = (p.ok_rank[cb][:, None] * B + np.arange(B)).ravel()
            keyv = vals.copy()  # value whose key the message carries
            orig = vals.copy()
            drop = np.zeros(len(vals), bool)
            lo, hi = int(cb[0]) * B, int(cb[-1]) * B + B
            for v in removed | set(swap):
                if not lo <= v < hi:
                    continue
                hit = np.flatnonzero(orig == v)
                if not len(hit):
                    continue
                i = int(hit[0])
                if v in removed:
                    drop[i] = True
                elif v in swap:
                    vals[i] = keyv[i] = swap[v]
            kid = p.key_id(q, keyv % B).astype(np.int64)
            key_arr = keys.take(kid)
            kmask = np.isin(orig, np.array(list(replace), dtype=np.int64))
            if kmask.any():
                for i in np.flatnonzero(kmask).tolist():
                    vals[i] = replace[int(orig[i])]
                key_arr = pa.array(
                    _pick(kmask, None, np.asarray(key_arr.to_pylist(), dtype=object)),
                    pa.string(),
                )
            keep = ~drop
            vals, offs = vals[keep], offs[keep]
            key_arr = key_arr.filter(pa.array(keep))
            m = len(vals)
            nops = (m + DRAIN_CHUNK - 1) // DRAIN_CHUNK
            counts = np.full(nops, DRAIN_CHUNK, np.int64)
            if nops:
                counts[-1] = m - DRAIN_CHUNK * (nops - 1)
            msgs = _messages(
                counts,
                TOPIC,
                p.queue_id(q),
                pa.array(offs, pa.int64()),
                pa.array(vals, pa.int64()),
                key_arr,
                p.broker(q),
            )
            ords = ordn + 2 * np.arange(nops)
            ordn += 2 * nops
            yield pa.concat_tables(
                [
                    _rows(
                        nops,
                        ords,
                        np.zeros(nops, np.int8),
                        {"process": DRAIN_PROCESS, "type": "invoke", "f": "drain"},
                        {"topic": TOPIC, "group": DRAIN_GROUP},
                    ),
                    _rows(
                        nops,
                        ords + 1,
                        np.zeros(nops, np.int8),
                        {"process": DRAIN_PROCESS, "type": "ok", "f": "drain", "node": "n1"},
                        {"topic": TOPIC, "group": DRAIN_GROUP, "messages": msgs},
                    ),
                ]
            )


def _extras_post_drain(p: _Plan) -> Any:
    a = p.s.anomalies
    tables = []
    o = 0

    def op(proc: int, f: str, val: dict[str, Any], ok_val: dict[str, Any]) -> None:
        nonlocal o
        tables.append(_rows(1, [o], [0], {"process": proc, "type": "invoke", "f": f}, val))
        tables.append(
            _rows(
                1, [o + 1], [0], {"process": proc, "type": "ok", "f": f, "node": "n1"}, val | ok_val
            )
        )
        o += 2

    def one(topic: str, q_id: int, off: int, v: int, key: str | None, broker: str) -> Any:
        return _messages(np.array([1]), topic, q_id, [off], [v], [key], broker)

    def kname(b: int, j: int) -> str:
        return f"k{p.key_id(b % p.Q, j)}"

    for i in range(a.unexpected):
        op(
            1000 + i,
            "poll",
            {"topic": TOPIC, "group": GROUP},
            {"messages": one("T-x", 0, i, -(i + 1), None, "broker-0")},
        )
    for i, (b, j) in enumerate(p.dup_redeliver):
        q = b % p.Q
        op(
            2000 + i,
            "poll",
            {"topic": TOPIC, "group": GROUP},
            {
                "messages": one(
                    TOPIC, p.queue_id(q), p.offset(b, j), p.value(b, j), kname(b, j), p.broker(q)
                )
            },
        )
    for i, (b, j) in enumerate(p.dup_offset):
        op(
            3000 + i,
            "drain",
            {"topic": TOPIC, "group": DRAIN_GROUP},
            {"messages": one("T-d", 0, i, p.value(b, j), kname(b, j), "broker-0")},
        )
    for i in range(a.epoch_backwards):
        for ep, m in ((5, "n1"), (4, "n2")):
            op(METADATA_PROCESS, "metadata", {"broker": f"mb-{i}"}, {"master": m, "epoch": ep})
    for i in range(a.two_masters):
        for m in ("n1", "n2"):
            op(METADATA_PROCESS, "metadata", {"broker": f"mm-{i}"}, {"master": m, "epoch": 3})
    return pa.concat_tables(tables) if tables else None


class _Writer:
    """Assigns index and time_ns in order and writes Parquet or JSONL."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.index = 0
        self.time = T0_NS
        self.ops = 0
        self.reads = 0
        self.sends = 0
        self.pq: Any = None
        self.jsonl: Any = None
        if path.suffix == ".parquet":
            self.pq = pq.ParquetWriter(str(path), SCHEMA, compression="snappy")
        else:
            self.jsonl = open(path, "w", encoding="utf-8")

    def write(self, t: Any) -> None:
        if t is None or t.num_rows == 0:
            return
        t = t.sort_by("ord")
        n = t.num_rows
        dt = np.asarray(DT_NS, dtype=np.int64)[t.column("dtc").to_numpy().astype(np.int64)]
        times = self.time + np.cumsum(dt)
        self.time = int(times[-1])
        idx = np.arange(self.index, self.index + n, dtype=np.int64)
        self.index += n
        t = t.set_column(0, "index", pa.array(idx)).set_column(1, "time_ns", pa.array(times))
        t = t.drop_columns(["ord", "dtc"])
        self.ops += n
        fcol = t.column("f").to_numpy(zero_copy_only=False)
        tcol = t.column("type").to_numpy(zero_copy_only=False)
        self.sends += int(((fcol == "send") & (tcol == "invoke")).sum())
        if self.pq is not None:
            self.pq.write_table(t, row_group_size=1 << 20)
        else:
            for row in t.to_pylist():
                self.jsonl.write(json.dumps(_prune(row), separators=(",", ":")))
                self.jsonl.write("\n")

    def close(self) -> None:
        if self.pq is not None:
            self.pq.close()
        if self.jsonl is not None:
            self.jsonl.close()


def _prune(row: dict[str, Any]) -> dict[str, Any]:
    """JSONL like rmq_ha.history writes it: value without null fields."""
    v = {k: x for k, x in row["value"].items() if x is not None}
    return row | {"value": v}


def generate(s: Synth, path: str | Path) -> Summary:
    """Write the history to ``path`` (``.parquet``, else JSONL) and say what it holds."""
    path = Path(path)
    p = _Plan(s)
    keys = _Strings([f"k{i}" for i in range(s.queues * s.keys_per_queue)])
    brokers = _Strings(["broker-0", "broker-1"])
    w = _Writer(path)
    try:
        for b0 in range(0, p.nblocks, s.chunk_blocks):
            w.write(_chunk(p, b0, min(p.nblocks, b0 + s.chunk_blocks), keys, brokers))
        w.write(_extras_pre_drain(p))
        for t in _drain(p, keys, brokers):
            w.write(t)
        w.write(_extras_post_drain(p))
    finally:
        w.close()
    return Summary(
        ops=w.ops,
        sends=w.sends,
        reads=0,
        expected=expected(s.anomalies),
        fault_windows=len(p.fault_starts),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m rmq_check.synth RUN_DIR [--ops N] [--inject K]``: write a synthetic run."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m rmq_check.synth", description=main.__doc__)
    ap.add_argument("run_dir")
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--inject", type=int, default=0, help="how many of each anomaly")
    ap.add_argument("--format", choices=("parquet", "jsonl"), default="jsonl")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args(argv)
    d = Path(a.run_dir)
    d.mkdir(parents=True, exist_ok=True)
    anomalies = Anomalies(**{k: a.inject for k in Anomalies.__dataclass_fields__})
    s = generate(Synth(ops=a.ops, anomalies=anomalies, seed=a.seed), d / f"history.{a.format}")
    print(json.dumps({"ops": s.ops, "fault_windows": s.fault_windows, "expected": s.expected}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
