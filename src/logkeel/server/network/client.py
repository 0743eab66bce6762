"""The inter-broker client: kio requests to one other broker over an asyncio stream.

A follower fetcher owns one ``BrokerClient`` per source broker it fetches from (Kafka gives each
fetcher thread its own connection too): the broker serves one request per connection at a time,
so fetchers sharing a connection would queue behind each other's long polls. Requests on one
client are therefore sent one at a time. Any failure (connect, timeout, a bad frame) closes the
connection and raises ``BrokerConnectionError``; the next request reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from logkeel.server.network.framing import SIZE_PREFIX
from logkeel.server.protocol import InvalidRequest, decode_response, encode_request, response_schema

__all__ = ["BrokerClient", "BrokerConnectionError"]


class BrokerConnectionError(Exception):
    """A request to another broker failed before an answer arrived; the connection is closed."""


class BrokerClient:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str,
        request_timeout_ms: int,
        max_response_bytes: int,
    ) -> None:
        self.host = host
        self.port = port
        self._client_id = client_id
        self._timeout = request_timeout_ms / 1000
        self._max_response_bytes = max_response_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"BrokerClient({self.host}:{self.port})"

    async def send(self, request: Any, timeout_ms: int | None = None) -> Any:
        """Sends kio ``request`` and returns the decoded response of the same version."""
        timeout = self._timeout if timeout_ms is None else timeout_ms / 1000
        async with self._lock:
            try:
                # Not wait_for: on 3.11 it swallows a cancel that lands as the answer arrives,
                # and a fetcher being stopped would then fetch on forever.
                async with asyncio.timeout(timeout):
                    return await self._round_trip(request)
            except (OSError, EOFError, TimeoutError, InvalidRequest) as exc:
                await self.close()
                raise BrokerConnectionError(
                    f"request to {self.host}:{self.port} failed: {type(exc).__name__}: {exc}"
                ) from exc
            except BaseException:
                # Cancelled mid-request: the stream may hold half a response.
                await self.close()
                raise

    async def _round_trip(self, request: Any) -> Any:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._reader, self._writer
        assert reader is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        correlation_id = self._correlation_id
        writer.write(encode_request(request, correlation_id, self._client_id))
        await writer.drain()
        (size,) = SIZE_PREFIX.unpack(await reader.readexactly(SIZE_PREFIX.size))
        if size < 0 or size > self._max_response_bytes:
            raise InvalidRequest(f"response size {size} out of bounds")
        frame = await reader.readexactly(size)
        schema = response_schema(request.__api_key__, request.__version__)
        assert schema is not None, "requests are only built for versions kio has"
        got, response = decode_response(schema, frame)
        if got != correlation_id:
            raise InvalidRequest(f"correlation id {got} does not match {correlation_id}")
        return response

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()
