"""A property test of the admin surface against a live `logkeel serve` (issue 13).

Hypothesis draws a few topic names (short, around Kafka's 249-character limit and past it,
every legal character, the broker's own topics, illegal ones) and a short sequence of
CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs, DeleteRecords and
Produce calls on them, sent with confluent-kafka. A model predicts which calls succeed.
After each sequence, and again after a restart: exactly the topics the model holds exist,
with their partition counts, log start offsets and data, and no log dir is offline.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.brokerproc import BrokerProcess
from tests.server.admin_clients import (
    TIMEOUT,
    admin,
    offline_log_dirs,
    outcome,
    produce,
    read_all,
    set_topic_config,
)
from tests.waiting import wait_until

LEGAL = string.ascii_letters + string.digits + "._-"
BROKER_OWNED = ("__consumer_offsets", "__transaction_state")

names = st.one_of(
    st.text(LEGAL, min_size=1, max_size=12),
    st.text(LEGAL, min_size=245, max_size=252),
    st.integers(247, 251).map(lambda n: "z" * n),
    st.sampled_from([*BROKER_OWNED, ".", "..", "a/b", "sp ace", "caf\u00e9", "a" * 300]),
)
# (name, value, valid): values a Kafka user might send, good and bad.
CONFIGS = [
    *(("retention.ms", v, ok) for v, ok in (("-1", 1), ("604800000", 1), ("-7", 0), ("soon", 0))),
    *(("cleanup.policy", v, ok) for v, ok in (("compact", 1), ("compact,delete", 1), ("x", 0))),
    *(("segment.bytes", v, ok) for v, ok in (("200", 1), ("13", 0))),
    *(("max.message.bytes", v, ok) for v, ok in (("2000000", 1), ("-1", 0))),
    ("no.such.config", "1", 0),
]
ops = st.lists(
    st.tuples(
        st.sampled_from(["create", "delete", "partitions", "config", "delete_records", "produce"]),
        st.integers(0, 3),  # which name
        st.integers(-1, 5),  # partitions, partition, offset or config, by op
        st.integers(0, 4),  # a second number (records to produce, offset)
    ),
    min_size=1,
    max_size=8,
)


def legal(name: str) -> bool:
    return 0 < len(name) <= 249 and name not in (".", "..") and all(c in LEGAL for c in name)


@dataclass
class Model:
    # topic -> partition -> (log start offset, every value ever appended)
    topics: dict[str, dict[int, tuple[int, list[bytes]]]] = field(default_factory=dict)

    def collides(self, name: str) -> bool:
        key = name.replace(".", "_")
        return any(t != name and t.replace(".", "_") == key for t in self.topics)


def apply(a: AdminClient, bootstrap: str, model: Model, pool: list[str], op: tuple) -> None:
    kind, which, n, m = op
    name = pool[which % len(pool)]
    exists = name in model.topics
    if kind == "create":
        [f] = a.create_topics([NewTopic(name, max(n, 0), 1)]).values()
        got = outcome(f)
        if name in BROKER_OWNED:
            assert got == "INVALID_REQUEST", got
        ok = legal(name) and name not in BROKER_OWNED and not exists and n >= 1
        ok = ok and not model.collides(name)
        assert (got == "OK") == ok, (name, n, got)
        if ok:
            model.topics[name] = {p: (0, []) for p in range(n)}
    elif kind == "delete":
        [f] = a.delete_topics([name]).values()
        got = outcome(f)
        assert (got == "OK") == exists, (name, got)
        if name in BROKER_OWNED:
            assert got in ("TOPIC_AUTHORIZATION_FAILED", "UNKNOWN_TOPIC_OR_PART"), got
        model.topics.pop(name, None)
    elif kind == "partitions":
        current = len(model.topics.get(name, {}))
        total = current + n
        [f] = a.create_partitions([NewPartitions(name, max(total, 1))]).values()
        got = outcome(f)
        if name in BROKER_OWNED:
            assert got != "OK"
        assert (got == "OK") == (exists and n >= 1), (name, total, got)
        if got == "OK":
            model.topics[name].update({p: (0, []) for p in range(current, total)})
    elif kind == "config":
        key, value, valid = CONFIGS[(n + 1 + 7 * m) % len(CONFIGS)]
        got = set_topic_config(a, name, key, value)
        if name not in BROKER_OWNED:
            assert (got == "OK") == (exists and valid), (name, key, value, got)
    elif kind == "delete_records" and exists:
        partition = abs(n) % len(model.topics[name])
        start, values = model.topics[name][partition]
        offset = len(values) if n < 0 else m  # -1: up to the high watermark
        [f] = a.delete_records([KafkaTopicPartition(name, partition, offset)]).values()
        got = outcome(f)
        assert (got == "OK") == (offset <= len(values)), (name, partition, offset, got)
        if got == "OK":
            model.topics[name][partition] = (max(start, offset), values)
    elif kind == "produce" and exists:
        partition = abs(n) % len(model.topics[name])
        start, values = model.topics[name][partition]
        batch = [f"{name[:8]}/{partition}/{len(values) + i}".encode() for i in range(m + 1)]
        assert produce(bootstrap, name, partition, batch) == ["OK"] * len(batch)
        values.extend(batch)


def check(broker: BrokerProcess, model: Model) -> None:
    a = admin(broker.bootstrap)
    listed = {
        t: len(md.partitions)
        for t, md in a.list_topics(timeout=TIMEOUT).topics.items()
        if not t.startswith("__")
    }
    assert listed == {t: len(ps) for t, ps in model.topics.items()}
    data = read_all(broker.bootstrap, [(t, p) for t, ps in model.topics.items() for p in ps])
    for (topic, p), (low, values) in data.items():
        start, appended = model.topics[topic][p]
        assert (low, values) == (start, appended[start:]), (topic, p)
    assert offline_log_dirs(broker.bootstrap) == []


def reset(broker: BrokerProcess) -> None:
    a = admin(broker.bootstrap)
    ours = [t for t in a.list_topics(timeout=TIMEOUT).topics if not t.startswith("__")]
    if ours:
        for f in a.delete_topics(ours).values():
            outcome(f)
        wait_until(
            lambda: not [t for t in a.list_topics(timeout=TIMEOUT).topics if t in ours],
            what="the previous example's topics to go",
        )


def test_admin_sequences_never_cost_data_or_a_dir(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", overrides={"auto.create.topics.enable": "false"})
    with broker:

        @settings(max_examples=12, database=None)
        @given(pool=st.lists(names, min_size=1, max_size=4), sequence=ops)
        def run(pool: list[str], sequence: list[tuple]) -> None:
            reset(broker)
            model = Model()
            a = admin(broker.bootstrap)
            for op in sequence:
                apply(a, broker.bootstrap, model, pool, op)
            check(broker, model)
            broker.restart()
            check(broker, model)

        run()
        assert "is offline" not in broker.output()
