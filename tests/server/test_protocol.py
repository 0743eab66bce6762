"""Header parsing, request decoding (and its guard), response encoding, the handler registry,
ApiVersions and the error codes; kafka-python is the independent codec for cross-checks."""

from __future__ import annotations

import asyncio
import contextlib
import io
import struct
from datetime import timedelta
from typing import Any

import kafka.errors as kafka_errors
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_key import ApiKey as KafkaPythonApiKey
from kafka.protocol.metadata import ApiVersionsRequest as KpApiVersionsRequest
from kafka.protocol.metadata import ApiVersionsResponse as KpApiVersionsResponse
from kafka.protocol.metadata import MetadataRequest as KpMetadataRequest
from kio.schema.api_versions.v3 import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.metadata.v1 import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v12 import MetadataRequest as MetadataRequestV12
from kio.schema.metadata.v12.request import MetadataRequestTopic
from kio.schema.types import BrokerId
from kio.serial import entity_writer
from kio.static.primitive import Records, i16, i32Timedelta, i64Timedelta

from logkeel.server.api import versions as api_versions
from logkeel.server.errors import (
    ApiError,
    error_code_for,
    error_code_named,
    error_name,
)
from logkeel.server.handlers import Check, HandlerRegistry, RequestContext, Rule
from logkeel.server.protocol import (
    ApiKey,
    InvalidRequest,
    api_name,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
    peek_api,
    request_schema,
    response_schema,
)
from logkeel.storage import errors as storage_errors

from .conftest import TEST_RULE, api_versions_request, no_error_response

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
# kio's own strategy draws int64 milliseconds that its reader cannot turn back into a timedelta
# ("timedelta milliseconds overflow"); real clients send -1 or small retention times.
st.register_type_strategy(
    i64Timedelta,
    st.integers(-(2**40), 2**40).map(lambda ms: i64Timedelta.parse(timedelta(milliseconds=ms))),
)


def _kio_bytes(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# -- names and schemas -------------------------------------------------------------------------


def test_api_names_match_kafka_python() -> None:
    for key in ApiKey:
        assert api_name(key) == KafkaPythonApiKey(int(key)).name
    assert api_name(18) == "ApiVersions"
    assert api_name(23) == "OffsetForLeaderEpoch"
    assert api_name(9999) == "ApiKey(9999)"


def test_schemas_come_from_kio() -> None:
    assert request_schema(3, 12) is MetadataRequestV12
    assert response_schema(18, 3) is ApiVersionsResponseV3
    assert request_schema(18, 99) is None
    assert request_schema(9999, 0) is None


# -- request header ----------------------------------------------------------------------------


def test_parse_header_v1_of_hand_built_api_versions_v0() -> None:
    frame = api_versions_request(0, 77, client_id="abc")[4:]
    header = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 0, 77)
    assert header.client_id == "abc"
    assert header.header_version == 1
    assert header.size == len(frame)  # v0 has an empty body


def test_parse_header_v2_skips_tagged_fields() -> None:
    tagged = b"\x02" + b"\x05\x03xyz" + b"\x07\x00"  # two unknown header tags
    frame = struct.pack(">hhih", 3, 12, 5, 2) + b"id" + tagged + b"BODY"
    header = parse_request_header(frame)
    assert header.header_version == 2
    assert header.client_id == "id"
    assert frame[header.size :] == b"BODY"


def test_parse_header_null_client_id() -> None:
    header = parse_request_header(struct.pack(">hhih", 18, 0, 1, -1))
    assert header.client_id is None


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x12\x00\x00",
        struct.pack(">hhih", 18, 0, 1, -2),  # negative client id length
        struct.pack(">hhih", 18, 0, 1, 10) + b"short",
        struct.pack(">hhih", 3, 12, 1, 0) + b"\x01\x05\x09ab",  # tagged field past the end
        struct.pack(">hhih", 3, 12, 1, 0) + b"\xff\xff\xff\xff\xff\x01",  # 6-byte varint
    ],
)
def test_bad_headers_are_invalid_requests(frame: bytes) -> None:
    with pytest.raises(InvalidRequest):
        parse_request_header(frame)


def test_unknown_api_versions_version_reads_header_v2() -> None:
    frame = struct.pack(">hhih", 18, 99, 3, 1) + b"c" + b"\x00"
    header = parse_request_header(frame)
    assert header.header_version == 2 and header.size == len(frame)


def test_peek_api() -> None:
    assert peek_api(struct.pack(">hhi", 0, 9, 1234)) == (0, 9, 1234)
    assert peek_api(b"\x00\x01") is None


# -- request bodies ----------------------------------------------------------------------------


def test_decodes_kafka_python_metadata_request() -> None:
    request = KpMetadataRequest(
        version=12,
        topics=[KpMetadataRequest.MetadataRequestTopic(name="orders", topic_id=None)],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    request.with_header(correlation_id=5, client_id="kp")
    frame = bytes(request.encode(header=True, framed=True))[4:]
    header = parse_request_header(frame)
    decoded = decode_request(header, frame)
    assert isinstance(decoded, MetadataRequestV12)
    assert [t.name for t in decoded.topics] == ["orders"]
    assert decoded.allow_auto_topic_creation is True


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_decodes_kafka_python_api_versions_request(version: int) -> None:
    request = KpApiVersionsRequest(
        version=version, client_software_name="kafka-python", client_software_version="3.0"
    )
    request.with_header(correlation_id=9, client_id="kp")
    frame = bytes(request.encode(header=True, framed=True))[4:]
    header = parse_request_header(frame)
    decoded = decode_request(header, frame)
    assert decoded.__version__ == version
    if version >= 3:
        assert decoded.client_software_name == "kafka-python"


def _metadata_v12_frame(body: bytes) -> tuple[Any, bytes]:
    frame = struct.pack(">hhih", 3, 12, 1, 0) + b"\x00" + body
    return parse_request_header(frame), frame


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xff\xff\xff\x0f",  # compact array of 2^32-2 topics: kio alone aborts the process
        b"\x80\x80\x80\x80\x10",  # the same, 2^34-1
        b"\x05\x00",  # 4 topics announced, none there
        b"\x01\x00\x00\x10",  # 16 tagged fields in 1 byte
    ],
)
def test_array_and_tag_counts_beyond_the_frame_are_rejected(body: bytes) -> None:
    header, frame = _metadata_v12_frame(body)
    with pytest.raises(InvalidRequest):
        decode_request(header, frame)


def test_legacy_array_count_beyond_the_frame_is_rejected() -> None:
    frame = struct.pack(">hhih", 3, 1, 1, 0) + struct.pack(">i", 0x7FFFFFFF)
    with pytest.raises(InvalidRequest, match="2147483647 elements"):
        decode_request(parse_request_header(frame), frame)
    frame = struct.pack(">hhih", 3, 1, 1, 0) + struct.pack(">i", -7)
    with pytest.raises(InvalidRequest):
        decode_request(parse_request_header(frame), frame)


def test_null_legacy_array_is_none() -> None:
    frame = struct.pack(">hhih", 3, 1, 1, 0) + struct.pack(">i", -1)
    decoded = decode_request(parse_request_header(frame), frame)
    assert isinstance(decoded, MetadataRequestV1) and decoded.topics is None


def test_unknown_tagged_fields_are_skipped_like_kafka_does() -> None:
    original = MetadataRequestV12(
        topics=(MetadataRequestTopic(topic_id=None, name="a"),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    plain = _kio_bytes(original)
    # Rebuild by hand with an unknown tag (9) inside the topic and two (5, 300) at the top.
    topic = b"\x00" * 16 + b"\x02a" + b"\x01" + _uvarint(9) + b"\x02zz"
    body = b"\x02" + topic + b"\x01\x00" + b"\x02" + b"\x05\x03abc" + _uvarint(300) + b"\x00"
    assert plain != body
    header, frame = _metadata_v12_frame(body)
    assert decode_request(header, frame) == original


def test_invalid_utf8_in_body_is_an_invalid_request() -> None:
    header, frame = _metadata_v12_frame(b"\x02" + b"\x00" * 16 + b"\x02\xff\x00\x01\x00\x00")
    with pytest.raises(InvalidRequest):
        decode_request(header, frame)


_BROKER_REQUEST_SCHEMAS = sorted(
    (int(key), version) for key in ApiKey for version in schema_name_map[api_key_map[key]]
)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_guard_agrees_with_kio_on_valid_requests(data: st.DataObject) -> None:
    """For every request schema of the APIs a broker serves, kio's own encoding is accepted
    whole by the guard and decodes back to the same value."""
    api_key, version = data.draw(st.sampled_from(_BROKER_REQUEST_SCHEMAS))
    schema = request_schema(api_key, version)
    assert schema is not None
    request = data.draw(st.from_type(schema))
    frame = encode_request(request, correlation_id=1, client_id="prop")[4:]
    header = parse_request_header(frame)
    assert decode_request(header, frame) == request


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_responses_round_trip(data: st.DataObject) -> None:
    """encode_response and decode_response (the follower side) agree for every response
    schema of the APIs a broker serves; the guard accepts all of it."""
    api_key, version = data.draw(st.sampled_from(_BROKER_REQUEST_SCHEMAS))
    schema = response_schema(api_key, version)
    assert schema is not None
    response = data.draw(st.from_type(schema))
    frame = encode_response(-5, response)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    assert decode_response(schema, frame[4:]) == (-5, response)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_mutated_requests_decode_or_are_invalid(data: st.DataObject) -> None:
    """Damaged bytes never get past decode_request as anything but InvalidRequest."""
    api_key, version = data.draw(st.sampled_from(_BROKER_REQUEST_SCHEMAS))
    schema = request_schema(api_key, version)
    assert schema is not None
    frame = bytearray(
        encode_request(data.draw(st.from_type(schema)), correlation_id=1, client_id="m")[4:]
    )
    header = parse_request_header(bytes(frame))
    for _ in range(data.draw(st.integers(1, 4))):
        choice = data.draw(st.sampled_from(["flip", "truncate", "insert", "big"]))
        pos = data.draw(st.integers(header.size, max(header.size, len(frame))))
        if choice == "flip" and pos < len(frame):
            frame[pos] ^= data.draw(st.integers(1, 255))
        elif choice == "truncate":
            del frame[pos:]
        elif choice == "insert":
            frame[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif choice == "big":
            frame[pos:pos] = data.draw(
                st.sampled_from([b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff"])
            )
    with contextlib.suppress(InvalidRequest):
        decode_request(header, bytes(frame))


# -- responses ---------------------------------------------------------------------------------


def _api_versions_response_v3(**extra: Any) -> Any:
    from kio.schema.api_versions.v3.response import ApiVersion

    return ApiVersionsResponseV3(
        error_code=ErrorCode.none,
        api_keys=(ApiVersion(api_key=i16(18), min_version=i16(0), max_version=i16(4)),),
        throttle_time=i32Timedelta.parse(timedelta(0)),
        **extra,
    )


def test_api_versions_v3_response_bytes_carry_no_tagged_fields() -> None:
    data = encode_response(7, _api_versions_response_v3())
    expected_body = (
        b"\x00\x00"  # error code
        + b"\x02"  # compact array: one entry
        + b"\x00\x12\x00\x00\x00\x04\x00"  # ApiVersions 0-4, no tagged fields in the entry
        + b"\x00\x00\x00\x00"  # throttle time
        + b"\x00"  # zero tagged fields: SupportedFeatures etc. left out at their defaults
    )
    # Response header v0 (no tagged-field byte) even though v3 is flexible.
    assert data == struct.pack(">ii", 4 + len(expected_body), 7) + expected_body
    # The same response with a non-default tagged field does carry it, so the omission above
    # is the default-skipping at work, not a field kio never writes.
    with_tag = encode_response(7, _api_versions_response_v3(zk_migration_ready=True))
    assert with_tag.endswith(b"\x01\x03\x01\x01")


def test_api_versions_response_decodes_with_kafka_python() -> None:
    data = encode_response(11, _api_versions_response_v3())
    decoded = KpApiVersionsResponse.decode(data[4:], version=3, header=True)
    assert decoded.header.correlation_id == 11
    assert decoded.error_code == 0
    assert [(a.api_key, a.min_version, a.max_version) for a in decoded.api_keys] == [(18, 0, 4)]


def test_flexible_response_has_header_v1() -> None:
    from kio.schema.metadata.v12 import MetadataResponse

    response = MetadataResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)),
        brokers=(),
        cluster_id=None,
        controller_id=BrokerId(1),
        topics=(),
    )
    data = encode_response(3, response)
    assert data[4:9] == b"\x00\x00\x00\x03\x00"  # correlation id, then the tagged-field count
    corr, decoded = decode_response(MetadataResponse, data[4:])
    assert corr == 3 and decoded == response


def test_encode_request_round_trip() -> None:
    request = MetadataRequestV12(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=True
    )
    data = encode_request(request, correlation_id=99, client_id="me")
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    header = parse_request_header(data[4:])
    assert (header.correlation_id, header.client_id) == (99, "me")
    assert decode_request(header, data[4:]) == request


# -- handler registry and ApiVersions ----------------------------------------------------------


async def _noop(ctx: RequestContext, request: Any) -> None:
    return None


def _register(registry: HandlerRegistry, api_key: int, low: int, high: int) -> None:
    registry.register(api_key, low, high, _noop, rule=TEST_RULE, error_response=no_error_response)


def test_registry_refuses_versions_kio_lacks_and_duplicates() -> None:
    registry = HandlerRegistry()
    with pytest.raises(ValueError, match="no schema"):
        _register(registry, ApiKey.PRODUCE, 0, 9)  # kio has Produce from v3 only
    with pytest.raises(ValueError, match="bad version range"):
        _register(registry, ApiKey.METADATA, 5, 4)
    _register(registry, ApiKey.METADATA, 0, 12)
    with pytest.raises(ValueError, match="already registered"):
        _register(registry, ApiKey.METADATA, 0, 1)
    _register(registry, ApiKey.FETCH, 4, 12)
    assert registry.version_ranges() == [(1, 4, 12), (3, 0, 12)]
    assert registry.supports(3, 12) and not registry.supports(3, 13)
    assert not registry.supports(0, 3)
    assert ApiKey.FETCH in registry and len(registry) == 2


def test_an_api_cannot_be_registered_without_an_authorization_rule() -> None:
    registry = HandlerRegistry()
    with pytest.raises(TypeError, match="needs an authorization Rule"):
        registry.register(
            ApiKey.METADATA,
            0,
            12,
            _noop,
            rule=None,
            error_response=no_error_response,  # type: ignore[arg-type]
        )
    with pytest.raises(TypeError, match="error response"):
        registry.register(ApiKey.METADATA, 0, 12, _noop, rule=TEST_RULE, error_response=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must check something"):
        Rule()
    with pytest.raises(ValueError, match="no whole-request checks"):
        Rule(checks=(Check("x", lambda *_: None),), anyone="why")
    assert len(registry) == 0


def test_the_gate_runs_before_every_handler_with_its_rule() -> None:
    seen: list[tuple[int, Rule]] = []
    handled: list[int] = []

    def gate(ctx: RequestContext, request: Any, rule: Rule) -> ErrorCode | None:
        seen.append((ctx.api_key, rule))
        return ErrorCode.cluster_authorization_failed if ctx.api_key == ApiKey.FETCH else None

    async def handle(ctx: RequestContext, request: Any) -> str:
        handled.append(ctx.api_key)
        return "served"

    fetch_rule = Rule(per_entry="READ on each topic")
    registry = HandlerRegistry(gate=gate)
    for key, rule in ((ApiKey.METADATA, TEST_RULE), (ApiKey.FETCH, fetch_rule)):
        registry.register(
            key, 4, 12, handle, rule=rule,
            error_response=lambda ctx, request, code: f"refused {code.name}",
        )  # fmt: skip
    for key in (ApiKey.METADATA, ApiKey.FETCH):
        entry = registry.lookup(key)
        assert entry is not None
        outcome = asyncio.run(entry.handle(_ctx(key, 4), object()))
        assert outcome == (
            "served" if key == ApiKey.METADATA else "refused cluster_authorization_failed"
        )
    assert seen == [(ApiKey.METADATA, TEST_RULE), (ApiKey.FETCH, fetch_rule)]
    assert handled == [ApiKey.METADATA]  # the refused request never reached its handler


def _ctx(api_key: int, version: int) -> RequestContext:
    return RequestContext(
        api_key=api_key,
        api_version=version,
        correlation_id=1,
        client_id="unit",
        peer=("127.0.0.1", 1),
        connection_id="test-0",
        listener="PLAINTEXT",
    )


def _api_versions_registry() -> tuple[HandlerRegistry, api_versions.ApiVersionsApi]:
    registry = HandlerRegistry()
    api = api_versions.register(registry)
    _register(registry, ApiKey.METADATA, 0, 12)
    return registry, api


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_lists_exactly_the_registry(version: int) -> None:
    registry, api = _api_versions_registry()
    request_type = request_schema(18, version)
    assert request_type is not None
    fields = {"client_software_name": "x", "client_software_version": "1"} if version >= 3 else {}
    response = asyncio.run(api.handle(_ctx(18, version), request_type(**fields)))
    assert response.__version__ == version
    assert response.error_code == ErrorCode.none
    listed = [(a.api_key, a.min_version, a.max_version) for a in response.api_keys]
    assert listed == [(3, 0, 12), (18, 0, 4)]


def test_unsupported_api_versions_version_gets_v0_unsupported_version() -> None:
    _, api = _api_versions_registry()
    response = asyncio.run(api.handle(_ctx(18, 7), None))
    assert response.__version__ == 0
    assert response.error_code == ErrorCode.unsupported_version
    assert [(a.api_key, a.min_version, a.max_version) for a in response.api_keys] == [(18, 0, 4)]
    data = encode_response(1, response)
    decoded = KpApiVersionsResponse.decode(data[4:], version=0, header=True)
    assert decoded.error_code == 35


def test_invalid_client_software_name_gets_invalid_request() -> None:
    _, api = _api_versions_registry()
    request_type = request_schema(18, 3)
    assert request_type is not None
    request = request_type(client_software_name="bad name!", client_software_version="1")
    response = asyncio.run(api.handle(_ctx(18, 3), request))
    assert response.error_code == ErrorCode.invalid_request
    assert response.api_keys == ()


# -- error codes -------------------------------------------------------------------------------

_KAFKA_PYTHON_CODES = {
    cls.message: cls.errno
    for cls in kafka_errors.kafka_errors.values()
    if isinstance(getattr(cls, "message", None), str)
}


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("OFFSET_OUT_OF_RANGE", 1),
        ("CORRUPT_MESSAGE", 2),
        ("UNKNOWN_TOPIC_OR_PARTITION", 3),
        ("NOT_LEADER_OR_FOLLOWER", 6),
        ("MESSAGE_TOO_LARGE", 10),
        ("INVALID_TOPIC_EXCEPTION", 17),
        ("UNSUPPORTED_VERSION", 35),
        ("INVALID_REQUEST", 42),
        ("OUT_OF_ORDER_SEQUENCE_NUMBER", 45),
        ("INVALID_PRODUCER_EPOCH", 47),
        ("KAFKA_STORAGE_ERROR", 56),
        ("UNKNOWN_PRODUCER_ID", 59),
        ("INVALID_RECORD", 87),
    ],
)
def test_error_codes_match_kafka_python(name: str, number: int) -> None:
    assert error_code_named(name) == number
    assert error_code_named(name.lower()) == number
    assert error_name(number) == name
    if name in _KAFKA_PYTHON_CODES:
        assert _KAFKA_PYTHON_CODES[name] == number


@pytest.mark.parametrize(
    ("exc", "name"),
    [
        (storage_errors.KafkaStorageError("/d", "boom"), "KAFKA_STORAGE_ERROR"),
        (storage_errors.CorruptRecordError("crc"), "CORRUPT_MESSAGE"),
        (storage_errors.InvalidRecordError("x"), "INVALID_RECORD"),
        (storage_errors.RecordTooLargeError("x"), "MESSAGE_TOO_LARGE"),
        (storage_errors.OffsetOutOfRangeError("x"), "OFFSET_OUT_OF_RANGE"),
        (storage_errors.OutOfOrderSequenceError("x"), "OUT_OF_ORDER_SEQUENCE_NUMBER"),
        (storage_errors.InvalidProducerEpochError("x"), "INVALID_PRODUCER_EPOCH"),
        (storage_errors.UnknownProducerIdError("x"), "UNKNOWN_PRODUCER_ID"),
        (storage_errors.CorruptIndexError("x"), "UNKNOWN_SERVER_ERROR"),
        (ApiError(ErrorCode.not_leader_or_follower), "NOT_LEADER_OR_FOLLOWER"),
        (TimeoutError(), "REQUEST_TIMED_OUT"),
        (RuntimeError("bug"), "UNKNOWN_SERVER_ERROR"),
    ],
)
def test_exceptions_map_to_kafka_codes(exc: BaseException, name: str) -> None:
    assert error_name(error_code_for(exc)) == name


def test_unknown_error_name_and_code() -> None:
    with pytest.raises(ValueError):
        error_code_named("NO_SUCH_ERROR")
    assert error_name(31999) == "UNKNOWN_ERROR_CODE_31999"
