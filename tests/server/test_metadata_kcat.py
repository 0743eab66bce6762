"""kcat (Debian's 1.7.1 on librdkafka 2.0.2) lists the broker and its topics."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokerproc import BrokerProcess

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("metadata-kcat")
    with BrokerProcess(data, extra_args=["--node-id", "3"]) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic("kc-a", 3, 1), NewTopic("kc-b", 1, 1)]).values():
            f.result(15)
        yield b


def kcat(*args: str) -> str:
    assert KCAT is not None, "kcat is not installed (apt-get install -y kcat)"
    done = subprocess.run([KCAT, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kcat_lists_broker_and_topics(server: BrokerProcess) -> None:
    out = kcat("-b", server.bootstrap, "-L")
    assert f"broker 3 at 127.0.0.1:{server.port} (controller)" in out
    assert 'topic "kc-a" with 3 partitions:' in out
    assert 'topic "kc-b" with 1 partitions:' in out
    assert "partition 2, leader 3, replicas: 3, isrs: 3" in out


def test_kcat_json_metadata(server: BrokerProcess) -> None:
    doc = json.loads(kcat("-b", server.bootstrap, "-L", "-J"))
    assert doc["controllerid"] == 3
    assert doc["brokers"] == [{"id": 3, "name": f"127.0.0.1:{server.port}"}]
    topics = {t["topic"]: t for t in doc["topics"]}
    assert [p["partition"] for p in topics["kc-a"]["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == 3 for p in topics["kc-a"]["partitions"])


def test_kcat_unknown_topic_is_auto_created(server: BrokerProcess) -> None:
    out = kcat("-b", server.bootstrap, "-L", "-t", "kc-auto")
    assert 'topic "kc-auto" with 1 partitions:' in out
    assert "kc-auto" in kcat("-b", server.bootstrap, "-L")
