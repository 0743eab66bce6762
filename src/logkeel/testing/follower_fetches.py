"""A follower's side of a KIP-227 fetch session driven straight into a leader's Fetch handler
(``FetchApi.handle``) in-process, and a single-node broker's topic made RF 3 so that followers
2 and 3 may fetch it: what the leader-side benches and tests of follower fetch rounds drive."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v15 import request as fetch_request
from kio.schema.types import BrokerId
from kio.static.primitive import i32, i32Timedelta, i64

from logkeel.cluster.metadata import TopicState, topic_uuid
from logkeel.config import BrokerConfig
from logkeel.ports import free_port
from logkeel.server.api.fetch import FetchApi, FetchResponseFrame
from logkeel.server.broker import Broker
from logkeel.server.fetch_sessions import FINAL_EPOCH
from logkeel.server.handlers import RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["FollowerSession", "leader_with_followers", "replicate"]


def replicate(broker: Broker, topic: str) -> TopicState:
    """``topic`` (created on ``broker``, node 1) made RF 3 led here, every replica in the ISR,
    in one metadata write (the single-node store has no API for replicas it does not know)."""
    store: Any = broker.metadata
    with store._write_lock:
        old: TopicState = store.topics()[topic]
        parts = {i: replace(p, replicas=[1, 2, 3], isr=[1, 2, 3]) for i, p in old.partitions.items()}  # fmt: skip
        state = replace(old, partitions=parts)
        store._publish({**store.topics(), topic: state})
    store._notify(topic, state)  # applied to the partitions before it returns
    rm = broker.replica_manager
    for i in parts:
        p = rm.partition(TopicPartition(topic, i))
        assert p is not None and p.is_leader and len(p.isr) == 3, p
    return state


class FollowerSession:
    """What a follower's fetcher keeps of its session: the offsets it reached, those that
    moved (sent in the next request), its leader epochs, the session id and epoch."""

    def __init__(self, api: FetchApi, replica_id: int, state: TopicState) -> None:
        self.api, self.replica_id = api, replica_id
        self.topic_id = topic_uuid(state.topic_id)
        self.offsets = dict.fromkeys(state.partitions, 0)
        self.epochs = dict.fromkeys(state.partitions, 0)
        self.moved: dict[int, int] = dict(self.offsets)  # the first request sends them all
        self.session_id, self.epoch = 0, 0

    async def fetch(self, max_wait_ms: int = 0, *, close: bool = False) -> tuple[float, dict[int, Any]]:  # fmt: skip
        """One round: (seconds in the handler, the partitions answered by index). Each
        partition answered with records moved by one (one record per append)."""
        send, self.moved = self.moved, {}
        parts = tuple(
            fetch_request.FetchPartition(
                partition=i32(i), current_leader_epoch=i32(self.epochs[i]),
                fetch_offset=i64(offset), last_fetched_epoch=i32(-1), log_start_offset=i64(0),
                partition_max_bytes=i32(1 << 20),
            )
            for i, offset in send.items()
        )  # fmt: skip
        request = fetch_request.FetchRequest(
            replica_state=fetch_request.ReplicaState(
                replica_id=BrokerId(self.replica_id), replica_epoch=i64(-1)
            ),
            max_wait=i32Timedelta.parse(timedelta(milliseconds=max_wait_ms)),
            min_bytes=i32(1),
            max_bytes=i32(10 << 20),
            session_id=i32(self.session_id),
            session_epoch=i32(FINAL_EPOCH if close else self.epoch),
            topics=(fetch_request.FetchTopic(topic_id=self.topic_id, partitions=parts),)
            if parts
            else (),
            forgotten_topics_data=(),
        )
        ctx = RequestContext(
            api_key=ApiKey.FETCH, api_version=15, correlation_id=self.epoch,
            client_id=f"broker-{self.replica_id}-fetcher-0", peer=("127.0.0.1", 1),
            connection_id="in-process", listener="PLAINTEXT",
        )  # fmt: skip
        started = time.perf_counter()
        frame = await self.api.handle(ctx, request)
        took = time.perf_counter() - started
        assert isinstance(frame, FetchResponseFrame), frame
        answer: Any = frame.response
        frame.close()
        assert answer.error_code == ErrorCode.none, answer.error_code
        self.session_id, self.epoch = int(answer.session_id), self.epoch + 1
        answered = {int(p.partition_index): p for t in answer.responses for p in t.partitions}
        for i, p in answered.items():
            if p.error_code == ErrorCode.none and p.records:
                self.offsets[i] += 1
                self.moved[i] = self.offsets[i]
        return took, answered


@asynccontextmanager
async def leader_with_followers(
    log_dir: Path, topic: str, partitions: int, **overrides: str
) -> AsyncIterator[tuple[Broker, FollowerSession, FollowerSession]]:
    """A started single-node broker (node 1, ``overrides`` its configs) leading ``topic`` RF 3,
    and the sessions of its followers 2 and 3 through its Fetch handler: each created by a
    full request, then every partition read once and found idle (nothing appended yet)."""
    config = BrokerConfig.from_properties(
        None,
        {
            "node.id": "1",
            "log.dirs": str(log_dir),
            "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
            **overrides,
        },
    )
    broker = Broker(config)
    await broker.start()
    try:
        broker.metadata.create_topic(topic, partitions, 1, {})
        state = replicate(broker, topic)
        api = FetchApi(
            broker.config, broker.metadata, broker.replica_manager.fetches, broker.authorizer
        )
        followers = FollowerSession(api, 2, state), FollowerSession(api, 3, state)
        for f in followers:
            _, full = await f.fetch()
            assert f.session_id and len(full) == partitions, "a session of every partition"
            _, idle = await f.fetch()
            assert not idle, sorted(idle)
        yield broker, *followers
    finally:
        await broker.stop()
