"""``logkeel topics``: kafka-topics.sh's options, through the Kafka protocol (Metadata,
CreateTopics, CreatePartitions, DeleteTopics, DescribeConfigs).

One action per run, with Kafka's flag names (``--list``, ``--describe``, ``--create``,
``--alter``, ``--delete``) rather than sub-commands: a kafka-topics.sh line works with only the
program name changed, and the three everyday tools (topics, groups, configs) read alike. As in
Kafka, ``--topic`` is a regular expression except for ``--create`` (a name the cluster has is
taken literally even when it holds regex characters such as ``.``)."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import click
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from logkeel.admin.partition_info import TopicInfo, topics
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
    parse_key_value,
    table,
)
from logkeel.server.protocol import ApiKey, request_schema

__all__ = ["select_topics", "topics_command"]

_NAME = "topics"
_TOPIC_RESOURCE = 2
_DYNAMIC_TOPIC_CONFIG = 1
_BROKER_TIMEOUT = datetime.timedelta(seconds=30)
_ANSWER_TIMEOUT_MS = 45_000  # past the broker's own timeout, so its answer comes first


@click.command(_NAME)
@bootstrap_option
@command_config_option
@click.option("--list", "do_list", is_flag=True, help="List topic names.")
@click.option("--describe", is_flag=True, help="Partitions, leaders, replicas, ISR, configs.")
@click.option("--create", is_flag=True, help="Create --topic.")
@click.option("--alter", is_flag=True, help="Add partitions to --topic (--partitions).")
@click.option("--delete", is_flag=True, help="Delete --topic.")
@click.option("--topic", help="The topic; a regular expression except with --create.")
@click.option("--partitions", type=click.IntRange(1), help="Partition count (create, alter).")
@click.option("--replication-factor", type=click.IntRange(1), help="Replicas per partition.")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="A topic config of the new topic; repeatable.")  # fmt: skip
@click.option("--under-replicated-partitions", is_flag=True,
              help="Describe only partitions whose ISR is smaller than their replicas.")  # fmt: skip
@click.option("--unavailable-partitions", is_flag=True,
              help="Describe only partitions without a live leader.")  # fmt: skip
@click.option("--under-min-isr-partitions", is_flag=True,
              help="Describe only partitions with fewer in sync than min.insync.replicas.")  # fmt: skip
@click.option("--at-min-isr-partitions", is_flag=True,
              help="Describe only partitions with exactly min.insync.replicas in sync.")  # fmt: skip
@click.option("--exclude-internal", is_flag=True, help="Leave out the broker's own topics.")
@click.option("--if-exists", is_flag=True, help="With --alter/--delete: no topic is no error.")
@click.option("--if-not-exists", is_flag=True, help="With --create: an existing one is no error.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of tables (list, describe).")
def topics_command(
    bootstrap_server: str, do_list: bool, describe: bool, create: bool, alter: bool,
    delete: bool, topic: str | None, partitions: int | None, replication_factor: int | None,
    configs: tuple[str, ...], under_replicated_partitions: bool, unavailable_partitions: bool,
    under_min_isr_partitions: bool, at_min_isr_partitions: bool, exclude_internal: bool,
    if_exists: bool, if_not_exists: bool, as_json: bool,
) -> None:  # fmt: skip
    """Create, alter, delete, list and describe topics (kafka-topics.sh's options)."""
    only = frozenset(name for name, on in (
        ("under-replicated", under_replicated_partitions),
        ("unavailable", unavailable_partitions),
        ("under-min-isr", under_min_isr_partitions),
        ("at-min-isr", at_min_isr_partitions),
    ) if on)  # fmt: skip
    action = one_action({
        "list": do_list,
        "describe": describe or bool(only and not (do_list or create or alter or delete)),
        "create": create, "alter": alter, "delete": delete,
    })  # fmt: skip
    if action is None:
        fail(_NAME, "give exactly one of --list, --describe, --create, --alter, --delete")
    session = admin(_NAME, bootstrap_server)
    if action == "create":
        _create(session, topic, partitions, replication_factor, configs, if_not_exists)
        return
    if configs:
        fail(_NAME, "--config goes with --create; change a topic's configs with `logkeel configs`")
    known = topics(session)
    chosen = select_topics(known, topic, exclude_internal=exclude_internal)
    if topic is not None and not chosen and not if_exists:
        fail(_NAME, f"no topic matches {topic!r}")
    if action == "list":
        names = sorted(chosen)
        click.echo(json.dumps(names) if as_json else "\n".join(names))
    elif action == "describe":
        _describe(session, [known[n] for n in sorted(chosen)], only, as_json)
    elif action == "alter":
        if topic is None or partitions is None:
            fail(_NAME, "--alter needs --topic and --partitions")
        _alter(session, sorted(chosen), partitions)
    else:
        if topic is None:
            fail(_NAME, "--delete needs --topic")
        _delete(session, sorted(chosen))


def select_topics(
    known: dict[str, TopicInfo], pattern: str | None, *, exclude_internal: bool = False
) -> list[str]:
    """The names ``pattern`` selects, kafka-topics' way: the exact name if the cluster has it,
    else every name the regular expression matches in full (all when None)."""
    names = [n for n, t in known.items() if not (exclude_internal and t.internal)]
    if pattern is None:
        return names
    if pattern in names:
        return [pattern]
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        fail(_NAME, f"--topic {pattern!r} is neither a topic nor a regular expression: {exc}")
    return [n for n in names if regex.fullmatch(n)]


def _create(
    session: Admin, topic: str | None, partitions: int | None, replication_factor: int | None,
    configs: tuple[str, ...], if_not_exists: bool,
) -> None:  # fmt: skip
    if topic is None:
        fail(_NAME, "--create needs --topic")
    try:
        settings = dict(parse_key_value(c) for c in configs)
    except ConfigListError as exc:
        fail(_NAME, f"--config {exc}")
    Request = request_schema(ApiKey.CREATE_TOPICS, 7)
    assert Request is not None
    Topic, Config = nested(Request, "CreatableTopic"), nested(Request, "CreatableTopicConfig")
    request = Request(
        topics=(Topic(
            name=topic,
            num_partitions=partitions or -1,
            replication_factor=replication_factor or -1,
            assignments=(),
            configs=tuple(Config(name=k, value=v) for k, v in settings.items()),
        ),),
        timeout=_BROKER_TIMEOUT,
        validate_only=False,
    )  # fmt: skip
    result = session.send(request, _ANSWER_TIMEOUT_MS).topics[0]
    if result.error_code == ErrorCode.topic_already_exists and if_not_exists:
        return
    if result.error_code != ErrorCode.none:
        fail(_NAME, error_text(result))
    click.echo(
        f"Created topic {topic} ({int(result.num_partitions)} partition(s), replication factor "
        f"{int(result.replication_factor)})."
    )


def _alter(session: Admin, names: list[str], count: int) -> None:
    Request = request_schema(ApiKey.CREATE_PARTITIONS, 3)
    assert Request is not None
    Topic = nested(Request, "CreatePartitionsTopic")
    request = Request(
        topics=tuple(Topic(name=n, count=count, assignments=None) for n in names),
        timeout=_BROKER_TIMEOUT,
        validate_only=False,
    )
    failed = False
    for result in session.send(request, _ANSWER_TIMEOUT_MS).results:
        if result.error_code == ErrorCode.none:
            click.echo(f"Topic {result.name} now has {count} partitions.")
        else:
            failed = True
            click.echo(f"logkeel {_NAME}: {result.name}: {error_text(result)}", err=True)
    if failed:
        raise SystemExit(1)


def _delete(session: Admin, names: list[str]) -> None:
    if not names:
        return
    Request = request_schema(ApiKey.DELETE_TOPICS, 6)
    assert Request is not None
    State = nested(Request, "DeleteTopicState")
    request = Request(
        topics=tuple(State(name=n, topic_id=None) for n in names), timeout=_BROKER_TIMEOUT
    )
    failed = False
    for result in session.send(request, _ANSWER_TIMEOUT_MS).responses:
        if result.error_code == ErrorCode.none:
            click.echo(f"Deleted topic {result.name}.")
        else:
            failed = True
            click.echo(f"logkeel {_NAME}: {result.name}: {error_text(result)}", err=True)
    if failed:
        raise SystemExit(1)


def _describe(session: Admin, chosen: list[TopicInfo], only: frozenset[str], as_json: bool) -> None:
    """The topics and their partitions; with ``only``, just the partitions in one of those
    states (kafka-topics' --under-replicated-partitions and the like)."""
    live = set(session.brokers())
    overrides, min_isr = _topic_configs(session, [t.name for t in chosen])
    doc: list[dict[str, Any]] = [
        {
            "topic": t.name,
            "topic_id": None if t.topic_id is None else str(t.topic_id),
            "internal": t.internal,
            "partition_count": len(t.partitions),
            "replication_factor": max((len(p.replicas) for p in t.partitions), default=0),
            "min_insync_replicas": min_isr.get(t.name),
            "configs": overrides.get(t.name, {}),
            "partitions": [
                {**p.as_json(), "states": sorted(states)}
                for p in t.partitions
                for states in [p.states(live, min_isr.get(t.name))]
                if not only or states & only
            ],
        }
        for t in chosen
    ]
    if only:
        doc = [t for t in doc if t["partitions"]]
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    out = console()
    if not only:
        summary = table("topic", "topic id", "partitions", "RF", "configs", title="topics")
        for t in doc:
            configs = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
            summary.add_row(t["topic"], t["topic_id"] or "-", str(t["partition_count"]),
                            str(t["replication_factor"]), configs or "-")  # fmt: skip
        out.print(summary)
    rows = table("topic", "partition", "leader", "replicas", "isr", "state", title="partitions")
    for t in doc:
        for p in t["partitions"]:
            # RF 1 with min.insync.replicas 1 is "at min ISR" when healthy: named only when asked.
            states = [x for x in p["states"] if x != "at-min-isr" or x in only]
            state = ", ".join(
                f"[red]{x}[/]" if x in ("unavailable", "under-min-isr") else f"[yellow]{x}[/]"
                for x in states
            ) or "ok"  # fmt: skip
            rows.add_row(
                t["topic"], str(p["partition"]), "none" if p["leader"] < 0 else str(p["leader"]),
                ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])), state,
            )  # fmt: skip
    out.print(rows)


def _topic_configs(
    session: Admin, names: list[str]
) -> tuple[dict[str, dict[str, str | None]], dict[str, int]]:
    """Each topic's configs set on the topic itself (kafka-topics shows these), and its
    min.insync.replicas."""
    if not names:
        return {}, {}
    Request = request_schema(ApiKey.DESCRIBE_CONFIGS, 4)
    assert Request is not None
    Resource = nested(Request, "DescribeConfigsResource")
    request = Request(
        resources=tuple(
            Resource(resource_type=i8(_TOPIC_RESOURCE), resource_name=n, configuration_keys=None)
            for n in names
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    overrides: dict[str, dict[str, str | None]] = {}
    min_isr: dict[str, int] = {}
    for result in session.send(request).results:
        if result.error_code != ErrorCode.none:
            continue
        name = str(result.resource_name)
        overrides[name] = {
            str(c.name): None if c.is_sensitive else c.value
            for c in result.configs
            if int(c.config_source) == _DYNAMIC_TOPIC_CONFIG
        }
        for c in result.configs:
            if c.name == "min.insync.replicas" and c.value is not None:
                min_isr[name] = int(c.value)
    return overrides, min_isr
