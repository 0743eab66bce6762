"""The Prometheus endpoint of a real `logkeel serve --metrics-port`."""

from __future__ import annotations

import socket
import struct
import urllib.request
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.brokerproc import BrokerProcess, free_port


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as {(name, sorted labels): value}, parsed by prometheus-client's parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def listening_ports(pid: int) -> set[int]:
    """TCP ports process ``pid`` listens on (Linux: its socket inodes in /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_metrics_endpoint_serves_the_named_metrics(tmp_path: Path) -> None:
    metrics_port = free_port()
    with BrokerProcess(tmp_path, extra_args=["--metrics-port", str(metrics_port)]) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("mx-a", 3, 1), NewTopic("mx-b", 2, 1)])["mx-b"].result(15)
        admin.list_topics(timeout=10)

        assert b.proc is not None
        assert listening_ports(b.proc.pid) == {b.port, metrics_port}
        samples = scrape(metrics_port)
        assert value(samples, "logkeel_requests_total", api="Metadata", outcome="ok") >= 1
        assert value(samples, "logkeel_requests_total", api="CreateTopics", outcome="ok") == 1
        assert value(samples, "logkeel_requests_total", api="ApiVersions", outcome="ok") >= 1
        assert value(samples, "logkeel_request_duration_seconds_count", api="CreateTopics") == 1
        assert value(samples, "logkeel_request_duration_seconds_sum", api="CreateTopics") > 0
        assert (
            value(samples, "logkeel_request_duration_seconds_bucket", api="CreateTopics", le="+Inf")
            == 1
        )
        assert value(samples, "logkeel_bytes_in_total", api="Metadata") > 0
        assert value(samples, "logkeel_bytes_out_total", api="Metadata") > 0
        assert value(samples, "logkeel_topics") == 2
        assert value(samples, "logkeel_partitions") == 5
        assert value(samples, "logkeel_offline_partitions") == 0
        log_dir = str(b.log_dirs[0].absolute())
        assert value(samples, "logkeel_log_dir_online", log_dir=log_dir) == 1
        assert value(samples, "logkeel_offline_log_dirs") == 0
        assert value(samples, "logkeel_connections") >= 1
        assert value(samples, "logkeel_startup_duration_seconds") > 0
        assert value(samples, "logkeel_log_load_duration_seconds") >= 0
        assert value(samples, "logkeel_log_recovery_duration_seconds") == 0
        assert value(samples, "logkeel_startup_clean") == 1

        # Metadata rates go up with every request.
        before = value(samples, "logkeel_requests_total", api="Metadata", outcome="ok")
        for _ in range(3):
            admin.list_topics(timeout=10)
        after = value(scrape(metrics_port), "logkeel_requests_total", api="Metadata", outcome="ok")
        assert after >= before + 3

        # Requests for APIs nobody serves share one label, whatever key they carry.
        for api_key in (999, 1000):
            with socket.create_connection(("127.0.0.1", b.port), timeout=5) as sock:
                sock.sendall(struct.pack(">ihhih", 10, api_key, 0, 1, -1))
                assert sock.recv(100) == b""  # closed without an answer
        samples = scrape(metrics_port)
        assert value(samples, "logkeel_requests_total", api="unsupported", outcome="closed") == 2
        assert not any("ApiKey(" in str(labels) for _, labels in samples)

        # After kill -9 the next start-up is a recovery, and the metrics say so.
        b.kill()
        b.start()
        samples = scrape(metrics_port)
        assert value(samples, "logkeel_startup_clean") == 0
        assert value(samples, "logkeel_startup_partitions_loaded") == 5
        assert value(samples, "logkeel_log_recovery_duration_seconds") == value(
            samples, "logkeel_log_load_duration_seconds"
        )
        assert value(samples, "logkeel_partitions") == 5
