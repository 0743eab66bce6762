"""``logkeel groups``: kafka-consumer-groups.sh's options, through the Kafka protocol.

``--list`` asks every broker (ListGroups: each coordinator knows only its own groups);
``--describe`` asks the group's coordinator (FindCoordinator, DescribeGroups, OffsetFetch) and
each partition's leader for its log end offset (ListOffsets), showing current offset, log end
offset and lag per partition with the member it is assigned to (``--members``, ``--state``
for the other views); ``--delete`` is DeleteGroups; ``--reset-offsets`` computes new offsets
(`group_offsets.reset_offsets`), shows them, and with ``--execute`` (not the default
``--dry-run``) commits them with OffsetCommit, which the coordinator accepts only from outside
the group while it has no members, as in Kafka."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any, TypeVar

import click
from kio.schema.errors import ErrorCode

from logkeel.admin.group_offsets import (
    ResetError,
    reset_offsets,
)
from logkeel.admin.groups import (
    committed,
    coordinator,
    describe_group,
    group_doc,
    list_groups,
    partition_leaders,
    request_type,
)
from logkeel.admin.partition_info import EARLIEST, LATEST, list_offsets
from logkeel.admin.session import AdminError
from logkeel.cli.broker_requests import (
    Admin,
    admin,
    bootstrap_option,
    command_config_option,
    fail,
    nested,
)
from logkeel.cli.kafka_style import console, one_action, table
from logkeel.server.protocol import ApiKey
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["groups_command"]

_NAME = "groups"
T = TypeVar("T")
_INACTIVE = ("Empty", "Dead")
_STRATEGIES = ("to-earliest", "to-latest", "to-datetime", "shift-by", "to-offset")


@click.command(_NAME)
@bootstrap_option
@command_config_option
@click.option("--list", "do_list", is_flag=True, help="List the groups of every broker.")
@click.option(
    "--describe", is_flag=True, help="Offsets and lag per partition (or --members, --state)."
)
@click.option("--delete", is_flag=True, help="Delete --group (it must have no members).")
@click.option("--reset-offsets", is_flag=True, help="Move --group's committed offsets.")
@click.option("--group", "group_ids", multiple=True, help="A group; repeatable.")
@click.option("--all-groups", is_flag=True, help="Every group (describe, delete).")
@click.option("--members", is_flag=True, help="With --describe: the members and their partitions.")
@click.option("--state", is_flag=True, help="With --describe or --list: the groups' states.")
@click.option("--topic", "topic_specs", multiple=True, metavar="TOPIC[:P,P...]",
              help="With --reset-offsets: a topic, or some of its partitions; repeatable.")  # fmt: skip
@click.option("--all-topics", is_flag=True, help="With --reset-offsets: every committed topic.")
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--to-offset", type=int, help="An offset, kept within each partition's log.")
@click.option("--to-datetime", metavar="YYYY-MM-DDTHH:MM:SS[.sss][+HH:MM]",
              help="The first offset at or after this time (local time without an offset).")  # fmt: skip
@click.option("--shift-by", type=int, help="Move each committed offset by N (may be negative).")
@click.option("--dry-run", is_flag=True, help="Only show the new offsets (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of tables.")
def groups_command(
    bootstrap_server: str, do_list: bool, describe: bool, delete: bool, reset_offsets: bool,
    group_ids: tuple[str, ...], all_groups: bool, members: bool, state: bool,
    topic_specs: tuple[str, ...], all_topics: bool, to_earliest: bool, to_latest: bool,
    to_offset: int | None, to_datetime: str | None, shift_by: int | None, dry_run: bool,
    execute: bool, as_json: bool,
) -> None:  # fmt: skip
    """List, describe (with lag), delete consumer groups and reset their offsets
    (kafka-consumer-groups.sh's options)."""
    action = one_action(
        {"list": do_list, "describe": describe, "delete": delete, "reset": reset_offsets}
    )
    if action is None:
        fail(_NAME, "give exactly one of --list, --describe, --delete, --reset-offsets")
    session = admin(_NAME, bootstrap_server)
    if action == "list":
        _list(session, state, as_json)
        return
    if all_groups and group_ids:
        fail(_NAME, "give --group or --all-groups, not both")
    wanted = sorted(_list_groups(session)) if all_groups else list(group_ids)
    if not wanted and not all_groups:
        fail(
            _NAME,
            f"--{action if action != 'reset' else 'reset-offsets'} needs --group or --all-groups",
        )
    if action == "describe":
        _describe(session, wanted, members, state, as_json)
    elif action == "delete":
        _delete(session, wanted)
    else:
        if dry_run and execute:
            fail(_NAME, "give --dry-run or --execute, not both")
        strategy = one_action({
            "to-earliest": to_earliest, "to-latest": to_latest,
            "to-offset": to_offset is not None, "to-datetime": to_datetime is not None,
            "shift-by": shift_by is not None,
        })  # fmt: skip
        if strategy is None:
            fail(_NAME, "--reset-offsets needs exactly one of --" + ", --".join(_STRATEGIES))
        if bool(topic_specs) == all_topics:
            fail(_NAME, "--reset-offsets needs --topic or --all-topics (one of them)")
        for group in wanted:
            _reset(session, group, strategy, topic_specs, to_offset or 0, shift_by or 0,
                   _timestamp(to_datetime), execute, as_json)  # fmt: skip


# -- requests -------------------------------------------------------------------------------


def _call(fn: Callable[..., T], *args: Any) -> T:
    """An `admin.groups` request whose refusal ends the command."""
    try:
        return fn(*args)
    except AdminError as exc:
        fail(_NAME, str(exc))


def _skipped(node: int, problem: str) -> None:
    click.echo(f"logkeel {_NAME}: the groups of broker {node} are left out: {problem}", err=True)


def _list_groups(session: Admin) -> dict[str, tuple[str, str]]:
    return _call(list_groups, session, _skipped)


def _coordinator(session: Admin, group: str) -> str:
    return _call(coordinator, session, group)


def _describe_group(session: Admin, coordinator_address: str, group: str) -> Any:
    return _call(describe_group, session, coordinator_address, group)


def _committed(session: Admin, coordinator_address: str, group: str) -> dict[TopicPartition, int]:
    return _call(committed, session, coordinator_address, group)


def _group_doc(session: Admin, group: str) -> dict[str, Any]:
    return _call(group_doc, session, group)


# -- actions --------------------------------------------------------------------------------


def _list(session: Admin, with_state: bool, as_json: bool) -> None:
    found = _list_groups(session)
    if as_json:
        doc = [{"group": g, "state": s, "protocol_type": p} for g, (s, p) in sorted(found.items())]
        click.echo(json.dumps(doc, indent=2))
    elif with_state:
        shown = table("group", "state", "protocol type")
        for g, (s, p) in sorted(found.items()):
            shown.add_row(g, s, p or "-")
        console().print(shown)
    else:
        for g in sorted(found):
            click.echo(g)


def _describe(session: Admin, groups: list[str], members: bool, state: bool, as_json: bool) -> None:
    docs = [_group_doc(session, g) for g in groups]
    if as_json:
        click.echo(json.dumps(docs, indent=2))
        return
    out = console()
    for doc in docs:
        heading = (
            f"group {doc['group']}: {doc['state']}, {len(doc['members'])} member(s), "
            f"coordinator {doc['coordinator']}"
        )
        if state:
            shown = table("group", "coordinator", "assignment strategy", "state", "members")
            shown.add_row(doc["group"], doc["coordinator"], doc["assignment_strategy"] or "-",
                          doc["state"], str(len(doc["members"])))  # fmt: skip
        elif members:
            shown = table("consumer id", "group instance id", "host", "client id", "partitions",
                          title=heading)  # fmt: skip
            for m in doc["members"]:
                shown.add_row(m["member_id"], m["group_instance_id"] or "-", m["host"],
                              m["client_id"], ", ".join(m["assignment"]) or "-")  # fmt: skip
        else:
            shown = table("topic", "partition", "current offset", "log end offset", "lag",
                          "consumer id", "host", "client id", title=heading)  # fmt: skip
            by_id = {m["member_id"]: m for m in doc["members"]}
            for r in doc["offsets"]:
                m = by_id.get(r["member_id"] or "", {})
                shown.add_row(
                    r["topic"], str(r["partition"]), _dash(r["current_offset"]),
                    _dash(r["log_end_offset"]), _dash(r["lag"]), r["member_id"] or "-",
                    m.get("host", "-"), m.get("client_id", "-"),
                )  # fmt: skip
        out.print(shown)


def _delete(session: Admin, groups: list[str]) -> None:
    Request = request_type(ApiKey.DELETE_GROUPS, 2)
    failed = False
    for group in groups:
        result = session.send_to(_coordinator(session, group), Request(groups_names=(group,)))
        for r in result.results:
            if r.error_code == ErrorCode.none:
                click.echo(f"Deleted consumer group {r.group_id}.")
            else:
                failed = True
                click.echo(f"logkeel {_NAME}: {r.group_id}: {r.error_code.name.upper()}", err=True)
    if failed:
        raise SystemExit(1)


def _reset(
    session: Admin, group: str, strategy: str, topic_specs: tuple[str, ...], offset: int,
    shift: int, timestamp: int | None, execute: bool, as_json: bool,
) -> None:  # fmt: skip
    coordinator = _coordinator(session, group)
    described = _describe_group(session, coordinator, group)
    if str(described.group_state) not in _INACTIVE:
        fail(_NAME, f"offsets of {group} can only be reset while it has no members; it is "
                    f"{described.group_state} with {len(described.members)} member(s)")  # fmt: skip
    committed = _committed(session, coordinator, group)
    if topic_specs:
        named = {s.partition(":")[0] for s in topic_specs}
        leaders = partition_leaders(session, named)
        missing = named - {tp.topic for tp in leaders}
        if missing:
            fail(_NAME, f"unknown topic(s): {', '.join(sorted(missing))}")
        chosen = _partitions_of(topic_specs, leaders)
    else:
        leaders = partition_leaders(session, {tp.topic for tp in committed})
        chosen = [tp for tp in committed if tp in leaders]
    wanted = {tp: leaders[tp] for tp in chosen}
    try:
        plan = reset_offsets(
            strategy, chosen, committed,
            list_offsets(session, wanted, EARLIEST), list_offsets(session, wanted, LATEST),
            shift=shift, offset=offset,
            by_time=None if timestamp is None else list_offsets(session, wanted, timestamp),
        )  # fmt: skip
    except ResetError as exc:
        fail(_NAME, f"{group}: {exc}")
    if execute:
        _commit(session, coordinator, group, plan)
    if as_json:
        doc = [{"group": group, "topic": tp.topic, "partition": tp.partition, "new_offset": o,
                "previous_offset": committed.get(tp)} for tp, o in plan.items()]  # fmt: skip
        click.echo(json.dumps(doc, indent=2))
        return
    title = f"group {group}: " + ("offsets committed" if execute else "dry run (--execute commits)")
    shown = table("topic", "partition", "previous offset", "new offset", title=title)
    for tp, new in plan.items():
        shown.add_row(tp.topic, str(tp.partition), _dash(committed.get(tp)), str(new))
    console().print(shown)


def _partitions_of(
    specs: tuple[str, ...], leaders: dict[TopicPartition, int]
) -> list[TopicPartition]:
    chosen = []
    for spec in specs:
        name, _, listed = spec.partition(":")
        every = sorted(tp for tp in leaders if tp.topic == name)
        if not listed:
            chosen += every
            continue
        try:
            numbers = [int(p) for p in listed.split(",")]
        except ValueError:
            fail(_NAME, f"--topic {spec!r}: partitions are numbers (TOPIC:0,1)")
        unknown = [p for p in numbers if TopicPartition(name, p) not in leaders]
        if unknown:
            fail(_NAME, f"{name} has no partition {', '.join(map(str, unknown))}")
        chosen += [TopicPartition(name, p) for p in numbers]
    return sorted(set(chosen))


def _commit(session: Admin, coordinator: str, group: str, plan: dict[TopicPartition, int]) -> None:
    Request = request_type(ApiKey.OFFSET_COMMIT, 8)
    Topic = nested(Request, "OffsetCommitRequestTopic")
    Partition = nested(Request, "OffsetCommitRequestPartition")
    by_topic: dict[str, list[Any]] = {}
    for tp, new in plan.items():
        by_topic.setdefault(tp.topic, []).append(
            Partition(
                partition_index=tp.partition,
                committed_offset=new,
                committed_leader_epoch=-1,
                committed_metadata="",
            )  # fmt: skip
        )
    request = Request(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=tuple(Topic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )  # fmt: skip
    answer = session.send_to(coordinator, request)
    problems = [
        f"{t.name}-{int(p.partition_index)}: {p.error_code.name.upper()}"
        for t in answer.topics
        for p in t.partitions
        if p.error_code != ErrorCode.none
    ]
    if problems:
        fail(_NAME, f"{group}: commit refused: {'; '.join(problems)}")


def _timestamp(text: str | None) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 time (local time when it names no zone)."""
    if text is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        fail(_NAME, f"--to-datetime {text!r} is not YYYY-MM-DDTHH:MM:SS[.sss][+HH:MM]")
    if when.tzinfo is None:
        when = when.astimezone()  # a naive time is local, as Kafka reads it
    return int(when.timestamp() * 1000)


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)
