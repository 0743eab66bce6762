"""One Kafka request from a CLI command to a broker's PLAINTEXT listener, and the one way such a
command fails (a message on stderr, exit status 1)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any, NoReturn

import click

from logkeel.server.network.client import BrokerClient, BrokerConnectionError

__all__ = ["call", "fail", "nested"]


def call(command: str, bootstrap_server: str, request: Any) -> Any:
    host, _, port = bootstrap_server.rpartition(":")

    async def round_trip() -> Any:
        client = BrokerClient(
            host.strip("[]") or "127.0.0.1",
            int(port),
            client_id=f"logkeel-{command}",
            request_timeout_ms=30_000,
            max_response_bytes=10 * 1024 * 1024,
        )
        try:
            return await client.send(request)
        finally:
            await client.close()

    try:
        return asyncio.run(round_trip())
    except (BrokerConnectionError, ValueError) as exc:
        fail(command, str(exc))


def nested(request_type: Any, name: str) -> Any:
    """A nested entity class of a kio request type."""
    return getattr(sys.modules[request_type.__module__], name)


def fail(command: str, message: str) -> NoReturn:
    click.echo(f"logkeel {command}: {message}", err=True)
    sys.exit(1)
