"""The history schema as Arrow types, kept equal to ``rmq_ha.history.SPARK_DDL``.

The Spark side reads with ``SPARK_DDL`` itself; this module only serves writers that build
Parquet directly (the synthetic generator), and a test checks that both spell the same schema.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

READ_TYPE: Any = pa.struct(
    [
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("value", pa.int64()),
        ("key", pa.string()),
        ("broker", pa.string()),
    ]
)

VALUE_FIELDS: list[tuple[str, Any]] = [
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("value", pa.int64()),
    ("key", pa.string()),
    ("broker", pa.string()),
    ("status", pa.string()),
    ("group", pa.string()),
    ("messages", pa.list_(READ_TYPE)),
    ("offset", pa.int64()),
    ("master", pa.string()),
    ("epoch", pa.int32()),
    ("fault", pa.string()),
    ("fault_id", pa.int32()),
    ("targets", pa.list_(pa.string())),
    ("detail", pa.string()),
]

VALUE_TYPE: Any = pa.struct(VALUE_FIELDS)

SCHEMA: Any = pa.schema(
    [
        ("index", pa.int64()),
        ("time_ns", pa.int64()),
        ("process", pa.int32()),
        ("node", pa.string()),
        ("type", pa.string()),
        ("f", pa.string()),
        ("value", VALUE_TYPE),
        ("error", pa.string()),
        ("definite", pa.bool_()),
    ]
)


def ddl_of(t: Any) -> str:
    """Spark DDL spelling of an Arrow type (the subset the schema uses)."""
    if pa.types.is_struct(t):
        inner = ",".join(
            f"{t.field(i).name}:{ddl_of(t.field(i).type)}" for i in range(t.num_fields)
        )
        return f"struct<{inner}>"
    if pa.types.is_list(t):
        return f"array<{ddl_of(t.value_type)}>"
    names = {
        pa.string(): "string",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.bool_(): "boolean",
    }
    return names[t]


def schema_ddl() -> str:
    return ", ".join(f"{f.name} {ddl_of(f.type)}" for f in SCHEMA)
