"""``logkeel configs``: kafka-configs.sh's options for topics and brokers, through the Kafka
protocol (DescribeConfigs, IncrementalAlterConfigs).

``--describe`` shows, as kafka-configs does, the configs set on the entity itself (a topic's
overrides, a broker's dynamic configs); ``--all`` shows every config with its source. A broker's
configs are asked of that broker, as Kafka's admin client does. ``--alter`` takes
``--add-config k1=v1,k2=[a,b]`` and ``--delete-config k1,k2``. logkeel's broker configs are
static (server.properties, ``--override``): the broker refuses to alter them, and the command
prints its refusal."""

from __future__ import annotations

import json
from typing import Any

import click
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from logkeel.admin.partition_info import topics
from logkeel.cli.broker_requests import (
    Admin,
    admin,
    bootstrap_option,
    command_config_option,
    fail,
    nested,
)
from logkeel.cli.kafka_style import (
    ConfigListError,
    console,
    error_text,
    one_action,
    parse_config_list,
    table,
)
from logkeel.config.types import ConfigSource
from logkeel.server.protocol import ApiKey, request_schema

__all__ = ["alter_entity", "configs_command"]

_NAME = "configs"
_RESOURCE = {"topics": 2, "brokers": 4}
_SET, _DELETE = 0, 1
# What kafka-configs --describe shows without --all: what was set on the entity.
_SET_ON_ENTITY = {
    ConfigSource.TOPIC_CONFIG,
    ConfigSource.DYNAMIC_BROKER_CONFIG,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
}


@click.command(_NAME)
@bootstrap_option
@command_config_option
@click.option("--describe", is_flag=True, help="The entity's configs (set on it; --all: every).")
@click.option("--alter", is_flag=True, help="Set (--add-config) or remove (--delete-config).")
@click.option("--entity-type", type=click.Choice(sorted(_RESOURCE)), required=True)
@click.option("--entity-name", help="The topic, or the broker id (default: every one).")
@click.option("--entity-default", is_flag=True, help="Brokers: the cluster-wide default.")
@click.option("--add-config", metavar="K1=V1,K2=[A,B]", help="Configs to set.")
@click.option("--delete-config", metavar="K1,K2", help="Configs to remove (back to the default).")
@click.option("--all", "show_all", is_flag=True, help="With --describe: every config.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of tables.")
def configs_command(
    bootstrap_server: str, describe: bool, alter: bool, entity_type: str,
    entity_name: str | None, entity_default: bool, add_config: str | None,
    delete_config: str | None, show_all: bool, as_json: bool,
) -> None:  # fmt: skip
    """Describe or alter topic and broker configs (kafka-configs.sh's options)."""
    action = one_action({"describe": describe, "alter": alter})
    if action is None:
        fail(_NAME, "give exactly one of --describe, --alter")
    if entity_default:
        if entity_type != "brokers":
            fail(_NAME, "--entity-default goes with --entity-type brokers")
        if entity_name is not None:
            fail(_NAME, "give --entity-name or --entity-default, not both")
        entity_name = ""
    session = admin(_NAME, bootstrap_server)
    if action == "describe":
        names = [entity_name] if entity_name is not None else _every(session, entity_type)
        _describe(session, entity_type, names, show_all, as_json)
        return
    if entity_name is None:
        fail(_NAME, "--alter needs --entity-name (or --entity-default)")
    if not add_config and not delete_config:
        fail(_NAME, "--alter needs --add-config and/or --delete-config")
    try:
        added = parse_config_list(add_config or "")
    except ConfigListError as exc:
        fail(_NAME, f"--add-config: {exc}")
    deleted = [k.strip() for k in (delete_config or "").split(",") if k.strip()]
    both = sorted(set(added) & set(deleted))
    if both:
        fail(_NAME, f"{', '.join(both)}: both added and deleted")
    _alter(session, entity_type, entity_name, added, deleted)


def _every(session: Admin, entity_type: str) -> list[str]:
    if entity_type == "brokers":
        return [str(b) for b in sorted(session.brokers())]
    return sorted(topics(session))


def _send(session: Admin, entity_type: str, name: str, request: Any) -> Any:
    """A broker's configs are for that broker to answer (its id names it); the rest, any."""
    if entity_type == "brokers" and name:
        if not name.isdigit():
            fail(_NAME, f"--entity-name {name!r}: a broker is named by its id")
        return session.send_to_node(int(name), request)
    return session.send(request)


def _describe(
    session: Admin, entity_type: str, names: list[str], show_all: bool, as_json: bool
) -> None:
    Request = request_schema(ApiKey.DESCRIBE_CONFIGS, 4)
    assert Request is not None
    Resource = nested(Request, "DescribeConfigsResource")
    docs: list[dict[str, Any]] = []
    for name in names:
        request = Request(
            resources=(Resource(resource_type=i8(_RESOURCE[entity_type]), resource_name=name,
                                configuration_keys=None),),
            include_synonyms=False, include_documentation=False,
        )  # fmt: skip
        result = _send(session, entity_type, name, request).results[0]
        if result.error_code != ErrorCode.none:
            fail(_NAME, f"{_entity(entity_type, name)}: {error_text(result)}")
        docs.append({
            "entity_type": entity_type, "entity_name": name,
            "configs": [
                {"name": str(c.name), "value": None if c.is_sensitive else c.value,
                 "source": _source(int(c.config_source)), "read_only": bool(c.read_only),
                 "sensitive": bool(c.is_sensitive)}
                for c in sorted(result.configs, key=lambda c: c.name)
                if show_all or int(c.config_source) in _SET_ON_ENTITY
            ],
        })  # fmt: skip
    if as_json:
        click.echo(json.dumps(docs, indent=2))
        return
    out = console()
    for doc in docs:
        title = f"configs of {_entity(entity_type, doc['entity_name'])}"
        if not show_all:
            title = "configs set on " + title.removeprefix("configs of ")
        shown = table("name", "value", "source", "read-only", title=title)
        for c in doc["configs"]:
            value = "(sensitive)" if c["sensitive"] else c["value"]
            shown.add_row(c["name"], "null" if value is None else value, c["source"],
                          "yes" if c["read_only"] else "")  # fmt: skip
        out.print(shown)


def _alter(
    session: Admin, entity_type: str, name: str, added: dict[str, str], deleted: list[str]
) -> None:
    why = alter_entity(session, entity_type, name, added, deleted)
    if why is not None:
        fail(_NAME, f"{_entity(entity_type, name)}: {why}")
    click.echo(f"Completed updating config for {_entity(entity_type, name)}.")


def alter_entity(
    session: Admin, entity_type: str, name: str, added: dict[str, str], deleted: list[str]
) -> str | None:
    """IncrementalAlterConfigs of one topic or broker (by its id; "" the default): None when
    done, else why not."""
    Request = request_schema(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)
    assert Request is not None
    Resource, Config = nested(Request, "AlterConfigsResource"), nested(Request, "AlterableConfig")
    changes = [Config(name=k, config_operation=i8(_SET), value=v) for k, v in added.items()]
    changes += [Config(name=k, config_operation=i8(_DELETE), value=None) for k in deleted]
    request = Request(
        resources=(Resource(resource_type=i8(_RESOURCE[entity_type]), resource_name=name,
                            configs=tuple(changes)),),
        validate_only=False,
    )  # fmt: skip
    result = _send(session, entity_type, name, request).responses[0]
    return None if result.error_code == ErrorCode.none else error_text(result)


def _entity(entity_type: str, name: str) -> str:
    if entity_type == "brokers":
        return "the default broker" if name == "" else f"broker {name}"
    return f"topic {name}"


def _source(number: int) -> str:
    try:
        return ConfigSource(number).name
    except ValueError:
        return str(number)
