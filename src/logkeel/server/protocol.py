"""The Kafka wire protocol between frames and kio's request/response classes.

What is here, and why it is not all kio:

- Request headers are parsed by hand. Their layout is tiny and fixed, and Kafka skips tagged
  fields it does not know in a v2 header, where kio would raise. The header version follows
  Kafka's rule: v2 (with tagged fields) for a flexible request version, else v1.
- Request bodies are decoded with kio, but only after ``_guard`` has walked the same schema and
  checked every array length against the bytes left, as Kafka's generated readers do. kio's
  native reader reserves memory for an array's declared length before reading a single
  element, and a failed reservation aborts the whole process: one 5-byte field in a request
  ("2^32 elements follow") would kill the broker. The guard also removes tagged fields that
  kio's schema does not know (kio raises on them, Kafka ignores them), so a newer client's
  extra field does not cost it its connection.
- The guard also refuses every schema violation Kafka's generated readers refuse and kio does
  not: a null (length -1) where the schema does not mark the field nullable (kio's types say
  ``X | None`` for a nullable field, ``tuple[X, ...] | None`` for a nullable array), which kio
  would hand to the handler as None; and a string longer than 32767 bytes. Such a request is
  Kafka's InvalidRequestException: logged in one line, the connection closed.
- Responses are encoded with kio, whose writer leaves out tagged fields that hold their default
  value, as Kafka does (older librdkafka cannot parse an ApiVersions v3 response with them).
  The response header version comes from kio's schema: v1 for flexible versions, except that
  ApiVersions always answers with header v0 so a client can read it before it knows which
  versions the broker speaks.
"""

from __future__ import annotations

import asyncio
import enum
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cache
from types import NoneType, UnionType
from typing import Any, Final, Union, get_args, get_origin

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from logkeel.records.batch import InvalidBatchError
from logkeel.records.varint import decode_unsigned_varint, encode_unsigned_varint

__all__ = [
    "ApiKey",
    "InvalidRequest",
    "RequestHeader",
    "api_name",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "is_known_api",
    "parse_request_header",
    "peek_api",
    "request_schema",
    "response_schema",
]


class ApiKey(enum.IntEnum):
    """Kafka's API keys for the APIs a broker serves (kio knows the rest by number)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75


class InvalidRequest(Exception):
    """A request that cannot be parsed (Kafka's ``InvalidRequestException``): close the connection."""


def api_name(api_key: int) -> str:
    """Kafka's name for an API key (``ApiVersions``), or ``ApiKey(n)`` for one nobody knows."""
    name = api_key_map.get(api_key)
    if name is None:
        return f"ApiKey({api_key})"
    return "".join(part.capitalize() for part in name.split("_"))


def is_known_api(api_key: int) -> bool:
    """Whether ``api_key`` is one of Kafka's API keys (served here or not)."""
    return api_key in api_key_map


@cache
def request_schema(api_key: int, api_version: int) -> type[Any] | None:
    """kio's request class for (key, version), or None if kio does not have it."""
    try:
        return load_request_schema(api_key, api_version)
    except Exception:  # noqa: BLE001 - kio's own index errors, ImportError for a broken module
        return None


@cache
def response_schema(api_key: int, api_version: int) -> type[Any] | None:
    """kio's response class for (key, version), or None if kio does not have it."""
    try:
        return load_response_schema(api_key, api_version)
    except Exception:  # noqa: BLE001 - as request_schema
        return None


# ---------------------------------------------------------------------------------------------
# Request header

_HEADER_PREFIX = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_API_PREFIX = struct.Struct(">hhi")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int  # 1, or 2 when the request version is flexible
    size: int  # bytes the header takes, i.e. the offset of the body in the frame


def peek_api(frame: bytes | memoryview) -> tuple[int, int, int] | None:
    """(api key, api version, correlation id) from a frame too broken to parse, for logging."""
    if len(frame) < _API_PREFIX.size:
        return None
    api_key, api_version, correlation_id = _API_PREFIX.unpack_from(frame, 0)
    return api_key, api_version, correlation_id


def _request_header_version(api_key: int, api_version: int) -> int:
    schema = request_schema(api_key, api_version)
    if schema is not None:
        return 2 if schema.__flexible__ else 1
    # ApiVersions must be answered even for versions we do not know (so the client can step
    # down); every ApiVersions version from 3 on is flexible, and Kafka reads its header so.
    if api_key == ApiKey.API_VERSIONS and api_version >= 3:
        return 2
    return 1


def parse_request_header(frame: bytes | memoryview) -> RequestHeader:
    """Parses the request header at the start of ``frame`` (no size prefix).

    Raises ``InvalidRequest``. For an API or version kio does not know, only the v1 part is
    read: such a request is rejected or, for ApiVersions, answered without reading its body.
    """
    if len(frame) < _HEADER_PREFIX.size:
        raise InvalidRequest(f"request of {len(frame)} bytes is too short for a request header")
    api_key, api_version, correlation_id, client_id_len = _HEADER_PREFIX.unpack_from(frame, 0)
    pos = _HEADER_PREFIX.size
    client_id: str | None
    if client_id_len == -1:
        client_id = None
    elif client_id_len < 0:
        raise InvalidRequest(f"client id has a negative length ({client_id_len})")
    else:
        end = pos + client_id_len
        if end > len(frame):
            raise InvalidRequest("client id runs past the end of the request")
        # Java's decoder replaces malformed UTF-8 rather than failing; so do we.
        client_id = bytes(frame[pos:end]).decode("utf-8", errors="replace")
        pos = end
    header_version = _request_header_version(api_key, api_version)
    if header_version == 2:
        try:
            pos = _skip_tagged_fields(frame, pos)
        except _Malformed as exc:
            raise InvalidRequest(f"bad tagged fields in request header: {exc}") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id, header_version, pos)


# ---------------------------------------------------------------------------------------------
# Request and response bodies


def decode_request(header: RequestHeader, frame: bytes | memoryview) -> Any:
    """Decodes the body that follows ``header`` in ``frame`` into kio's request class.

    Raises ``InvalidRequest`` with the reason; trailing bytes after the body are ignored, as
    Kafka ignores them.
    """
    schema = request_schema(header.api_key, header.api_version)
    if schema is None:
        raise InvalidRequest(
            f"no schema for {api_name(header.api_key)} v{header.api_version} request"
        )
    return _decode(schema, frame, header.size)


def decode_response(response_type: type[Any], frame: bytes | memoryview) -> tuple[int, Any]:
    """Decodes a response frame (no size prefix) as ``response_type``: (correlation id, body).

    For the client side of the broker (follower fetchers) and for tests.
    """
    if len(frame) < 4:
        raise InvalidRequest("response too short for a response header")
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    pos = 4
    if response_type.__header_schema__.__flexible__:
        try:
            pos = _skip_tagged_fields(frame, pos)
        except _Malformed as exc:
            raise InvalidRequest(f"bad tagged fields in response header: {exc}") from None
    return correlation_id, _decode(response_type, frame, pos)


def _decode(schema: type, frame: bytes | memoryview, offset: int) -> Any:
    if type(frame) is not bytes and not (type(frame) is memoryview and frame.readonly):
        frame = bytes(frame)  # kio only reads read-only buffers
    edits: list[_Edit] = []
    try:
        end = _entity_guard(schema, False)(frame, offset, edits)
    except _Malformed as exc:
        raise InvalidRequest(str(exc)) from None
    if edits:
        frame, end = _apply_edits(frame, edits, end)
    body: Any
    try:
        body, size = entity_reader(schema)(frame, offset)
    except (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
        raise
    except BaseException as exc:  # noqa: BLE001 - kio's Rust panics are BaseExceptions
        raise InvalidRequest(f"{type(exc).__name__}: {exc}") from None
    if offset + size != end:
        # The guard and kio read the schema differently: do not trust either.
        raise InvalidRequest(f"decoded {size} bytes where the schema walk found {end - offset}")
    return body


def encode_response(correlation_id: int, response: Any) -> bytes:
    """The complete response frame, size prefix included, for kio response ``response``."""
    header_type = type(response).__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_type)(buf, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(buf, response)
    data = buf.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    del data
    return buf.getvalue()


def encode_request(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """The complete request frame, size prefix included, for kio request ``request``."""
    header_type = type(request).__header_schema__
    header = header_type(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_type)(buf, header)
    entity_writer(type(request))(buf, request)
    data = buf.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    del data
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# The guard: a schema walk that reads lengths only, mirroring kio's reader field for field.


class _Malformed(Exception):
    pass


# (start, end, replacement): bytes [start, end) of the frame become ``replacement``.
_Edit = tuple[int, int, bytes]
_Guard = Callable[[bytes | memoryview, int, list[_Edit]], int]

_FIXED_SIZES: Final[dict[str, int]] = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def _read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    try:
        return decode_unsigned_varint(buf, pos)
    except InvalidBatchError as exc:
        raise _Malformed(str(exc)) from None


def _skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    """Skips a tagged-field section; headers declare no tagged fields, so all are unknown."""
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos = _need(buf, pos, size, "tagged field")
    return pos


def _need(buf: bytes | memoryview, pos: int, n: int, what: str) -> int:
    end = pos + n
    if end > len(buf):
        raise _Malformed(f"{what} of {n} bytes runs past the end of the data")
    return end


# Kafka's readers refuse longer strings (their length must fit a Java short).
_MAX_STRING_BYTES = 0x7FFF


def _nullable(annotation: Any) -> bool:
    """Whether a kio type annotation admits None (``X | None``)."""
    return get_origin(annotation) in (UnionType, Union) and NoneType in get_args(annotation)


def _null_refused(name: str) -> _Malformed:
    return _Malformed(f"non-nullable field {name} is null")


def _primitive_guard(kafka_type: str, flexible: bool, nullable: bool, name: str) -> _Guard:
    fixed = _FIXED_SIZES.get(kafka_type)
    if fixed is not None:

        def read_fixed(buf: bytes | memoryview, pos: int, edits: list[_Edit]) -> int:
            return _need(buf, pos, fixed, kafka_type)

        return read_fixed
    if kafka_type not in ("string", "bytes", "records"):
        raise NotImplementedError(f"no guard for kafka_type {kafka_type!r}")
    longest = _MAX_STRING_BYTES if kafka_type == "string" else None
    if flexible:

        def read_compact(buf: bytes | memoryview, pos: int, edits: list[_Edit]) -> int:
            length, pos = _read_uvarint(buf, pos)
            if length == 0:
                if not nullable:
                    raise _null_refused(name)
                return pos
            if longest is not None and length - 1 > longest:
                raise _Malformed(f"string field {name} is {length - 1} bytes long")
            return _need(buf, pos, length - 1, kafka_type)

        return read_compact
    prefix = _INT16 if kafka_type == "string" else _INT32

    def read_legacy(buf: bytes | memoryview, pos: int, edits: list[_Edit]) -> int:
        start = _need(buf, pos, prefix.size, f"{kafka_type} length")
        (length,) = prefix.unpack_from(buf, pos)
        if length < -1:
            raise _Malformed(f"{kafka_type} has a negative length ({length})")
        if length == -1:
            if not nullable:
                raise _null_refused(name)
            return start
        return _need(buf, start, length, kafka_type)

    return read_legacy


def _array_guard(
    element: _Guard, flexible: bool, nullable: bool, name: str, fixed_size: int | None = None
) -> _Guard:
    def read_array(buf: bytes | memoryview, pos: int, edits: list[_Edit]) -> int:
        if flexible:
            n, pos = _read_uvarint(buf, pos)
            n -= 1  # 0 is null
        else:
            pos = _need(buf, pos, 4, "array length")
            (n,) = _INT32.unpack_from(buf, pos - 4)
            if n < -1:
                raise _Malformed(f"array has a negative length ({n})")
        if n == -1 and not nullable:
            raise _null_refused(name)
        if n > len(buf) - pos:
            raise _Malformed(
                f"array of {n} elements, but only {len(buf) - pos} bytes are left to hold them"
            )
        if fixed_size is not None:  # no need to visit each int32 of a partition list
            return _need(buf, pos, max(n, 0) * fixed_size, "array")
        for _ in range(n):
            pos = element(buf, pos, edits)
        return pos

    return read_array


def _field_guard(field: Any, flexible: bool) -> _Guard:
    kind = classify_field(field)
    fixed_size = None
    # For an array, whether the array may be null, and separately whether its elements may.
    nullable = _nullable(field.type)
    element_type = field.type
    if kind.is_array:
        tuple_type = next(t for t in (field.type, *get_args(field.type)) if get_origin(t) is tuple)
        element_type = get_args(tuple_type)[0]
    name = field.name
    if isinstance(kind, PrimitiveField | PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
        guard = _primitive_guard(
            kafka_type, flexible, _nullable(element_type), f"{name}[]" if kind.is_array else name
        )
        fixed_size = _FIXED_SIZES.get(kafka_type)
    elif isinstance(kind, EntityField):
        guard = _entity_guard(kind.type_, is_optional(field))
    elif isinstance(kind, EntityTupleField):
        guard = _entity_guard(kind.type_, False)
    else:  # pragma: no cover - kio has no other kind of field
        raise NotImplementedError(f"unknown field kind {kind!r}")
    if kind.is_array:
        return _array_guard(guard, flexible, nullable, name, fixed_size)
    return guard


@cache
def _entity_guard(entity_type: type[Any], nullable: bool) -> _Guard:
    flexible: bool = entity_type.__flexible__
    regular: list[_Guard] = []
    tagged: dict[int, _Guard] = {}
    for field in fields(entity_type):
        tag = get_field_tag(field)
        if tag is None:
            regular.append(_field_guard(field, flexible))
        else:
            tagged[int(tag)] = _field_guard(field, flexible)

    def read_entity(buf: bytes | memoryview, pos: int, edits: list[_Edit]) -> int:
        if nullable:
            pos = _need(buf, pos, 1, "null marker")
            if buf[pos - 1] == 0xFF:  # -1: null
                return pos
        for guard in regular:
            pos = guard(buf, pos, edits)
        if not flexible:
            return pos
        count_start = pos
        count, pos = _read_uvarint(buf, pos)
        if count > len(buf) - pos:
            raise _Malformed(f"{count} tagged fields, but only {len(buf) - pos} bytes are left")
        count_end = pos
        unknown = 0
        for _ in range(count):
            field_start = pos
            tag, pos = _read_uvarint(buf, pos)
            size, pos = _read_uvarint(buf, pos)
            known = tagged.get(tag)
            if known is not None:
                # kio reads a known tagged field by its schema and ignores the size; so must we.
                pos = known(buf, pos, edits)
            else:
                pos = _need(buf, pos, size, f"unknown tagged field {tag}")
                edits.append((field_start, pos, b""))
                unknown += 1
        if unknown:
            edits.append((count_start, count_end, encode_unsigned_varint(count - unknown)))
        return pos

    return read_entity


def _apply_edits(frame: bytes | memoryview, edits: list[_Edit], end: int) -> tuple[bytes, int]:
    """Rewrites ``frame`` with ``edits`` applied; also maps ``end`` into the new frame."""
    out = bytearray()
    pos = 0
    new_end = end
    for start, stop, replacement in sorted(edits):
        out += frame[pos:start]
        out += replacement
        pos = stop
        if stop <= end:
            new_end += len(replacement) - (stop - start)
    out += frame[pos:]
    return bytes(out), new_end
