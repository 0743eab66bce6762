"""server/api/messages.py names each API's request and response types as the union of kio's
classes over the versions served; this keeps those unions and the served versions (the table of
test_api_surface, checked there against a running broker) the same: a version added to a
handler without its class in the union would be served with fields mypy never checked."""

from __future__ import annotations

import types
import typing

from logkeel.server.api import messages
from logkeel.server.protocol import request_schema, response_schema
from tests.server.test_api_surface import SURFACE


def _union(api_key: int, low: int, high: int, schema: typing.Any) -> set[type]:
    return {schema(api_key, v) for v in range(low, high + 1)}


def test_each_served_api_has_its_request_and_response_unions() -> None:
    for api_key, (low, high) in SURFACE.items():
        for schema in (request_schema, response_schema):
            name = schema(api_key, low).__name__
            alias = getattr(messages, name, None)
            assert alias is not None, f"messages.py has no {name}"
            assert set(typing.get_args(alias) or (alias,)) == _union(api_key, low, high, schema), (
                f"{name} is not the union of versions {low}..{high}"
            )


def test_messages_names_only_served_apis() -> None:
    served = {
        schema(api_key, low).__name__
        for api_key, (low, _high) in SURFACE.items()
        for schema in (request_schema, response_schema)
    }
    declared = {
        name
        for name, value in vars(messages).items()
        if isinstance(value, types.UnionType | type) and name[0].isupper()
    }
    assert declared == served
