"""`logkeel serve` as an operator runs it: options, config errors, signals, exit codes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from logkeel.testing.broker_process import free_port, serve_command, wait_listening
from tests.brokerproc import BrokerProcess
from tests.server.test_admin_wire import Wire
from tests.server.test_metrics_endpoint import listening_ports

MARKER = ".kafka_cleanshutdown"


def serve(*args: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    """`python -m logkeel serve ARGS` (no -v: serve logs at INFO on its own), its output piped
    for the assertions."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        serve_command(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env=env,
    )


def run_serve(*args: str, cwd: Path | None = None, timeout: float = 30) -> tuple[int, str]:
    proc = serve(*args, cwd=cwd)
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def wait_serving(proc: subprocess.Popen[str], port: int, timeout: float = 30) -> None:
    if wait_listening(proc, port, timeout):
        return
    if proc.poll() is not None:
        raise AssertionError(f"serve exited with {proc.returncode}: {proc.stdout.read()}")
    proc.kill()
    raise AssertionError("serve did not listen in time")


def stop(proc: subprocess.Popen[str], sig: signal.Signals = signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    return proc.returncode, out


# -- configuration errors -------------------------------------------------------------------------


def test_bad_config_lists_every_bad_key_and_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text("log.segment.bytes=tiny\nnum.partitions=0\n")
    code, out = run_serve(
        "--config",
        str(config),
        "--override",
        "log.retention.check.interval.ms=-5",
        "--override",
        "no-equals-sign",
        "--log-dirs",
        str(tmp_path / "data"),
    )
    assert code == 2, out
    for key in ("log.segment.bytes", "num.partitions", "log.retention.check.interval.ms"):
        assert key in out
    assert "no-equals-sign" in out and "key=value" in out
    assert "Traceback" not in out
    assert not (tmp_path / "data").exists()  # nothing was started


def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    code, out = run_serve("--config", str(tmp_path / "nope.properties"))
    assert code == 2
    assert "nope.properties" in out and "Traceback" not in out


@pytest.mark.parametrize("listen", ["localhost", "127.0.0.1:http", "127.0.0.1:70000"])
def test_bad_listen_address_exits_2(tmp_path: Path, listen: str) -> None:
    code, out = run_serve("--listen", listen, "--log-dirs", str(tmp_path / "data"))
    assert code == 2
    assert "--listen" in out and "HOST:PORT" in out and "Traceback" not in out


# -- start-up failures ---------------------------------------------------------------------------


def test_port_in_use_exits_1(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out = run_serve("--listen", f"127.0.0.1:{port}", "--log-dirs", str(tmp_path / "d"))
    assert code == 1, out
    assert f"127.0.0.1:{port}" in out and "already in use" in out
    assert "Traceback" not in out
    # The log dir was opened and closed again cleanly.
    assert (tmp_path / "d" / MARKER).exists()


def test_log_dir_in_use_by_another_broker_exits_1(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "first") as first:
        code, out = run_serve(
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--log-dirs",
            ",".join(str(d) for d in first.log_dirs),
        )
        assert code == 1, out
        assert "locked by another process" in out
        # The first broker is unaffected.
        assert AdminClient({"bootstrap.servers": first.bootstrap}).list_topics(timeout=10)


# -- running and stopping ------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_shuts_down_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    port = free_port()
    proc = serve("--listen", f"127.0.0.1:{port}", "--log-dirs", ",".join(map(str, dirs)))
    wait_serving(proc, port)
    assert listening_ports(proc.pid) == {port}  # no metrics endpoint unless asked for
    for d in dirs:
        assert not (d / MARKER).exists()  # removed at start-up: a crash now would be unclean
    code, out = stop(proc, sig)
    assert code == 0, out
    for d in dirs:
        assert (d / MARKER).exists()
        assert (d / "meta.properties").exists()
    assert f"listening on 127.0.0.1:{port}" in out  # INFO without -v
    assert "start-up:" in out
    assert "shut down" in out
    assert "Traceback" not in out


def test_no_arguments_serves_on_9092_with_data_in_cwd(tmp_path: Path) -> None:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", 9092))
            free = True
        except OSError:
            free = False
    proc = serve(cwd=tmp_path)
    if not free:
        # Something else holds the default port: serve must say so and exit 1.
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 1
        assert "127.0.0.1:9092" in out and "already in use" in out
        return
    wait_serving(proc, 9092)
    md = AdminClient({"bootstrap.servers": "127.0.0.1:9092"}).list_topics(timeout=10)
    assert [(b.id, b.host, b.port) for b in md.brokers.values()] == [(0, "127.0.0.1", 9092)]
    code, out = stop(proc)
    assert code == 0, out
    assert (tmp_path / "logkeel-data" / MARKER).exists()
    assert (tmp_path / "logkeel-data" / "meta.properties").exists()


def test_config_file_options_and_overrides(tmp_path: Path) -> None:
    port, advertised_port = free_port(), free_port()
    config = tmp_path / "server.properties"
    config.write_text(
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()}\n"
        f"log.dirs={tmp_path / 'from-file'}\n"
        "broker.id=1\n"
        "num.partitions=1\n"
    )
    data = tmp_path / "from-option"
    proc = serve(
        "--config",
        str(config),
        "--listen",
        f"127.0.0.1:{port}",  # the option wins over the file's listeners
        "--advertised",
        f"localhost:{advertised_port}",
        "--node-id",
        "7",  # wins over the file's broker.id without a conflict
        "--log-dirs",
        str(data),
        "--override",
        "num.partitions=4",
    )
    wait_serving(proc, port)
    try:
        # Metadata advertises the --advertised address, which nothing listens on, so ask the
        # broker directly with a raw request rather than through a client that would follow it.
        wire = Wire(port)
        try:
            response = wire.metadata(["opt-topic"], auto_create=True)
        finally:
            wire.close()
        [broker] = response.brokers
        assert (broker.node_id, broker.host, broker.port) == (7, "localhost", advertised_port)
        [topic] = response.topics
        assert len(topic.partitions) == 4
    finally:
        code, out = stop(proc)
    assert code == 0, out
    assert "node.id=7" in (data / "meta.properties").read_text()
    assert not (tmp_path / "from-file").exists()
