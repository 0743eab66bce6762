"""The broker's listener: binds the socket, accepts connections, closes idle ones, and stops
gracefully (each connection finishes what it has already received).

Request handling is in ``connection``, the sendfile writer in ``zero_copy``. The server only
uses asyncio's protocol/transport interface, so it runs on any event loop; the entry point
chooses uvloop when it is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterable

from logkeel.server.handlers import HandlerRegistry
from logkeel.server.network.connection import Connection, Observer, RequestRecord
from logkeel.server.network.connection_quotas import ConnectionQuotas
from logkeel.server.network.framing import DEFAULT_MAX_REQUEST_BYTES
from logkeel.server.network.request_memory import RequestMemory
from logkeel.server.network.security import PLAINTEXT, ListenerSecurity

__all__ = [
    "DEFAULT_CONNECTIONS_MAX_IDLE_MS",
    "DEFAULT_SASL_MAX_RECEIVE_BYTES",
    "Server",
    "preferred_loop_factory",
]

log = logging.getLogger(__name__)

# Kafka's connections.max.idle.ms default.
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000
# Kafka's sasl.server.max.receive.size default.
DEFAULT_SASL_MAX_RECEIVE_BYTES = 524_288
# Kafka's socket.listen.backlog.size default.
DEFAULT_LISTEN_BACKLOG = 50
# A client that opens a TLS connection and says nothing is dropped after this many seconds.
_TLS_HANDSHAKE_TIMEOUT = 10.0


class Server:
    """A Kafka-protocol listener dispatching to the handlers in ``registry``.

    ``port=0`` binds an ephemeral port; read it from ``port`` after ``start()``. Settings are
    Kafka's: ``max_request_bytes`` is socket.request.max.bytes, ``connections_max_idle_ms``
    connections.max.idle.ms (0 disables the check), ``backlog`` socket.listen.backlog.size,
    ``sasl_max_receive_bytes`` sasl.server.max.receive.size (frames before a SASL login);
    ``memory`` is the broker-wide budget of request bytes (queued.max.request.bytes), shared
    by every listener of a broker, as ``quotas`` holds the connection limits of them all.
    ``observers`` are called with a ``RequestRecord`` after every request (metrics hook them).
    ``security`` says whether connections speak TLS and must authenticate with SASL first.
    """

    def __init__(
        self,
        registry: HandlerRegistry,
        host: str = "127.0.0.1",
        port: int = 9092,
        *,
        listener: str = "PLAINTEXT",
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS,
        backlog: int = DEFAULT_LISTEN_BACKLOG,
        observers: Iterable[Observer] = (),
        security: ListenerSecurity = PLAINTEXT,
        sasl_max_receive_bytes: int = DEFAULT_SASL_MAX_RECEIVE_BYTES,
        memory: RequestMemory | None = None,
        quotas: ConnectionQuotas | None = None,
    ) -> None:
        self.registry = registry
        self.host = host
        self._requested_port = port
        self.listener = listener
        self.security = security
        self.max_request_bytes = max_request_bytes
        self.sasl_max_receive_bytes = sasl_max_receive_bytes
        self.memory = memory if memory is not None else RequestMemory()
        self.quotas = quotas if quotas is not None else ConnectionQuotas(backlog=backlog)
        self._pump: asyncio.TimerHandle | None = None
        self.connections_max_idle_ms = connections_max_idle_ms
        self._backlog = backlog
        self._observers: list[Observer] = list(observers)
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._index = itertools.count()
        self._reaper: asyncio.Task[None] | None = None
        self._stopping = False

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("server already started")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self, next(self._index)),
            self.host,
            self._requested_port,
            reuse_address=True,
            backlog=self._backlog,
            ssl=self.security.ssl_context,
            ssl_handshake_timeout=_TLS_HANDSHAKE_TIMEOUT if self.security.tls else None,
        )
        if self.connections_max_idle_ms > 0:
            self._reaper = loop.create_task(self._reap_idle_connections())
        log.info(
            "listening on %s:%d (listener %s, %s)",
            self.host,
            self.port,
            self.listener,
            self.security.protocol,
        )

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("server not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def requested_port(self) -> int:
        return self._requested_port

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def add_observer(self, observer: Observer) -> None:
        self._observers.append(observer)

    async def stop(self, timeout: float = 30.0) -> None:
        """Stops accepting, lets each connection finish the requests it has already received
        (up to ``timeout`` seconds), then closes every connection."""
        if self._server is None or self._stopping:
            return
        self._stopping = True
        self._server.close()
        if self._pump is not None:
            self._pump.cancel()
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        connections = list(self._connections)
        for conn in connections:
            conn.finish_and_close()
        tasks = [conn.task for conn in connections if conn.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            if pending:
                log.warning(
                    "%d connection(s) still busy after %.1fs; closing them", len(pending), timeout
                )
                for conn in connections:
                    conn.abort()
                await asyncio.gather(*pending, return_exceptions=True)
        await self._server.wait_closed()
        log.info("stopped listening on %s:%d", self.host, self._server_port_or_requested())

    def _server_port_or_requested(self) -> int:
        try:
            return self.port
        except RuntimeError:
            return self._requested_port

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- used by connections ------------------------------------------------------------------

    def connection_made(self, conn: Connection) -> None:
        self._connections.add(conn)
        loop = asyncio.get_running_loop()
        self.quotas.arrive(self.listener, conn.peer[0], conn.start, conn.refuse, loop.time())
        if not conn.admitted:
            # Waiting on a rate: make sure someone pumps when it allows the next one.
            self._pump_later(self.quotas.pump(loop.time()))

    def connection_done(self, conn: Connection) -> None:
        self._connections.discard(conn)
        loop = asyncio.get_running_loop()
        if conn.admitted:
            self._pump_later(self.quotas.leave(self.listener, conn.peer[0], loop.time()))
        else:
            self.quotas.withdraw(conn.start)

    def _pump_later(self, at: float | None) -> None:
        if at is None or self._stopping:
            return
        if self._pump is not None:
            if self._pump.when() <= at:
                return
            self._pump.cancel()
        self._pump = asyncio.get_running_loop().call_at(at, self._pump_now)

    def _pump_now(self) -> None:
        self._pump = None
        self._pump_later(self.quotas.pump(asyncio.get_running_loop().time()))

    def observe(self, record: RequestRecord) -> None:
        for observer in self._observers:
            try:
                observer(record)
            except Exception:
                log.exception("request observer %r failed", observer)

    async def _reap_idle_connections(self) -> None:
        idle = self.connections_max_idle_ms / 1000
        while True:
            await asyncio.sleep(min(max(idle / 4, 0.05), 30.0))
            now = time.monotonic()
            for conn in list(self._connections):
                if conn.idle_since(now) > idle:
                    log.info(
                        "closing connection %s from %s: idle for more than "
                        "connections.max.idle.ms=%d",
                        conn.connection_id,
                        conn.peer_text,
                        self.connections_max_idle_ms,
                    )
                    conn.abort()


def preferred_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's event loop when it is installed, else asyncio's; for the broker entry point:
    ``with asyncio.Runner(loop_factory=preferred_loop_factory()) as runner: ...``."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop
