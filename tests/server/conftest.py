"""A real broker socket server on an ephemeral port, run in a background thread, and a raw
Kafka-wire client for poking at it with hand-built bytes."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i32, i32Timedelta

from logkeel.server.api import versions as api_versions
from logkeel.server.authorization import anyone
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.network.connection import RequestRecord
from logkeel.server.network.server import Server
from logkeel.server.protocol import ApiKey, request_schema, response_schema

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

# The rule of the stand-in handlers these servers register (they run without an authorizer).
TEST_RULE = anyone("a test handler on a server without an authorizer")


def no_error_response(ctx: RequestContext, request: Any, code: ErrorCode) -> None:
    """An error response that answers nothing: the connection is closed instead."""
    return None


class BrokerThread:
    """Runs ``Server`` on its own event loop in a thread; records every finished request."""

    def __init__(
        self,
        setup: Callable[[HandlerRegistry], None] | None = None,
        loop_factory: LoopFactory = asyncio.new_event_loop,
        **server_kwargs: Any,
    ) -> None:
        self.registry = HandlerRegistry()
        api_versions.register(self.registry)
        if setup is not None:
            setup(self.registry)
        self._loop_factory = loop_factory
        self._server_kwargs = server_kwargs
        self._records: list[RequestRecord] = []
        self._cond = threading.Condition()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> BrokerThread:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = self._loop_factory()
            asyncio.set_event_loop(loop)
            self.loop = loop
            try:
                self.server = Server(
                    self.registry, "127.0.0.1", 0, observers=[self._observe], **self._server_kwargs
                )
                loop.run_until_complete(self.server.start())
            except BaseException as exc:  # noqa: BLE001 - surfaced to the test thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="logkeel-test-broker", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        if self.loop is None or self._thread is None or self.server is None:
            return
        if self.loop.is_running():
            self.call(self.server.stop(timeout), timeout + 10)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def _observe(self, record: RequestRecord) -> None:
        with self._cond:
            self._records.append(record)
            self._cond.notify_all()

    @property
    def records(self) -> list[RequestRecord]:
        with self._cond:
            return list(self._records)

    def wait_for(
        self, predicate: Callable[[RequestRecord], bool], timeout: float = 10.0
    ) -> RequestRecord:
        """The first record matching ``predicate``, waiting for it to arrive."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for record in self._records:
                    if predicate(record):
                        return record
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"no matching request record within {timeout}s; got {self._records}"
                    )
                self._cond.wait(remaining)


@pytest.fixture
def bare_broker() -> Iterator[BrokerThread]:
    """A server with only ApiVersions registered (``broker``, from tests/conftest.py, is a
    whole ``logkeel serve`` process)."""
    b = BrokerThread().start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def make_broker() -> Iterator[Callable[..., BrokerThread]]:
    """Starts brokers with extra handlers or server settings; stops them all afterwards."""
    started: list[BrokerThread] = []

    def make(
        setup: Callable[[HandlerRegistry], None] | None = None,
        loop_factory: LoopFactory = asyncio.new_event_loop,
        **server_kwargs: Any,
    ) -> BrokerThread:
        b = BrokerThread(setup, loop_factory, **server_kwargs).start()
        started.append(b)
        return b

    yield make
    for b in started:
        b.stop()


# -- a minimal Metadata handler, so that real clients get past their bootstrap -------------------


def register_test_metadata(registry: HandlerRegistry, port: Callable[[], int]) -> None:
    """Metadata (all versions kio has) answering: one broker, node 1, at the test port; no
    topics. Not the broker's Metadata API (another module's job): just enough for clients to
    bootstrap, which also shows a handler plugging in through the registry."""

    async def handle(ctx: RequestContext, request: Any) -> Any:
        response_type = response_schema(ctx.api_key, ctx.api_version)
        assert response_type is not None
        module = importlib.import_module(response_type.__module__)
        broker_type = module.MetadataResponseBroker
        broker_fields = {f.name for f in dataclasses.fields(broker_type)}
        values = {
            "node_id": BrokerId(1),
            "host": "127.0.0.1",
            "port": i32(port()),
            "rack": None,
        }
        node = broker_type(**{k: v for k, v in values.items() if k in broker_fields})
        top = {
            "throttle_time": i32Timedelta.parse(timedelta(0)),
            "brokers": (node,),
            "cluster_id": "logkeel-test",
            "controller_id": BrokerId(1),
            "topics": (),
            "cluster_authorized_operations": i32(-(2**31)),
            "error_code": ErrorCode.none,
        }
        names = {f.name for f in dataclasses.fields(response_type)}
        return response_type(**{k: v for k, v in top.items() if k in names})

    last = max(v for v in range(20) if request_schema(ApiKey.METADATA, v) is not None)
    registry.register(
        ApiKey.METADATA, 0, last, handle, rule=TEST_RULE, error_response=no_error_response
    )


@pytest.fixture
def metadata_broker(make_broker: Callable[..., BrokerThread]) -> BrokerThread:
    """A server with ApiVersions and the test Metadata handler: real clients can bootstrap."""
    holder: list[BrokerThread] = []
    broker = make_broker(lambda r: register_test_metadata(r, lambda: holder[0].port))
    holder.append(broker)
    return broker


# -- hand-built wire bytes -----------------------------------------------------------------------


def request_header_v1(api_key: int, version: int, correlation_id: int, client_id: str) -> bytes:
    cid = client_id.encode()
    return struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid


def api_versions_request(version: int, correlation_id: int, client_id: str = "raw-test") -> bytes:
    """A complete ApiVersions request frame (size prefix included), built by hand."""
    body = request_header_v1(18, version, correlation_id, client_id)
    if version >= 3:
        body += b"\x00"  # request header v2: no tagged fields
        for text in ("raw-client", "1.0"):  # compact strings: length + 1, then the bytes
            body += bytes([len(text) + 1]) + text.encode()
        body += b"\x00"  # no tagged fields in the body
    return struct.pack(">i", len(body)) + body


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """``n`` bytes, or None if the peer closed the connection first."""
    out = bytearray()
    while len(out) < n:
        try:
            chunk = sock.recv(n - len(out))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        out += chunk
    return bytes(out)


def recv_frame(sock: socket.socket) -> bytes | None:
    """One response frame without its size prefix, or None if the connection was closed."""
    prefix = recv_exact(sock, 4)
    if prefix is None:
        return None
    (size,) = struct.unpack(">i", prefix)
    return recv_exact(sock, size)


def assert_closed_by_server(sock: socket.socket, timeout: float = 5.0) -> None:
    """The server closes the connection without sending anything more."""
    sock.settimeout(timeout)
    with contextlib.suppress(ConnectionResetError):
        data = sock.recv(65536)
        assert data == b"", f"expected the connection to be closed, got {data!r}"


def api_versions_round_trip(port: int, version: int = 3) -> bytes:
    """Sends ApiVersions on a fresh connection and returns the response frame."""
    with connect(port) as sock:
        sock.sendall(api_versions_request(version, 4242))
        frame = recv_frame(sock)
    assert frame is not None, "the server closed the connection instead of answering"
    assert struct.unpack_from(">i", frame)[0] == 4242
    return frame
