"""``logkeel quotas``: kafka-configs.sh's client-quota form through the Kafka protocol
(DescribeClientQuotas, AlterClientQuotas).

An entity is named as kafka-configs names it: ``--entity-type users|clients`` with
``--entity-name X`` or ``--entity-default``, or, for a user and a client id together (and as
kafka-configs' short forms), ``--user X`` / ``--user-defaults`` and ``--client X`` /
``--client-defaults``. ``--alter --add-config producer_byte_rate=1048576,consumer_byte_rate=...``
sets quotas, ``--delete-config k1,k2`` removes them. ``--describe`` shows the quotas of that
entity exactly, of every entity of a type (``--entity-type users`` alone), or of every entity."""

from __future__ import annotations

import json
from typing import Any

import click
from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i8

from logkeel.cli.broker_requests import admin, bootstrap_option, command_config_option, fail, nested
from logkeel.cli.kafka_style import (
    ConfigListError,
    console,
    error_text,
    one_action,
    parse_config_list,
    table,
)
from logkeel.server.protocol import ApiKey, request_schema

__all__ = ["quotas_command"]

_NAME = "quotas"
_TYPES = {"users": "user", "clients": "client-id"}
_EXACT, _DEFAULT, _ANY = 0, 1, 2
_UNSET = object()


@click.command(_NAME)
@bootstrap_option
@command_config_option
@click.option("--describe", is_flag=True, help="The quotas set on the entity (or on every one).")
@click.option("--alter", is_flag=True, help="Set (--add-config) or remove (--delete-config).")
@click.option("--entity-type", type=click.Choice(sorted(_TYPES)), help="users or clients.")
@click.option("--entity-name", help="The user principal's name or the client id.")
@click.option("--entity-default", is_flag=True, help="The default user or client id.")
@click.option("--user", help="A user (with --client: that user's client).")
@click.option("--user-defaults", is_flag=True, help="The default user.")
@click.option("--client", help="A client id.")
@click.option("--client-defaults", is_flag=True, help="The default client id.")
@click.option("--add-config", metavar="K1=V1,K2=V2", help="Quotas to set.")
@click.option("--delete-config", metavar="K1,K2", help="Quotas to remove.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def quotas_command(
    bootstrap_server: str, describe: bool, alter: bool, entity_type: str | None,
    entity_name: str | None, entity_default: bool, user: str | None, user_defaults: bool,
    client: str | None, client_defaults: bool, add_config: str | None,
    delete_config: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Describe or alter client quotas (kafka-configs.sh's quota options)."""
    action = one_action({"describe": describe, "alter": alter})
    if action is None:
        fail(_NAME, "give exactly one of --describe, --alter")
    # entity type -> name (None: the default); a type given alone stays _UNSET (any).
    entity: dict[str, Any] = {}
    if entity_type is not None:
        if entity_name is not None and entity_default:
            fail(_NAME, "give --entity-name or --entity-default, not both")
        entity[_TYPES[entity_type]] = (
            None if entity_default else entity_name if entity_name is not None else _UNSET
        )
    elif entity_name is not None or entity_default:
        fail(_NAME, "--entity-name and --entity-default go with --entity-type")
    for kind, name, default in (
        ("user", user, user_defaults),
        ("client-id", client, client_defaults),
    ):
        if name is None and not default:
            continue
        if name is not None and default:
            fail(_NAME, f"give one of the {kind} name and its defaults, not both")
        if kind in entity:
            fail(_NAME, f"the {kind} is named twice")
        entity[kind] = name
    session = admin(_NAME, bootstrap_server)
    if action == "describe":
        _describe(session, entity, as_json)
        return
    if not entity or any(v is _UNSET for v in entity.values()):
        fail(_NAME, "--alter needs the entity: --entity-name or --entity-default (or --user, ...)")
    if not add_config and not delete_config:
        fail(_NAME, "--alter needs --add-config and/or --delete-config")
    try:
        added = {k: _number(k, v) for k, v in parse_config_list(add_config or "").items()}
    except ConfigListError as exc:
        fail(_NAME, f"--add-config: {exc}")
    deleted = [k.strip() for k in (delete_config or "").split(",") if k.strip()]
    if set(added) & set(deleted):
        fail(_NAME, f"{', '.join(sorted(set(added) & set(deleted)))}: both added and deleted")
    _alter(session, entity, added, deleted)


def _number(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        fail(_NAME, f"--add-config: {key}={text!r} is not a number")


def _describe(session: Any, entity: dict[str, Any], as_json: bool) -> None:
    Request = request_schema(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1)
    assert Request is not None
    Component = nested(Request, "ComponentData")
    components = tuple(
        Component(entity_type=kind, match_type=i8(_ANY), match=None)
        if name is _UNSET
        else Component(entity_type=kind, match_type=i8(_DEFAULT), match=None)
        if name is None
        else Component(entity_type=kind, match_type=i8(_EXACT), match=name)
        for kind, name in entity.items()
    )
    answer = session.send(Request(components=components, strict=bool(components)))
    if answer.error_code != ErrorCode.none:
        fail(_NAME, error_text(answer))
    docs = [
        {
            "entity": {e.entity_type: e.entity_name for e in entry.entity},
            "quotas": {v.key: _plain(float(v.value)) for v in entry.values},
        }
        for entry in answer.entries or ()
    ]
    if as_json:
        click.echo(json.dumps(docs, indent=2))
        return
    shown = table("entity", "quotas", title="client quotas")
    for doc in docs:
        shown.add_row(
            _entity_text(doc["entity"]), ", ".join(f"{k}={v}" for k, v in doc["quotas"].items())
        )
    console().print(shown)


def _alter(
    session: Any, entity: dict[str, Any], added: dict[str, float], deleted: list[str]
) -> None:
    Request = request_schema(ApiKey.ALTER_CLIENT_QUOTAS, 1)
    assert Request is not None
    Entry, Entity, Op = (nested(Request, n) for n in ("EntryData", "EntityData", "OpData"))
    ops = [Op(key=k, value=f64(v), remove=False) for k, v in added.items()]
    ops += [Op(key=k, value=f64(0.0), remove=True) for k in deleted]
    request = Request(
        entries=(
            Entry(
                entity=tuple(Entity(entity_type=k, entity_name=n) for k, n in entity.items()),
                ops=tuple(ops),
            ),
        ),
        validate_only=False,
    )
    result = session.send(request).entries[0]
    if result.error_code != ErrorCode.none:
        fail(_NAME, f"{_entity_text(entity)}: {error_text(result)}")
    click.echo(f"Completed updating quotas of {_entity_text(entity)}.")


def _entity_text(entity: dict[str, str | None]) -> str:
    words = {"user": "user-principal", "client-id": "client-id"}
    return ", ".join(
        f"{words.get(k, k)} " + ("<default>" if n is None else repr(n)) for k, n in entity.items()
    )


def _plain(value: float) -> float | int:
    return int(value) if value == int(value) else value
