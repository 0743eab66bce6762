"""The one admin request path from logkeel's tools to a cluster, below both the CLI
(`cli.broker_requests`, which adds ``--command-config`` and failing a command) and `logkeel
console`: a ``--bootstrap-server`` list whose first broker that answers ApiVersions is the
bootstrap broker (a dead one is skipped, an unsupported request version is a clear refusal),
requests to one broker at the address its Metadata gives, one connection per broker. Failures
are ``BrokerConnectionError`` (``ValueError``: a bad address list)."""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any, NoReturn, Self

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from logkeel import __version__
from logkeel.server.network.client import BrokerClient, BrokerConnectionError, ClientSecurity
from logkeel.server.protocol import ApiKey, api_name, request_schema

__all__ = ["AdminError", "AdminSession", "nested", "parse_bootstrap"]

# A broker that accepts connections but does not answer (frozen, overloaded) is passed over
# after this long, as Kafka's clients bound connection set-up (10 s), not a whole request.
_PROBE_MS = 10_000
_SOFTWARE_VERSION = re.sub(r"[^A-Za-z0-9.-]", "-", __version__).strip("-.") or "0"


class AdminError(Exception):
    """A broker refused what was asked (its error named); the CLI fails the command with it,
    the console answers it."""


def parse_bootstrap(text: str) -> list[str]:
    """``host:port`` addresses of a comma-separated list; ValueError names a bad entry."""
    addresses = []
    for entry in (e.strip() for e in text.split(",")):
        host, sep, port = entry.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{entry!r} is not HOST:PORT (in --bootstrap-server {text!r})")
        addresses.append(f"{host or '127.0.0.1'}:{int(port)}")
    return addresses


class AdminSession:
    """Kafka requests of one command: to the bootstrap broker (``send``) or to one broker
    (``send_to``, ``send_to_node``), each broker on one connection; ``BrokerConnectionError``
    when a broker cannot be reached or does not serve a request's version."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str,
        timeout_ms: int = 30_000,
        security: ClientSecurity | None = None,
    ) -> None:
        self.addresses = parse_bootstrap(bootstrap)
        self.address: str | None = None  # the bootstrap broker, once one answered
        self._client_id = client_id
        self._timeout_ms = timeout_ms
        self._security = security if security is not None else ClientSecurity()
        self._runner = asyncio.Runner()
        self._clients: dict[str, BrokerClient] = {}
        self._versions: dict[str, dict[int, tuple[int, int]]] = {}
        self._brokers: dict[int, str] | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for client in self._clients.values():
            self._runner.run(client.close())
        self._clients.clear()
        self._runner.close()

    def bootstrap(self) -> str:
        """The address of the first broker of the list that answers."""
        if self.address is None:
            problems = []
            for address in self.addresses:
                try:
                    self._connect(address)
                except BrokerConnectionError as exc:
                    problems.append(str(exc))
                    continue
                self.address = address
                break
            else:
                if len(problems) == 1:
                    self._failed(BrokerConnectionError(problems[0]))
                self._failed(BrokerConnectionError(
                    f"no broker of {','.join(self.addresses)} answered: " + "; ".join(problems)
                ))  # fmt: skip
        return self.address

    def send(self, request: Any, timeout_ms: int | None = None) -> Any:
        return self.send_to(self.bootstrap(), request, timeout_ms)

    def send_to(self, address: str, request: Any, timeout_ms: int | None = None) -> Any:
        try:
            return self._send(address, request, timeout_ms)
        except BrokerConnectionError as exc:
            self._failed(exc)

    def _failed(self, exc: BrokerConnectionError) -> NoReturn:
        raise exc

    def _send(self, address: str, request: Any, timeout_ms: int | None) -> Any:
        versions = self._connect(address)
        api, version = int(request.__api_key__), int(request.__version__)
        low, high = versions.get(api, (0, -1))
        if not low <= version <= high:
            served = f"v{low}-v{high}" if high >= low else "no version"
            raise BrokerConnectionError(
                f"the broker at {address} does not serve {api_name(api)} v{version} "
                f"(it serves {served})"
            )
        return self._runner.run(self._clients[address].send(request, timeout_ms))

    def brokers(self) -> dict[int, str]:
        """Live brokers by id: their ``host:port`` as the bootstrap broker's DescribeCluster
        gives (the registered brokers: Metadata also lists a broker just gone while it is still
        shown as a leader), or its Metadata where DescribeCluster is refused."""
        if self._brokers is None:
            Request = request_schema(ApiKey.DESCRIBE_CLUSTER, 0)
            assert Request is not None
            try:
                answer = self.send(Request(include_cluster_authorized_operations=False))
            except BrokerConnectionError:  # not served there
                answer = None
            if answer is not None and answer.error_code == ErrorCode.none:
                self._brokers = {
                    int(b.broker_id): f"{b.host}:{int(b.port)}" for b in answer.brokers
                }
            else:
                found = self.metadata(()).brokers
                self._brokers = {int(b.node_id): f"{b.host}:{int(b.port)}" for b in found}
        return self._brokers

    def send_to_node(
        self, node_id: int, request: Any, timeout_ms: int | None = None, *, missing_ok: bool = False
    ) -> Any:
        """The answer of broker ``node_id``; with ``missing_ok``, a ``BrokerConnectionError``
        to handle even for a command's Admin (a broker going down while the cluster still
        lists it must not end a command that can do without it)."""
        try:
            address = self.brokers().get(node_id)
            if address is None:
                known = ", ".join(map(str, sorted(self.brokers()))) or "none"
                raise BrokerConnectionError(f"broker {node_id} is not alive (alive: {known})")
            return self._send(address, request, timeout_ms)
        except BrokerConnectionError as exc:
            if missing_ok:
                raise
            self._failed(exc)

    def metadata(self, topics: tuple[str, ...] | None = None) -> Any:
        """Metadata v12 of ``topics`` (None: every topic), never creating one."""
        Request = request_schema(ApiKey.METADATA, 12)
        assert Request is not None
        Topic = nested(Request, "MetadataRequestTopic")
        wanted = None if topics is None else tuple(Topic(name=t, topic_id=None) for t in topics)
        return self.send(
            Request(topics=wanted, allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False)
        )  # fmt: skip

    def _connect(self, address: str) -> dict[int, tuple[int, int]]:
        """The API versions the broker at ``address`` serves (asked once, on connecting)."""
        known = self._versions.get(address)
        if known is not None:
            return known
        host, _, port = address.rpartition(":")
        client = BrokerClient(
            host.strip("[]") or "127.0.0.1",
            int(port),
            client_id=self._client_id,
            request_timeout_ms=self._timeout_ms,
            max_response_bytes=100 * 1024 * 1024,
            security=self._security,
        )
        request = ApiVersionsRequest(
            client_software_name="logkeel-cli", client_software_version=_SOFTWARE_VERSION
        )
        try:
            answer = self._runner.run(client.send(request, min(self._timeout_ms, _PROBE_MS)))
        except BaseException:
            self._runner.run(client.close())
            raise
        if answer.error_code != ErrorCode.none:
            self._runner.run(client.close())
            raise BrokerConnectionError(
                f"{address} refused ApiVersions: {answer.error_code.name.upper()}"
            )
        self._clients[address] = client
        versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys
        }
        self._versions[address] = versions
        return versions


def nested(request_type: Any, name: str) -> Any:
    """A nested entity class of a kio request type."""
    return getattr(sys.modules[request_type.__module__], name)
