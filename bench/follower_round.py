"""What one round of a follower's fetcher costs the follower, by how many partitions it follows
(issue 19: an acks=all ack waits for two follower rounds, and at 10,000 partitions RF 3 each
of a broker's two fetchers follows ~3,333).

In-process on real follower ``Partition``s over real logs in a temp dir: a ``ReplicaFetcher``
whose connection to the leader is replaced by one answering at once, as a leader with a fetch
session (KIP-227) does, so that what is timed is the follower's side only: building the
request (positions, fetch parameters, the session's diff) and handling the answer. Two cases
per size: nothing changed (the leader's incremental answer is empty), one partition changed
(its answer carries one batch, appended to its real log), and a tenth of them changed. The
timed CPU includes the stand-in leader's building of its answer (one small batch per changed
partition), the same for every version timed.

    .venv/bin/python bench/follower_round.py
    PYTHONPATH=<checkout of an older commit>/src .venv/bin/python bench/follower_round.py

The second line times an older fetcher with this same script (the fetcher's private round is
driven as its own loop drives it). The last line printed is one JSON object: per size and
case, the median CPU (process time) of a round in milliseconds, and per followed partition in
microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v15 import response as fetch_response
from kio.static.primitive import i32, i32Timedelta, i64

from logkeel.cluster.metadata import BrokerInfo, PartitionState, topic_id_text
from logkeel.records.builder import build_batch
from logkeel.server.replica.context import ReplicationSettings
from logkeel.server.replica.fetcher import ReplicaFetcher
from logkeel.server.replica.isr_rules import IsrConfig
from logkeel.server.replica.partition import Partition
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

FOLLOWER, LEADER = 1, 3
TOPIC_ID = uuid.UUID(int=0x1F)
SESSION_ID = 777


def followed(logs: LogManager, n: int) -> list[Partition]:
    # As logkeel.testing.partition_tables.follower_partitions, built here so that this script
    # also times older sources (which lack that helper).
    out = []
    for i in range(n):
        tp = TopicPartition("followed", i)
        p = Partition(tp, topic_id_text(TOPIC_ID), FOLLOWER, IsrConfig(), lambda _proposal: None)
        p.shutting_down = frozenset
        p.log = logs.get_or_create_log(tp)
        p.apply_state(PartitionState("followed", i, [1, 2, 3], LEADER, 0, [1, 2, 3], 0))
        p.become_leader_or_follower()
        out.append(p)
    return out


class Leader:
    """Answers each Fetch at once, as a leader whose session holds the follower's partitions:
    the first (full) request gets the session, the next ones what ``changed`` returns."""

    def __init__(self, changed: Callable[[], list[Partition]]) -> None:
        self.changed = changed
        self.requests = 0

    async def send(self, request: Any) -> Any:
        self.requests += 1
        parts = []
        for p in self.changed():
            plog = p.log
            assert plog is not None
            end = plog.log_end_offset
            batch = build_batch([(0, None, b"v", ())], base_offset=end, partition_leader_epoch=0)
            parts.append(
                fetch_response.PartitionData(
                    partition_index=i32(p.tp.partition),
                    error_code=ErrorCode.none,
                    high_watermark=i64(end + 1),
                    log_start_offset=i64(0),
                    aborted_transactions=None,
                    records=batch,
                )
            )
        return fetch_response.FetchResponse(
            throttle_time=i32Timedelta.parse(timedelta(0)),
            error_code=ErrorCode.none,
            session_id=i32(SESSION_ID),
            responses=(
                (fetch_response.FetchableTopicResponse(topic_id=TOPIC_ID, partitions=tuple(parts)),)
                if parts
                else ()
            ),
        )

    async def close(self) -> None:
        return None


async def inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def round_of(f: ReplicaFetcher) -> Callable[[], Awaitable[object]]:
    """One round as the fetcher's loop runs it (an older fetcher had no method for it)."""
    new = getattr(f, "_round", None)
    if new is not None:
        return lambda: new(time.monotonic())  # type: ignore[no-any-return]

    async def old() -> None:
        states = dict(f._states)
        truncating = {tp: s for tp, s in states.items() if s.truncating}
        if truncating:
            await f._truncate(truncating)
        else:
            await f._fetch(states)

    return old


async def measure(logs: LogManager, n: int, rounds: int) -> dict[str, Any]:
    parts = followed(logs, n)
    changing: list[Partition] = []
    leader = Leader(lambda: changing)
    f = ReplicaFetcher(
        BrokerInfo(LEADER, "127.0.0.1", 9), 0, FOLLOWER, ReplicationSettings(), inline,
        lambda _p, _exc: None,
    )  # fmt: skip
    f._client = leader  # type: ignore[assignment]
    for p in parts:
        f.add(p, 0)
    # The rounds are driven here, not by the fetcher's own task.
    task = f._task
    assert task is not None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    step = round_of(f)
    while leader.requests < 2:  # truncation (to an empty log), the full request, its session
        await step()
    out: dict[str, Any] = {"partitions": n}
    cases = (
        ("nothing_changed", []),
        ("one_changed", [parts[n // 2]]),
        ("tenth_changed", parts[::10]),
    )
    for case, changed in cases:
        changing[:] = changed
        watched = changed[0] if changed else parts[0]
        before = watched.log.log_end_offset  # type: ignore[union-attr]
        times = []
        for _ in range(rounds):
            started = time.process_time()
            await step()
            times.append(time.process_time() - started)
        after = watched.log.log_end_offset  # type: ignore[union-attr]
        assert after - before == (rounds if changed else 0), "each round appended the change"
        median = statistics.median(times)
        out[case] = {
            "round_ms": round(median * 1000, 3),
            "per_partition_us": round(median / n * 1e6, 3),
        }
    await f.stop()
    return out


async def run(sizes: list[int], rounds: int) -> list[dict[str, Any]]:
    results = []
    for n in sizes:
        with tempfile.TemporaryDirectory() as d:
            logs = LogManager([Path(d)])
            logs.startup(start_background=False)
            try:
                results.append(await measure(logs, n, rounds))
            finally:
                logs.shutdown()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,3333,10000", help="followed partitions")
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per case")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    print(json.dumps({"rounds": asyncio.run(run(sizes, args.rounds))}))


if __name__ == "__main__":
    main()
