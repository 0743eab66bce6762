"""`spark.read` / `spark.readStream` `.format("logkeel")`: topics of any Kafka-protocol broker.

Options and columns are those of Spark's built-in Kafka connector, so a job moves between the two
by changing the format name: ``kafka.bootstrap.servers`` (and any ``kafka.*`` client setting),
``subscribe`` / ``subscribePattern`` / ``assign``, ``startingOffsets`` / ``endingOffsets``
(``earliest``, ``latest``, JSON per partition with -2/-1), ``startingTimestamp`` /
``startingOffsetsByTimestamp`` (and the ``ending`` ones, batch), ``maxOffsetsPerTrigger``,
``minPartitions``, ``includeHeaders``, ``failOnDataLoss``, ``kafkaConsumer.pollTimeoutMs``,
``kafka.isolation.level`` (``read_uncommitted`` by default, as Spark's; ``read_committed`` plans
every range up to the last stable offset instead of the high watermark, so a batch stops before
the first open transaction, and skips aborted records).

The driver decides offset ranges (which is all a micro-batch is, so a query restarted from its
checkpoint re-reads exactly the ranges it had planned: nothing skipped, nothing twice); each Spark
task reads one range with its own confluent-kafka consumer and hands Spark Arrow batches.
Partitions the JSON offsets leave out start at earliest (Spark requires them all; accepting fewer
keeps every Spark job valid here).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from logkeel.spark import options as opts
from logkeel.spark.election_losses import explain_truncation
from logkeel.spark.kafka_client import (
    DataLossError,
    KafkaMetadata,
    Partition,
    consumer_config,
)
from logkeel.spark.kafka_credentials import portable
from logkeel.spark.kafka_sink import KafkaStreamWriter, KafkaWriter
from logkeel.spark.schema import arrow_schema, batch_from_columns, kafka_schema
from logkeel.spark.trigger_limits import DEFAULT_MAX_TRIGGER_DELAY_MS, MinTrigger, duration_ms

ROWS_PER_ARROW_BATCH = 10_000
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark: kafkaConsumer.pollTimeoutMs = spark.network.timeout
Offsets = dict[str, dict[str, int]]  # {"topic": {"0": 23}}: Spark's Kafka offset JSON


# -- offset ranges --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetRange:
    topic: str
    partition: int
    from_offset: int
    until_offset: int  # exclusive

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


class KafkaInputPartition(InputPartition):
    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)

    @property
    def range(self) -> OffsetRange:
        offset_range: OffsetRange = self.value
        return offset_range


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Non-empty ranges, large ones cut so that there are about ``min_partitions`` in all.

    Spark's KafkaOffsetRangeCalculator rule: a range whose share of ``min_partitions`` rounds
    to one stays whole; the rest share what is left of ``min_partitions`` in proportion to
    their sizes, and each is cut into that many even pieces.
    """
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges

    def parts(size: int, total: int, wanted: int) -> int:
        return max(math.floor(size / total * wanted + 0.5), 1)  # Scala's round: half up

    total = sum(r.size for r in ranges)
    whole = [r for r in ranges if parts(r.size, total, min_partitions) == 1]
    split_total = total - sum(r.size for r in whole)
    split_wanted = max(min_partitions - len(whole), 1)
    out = []
    for r in ranges:
        n = 1 if r in whole else parts(r.size, split_total, split_wanted)
        remaining = r.size
        start = r.from_offset
        for piece in range(n):
            this = remaining // (n - piece)
            remaining -= this
            end = min(start + this, r.until_offset)
            if end > start:
                out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out


def to_json(offsets: Mapping[Partition, int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(offsets: Mapping[str, Mapping[str, int]]) -> dict[Partition, int]:
    return {(t, int(p)): int(o) for t, ps in offsets.items() for p, o in ps.items()}


def rate_limit(
    limit: int, begin: Mapping[Partition, int], latest: Mapping[Partition, int]
) -> dict[Partition, int]:
    """End offsets that admit about ``limit`` records, shared out in proportion to the backlog.

    Spark's rule: every partition with a backlog gets at least one record, so a small one is
    never starved behind a large one.
    """
    sizes = {tp: latest[tp] - begin.get(tp, latest[tp]) for tp in latest}
    sizes = {tp: s for tp, s in sizes.items() if s > 0}
    total = sum(sizes.values())
    if total == 0:
        return dict(latest)
    out = dict(latest)
    for tp, size in sizes.items():
        share = limit * (size / total)
        n = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(latest[tp], begin[tp] + n)
    return out


# -- reading one range (runs on executors) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadSettings:
    # Client settings hold passwords and keys: never in a repr.
    params: tuple[tuple[str, str], ...] = field(repr=False)
    fail_on_data_loss: bool
    poll_timeout_ms: int
    group_prefix: str | None


_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}  # librdkafka's type -> Kafka's TimestampType id


def read_range(
    r: OffsetRange, settings: ReadSettings, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` as Arrow batches of ``schema`` (the Kafka connector's columns)."""
    if r.size <= 0:
        return
    consumer = Consumer(consumer_config(dict(settings.params), settings.group_prefix))
    try:
        yield from _consume(consumer, r, settings, schema)
    finally:
        consumer.close()


def _consume(
    consumer: Consumer, r: OffsetRange, settings: ReadSettings, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    with_headers = "headers" in schema.names
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    offsets: list[int] = []
    timestamps: list[int] = []
    ts_types: list[int] = []
    headers: list[Any] = []
    topic, partition, until = r.topic, r.partition, r.until_offset
    consumer.assign([KafkaTP(topic, partition, r.from_offset)])
    next_offset = r.from_offset
    last_progress = time.monotonic()
    timeout_s = settings.poll_timeout_ms / 1000

    def batch() -> pa.RecordBatch:
        n = len(offsets)
        columns: dict[str, list[Any]] = {
            "key": keys,
            "value": values,
            "topic": [topic] * n,
            "partition": [partition] * n,
            "offset": offsets,
            "timestamp": timestamps,
            "timestampType": ts_types,
        }
        if with_headers:
            columns["headers"] = headers
        return batch_from_columns(schema, columns)

    while next_offset < until:
        messages = consumer.consume(min(until - next_offset, ROWS_PER_ARROW_BATCH), 1.0)
        if not messages:
            if time.monotonic() - last_progress > timeout_s:
                raise TimeoutError(
                    f"no records from {topic}-{partition} at offset {next_offset} for "
                    f"{settings.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs) while reading up "
                    f"to {until}"
                )
            continue
        last_progress = time.monotonic()
        for m in messages:
            err = m.error()
            if err is not None:
                next_offset = _handle_error(consumer, err, m, r, next_offset, settings)
                if next_offset >= until:
                    break
                continue
            offset = m.offset()
            assert offset is not None  # a message without an error has its offset
            if offset >= until:
                next_offset = until
                break
            keys.append(m.key())
            values.append(m.value())
            offsets.append(offset)
            ts_type, ts = m.timestamp()
            timestamps.append(ts)
            ts_types.append(_TIMESTAMP_TYPES.get(ts_type, -1))
            if with_headers:
                headers.append(m.headers() or None)
            next_offset = offset + 1
        if len(offsets) >= ROWS_PER_ARROW_BATCH:
            yield batch()
            keys, values, offsets, timestamps, ts_types, headers = [], [], [], [], [], []
    if offsets:
        yield batch()


def _handle_error(
    consumer: Consumer,
    err: KafkaError,
    m: Any,
    r: OffsetRange,
    next_offset: int,
    settings: ReadSettings,
) -> int:
    """The offset to go on from after a consumer event; raises on errors that end the read."""
    code = err.code()
    where = f"{r.topic}-{r.partition}"
    if code == KafkaError._PARTITION_EOF:
        # The high watermark (the last stable offset under read_committed): every record below
        # it has been delivered.
        end = m.offset()
        if end >= r.until_offset:
            # Whatever was not delivered below `until` were control records, aborted records
            # (read_committed) or compacted away.
            return r.until_offset
        # The log ends before the range does: records were truncated away after planning.
        if settings.fail_on_data_loss:
            raise DataLossError(
                f"{where} ends at offset {end}, before the offset {r.until_offset} this read "
                "was planned up to"
                + _truncation_detail(dict(settings.params), (r.topic, r.partition), end)
            )
        return r.until_offset
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        low, _high = consumer.get_watermark_offsets(KafkaTP(r.topic, r.partition), timeout=30)
        if settings.fail_on_data_loss:
            raise DataLossError(
                f"cannot fetch offset {next_offset} of {where}: the log now starts at {low}"
            )
        if low >= r.until_offset:
            return r.until_offset
        consumer.assign([KafkaTP(r.topic, r.partition, max(low, next_offset))])
        return max(low, next_offset)
    raise KafkaException(err)


def _truncation_detail(params: Mapping[str, str], tp: Partition, truncated_to: int) -> str:
    detail = explain_truncation(params, tp[0], tp[1], truncated_to)
    return f" ({detail})" if detail else ""


# -- planning (driver) --------------------------------------------------------------------------


class _Planner:
    """Option parsing shared by the batch and streaming readers."""

    def __init__(self, options: Mapping[str, str], schema: StructType, *, streaming: bool) -> None:
        self.options = dict(options)
        self.schema = schema
        opts.refuse_unsupported_source_options(self.options)
        self.params = portable(opts.kafka_params(self.options))
        opts.bootstrap_servers(self.options)
        opts.isolation_level(self.params)
        self.selection = opts.TopicSelection.parse(self.options)
        self.fail_on_data_loss = opts.get_bool(self.options, "failOnDataLoss", True)
        self.min_partitions = opts.get_int(self.options, "minPartitions", None, minimum=1)
        self.settings = ReadSettings(
            tuple(sorted(self.params.items())),
            self.fail_on_data_loss,
            opts.get_int(self.options, "kafkaConsumer.pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS, 1)
            or DEFAULT_POLL_TIMEOUT_MS,
            opts.get(self.options, "groupIdPrefix"),
        )
        self.starting = opts.parse_offsets(
            self.options,
            "startingOffsets",
            "latest" if streaming else "earliest",
            allow_latest=streaming,
        )
        self.starting_times = opts.parse_timestamps(self.options, "starting")
        self.timestamp_strategy = opts.get_choice(
            self.options, "startingOffsetsByTimestampStrategy", ("error", "latest")
        )
        if streaming:
            for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
                if opts.get(self.options, name) is not None:
                    raise opts.OptionError(f"option '{name}' is for batch queries only")
            self.ending = opts.OffsetSpec(opts.LATEST)
            self.ending_times = None
        else:
            self.ending = opts.parse_offsets(
                self.options, "endingOffsets", "latest", allow_earliest=False
            )
            self.ending_times = opts.parse_timestamps(self.options, "ending")
        self._metadata: KafkaMetadata | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_metadata"] = None  # a live client stays in the process that made it
        return state

    @property
    def metadata(self) -> KafkaMetadata:
        if self._metadata is None:
            self._metadata = KafkaMetadata(self.params)
        return self._metadata

    def close(self) -> None:
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None

    def resolve(
        self,
        spec: opts.OffsetSpec,
        times: opts.TimestampSpec | None,
        partitions: list[Partition],
        earliest: Mapping[Partition, int],
        latest: Mapping[Partition, int],
        what: str,
    ) -> dict[Partition, int]:
        """Concrete offsets for ``partitions`` from a spec (timestamps win over offsets)."""
        if times is not None:
            wanted = {}
            for tp in partitions:
                ts = times.for_partition(*tp)
                if ts is None:
                    raise opts.OptionError(
                        f"'{what}OffsetsByTimestamp' has no timestamp for {tp[0]}-{tp[1]}"
                    )
                wanted[tp] = ts
            return self.metadata.for_times(
                wanted,
                latest,
                fail_unmatched=what == "starting" and self.timestamp_strategy == "error",
            )
        out = {}
        for tp in partitions:
            offset = spec.for_partition(*tp)
            out[tp] = (
                earliest[tp]
                if offset == opts.EARLIEST
                else latest[tp]
                if offset == opts.LATEST
                else offset
            )
        return out

    def check_start(self, tp: Partition, start: int, earliest: int) -> int:
        """``start``, or the log start when records before it are gone and loss is tolerated."""
        if start >= earliest:
            return start
        if self.fail_on_data_loss:
            raise DataLossError(
                f"cannot read {tp[0]}-{tp[1]} from offset {start}: the log starts at {earliest}"
            )
        return earliest


# -- batch --------------------------------------------------------------------------------------


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.planner = _Planner(options, schema, streaming=False)
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        p = self.planner
        try:
            tps = p.metadata.partitions(p.selection)
            earliest = p.metadata.earliest(tps)
            latest = p.metadata.latest(tps)
            start = p.resolve(p.starting, p.starting_times, tps, earliest, latest, "starting")
            end = p.resolve(p.ending, p.ending_times, tps, earliest, latest, "ending")
        finally:
            p.close()
        ranges = []
        for tp in tps:
            s = p.check_start(tp, start[tp], earliest[tp])
            e = end[tp]
            if e > latest[tp] and p.fail_on_data_loss:
                raise opts.OptionError(
                    f"ending offset {e} of {tp[0]}-{tp[1]} is beyond its latest offset {latest[tp]}"
                )
            e = min(e, latest[tp])
            if e < s:
                raise opts.OptionError(
                    f"beginning offset {s} is after the ending offset {e} for {tp[0]}-{tp[1]}"
                )
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        return [KafkaInputPartition(r) for r in split_ranges(ranges, p.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaInputPartition)
        yield from read_range(partition.range, self.planner.settings, arrow_schema(self.schema))


# -- streaming ----------------------------------------------------------------------------------


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.planner = _Planner(options, schema, streaming=True)
        self.schema = schema
        self.max_offsets_per_trigger = opts.get_int(
            self.planner.options, "maxOffsetsPerTrigger", None, minimum=1
        )
        min_offsets = opts.get_int(self.planner.options, "minOffsetsPerTrigger", None, minimum=1)
        delay = opts.get(self.planner.options, "maxTriggerDelay")
        self.min_trigger = (
            MinTrigger(
                min_offsets,
                duration_ms("maxTriggerDelay", delay) if delay else DEFAULT_MAX_TRIGGER_DELAY_MS,
            )
            if min_offsets
            else None
        )
        self._available_now: dict[Partition, int] | None = None

    def initialOffset(self) -> Offsets:
        p = self.planner
        tps = p.metadata.partitions(p.selection)
        earliest = p.metadata.earliest(tps)
        latest = p.metadata.latest(tps)
        return to_json(p.resolve(p.starting, p.starting_times, tps, earliest, latest, "starting"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_offsets_per_trigger:
            return ReadMaxRows(self.max_offsets_per_trigger)
        if self.min_trigger is not None:
            return ReadMinRows(self.min_trigger.min_offsets)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        p = self.planner
        self._available_now = p.metadata.latest(p.metadata.partitions(p.selection))

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        p = self.planner
        begin = from_json(start)
        if self._available_now is not None:
            latest = dict(self._available_now)
        else:
            latest = p.metadata.latest(p.metadata.partitions(p.selection))
        new = [tp for tp in latest if tp not in begin]
        if new:
            # Partitions that appeared since the last batch are read from their beginning.
            begin.update(p.metadata.earliest(new))
        if self._waits_for_more(limit, begin, latest):
            return start
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(limit.max_rows, begin, latest)
        else:
            end = dict(latest)
        return to_json(end)

    def _waits_for_more(
        self, limit: ReadLimit, begin: Mapping[Partition, int], latest: Mapping[Partition, int]
    ) -> bool:
        """``minOffsetsPerTrigger``: whether this trigger is skipped. Never under availableNow
        (the query would wait for records that may never come) or when Spark asks for all."""
        if self.min_trigger is None or self._available_now is not None:
            return False
        if isinstance(limit, ReadAllAvailable):
            return False
        new_records = sum(max(end - begin.get(tp, end), 0) for tp, end in latest.items())
        return self.min_trigger.skip(new_records, int(time.time() * 1000))

    def reportLatestOffset(self) -> Offsets | None:
        p = self.planner
        return to_json(p.metadata.latest(p.metadata.partitions(p.selection)))

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        p = self.planner
        begin = from_json(start)
        until = from_json(end)
        new = [tp for tp in until if tp not in begin]
        earliest_new = p.metadata.earliest(new) if new else {}
        gone = sorted(set(begin) - set(until))
        if gone and p.fail_on_data_loss:
            raise DataLossError(f"partitions {gone} are gone")
        ranges = []
        for tp, e in sorted(until.items()):
            s = begin.get(tp, earliest_new.get(tp, 0))
            if e < s:
                if p.fail_on_data_loss:
                    raise DataLossError(
                        f"the offset of {tp[0]}-{tp[1]} went back from {s} to {e}"
                        + _truncation_detail(p.params, tp, e)
                    )
                continue
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        return [KafkaInputPartition(r) for r in split_ranges(ranges, p.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaInputPartition)
        yield from read_range(partition.range, self.planner.settings, arrow_schema(self.schema))

    def commit(self, end: Offsets) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in Kafka's group offsets."""

    def stop(self) -> None:
        self.planner.close()


# -- the format ---------------------------------------------------------------------------------


class KafkaDataSource(DataSource):
    """The ``logkeel`` format: source and sink."""

    @classmethod
    def name(cls) -> str:
        return "logkeel"

    def schema(self) -> StructType:
        return kafka_schema(opts.get_bool(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return KafkaWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KafkaStreamWriter(self.options, schema, overwrite)
