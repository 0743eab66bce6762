"""One client connection: frames in, requests handled one at a time, responses out in order.

Each connection handles one request at a time, as Kafka's network layer does (it mutes a
channel from the moment a request is read until its response is sent), with one exception:
Produce. A producer pipelines its requests (max.in.flight.requests.per.connection), and
serving them one at a time makes each wait for the one before to be written to the page cache
(and, with acks=all, replicated) before it is even decoded. So once a Produce has handed its
appends to the IO threads (``RequestContext.release``), the next queued Produce starts; appends
to one partition still run in the order they were handed over (the IO side keeps a turn per
partition), and every response still waits for the one before it to be sent, so clients see
responses in request order. Any other request waits until everything before it is answered.
Bytes keep being read and split into frames while requests are in flight; reading pauses once
too many frames are queued, and while the broker-wide budget of request bytes
(``queued.max.request.bytes``, ``RequestMemory``) refuses the memory a frame being received
needs, or is spent while this connection holds requests of its own (a connection holding none
may always read one small frame, so no client is starved by others' large ones). Before a
successful SASL login, frames are limited to ``sasl.server.max.receive.size``.

A bad frame, an unknown API, an unsupported version or an exception in a handler affects only
its own connection: it is logged with the peer and request, and that connection is closed after
the responses to the requests before it have been sent.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from logkeel.server.errors import ApiError, CloseConnection, error_code_for, error_name
from logkeel.server.handlers import ApiHandler, HandlerRegistry, RequestContext
from logkeel.server.network.admission import Refused, admit
from logkeel.server.network.framing import SIZE_PREFIX, Frame, FrameDecoder, FramingError
from logkeel.server.network.request_memory import RequestMemory
from logkeel.server.network.security import ListenerSecurity
from logkeel.server.network.zero_copy import send_parts
from logkeel.server.protocol import (
    ApiKey,
    RequestHeader,
    api_name,
    encode_response,
    is_known_api,
)
from logkeel.server.session import ANONYMOUS, SaslFailure

__all__ = ["Connection", "ConnectionOwner", "Observer", "RequestRecord"]

log = logging.getLogger(__name__)

_MUTE_SLACK_S = 0.01

# Reading from a connection pauses when this many frames (or bytes) wait behind the request in
# flight, and resumes below half of it. Clients pipeline at most a handful of requests
# (max.in.flight.requests.per.connection defaults to 5), so this only ever stops a flood.
_MAX_QUEUED_FRAMES = 64
_MAX_QUEUED_BYTES = 64 * 1024 * 1024
# Produce requests of one connection in flight at once (librdkafka and the Java client send at
# most 5 by default).
_MAX_PIPELINED = 8
_PRODUCE_KEY = ApiKey.PRODUCE.to_bytes(2, "big")


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


class ConnectionOwner(Protocol):
    """What a connection needs from the listener that accepted it."""

    registry: HandlerRegistry
    listener: str
    security: ListenerSecurity
    max_request_bytes: int
    sasl_max_receive_bytes: int
    memory: RequestMemory

    def connection_made(self, conn: Connection) -> None: ...

    def connection_done(self, conn: Connection) -> None: ...

    def observe(self, record: RequestRecord) -> None: ...


class Connection(asyncio.BufferedProtocol):
    """One client connection: frames in, requests handled one at a time, responses out."""

    def __init__(self, owner: ConnectionOwner, index: int) -> None:
        self._owner = owner
        self._index = index
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(owner.max_request_bytes, owner.memory)
        self._frames: collections.deque[tuple[Frame, float]] = collections.deque()
        self._queued_bytes = 0
        self._held = 0  # bytes of this connection's frames reserved in owner.memory
        self._waiting_memory = False
        self._waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._write_paused = False
        self._closing = False  # no more frames are taken; queued ones are still answered
        self._eof = False
        self._lost = False
        self._in_flight = 0  # requests being served (more than one only for pipelined Produce)
        # A client over its quota: nothing is read or served before this time.monotonic().
        self._muted_until = 0.0
        self._last_active = time.monotonic()
        self.task: asyncio.Task[None] | None = None
        self.admitted = False  # by the connection limits: served from now on
        self.peer: tuple[str, int] = ("", 0)
        self.peer_text = "?"
        self.connection_id = f"?-?-{index}"
        self.session = owner.security.new_session(owner.listener, None)

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
            # asyncio calls this once the TLS handshake is done: the certificate is known.
            self.session = self._owner.security.new_session(
                self._owner.listener, transport.get_extra_info("peercert")
            )
            self._set_frame_limit()
            if self.session.principal != ANONYMOUS:
                log.info(
                    "connection %s: TLS client certificate principal %s",
                    self.connection_id,
                    self.session.principal,
                )
            # Connection limits: the owner calls start() now or once there is room, or
            # refuse() (see connection_quotas).
            self._owner.connection_made(self)
            if not self.admitted and not self._closing:
                self._reading_paused = True
                self._pause_reading()
        except Exception:
            log.exception("cannot set up connection %s; closing it", self.connection_id)
            self._lost = True
            self._owner.connection_done(self)
            self._transport.abort()
            return
        log.debug("accepted connection %s", self.connection_id)

    def get_buffer(self, sizehint: int) -> memoryview:
        # Straight into the frame decoder's buffers: a large request is read from the socket
        # into its own buffer, never copied in Python (see framing.FrameDecoder).
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._last_active = time.monotonic()
        if self._closing:
            return
        try:
            frames = self._decoder.buffer_updated(nbytes)
        except FramingError as exc:
            frames = exc.frames
            log.warning(
                "closing connection %s from %s: %s", self.connection_id, self.peer_text, exc
            )
            self._stop_reading()
        for frame in frames:
            self._frames.append((frame, self._last_active))
            self._queued_bytes += len(frame)
            self._held += len(frame)
        self._update_reading()
        self._wake()

    def eof_received(self) -> bool:
        # The client will send no more; keep the socket open to answer what it already sent
        # (a script piping requests into a socket shuts down its side right after writing).
        self._eof = True
        self._wake()
        # Under TLS the transport closes on EOF whatever is returned (asyncio warns on True).
        return not self._owner.security.tls

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._free_memory()
        self._wake()
        self._wake_drain()
        self._owner.connection_done(self)
        log.debug("connection %s closed%s", self.connection_id, f": {exc}" if exc else "")

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drain()

    # -- control from the server --------------------------------------------------------------

    def start(self) -> None:
        """Serves the connection (the connection limits let it in)."""
        self.admitted = True
        if self._lost:
            return
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"logkeel-connection-{self.connection_id}"
        )
        if self._reading_paused:
            self._reading_paused = False
            self._resume_reading()

    def refuse(self, reason: str) -> None:
        """Closes a connection the connection limits do not let in."""
        log.info("closing connection %s from %s: %s", self.connection_id, self.peer_text, reason)
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    def finish_and_close(self) -> None:
        """Takes no more requests; answers the queued ones, then closes (graceful stop)."""
        if not self.admitted:  # waiting for a slot: nothing to answer
            self.abort()
            return
        self._stop_reading()
        self._wake()

    def abort(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.abort()
        if self.task is not None:
            self.task.cancel()

    def idle_since(self, now: float) -> float:
        if self._in_flight or self._frames:
            return 0.0
        return now - self._last_active

    # -- request processing -------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        # Pipelined Produce requests still in flight, oldest first; each one's response waits
        # for the one before it.
        pipelined: collections.deque[asyncio.Task[bool]] = collections.deque()
        taken: Frame | None = None  # popped from the queue, not handed to a server yet
        try:
            while True:
                item = await self._next_frame()
                if item is None:
                    break
                frame, arrived = item
                taken = frame
                if frame[:2] == _PRODUCE_KEY and not self.session.raw_tokens:
                    while len(pipelined) >= _MAX_PIPELINED or (pipelined and pipelined[0].done()):
                        if not await pipelined.popleft():
                            return
                    released: asyncio.Future[None] = loop.create_future()
                    task = loop.create_task(
                        self._serve_counted(
                            frame, arrived, pipelined[-1] if pipelined else None, released
                        )
                    )
                    # Its memory goes back when it is done, even if cancelled before it ran.
                    task.add_done_callback(functools.partial(self._frame_done, frame))
                    taken = None
                    pipelined.append(task)
                    # The next request starts once this one's appends are handed over in order.
                    await asyncio.wait((task, released), return_when=asyncio.FIRST_COMPLETED)
                    if task.done() and not task.result():
                        return
                    continue
                while pipelined:
                    if not await pipelined.popleft():
                        return
                taken = None
                try:
                    if not await self._serve_counted(frame, arrived, None, None):
                        break
                finally:
                    self._frame_done(frame)
        except asyncio.CancelledError:
            for task in pipelined:
                task.cancel()
        except Exception:
            # A bug in this module, not in a handler (those are caught in _serve); still, it
            # costs only this connection.
            log.exception("unexpected error on connection %s; closing it", self.connection_id)
        finally:
            self._closing = True
            # Answer what is already in flight before closing (a no-op once one said close).
            with contextlib.suppress(asyncio.CancelledError, Exception):
                for task in pipelined:
                    await task
            if self._transport is not None and not self._lost:
                self._transport.close()
            if taken is not None:
                self._frame_done(taken)
            self._free_memory()

    async def _serve_counted(
        self,
        frame: Frame,
        arrived: float,
        before: asyncio.Task[bool] | None,
        released: asyncio.Future[None] | None,
    ) -> bool:
        self._in_flight += 1
        try:
            return await self._serve(frame, arrived, before, released)
        finally:
            self._in_flight -= 1
            self._last_active = time.monotonic()
            _settle(released)

    def _frame_done(self, frame: Frame, _: object = None) -> None:
        """A request taken from the queue is done (or dropped): its memory goes back."""
        self._held -= len(frame)
        self._owner.memory.release(len(frame))
        self._set_frame_limit()
        self._update_reading()

    async def _next_frame(self) -> tuple[Frame, float] | None:
        while True:
            if self._lost:
                return None  # nobody to answer; Kafka drops the queued requests too
            muted_for = self._muted_until - time.monotonic()
            if muted_for > 0:
                # Woken early by a frame, EOF or the loss: checked again above.
                await self._wait(muted_for)
                continue
            if self._frames:
                frame, arrived = self._frames.popleft()
                self._queued_bytes -= len(frame)
                self._update_reading()
                return frame, arrived
            if self._closing or self._eof:
                return None
            await self._wait(None)

    async def _wait(self, timeout: float | None) -> None:
        """Until ``_wake`` (a frame, EOF, loss) or ``timeout`` seconds."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            if timeout is None:
                await self._waiter
            else:
                await asyncio.wait((self._waiter,), timeout=timeout)
        finally:
            self._waiter = None

    async def _serve(
        self,
        frame: Frame,
        arrived: float,
        before: asyncio.Task[bool] | None = None,
        released: asyncio.Future[None] | None = None,
    ) -> bool:
        """Handles one request frame; returns False when the connection must be closed.

        ``before``: the pipelined request ahead of this one, whose response goes first (this
        one answers nothing if that one closed the connection); ``released`` is set once this
        request's appends are handed over (see the module's docstring)."""
        if self.session.raw_tokens:
            return await self._serve_raw_token(frame)
        admitted = admit(frame, self.session, self._owner.registry)
        if isinstance(admitted, Refused):
            self._reject(frame, arrived, admitted.header, admitted.entry, admitted.reason)
            return False
        header, entry, request = admitted.header, admitted.entry, admitted.request

        ctx = RequestContext(
            api_key=header.api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id or "",
            peer=self.peer,
            connection_id=self.connection_id,
            listener=self._owner.listener,
            header_version=header.header_version,
            received_at=arrived,
            session=self.session,
            release=functools.partial(_settle, released),
            size=len(frame),
            mute=self._mute,
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

        if before is not None and not await before:
            return False  # the request ahead closed the connection: nothing more is answered
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
        self._mute_if_throttled(response)
        self._record(ctx, frame, len(data), outcome, detail)
        return not self.session.close_after_response

    async def _serve_raw_token(self, frame: Frame) -> bool:
        """A SASL token after SaslHandshake v0: no Kafka header, answered with the bare
        size-prefixed server token; a failure closes the connection without an answer."""
        try:
            answer = self.session.step(bytes(frame))
        except SaslFailure as exc:
            log.info(
                "failed authentication from %s on connection %s: %s",
                self.peer_text,
                self.connection_id,
                exc,
            )
            return False
        if self._lost or self._transport is None:
            return False
        self._transport.write(SIZE_PREFIX.pack(len(answer)) + answer)
        await self._drain()
        return True

    # -- zero-copy responses ------------------------------------------------------------------

    async def _send_parts_response(
        self, ctx: RequestContext, frame: Frame, response: Any, outcome: str, detail: str
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
            if self._lost or self._transport is None:
                return False
            try:
                sent = await send_parts(
                    self._transport,
                    parts,
                    self._drain,
                    lambda: self._lost,
                    zero_copy=not self._owner.security.tls,
                    # The response may want to know how long its records took to come off
                    # the disk (a follower's Fetch: whether the disk or the CPU was slow).
                    on_file_read=getattr(response, "file_read", None),
                )
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
        self._mute_if_throttled(response)
        self._record(ctx, frame, sent, outcome, detail)
        return True

    # -- helpers ------------------------------------------------------------------------------

    def _reject(
        self,
        frame: Frame,
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
        self._owner.observe(
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
        self, ctx: RequestContext, frame: Frame, response_bytes: int, outcome: str, detail: str
    ) -> None:
        self._owner.observe(
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

    def _set_frame_limit(self) -> None:
        """Kafka reads at most sasl.server.max.receive.size per frame until a SASL login has
        succeeded on a SASL listener (a client that has not proven anything cannot make the
        broker buffer 100 MB)."""
        if self.session.authenticated:
            self._decoder.set_limit(self._owner.max_request_bytes, "socket.request.max.bytes")
        else:
            self._decoder.set_limit(
                min(self._owner.sasl_max_receive_bytes, self._owner.max_request_bytes),
                "sasl.server.max.receive.size",
            )

    def _update_reading(self) -> None:
        """Pauses or resumes reading for the queue of this connection and the broker's request
        memory (see the module's docstring); paused for memory, it waits to be called back."""
        if self._closing or self._lost:
            return
        memory = self._owner.memory
        wants_memory = self._decoder.blocked or (memory.exhausted and self._held > 0)
        muted = time.monotonic() < self._muted_until
        if self._reading_paused:
            if (
                not wants_memory
                and not muted
                and len(self._frames) <= _MAX_QUEUED_FRAMES // 2
                and self._queued_bytes <= _MAX_QUEUED_BYTES // 2
            ):
                self._reading_paused = False
                self._resume_reading()
        elif (
            wants_memory
            or muted
            or len(self._frames) >= _MAX_QUEUED_FRAMES
            or self._queued_bytes >= _MAX_QUEUED_BYTES
        ):
            self._reading_paused = True
            self._pause_reading()
            if wants_memory:
                log.debug(
                    "connection %s: reading paused, queued.max.request.bytes spent (%d of %d)",
                    self.connection_id,
                    memory.used,
                    memory.limit,
                )
        if wants_memory and not self._waiting_memory:
            self._waiting_memory = True
            memory.wait(self._memory_freed)

    def _mute_if_throttled(self, response: Any) -> None:
        """KIP-219: a response that tells the client it is throttled has been sent; the
        connection now reads and serves nothing for that long (Kafka mutes the channel)."""
        throttle = getattr(response, "throttle_time", None)
        if throttle is not None:
            self._mute(throttle.total_seconds() * 1000)

    def _mute(self, throttle_ms: float) -> None:
        seconds = throttle_ms / 1000
        if seconds <= 0:
            return
        self._muted_until = max(self._muted_until, time.monotonic() + seconds)
        self._update_reading()
        asyncio.get_running_loop().call_later(seconds, self._unmute)

    def _unmute(self) -> None:
        # The loop runs a timer up to its clock resolution early: within that, the mute is over
        # (reading would otherwise stay paused with no timer left to resume it).
        if self._muted_until - time.monotonic() <= _MUTE_SLACK_S:
            self._muted_until = 0.0
            self._update_reading()

    def _memory_freed(self) -> None:
        self._waiting_memory = False
        if self._closing or self._lost:
            return
        if self._decoder.blocked:
            self._decoder.retry_memory()
        self._update_reading()

    def _free_memory(self) -> None:
        """Gives back the memory of the frame being received and of the queued ones (a frame
        being served gives its own back when done)."""
        memory = self._owner.memory
        if self._waiting_memory:
            self._waiting_memory = False
            memory.cancel(self._memory_freed)
        self._decoder.close()
        queued = sum(len(frame) for frame, _ in self._frames)
        self._frames.clear()
        self._queued_bytes = 0
        self._held -= queued
        memory.release(queued)

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


def _host_port(address: tuple[Any, ...]) -> str:
    host = str(address[0])
    return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"


def _settle(released: asyncio.Future[None] | None) -> None:
    """Marks a pipelined request's appends as handed over (once; a no-op for other requests)."""
    if released is not None and not released.done():
        released.set_result(None)
