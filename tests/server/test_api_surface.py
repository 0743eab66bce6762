"""The API surface ApiVersions advertises, checked against a real `logkeel serve`: the table is
exactly the one below (a change to it is deliberate, and goes in docs/design.md), and every
advertised version of every API answers a minimal request of that version (built field by
field from kio's schema) with a response of that version, without UNKNOWN_SERVER_ERROR and
without the broker logging a traceback."""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from logkeel.server.protocol import ApiKey, api_name, request_schema
from tests.brokerproc import BrokerProcess
from tests.server.test_admin_wire import Wire, request_types
from tests.server.test_security_adversarial import error_codes

pytestmark = pytest.mark.timeout(180)

# (min, max) per API key: what logkeel implements. Kafka 4.x's ranges where the fields of
# every version are honoured; see docs/design.md ("The API surface") for each cap.
SURFACE: dict[int, tuple[int, int]] = {
    0: (3, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6),
    11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1),
    18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 3),
    25: (0, 3), 26: (0, 3), 27: (1, 1), 28: (0, 3), 29: (1, 3), 30: (1, 3), 31: (1, 3),
    32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 5), 36: (0, 2), 37: (0, 3), 42: (0, 2),
    43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 60: (0, 2), 61: (0, 0),
    65: (0, 0), 66: (0, 2), 68: (0, 1), 69: (0, 1), 75: (0, 0),
}  # fmt: skip

# Fields a minimal request must set for the request to be answered at all, or sensibly.
_OVERRIDES: dict[int, dict[str, Any]] = {
    ApiKey.PRODUCE: {"acks": 1},  # acks=0 is never answered
    ApiKey.API_VERSIONS: {"client_software_name": "probe", "client_software_version": "1"},
    ApiKey.SASL_HANDSHAKE: {"mechanism": "PLAIN"},
}
_INTS = {"int8", "int16", "int32", "int64", "uint16"}


def minimal(cls: type[Any], overrides: dict[str, Any] | None = None) -> Any:
    """An instance of the kio entity ``cls`` with every field without a default at its
    emptiest: empty arrays, null where nullable, zero, empty strings, nested entities built
    the same way."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if overrides and f.name in overrides:
            values[f.name] = overrides[f.name]
            continue
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        hint = hints[f.name]
        args = typing.get_args(hint)
        optional = type(None) in args
        kind = f.metadata.get("kafka_type")
        if typing.get_origin(hint) is tuple or any(typing.get_origin(a) is tuple for a in args):
            values[f.name] = ()
        elif optional:
            values[f.name] = None
        elif kind in _INTS or kind == "float64":
            values[f.name] = hint(0)
        elif kind == "string":
            values[f.name] = ""
        elif kind == "bool":
            values[f.name] = False
        elif kind == "bytes":
            values[f.name] = b""
        elif kind == "uuid":
            values[f.name] = uuid.UUID(int=0)
        elif kind in ("timedelta_i32", "timedelta_i64"):
            values[f.name] = hint.parse(datetime.timedelta(0))
        elif dataclasses.is_dataclass(hint):
            values[f.name] = minimal(hint)
        else:
            raise AssertionError(f"{cls.__name__}.{f.name}: no minimal value for {hint}")
    return cls(**values)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("api-surface")) as b:
        yield b


def _advertised(port: int) -> dict[int, tuple[int, int]]:
    wire = Wire(port)
    try:
        m = request_types(ApiKey.API_VERSIONS, 3)
        answer = wire.call(m.ApiVersionsRequest(client_software_name="probe",
                                                client_software_version="1"))  # fmt: skip
    finally:
        wire.close()
    assert answer.error_code == ErrorCode.none
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}


def test_the_advertised_surface_is_the_documented_one(server: BrokerProcess) -> None:
    advertised = _advertised(server.port)
    changed = {
        api_name(k): (advertised.get(k), SURFACE.get(k))
        for k in advertised.keys() | SURFACE.keys()
        if advertised.get(k) != SURFACE.get(k)
    }
    assert changed == {}, "advertised vs documented"


def test_every_advertised_version_answers_a_minimal_request(server: BrokerProcess) -> None:
    failures: list[str] = []
    answered = 0
    for api_key, (low, high) in sorted(_advertised(server.port).items()):
        for version in range(low, high + 1):
            schema = request_schema(api_key, version)
            assert schema is not None
            request = minimal(schema, _OVERRIDES.get(api_key))
            where = f"{api_name(api_key)} v{version}"
            wire = Wire(server.port)
            wire.sock.settimeout(15)
            try:
                response = wire.call(request)
            except (AssertionError, OSError) as exc:
                failures.append(f"{where}: {exc!r}")
                continue
            finally:
                wire.close()
            answered += 1
            if type(response).__version__ != version:
                failures.append(f"{where}: answered with v{type(response).__version__}")
            if ErrorCode.unknown_server_error in error_codes(response):
                failures.append(f"{where}: UNKNOWN_SERVER_ERROR")
    assert failures == []
    assert answered == sum(high - low + 1 for low, high in SURFACE.values())
    assert "Traceback" not in server.output(limit=50_000_000)


def test_minimal_builds_every_field() -> None:
    m = request_types(ApiKey.PRODUCE, 9)
    produce = minimal(m.ProduceRequest, {"acks": 1})
    assert (produce.acks, produce.topic_data, produce.transactional_id) == (1, (), None)
    assert produce.timeout == datetime.timedelta(0)
