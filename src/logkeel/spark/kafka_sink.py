"""`df.write` / `df.writeStream` `.format("logkeel")`: rows into topics, as Spark's Kafka sink.

Columns: ``value`` (string or binary, required; null writes a tombstone), ``key`` (string or
binary), ``topic`` (string; the ``topic`` option overrides it), ``partition`` (int; null lets the
partitioner choose, by key hash like the Java client), ``headers``
(array<struct<key string, value binary>>); other columns are ignored. ``kafka.*`` options go to
the producer.

Each task writes through its own idempotent producer and waits for every acknowledgement before
it reports success, so retries inside a task never duplicate or reorder records. Like Spark's
Kafka sink this is at-least-once across task or micro-batch retries: a micro-batch re-run after a
crash writes its records again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from logkeel.spark import options as opts
from logkeel.spark.kafka_client import producer_config

FLUSH_TIMEOUT_S = 300.0
_PARTITION_ANY = -1  # librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose


@dataclass(frozen=True)
class KafkaCommitMessage(WriterCommitMessage):
    records: int


@dataclass(frozen=True, slots=True)
class SinkSettings:
    params: tuple[tuple[str, str], ...]
    topic: str | None
    has_key: bool
    has_partition: bool
    has_headers: bool


def _is(dtype: DataType, *types: type[DataType]) -> bool:
    return isinstance(dtype, types)


def validate(schema: StructType, options: Mapping[str, str]) -> SinkSettings:
    """Checks the columns as Spark's KafkaWriter does, before any task runs."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    topic = opts.get(options, "topic")
    if topic is None:
        if "topic" not in fields:
            raise opts.OptionError(
                "topic option required when no 'topic' attribute is present. Use the topic "
                "option for setting a topic."
            )
        if not _is(fields["topic"], StringType):
            raise opts.OptionError(f"topic attribute type must be a string, not {fields['topic']}")
    if "value" not in fields:
        raise opts.OptionError("required attribute 'value' not found")
    if not _is(fields["value"], StringType, BinaryType):
        raise opts.OptionError(
            f"value attribute type must be a string or binary, not {fields['value']}"
        )
    if "key" in fields and not _is(fields["key"], StringType, BinaryType):
        raise opts.OptionError(
            f"key attribute type must be a string or binary, not {fields['key']}"
        )
    if "partition" in fields and not _is(fields["partition"], IntegerType):
        raise opts.OptionError(
            f"partition attribute type must be an int, not {fields['partition']}"
        )
    if "headers" in fields:
        h = fields["headers"]
        ok = (
            isinstance(h, ArrayType)
            and isinstance(h.elementType, StructType)
            and [f.name for f in h.elementType.fields] == ["key", "value"]
            and isinstance(h.elementType.fields[0].dataType, StringType)
            and isinstance(h.elementType.fields[1].dataType, BinaryType)
        )
        if not ok:
            raise opts.OptionError(
                f"headers attribute type must be array<struct<key:string,value:binary>>, not {h}"
            )
    params = opts.kafka_params(options)
    opts.bootstrap_servers(options)
    return SinkSettings(
        tuple(sorted(params.items())),
        topic,
        "key" in fields,
        "partition" in fields,
        "headers" in fields,
    )


def _column(batch: pa.RecordBatch, name: str) -> list[Any]:
    for i, field in enumerate(batch.schema):
        if field.name.lower() == name:
            return batch.column(i).to_pylist()
    raise KeyError(name)


def write_batches(batches: Iterator[pa.RecordBatch], settings: SinkSettings) -> int:
    """Produces every row and waits for all acknowledgements; returns how many were written."""
    producer = Producer(producer_config(dict(settings.params)))
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None and not failures:
            failures.append(err)

    written = 0
    produce = producer.produce
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        values = _column(batch, "value")
        keys = _column(batch, "key") if settings.has_key else [None] * n
        topics = [settings.topic] * n if settings.topic is not None else _column(batch, "topic")
        partitions = _column(batch, "partition") if settings.has_partition else [None] * n
        headers = _column(batch, "headers") if settings.has_headers else [None] * n
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise ValueError(
                    "null topic present in the data. Use the topic option for setting a topic."
                )
            p = partitions[i]
            h = headers[i]
            kwargs: dict[str, Any] = {}
            if h:
                kwargs["headers"] = [(e["key"], e["value"]) for e in h]
            while True:
                try:
                    produce(
                        topic,
                        values[i],
                        keys[i],
                        _PARTITION_ANY if p is None else p,
                        on_delivery,
                        **kwargs,
                    )
                    break
                except BufferError:
                    # The local queue is full: serve delivery reports until there is room.
                    producer.poll(0.1)
            if failures:
                raise KafkaException(failures[0])
        producer.poll(0)
        written += n
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if failures:
        raise KafkaException(failures[0])
    if remaining:
        raise TimeoutError(f"{remaining} records were not acknowledged within {FLUSH_TIMEOUT_S} s")
    return written


class KafkaWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise opts.OptionError(
                "save mode Overwrite is not allowed for Kafka; use Append (records are only ever "
                "added to a topic)"
            )
        self.settings = validate(schema, options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return KafkaCommitMessage(write_batches(iterator, self.settings))


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self.settings = validate(schema, options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return KafkaCommitMessage(write_batches(iterator, self.settings))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Every record was acknowledged before its task finished; nothing is left to commit."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Records already acknowledged cannot be taken back (at-least-once, as Spark's sink)."""
