"""Every history line checked against the schema before any analysis, in Spark.

The rules are the data of ``rmq_ha.history`` (``OP_FIELDS``, ``REQUIRED_*``, ``VALUE_ENUMS``,
``ONLY_ON``, ...); the expressions below are built from those tables, so the bench's reader
(``rmq_ha.history.read``) and the checker apply the same rules (tests/spark/test_check_validate.py
runs every rule through both). No Python UDF: each line gets its first problem as a SQL
expression, the invoke / completion pairing per process is a window over the client ops, and
only the first few problems come back to the driver. There, for a JSONL line that did not
parse against the schema, ``rmq_ha.history`` explains what is wrong with it.

Lines are numbered without a driver-side scan: a JSONL file is read as text with each row's
split (``_metadata.file_block_start``) and its id within the partition; the number of a bad
line is the count of lines in the splits before it plus its place in its split (one small
aggregate, run only when something is wrong). Parquet rows carry ``_metadata.row_index``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window
from rmq_check.core import topic_hash, word, word_distinct

from rmq_ha import history as h

#: Repeated keys joined back to the ops by broadcast up to this many.
BROADCAST_LIMIT = 1_000_000
#: Problems brought back to the driver (the first in file order is the one reported).
SHOWN = 5
#: Columns the loader adds beside the schema's (see ``rmq_check.load``).
POS = "_pos"  # struct<file: string, split: bigint, row: bigint>: orders rows like the file
RAW = "_raw"  # the line's text (JSONL)
CORRUPT = "_corrupt"  # the line did not parse against the schema, or is not UTF-8 (JSONL)
UTF8 = "_utf8"  # the line's bytes are valid UTF-8 (JSONL; Spark reads others with U+FFFD)
EXTRA = "_extra"  # unknown JSON fields of the line, its value, or a message ("" if none)
DUP = "_dup"  # where the line names a JSON field twice (the op, value, a message; "" if none)


@dataclass(frozen=True)
class Problem:
    where: str  # "FILE:LINE" or "FILE row N"
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


class HistoryInvalid(Exception):
    """The history breaks the schema; ``problems`` are the first ones in file order."""

    def __init__(self, problems: list[Problem], total: int) -> None:
        self.problems = problems
        self.total = total
        more = f" (and {total - 1} more bad lines)" if total > 1 else ""
        super().__init__(f"{problems[0]}{more}" if problems else "invalid history")


def _lits(xs: tuple[str, ...]) -> str:
    return ", ".join(xs)


def _msg(fmt: str, *cols: Column) -> Column:
    return F.format_string(fmt, *cols)


def line_rules(has_raw: bool) -> list[tuple[Column, Column]]:
    """(condition, message) per rule, in the order ``rmq_ha.history`` checks them; the first
    that holds is the line's problem. Conditions may be null (a null field): then a required
    rule earlier names it."""
    c = F.col

    def v(name: str) -> Column:
        return c("value").getField(name)

    out: list[tuple[Column, Column]] = []
    if has_raw:
        out.append((~c(UTF8), F.lit("is not valid UTF-8 text")))
        out.append((c(CORRUPT), F.lit("does not parse against the history schema")))
        out.append((c(DUP) != F.lit(""), _msg("has a field twice (in %s): ambiguous JSON", c(DUP))))
        out.append(
            (c(EXTRA) != F.lit(""), _msg("has unknown fields %s", c(EXTRA))),
        )
    for name in h.REQUIRED_OP_FIELDS:
        out.append((c(name).isNull(), F.lit(f"{name} is missing")))
    # messages: every element carries its required fields. messages.<field> is the array of
    # that field (null for a null message too); a null in it is found by intersecting with
    # [null], which is generated code (a lambda, e.g. exists(), is interpreted per message
    # and was the largest single cost of the whole check at 20M ops)
    read_types = dict(h.READ_FIELDS)
    bad_msg = reduce(
        lambda a, b: a | b,
        [
            F.size(
                F.array_intersect(
                    v("messages").getField(r), F.array(F.lit(None).cast(read_types[r]))
                )
            )
            > 0
            for r in h.REQUIRED_READ_FIELDS
        ],
    )
    out.append(
        (
            bad_msg,
            F.lit("value.messages: a message without " + " / ".join(h.REQUIRED_READ_FIELDS)),
        )
    )
    # a list of strings holding a null (JSON's [null] parses as array<string>)
    for name, t in h.VALUE_FIELD_TYPES:
        if t == "array<string>":
            arr = v(name)
            out.append(
                (
                    F.size(F.array_compact(arr)) < F.size(arr),
                    F.lit(f"value.{name}: expected a list of strings, got a null in it"),
                )
            )
    pre = _msg("op %d: ", c("index"))
    out.append(
        (
            ~c("type").isin(*h.TYPES),
            F.concat(pre, _msg(f"type '%s' is not one of ({_lits(h.TYPES)})", c("type"))),
        )
    )
    for name in h.NON_NEGATIVE:
        out.append((c(name) < 0, F.concat(pre, _msg(f"{name} %d is negative", c(name)))))
    out.append(
        (
            c("index") > h.MAX_INDEX,
            F.concat(pre, _msg(f"index %d is above {h.MAX_INDEX} (2^43 - 1)", c("index"))),
        )
    )
    out.append(
        (
            F.size(v("messages")) > h.MAX_MESSAGES,
            F.concat(
                pre,
                _msg(
                    f"value.messages holds %d messages, more than {h.MAX_MESSAGES} in one op",
                    F.size(v("messages")),
                ),
            ),
        )
    )
    nem = c("process") == h.NEMESIS_PROCESS
    out.append(
        (
            nem & ~c("f").isin(*h.NEMESIS_FS),
            F.concat(pre, _msg(f"nemesis f '%s' is not one of ({_lits(h.NEMESIS_FS)})", c("f"))),
        )
    )
    out.append(
        (
            nem & (c("type") != "info"),
            F.concat(pre, _msg("nemesis type '%s' is not 'info'", c("type"))),
        )
    )
    out.append(
        (
            c("process") < h.NEMESIS_PROCESS,
            F.concat(pre, _msg("process %d is negative (only the nemesis is -1)", c("process"))),
        )
    )
    out.append(
        (
            (c("process") >= 0) & ~c("f").isin(*h.CLIENT_FS),
            F.concat(pre, _msg(f"f '%s' is not one of ({_lits(h.CLIENT_FS)})", c("f"))),
        )
    )
    for name, fs in h.ONLY_ON.items():
        out.append(
            (
                v(name).isNotNull() & ~c("f").isin(*fs),
                F.concat(pre, F.lit(f"only {' / '.join(fs)} carries {name}")),
            )
        )
    out.append(
        (
            (c("type") == "fail") & (c("definite") == F.lit(False)),
            F.concat(pre, F.lit("a fail is definite by definition")),
        )
    )
    out.append(
        (
            (c("type") == "info") & (c("definite") == F.lit(True)),
            F.concat(
                pre, F.lit("an info is indefinite by definition (a definite failure is a fail)")
            ),
        )
    )
    for (f, t), names in h.REQUIRED_VALUE_FIELDS.items():
        applies = (c("f") == f) & (F.lit(True) if t == "*" else (c("type") == t))
        for name in names:
            out.append(
                (
                    applies & v(name).isNull(),
                    F.concat(pre, _msg(f"{f} %s without value.{name}", c("type"))),
                )
            )
    for (f, name), allowed in h.VALUE_ENUMS.items():
        applies = F.lit(True) if f == "*" else (c("f") == f)
        out.append(
            (
                applies & v(name).isNotNull() & ~v(name).isin(*allowed),
                F.concat(pre, _msg(f"{name} '%s' is not one of ({_lits(allowed)})", v(name))),
            )
        )
    return out


def line_problem(has_raw: bool) -> Column:
    return F.coalesce(*[F.when(cond, msg) for cond, msg in line_rules(has_raw)])


def line_is_bad(has_raw: bool) -> Column:
    """Whether any rule holds: the cheap filter run on every line (booleans only, so it
    compiles to one small generated method); messages are built for bad lines only."""
    conds = [F.coalesce(cond, F.lit(False)) for cond, _ in line_rules(has_raw)]
    return reduce(lambda a, b: a | b, conds)


def pairing_problems(ops: DataFrame, one_file: str | None = None) -> DataFrame:
    """Rows (pos, index, problem) for client ops that break invoke / completion pairing
    (``rmq_ha.history.pairing_error``): per process, in index order, ops alternate invoke
    and completion of the same f, in the file in that order, with no index twice.

    This is a sort of every client op by (process, index), the costliest part of the
    validation; when every row comes from ``one_file`` (that file's name as the rows carry
    it), the position travels as its two numbers instead of the struct with the file name.
    Several files keep the struct (files are ordered by name)."""
    c = F.col
    # sorted by index alone (a long); the file order is compared, not sorted by
    w = Window.partitionBy("process").orderBy("index")
    if one_file is not None:
        here = [c(POS)["split"].alias("_split"), c(POS)["row"].alias("_row")]
    else:
        here = [c(POS)]
    client = (c("process") >= 0) & c("index").isNotNull()
    if CORRUPT in ops.columns:  # a line that did not parse takes no part (its own problem)
        client = client & ~F.coalesce(c(CORRUPT), F.lit(False))
    # what a completion must say as its invoke did (rmq_ha.history.PAIRED_VALUE_FIELDS): the
    # value, and the topic as a hash (a long sorts cheaper than a string)
    assert h.PAIRED_VALUE_FIELDS == ("value", "topic")
    o = ops.where(client).select(
        "process",
        "index",
        "type",
        "f",
        *here,
        c("value.value").alias("_v"),
        topic_hash(c("value.topic")).alias("_th"),
        "time_ns",
    )
    o = o.select(
        "*",
        F.lag("time_ns").over(w).alias("ptime"),
        F.lag("type").over(w).alias("ptype"),
        F.lag("f").over(w).alias("pf"),
        F.lag("index").over(w).alias("pindex"),
        F.lag("_v").over(w).alias("pv"),
        F.lag("_th").over(w).alias("pth"),
        *(
            [F.lag("_split").over(w).alias("psplit"), F.lag("_row").over(w).alias("prow")]
            if one_file is not None
            else [F.lag(POS).over(w).alias("ppos")]
        ),
    )
    if one_file is not None:
        after = (c("psplit") > c("_split")) | (
            (c("psplit") == c("_split")) & (c("prow") > c("_row"))
        )
        pos = F.struct(
            F.lit(one_file).alias("file"), c("_split").alias("split"), c("_row").alias("row")
        )
    else:
        after = c("ppos") > c(POS)
        pos = c(POS)
    pre = _msg("op %d: process %d: ", c("index"), c("process"))
    inv = c("type") == "invoke"
    rules = [
        (
            c("pindex") == c("index"),
            _msg("index %d appears twice for the process", c("index")),
        ),
        (
            after,
            _msg(
                "index %d does not follow the process's previous op (index %d) in the file",
                c("index"),
                c("pindex"),
            ),
        ),
        (
            ~inv & (c("ptype") == "invoke") & (c("time_ns") < c("ptime")),
            _msg(
                "%s of %s at time_ns %d is before its invoke (index %d, time_ns %d)",
                c("type"),
                c("f"),
                c("time_ns"),
                c("pindex"),
                c("ptime"),
            ),
        ),
        (
            inv & (c("ptype") == "invoke"),
            _msg("invoke while its %s invoke (index %d) has not completed", c("pf"), c("pindex")),
        ),
        (
            ~inv & (c("ptype").isNull() | (c("ptype") != "invoke")),
            _msg("%s of %s without an invoke", c("type"), c("f")),
        ),
        (
            ~inv & (c("pf") != c("f")),
            _msg(
                "%s of %s completes a %s invoke (index %d)",
                c("type"),
                c("f"),
                c("pf"),
                c("pindex"),
            ),
        ),
        *[
            (
                ~inv & (c(mine) != c(theirs)),  # null (never true) unless both name it
                _msg(
                    f"%s of %s names another value.{name} than its invoke (index %d)",
                    c("type"),
                    c("f"),
                    c("pindex"),
                ),
            )
            for name, mine, theirs in (("value", "_v", "pv"), ("topic", "_th", "pth"))
        ],
    ]
    # filter on the conditions alone (booleans): the messages are formatted for bad ops only
    bad = reduce(lambda a, b: a | b, [F.coalesce(cond, F.lit(False)) for cond, _ in rules])
    why = F.coalesce(*[F.when(cond, msg) for cond, msg in rules])
    return o.where(bad).select(pos.alias(POS), "index", F.concat(pre, why).alias("problem"))


def _repeated(keys: DataFrame) -> DataFrame:
    """The keys (column ``k``, a long) of ``keys`` that occur more than once. One aggregation
    by word of 64 keys counts rows and distinct keys (``core.word_distinct``: the word's keys
    as the bits of one long; no shuffle of the rows); only words where they differ are
    grouped key by key."""
    c = F.col
    words = (
        keys.groupBy(word("k").alias("w"))
        .agg(F.count(F.lit(1)).alias("n"), word_distinct("k").alias("d"))
        .where(c("n") > c("d"))
        .select("w")
        .limit(1001)
        .collect()
    )
    if not words:
        return keys.where(F.lit(False)).select("k")
    suspect = keys
    if len(words) <= 1000:
        suspect = keys.where(word("k").isin(*[int(r["w"]) for r in words]))
    return suspect.groupBy("k").agg(F.count(F.lit(1)).alias("n")).where(c("n") > 1).select("k")


def uniqueness_problems(ops: DataFrame) -> DataFrame | None:
    """Rows (pos, index, problem) for ops whose index an earlier op (in file order) has, and
    for send invokes of a value an earlier send invoke has (``rmq_ha.history.Unique``, which
    refuses the later line too); None when there are none (the common case: two cheap
    aggregations, nothing more). Lines that did not parse take no part."""
    c = F.col
    if CORRUPT in ops.columns:
        ops = ops.where(~F.coalesce(c(CORRUPT), F.lit(False)))
    idx = ops.where(c("index").isNotNull()).select(POS, "index", c("index").alias("k"))
    inv = ops.where(
        (c("f") == "send") & (c("type") == "invoke") & c("value.value").isNotNull()
    ).select(POS, "index", c("value.value").alias("k"))
    out: list[DataFrame] = []
    for rows, problem in (
        (idx, _msg("op %d: index %d appears twice in the history", c("index"), c("k"))),
        (inv, _msg("op %d: value %d is sent twice (values are unique)", c("index"), c("k"))),
    ):
        dup = _repeated(rows.select("k"))
        n = dup.count()
        if not n:
            continue
        # every occurrence after the first in file order is a problem line
        hit = rows.join(F.broadcast(dup) if n <= BROADCAST_LIMIT else dup, "k", "left_semi")
        first = Window.partitionBy("k").orderBy(POS)
        out.append(
            hit.select("*", F.row_number().over(first).alias("_nth"))
            .where(c("_nth") > 1)
            .select(POS, "index", problem.alias("problem"))
        )
    return reduce(DataFrame.unionByName, out) if out else None


def check(ops: DataFrame, name: str = "history") -> None:
    """Raise HistoryInvalid naming the first problems (file and line) of ``ops``, a history
    loaded by ``rmq_check.load.load``; return if every line follows the schema."""
    cols = set(ops.columns)
    one_file: str | None = name
    if POS not in cols:  # a DataFrame built elsewhere: order by index
        ops = ops.withColumn(
            POS,
            F.struct(
                F.lit(name).alias("file"),
                F.lit(0).cast("long").alias("split"),
                F.col("index").alias("row"),
            ),
        )
    else:
        one_file = _single_file(ops)
    has_raw = RAW in cols
    raw = F.col(RAW) if has_raw else F.lit(None).cast("string")
    lines = ops.where(line_is_bad(has_raw)).select(
        POS, F.lit(0).alias("kind"), line_problem(has_raw).alias("problem"), raw.alias("raw")
    )
    pairs = pairing_problems(ops, one_file).select(
        POS, F.lit(1).alias("kind"), "problem", F.lit(None).cast("string").alias("raw")
    )
    bad = lines.unionByName(pairs)
    uniq = uniqueness_problems(ops)
    if uniq is not None:
        bad = bad.unionByName(
            uniq.select(
                POS, F.lit(2).alias("kind"), "problem", F.lit(None).cast("string").alias("raw")
            )
        )
    # a count first: it needs only the rules' booleans (the messages and the positions are
    # pruned from its plan), and a valid history, the common case, stops there; ordering the
    # bad lines by position costs about as much again
    if bad.count() == 0:
        return
    # the first problem of each of the first bad lines, in file order
    first: list[Any] = []
    for r in bad.orderBy(POS, "kind").limit(SHOWN * 2).collect():
        if not first or first[-1][POS] != r[POS]:
            first.append(r)
    first = first[:SHOWN]
    if not first:
        return
    total = bad.select(POS).distinct().count()
    where = _locate(ops, [r[POS] for r in first], has_raw)
    probs: list[Problem] = []
    for r, loc in zip(first, where, strict=True):
        what = r["problem"]
        if r["raw"] is not None:  # a JSONL line: rmq_ha.history says what is wrong with it
            what = explain(r["raw"]) or what
        probs.append(Problem(loc, what))
    raise HistoryInvalid(probs, total)


def _single_file(ops: DataFrame) -> str | None:
    """The file name every row's position carries, when the history is one file (its
    usual shape); None for several files, or rows that are not read from files."""
    try:
        files = ops.inputFiles()
    except Exception:  # a plan with no file relation to list
        return None
    if len(files) != 1:
        return None
    first = ops.select(F.col(POS)["file"].alias("file")).limit(1).collect()
    return str(first[0]["file"]) if first and first[0]["file"] is not None else None


def explain(raw: str) -> str:
    """What ``rmq_ha.history`` says is wrong with a line ("" if it finds nothing)."""
    text = raw.rstrip("\r\n")
    try:
        d = json.loads(text)
    except ValueError as e:
        short = text if len(text) <= 80 else text[:77] + "..."
        return f"not JSON ({e}): {short}"
    try:
        h.Op.from_json(d)
    except (h.HistoryError, TypeError) as e:
        return str(e)
    return ""


def _locate(ops: DataFrame, positions: list[Any], has_raw: bool) -> list[str]:
    """'FILE:LINE' (JSONL) or 'FILE row N' (Parquet) for each position."""
    if not positions:
        return []
    if not has_raw:
        return [f"{_short(p['file'])} row {p['row'] + 1}" for p in positions]
    from rmq_check.load import text_lines

    # the lines in each split of the file before it, then the row's place in its split; the
    # file is read again exactly as the loader read it (blank lines included)
    before: dict[tuple[str, int], tuple[int, int]] = {}
    for f in sorted({p["file"] for p in positions}):
        t = text_lines(ops.sparkSession, f)
        splits = (
            t.groupBy(F.col(POS)["split"].alias("split"))
            .agg(F.count(F.lit(1)).alias("n"), F.min(F.col(POS)["row"]).alias("row0"))
            .collect()
        )
        acc = 0
        for s in sorted(splits, key=lambda s: s["split"]):
            before[(f, s["split"])] = (acc, s["row0"])
            acc += s["n"]
    out = []
    for p in positions:
        acc, row0 = before.get((p["file"], p["split"]), (0, p["row"]))
        out.append(f"{_short(p['file'])}:{acc + p['row'] - row0 + 1}")
    return out


def _short(path: str) -> str:
    return path[len("file:") :] if path.startswith("file:") else path
