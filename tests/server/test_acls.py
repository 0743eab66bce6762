"""ACLs with real clients: one `logkeel serve` process with an authorizer and a SASL_PLAINTEXT
(PLAIN) listener; an admin super user manages ACLs through confluent-kafka's and kafka-python's
admin clients, and alice's and bob's clients are allowed or refused by them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from logkeel.testing.broker_process import LogkeelBroker, free_port

pytestmark = pytest.mark.timeout(180)

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";'
)


@dataclass
class AclBroker:
    broker: LogkeelBroker
    port: int

    def conf(self, user: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": f"{user}-pw",
        }

    def admin(self) -> AdminClient:
        return AdminClient(self.conf("admin"))


def start_broker(work: Path, port: int, **extra: str) -> LogkeelBroker:
    overrides = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "sasl.enabled.mechanisms": "PLAIN",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        **extra,
    }
    return LogkeelBroker(work, port=port, overrides=overrides).start()


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    port = free_port()
    broker = start_broker(tmp_path_factory.mktemp("acls"), port)
    try:
        yield AclBroker(broker, port)
    finally:
        broker.stop()


def topic_acl(name: str, principal: str, op: AclOperation,
              perm: AclPermissionType = AclPermissionType.ALLOW,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:  # fmt: skip
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", op, perm)


def create_acls(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for future in admin.create_acls(bindings, request_timeout=20).values():
        future.result(timeout=30)


def test_admin_creates_describes_and_deletes_acls(acl_broker: AclBroker) -> None:
    admin = acl_broker.admin()
    name = f"t-{uuid.uuid4().hex[:6]}"
    read = topic_acl(name, "User:alice", AclOperation.READ)
    deny = topic_acl(name + "-", "User:bob", AclOperation.WRITE, AclPermissionType.DENY,
                     ResourcePatternType.PREFIXED)  # fmt: skip
    create_acls(admin, [read, deny])
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    described = admin.describe_acls(everything, request_timeout=20).result(timeout=30)
    assert read in described and deny in described
    mine = AclBindingFilter(ResourceType.TOPIC, name, ResourcePatternType.MATCH, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert sorted(map(str, admin.describe_acls(mine).result(timeout=30))) == [str(read)]
    deleted = admin.delete_acls([mine], request_timeout=20)[mine].result(timeout=30)
    assert deleted == [read]
    left = admin.describe_acls(everything, request_timeout=20).result(timeout=30)
    assert read not in left and deny in left


def test_a_user_without_alter_on_the_cluster_cannot_create_acls(acl_broker: AclBroker) -> None:
    admin = AdminClient(acl_broker.conf("alice"))
    futures = admin.create_acls([topic_acl("x", "User:alice", AclOperation.ALL)], request_timeout=20)
    with pytest.raises(confluent_kafka.KafkaException) as failure:
        for future in futures.values():
            future.result(timeout=30)
    assert failure.value.args[0].code() == confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_invalid_acl_is_refused(acl_broker: AclBroker) -> None:
    admin = acl_broker.admin()
    bad = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "alice", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    with pytest.raises(confluent_kafka.KafkaException) as failure:
        create_acls(admin, [bad])
    assert "Type:name" in str(failure.value)


def wait(predicate: Any, timeout_s: float = 20) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False
