"""What the console's action endpoints accept, decided without sockets: which request may act
(a CSRF defence: the per-process token the page carries, in a header no other site's page can
set without reading ours, and an Origin and Host that are the console's own -- a DNS-rebound
name is not), and what one action asks (each confirmed by repeating its subject)."""

from __future__ import annotations

import ipaddress
import re
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from logkeel.storage.topic_partition import TopicPartition, validate_topic_name

__all__ = [
    "ANY_ADDRESS",
    "KINDS",
    "TOKEN_HEADER",
    "Action",
    "ActionRefused",
    "allowed_hosts",
    "bounded_int",
    "check_origin",
    "host_allowed",
    "parse_action",
    "served_hosts",
    "topic_name",
]

TOKEN_HEADER = "x-logkeel-console-token"
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
_DECIMAL = re.compile(r"-?[0-9]{1,20}")
KINDS = ("preferred-election", "designated-election", "log-dir-online", "reassignment")


class ActionRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Action:
    kind: str
    subject: str  # what the operator confirms by typing it again
    tp: TopicPartition | None = None
    replica: int | None = None
    force: bool = False
    broker: int | None = None
    log_dir: str | None = None
    replicas: tuple[int, ...] = ()


def allowed_hosts(listen_host: str, port: int) -> frozenset[str] | None:
    """The Host headers the console answers for: its listen address, and the loopback names
    when it listens on loopback; None when it listens on every interface, where its names are
    not known (`served_hosts`)."""
    host = listen_host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        return None
    names = {host}
    try:
        if ipaddress.ip_address(host).is_loopback:
            names |= {"127.0.0.1", "localhost", "::1"}
    except ValueError:
        if host == "localhost":
            names |= {"127.0.0.1", "::1"}
    return frozenset(f"[{n}]:{port}" if ":" in n else f"{n}:{port}" for n in names)


# In a set of allowed hosts: listening on every interface, whose names are not all known; any
# IP address then (a DNS-rebound page sends its own name, never an address).
ANY_ADDRESS = "*"


def served_hosts(listen_host: str, port: int) -> frozenset[str]:
    """The Host headers a console listening on ``listen_host``:``port`` answers: its
    `allowed_hosts`; listening on every interface, `ANY_ADDRESS`, localhost and this machine's
    names (asked once, here: the FQDN may take a DNS lookup)."""
    listed = allowed_hosts(listen_host, port)
    if listed is not None:
        return listed
    names = {"localhost", socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset({ANY_ADDRESS} | {f"{n}:{port}" for n in names})


def host_allowed(host: str, hosts: frozenset[str] | None) -> bool:
    """Whether the console answers a request whose Host header is ``host``: one of ``hosts``
    (None: any), or with `ANY_ADDRESS` any IP address. A DNS-rebound name is none of them: the
    attacker's page reads the console as its own origin, token included, so a Host that is any
    name would let it read every view and act."""
    host = host.lower()
    if hosts is None or host in hosts:
        return True
    if ANY_ADDRESS not in hosts:
        return False
    try:
        ipaddress.ip_address(urlsplit(f"//{host}").hostname or "")
    except ValueError:
        return False
    return True


def check_origin(
    headers: Mapping[str, str], token: str, hosts: frozenset[str] | None
) -> str | None:
    """Why the request may not act (None: it may). The page sends the token it was served in
    a header and the browser sends Origin with every POST; a form or fetch from another site
    has neither our token nor our origin."""
    if not secrets.compare_digest(headers.get(TOKEN_HEADER, "").encode(), token.encode()):
        return "missing or wrong console token: reload the console's page"
    host = headers.get("host", "")
    if not host_allowed(host, hosts):
        return f"Host {host!r} is not this console's address"
    origin = headers.get("origin")
    if origin is None:
        return "no Origin header: actions are taken from the console's own page"
    if urlsplit(origin).netloc.lower() != host.lower():
        return f"Origin {origin!r} is not this console ({host})"
    return None


def topic_name(value: Any) -> str:
    """``value`` if it is a legal topic name (ValueError): the broker closes the connection of a
    request naming a longer one, which the page would tell as the broker failing."""
    if not isinstance(value, str) or validate_topic_name(value) is not None:
        raise ValueError("a topic name is 1 to 249 of ASCII alphanumerics, '.', '_' and '-'")
    return value


def bounded_int(value: Any, high: int) -> int:
    """``value`` as an integer in [0, ``high``]: a JSON integer or its decimal text, never a
    float, a boolean or a number out of the wire's range (ValueError)."""
    if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise ValueError(f"{value!r} is not an integer from 0 to {high}")
    return value


def parse_action(kind: str, body: Any) -> Action:
    """The action ``body`` asks for; ActionRefused (400, 404) says what is wrong with it."""
    if kind not in KINDS:
        raise ActionRefused(404, f"no action {kind!r}: {', '.join(KINDS)}")
    if not isinstance(body, dict):
        raise ActionRefused(400, "the body is a JSON object")
    try:
        if kind == "log-dir-online":
            broker, log_dir = bounded_int(body["broker"], INT32_MAX), str(body["log_dir"])
            if not log_dir:
                raise ValueError("empty log dir")
            action = Action(kind, f"{broker}:{log_dir}", broker=broker, log_dir=log_dir)
        else:
            tp = TopicPartition(
                topic_name(body["topic"]), bounded_int(body["partition"], INT32_MAX)
            )
            replica = (
                bounded_int(body["replica"], INT32_MAX) if kind == "designated-election" else None
            )
            replicas = _replicas(body["replicas"]) if kind == "reassignment" else ()
            force = body.get("force", False)
            if not isinstance(force, bool):  # "false" is not False: force may lose records
                raise ValueError("force is true or false")
            action = Action(kind, str(tp), tp=tp, replica=replica,
                            force=force, replicas=replicas)  # fmt: skip
    except (KeyError, ValueError, TypeError):
        raise ActionRefused(400, _NEEDS[kind]) from None
    if body.get("confirm") != action.subject:
        raise ActionRefused(400, f"not confirmed: send confirm={action.subject!r} to run it")
    return action


_NEEDS = {
    "preferred-election": "give topic and partition",
    "designated-election": "give topic, partition and replica (force: true or false)",
    "log-dir-online": "give broker (an id) and log_dir",
    "reassignment": "give topic, partition and replicas (broker ids, e.g. 1,2,3)",
}


def _replicas(value: Any) -> tuple[int, ...]:
    items = value.split(",") if isinstance(value, str) else value
    replicas = tuple(bounded_int(r, INT32_MAX) for r in items)
    if not replicas or len(set(replicas)) != len(replicas):
        raise ValueError("replicas must be distinct broker ids")
    return replicas
