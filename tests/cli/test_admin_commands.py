"""`logkeel topics|groups|configs` and the bootstrap list of every admin command, against one
real `logkeel serve` process, each cross-checked with confluent-kafka: what the command does is
what a real client sees, and what a real client did is what the command shows."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kio.schema.describe_log_dirs.v1.request import DescribeLogDirsRequest
from kio.schema.describe_quorum.v0.request import DescribeQuorumRequest

from logkeel.cli.broker_requests import Admin
from logkeel.cli.main import cli
from logkeel.ports import free_port
from logkeel.server.network.client import BrokerConnectionError
from logkeel.testing.certs import make_certificates
from tests.brokerproc import BrokerProcess
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path_factory.mktemp("admin-commands") / "broker",
        overrides={"group.initial.rebalance.delay.ms": "0"},
    ) as broker:
        yield broker


@pytest.fixture
def bootstrap(server: BrokerProcess) -> str:
    """A list whose first broker is down: every command must move on to the live one."""
    return f"127.0.0.1:{free_port()},{server.bootstrap}"


@pytest.fixture
def admin_client(server: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap})


def run(*args: str, code: int = 0) -> Result:
    # The tables' width, whatever pytest's process has for a terminal (none under xdist): the
    # checks read cells, which rich wraps at the default 80 columns.
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, list(args))
    assert result.exit_code == code, (result.output, result.stderr, result.exception)
    return result


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json").stdout)


@pytest.mark.parametrize(
    "command",
    [
        ["cluster", "status"],
        ["elect", "--preferred"],
        ["log-dirs", "describe"],
        ["users", "list"],
        ["acls", "list"],
        ["topics", "--list"],
        ["groups", "--list"],
        ["configs", "--describe", "--entity-type", "topics"],
    ],
)
def test_an_unreachable_list_is_one_line_and_exit_1(command: list[str]) -> None:
    dead = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    result = run(*command, "--bootstrap-server", dead, code=1)
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"logkeel {command[0]}"), lines[0]
    for address in dead.split(","):
        assert address in lines[0]
    assert "Traceback" not in result.output + result.stderr


def test_a_bad_address_is_named(server: BrokerProcess) -> None:
    result = run("topics", "--list", "--bootstrap-server", f"{server.bootstrap},nohost", code=1)
    assert "'nohost' is not HOST:PORT" in result.stderr


def test_topics_create_alter_delete_seen_by_a_real_client(
    bootstrap: str, admin_client: AdminClient
) -> None:
    out = run("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "orders.eu",
              "--partitions", "3", "--config", "retention.ms=60000").stdout  # fmt: skip
    assert "Created topic orders.eu" in out
    meta = admin_client.list_topics(timeout=10).topics["orders.eu"]
    assert len(meta.partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, "orders.eu")
    configs = admin_client.describe_configs([resource])[resource].result(timeout=10)
    assert configs["retention.ms"].value == "60000"

    again = run("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "orders.eu",
                code=1)  # fmt: skip
    assert "TOPIC_ALREADY_EXISTS" in again.stderr
    run("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "orders.eu",
        "--if-not-exists")  # fmt: skip

    # A topic a real client created is listed and described.
    admin_client.create_topics([NewTopic("from-client", 2, 1)])["from-client"].result(timeout=10)
    assert {"orders.eu", "from-client"} <= set(
        run_json("topics", "--bootstrap-server", bootstrap, "--list")
    )
    [doc] = run_json(
        "topics", "--bootstrap-server", bootstrap, "--describe", "--topic", "orders.eu"
    )
    assert doc["partition_count"] == 3 and doc["replication_factor"] == 1
    assert doc["configs"] == {"retention.ms": "60000"}
    assert [p["partition"] for p in doc["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == p["replicas"][0] == p["isr"][0] for p in doc["partitions"])
    # A single live broker: nothing under-replicated or unavailable.
    assert (
        run_json("topics", "--bootstrap-server", bootstrap, "--under-replicated-partitions") == []
    )

    run("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", "orders.eu",
        "--partitions", "5")  # fmt: skip
    assert len(admin_client.list_topics(timeout=10).topics["orders.eu"].partitions) == 5
    fewer = run("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", "orders.eu",
                "--partitions", "2", code=1)  # fmt: skip
    assert "INVALID_PARTITIONS" in fewer.stderr

    run("topics", "--bootstrap-server", bootstrap, "--delete", "--topic", "orders.eu")
    wait_until(lambda: "orders.eu" not in admin_client.list_topics(timeout=10).topics,
               what="orders.eu gone for the client")  # fmt: skip
    missing = run("topics", "--bootstrap-server", bootstrap, "--delete", "--topic", "orders.eu",
                  code=1)  # fmt: skip
    assert "no topic matches" in missing.stderr
    run(
        "topics", "--bootstrap-server", bootstrap, "--delete", "--topic", "orders.eu", "--if-exists"
    )


def test_configs_alter_seen_by_a_real_client(bootstrap: str, admin_client: AdminClient) -> None:
    admin_client.create_topics([NewTopic("configured", 1, 1)])["configured"].result(timeout=10)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "configured")

    def client_view() -> dict[str, Any]:
        return admin_client.describe_configs([resource])[resource].result(timeout=10)

    run("configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "topics",
        "--entity-name", "configured",
        "--add-config", "retention.ms=120000,cleanup.policy=[compact,delete]")  # fmt: skip
    seen = client_view()
    assert seen["retention.ms"].value == "120000"
    assert seen["cleanup.policy"].value == "compact,delete"
    [doc] = run_json("configs", "--bootstrap-server", bootstrap, "--describe", "--entity-type",
                     "topics", "--entity-name", "configured")  # fmt: skip
    assert {c["name"]: c["value"] for c in doc["configs"]} == {
        "retention.ms": "120000",
        "cleanup.policy": "compact,delete",
    }
    run("configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "topics",
        "--entity-name", "configured", "--delete-config", "retention.ms")  # fmt: skip
    assert client_view()["retention.ms"].is_default
    [full] = run_json("configs", "--bootstrap-server", bootstrap, "--describe", "--entity-type",
                      "topics", "--entity-name", "configured", "--all")  # fmt: skip
    assert {"retention.ms", "segment.bytes", "min.insync.replicas"} <= {
        c["name"] for c in full["configs"]
    }

    bad = run("configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "topics",
              "--entity-name", "configured", "--add-config", "no.such.config=1", code=1)  # fmt: skip
    assert "INVALID_CONFIG" in bad.stderr and "no.such.config" in bad.stderr
    # logkeel's broker configs are static: the broker's refusal is the command's answer.
    [broker] = run_json("configs", "--bootstrap-server", bootstrap, "--describe",
                        "--entity-type", "brokers", "--all")  # fmt: skip
    assert "log.retention.ms" in {c["name"] for c in broker["configs"]}
    refused = run("configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type",
                  "brokers", "--entity-name", broker["entity_name"],
                  "--add-config", "log.retention.ms=1", code=1)  # fmt: skip
    assert "INVALID_REQUEST" in refused.stderr and "static" in refused.stderr


def _committed(server: BrokerProcess, group: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as a real client reads them (-1001: none)."""
    reader = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group})
    try:
        got = reader.committed([KafkaTP("lagged", p) for p in range(partitions)], timeout=10)
    finally:
        reader.close()
    return {tp.partition: tp.offset for tp in got}


def _group(bootstrap: str, group: str) -> dict[str, Any]:
    [doc] = run_json("groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    return doc


def test_group_lag_members_reset_and_delete(server: BrokerProcess, bootstrap: str,
                                            admin_client: AdminClient) -> None:  # fmt: skip
    admin_client.create_topics([NewTopic("lagged", 3, 1)])["lagged"].result(timeout=10)
    producer = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(30):
        producer.produce("lagged", value=b"v%d" % i, partition=i % 3)
    assert producer.flush(10) == 0

    consumer = Consumer({
        "bootstrap.servers": server.bootstrap, "group.id": "lag-g", "client.id": "lag-client",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })  # fmt: skip
    try:
        consumer.subscribe(["lagged"])
        got = []

        def consumed() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message)
            return len(got) >= 12

        wait_until(consumed, 60, "12 records consumed")
        consumer.commit(asynchronous=False)
        committed = _committed(server, "lag-g", 3)
        # What the consumer read of each partition (-1001: nothing, so nothing committed).
        read = {p: -1001 for p in range(3)}
        for m in got:
            read[m.partition()] = max(read[m.partition()], m.offset() + 1)
        assert committed == read

        doc = _group(bootstrap, "lag-g")
        assert doc["state"] == "Stable"
        [member] = doc["members"]
        assert member["client_id"] == "lag-client"
        assert sorted(member["assignment"]) == ["lagged-0", "lagged-1", "lagged-2"]
        rows = {r["partition"]: r for r in doc["offsets"]}
        for p in range(3):
            known = committed[p] >= 0
            assert rows[p]["current_offset"] == (committed[p] if known else None)
            assert rows[p]["log_end_offset"] == 10
            assert rows[p]["lag"] == (10 - committed[p] if known else None)
            assert rows[p]["member_id"] == member["member_id"]
        assert "lag-g" in run("groups", "--bootstrap-server", bootstrap, "--list").stdout
        table = run("groups", "--bootstrap-server", bootstrap, "--describe", "--group",
                    "lag-g").stdout  # fmt: skip
        assert "lag-client" in table and "log end offset" in table

        active = run("groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group",
                     "lag-g", "--topic", "lagged", "--to-earliest", "--execute", code=1)  # fmt: skip
        assert "no members" in active.stderr
        refused = run("groups", "--bootstrap-server", bootstrap, "--delete", "--group", "lag-g",
                      code=1)  # fmt: skip
        assert "NON_EMPTY_GROUP" in refused.stderr
    finally:
        consumer.close()
    wait_until(lambda: _group(bootstrap, "lag-g")["state"] == "Empty", what="lag-g empty")

    # --dry-run (the default) shows the plan and commits nothing.
    plan = run_json("groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group",
                    "lag-g", "--topic", "lagged", "--to-earliest")  # fmt: skip
    assert {(r["partition"], r["new_offset"]) for r in plan} == {(0, 0), (1, 0), (2, 0)}
    assert _committed(server, "lag-g", 3) == committed

    # Every partition gets a committed offset first: a shift needs one to shift from.
    run("groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", "lag-g",
        "--topic", "lagged", "--to-offset", "5", "--execute")  # fmt: skip
    assert _committed(server, "lag-g", 3) == {0: 5, 1: 5, 2: 5}
    run("groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", "lag-g",
        "--all-topics", "--shift-by", "-2", "--execute")  # fmt: skip
    shifted = {0: 3, 1: 3, 2: 3}
    assert _committed(server, "lag-g", 3) == shifted
    assert {r["partition"]: r["lag"] for r in _group(bootstrap, "lag-g")["offsets"]} == {
        p: 10 - shifted[p] for p in range(3)
    }
    run("groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", "lag-g",
        "--topic", "lagged:1", "--to-datetime", "2999-01-01T00:00:00", "--execute")  # fmt: skip
    assert _committed(server, "lag-g", 3) == {**shifted, 1: 10}
    run("groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", "lag-g",
        "--topic", "lagged:0,2", "--to-offset", "3", "--execute")  # fmt: skip
    assert _committed(server, "lag-g", 3) == {0: 3, 1: 10, 2: 3}

    run("groups", "--bootstrap-server", bootstrap, "--delete", "--group", "lag-g")
    listed = run_json("groups", "--bootstrap-server", bootstrap, "--list")
    assert "lag-g" not in [g["group"] for g in listed]
    assert set(_committed(server, "lag-g", 3).values()) == {-1001}
    gone = run("groups", "--bootstrap-server", bootstrap, "--describe", "--group", "lag-g", code=1)
    assert "does not exist" in gone.stderr


def test_topics_groups_configs_reach_a_sasl_ssl_listener_with_a_command_config(
    tmp_path: Path,
) -> None:
    """No PLAINTEXT needed: Kafka client properties, as kafka-topics.sh --command-config takes
    them; the brokers Metadata names (a group's coordinator) are reached the same way."""
    certs = make_certificates(tmp_path / "certs")
    plain, secure = free_port(), free_port()
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_admin="admin-secret";')  # fmt: skip
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}",
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.location": str(certs.ca),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
    }
    config = tmp_path / "admin.properties"

    def write(password: str) -> None:
        config.write_text(
            "security.protocol=SASL_SSL\n"
            f"ssl.truststore.location={certs.ca}\n"
            "sasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="{password}";\n'
        )

    write("admin-secret")
    bootstrap = f"127.0.0.1:{free_port()},127.0.0.1:{secure}"
    with BrokerProcess(tmp_path / "broker", port=plain, overrides=overrides):
        secured = ["--bootstrap-server", bootstrap, "--command-config", str(config)]
        run("topics", *secured, "--create", "--topic", "over-tls", "--partitions", "2")
        assert "over-tls" in run_json("topics", *secured, "--list")
        [doc] = run_json("configs", *secured, "--describe", "--entity-type", "topics",
                         "--entity-name", "over-tls", "--all")  # fmt: skip
        assert doc["configs"]
        committer = Consumer({"bootstrap.servers": f"127.0.0.1:{plain}", "group.id": "tls-g"})
        try:
            committer.commit(offsets=[KafkaTP("over-tls", 1, 4)], asynchronous=False)
        finally:
            committer.close()
        [group] = run_json("groups", *secured, "--describe", "--group", "tls-g")
        assert group["coordinator"] == f"127.0.0.1:{secure}"  # the listener asked through
        assert [(r["partition"], r["current_offset"]) for r in group["offsets"]] == [(1, 4)]

        write("wrong")
        refused = run("topics", *secured, "--list", code=1)
        assert len(refused.stderr.strip().splitlines()) == 1
        assert "SASL authentication (PLAIN) as admin" in refused.stderr
        assert "wrong" not in refused.stderr


def test_the_admin_path_skips_a_dead_bootstrap_and_refuses_unserved_versions(
    server: BrokerProcess, bootstrap: str
) -> None:
    with Admin(bootstrap, client_id="admin-path-test") as admin:
        assert admin.bootstrap() == server.bootstrap  # the dead first entry was skipped
        first = admin.metadata()
        assert admin.metadata().cluster_id == first.cluster_id
        [node] = admin.brokers()
        assert admin.send_to_node(node, DescribeLogDirsRequest(topics=None)).results
        # KRaft's DescribeQuorum: never served by a ZooKeeper-based broker.
        with pytest.raises(BrokerConnectionError, match=r"does not serve DescribeQuorum v0 "
                           r"\(it serves no version\)"):  # fmt: skip
            admin.send(DescribeQuorumRequest(topics=()))
        with pytest.raises(BrokerConnectionError, match="broker 12345 is not alive"):
            admin.send_to_node(12345, DescribeLogDirsRequest(topics=None))


def test_a_frozen_first_broker_is_passed_over(
    server: BrokerProcess, admin_client: AdminClient, tmp_path: Path
) -> None:
    """SIGSTOP: it accepts connections and never answers; the next of the list is used after
    the probe's bound (10 s), not a whole request timeout."""
    admin_client.create_topics([NewTopic("past-frozen", 1, 1)])["past-frozen"].result(timeout=10)
    with BrokerProcess(tmp_path / "frozen") as frozen:
        frozen.freeze()
        try:
            started = time.monotonic()
            listed = run_json("topics", "--bootstrap-server",
                              f"{frozen.bootstrap},{server.bootstrap}", "--list")  # fmt: skip
            took = time.monotonic() - started
        finally:
            frozen.thaw()
    assert "past-frozen" in listed
    # Waited for the probe's bound, and less than a whole request timeout (30 s).
    assert 9.5 < took < 30, took
