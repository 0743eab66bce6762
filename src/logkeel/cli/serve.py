"""``logkeel serve``: run a broker until SIGTERM or SIGINT (a single node, or a cluster member
with ``--zookeeper``).

Settings come from ``--config server.properties``, then ``--override key=value`` (repeatable),
then the dedicated options (``--log-dirs``, ``--listen``, ``--advertised``, ``--node-id``,
``--zookeeper``), each
layer over the one before. Exit codes: 0 after a clean shutdown, 1 when the broker cannot start
(port in use, no usable log dir, ZooKeeper unreachable), 2 for invalid configuration (every bad key is listed).
"""

from __future__ import annotations

import asyncio
import faulthandler
import io
import logging
import signal
import sys
from collections.abc import Sequence

import click

from logkeel.config import BrokerConfig, ConfigError, ConfigProblem
from logkeel.server.broker import Broker, BrokerStartError
from logkeel.server.gc_freezer import GcFreezer
from logkeel.server.network.server import preferred_loop_factory

__all__ = ["serve", "serve_overrides"]

log = logging.getLogger("logkeel.serve")

EXIT_CANNOT_START = 1
EXIT_BAD_CONFIG = 2


def _host_port(option: str, value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``; an empty host means all interfaces) -> (host, port)."""
    host, sep, port_text = value.strip().rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError([ConfigProblem(option, value, "expected HOST:PORT")])
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def _endpoint(host: str, port: int) -> str:
    if ":" in host:
        host = f"[{host}]"
    return f"PLAINTEXT://{host}:{port}"


def serve_overrides(
    *,
    overrides: Sequence[str] = (),
    log_dirs: str | None = None,
    listen: str | None = None,
    advertised: str | None = None,
    node_id: int | None = None,
    zookeeper: str | None = None,
) -> list[str]:
    """The ``key=value`` list the options stand for, in priority order (later wins)."""
    items = list(overrides)
    problems: list[ConfigProblem] = []
    if log_dirs is not None:
        items.append(f"log.dirs={log_dirs}")
    for option, value, key in (
        ("--listen", listen, "listeners"),
        ("--advertised", advertised, "advertised.listeners"),
    ):
        if value is None:
            continue
        try:
            items.append(f"{key}={_endpoint(*_host_port(option, value))}")
        except ConfigError as exc:
            problems.extend(exc.problems)
    if node_id is not None:
        # Both names, so that a broker.id in the file does not conflict with the option.
        items += [f"node.id={node_id}", f"broker.id={node_id}"]
    if zookeeper is not None:
        items.append(f"zookeeper.connect={zookeeper}")
    if problems:
        raise ConfigError(problems)
    return items


def load_config(config_path: str | None, items: list[str]) -> BrokerConfig:
    """The broker config; a ConfigError lists every problem (the file's and the options')."""
    return BrokerConfig.from_properties(config_path, items)


@click.command("serve")
@click.option(
    "--config",
    "config_path",
    metavar="FILE",
    help="server.properties file (Kafka's syntax and names).",
)
@click.option("--log-dirs", metavar="DIRS", help="Comma-separated log dirs (log.dirs).")
@click.option("--listen", metavar="HOST:PORT", help="Address to bind [default: 127.0.0.1:9092].")
@click.option(
    "--advertised", metavar="HOST:PORT", help="Address given to clients in metadata responses."
)
@click.option("--node-id", type=int, help="This broker's id (node.id).")
@click.option(
    "--zookeeper",
    metavar="HOST:PORT[/CHROOT]",
    help="Join a cluster whose metadata is in this ZooKeeper (zookeeper.connect).",
)
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set any broker config; repeatable.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics over HTTP on this port (off unless given).",
)
def serve(
    config_path: str | None,
    log_dirs: str | None,
    listen: str | None,
    advertised: str | None,
    node_id: int | None,
    zookeeper: str | None,
    overrides: tuple[str, ...],
    metrics_port: int | None,
) -> None:
    """Run a Kafka-compatible broker (data in ./logkeel-data, listening on 127.0.0.1:9092)."""
    root = logging.getLogger()
    if root.getEffectiveLevel() > logging.INFO:
        root.setLevel(logging.INFO)  # a server says where it listens without -v
    try:
        items = serve_overrides(
            overrides=overrides,
            log_dirs=log_dirs,
            listen=listen,
            advertised=advertised,
            node_id=node_id,
            zookeeper=zookeeper,
        )
        config = load_config(config_path, items)
    except ConfigError as exc:
        click.echo(f"logkeel serve: {exc}", err=True)
        sys.exit(EXIT_BAD_CONFIG)
    sys.exit(run_broker(config, metrics_port=metrics_port))


def run_broker(config: BrokerConfig, *, metrics_port: int | None = None) -> int:
    """Runs the broker until SIGTERM/SIGINT; returns the process exit code."""
    # Built before the event loop runs: construction reads files (meta.properties, metadata).
    try:
        broker = Broker(config, metrics_port=metrics_port)
    except ConfigError as exc:  # e.g. a TLS listener whose key cannot be read
        click.echo(f"logkeel serve: {exc}", err=True)
        return EXIT_BAD_CONFIG
    except (OSError, ValueError, BrokerStartError) as exc:
        log.error("cannot start: %s", exc)
        click.echo(f"logkeel serve: cannot start: {exc}", err=True)
        return EXIT_CANNOT_START

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        log.debug("event loop: %s.%s", type(loop).__module__, type(loop).__name__)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _on_signal, sig, stop)
        loop.add_signal_handler(signal.SIGUSR1, dump_stacks)
        try:
            await broker.start()
        except BrokerStartError as exc:
            log.error("cannot start: %s", exc)
            click.echo(f"logkeel serve: {exc}", err=True)
            return EXIT_CANNOT_START
        _log_startup(broker)
        # What start-up built (modules, kio's schema classes, metadata, every partition's log
        # objects) lives as long as the broker: kept out of the cyclic collector, whose
        # collections otherwise walk it again and again (~20% of the broker's CPU under a
        # produce load, in perf); so is what the broker builds later (`GcFreezer`).
        freezer = GcFreezer()
        freezer.start()
        await stop.wait()
        await broker.stop()
        freezer.stop()
        return 0

    with asyncio.Runner(loop_factory=preferred_loop_factory()) as runner:
        return runner.run(main())


def _on_signal(sig: signal.Signals, stop: asyncio.Event) -> None:
    if stop.is_set():
        return
    log.info("received %s; shutting down cleanly", sig.name)
    stop.set()


def dump_stacks() -> None:
    """SIGUSR1: writes every thread's stack and every asyncio task's to stderr, as ``jstack``
    does for a JVM broker: what a stuck shutdown or request is waiting for."""
    out = io.StringIO()
    tasks = asyncio.all_tasks()
    out.write(f"--- {len(tasks)} asyncio task(s) ---\n")
    for task in tasks:
        task.print_stack(limit=12, file=out)
    sys.stderr.write(out.getvalue())
    sys.stderr.write("--- threads ---\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(sys.stderr, all_threads=True)


def _log_startup(broker: Broker) -> None:
    report = broker.log_manager.startup_report
    if report is not None:
        log.info(
            "start-up: %d partition(s), %d segment(s), %s shutdown before, logs loaded in %.0f ms",
            report.partitions,
            report.segments,
            "clean" if report.clean else "unclean",
            report.elapsed_ms,
        )
        for t in report.truncations:
            log.warning("start-up: truncated %s", t)
        for tp, why in report.offline:
            log.error("start-up: partition %s is offline: %s", tp, why)
        for d, why in report.offline_dirs:
            log.error("start-up: log dir %s is offline: %s", d, why)
    if broker.metrics_port is not None:
        log.info("metrics on http://%s:%d/metrics", broker.metrics_host, broker.metrics_port)
