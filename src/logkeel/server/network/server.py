"""The broker's socket server: accepts connections, frames requests, dispatches, answers in order.

Each connection handles one request at a time, as Kafka's network layer does (it mutes a
channel from the moment a request is read until its response is sent). That is what keeps
responses in request order, which clients rely on, and what keeps a producer's pipelined
batches appended in the order they were sent. Bytes keep being read and split into frames
while a request is in flight, so a pipelining client is never stalled by the network, only
by the handler ahead of it; reading pauses once too many frames are queued.

A bad frame, an unknown API, an unsupported version or an exception in a handler affects only
its own connection: it is logged with the peer and request, and that connection is closed after
the responses to the requests before it have been sent. Nothing a client sends can stop the
server or reach another connection.

The server only uses asyncio's protocol/transport interface, so it runs on any event loop;
the entry point chooses uvloop when it is installed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from logkeel.server.errors import ApiError, CloseConnection, error_code_for, error_name
from logkeel.server.handlers import ApiHandler, HandlerRegistry, RequestContext
from logkeel.server.network.framing import DEFAULT_MAX_REQUEST_BYTES, FrameDecoder, FramingError
from logkeel.server.protocol import (
    ApiKey,
    InvalidRequest,
    RequestHeader,
    api_name,
    decode_request,
    encode_response,
    is_known_api,
    parse_request_header,
    peek_api,
)

__all__ = [
    "DEFAULT_CONNECTIONS_MAX_IDLE_MS",
    "Observer",
    "RequestRecord",
    "Server",
    "preferred_loop_factory",
]

log = logging.getLogger(__name__)

# Kafka's connections.max.idle.ms default.
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000
# Kafka's socket.listen.backlog.size default.
DEFAULT_LISTEN_BACKLOG = 50

# Reading from a connection pauses when this many frames (or bytes) wait behind the request in
# flight, and resumes below half of it. Clients pipeline at most a handful of requests
# (max.in.flight.requests.per.connection defaults to 5), so this only ever stops a flood.
_MAX_QUEUED_FRAMES = 64
_MAX_QUEUED_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What an observer learns about each request once it is done (for metrics and tests)."""

    connection_id: str
    peer: tuple[str, int]
    api_key: int  # -1 when the frame named no Kafka API (garbage, or too short to tell)
    api_version: int
    correlation_id: int
    client_id: str | None
    request_bytes: int  # the frame, without its size prefix
    response_bytes: int  # the response frame with its size prefix; 0 if nothing was sent
    duration: float  # seconds from the request's arrival to its response being written
    outcome: str  # "ok", "no_response", "error_response" or "closed"
    detail: str = ""  # for errors and closures: why

    @property
    def api_name(self) -> str:
        return api_name(self.api_key)


Observer = Callable[[RequestRecord], None]


class Server:
    """A Kafka-protocol listener dispatching to the handlers in ``registry``.

    ``port=0`` binds an ephemeral port; read it from ``port`` after ``start()``. Settings are
    Kafka's: ``max_request_bytes`` is socket.request.max.bytes, ``connections_max_idle_ms``
    connections.max.idle.ms (0 disables the check), ``backlog`` socket.listen.backlog.size.
    ``observers`` are called with a ``RequestRecord`` after every request (metrics hook them).
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
    ) -> None:
        self.registry = registry
        self.host = host
        self._requested_port = port
        self.listener = listener
        self.max_request_bytes = max_request_bytes
        self.connections_max_idle_ms = connections_max_idle_ms
        self._backlog = backlog
        self._observers: list[Observer] = list(observers)
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[_Connection] = set()
        self._index = itertools.count()
        self._reaper: asyncio.Task[None] | None = None
        self._stopping = False

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("server already started")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self, next(self._index)),
            self.host,
            self._requested_port,
            reuse_address=True,
            backlog=self._backlog,
        )
        if self.connections_max_idle_ms > 0:
            self._reaper = loop.create_task(self._reap_idle_connections())
        log.info("listening on %s:%d (listener %s)", self.host, self.port, self.listener)

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("server not started")
        return int(self._server.sockets[0].getsockname()[1])

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

    def _connection_made(self, conn: _Connection) -> None:
        self._connections.add(conn)

    def _connection_done(self, conn: _Connection) -> None:
        self._connections.discard(conn)

    def _observe(self, record: RequestRecord) -> None:
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


class _Connection(asyncio.Protocol):
    """One client connection: frames in, requests handled one at a time, responses out."""

    def __init__(self, server: Server, index: int) -> None:
        self._server = server
        self._index = index
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(server.max_request_bytes)
        self._frames: collections.deque[tuple[bytes, float]] = collections.deque()
        self._queued_bytes = 0
        self._waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._write_paused = False
        self._closing = False  # no more frames are taken; queued ones are still answered
        self._eof = False
        self._lost = False
        self._busy = False
        self._last_active = time.monotonic()
        self.task: asyncio.Task[None] | None = None
        self.peer: tuple[str, int] = ("", 0)
        self.peer_text = "?"
        self.connection_id = f"?-?-{index}"

    # -- asyncio.Protocol callbacks -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its interface.
        self._transport = cast(asyncio.Transport, transport)
        try:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError, AttributeError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = transport.get_extra_info("peername") or ("?", 0)
            local = transport.get_extra_info("sockname") or ("?", 0)
            self.peer = (str(peer[0]), int(peer[1]))
            self.peer_text = _host_port(self.peer)
            self.connection_id = f"{_host_port(local)}-{self.peer_text}-{self._index}"
            self._server._connection_made(self)
            self.task = asyncio.get_running_loop().create_task(
                self._run(), name=f"logkeel-connection-{self.connection_id}"
            )
        except Exception:
            log.exception("cannot set up connection %s; closing it", self.connection_id)
            self._lost = True
            self._server._connection_done(self)
            transport.abort()
            return
        log.debug("accepted connection %s", self.connection_id)

    def data_received(self, data: bytes) -> None:
        self._last_active = time.monotonic()
        if self._closing:
            return
        try:
            frames = self._decoder.feed(data)
        except FramingError as exc:
            frames = exc.frames
            log.warning(
                "closing connection %s from %s: %s", self.connection_id, self.peer_text, exc
            )
            self._stop_reading()
        for frame in frames:
            self._frames.append((frame, self._last_active))
            self._queued_bytes += len(frame)
        if (
            len(self._frames) >= _MAX_QUEUED_FRAMES or self._queued_bytes >= _MAX_QUEUED_BYTES
        ) and not self._reading_paused:
            self._reading_paused = True
            self._pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        # The client will send no more; keep the socket open to answer what it already sent
        # (a script piping requests into a socket shuts down its side right after writing).
        self._eof = True
        self._wake()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._wake()
        self._wake_drain()
        self._server._connection_done(self)
        log.debug("connection %s closed%s", self.connection_id, f": {exc}" if exc else "")

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drain()

    # -- control from the server --------------------------------------------------------------

    def finish_and_close(self) -> None:
        """Takes no more requests; answers the queued ones, then closes (graceful stop)."""
        self._stop_reading()
        self._wake()

    def abort(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.abort()
        if self.task is not None:
            self.task.cancel()

    def idle_since(self, now: float) -> float:
        if self._busy or self._frames:
            return 0.0
        return now - self._last_active

    # -- request processing -------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                item = await self._next_frame()
                if item is None:
                    break
                frame, arrived = item
                self._busy = True
                try:
                    keep_open = await self._serve(frame, arrived)
                finally:
                    self._busy = False
                    self._last_active = time.monotonic()
                if not keep_open:
                    break
        except asyncio.CancelledError:
            pass
        except Exception:
            # A bug in this module, not in a handler (those are caught in _serve); still, it
            # costs only this connection.
            log.exception("unexpected error on connection %s; closing it", self.connection_id)
        finally:
            self._closing = True
            if self._transport is not None and not self._lost:
                self._transport.close()

    async def _next_frame(self) -> tuple[bytes, float] | None:
        while True:
            if self._lost:
                return None  # nobody to answer; Kafka drops the queued requests too
            if self._frames:
                frame, arrived = self._frames.popleft()
                self._queued_bytes -= len(frame)
                if (
                    self._reading_paused
                    and not self._closing
                    and len(self._frames) <= _MAX_QUEUED_FRAMES // 2
                    and self._queued_bytes <= _MAX_QUEUED_BYTES // 2
                ):
                    self._reading_paused = False
                    self._resume_reading()
                return frame, arrived
            if self._closing or self._eof:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def _serve(self, frame: bytes, arrived: float) -> bool:
        """Handles one request frame; returns False when the connection must be closed."""
        try:
            header = parse_request_header(frame)
        except InvalidRequest as exc:
            guess = peek_api(frame)
            what = (
                f"{api_name(guess[0])} v{guess[1]}, correlation id {guess[2]}"
                if guess is not None
                else "too short to tell"
            )
            self._reject(frame, arrived, guess, None, f"malformed request header ({what}): {exc}")
            return False

        api = f"{api_name(header.api_key)} v{header.api_version}"
        entry = self._server.registry.lookup(header.api_key)
        if entry is None:
            self._reject(
                frame, arrived, header, None, f"unsupported API key {header.api_key} ({api})"
            )
            return False
        request: Any = None
        if entry.supports(header.api_version):
            try:
                request = decode_request(header, frame)
            except InvalidRequest as exc:
                self._reject(frame, arrived, header, entry, f"malformed {api} request: {exc}")
                return False
        elif header.api_key != ApiKey.API_VERSIONS:
            # Kafka closes the connection; only ApiVersions is answered at any version.
            self._reject(
                frame,
                arrived,
                header,
                entry,
                f"unsupported version {header.api_version} of {api_name(header.api_key)} "
                f"(supported: {entry.min_version}-{entry.max_version})",
            )
            return False

        ctx = RequestContext(
            api_key=header.api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id or "",
            peer=self.peer,
            connection_id=self.connection_id,
            listener=self._server.listener,
            header_version=header.header_version,
            received_at=arrived,
        )
        outcome = "ok"
        detail = ""
        try:
            response = await entry.handle(ctx, request)
        except CloseConnection as exc:
            log.info(
                "closing connection %s from %s after %s: %s",
                ctx.connection_id,
                self.peer_text,
                ctx,
                exc or "requested by the handler",
            )
            self._record(ctx, frame, 0, "closed", str(exc) or "requested by the handler")
            return False
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            code = error_code_for(exc)
            detail = f"{error_name(code)}: {exc}"
            if isinstance(exc, ApiError):
                log.info("%s from %s failed: %s", ctx, self.peer_text, detail)
            else:
                log.error("error handling %s from %s", ctx, self.peer_text, exc_info=True)
            response = None
            if entry.error_response is not None and request is not None:
                try:
                    response = entry.error_response(ctx, request, code)
                except Exception:
                    log.exception("error response for %s failed", ctx)
            if response is None:
                log.warning(
                    "closing connection %s from %s: %s failed with %s and has no error response",
                    ctx.connection_id,
                    self.peer_text,
                    ctx,
                    detail,
                )
                self._record(ctx, frame, 0, "closed", detail)
                return False
            outcome = "error_response"

        if response is None:
            self._record(ctx, frame, 0, "no_response", "")
            return True
        expected_version = ctx.api_version if entry.supports(ctx.api_version) else 0
        if (
            getattr(response, "__api_key__", None) != ctx.api_key
            or getattr(response, "__version__", None) != expected_version
        ):
            log.error(
                "closing connection %s: the handler of %s returned %r, not a %s v%d response",
                ctx.connection_id,
                ctx,
                type(response).__name__,
                ctx.api_name,
                expected_version,
            )
            self._record(ctx, frame, 0, "closed", "handler returned the wrong response type")
            return False
        if getattr(response, "frame_parts", None) is not None:
            return await self._send_parts_response(ctx, frame, response, outcome, detail)
        try:
            data = encode_response(ctx.correlation_id, response)
        except Exception:
            log.exception(
                "closing connection %s: cannot encode the response to %s", ctx.connection_id, ctx
            )
            self._record(ctx, frame, 0, "closed", "response encoding failed")
            return False
        if self._lost:
            return False
        assert self._transport is not None
        self._transport.write(data)
        self._last_active = time.monotonic()
        await self._drain()
        self._record(ctx, frame, len(data), outcome, detail)
        return True

    # -- zero-copy responses ------------------------------------------------------------------

    async def _send_parts_response(
        self, ctx: RequestContext, frame: bytes, response: Any, outcome: str, detail: str
    ) -> bool:
        """Sends a response that encodes itself: besides ``__api_key__``/``__version__`` it has
        ``frame_parts(correlation_id)`` returning the whole frame (size prefix included) as a
        list of bytes and file regions (objects with ``fd``, ``position``, ``size``,
        ``read_bytes()``), and optionally ``close()``, called once it is sent or dropped.
        The regions go from the segment files to the socket with ``sendfile``, never through
        Python (Fetch's zero-copy path)."""
        try:
            try:
                parts = response.frame_parts(ctx.correlation_id)
            except Exception:
                log.exception(
                    "closing connection %s: cannot encode the response to %s",
                    ctx.connection_id,
                    ctx,
                )
                self._record(ctx, frame, 0, "closed", "response encoding failed")
                return False
            if self._lost:
                return False
            try:
                sent = await self._send_parts(parts)
            except (OSError, EOFError) as exc:
                # A client that went away mid-response is routine (a consumer closing during
                # a long poll); anything else is worth a warning.
                level = logging.INFO if isinstance(exc, ConnectionError) else logging.WARNING
                log.log(
                    level,
                    "closing connection %s from %s: sending the response to %s failed: %s",
                    ctx.connection_id,
                    self.peer_text,
                    ctx,
                    exc,
                )
                self._record(ctx, frame, 0, "closed", f"send failed: {exc}")
                return False
        finally:
            close = getattr(response, "close", None)
            if close is not None:
                close()
        self._last_active = time.monotonic()
        self._record(ctx, frame, sent, outcome, detail)
        return True

    async def _send_parts(self, parts: list[Any]) -> int:
        """Writes ``parts`` (bytes, or regions with ``fd``/``position``/``size``) in order."""
        assert self._transport is not None
        transport = self._transport
        total = sum(len(p) for p in parts)
        if all(isinstance(p, bytes | bytearray | memoryview) for p in parts):
            transport.write(b"".join(parts))
            await self._drain()
            return total
        sock = transport.get_extra_info("socket")
        if sock is None or not hasattr(os, "sendfile"):
            # No socket to sendfile into (e.g. a TLS transport): one copy per region.
            for part in parts:
                if not isinstance(part, bytes | bytearray | memoryview):
                    part = await asyncio.to_thread(part.read_bytes)
                transport.write(part)
                await self._drain()
            return total
        # Our bytes go around the transport, so whatever it still buffers must go first.
        delay = 0.0005
        while transport.get_write_buffer_size() > 0:
            if self._lost:
                raise ConnectionResetError("connection lost")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)
        # A duplicate descriptor: if the transport is aborted meanwhile, this one still names
        # the same socket (never a newly opened file that reused the number).
        fd = os.dup(sock.fileno())
        try:
            loop = asyncio.get_running_loop()
            for part in parts:
                if isinstance(part, bytes | bytearray | memoryview):
                    view = memoryview(part)
                    while view:
                        try:
                            n = os.write(fd, view)
                        except BlockingIOError:
                            await _wait_writable(loop, fd)
                            continue
                        view = view[n:]
                    continue
                offset, remaining = part.position, part.size
                while remaining > 0:
                    n = await loop.run_in_executor(
                        _sendfile_executor(), _sendfile_some, fd, part.fd, offset, remaining
                    )
                    if n < 0:
                        await _wait_writable(loop, fd)
                    elif n == 0:
                        raise EOFError(
                            f"file region ended {remaining} bytes early (segment truncated?)"
                        )
                    else:
                        offset += n
                        remaining -= n
        finally:
            os.close(fd)
        return total

    # -- helpers ------------------------------------------------------------------------------

    def _reject(
        self,
        frame: bytes,
        arrived: float,
        header: RequestHeader | tuple[int, int, int] | None,
        entry: ApiHandler | None,
        reason: str,
    ) -> None:
        """Logs why this request closes the connection, and tells the observers."""
        if isinstance(header, RequestHeader):
            who = (
                f"api key {header.api_key}, correlation id {header.correlation_id}, "
                f"client id {header.client_id!r}"
            )
            api_key, api_version, corr, client_id = (
                header.api_key,
                header.api_version,
                header.correlation_id,
                header.client_id,
            )
        elif header is not None:
            who = f"api key {header[0]}, correlation id {header[2]}"
            (api_key, api_version, corr), client_id = header, None
        else:
            who = "no header"
            api_key, api_version, corr, client_id = -1, -1, -1, None
        if not is_known_api(api_key):
            # Garbage, not an API: observers (metrics labels) must not see one key per byte
            # pattern a scanner sends.
            api_key = -1
        log.warning(
            "closing connection %s from %s: %s (%s, %d bytes)",
            self.connection_id,
            self.peer_text,
            reason,
            who,
            len(frame),
        )
        self._server._observe(
            RequestRecord(
                connection_id=self.connection_id,
                peer=self.peer,
                api_key=api_key,
                api_version=api_version,
                correlation_id=corr,
                client_id=client_id,
                request_bytes=len(frame),
                response_bytes=0,
                duration=time.monotonic() - arrived,
                outcome="closed",
                detail=reason,
            )
        )

    def _record(
        self, ctx: RequestContext, frame: bytes, response_bytes: int, outcome: str, detail: str
    ) -> None:
        self._server._observe(
            RequestRecord(
                connection_id=ctx.connection_id,
                peer=ctx.peer,
                api_key=ctx.api_key,
                api_version=ctx.api_version,
                correlation_id=ctx.correlation_id,
                client_id=ctx.client_id,
                request_bytes=len(frame),
                response_bytes=response_bytes,
                duration=time.monotonic() - ctx.received_at,
                outcome=outcome,
                detail=detail,
            )
        )

    async def _drain(self) -> None:
        while self._write_paused and not self._lost:
            self._drain_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._drain_waiter
            finally:
                self._drain_waiter = None

    def _stop_reading(self) -> None:
        if self._closing:
            return
        self._closing = True
        if not self._reading_paused:
            self._reading_paused = True
            self._pause_reading()

    def _pause_reading(self) -> None:
        if self._transport is not None and not self._lost:
            with contextlib.suppress(RuntimeError):  # already closing
                self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._transport is not None and not self._lost:
            with contextlib.suppress(RuntimeError):
                self._transport.resume_reading()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _wake_drain(self) -> None:
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)


_SENDFILE_THREADS = 4
_sendfile_pool: ThreadPoolExecutor | None = None


def _sendfile_executor() -> ThreadPoolExecutor:
    """Threads for ``sendfile``: the socket never blocks them (it is non-blocking), but the
    file side reads from disk when the data is not cached, which must not stall the loop."""
    global _sendfile_pool
    if _sendfile_pool is None:
        _sendfile_pool = ThreadPoolExecutor(
            _SENDFILE_THREADS, thread_name_prefix="logkeel-sendfile"
        )
    return _sendfile_pool


def _sendfile_some(out_fd: int, in_fd: int, offset: int, count: int) -> int:
    """Bytes sent (0: the file ended), or -1 when the socket buffer is full."""
    try:
        return os.sendfile(out_fd, in_fd, offset, count)
    except BlockingIOError:
        return -1


async def _wait_writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    fut: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, ready)
    try:
        await fut
    finally:
        loop.remove_writer(fd)


def preferred_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's event loop when it is installed, else asyncio's; for the broker entry point:
    ``with asyncio.Runner(loop_factory=preferred_loop_factory()) as runner: ...``."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def _host_port(address: tuple[Any, ...]) -> str:
    host = str(address[0])
    return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
