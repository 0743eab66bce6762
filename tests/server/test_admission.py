"""Connection admission without sockets: a frame, the connection's session and the registry
decide whether a request runs (network/admission.py)."""

from __future__ import annotations

import time
from typing import Any

from kio.schema.api_versions.v3 import ApiVersionsRequest
from kio.schema.list_groups.v0 import ListGroupsRequest
from kio.schema.list_groups.v4 import ListGroupsRequest as ListGroupsRequestV4
from kio.schema.sasl_handshake.v1 import SaslHandshakeRequest

from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.network.admission import Admitted, Refused, admit
from logkeel.server.protocol import ApiKey, encode_request
from logkeel.server.session import Session

from .conftest import TEST_RULE, no_error_response


async def _handle(ctx: RequestContext, request: Any) -> Any:
    raise AssertionError("admission never runs a handler")


def _registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    for key, low, high in (
        (ApiKey.LIST_GROUPS, 0, 0),
        (ApiKey.API_VERSIONS, 0, 2),
        (ApiKey.SASL_HANDSHAKE, 0, 1),
    ):
        registry.register(key, low, high, _handle, rule=TEST_RULE, error_response=no_error_response)
    return registry


def _frame(request: Any, correlation_id: int = 7) -> bytes:
    return encode_request(request, correlation_id, "probe")[4:]  # without the size prefix


PLAINTEXT = Session("PLAINTEXT", "PLAINTEXT")


def test_a_served_request_is_admitted_decoded() -> None:
    got = admit(_frame(ListGroupsRequest()), PLAINTEXT, _registry())
    assert isinstance(got, Admitted)
    assert (got.header.api_key, got.header.api_version, got.header.correlation_id) == (16, 0, 7)
    assert got.header.client_id == "probe"
    assert got.entry.api_key == ApiKey.LIST_GROUPS
    assert got.request == ListGroupsRequest()


def test_a_header_too_short_is_refused_with_what_could_be_read() -> None:
    got = admit(b"\x00\x10\x00", PLAINTEXT, _registry())
    assert isinstance(got, Refused)
    assert got.header is None and "malformed request header (too short to tell)" in got.reason
    broken = _frame(ListGroupsRequest())[:9]  # key, version, correlation id, half a client id
    got = admit(broken, PLAINTEXT, _registry())
    assert isinstance(got, Refused) and got.header == (16, 0, 7)


def test_an_api_not_served_is_refused() -> None:
    got = admit(_frame(SaslHandshakeRequest(mechanism="PLAIN")), PLAINTEXT, HandlerRegistry())
    assert isinstance(got, Refused) and got.entry is None
    assert got.reason == "unsupported API key 17 (SaslHandshake v1)"


def test_a_version_not_served_is_refused_except_for_api_versions() -> None:
    got = admit(_frame(ListGroupsRequestV4(states_filter=())), PLAINTEXT, _registry())
    assert isinstance(got, Refused) and got.entry is not None
    assert got.reason == "unsupported version 4 of ListGroups (supported: 0-0)"
    versions = ApiVersionsRequest(client_software_name="probe", client_software_version="1")
    got = admit(_frame(versions), PLAINTEXT, _registry())
    # Answered with the versions served, so the client can pick one.
    assert isinstance(got, Admitted) and got.request is None


def test_a_malformed_body_is_refused() -> None:
    frame = _frame(SaslHandshakeRequest(mechanism="PLAIN"))
    got = admit(frame[:-3], PLAINTEXT, _registry())  # the mechanism string cut short
    assert isinstance(got, Refused) and got.entry is not None
    assert got.reason.startswith("malformed SaslHandshake v1 request: ")


class _Mechanisms:
    mechanisms = ("PLAIN",)

    def start(self, mechanism: str) -> Any:
        raise AssertionError("admission never starts an exchange")


def test_before_sasl_authentication_only_the_handshake_apis_are_admitted() -> None:
    session = Session("SASL_PLAINTEXT", "SASL_PLAINTEXT", sasl=_Mechanisms())
    got = admit(_frame(ListGroupsRequest()), session, _registry())
    assert isinstance(got, Refused)
    assert got.reason == "ListGroups v0 before SASL authentication"
    handshake = _frame(SaslHandshakeRequest(mechanism="PLAIN"))
    assert isinstance(admit(handshake, session, _registry()), Admitted)


def test_an_expired_session_is_refused_everything_but_re_authentication() -> None:
    session = Session(
        "SASL_PLAINTEXT",
        "SASL_PLAINTEXT",
        principal="User:alice",
        sasl=_Mechanisms(),
        established=True,
        expires_at=time.monotonic() - 1,
    )
    got = admit(_frame(ListGroupsRequest()), session, _registry())
    assert isinstance(got, Refused)
    assert "after the SASL session of User:alice expired" in got.reason
    handshake = _frame(SaslHandshakeRequest(mechanism="PLAIN"))
    assert isinstance(admit(handshake, session, _registry()), Admitted)
