"""`logkeel console`'s endpoints (Starlette's TestClient, its pollers running) against real
`logkeel serve` processes, written to and read back with confluent-kafka: every endpoint, the
message browser honouring read_committed, actions refused unless allowed and confirmed, a
broker going down and coming back without a 500, and no secret of --command-config in any
answer."""

from __future__ import annotations

import errno
import json
import logging
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient, NewTopic

from logkeel.cli.main import cli
from logkeel.config.properties import load_properties
from logkeel.console.actions import TOKEN_HEADER
from logkeel.console.app import ConsoleState, create_app
from logkeel.ports import free_port
from logkeel.server.network.client import ClientSecurity
from logkeel.server.network.inter_broker import client_security
from logkeel.testing.certs import make_certificates
from logkeel.testing.faulty_fs import FaultyFs
from tests.brokerproc import BrokerProcess
from tests.server.admin_clients import offline_log_dirs
from tests.waiting import wait_until

with warnings.catch_warnings():  # it would rather have httpx2, which is not packaged here
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

TOPIC = "console-t"
ENDPOINTS = ("/api/overview", "/api/partitions", "/api/groups", "/api/elections",
             "/api/throughput")  # fmt: skip


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path_factory.mktemp("console") / "broker",
        overrides={"group.initial.rebalance.delay.ms": "0", "transaction.state.log.replication.factor": "1",
                   "transaction.state.log.min.isr": "1"},
    ) as b:  # fmt: skip
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(20)
        producer = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(5):
            producer.produce(TOPIC, key=f"k{i}", value=f"value-{i}", partition=0,
                             headers=[("h", b"\xff\x00")])  # fmt: skip
        producer.produce(TOPIC, key=b"\x00\x01", value=b"\xfe\xfa", partition=0)
        assert producer.flush(20) == 0
        tx = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "console-tx"})
        tx.init_transactions(30)
        tx.begin_transaction()
        tx.produce(TOPIC, value=b"aborted", partition=0)
        assert tx.flush(20) == 0  # on the broker before the abort, not purged by the client
        tx.abort_transaction(30)
        tx.begin_transaction()
        tx.produce(TOPIC, value=b"committed", partition=0)
        tx.commit_transaction(30)
        committer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "console-g"})
        try:
            committer.commit(offsets=[KafkaTP(TOPIC, 0, 2)], asynchronous=False)
        finally:
            committer.close()
        yield b


def client_of(bootstrap: str, *, allow_actions: bool = False,
              security: ClientSecurity | None = None,
              hosts: frozenset[str] | None = None) -> TestClient:  # fmt: skip
    # The first address is down: the console must bootstrap from the next one.
    state = ConsoleState([f"127.0.0.1:{free_port()}", *bootstrap.split(",")],
                         security or ClientSecurity(), interval_s=0.3)  # fmt: skip
    return TestClient(create_app(state, allow_actions=allow_actions, hosts=hosts))


def page_token(client: TestClient) -> str:
    """The token the page carries for its actions (as the browser reads it)."""
    found = re.search(r'name="logkeel-console-token" content="([^"]+)"', client.get("/").text)
    assert found is not None
    return found.group(1)


def act(client: TestClient, kind: str, body: dict[str, Any], **headers: str) -> Any:
    """An action as the console's page posts it: its token and its own origin."""
    sent = {TOKEN_HEADER: page_token(client), "origin": "http://testserver", **headers}
    return client.post(f"/api/actions/{kind}", json=body, headers=sent)


def get(client: TestClient, path: str, **params: Any) -> Any:
    answer = client.get(path, params=params)
    assert answer.status_code == 200, (path, answer.text)
    return answer.json()


def test_every_view_shows_the_broker_its_topic_and_the_group(broker: BrokerProcess) -> None:
    with client_of(broker.bootstrap) as client:
        page = client.get("/")
        assert page.status_code == 200 and "logkeel console" in page.text
        assert "setTimeout(refresh" in client.get("/static/console.js").text
        overview = wait_until(
            lambda: (o := get(client, "/api/overview"))["brokers"] and o, 20, "a first poll"
        )
        [b] = overview["brokers"]
        assert b["alive"] and b["controller"] and b["port"] == broker.port
        assert overview["error"] is None and overview["actions_allowed"] is False
        [d] = b["log_dirs"]
        assert d["error"] is None and d["bytes"] > 0

        def partitions() -> Any:
            found = {p["partition"]: p for p in get(client, "/api/partitions")["partitions"]
                     if p["topic"] == TOPIC}  # fmt: skip
            # 6 records, 2 transactions of 1 record and a marker (written after EndTxn answers)
            return found.get(0, {}).get("log_end_offset") == 10 and found

        parts = wait_until(partitions, 20, "the partitions with the commit marker")
        assert sorted(parts) == [0, 1]
        assert parts[0]["size_bytes"] > 0 and parts[1]["log_end_offset"] == 0
        assert not parts[0]["offline"] and not parts[0]["under_replicated"]

        def group() -> Any:
            found = [g for g in get(client, "/api/groups")["groups"] if g["group"] == "console-g"]
            return found and len(found[0]["lag_trend"]) >= 2 and found[0]

        g = wait_until(group, 30, "the group with a lag trend")
        [row] = [r for r in g["offsets"] if r["partition"] == 0]
        assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (2, 10, 8)
        assert g["total_lag"] == 8 and g["lag_trend"][-1][1] == 8

        elections = get(client, "/api/elections")
        assert elections["losses"] is None and "single node" in elections["losses_note"]
        assert elections["observed"] == [] and elections["not_recorded"]
        assert elections["history"] == [] and "single node" in elections["history_note"]

        rates = wait_until(
            lambda: (r := get(client, "/api/throughput"))["topics"].get(TOPIC) and r,
            20,
            "a throughput sample",
        )
        assert all(rate >= 0 for _, rate in rates["topics"][TOPIC])


def test_the_message_browser_reads_committed_records_as_text_and_hex(
    broker: BrokerProcess,
) -> None:
    with client_of(broker.bootstrap) as client:
        page = get(client, "/api/messages", topic=TOPIC, partition=0)
        values = [r["value"]["text"] for r in page["records"]]
        assert values == [*(f"value-{i}" for i in range(5)), None, "committed"]
        first, binary = page["records"][0], page["records"][5]
        assert first["key"]["text"] == "k0"
        assert first["headers"] == [{"key": "h", "value": {"text": None, "hex": "ff00", "size": 2}}]
        assert binary["key"]["hex"] == "0001" and binary["value"]["hex"] == "fefa"
        assert page["isolation_level"] == "read_committed"

        later = get(client, "/api/messages", topic=TOPIC, partition=0, offset=3, limit=2)
        assert [r["offset"] for r in later["records"]] == [3, 4]
        by_time = get(client, "/api/messages", topic=TOPIC, partition=0,
                      timestamp_ms=first["timestamp_ms"])  # fmt: skip
        assert by_time["records"][0]["offset"] == 0
        future = get(client, "/api/messages", topic=TOPIC, partition=0,
                     timestamp_ms=first["timestamp_ms"] + 10**9)  # fmt: skip
        assert future["records"] == [] and "no record" in future["note"]

        missing = client.get("/api/messages", params={"topic": "nope", "partition": 0})
        assert missing.status_code == 404 and "does not exist" in missing.json()["error"]
        bad = client.get("/api/messages", params={"topic": TOPIC, "partition": "x"})
        assert bad.status_code == 400 and "integers" in bad.json()["error"]


def test_actions_are_absent_unless_allowed(broker: BrokerProcess) -> None:
    body = {"topic": TOPIC, "partition": 0, "confirm": f"{TOPIC}-0"}
    with client_of(broker.bootstrap) as client:
        for kind in ("preferred-election", "designated-election"):
            refused = client.post(f"/api/actions/{kind}", json={**body, "replica": 1})
            assert refused.status_code == 403
            assert "--allow-actions" in refused.json()["error"]
        assert client.get("/api/actions/preferred-election").status_code == 405


def test_an_allowed_action_needs_its_confirmation_and_is_logged(
    broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    with client_of(broker.bootstrap, allow_actions=True) as client:
        unconfirmed = act(client, "preferred-election",
                          {"topic": TOPIC, "partition": 0, "confirm": "yes"})  # fmt: skip
        assert unconfirmed.status_code == 400 and f"{TOPIC}-0" in unconfirmed.json()["error"]
        with caplog.at_level(logging.WARNING, logger="logkeel.console.app"):
            done = act(client, "preferred-election",
                       {"topic": TOPIC, "partition": 0, "confirm": f"{TOPIC}-0"})  # fmt: skip
        assert done.status_code == 200, done.text
        [result] = done.json()["results"]
        # The only replica leads already: Kafka's answer for a preferred election not needed.
        assert result["partition"] == f"{TOPIC}-0" and result["error"] == "ELECTION_NOT_NEEDED"
        assert any("preferred-election" in r.message and "testclient" in r.message
                   for r in caplog.records)  # fmt: skip
        unknown = act(client, "reboot", {"topic": TOPIC, "partition": 0, "confirm": f"{TOPIC}-0"})
        assert unknown.status_code == 404


def test_an_action_from_another_site_is_refused(broker: BrokerProcess) -> None:
    """CSRF: without the page's token, with another origin, or through a name that is not the
    console's (DNS rebinding), nothing runs; the page's own request does."""
    body = {"topic": TOPIC, "partition": 0, "confirm": f"{TOPIC}-0"}
    hosts = frozenset({"testserver", "127.0.0.1:8080"})
    with client_of(broker.bootstrap, allow_actions=True, hosts=hosts) as client:
        kind = "preferred-election"
        token = page_token(client)
        assert page_token(client) == token  # per process, not per page load
        for headers, why in [
            ({}, "token"),
            ({TOKEN_HEADER: "guessed", "origin": "http://testserver"}, "token"),
            ({TOKEN_HEADER: token, "origin": "http://evil.example"}, "Origin"),
            ({TOKEN_HEADER: token}, "Origin"),
            ({TOKEN_HEADER: token, "origin": "http://evil.example:8080",
              "host": "evil.example:8080"}, "Host"),
        ]:  # fmt: skip
            refused = client.post(f"/api/actions/{kind}", json=body, headers=headers)
            assert refused.status_code == 403 and why in refused.json()["error"], headers
        ok = client.post(f"/api/actions/{kind}", json=body,
                         headers={TOKEN_HEADER: token, "origin": "http://127.0.0.1:8080",
                                  "host": "127.0.0.1:8080"})  # fmt: skip
        assert ok.status_code == 200, ok.text
        # The page embeds the token in its own HTML, which no other site can read.
        assert TOKEN_HEADER in client.get("/static/console.js").text


def test_a_log_dir_and_a_reassignment_from_the_page(broker: BrokerProcess) -> None:
    """Against the real broker: a healthy dir is said to be online already, a dir it does not
    have is refused by name; a reassignment to the replica it has is accepted, one to a broker
    that does not exist is answered with the controller's error."""
    with client_of(broker.bootstrap, allow_actions=True) as client:
        overview = wait_until(lambda: (o := get(client, "/api/overview"))["brokers"] and o, 20,
                              "a first poll")  # fmt: skip
        [b] = overview["brokers"]
        [d] = b["log_dirs"]
        node, log_dir = b["id"], d["log_dir"]
        unconfirmed = act(client, "log-dir-online", {"broker": node, "log_dir": log_dir})
        assert unconfirmed.status_code == 400 and f"{node}:{log_dir}" in unconfirmed.json()["error"]
        online = act(client, "log-dir-online",
                     {"broker": node, "log_dir": log_dir, "confirm": f"{node}:{log_dir}"})  # fmt: skip
        assert online.status_code == 200 and "already online" in online.json()["message"]
        missing = act(client, "log-dir-online",
                      {"broker": node, "log_dir": "/nowhere", "confirm": f"{node}:/nowhere"})  # fmt: skip
        assert missing.status_code == 409 and "not a log dir" in missing.json()["error"]
        gone = act(client, "log-dir-online",
                   {"broker": 99, "log_dir": log_dir, "confirm": f"99:{log_dir}"})  # fmt: skip
        assert gone.status_code == 409 and "not alive" in gone.json()["error"]

        body = {"topic": TOPIC, "partition": 1, "confirm": f"{TOPIC}-1"}
        [same] = act(client, "reassignment", {**body, "replicas": str(node)}).json()["results"]
        assert same == {"partition": f"{TOPIC}-1", "error": None, "message": f"replicas [{node}]"}
        [bad] = act(client, "reassignment", {**body, "replicas": [node, 99]}).json()["results"]
        assert bad["error"] is not None


def test_a_dead_broker_is_shown_dead_and_no_endpoint_fails(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "broker")
    b.start(60)
    try:
        with client_of(b.bootstrap) as client:
            wait_until(lambda: get(client, "/api/overview")["brokers"], 20, "a first poll")
            b.kill()

            def shown_dead() -> Any:
                o = get(client, "/api/overview")
                return o["error"] and not o["brokers"][0]["alive"] and o

            dead = wait_until(shown_dead, 30, "the broker shown dead")
            assert dead["brokers"][0]["id"] == 0 and dead["brokers"][0]["port"] == b.port
            for path in ENDPOINTS:
                get(client, path)
            down = client.get("/api/messages", params={"topic": TOPIC, "partition": 0})
            assert down.status_code == 503 and down.json()["error"]
            b.start(60)
            wait_until(lambda: get(client, "/api/overview")["brokers"][0]["alive"], 30,
                       "the broker shown alive again")  # fmt: skip
    finally:
        b.kill()


def test_no_secret_of_the_command_config_reaches_the_page(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    plain, secure = free_port(), free_port()
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_admin="admin-secret";')  # fmt: skip
    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={certs.ca}\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret";\n'
    )
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}",
        "ssl.keystore.location": str(certs.server), "ssl.truststore.location": str(certs.ca),
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
    }  # fmt: skip
    security = client_security(load_properties(str(config)), str(config))
    with (
        BrokerProcess(tmp_path / "broker", port=plain, overrides=overrides),
        client_of(f"127.0.0.1:{secure}", security=security) as client,
    ):
        overview = wait_until(
            lambda: (o := get(client, "/api/overview"))["brokers"] and o, 30, "a poll over SASL"
        )
        assert overview["brokers"][0]["port"] == secure  # reached through the SASL_SSL listener
        answers = [client.get(p).text for p in ("/", *ENDPOINTS)]
        answers.append(client.get("/api/messages", params={"topic": "x", "partition": 0}).text)
        for text in answers:
            for secret in ("admin-secret", "jaas", "PlainLoginModule", str(config)):
                assert secret not in text
        assert json.loads(answers[1])["error"] is None


def test_a_bad_listen_address_is_a_clear_error() -> None:
    result = CliRunner().invoke(cli, ["console", "--listen", "localhost"])
    assert result.exit_code == 1
    assert "logkeel console: 'localhost' is not HOST:PORT" in result.stderr


def test_a_failed_dir_is_brought_back_from_the_page(tmp_path: Path, faulty_fs: FaultyFs) -> None:
    """A real failing disk (FUSE) under one of two dirs, the broker's own probe off: asked
    while it still fails, the page is told so and the dir stays offline; healed, the page's
    action brings it back and its partition is written again."""
    failing, healthy = faulty_fs.mountpoint / "logs", tmp_path / "healthy"
    overrides = {"log.dir.recovery.check.interval.ms": "0"}
    with BrokerProcess(tmp_path / "b", log_dirs=[failing, healthy], overrides=overrides) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept: a collected one cancels
        admin.create_topics([NewTopic("dirs", 2, 1)])["dirs"].result(20)
        wait_until(lambda: list(failing.glob("dirs-*")) and list(healthy.glob("dirs-*")), 20,
                   "a partition in each dir")  # fmt: skip
        [p] = [int(d.name.rsplit("-", 1)[1]) for d in failing.glob("dirs-*")]
        producer = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 5000})
        faulty_fs.fail(errno.EIO, ops={"write", "fsync"})
        producer.produce("dirs", b"meets the bad disk", partition=p)
        producer.flush(10)
        wait_until(lambda: offline_log_dirs(b.bootstrap) == [str(failing)], 20, "offline")
        with client_of(b.bootstrap, allow_actions=True) as client:
            [node] = wait_until(lambda: [x["id"] for x in get(client, "/api/overview")["brokers"]],
                                20, "a first poll")  # fmt: skip
            body = {"broker": node, "log_dir": str(failing), "confirm": f"{node}:{failing}"}
            still = act(client, "log-dir-online", body)
            assert still.status_code == 409 and "still offline" in still.json()["error"]
            assert offline_log_dirs(b.bootstrap) == [str(failing)]
            faulty_fs.heal()
            done = act(client, "log-dir-online", body)
            assert done.status_code == 200, done.text
            assert "is online again: 1 partition(s)" in done.json()["message"]
        assert offline_log_dirs(b.bootstrap) == []
        producer.produce("dirs", b"again", partition=p)
        assert producer.flush(20) == 0
