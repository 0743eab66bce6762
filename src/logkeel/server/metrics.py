"""Prometheus metrics of one broker (``prometheus-client``), on a registry of its own.

Request counts, latencies and bytes come from the network server's observer hook (one call per
finished request, already off the hot path's critical section). Partition counts, offline
partitions and log-dir status are read from the broker at scrape time, so they are never stale
and cost nothing between scrapes. Start-up figures come from the log manager's start-up report.

Names (all prefixed ``logkeel_``):

- ``requests_total{api,outcome}``: finished requests (``rate()`` gives the request rate);
  ``outcome`` is ok, no_response, error_response or closed; requests for APIs the broker
  does not serve, and frames too broken to name one, count as ``api="unsupported"``.
- ``request_duration_seconds{api}``: histogram, arrival to response written.
- ``bytes_in_total{api}`` / ``bytes_out_total{api}``: request / response frame bytes; the
  Produce row of ``bytes_in`` and the Fetch row of ``bytes_out`` are Kafka's BytesIn/BytesOut.
- ``connections``: open client connections.
- ``partitions``: partitions in the metadata; ``offline_partitions``: partitions that cannot
  be served (offline log dir or failed load); ``topics``.
- ``log_dir_online{log_dir}``: 1 online, 0 offline; ``offline_log_dirs``;
  ``log_dir_failures_total{log_dir}``: times a dir was taken offline;
  ``log_dir_recoveries_total{log_dir}``: times an offline dir came back without a restart;
  ``election_truncations_total`` / ``election_truncated_offsets_total``: elections this
  broker made as controller after which replicas truncate (unclean leaders, designated ones
  out of the ISR), and the offsets the replicas' last reports showed past the new leader's end.
- ``startup_duration_seconds``: from ``start()`` until the listener accepts;
  ``log_load_duration_seconds``: loading (and recovering) the logs;
  ``log_recovery_duration_seconds``: the same after an unclean shutdown, else 0;
  ``startup_clean``: 1 if every dir had its clean-shutdown marker;
  ``startup_segments_recovered``, ``startup_bytes_scanned``, ``startup_truncations``.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from logkeel.cluster.metadata import MetadataStore
from logkeel.server.network.connection import RequestRecord
from logkeel.storage.log_manager import LogManager
from logkeel.storage.recovery.load_report import StartupReport

__all__ = ["BrokerMetrics", "MetricsSources"]

# Request latencies from sub-millisecond metadata answers to long-polled fetches.
_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class MetricsSources:
    """Where the metrics read the broker's state."""

    served_api_keys: Container[int]  # the handler registry
    metadata: MetadataStore
    log_manager: LogManager
    connection_count: Callable[[], int]


class BrokerMetrics:
    """The broker's metrics; ``observe_request`` is the network server's observer."""

    def __init__(self, sources: MetricsSources) -> None:
        self._sources = sources
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "logkeel_requests",
            "Requests handled, by API and outcome.",
            ("api", "outcome"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "logkeel_request_duration_seconds",
            "Time from a request's arrival to its response being written.",
            ("api",),
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.bytes_in = Counter(
            "logkeel_bytes_in",
            "Request bytes received, by API (Produce is Kafka's BytesIn).",
            ("api",),
            registry=self.registry,
        )
        self.bytes_out = Counter(
            "logkeel_bytes_out",
            "Response bytes sent, by API (Fetch is Kafka's BytesOut).",
            ("api",),
            registry=self.registry,
        )
        self.dir_failures = Counter(
            "logkeel_log_dir_failures",
            "Times a log dir was taken offline after an IO error.",
            ("log_dir",),
            registry=self.registry,
        )
        self.dir_recoveries = Counter(
            "logkeel_log_dir_recoveries",
            "Times an offline log dir was loaded again without a restart.",
            ("log_dir",),
            registry=self.registry,
        )
        self.election_truncations = Counter(
            "logkeel_election_truncations",
            "Elections (as controller) after which other replicas truncate records.",
            registry=self.registry,
        )
        self.election_truncated_offsets = Counter(
            "logkeel_election_truncated_offsets",
            "Offsets other replicas lose after elections this broker made as controller.",
            registry=self.registry,
        )
        self.failed_authentications = Counter(
            "logkeel_failed_authentications",
            "SASL authentications that failed (wrong password, unknown user, bad token).",
            registry=self.registry,
        )
        self._startup: StartupReport | None = None
        self._startup_duration: float | None = None
        self.registry.register(_StateCollector(self))

    # -- recording ------------------------------------------------------------------------------

    def observe_request(self, record: RequestRecord) -> None:
        # Only APIs the broker serves get their own label: a client sending random API keys
        # must not be able to create unbounded numbers of time series.
        api = record.api_name if record.api_key in self._sources.served_api_keys else "unsupported"
        self.requests.labels(api, record.outcome).inc()
        self.latency.labels(api).observe(record.duration)
        self.bytes_in.labels(api).inc(record.request_bytes)
        if record.response_bytes:
            self.bytes_out.labels(api).inc(record.response_bytes)

    def record_startup(self, report: StartupReport) -> None:
        self._startup = report

    def record_started(self, seconds: float) -> None:
        self._startup_duration = seconds

    def log_dir_failed(self, log_dir: str) -> None:
        self.dir_failures.labels(log_dir).inc()

    def log_dir_online(self, log_dir: str) -> None:
        self.dir_recoveries.labels(log_dir).inc()

    def election_truncated(self, _tp: object, truncated: Mapping[int, int]) -> None:
        self.election_truncations.inc()
        self.election_truncated_offsets.inc(sum(truncated.values()))

    # -- exposition -----------------------------------------------------------------------------

    def render(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> Any:
        """Starts the HTTP endpoint in a thread; returns the (server, thread) handle."""
        return start_http_server(port, addr=host, registry=self.registry)


class _StateCollector(Collector):
    """Gauges computed from the broker's state at scrape time."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        # Describing by collecting would touch the broker at registration; names are static.
        return []

    def collect(self) -> Iterator[Metric]:
        sources = self._metrics._sources
        yield _gauge("logkeel_connections", "Open client connections.", sources.connection_count())
        topics = sources.metadata.topics()
        yield _gauge("logkeel_topics", "Topics in the cluster metadata.", len(topics))
        yield _gauge(
            "logkeel_partitions",
            "Partitions in the cluster metadata.",
            sum(len(t.partitions) for t in topics.values()),
        )
        lm = sources.log_manager
        offline = set(lm.offline_partitions)
        yield _gauge(
            "logkeel_offline_partitions",
            "Partitions that cannot be served (offline log dir or failed load).",
            len(offline),
        )
        dirs = GaugeMetricFamily(
            "logkeel_log_dir_online",
            "Whether a log dir is online (1) or offline (0).",
            labels=("log_dir",),
        )
        offline_dirs = 0
        for d in lm.dirs:
            online = d.online
            offline_dirs += not online
            dirs.add_metric((str(d.path),), 1.0 if online else 0.0)
        yield dirs
        yield _gauge("logkeel_offline_log_dirs", "Log dirs that are offline.", offline_dirs)
        yield from self._startup_metrics()

    def _startup_metrics(self) -> Iterator[Metric]:
        m = self._metrics
        if m._startup_duration is not None:
            yield _gauge(
                "logkeel_startup_duration_seconds",
                "Time from start() until the listener accepted connections.",
                m._startup_duration,
            )
        report = m._startup
        if report is None:
            return
        load = report.elapsed_ms / 1000
        yield _gauge(
            "logkeel_log_load_duration_seconds",
            "Time to load (and recover) the logs at start-up.",
            load,
        )
        yield _gauge(
            "logkeel_log_recovery_duration_seconds",
            "Time spent loading logs after an unclean shutdown (0 after a clean one).",
            0.0 if report.clean else load,
        )
        yield _gauge(
            "logkeel_startup_clean",
            "1 if every log dir had its clean-shutdown marker at start-up.",
            1.0 if report.clean else 0.0,
        )
        yield _gauge(
            "logkeel_startup_partitions_loaded", "Partitions loaded at start-up.", report.partitions
        )
        yield _gauge(
            "logkeel_startup_segments_recovered",
            "Segments scanned by recovery at start-up.",
            report.segments_recovered,
        )
        yield _gauge(
            "logkeel_startup_bytes_scanned",
            "Log bytes scanned by recovery at start-up.",
            report.bytes_scanned,
        )
        yield _gauge(
            "logkeel_startup_truncations",
            "Log tails truncated at start-up (corrupt or incomplete batches).",
            len(report.truncations),
        )


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=float(value))
