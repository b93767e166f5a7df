"""Spark session and history loading with the shared explicit schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from rmq_check.validate import CORRUPT, DUP, EXTRA, POS, RAW, UTF8

from rmq_ha import history as h
from rmq_ha.history import SPARK_DDL

HISTORY_NAMES = ("history.parquet", "history.jsonl", "history.json")


def session(
    master: str = "local[2]",
    *,
    shuffle_partitions: int = 8,
    driver_memory: str = "4g",
    app: str = "rmq-check",
    extra: dict[str, str] | None = None,
) -> Any:
    """A SparkSession (created, or the active one reused) tuned for history checking."""
    b = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # No adaptive query execution (Spark's default is on). With it, building a cached
        # frame ran a nested adaptive plan that now and then waited for ever for a stage
        # event that never came (a count() inside CachedRDDBuilder parked in
        # AdaptiveSparkPlanExec.withFinalPlanUpdate, no task running; the test's timeout then
        # hung in unpersist, and every later check in that JVM failed). AQE was a bystander:
        # with it off the same hang came back, and a jstack showed the DAG scheduler blocked
        # in PythonAccumulatorV2.merge, which only Python tasks reach; a check runs none now
        # (core.empty_frame). AQE stays off until a measured run shows it safe again. Cost
        # measured at 2M ops: 58 s -> 64 s for the whole check (one run each, idle machine);
        # `--conf spark.sql.adaptive.enabled=true` sets it back.
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.optimizer.canChangeCachedPlanOutputPartitioning", "false")
        # the value-level aggregation is the one big shuffle; keep its output partitions even
        .config("spark.sql.adaptive.coalescePartitions.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "false")
        # the cached per-value frame is built once and scanned a few times: compressing it
        # cost more than the scans saved (measured at 20M ops: 45 s -> 30 s to build)
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        .config("spark.driver.extraJavaOptions", "-XX:+UseParallelGC")
    )
    if master.startswith(("spark://127.0.0.1", "spark://localhost")):
        # a cluster on loopback (make spark-cluster): executors reach the driver there too
        b = b.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for k, v in (extra or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def find_history(path: str | Path) -> Path:
    """The history file (or Parquet directory) of a run directory, or ``path`` itself."""
    p = Path(path)
    if p.is_dir() and p.name in HISTORY_NAMES:
        return p  # a history written as a directory of parts (history.jsonl/part-*.jsonl)
    if p.is_dir():
        for name in HISTORY_NAMES:
            if (p / name).exists():
                return p / name
        if any(p.glob("*.parquet")):
            return p
        raise FileNotFoundError(f"{p}: no {' or '.join(HISTORY_NAMES)}")
    if not p.exists():
        raise FileNotFoundError(str(p))
    return p


def text_lines(spark: Any, path: str | Path) -> DataFrame:
    """A text file's lines with their position (``validate.POS``): its split and its id in
    the partition, which orders rows like the file and lets a bad line be numbered."""
    t: DataFrame = spark.read.text(str(path))
    return t.select(
        F.col("value").alias("line"),
        F.struct(
            F.col("_metadata.file_path").alias("file"),
            F.col("_metadata.file_block_start").alias("split"),
            F.monotonically_increasing_id().alias("row"),
        ).alias(POS),
    )


def _names(fields: tuple[tuple[str, str], ...]) -> Column:
    return F.array(*[F.lit(n) for n, _ in fields])


def _unknown_keys(line: Column) -> Column:
    """The JSON keys of a line, its value and its messages that the schema does not know,
    as "[a, value.b]" ("" when there are none)."""
    empty = F.array().cast("array<string>")

    def keys(js: Column) -> Column:
        return F.coalesce(F.json_object_keys(js), empty)

    top = F.array_except(keys(line), _names(h.OP_FIELDS))
    val = F.array_except(keys(F.get_json_object(line, "$.value")), _names(h.VALUE_FIELD_TYPES))
    msgs = F.from_json(F.get_json_object(line, "$.value.messages"), "array<map<string,string>>")
    msg_keys = F.coalesce(F.flatten(F.transform(msgs, lambda m: F.map_keys(m))), empty)
    per_msg = F.array_except(msg_keys, _names(h.READ_FIELDS))
    bad = F.concat(
        top,
        F.transform(val, lambda k: F.concat(F.lit("value."), k)),
        F.transform(per_msg, lambda k: F.concat(F.lit("value.messages[]."), k)),
    )
    return F.when(
        F.size(bad) > 0, F.concat(F.lit("["), F.array_join(bad, ", "), F.lit("]"))
    ).otherwise(F.lit(""))


def _duplicate_keys(line: Column) -> Column:
    """Where the line names a JSON field twice ("the op", "value", "value.messages[]", comma
    separated; "" when nowhere). Spark's reader keeps one of them and Python's json module
    the last: the line is ambiguous, and both readers refuse it. ``json_object_keys`` lists
    an object's keys as written, duplicates included."""

    def twice(keys: Column) -> Column:
        return F.coalesce(F.size(keys) != F.size(F.array_distinct(keys)), F.lit(False))

    # each message as its JSON text (a string-typed array element keeps the object's text)
    msgs = F.from_json(F.get_json_object(line, "$.value.messages"), "array<string>")
    per_msg = F.transform(msgs, lambda m: F.json_object_keys(m))
    in_msg = F.coalesce(F.exists(per_msg, twice), F.lit(False))
    return F.concat_ws(
        ", ",
        F.when(twice(F.json_object_keys(line)), F.lit("the op")),
        F.when(twice(F.json_object_keys(F.get_json_object(line, "$.value"))), F.lit("value")),
        F.when(in_msg, F.lit("value.messages[]")),
    )


def load(spark: Any, path: str | Path) -> DataFrame:
    """The history as a DataFrame with the columns of ``rmq_ha.history.SPARK_DDL`` plus the
    position of each row (``validate.POS``) and, for JSONL, the line's text (``validate.RAW``),
    whether it parsed against the schema (``validate.CORRUPT``), its unknown fields
    (``validate.EXTRA``) and where it names a field twice (``validate.DUP``).

    Nothing fails here: ``rmq_check.validate.check`` names every problem with its file and
    line before any analysis. Parquet is read with the schema (columns the file lacks come
    back null; a column the schema does not know, or of another type, is a problem)."""
    from rmq_check.validate import HistoryInvalid, Problem

    p = find_history(path)
    is_parquet = p.suffix == ".parquet" or (p.is_dir() and any(p.glob("*.parquet")))
    if is_parquet:
        probs = _parquet_schema_problems(spark, p)
        if probs:
            raise HistoryInvalid([Problem(str(p), x) for x in probs[:5]], len(probs))
        df: DataFrame = spark.read.schema(SPARK_DDL).parquet(str(p))
        return df.select(
            *[F.col(n) for n, _ in h.OP_FIELDS],
            F.struct(
                F.col("_metadata.file_path").alias("file"),
                F.lit(0).cast("long").alias("split"),
                F.col("_metadata.row_index").alias("row"),
            ).alias(POS),
        )
    # blank lines (rmq_ha.history.BLANK only, as its reader skips them) take no part
    blank = "[" + "".join(f"\\u{ord(ch):04x}" for ch in h.BLANK) + "]"
    t = text_lines(spark, p).where(F.regexp_replace(F.col("line"), blank, "") != "")
    j = F.from_json(
        F.col("line"),
        SPARK_DDL + ", _corrupt_record string",
        {
            "mode": "PERMISSIVE",
            "columnNameOfCorruptRecord": "_corrupt_record",
            # strict JSON, as Python's json module reads it (Jackson allows both by default)
            "allowSingleQuotes": "false",
            "allowNonNumericNumbers": "false",
        },
    )
    # bytes that are not UTF-8 are read as U+FFFD: two such topics would be one
    t = t.select(j.alias("j"), "line", POS, F.is_valid_utf8(F.col("line")).alias(UTF8))
    return t.select(
        *[F.col("j." + n).alias(n) for n, _ in h.OP_FIELDS],
        POS,
        F.col("line").alias(RAW),
        UTF8,
        (
            F.col("j._corrupt_record").isNotNull() | ~one_json_value(F.col("line")) | ~F.col(UTF8)
        ).alias(CORRUPT),
        _unknown_keys(F.col("line")).alias(EXTRA),
        _duplicate_keys(F.col("line")).alias(DUP),
    )


def one_json_value(line: Column) -> Column:
    """Whether the line is exactly one JSON value (and whitespace).

    from_json reads the first value of a line and ignores what follows it, so a line holding
    two ops ('{...}{...}', the second a send's fail) or trailing text would pass with the
    rest dropped. Spark's JSON functions all stop after the first value; so the line is put
    in two arrays: '[' line ']' must hold exactly one element and '[' line ',0]' exactly two.
    Text after the first value is then either invalid inside both arrays, or closes the
    array early (a ']' of its own) and both arrays count the same elements."""
    one = F.json_array_length(F.concat(F.lit("["), line, F.lit("]")))
    two = F.json_array_length(F.concat(F.lit("["), line, F.lit(",0]")))
    return F.coalesce((one == 1) & (two == 2), F.lit(False))


def _parquet_schema_problems(spark: Any, p: Path) -> list[str]:
    from pyspark.sql.types import StructType

    want = StructType.fromDDL(SPARK_DDL)
    # every part on its own: Spark's schema of a directory is one part's footer, so a part
    # with another type (a Java stack trace at the first read) or an extra column went unseen;
    # and every file Spark reads (all but hidden ones, '.' or '_' first), not only *.parquet
    parts = (
        sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith((".", "_")))
        if p.is_dir()
        else [p]
    )
    out: list[str] = []
    for part in parts:
        n = len(out)
        if not _is_parquet(part):
            out.append(f"{part.name if p.is_dir() else part}: not a Parquet file")
            continue
        _schema_problems(want, spark.read.parquet(str(part)).schema, out)
        if p.is_dir():
            out[n:] = [f"{part.name}: {x}" for x in out[n:]]
    return out


def _is_parquet(path: Path) -> bool:
    """Parquet's magic ("PAR1") at both ends: anything else fails deep in Spark's reader."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(0, 2)
            if f.tell() < 12:
                return False
            f.seek(-4, 2)
            return head == b"PAR1" and f.read(4) == b"PAR1"
    except OSError:
        return False


def _schema_problems(want: Any, have: Any, out: list[str]) -> None:
    from pyspark.sql.types import ArrayType, DataType, StructType

    def walk(w: DataType, g: DataType, where: str) -> None:
        if isinstance(w, StructType) and isinstance(g, StructType):
            known = {f.name: f.dataType for f in w.fields}
            for f in g.fields:
                if f.name not in known:
                    out.append(f"column {where}{f.name} is not in the history schema")
                else:
                    walk(known[f.name], f.dataType, f"{where}{f.name}.")
        elif isinstance(w, ArrayType) and isinstance(g, ArrayType):
            walk(w.elementType, g.elementType, where)
        elif w != g:
            out.append(
                f"column {where.rstrip('.')} is {g.simpleString()}, the schema says "
                f"{w.simpleString()}"
            )

    walk(want, have, "")
