"""ApiVersions: tells a client which API versions this broker implements.

The answer is read from the handler registry at request time, so it lists exactly the
registered handlers and their version ranges. As in Kafka (KIP-511), a version of ApiVersions
itself that the broker does not know is answered, not rejected: UNSUPPORTED_VERSION, encoded as
a v0 response whose list holds only ApiVersions' own range, so the client retries with a version
both sides speak. v3 requests with an invalid client software name or version get
INVALID_REQUEST, as Kafka answers them.
"""

from __future__ import annotations

import re
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from logkeel.server.api.messages import ApiVersionsRequest, ApiVersionsResponse
from logkeel.server.api.responses import NO_THROTTLE, nested_types
from logkeel.server.authorization import anyone
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey, response_schema

__all__ = ["ApiVersionsApi", "register"]

# Kafka's ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN.
_SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


class ApiVersionsApi:
    def __init__(self, registry: HandlerRegistry) -> None:
        self._registry = registry

    async def handle(
        self, ctx: RequestContext, request: ApiVersionsRequest | None
    ) -> ApiVersionsResponse:
        """``request`` is None when ``ctx.api_version`` is one this broker does not implement."""
        if request is None or not self._registry.supports(ApiKey.API_VERSIONS, ctx.api_version):
            return self.unsupported_version_response()
        software = (  # v3+
            getattr(request, "client_software_name", None),
            getattr(request, "client_software_version", None),
        )
        if software[0] is not None and not all(
            _SOFTWARE_NAME_VERSION.fullmatch(part or "") for part in software
        ):
            return self._response(ctx.api_version, ErrorCode.invalid_request, ())
        return self._response(ctx.api_version, ErrorCode.none, self._registry.version_ranges())

    def error_response(
        self, ctx: RequestContext, request: ApiVersionsRequest, code: ErrorCode
    ) -> ApiVersionsResponse:
        return self._response(ctx.api_version, code, ())

    def unsupported_version_response(self) -> Any:
        """UNSUPPORTED_VERSION as a v0 response, listing the ApiVersions versions we speak."""
        own = self._registry.lookup(ApiKey.API_VERSIONS)
        ranges = [] if own is None else [(own.api_key, own.min_version, own.max_version)]
        return self._response(0, ErrorCode.unsupported_version, ranges)

    @staticmethod
    def _response(version: int, code: ErrorCode, ranges: Any) -> Any:
        response_type = response_schema(ApiKey.API_VERSIONS, version)
        assert response_type is not None, "the registry only admits versions kio has"
        entry_type = nested_types(ApiKey.API_VERSIONS, version).ApiVersion
        api_keys = tuple(
            entry_type(api_key=i16(key), min_version=i16(low), max_version=i16(high))
            for key, low, high in ranges
        )
        fields: dict[str, Any] = {"error_code": code, "api_keys": api_keys}
        if version >= 1:
            fields["throttle_time"] = NO_THROTTLE
        # From v3 on the response also has tagged fields (supported/finalized features, ZK
        # migration); left at their defaults they are not written at all, which is what older
        # librdkafka (Debian's kcat 1.7.1) needs to parse the response.
        return response_type(**fields)


def register(
    registry: HandlerRegistry, min_version: int = 0, max_version: int = 4
) -> ApiVersionsApi:
    """Registers ApiVersions (Kafka 4.x serves v0-v4) and returns its handler."""
    api = ApiVersionsApi(registry)
    registry.register(
        ApiKey.API_VERSIONS,
        min_version,
        max_version,
        api.handle,
        rule=anyone("a client asks before it logs in which versions to speak; names no resource"),
        error_response=api.error_response,
    )
    return api
