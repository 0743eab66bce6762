"""What one incremental follower Fetch costs its leader, by session size (issue 19: an acks=all
ack takes two follower fetch rounds, and at 10,000 partitions RF 3 each follower's KIP-227
session holds ~3,333 of a leader's partitions).

In-process, no sockets between the brokers: a real single-node broker (its logs, partition
table, replica manager, authorizer, metadata store) whose topic of N partitions is made RF 3
(replicas 1, 2, 3, all in the ISR, led here), and the broker's real Fetch handler
(``FetchApi.handle``) driven with Fetch v15 requests as followers 2 and 3 send them: a full
request creates each follower's session, then incremental ones. Timed, per request (wall time
of ``handle``, the event loop doing nothing else):

- ``idle``: nothing changed (an incremental request with no partitions, ``max_wait`` 0);
- ``changed``: one partition changed, as an acks=all write goes: a record appended, each
  follower's fetch that returns it, each follower's next fetch at the new offset (its
  high watermark moves), and the fetch that tells the high watermark;
- ``wake``: a follower's long poll parked (``max_wait`` 500 ms) until a record is appended to
  one partition: from the append to the response;
- ``idle_full_check``: an idle round that checks every partition's stamp, as a follower's
  session does once a second (every round before it was told of changes).

    .venv/bin/python bench/leader_fetch_round.py --partitions 1000 3333 10000 --profile 3333

Medians in milliseconds. ``--profile N``: a cProfile of N partitions' idle and changed rounds,
the functions taking the most own time. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from logkeel.records.builder import build_batch
from logkeel.server.broker import Broker
from logkeel.storage.topic_partition import TopicPartition
from logkeel.testing.follower_fetches import FollowerSession, leader_with_followers

TOPIC = "rounds"
VERSION = 15
Params = dict[int, int]  # partition -> fetch offset


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 3)


async def _append(broker: Broker, index: int) -> None:
    now = int(time.time() * 1000)
    result = await broker.replica_manager.appends.append_records(
        TopicPartition(TOPIC, index), build_batch([(now, None, b"v", ())]), acks=1
    )
    assert result.error == 0, result.error


async def _changed_round(
    broker: Broker, f2: FollowerSession, f3: FollowerSession, index: int
) -> list[float]:
    """An acks=all write to one partition, as the followers' rounds carry it."""
    await _append(broker, index)
    times = []
    for f in (f2, f3):  # the record
        took, parts = await f.fetch()
        assert index in parts and parts[index].records, "the appended record sent"
        assert len(parts) == 1, sorted(parts)
        times.append(took)
    for f in (f2, f3):  # each at the new offset: the second moves the high watermark
        took, parts = await f.fetch()
        times.append(took)
    took, parts = await f2.fetch()  # the high watermark told
    assert list(parts) == [index], sorted(parts)
    times.append(took)
    return times


async def _settle(*followers: FollowerSession) -> None:
    """Rounds until no follower is told anything: every session idle again."""
    for _ in range(10):
        told = [bool((await f.fetch())[1]) for f in followers]
        if not any(told):
            return
    raise AssertionError("the sessions never went idle")


async def _wake(broker: Broker, f: FollowerSession, index: int) -> float:
    """A parked long poll woken by an append to one partition."""
    purgatory = broker.replica_manager.fetch_purgatory
    task = asyncio.ensure_future(f.fetch(max_wait_ms=500))
    while purgatory.pending == 0:
        await asyncio.sleep(0)
    started = time.perf_counter()
    await _append(broker, index)
    _, parts = await task
    assert index in parts, sorted(parts)
    return time.perf_counter() - started


async def measure(n: int, rounds: int, profile: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        async with leader_with_followers(Path(d), TOPIC, n) as (broker, f2, f3):
            idle: list[float] = []
            changed: list[float] = []
            wake: list[float] = []
            for r in range(rounds):
                took, parts = await f2.fetch()
                assert not parts, sorted(parts)
                idle.append(took)
                changed += await _changed_round(broker, f2, f3, r % n)
                await f3.fetch()  # f3 told the high watermark too
                wake.append(await _wake(broker, f2, (r + n // 2) % n))
                await _settle(f2, f3)
            # What the check of every partition costs, due once a second per follower
            # session (`SessionReads.full_check_ms`; before it, every Fetch checked them all).
            full: list[float] = []
            session = f2.api._sessions.get(f2.session_id)
            assert session is not None
            for _ in range(rounds):
                session.reads.full_check_ms = 0  # type: ignore[attr-defined]
                took, parts = await f2.fetch()
                assert not parts, sorted(parts)
                full.append(took)
            session.reads.full_check_ms = 1_000  # type: ignore[attr-defined]
            profiler = None
            if profile:  # rounds of their own: the profiler slows what it watches
                profiler = cProfile.Profile()
                for r in range(rounds):
                    profiler.enable()
                    await f2.fetch()
                    await _changed_round(broker, f2, f3, (r + 7) % n)
                    profiler.disable()
                    await _settle(f2, f3)
            out: dict[str, Any] = {
                "partitions": n,
                "idle_ms": _median_ms(idle),
                "changed_ms": _median_ms(changed),
                "wake_ms": _median_ms(wake),
                "idle_full_check_ms": _median_ms(full),
            }
            if profiler is not None:
                stats = pstats.Stats(profiler)
                total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
                top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:15]  # type: ignore[attr-defined]
                out["profile_own_time_share"] = {
                    f"{Path(file).name}:{line}:{fn}": round(v[2] / total, 3)
                    for (file, line, fn), v in top
                }
            return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 3333, 10000])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--profile", type=int, default=0, help="profile this partition count")
    args = parser.parse_args()
    results = []
    for n in args.partitions:
        results.append(asyncio.run(measure(n, args.rounds, n == args.profile)))
        print(json.dumps(results[-1]), flush=True)
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
