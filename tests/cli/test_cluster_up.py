"""`logkeel cluster up --brokers 3` as a new user tries failures on it: its own real ZooKeeper and
three real brokers, topics created by default with 3 replicas and min.insync.replicas 2 (the
internal ones too), a broker killed with `cluster stop-broker --kill` and another dying on its
own while the rest keep running, `topics --under-replicated-partitions` and
`--unavailable-partitions` showing it, an acks=all producer carrying on with 2 of 3, and
`start-broker` bringing both back. Every wait is bounded."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient, NewTopic

from logkeel.cli.cluster_control import ask
from logkeel.cli.main import cli
from logkeel.ports import free_port
from logkeel.testing.broker_process import serve_command
from tests.waiting import wait_until

SESSION_TIMEOUT_MS = 6000


class Up:
    """A `logkeel cluster up` child, its merged output collected line by line."""

    def __init__(self, base: Path, port: int) -> None:
        self.base = base
        self.proc = subprocess.Popen(
            [*serve_command()[:-1], "cluster", "up", "--brokers", "3", "--dir", str(base),
             "--port", str(port),
             "--override", f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
             "--override", "offsets.topic.num.partitions=3",
             "--override", "group.initial.rebalance.delay.ms=0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        found: list[re.Match[str]] = []

        def seen() -> bool:
            assert self.proc.poll() is None or found, f"cluster up exited:\n{self.output()}"
            match = re.search(pattern, self.output())
            if match:
                found.append(match)
            return match is not None

        wait_until(seen, timeout, f"{pattern!r} in the output of cluster up")
        return found[0]


def run(*args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, (result.output, result.stderr, result.exception)
    return result


def describe(bootstrap: str, *flags: str) -> list[dict[str, Any]]:
    return json.loads(run("topics", "--bootstrap-server", bootstrap, *flags, "--json").stdout)


def test_cluster_up_for_trying_failures(tmp_path: Path) -> None:
    port = free_port(count=3)
    up = Up(tmp_path / "cluster", port)
    try:
        _exercise(up, port)
    finally:
        if up.proc.poll() is None:
            up.proc.send_signal(signal.SIGTERM)
        try:
            up.proc.wait(timeout=120)
        finally:
            if up.proc.poll() is None:
                up.proc.kill()
    assert up.proc.returncode == 0, up.output()
    assert "cluster stopped" in up.output()


def _exercise(up: Up, port: int) -> None:
    bootstrap = up.wait_for(r"bootstrap servers: (\S+)", 180).group(1)
    addresses = [f"127.0.0.1:{port + i}" for i in range(3)]
    assert bootstrap == ",".join(addresses)
    printed = up.wait_for(r"replication: (.*)", 1).group(1)
    for setting in ("default.replication.factor=3", "min.insync.replicas=2",
                    "offsets.topic.replication.factor=3",
                    "transaction.state.log.replication.factor=3",
                    "transaction.state.log.min.isr=2"):  # fmt: skip
        assert setting in printed

    # A real client's topic with the broker's default replication factor gets 3 replicas.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("ft", 3)])["ft"].result(timeout=60)
    run("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "single",
        "--partitions", "1", "--replication-factor", "1")  # fmt: skip
    wait_until(lambda: all(p["leader"] >= 0 for t in describe(bootstrap, "--describe")
                           for p in t["partitions"]), 60, "first leaders")  # fmt: skip
    [ft] = describe(bootstrap, "--describe", "--topic", "ft")
    assert ft["replication_factor"] == 3
    [configs] = json.loads(run("configs", "--bootstrap-server", bootstrap, "--describe",
                               "--entity-type", "topics", "--entity-name", "ft", "--all",
                               "--json").stdout)  # fmt: skip
    assert {c["name"]: c["value"] for c in configs["configs"]}["min.insync.replicas"] == "2"
    # The group coordinator's topic is created on first use, with 3 replicas too.
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g"})
    try:
        committer.commit(offsets=[KafkaTP("ft", 0, 0)], asynchronous=False)
    finally:
        committer.close()
    [offsets_topic] = describe(bootstrap, "--describe", "--topic", "__consumer_offsets")
    assert offsets_topic["replication_factor"] == 3

    # stop-broker --kill: the leader of the single-replica topic crashes.
    [single] = describe(bootstrap, "--describe", "--topic", "single")
    victim = single["partitions"][0]["leader"]
    answer = run("cluster", "stop-broker", str(victim), "--kill", "--dir", str(up.base)).stdout
    assert f"broker {victim}" in answer and "SIGKILL" in answer
    # The list starts with the dead broker: the commands move on to a live one.
    dead_first = ",".join(
        [addresses[victim - 1]] + [a for a in addresses if a != addresses[victim - 1]]
    )

    def unavailable() -> bool:
        found = describe(dead_first, "--describe", "--unavailable-partitions")
        return [(t["topic"], [p["partition"] for p in t["partitions"]]) for t in found] == [
            ("single", [0])
        ]

    # Before its session expires the cluster still lists the dead broker: listing groups goes
    # on without it (a warning names it) rather than failing.
    listed = run("groups", "--bootstrap-server", dead_first, "--list")
    assert not listed.stderr or f"the groups of broker {victim} are left out" in listed.stderr
    wait_until(unavailable, SESSION_TIMEOUT_MS / 1000 + 30, "single-0 unavailable")

    def under_replicated() -> bool:
        found = {t["topic"]: t["partitions"] for t in
                 describe(dead_first, "--describe", "--under-replicated-partitions")}  # fmt: skip
        ft_parts = found.get("ft", [])
        return len(ft_parts) == 3 and all(victim not in p["isr"] for p in ft_parts)

    wait_until(under_replicated, SESSION_TIMEOUT_MS / 1000 + 30, "ft under-replicated")
    # 2 of 3 in sync is exactly min.insync.replicas; the single replica is below it.
    at_min = {t["topic"]: len(t["partitions"])
              for t in describe(dead_first, "--describe", "--at-min-isr-partitions")}  # fmt: skip
    assert at_min.get("ft") == 3
    under_min = describe(dead_first, "--describe", "--under-min-isr-partitions")
    assert [t["topic"] for t in under_min] == ["single"]
    assert up.proc.poll() is None, up.output()

    # With 2 of 3 in sync, min.insync.replicas=2 still takes acks=all writes.
    producer = Producer({"bootstrap.servers": dead_first, "acks": "all"})
    failures: list[Any] = []
    for i in range(30):
        producer.produce("ft", value=b"%d" % i, partition=i % 3,
                         on_delivery=lambda err, _m: err and failures.append(err))  # fmt: skip
    assert producer.flush(60) == 0 and failures == []

    # A broker that dies on its own (not through stop-broker) is reported; the rest go on.
    pids = ask(up.base, {"op": "status"})["brokers"]
    other = next(n for n in ("1", "2", "3") if int(n) != victim)
    os.kill(pids[other]["pid"], signal.SIGKILL)
    up.wait_for(rf"broker {other} \(127\.0\.0\.1:\d+\) exited with code -9; the others keep "
                "running", 30)  # fmt: skip
    assert up.proc.poll() is None
    assert ask(up.base, {"op": "status"})["brokers"][other]["pid"] is None

    # Both come back; every partition is fully in sync again.
    for node in (str(victim), other):
        started = run("cluster", "start-broker", node, "--dir", str(up.base)).stdout
        assert f"broker {node}" in started and "started" in started
    again = run("cluster", "start-broker", other, "--dir", str(up.base), code=1)
    assert "already running" in again.stderr

    def healed() -> bool:
        return not describe(bootstrap, "--describe", "--under-replicated-partitions") and not (
            describe(bootstrap, "--describe", "--unavailable-partitions")
        )

    wait_until(healed, 90, "every partition in sync after the restarts")
    status = json.loads(run("cluster", "status", "--bootstrap-server", dead_first, "--json").stdout)
    assert [b["id"] for b in status["brokers"]] == [1, 2, 3]
