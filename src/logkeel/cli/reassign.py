"""``logkeel reassign``: kafka-reassign-partitions.sh's options over AlterPartitionReassignments
and ListPartitionReassignments (KIP-455), so a Kafka command line and its plan files work with
only the program name changed.

--generate proposes a balanced, rack-aware placement (by replica count, then bytes from
DescribeLogDirs) of the topics given, on --broker-list or on the live brokers with
--add-broker / --remove-broker applied; --execute starts a plan's moves, printing the current
assignment first (the rollback plan) and, with --throttle, setting the replication throttles
(the brokers' leader/follower rates, the topics' throttled-replica lists); --verify says which
moves are done (with --wait, follows them with a progress bar) and removes the throttles once
all are, as Kafka; --cancel cancels the plan's moves still running; --replace-offline plans
and starts, in one command, the re-creation on other brokers of every replica that a failed
log dir lost."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
from kio.schema.errors import ErrorCode
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from logkeel.admin.partition_info import topics
from logkeel.admin.reassignments import alter_reassignments
from logkeel.admin.session import AdminError
from logkeel.cli.broker_requests import (
    Admin,
    admin,
    bootstrap_option,
    command_config_option,
    fail,
)
from logkeel.cli.configs import alter_entity
from logkeel.cli.kafka_style import console, one_action
from logkeel.cli.reassign_plan import (
    Broker,
    PlanError,
    parse_plan,
    parse_topics,
    plan_json,
    propose,
    replace_lost,
    throttled_replicas,
)
from logkeel.server.network.client import BrokerConnectionError
from logkeel.server.protocol import ApiKey, request_schema
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["reassign_command"]

_NAME = "reassign"
_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
_LISTS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
Plan = dict[TopicPartition, tuple[int, ...]]


@click.command("reassign")
@bootstrap_option
@command_config_option
@click.option("--generate", is_flag=True, help="Propose a plan (printed, nothing moves).")
@click.option("--execute", is_flag=True, help="Start the moves of --reassignment-json-file.")
@click.option("--verify", is_flag=True, help="Which moves of the plan are done.")
@click.option("--cancel", is_flag=True, help="Cancel the plan's moves still running.")
@click.option("--list", "list_moves", is_flag=True, help="Every move running in the cluster.")
@click.option("--replace-offline", is_flag=True,
              help="Re-create on other brokers every replica a failed log dir lost (starts it).")  # fmt: skip
@click.option("--reassignment-json-file", type=click.Path(exists=True, dir_okay=False),
              help="Kafka's reassignment JSON.")  # fmt: skip
@click.option("--topics-to-move-json-file", type=click.Path(exists=True, dir_okay=False),
              help="Kafka's topics-to-move JSON (--generate).")  # fmt: skip
@click.option("--topic", "topic_names", multiple=True, help="A topic to move (--generate).")
@click.option("--broker-list", help="Brokers to place on, 1,2,3 (--generate).")
@click.option("--add-broker", type=int, multiple=True, help="--generate: the live brokers and N.")
@click.option("--remove-broker", type=int, multiple=True,
              help="--generate: the live brokers without N (decommission).")  # fmt: skip
@click.option("--throttle", type=int, help="Bytes/s for the moves' replication (--execute).")
@click.option("--wait", is_flag=True, help="--verify/--execute: follow until done.")
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="--wait: give up after this many seconds.")  # fmt: skip
def reassign_command(
    bootstrap_server: str, generate: bool, execute: bool, verify: bool, cancel: bool,
    list_moves: bool, replace_offline: bool, reassignment_json_file: str | None,
    topics_to_move_json_file: str | None, topic_names: tuple[str, ...], broker_list: str | None,
    add_broker: tuple[int, ...], remove_broker: tuple[int, ...], throttle: int | None,
    wait: bool, timeout: float,
) -> None:  # fmt: skip
    """Move partitions' replicas between brokers (kafka-reassign-partitions.sh's options)."""
    action = one_action({"generate": generate, "execute": execute, "verify": verify,
                         "cancel": cancel, "list": list_moves,
                         "replace-offline": replace_offline})  # fmt: skip
    if action is None:
        fail(_NAME, "give exactly one of --generate, --execute, --verify, --cancel, --list, "
                    "--replace-offline")  # fmt: skip
    session = admin(_NAME, bootstrap_server)
    if action == "list":
        _print_moving(_moving(session))
        return
    if action == "generate":
        _generate(session, topics_to_move_json_file, topic_names, broker_list, add_broker,
                  remove_broker)  # fmt: skip
        return
    if action == "replace-offline":
        plan = _replacements(session)
        if not plan:
            click.echo("No replica is on a failed log dir.")
            return
        _execute(session, plan, throttle)
        if wait:
            _follow(session, plan, timeout)
            if throttle is not None:
                _remove_throttles(session, plan)
        return
    if reassignment_json_file is None:
        fail(_NAME, f"--{action} needs --reassignment-json-file")
    try:
        plan = parse_plan(Path(reassignment_json_file).read_text())
    except PlanError as exc:
        fail(_NAME, str(exc))
    if action == "execute":
        _execute(session, plan, throttle)
        if wait:
            _follow(session, plan, timeout)
    elif action == "verify":
        if wait:
            _follow(session, plan, timeout)
        _verify(session, plan)
    else:
        _cancel(session, plan)


# -- the requests ---------------------------------------------------------------------------------


def _alter(session: Admin, changes: dict[TopicPartition, tuple[int, ...] | None]) -> dict[
    TopicPartition, str | None
]:  # fmt: skip
    try:
        return alter_reassignments(session, changes)
    except AdminError as exc:
        fail(_NAME, str(exc))


def _moving(session: Admin) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
    Request = request_schema(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0)
    assert Request is not None
    answer = session.send(Request(topics=None))
    if answer.error_code != ErrorCode.none:
        fail(_NAME, f"ListPartitionReassignments refused: {answer.error_code.name.upper()}")
    return {
        TopicPartition(str(t.name), int(p.partition_index)): (
            list(p.replicas),
            list(p.adding_replicas),
            list(p.removing_replicas),
        )
        for t in answer.topics
        for p in t.partitions
    }


def _current(session: Admin, names: tuple[str, ...] | None) -> Plan:
    return {
        TopicPartition(t.name, p.partition): p.replicas
        for t in topics(session, names).values()
        for p in t.partitions
    }


def _brokers(session: Admin) -> list[Broker]:
    live = session.brokers()  # not a broker Metadata still shows for a moment after it died
    return [
        Broker(int(b.node_id), b.rack)
        for b in session.metadata(()).brokers
        if int(b.node_id) in live
    ]


def _sizes(session: Admin) -> dict[TopicPartition, int]:
    """Each partition's largest replica in bytes, from every live broker's DescribeLogDirs (a
    broker that does not answer counts nothing)."""
    Request = request_schema(ApiKey.DESCRIBE_LOG_DIRS, 4)
    assert Request is not None
    sizes: dict[TopicPartition, int] = {}
    for broker in session.brokers():
        try:
            answer = session.send_to_node(broker, Request(topics=None), missing_ok=True)
        except BrokerConnectionError:
            continue
        for d in answer.results:
            for t in d.topics:
                for p in t.partitions:
                    tp = TopicPartition(str(t.name), int(p.partition_index))
                    sizes[tp] = max(sizes.get(tp, 0), int(p.partition_size))
    return sizes


# -- the actions ----------------------------------------------------------------------------------


def _generate(
    session: Admin, topics_file: str | None, names: tuple[str, ...], broker_list: str | None,
    add: tuple[int, ...], remove: tuple[int, ...],
) -> None:  # fmt: skip
    wanted = list(names)
    if topics_file is not None:
        try:
            wanted += parse_topics(Path(topics_file).read_text())
        except PlanError as exc:
            fail(_NAME, str(exc))
    if not wanted:
        fail(_NAME, "--generate needs --topics-to-move-json-file or --topic")
    live = _brokers(session)
    racks = {b.id: b.rack for b in live}
    if broker_list is not None:
        try:
            ids = [int(b) for b in broker_list.split(",") if b.strip()]
        except ValueError:
            fail(_NAME, f"--broker-list {broker_list!r}: broker ids separated by commas")
    else:
        ids = [b for b in sorted(racks) if b not in remove] + [b for b in add if b not in racks]
    unknown = sorted(set(ids) - set(racks))
    if unknown:
        fail(_NAME, f"broker(s) {unknown} are not alive (alive: {sorted(racks)})")
    current = _current(session, tuple(dict.fromkeys(wanted)))
    missing = sorted(set(wanted) - {tp.topic for tp in current})
    if missing:
        fail(_NAME, f"topic(s) {', '.join(missing)} do not exist")
    try:
        proposed = propose(current, [Broker(i, racks.get(i)) for i in ids], _sizes(session))
    except PlanError as exc:
        fail(_NAME, str(exc))
    click.echo(f"Current partition replica assignment\n{plan_json(current)}\n")
    click.echo(f"Proposed partition reassignment configuration\n{plan_json(proposed)}")


def _replacements(session: Admin) -> Plan:
    """Partitions with replicas on failed log dirs (Metadata's offline replicas of live
    brokers), each lost replica replaced by another live broker."""
    info = topics(session)
    live = _brokers(session)
    alive = {b.id for b in live}
    current = {TopicPartition(t.name, p.partition): p.replicas
               for t in info.values() for p in t.partitions}  # fmt: skip
    lost = {
        TopicPartition(t.name, p.partition): [r for r in p.offline_replicas if r in alive]
        for t in info.values()
        for p in t.partitions
    }
    lost = {tp: rs for tp, rs in lost.items() if rs}
    try:
        return replace_lost(current, lost, live, _sizes(session))
    except PlanError as exc:
        fail(_NAME, str(exc))


def _execute(session: Admin, plan: Plan, throttle: int | None) -> None:
    current = _current(session, tuple(sorted({tp.topic for tp in plan})))
    unknown = sorted(tp for tp in plan if tp not in current)
    if unknown:
        fail(_NAME, f"partition(s) {', '.join(map(str, unknown))} do not exist")
    click.echo("Current partition replica assignment\n"
               f"{plan_json({tp: current[tp] for tp in plan})}\n\n"
               "Save this to use as the --reassignment-json-file option during rollback")  # fmt: skip
    if throttle is not None:
        _set_throttles(session, current, plan, throttle)
    results = _alter(session, dict(plan))
    failed = {tp: e for tp, e in results.items() if e is not None}
    for tp, error in sorted(failed.items()):
        click.echo(f"Reassignment of {tp} refused: {error}", err=True)
    if failed:
        fail(_NAME, f"{len(failed)} of {len(plan)} partition reassignment(s) refused")
    click.echo(f"Successfully started partition reassignment(s) for "
               f"{', '.join(str(tp) for tp in sorted(plan))}")  # fmt: skip


def _set_throttles(session: Admin, current: Plan, plan: Plan, rate: int) -> None:
    involved = sorted({b for tp in plan for b in (*plan[tp], *current.get(tp, ()))})
    for broker in involved:
        why = alter_entity(session, "brokers", str(broker), dict.fromkeys(_RATES, str(rate)), [])
        if why is not None:
            fail(_NAME, f"throttling broker {broker}: {why}")
    for topic, (leaders, followers) in throttled_replicas(current, plan).items():
        why = alter_entity(session, "topics", topic,
                           dict(zip(_LISTS, (leaders, followers), strict=True)), [])  # fmt: skip
        if why is not None:
            fail(_NAME, f"throttling topic {topic}: {why}")
    click.echo(f"The inter-broker throttle limit was set to {rate} B/s")


def _remove_throttles(session: Admin, plan: Plan) -> None:
    for broker in sorted(session.brokers()):
        alter_entity(session, "brokers", str(broker), {}, list(_RATES))
    for topic in sorted({tp.topic for tp in plan}):
        alter_entity(session, "topics", topic, {}, list(_LISTS))
    click.echo("Throttles removed.")


def _verify(session: Admin, plan: Plan) -> None:
    moving = _moving(session)
    current = _current(session, tuple(sorted({tp.topic for tp in plan})))
    pending = 0
    for tp, target in sorted(plan.items()):
        if tp in moving:
            pending += 1
            click.echo(f"Reassignment of partition {tp} is still in progress.")
        elif tuple(current.get(tp, ())) == target:
            click.echo(f"Reassignment of partition {tp} is completed.")
        else:
            click.echo(f"There is no active reassignment of partition {tp}, but replica set is "
                       f"{list(current.get(tp, ()))} rather than {list(target)}.")  # fmt: skip
    if pending == 0:
        _remove_throttles(session, plan)


def _cancel(session: Admin, plan: Plan) -> None:
    moving = _moving(session)
    running = [tp for tp in plan if tp in moving]
    if running:
        results = _alter(session, dict.fromkeys(running))
        for tp, error in sorted(results.items()):
            click.echo(f"Cancelled the reassignment of {tp}." if error is None
                       else f"Could not cancel the reassignment of {tp}: {error}")  # fmt: skip
    else:
        click.echo("None of the plan's partitions is being reassigned.")
    _remove_throttles(session, plan)


def _follow(session: Admin, plan: Plan, timeout: float) -> None:
    """A progress bar of the plan's moves until none runs (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    columns = (TextColumn("reassigning"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console(), transient=False) as progress:
        task = progress.add_task("moves", total=len(plan))
        while True:
            pending = sum(1 for tp in _moving(session) if tp in plan)
            progress.update(task, completed=len(plan) - pending)
            if pending == 0:
                return
            if time.monotonic() > deadline:
                fail(_NAME, f"{pending} move(s) still running after {timeout:.0f}s")
            time.sleep(0.5)


def _print_moving(moving: dict[TopicPartition, tuple[list[int], list[int], list[int]]]) -> None:
    if not moving:
        click.echo("No partition reassignment is in progress.")
        return
    docs = [{"topic": tp.topic, "partition": tp.partition, "replicas": r, "adding": a,
             "removing": m} for tp, (r, a, m) in sorted(moving.items())]  # fmt: skip
    click.echo(json.dumps(docs))
