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

With ``transactionalIdPrefix`` (the producer-side twin of the source's ``groupIdPrefix``) each
task writes in one Kafka transaction, with the transactional id ``<prefix>-<Spark partition
id>``, and leaves it open; the driver commits the transactions when Spark commits the job or
micro-batch and aborts them when it aborts (``kafka_txn``), so ``read_committed`` consumers see
the write's records when Spark has kept them and never those of a failed task. A later attempt
of a task uses the same id, which fences an earlier attempt and aborts what it left open. What
stays at-least-once is written in the README ("Spark").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark import TaskContext
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

from logkeel.spark import kafka_txn
from logkeel.spark import options as opts
from logkeel.spark.kafka_client import producer_config
from logkeel.spark.kafka_credentials import portable
from logkeel.spark.kafka_txn import TaskTransaction

FLUSH_TIMEOUT_S = 300.0
_PARTITION_ANY = -1  # librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose


# The broker's default transaction.max.timeout.ms: a task's transaction stays open until the
# whole job commits, far longer than librdkafka's default of one minute.
DEFAULT_TRANSACTION_TIMEOUT_MS = "900000"


@dataclass(frozen=True)
class KafkaCommitMessage(WriterCommitMessage):
    records: int
    transaction: TaskTransaction | None = None


@dataclass(frozen=True, slots=True)
class SinkSettings:
    # Client settings hold passwords and keys: never in a repr.
    params: tuple[tuple[str, str], ...] = field(repr=False)
    topic: str | None
    has_key: bool
    has_partition: bool
    has_headers: bool
    transactional_id_prefix: str | None = None

    def transactional_id(self, partition_id: int) -> str | None:
        if self.transactional_id_prefix is None:
            return None
        return f"{self.transactional_id_prefix}-{partition_id}"


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
    params = portable(opts.kafka_params(options))
    opts.bootstrap_servers(options)
    prefix = opts.get(options, "transactionalIdPrefix")
    if "transactional.id" in params:
        # Tasks run in parallel; one id shared by all of them would fence all but the last.
        raise opts.OptionError(
            "Kafka option 'transactional.id' is not supported: set the sink option "
            "'transactionalIdPrefix' instead (each task gets its own transactional id)"
        )
    if prefix is not None and not prefix.strip():
        raise opts.OptionError("option 'transactionalIdPrefix' must not be empty")
    if prefix is not None:
        if params.get("security.protocol", "plaintext").lower() != "plaintext":
            raise opts.OptionError(
                "option 'transactionalIdPrefix' needs a PLAINTEXT listener: the driver ends the "
                "tasks' transactions with its own client, which has no TLS or SASL yet"
            )
        params.setdefault("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
    return SinkSettings(
        tuple(sorted(params.items())),
        topic,
        "key" in fields,
        "partition" in fields,
        "headers" in fields,
        prefix.strip() if prefix is not None else None,
    )


def _column(batch: pa.RecordBatch, name: str) -> list[Any]:
    for i, column in enumerate(batch.schema):
        if column.name.lower() == name:
            values: list[Any] = batch.column(i).to_pylist()
            return values
    raise KeyError(name)


def write_batches(batches: Iterator[pa.RecordBatch], settings: SinkSettings) -> KafkaCommitMessage:
    """Produces every row and waits for all acknowledgements; with a transactional id prefix,
    in one transaction left open for the driver to end."""
    params = dict(settings.params)
    context = TaskContext.get()
    txn_id = settings.transactional_id(context.partitionId() if context is not None else 0)
    if txn_id is None:
        return KafkaCommitMessage(
            _produce_all(Producer(producer_config(params)), batches, settings)
        )
    bootstrap = params["bootstrap.servers"]
    producer = Producer(producer_config({**params, "transactional.id": txn_id}))
    # Fences an earlier attempt of this task and aborts whatever it left open.
    producer.init_transactions(FLUSH_TIMEOUT_S)
    producer.begin_transaction()
    described: list[TaskTransaction] = []

    def describe() -> None:
        # This attempt's producer id and epoch, read as soon as its transaction is open (kio
        # cannot read the answer before): an attempt that fences this one bumps the epoch, and
        # both the check below and the driver's EndTxn refuse it.
        described.append(kafka_txn.describe(bootstrap, txn_id)[0])

    try:
        written = _produce_all(producer, batches, settings, describe)
        if written == 0:
            producer.commit_transaction(FLUSH_TIMEOUT_S)  # nothing was added: nothing to end
            return KafkaCommitMessage(0)
        kafka_txn.check_still_ours(bootstrap, described[0])
        return KafkaCommitMessage(written, described[0])
    except BaseException:
        # A fenced or failed producer cannot abort: then the driver's abort does, or the next
        # attempt's init, or the coordinator when the transaction times out.
        with contextlib.suppress(KafkaException):
            producer.abort_transaction(FLUSH_TIMEOUT_S)
        raise


def end_transactions(
    settings: SinkSettings, messages: list[WriterCommitMessage | None], commit: bool
) -> None:
    """Driver side: ends the open transactions of the tasks whose output Spark keeps (commit)
    or drops (abort). ``messages`` has one entry per Spark partition, None where the task
    failed."""
    if settings.transactional_id_prefix is None:
        return
    bootstrap = dict(settings.params)["bootstrap.servers"]
    txns = [
        m.transaction
        for m in messages
        if isinstance(m, KafkaCommitMessage) and m.transaction is not None
    ]
    kafka_txn.end(bootstrap, txns, commit)
    if not commit:
        failed = [i for i, m in enumerate(messages) if not isinstance(m, KafkaCommitMessage)]
        _fence(settings, [t for i in failed if (t := settings.transactional_id(i))])


def _fence(settings: SinkSettings, transactional_ids: list[str]) -> None:
    """InitProducerId for the ids of failed tasks: it aborts what they left open and fences
    them, since a cancelled task can go on writing for a moment after Spark gave up on it."""
    params = dict(settings.params)
    for txn_id in transactional_ids:
        producer = Producer(producer_config({**params, "transactional.id": txn_id}))
        producer.init_transactions(FLUSH_TIMEOUT_S)


def _produce_all(
    producer: Producer,
    batches: Iterator[pa.RecordBatch],
    settings: SinkSettings,
    after_first_ack: Callable[[], None] | None = None,
) -> int:
    """Produces every row and waits for every acknowledgement; ``after_first_ack`` runs once
    the first record is acknowledged."""
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
            if after_first_ack is not None:
                _flush(producer, failures)
                after_first_ack()
                after_first_ack = None
        producer.poll(0)
        written += n
    _flush(producer, failures)
    return written


def _flush(producer: Producer, failures: list[KafkaError]) -> None:
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if failures:
        raise KafkaException(failures[0])
    if remaining:
        raise TimeoutError(f"{remaining} records were not acknowledged within {FLUSH_TIMEOUT_S} s")


class KafkaWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise opts.OptionError(
                "save mode Overwrite is not allowed for Kafka; use Append (records are only ever "
                "added to a topic)"
            )
        self.settings = validate(schema, options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return write_batches(iterator, self.settings)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        end_transactions(self.settings, messages, True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        end_transactions(self.settings, messages, False)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self.settings = validate(schema, options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return write_batches(iterator, self.settings)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every record was acknowledged before its task finished; with
        ``transactionalIdPrefix`` the micro-batch's transactions are committed now."""
        end_transactions(self.settings, messages, True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records already acknowledged cannot be taken back (at-least-once, as Spark's sink);
        with ``transactionalIdPrefix`` the micro-batch's transactions are aborted."""
        end_transactions(self.settings, messages, False)
