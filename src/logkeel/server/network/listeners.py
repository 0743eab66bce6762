"""Every listener of a broker (``listeners=PLAINTEXT://…,SSL://…,SASL_SSL://…``): one ``Server``
each, started together and stopped together, seen by the broker as one network server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable

from logkeel.config import BrokerConfig
from logkeel.config.listeners import Listener
from logkeel.server.handlers import HandlerRegistry
from logkeel.server.network.connection import Observer
from logkeel.server.network.connection_quotas import ConnectionQuotas, ListenerQuota
from logkeel.server.network.oauthbearer import JwksKeys
from logkeel.server.network.request_memory import RequestMemory, malloc_trim
from logkeel.server.network.security import ListenerSecurity
from logkeel.server.network.server import Server
from logkeel.server.network.tls import CertificateReloader

__all__ = ["CERTIFICATE_CHECK_SECONDS", "ListenerSet", "bind_host"]

log = logging.getLogger(__name__)

# How often TLS listeners look for renewed certificate files.
CERTIFICATE_CHECK_SECONDS = 5.0


def bind_host(listener: Listener) -> str:
    return listener.host or "0.0.0.0"


class ListenerSet:
    """The broker's listeners, the first one being the primary (``port``, logs, metrics)."""

    def __init__(
        self,
        registry: HandlerRegistry,
        config: BrokerConfig,
        security_of: Callable[[str], ListenerSecurity],
    ) -> None:
        self.listeners = config.listeners
        # One budget for the requests of every listener, as Kafka's one memory pool.
        self.memory = RequestMemory(config.queued_max_request_bytes, trim=malloc_trim())
        self.quotas = connection_quotas(config)
        self.servers = [
            Server(
                registry,
                bind_host(listener),
                listener.port,
                listener=listener.name,
                max_request_bytes=config.socket_request_max_bytes,
                connections_max_idle_ms=config.connections_max_idle_ms,
                backlog=config.socket_listen_backlog_size,
                security=security_of(listener.name),
                sasl_max_receive_bytes=config.listener_value(
                    listener.name, "sasl.server.max.receive.size"
                ),
                memory=self.memory,
                quotas=self.quotas,
            )
            for listener in self.listeners
        ]
        self.failed: Server = self.servers[0]  # the listener that could not bind
        self._watcher: asyncio.Task[None] | None = None

    def server(self, listener_name: str) -> Server:
        return next(s for s in self.servers if s.listener == listener_name)

    def port_of(self, listener_name: str) -> int:
        return self.server(listener_name).port

    @property
    def port(self) -> int:
        return self.servers[0].port

    @property
    def connection_count(self) -> int:
        return sum(s.connection_count for s in self.servers)

    def add_observer(self, observer: Observer) -> None:
        for s in self.servers:
            s.add_observer(observer)

    async def start(self) -> None:
        """Binds every listener; if one cannot bind, the ones already bound are closed and
        the OSError (with ``failed`` naming the listener) propagates."""
        started: list[Server] = []
        for s in self.servers:
            try:
                await s.start()
            except OSError as exc:
                self.failed = s
                for done in started:
                    await done.stop()
                raise exc
            started.append(s)
        reloaders = [
            s.security.certificates for s in self.servers if s.security.certificates is not None
        ]
        key_sets = [
            keys
            for s in self.servers
            if (keys := getattr(s.security.sasl, "jwks", None)) is not None
        ]
        if reloaders or key_sets:
            self._watcher = asyncio.get_running_loop().create_task(
                _watch_certificates(reloaders, key_sets)
            )

    async def stop(self, timeout: float = 30.0) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        await asyncio.gather(*(s.stop(timeout) for s in self.servers))


def connection_quotas(config: BrokerConfig) -> ConnectionQuotas:
    """The broker's connection limits, per listener too; host names in
    max.connections.per.ip.overrides stand for every address they resolve to (now)."""
    overrides: dict[str, int] = {}
    for host, limit in config.per_ip_connection_limits.items():
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            log.warning("max.connections.per.ip.overrides: cannot resolve %s: %s", host, exc)
            infos = []
        for info in infos:
            overrides[str(info[4][0])] = limit
        overrides[host] = limit
    quotas = ConnectionQuotas(
        config.max_connections,
        config.max_connections_per_ip,
        overrides,
        config.max_connection_creation_rate,
        backlog=config.socket_listen_backlog_size,
    )
    for listener in config.listeners:
        quotas.add_listener(
            listener.name,
            ListenerQuota(
                config.listener_value(listener.name, "max.connections"),
                config.listener_value(listener.name, "max.connection.creation.rate"),
                inter_broker=listener.name == config.inter_broker_listener,
            ),
        )
    return quotas


async def _watch_certificates(
    reloaders: list[CertificateReloader], key_sets: list[JwksKeys]
) -> None:
    """Reloads renewed certificates, and refreshes OAUTHBEARER key sets when due (their
    interval, or a token that named a key id they lack)."""
    while True:
        await asyncio.sleep(CERTIFICATE_CHECK_SECONDS)
        for reloader in reloaders:
            try:
                await asyncio.to_thread(reloader.reload_if_changed)
            except Exception:
                log.exception("checking the certificates of listener %s failed", reloader.listener)
        for keys in key_sets:
            try:
                await asyncio.to_thread(keys.refresh_if_due)
            except Exception:
                log.exception("refreshing the JWKS at %s failed", keys.url)
