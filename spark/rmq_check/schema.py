"""The history schema as Arrow types, kept equal to ``rmq_ha.history.SPARK_DDL``.

The Spark side reads with ``SPARK_DDL`` itself; this module only serves writers that build
Parquet directly (the synthetic generator), and a test checks that both spell the same schema.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from rmq_ha import history

#: The one schema, from ``rmq_ha.history`` (shared with the bench's Parquet export).
SCHEMA: Any = history.arrow_schema()
VALUE_TYPE: Any = SCHEMA.field("value").type
READ_TYPE: Any = VALUE_TYPE.field("messages").type.value_type
VALUE_FIELDS: list[tuple[str, Any]] = [(f.name, f.type) for f in VALUE_TYPE]


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
