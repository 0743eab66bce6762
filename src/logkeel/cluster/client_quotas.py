"""Client quotas as Kafka defines them (KIP-55, KIP-124, KIP-546): which entities they are set
on, which one applies to a connection, and how DescribeClientQuotas filters them. Pure: no IO.

An entity is a user, a client id, or both, each either named or the default
(``/users/<default>``). The quota that applies to a request of (user, client id) is, for each
quota key separately, the first of Kafka's eight levels that sets it:

    /users/<u>/clients/<c>, /users/<u>/clients/<default>, /users/<u>,
    /users/<default>/clients/<c>, /users/<default>/clients/<default>, /users/<default>,
    /clients/<c>, /clients/<default>

Clients charged to the same quota share one rate: the level decides the rate's key. A quota on
/users/<u> is shared by every client of <u>; one on /clients/<default> is each client id's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "FilterComponent",
    "QuotaEntity",
    "QuotaError",
    "ResolvedQuota",
    "apply_changes",
    "entity_key",
    "matches",
    "parse_entity_key",
    "resolve",
    "user_of_principal",
]

USER = "user"
CLIENT_ID = "client-id"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
# Whole numbers in Kafka (LONG configs); request_percentage is a DOUBLE.
_WHOLE = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
_DEFAULT = "<default>"


class QuotaError(ValueError):
    """A request names an entity, key or value Kafka would refuse (INVALID_REQUEST)."""


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """``user``/``client_id``: a name, None for the default, or absent (``present`` False)."""

    user: str | None = None
    client_id: str | None = None
    has_user: bool = False
    has_client: bool = False

    @classmethod
    def of(cls, components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
        """From AlterClientQuotas' (entity_type, entity_name) pairs; refuses what Kafka does."""
        seen: dict[str, str | None] = {}
        for kind, name in components:
            if kind in seen:
                raise QuotaError(f"Duplicate {kind} found in entity")
            if kind not in (USER, CLIENT_ID):
                # Kafka's ip entity carries only connection_creation_rate, not built here.
                raise QuotaError(f"Unsupported quota entity type {kind!r} (user, client-id)")
            if name == "":
                raise QuotaError(f"Empty {kind} name; a default entity has a null name")
            seen[kind] = name
        if not seen:
            raise QuotaError("Invalid empty client quota entity")
        return cls(seen.get(USER), seen.get(CLIENT_ID), USER in seen, CLIENT_ID in seen)

    def components(self) -> list[tuple[str, str | None]]:
        out: list[tuple[str, str | None]] = []
        if self.has_user:
            out.append((USER, self.user))
        if self.has_client:
            out.append((CLIENT_ID, self.client_id))
        return out

    def __str__(self) -> str:
        return entity_key(self)


def entity_key(entity: QuotaEntity) -> str:
    """Kafka's znode path form, the key quotas are stored under: ``users/alice/clients/<default>``."""
    parts = []
    if entity.has_user:
        parts.append(f"users/{_quote(entity.user)}")
    if entity.has_client:
        parts.append(f"clients/{_quote(entity.client_id)}")
    return "/".join(parts)


def parse_entity_key(key: str) -> QuotaEntity:
    parts = key.split("/")
    pairs = dict(zip(parts[::2], parts[1::2], strict=True))
    return QuotaEntity(
        _unquote(pairs["users"]) if "users" in pairs else None,
        _unquote(pairs["clients"]) if "clients" in pairs else None,
        "users" in pairs,
        "clients" in pairs,
    )


def _quote(name: str | None) -> str:
    # Kafka sanitizes names for znode paths by URL-encoding; '%' and '/' are what would break
    # splitting the key, and '<' keeps a user literally named <default> apart from the default.
    if name is None:
        return _DEFAULT
    return name.replace("%", "%25").replace("/", "%2F").replace("<", "%3C")


def _unquote(text: str) -> str | None:
    if text == _DEFAULT:
        return None
    return text.replace("%3C", "<").replace("%2F", "/").replace("%25", "%")


def validate_value(key: str, value: float) -> float:
    if key not in QUOTA_KEYS:
        raise QuotaError(f"Invalid configuration key {key}")
    if not value > 0:
        raise QuotaError(f"Quota {key} must be positive, not {value}")
    if key in _WHOLE and value != int(value):
        raise QuotaError(f"Quota {key} must be a whole number of bytes per second, not {value}")
    return float(value)


def apply_changes(
    current: Mapping[str, float], ops: Iterable[tuple[str, float | None]]
) -> dict[str, float]:
    """``current`` with ``ops`` applied: (key, value) sets, (key, None) removes (a key that is
    not set is removed silently, as in Kafka). A key twice is refused."""
    seen: set[str] = set()
    out = dict(current)
    for key, value in ops:
        if key in seen:
            raise QuotaError(f"Duplicate quota key {key}")
        seen.add(key)
        if key not in QUOTA_KEYS:
            raise QuotaError(f"Invalid configuration key {key}")
        if value is None:
            out.pop(key, None)
        else:
            out[key] = validate_value(key, value)
    return out


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    """The quota of one key that applies to a request: its bound and the rate it is charged
    to (``(user, client id)``, "" where the level has no such entity)."""

    bound: float
    rate_key: tuple[str, str]
    entity: str


def _levels(user: str, client_id: str) -> list[tuple[QuotaEntity, tuple[str, str]]]:
    u, c = user, client_id
    return [
        (QuotaEntity(u, c, True, True), (u, c)),
        (QuotaEntity(u, None, True, True), (u, c)),
        (QuotaEntity(u, None, True, False), (u, "")),
        (QuotaEntity(None, c, True, True), (u, c)),
        (QuotaEntity(None, None, True, True), (u, c)),
        (QuotaEntity(None, None, True, False), (u, "")),
        (QuotaEntity(None, c, False, True), ("", c)),
        (QuotaEntity(None, None, False, True), ("", c)),
    ]


def resolve(
    quotas: Mapping[str, Mapping[str, float]], key: str, user: str, client_id: str
) -> ResolvedQuota | None:
    """The quota ``key`` for a request of ``user`` (principal name) and ``client_id``: the first
    of Kafka's eight levels that sets it, or None (unlimited). ``quotas``: entity key -> values."""
    if not quotas:
        return None
    for entity, rate_key in _levels(user, client_id):
        values = quotas.get(entity_key(entity))
        if values and key in values:
            return ResolvedQuota(values[key], rate_key, entity_key(entity))
    return None


def user_of_principal(principal: str) -> str:
    """Kafka keys user quotas by the principal's name: ``User:alice`` -> ``alice``."""
    return principal.split(":", 1)[1] if ":" in principal else principal


@dataclass(frozen=True, slots=True)
class FilterComponent:
    """One DescribeClientQuotas filter component: ``match_type`` 0 exact (``match`` names it),
    1 the default entity, 2 any entity of the type (ZooKeeper-mode Kafka counts the default too)."""

    entity_type: str
    match_type: int
    match: str | None = None

    def check(self) -> None:
        if self.entity_type not in (USER, CLIENT_ID):
            raise QuotaError(f"Custom entity type {self.entity_type!r} not supported")
        if self.match_type == MATCH_EXACT and self.match is None:
            raise QuotaError(f"Exact match on {self.entity_type} needs a name")
        if self.match_type != MATCH_EXACT and self.match is not None:
            raise QuotaError(f"Match type {self.match_type} of {self.entity_type} takes no name")
        if self.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise QuotaError(f"Unknown match type {self.match_type}")


def check_filter(components: Iterable[FilterComponent]) -> list[FilterComponent]:
    out = list(components)
    kinds = [c.entity_type for c in out]
    if len(set(kinds)) != len(kinds):
        raise QuotaError("Duplicate filter component entity type")
    for c in out:
        c.check()
    return out


def matches(entity: QuotaEntity, components: Iterable[FilterComponent], strict: bool) -> bool:
    """Kafka's filter: every component matches the entity's name of its type; ``strict``
    also refuses entities with types the filter does not name."""
    named = {USER: (entity.has_user, entity.user), CLIENT_ID: (entity.has_client, entity.client_id)}
    kinds = set()
    for c in components:
        kinds.add(c.entity_type)
        has, name = named[c.entity_type]
        if not has:
            return False
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
    if strict:
        return all(not has or kind in kinds for kind, (has, _) in named.items())
    return True
