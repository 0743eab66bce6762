"""Listener strings (``NAME://host:port``) and the listener-name to security-protocol map."""

from __future__ import annotations

import ipaddress
import re
from typing import NamedTuple

from logkeel.config.types import ConfigError, ConfigProblem

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# Same shape Kafka accepts: an optional [bracketed] IPv6 host, an empty host meaning "all
# interfaces", and the listener name being everything before "://".
_LISTENER = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")
_CSV = re.compile(r"\s*,\s*")


class Listener(NamedTuple):
    """One endpoint. ``host`` is None for the wildcard address (``PLAINTEXT://:9092``)."""

    name: str
    host: str | None
    port: int

    @property
    def connection_string(self) -> str:
        host = self.host or ""
        if ":" in host:
            host = f"[{host}]"
        return f"{self.name}://{host}:{self.port}"


def parse_csv(value: str | None) -> list[str]:
    """Kafka's Csv.parseCsvList: split on commas, trim, drop empty items."""
    if value is None or not value.strip():
        return []
    return [item for item in _CSV.split(value.strip()) if item]


def parse_listener(value: str, key: str = "listeners") -> Listener:
    """``"PLAINTEXT://host:port"`` -> ``Listener(name, host, port)``; the name is upper-cased."""
    match = _LISTENER.fullmatch(value.strip())
    if match is None:
        raise ConfigError([ConfigProblem(key, value, "expected NAME://host:port")])
    name, host, port_text = match.groups()
    if not name:
        raise ConfigError([ConfigProblem(key, value, "listener name is empty")])
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ConfigError([ConfigProblem(key, value, f"port {port} is not in [0, 65535]")])
    return Listener(name.upper(), host or None, port)


def parse_listeners(value: str | None, key: str = "listeners") -> list[Listener]:
    """A comma-separated listener list; every bad entry is reported in one ConfigError."""
    listeners: list[Listener] = []
    problems: list[ConfigProblem] = []
    for entry in parse_csv(value):
        try:
            listeners.append(parse_listener(entry, key))
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return listeners


def parse_protocol_map(value: str, key: str = "listener.security.protocol.map") -> dict[str, str]:
    """``"NAME:PROTOCOL,..."`` -> {NAME: PROTOCOL}, names upper-cased like listener names."""
    result: dict[str, str] = {}
    problems: list[ConfigProblem] = []
    for entry in parse_csv(value):
        name, sep, protocol = entry.rpartition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip():
            problems.append(ConfigProblem(key, value, f"entry {entry!r} is not NAME:PROTOCOL"))
        elif protocol not in SECURITY_PROTOCOLS:
            problems.append(
                ConfigProblem(key, value, f"unknown security protocol {protocol!r} for {name}")
            )
        else:
            result[name.strip().upper()] = protocol
    if problems:
        raise ConfigError(problems)
    return result


def check_listener_ports(listeners: list[Listener], key: str = "listeners") -> list[ConfigProblem]:
    """Kafka's rules for a bound listener list: distinct names, and distinct ports unless exactly
    two listeners share one with an IPv4 and an IPv6 literal host. Port 0 (ephemeral) is exempt."""
    problems: list[ConfigProblem] = []
    text = ",".join(listener.connection_string for listener in listeners)
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        problems.append(ConfigProblem(key, text, "each listener must have a different name"))
    by_port: dict[int, list[Listener]] = {}
    for listener in listeners:
        if listener.port != 0:
            by_port.setdefault(listener.port, []).append(listener)
    for port, group in by_port.items():
        if len(group) == 1:
            continue
        versions = sorted(_ip_version(listener.host) for listener in group)
        if versions != [4, 6]:
            problems.append(
                ConfigProblem(
                    key,
                    text,
                    f"listeners share port {port}; only one IPv4 and one IPv6 listener may",
                )
            )
    return problems


def _ip_version(host: str | None) -> int:
    if host is None:
        return 0
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).version
    except ValueError:
        return 0
