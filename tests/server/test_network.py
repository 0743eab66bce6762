"""The socket server with real sockets and real clients: raw bytes, kafka-python,
confluent-kafka (librdkafka) and kcat."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import uvloop
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import ApiVersionsRequest as KpApiVersionsRequest
from kafka.protocol.metadata import ApiVersionsResponse as KpApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v0 import ListGroupsRequest, ListGroupsResponse

from logkeel.server.errors import ApiError, CloseConnection
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey, encode_request
from tests.waiting import wait_until

from .conftest import (
    TEST_RULE,
    BrokerThread,
    api_versions_request,
    api_versions_round_trip,
    assert_closed_by_server,
    connect,
    no_error_response,
    recv_frame,
    request_header_v1,
)

MakeBroker = Callable[..., BrokerThread]


def _parse_api_versions_v0(frame: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """(correlation id, error code, [(api key, min, max)]) of a v0 response, by hand."""
    correlation_id, error_code, count = struct.unpack_from(">ihi", frame, 0)
    entries = [struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(count)]
    assert len(frame) == 10 + 6 * count
    return correlation_id, error_code, entries


def _list_groups_request(correlation_id: int) -> bytes:
    return encode_request(ListGroupsRequest(), correlation_id, "test")


def _register_list_groups(
    registry: HandlerRegistry,
    handle: Callable[[RequestContext, Any], Any],
    error_response: Any = no_error_response,
) -> None:
    registry.register(
        ApiKey.LIST_GROUPS, 0, 0, handle, rule=TEST_RULE, error_response=error_response
    )


# -- ApiVersions over raw sockets --------------------------------------------------------------


def test_raw_api_versions_v0(bare_broker: BrokerThread) -> None:
    frame = api_versions_round_trip(bare_broker.port, version=0)
    correlation_id, error_code, entries = _parse_api_versions_v0(frame)
    assert (correlation_id, error_code, entries) == (4242, 0, [(18, 0, 4)])


def test_raw_api_versions_v3_decodes_with_kafka_python(bare_broker: BrokerThread) -> None:
    frame = api_versions_round_trip(bare_broker.port, version=3)
    # Response header v0: the body starts right after the correlation id.
    assert frame[4:] == b"\x00\x00\x02\x00\x12\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00"
    decoded = KpApiVersionsResponse.decode(frame, version=3, header=True)
    assert decoded.error_code == 0
    assert [(a.api_key, a.min_version, a.max_version) for a in decoded.api_keys] == [(18, 0, 4)]
    record = bare_broker.wait_for(lambda r: r.api_key == 18)
    assert (record.api_version, record.outcome, record.client_id) == (3, "ok", "raw-test")
    assert record.response_bytes == len(frame) + 4


def test_kafka_python_encoded_api_versions_every_version(bare_broker: BrokerThread) -> None:
    with connect(bare_broker.port) as sock:
        for version in range(5):
            request = KpApiVersionsRequest(
                version=version, client_software_name="kafka-python", client_software_version="3"
            )
            request.with_header(correlation_id=100 + version, client_id="kp")
            sock.sendall(bytes(request.encode(header=True, framed=True)))
            frame = recv_frame(sock)
            assert frame is not None
            decoded = KpApiVersionsResponse.decode(frame, version=version, header=True)
            assert decoded.header.correlation_id == 100 + version
            assert decoded.error_code == 0
            assert [(a.api_key, a.max_version) for a in decoded.api_keys] == [(18, 4)]


def test_unsupported_api_versions_version_is_answered_in_v0(bare_broker: BrokerThread) -> None:
    with connect(bare_broker.port) as sock:
        sock.sendall(api_versions_request(9, 1))  # a future, flexible version
        frame = recv_frame(sock)
        assert frame is not None
        assert _parse_api_versions_v0(frame) == (1, 35, [(18, 0, 4)])
        # The client steps down and carries on, on the same connection.
        sock.sendall(api_versions_request(4, 2))
        frame = recv_frame(sock)
        assert frame is not None and struct.unpack_from(">ih", frame) == (2, 0)


def test_pipelined_requests_are_answered_in_order(bare_broker: BrokerThread) -> None:
    versions = [0, 3, 1, 4, 2, 9, 3, 0] * 25  # 200 requests, more than the read queue holds
    with connect(bare_broker.port) as sock:
        sock.sendall(b"".join(api_versions_request(v, i) for i, v in enumerate(versions)))
        for i, version in enumerate(versions):
            frame = recv_frame(sock)
            assert frame is not None
            correlation_id, error_code = struct.unpack_from(">ih", frame)
            assert correlation_id == i
            assert error_code == (35 if version == 9 else 0)


def test_half_closed_client_still_gets_its_answers(bare_broker: BrokerThread) -> None:
    with connect(bare_broker.port) as sock:
        sock.sendall(api_versions_request(3, 1) + api_versions_request(0, 2))
        sock.shutdown(socket.SHUT_WR)
        assert struct.unpack_from(">i", recv_frame(sock) or b"")[0] == 1
        assert struct.unpack_from(">i", recv_frame(sock) or b"")[0] == 2
        assert_closed_by_server(sock)


def test_port_zero_binds_an_ephemeral_port(bare_broker: BrokerThread) -> None:
    assert 0 < bare_broker.port < 65536
    assert bare_broker.server is not None and bare_broker.server.connection_count == 0


# -- bad input: the connection closes, the server keeps serving -----------------------------------


def _closes_then_serves(
    bare_broker: BrokerThread, payload: bytes, caplog: pytest.LogCaptureFixture, expect_log: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="logkeel.server.network.connection"):
        with connect(bare_broker.port) as sock:
            sock.sendall(payload)
            assert_closed_by_server(sock)
        wait_until(lambda: expect_log in caplog.text, 5, f"{expect_log!r} logged")
    assert "127.0.0.1:" in caplog.text  # the peer is named
    api_versions_round_trip(bare_broker.port)


def test_oversized_frame_closes_the_connection(
    make_broker: MakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker(max_request_bytes=1000)
    # Only the size is sent: the server must not wait for the 1001 bytes to close.
    _closes_then_serves(
        broker,
        struct.pack(">i", 1001),
        caplog,
        "request size 1001 is larger than socket.request.max.bytes (1000)",
    )


def test_default_limit_rejects_a_200mb_size(
    bare_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    _closes_then_serves(bare_broker, struct.pack(">i", 200 * 1024 * 1024), caplog, "larger than")


def test_negative_size_closes_the_connection(
    bare_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    _closes_then_serves(bare_broker, struct.pack(">i", -5), caplog, "invalid request size -5")


def test_garbage_body_closes_the_connection_with_a_clear_log_line(
    bare_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    body = request_header_v1(18, 3, 77, "garbler") + b"\x00" + b"\xff\xff\xff"
    _closes_then_serves(
        bare_broker, struct.pack(">i", len(body)) + body, caplog, "malformed ApiVersions v3 request"
    )
    assert "correlation id 77, client id 'garbler'" in caplog.text


def test_too_short_header_closes_the_connection(
    bare_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    _closes_then_serves(bare_broker, b"\x00\x00\x00\x03abc", caplog, "malformed request header")


def test_unknown_api_key_closes_the_connection(
    bare_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    body = request_header_v1(4242, 0, 5, "who")
    _closes_then_serves(
        bare_broker, struct.pack(">i", len(body)) + body, caplog, "unsupported API key 4242"
    )
    record = bare_broker.wait_for(lambda r: r.outcome == "closed")
    assert record.api_key == -1  # not a Kafka API: observers get no per-garbage label
    assert "unsupported API key 4242" in record.detail


def test_unregistered_api_closes_the_connection(
    bare_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    _closes_then_serves(
        bare_broker, _list_groups_request(3), caplog, "unsupported API key 16 (ListGroups v0)"
    )


def test_unsupported_version_of_an_api_closes_the_connection(
    make_broker: MakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    async def handle(ctx: RequestContext, request: Any) -> Any:
        return ListGroupsResponse(error_code=ErrorCode.none, groups=())

    broker = make_broker(lambda r: _register_list_groups(r, handle))
    body = request_header_v1(16, 1, 5, "old-client") + b"\x00\x00\x00\x00"
    _closes_then_serves(
        broker,
        struct.pack(">i", len(body)) + body,
        caplog,
        "unsupported version 1 of ListGroups (supported: 0-0)",
    )


def test_requests_before_a_bad_one_are_answered_first(bare_broker: BrokerThread) -> None:
    with connect(bare_broker.port) as sock:
        sock.sendall(
            api_versions_request(3, 1) + api_versions_request(0, 2) + struct.pack(">i", -1)
        )
        assert struct.unpack_from(">i", recv_frame(sock) or b"")[0] == 1
        assert struct.unpack_from(">i", recv_frame(sock) or b"")[0] == 2
        assert_closed_by_server(sock)


def test_client_vanishing_mid_frame_does_not_disturb_the_server(bare_broker: BrokerThread) -> None:
    for _ in range(5):
        with connect(bare_broker.port) as sock:
            sock.sendall(api_versions_request(3, 1)[:7])
    api_versions_round_trip(bare_broker.port)


# -- handlers: no response, errors, ordering, long waits ----------------------------------------


def test_none_response_sends_nothing_and_later_requests_are_answered(
    make_broker: MakeBroker,
) -> None:
    async def handle(ctx: RequestContext, request: Any) -> Any:
        return None  # what Produce does for acks=0

    broker = make_broker(lambda r: _register_list_groups(r, handle))
    with connect(broker.port) as sock:
        sock.sendall(_list_groups_request(1) + api_versions_request(3, 2))
        frame = recv_frame(sock)
        assert frame is not None and struct.unpack_from(">i", frame)[0] == 2
    record = broker.wait_for(lambda r: r.api_key == 16)
    assert record.outcome == "no_response" and record.response_bytes == 0


def test_api_error_becomes_the_registered_error_response(make_broker: MakeBroker) -> None:
    async def handle(ctx: RequestContext, request: Any) -> Any:
        raise ApiError(ErrorCode.coordinator_not_available, "no coordinator yet")

    def error_response(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        return ListGroupsResponse(error_code=code, groups=())

    broker = make_broker(lambda r: _register_list_groups(r, handle, error_response))
    with connect(broker.port) as sock:
        sock.sendall(_list_groups_request(8))
        frame = recv_frame(sock)
        assert frame is not None
        assert struct.unpack_from(">ih", frame) == (8, 15)  # COORDINATOR_NOT_AVAILABLE
        sock.sendall(api_versions_request(3, 9))  # the connection stays usable
        assert struct.unpack_from(">i", recv_frame(sock) or b"")[0] == 9
    record = broker.wait_for(lambda r: r.api_key == 16)
    assert record.outcome == "error_response"
    assert "COORDINATOR_NOT_AVAILABLE" in record.detail


def test_handler_bug_without_error_response_closes_only_that_connection(
    make_broker: MakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    async def handle(ctx: RequestContext, request: Any) -> Any:
        raise ZeroDivisionError("handler bug")

    broker = make_broker(lambda r: _register_list_groups(r, handle))
    with (
        caplog.at_level(logging.ERROR, logger="logkeel.server.network.connection"),
        connect(broker.port) as other,
    ):
        other.sendall(api_versions_request(3, 1))
        assert recv_frame(other) is not None
        with connect(broker.port) as sock:
            sock.sendall(_list_groups_request(1))
            assert_closed_by_server(sock)
        other.sendall(api_versions_request(3, 2))  # the other connection is untouched
        assert struct.unpack_from(">i", recv_frame(other) or b"")[0] == 2
    assert "ZeroDivisionError: handler bug" in caplog.text


def test_close_connection_from_a_handler(make_broker: MakeBroker) -> None:
    async def handle(ctx: RequestContext, request: Any) -> Any:
        raise CloseConnection("acks=0 produce failed")

    broker = make_broker(lambda r: _register_list_groups(r, handle))
    with connect(broker.port) as sock:
        sock.sendall(api_versions_request(3, 1) + _list_groups_request(2))
        assert struct.unpack_from(">i", recv_frame(sock) or b"")[0] == 1
        assert_closed_by_server(sock)
    assert broker.wait_for(lambda r: r.api_key == 16).detail == "acks=0 produce failed"


def test_wrong_response_type_closes_the_connection(make_broker: MakeBroker) -> None:
    async def handle(ctx: RequestContext, request: Any) -> Any:
        from kio.schema.list_groups.v1 import ListGroupsResponse as V1

        return V1(error_code=ErrorCode.none, groups=(), throttle_time=None)  # type: ignore[arg-type]

    broker = make_broker(lambda r: _register_list_groups(r, handle))
    with connect(broker.port) as sock:
        sock.sendall(_list_groups_request(1))
        assert_closed_by_server(sock)
    api_versions_round_trip(broker.port)


def test_slow_handlers_answer_in_order_and_do_not_block_other_connections(
    make_broker: MakeBroker,
) -> None:
    order: list[int] = []
    gate: list[asyncio.Event] = []

    async def handle(ctx: RequestContext, request: Any) -> Any:
        if ctx.correlation_id == 0:  # a long poll: waits until the test lets it go
            gate.append(asyncio.Event())
            await gate[0].wait()
        order.append(ctx.correlation_id)
        return ListGroupsResponse(error_code=ErrorCode.none, groups=())

    broker = make_broker(lambda r: _register_list_groups(r, handle))
    with connect(broker.port) as slow, connect(broker.port) as fast:
        slow.sendall(b"".join(_list_groups_request(i) for i in range(5)))
        # Another connection is served while the first one's request is parked.
        fast.sendall(api_versions_request(3, 99))
        assert struct.unpack_from(">i", recv_frame(fast) or b"")[0] == 99
        assert order == []  # the requests behind the parked one wait, as in Kafka
        assert broker.loop is not None
        wait_until(lambda: gate, 10, "the first request parked at its gate")
        broker.loop.call_soon_threadsafe(gate[0].set)
        got = [struct.unpack_from(">i", recv_frame(slow) or b"")[0] for _ in range(5)]
    assert got == [0, 1, 2, 3, 4]
    assert order == [0, 1, 2, 3, 4]


# -- lifecycle ---------------------------------------------------------------------------------


def test_graceful_stop_finishes_in_flight_requests(make_broker: MakeBroker) -> None:
    handling = threading.Event()

    async def handle(ctx: RequestContext, request: Any) -> Any:
        handling.set()
        await asyncio.sleep(0.3)
        return ListGroupsResponse(error_code=ErrorCode.none, groups=())

    broker = make_broker(lambda r: _register_list_groups(r, handle))
    port = broker.port
    with connect(port) as sock:
        sock.sendall(_list_groups_request(5))
        assert handling.wait(10), "the request never reached the handler"
        broker.stop(timeout=5)
        frame = recv_frame(sock)
        assert frame is not None and struct.unpack_from(">i", frame)[0] == 5
        assert_closed_by_server(sock)
    with pytest.raises(OSError):
        connect(port, timeout=1).close()


def test_stop_gives_up_on_requests_past_the_timeout(make_broker: MakeBroker) -> None:
    handling = threading.Event()

    async def handle(ctx: RequestContext, request: Any) -> Any:
        handling.set()
        await asyncio.sleep(60)

    broker = make_broker(lambda r: _register_list_groups(r, handle))
    with connect(broker.port) as sock:
        sock.sendall(_list_groups_request(1))
        assert handling.wait(10), "the request never reached the handler"
        started = time.monotonic()
        broker.stop(timeout=0.3)
        assert time.monotonic() - started < 30  # the handler would take 60 s
        assert_closed_by_server(sock)


def test_idle_connections_are_closed(make_broker: MakeBroker) -> None:
    broker = make_broker(connections_max_idle_ms=200)
    with connect(broker.port) as sock:
        sock.sendall(api_versions_request(3, 1))
        assert recv_frame(sock) is not None
        started = time.monotonic()
        assert_closed_by_server(sock, timeout=5)
        assert time.monotonic() - started >= 0.15


def test_serves_on_uvloop(make_broker: MakeBroker) -> None:
    broker = make_broker(loop_factory=uvloop.new_event_loop)
    with connect(broker.port) as sock:
        sock.sendall(b"".join(api_versions_request(v, v) for v in (0, 3, 9, 4)))
        codes = [struct.unpack_from(">ih", recv_frame(sock) or b"") for _ in range(4)]
    assert codes == [(0, 0), (3, 0), (9, 35), (4, 0)]
    with connect(broker.port) as sock:
        sock.sendall(struct.pack(">i", -1))
        assert_closed_by_server(sock)
    api_versions_round_trip(broker.port)


# -- real clients ------------------------------------------------------------------------------


def test_kafka_python_client_bootstraps(metadata_broker: BrokerThread) -> None:
    broker = metadata_broker
    client = KafkaNetClient(
        bootstrap_servers=broker.bootstrap, client_id="kp-test", request_timeout_ms=5000
    )
    try:
        version = client.check_version(node_id=1, timeout_ms=10000)
        assert isinstance(version, tuple) and version >= (0, 10)
    finally:
        client.close()
    api_versions = broker.wait_for(lambda r: r.api_key == 18 and r.client_id == "kp-test")
    assert api_versions.outcome == "ok" and api_versions.api_version == 4
    metadata = broker.wait_for(lambda r: r.api_key == 3)
    assert metadata.outcome == "ok"


def test_kafka_python_api_versions_without_metadata(bare_broker: BrokerThread) -> None:
    """Without a Metadata handler kafka-python's bootstrap fails after a successful
    ApiVersions exchange: it asks for Metadata only because it understood our answer."""
    client = KafkaNetClient(
        bootstrap_servers=bare_broker.bootstrap, client_id="kp-bare", request_timeout_ms=2000
    )
    try:
        with pytest.raises(Exception):  # noqa: B017 - kafka-python's own timeout/version errors
            client.check_version(timeout_ms=1500)
    finally:
        client.close()
    record = bare_broker.wait_for(lambda r: r.api_key == 18 and r.client_id == "kp-bare")
    assert record.outcome == "ok"
    assert not [r for r in bare_broker.records if r.api_key == 18 and r.outcome != "ok"]


def _admin(bare_broker: BrokerThread, client_id: str) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": bare_broker.bootstrap,
            "client.id": client_id,
            "socket.connection.setup.timeout.ms": 3000,
        }
    )


def test_confluent_kafka_admin_lists_the_cluster(metadata_broker: BrokerThread) -> None:
    broker = metadata_broker
    metadata = _admin(broker, "ck-test").list_topics(timeout=10)
    assert metadata.cluster_id == "logkeel-test"
    assert [(b.id, b.host, b.port) for b in metadata.brokers.values()] == [
        (1, "127.0.0.1", broker.port)
    ]
    record = broker.wait_for(lambda r: r.api_key == 18 and r.client_id == "ck-test")
    assert record.outcome == "ok" and record.api_version >= 3


def test_confluent_kafka_api_versions_exchange_without_metadata(bare_broker: BrokerThread) -> None:
    with pytest.raises(KafkaException) as info:
        _admin(bare_broker, "ck-bare").list_topics(timeout=2)
    # librdkafka refuses Metadata itself: it read our list and found no Metadata in it.
    assert info.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
    record = bare_broker.wait_for(lambda r: r.api_key == 18 and r.client_id == "ck-bare")
    assert record.outcome == "ok" and record.api_version >= 3
    # librdkafka falls back to ApiVersions v0 (or stops asking) when it cannot parse the
    # answer; it did neither.
    assert {r.api_version for r in bare_broker.records if r.client_id == "ck-bare"} == {
        record.api_version
    }


def _kcat() -> str:
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is not installed: apt-get install kcat (scripts/test does it)"
    return kcat


def test_kcat_lists_metadata(metadata_broker: BrokerThread) -> None:
    broker = metadata_broker
    result = subprocess.run(
        [_kcat(), "-b", broker.bootstrap, "-L", "-m", "10"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert f"broker 1 at 127.0.0.1:{broker.port}" in result.stdout
    # kcat (librdkafka 2.0.2) read our ApiVersions v3 answer and went on to Metadata.
    api_versions = broker.wait_for(lambda r: r.api_key == 18)
    assert (api_versions.api_version, api_versions.outcome) == (3, "ok")
    assert broker.wait_for(lambda r: r.api_key == 3).outcome == "ok"


def test_kcat_api_versions_exchange_without_metadata(bare_broker: BrokerThread) -> None:
    result = subprocess.run(
        [_kcat(), "-b", bare_broker.bootstrap, "-L", "-m", "5"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0
    # The refusal comes from kcat itself, after parsing our list and finding no Metadata.
    assert "Required feature not supported by broker" in result.stderr
    record = bare_broker.wait_for(lambda r: r.api_key == 18)
    assert (record.api_version, record.outcome) == (3, "ok")
