"""Malformed requests never reach a handler (issue 27.2): a null where the schema does not
allow one is refused by the decoder as Kafka's InvalidRequestException (one line in the log,
the connection closed, no answer), over the wire to a real broker process, for every API the
issue names; and a WriteTxnMarkers without a producer id is answered per partition."""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.primitive import Records

from logkeel.server.protocol import (
    ApiKey,
    _field_guard,
    _nullable,
    api_name,
    decode_response,
    encode_request,
    request_schema,
    response_schema,
)
from logkeel.testing.broker_process import LogkeelBroker

from .conftest import assert_closed_by_server, connect, recv_frame

# The APIs whose handlers failed on a null array, and the Produce version the issue names.
NULL_ARRAY_APIS = [
    ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.DELETE_GROUPS, ApiKey.DESCRIBE_GROUPS,
    ApiKey.LIST_OFFSETS, ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS,
    ApiKey.ALTER_REPLICA_LOG_DIRS, ApiKey.FETCH, ApiKey.PRODUCE,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
]  # fmt: skip

_ZERO: dict[str, Any] = {
    "string": "",
    "bytes": b"",
    "records": Records(b""),
    "uuid": uuid.UUID(int=0),
    "bool": False,
    "float64": 0.0,
    "error_code": ErrorCode.none,
    "timedelta_i32": timedelta(0),
    "timedelta_i64": timedelta(0),
    "datetime_i64": datetime.fromtimestamp(0, UTC),
}


def minimal(entity_type: type[Any]) -> Any:
    """The smallest valid instance: empty arrays, zero values, nulls where allowed."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(entity_type):
        kind = classify_field(field)
        if kind.is_array:
            values[field.name] = ()
        elif is_optional(field):
            values[field.name] = None
        elif isinstance(kind, EntityField | EntityTupleField):
            values[field.name] = minimal(kind.type_)
        else:
            kafka_type = get_schema_field_type(field)
            values[field.name] = _ZERO.get(kafka_type, 0)
    return entity_type(**values)


def with_null_array(api_key: int, version: int, correlation_id: int) -> tuple[bytes, str]:
    """A request whose first non-nullable top-level array is null (size prefix included),
    and that array's name."""
    schema = request_schema(api_key, version)
    assert schema is not None
    frame = bytearray(encode_request(minimal(schema), correlation_id, "malformed"))
    body = bytes(frame[4:])
    # Walk the header and the fields before the array with the decoder's own field walkers.
    pos = 8 + 2 + len("malformed") + (1 if schema.__flexible__ else 0)
    for field in dataclasses.fields(schema):
        if get_field_tag(field) is not None:
            continue  # tagged fields come after the others
        kind = classify_field(field)
        if kind.is_array and not _nullable(field.type):
            null = b"\x00" if schema.__flexible__ else b"\xff\xff\xff\xff"
            size = 1 if schema.__flexible__ else 4
            patched = body[:pos] + null + body[pos + size :]
            return struct.pack(">i", len(patched)) + patched, field.name
        pos = _field_guard(field, schema.__flexible__)(body, pos, [])
    raise AssertionError(f"{api_name(api_key)} v{version} has no non-nullable array")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogkeelBroker]:
    # With an authorizer (so the ACL APIs are advertised) that lets this test do anything.
    overrides = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    work = tmp_path_factory.mktemp("malformed")
    with LogkeelBroker(work, overrides=overrides, verbose=True).start() as b:
        yield b


def supported_versions(port: int) -> dict[int, int]:
    request = request_schema(ApiKey.API_VERSIONS, 3)
    assert request is not None
    with connect(port) as sock:
        sock.sendall(
            encode_request(
                request(client_software_name="t", client_software_version="1"), 1, "probe"
            )
        )
        frame = recv_frame(sock)
    assert frame is not None
    _, answer = decode_response(response_schema(ApiKey.API_VERSIONS, 3), frame)
    return {int(k.api_key): int(k.max_version) for k in answer.api_keys}


def answered_cleanly(broker: LogkeelBroker, request: Any, api_key: int, version: int) -> Any:
    """Sends ``request``, returns the decoded answer; the broker logged no ERROR for it."""
    before = len(broker.output(10**9))
    with connect(broker.port) as sock:
        sock.sendall(encode_request(request, 7, "malformed"))
        frame = recv_frame(sock)
    assert frame is not None
    _, answer = decode_response(response_schema(api_key, version), frame)
    log = broker.output(10**9)[before:]
    assert " ERROR " not in log and "Traceback" not in log, log
    return answer


def test_the_issues_create_acls_frame_is_refused(broker: LogkeelBroker) -> None:
    frame = bytes.fromhex("001e0003000000010002723100" + "0000")
    with connect(broker.port) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        assert_closed_by_server(sock)
    assert "malformed CreateAcls v3 request: non-nullable field creations is null" in (
        broker.output()
    )


@pytest.mark.parametrize("api_key", NULL_ARRAY_APIS, ids=api_name)
def test_a_null_array_closes_the_connection_in_one_log_line(
    broker: LogkeelBroker, api_key: ApiKey
) -> None:
    version = supported_versions(broker.port)[api_key]
    frame, field = with_null_array(api_key, version, 4242)
    before = len(broker.output(10**9))
    with connect(broker.port) as sock:
        sock.sendall(frame)
        assert_closed_by_server(sock)
    log = broker.output(10**9)[before:]
    lines = [line for line in log.splitlines() if "4242" in line]
    assert len(lines) == 1, log
    assert (
        f"malformed {api_name(api_key)} v{version} request: non-nullable field {field}"
        in (lines[0])
    )
    assert "Traceback" not in log and " ERROR " not in log, log


def test_write_txn_markers_without_a_producer_id_is_answered_per_partition(
    broker: LogkeelBroker,
) -> None:
    from kio.schema.write_txn_markers.v1 import request as markers

    topic = f"markers-{uuid.uuid4().hex[:6]}"
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"x")
    assert producer.flush(30) == 0
    request = markers.WriteTxnMarkersRequest(
        markers=(
            markers.WritableTxnMarker(
                producer_id=-1,
                producer_epoch=0,
                transaction_result=True,
                topics=(markers.WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),),
                coordinator_epoch=0,
            ),
        )
    )
    answer = answered_cleanly(broker, request, ApiKey.WRITE_TXN_MARKERS, 1)
    (result,) = answer.markers
    assert [p.error_code for t in result.topics for p in t.partitions] == [
        ErrorCode.invalid_request
    ]


def test_the_broker_still_serves(broker: LogkeelBroker) -> None:
    assert supported_versions(broker.port)[ApiKey.PRODUCE] >= 9


def test_metadata_v11_with_a_null_topic_name_is_answered_invalid_request(
    broker: LogkeelBroker,
) -> None:
    """Found by test_fuzz_broker: the error response echoed the null name into a v11 response,
    whose topic name is not nullable, and failed to encode (an ERROR with a traceback)."""
    from kio.schema.metadata.v11 import request as metadata

    request = metadata.MetadataRequest(
        topics=(metadata.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    answer = answered_cleanly(broker, request, ApiKey.METADATA, 11)
    assert [(t.name, t.error_code) for t in answer.topics] == [("", ErrorCode.invalid_request)]
