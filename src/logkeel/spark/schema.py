"""The columns of Spark's built-in Kafka connector, and Arrow batches built to match them.

Python data sources may hand Spark `pyarrow.RecordBatch`es instead of tuples; Spark then skips
its per-row conversion, which is most of the cost of reading. The batch's Arrow schema must equal
the one Spark derives from the data source schema, so it is derived the same way here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

Headers = Sequence[tuple[str, bytes | None]] | None

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)

# Spark's KafkaRecordToRowConverter: every column nullable, headers only with includeHeaders.
_KAFKA_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]

# What the segment reader adds: where a row lives on disk and the metadata of its batch.
SEGMENT_FIELDS = [
    StructField("logDir", StringType()),
    StructField("segment", StringType()),
    StructField("position", LongType()),
    StructField("baseOffset", LongType()),
    StructField("lastOffset", LongType()),
    StructField("leaderEpoch", IntegerType()),
    StructField("producerId", LongType()),
    StructField("producerEpoch", IntegerType()),
    StructField("baseSequence", IntegerType()),
    StructField("isTransactional", BooleanType()),
    StructField("isControl", BooleanType()),
    StructField("compression", StringType()),
    StructField("crcValid", BooleanType()),
    StructField("corrupt", BooleanType()),
    StructField("corruptBytes", LongType()),
    StructField("corruptReason", StringType()),
]


def kafka_schema(include_headers: bool = False) -> StructType:
    fields = list(_KAFKA_FIELDS)
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def segment_schema(include_headers: bool = False) -> StructType:
    return StructType(list(kafka_schema(include_headers).fields) + SEGMENT_FIELDS)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark checks a data source's batches against."""
    return to_arrow_schema(schema, timezone="UTC")


def batch_from_columns(schema: pa.Schema, columns: dict[str, list[Any]]) -> pa.RecordBatch:
    """A RecordBatch of ``schema`` from Python lists keyed by column name.

    Timestamp columns hold epoch milliseconds (Kafka's unit) and are converted to Spark's
    microseconds here; columns missing from ``columns`` are all null.
    """
    n = max((len(v) for v in columns.values()), default=0)
    arrays = []
    for field in schema:
        values = columns.get(field.name)
        if values is None:
            arrays.append(pa.nulls(n, field.type))
        elif pa.types.is_timestamp(field.type):
            millis = pa.array(values, pa.int64())
            arrays.append(pc.multiply(millis, 1000).cast(field.type))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
