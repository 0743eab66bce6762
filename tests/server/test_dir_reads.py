"""Follower fetches read log dir by log dir (issue 20, part B), in-process: the reads
themselves are stand-ins that take a dir's time, the splitting, the budget, the late read and
its reuse are `Fetches`' own."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from logkeel.server.replica import isr_rules as isr
from logkeel.server.replica.disk_time import DirClock, ReadTime
from logkeel.server.replica.fetches import Fetches
from logkeel.server.replica.follower_tracking import FollowerTracking
from logkeel.server.replica.isr_rules import IsrConfig
from logkeel.server.replica.results import (
    FetchPartitionRequest,
    FetchPartitionResult,
    MemoryRecords,
)
from logkeel.storage.topic_partition import TopicPartition

FAST, SLOW = Path("/fast"), Path("/slow")
FOLLOWER = 1
CONFIG = IsrConfig(replica_lag_time_max_ms=10_000, follower_fetch_process_time_max_ms=100)


class Log:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.high_watermark = 5
        self.log_end_offset = 5
        self.log_start_offset = 0
        self.lock = threading.RLock()


class Part:
    def __init__(self, log_dir: Path) -> None:
        self.log = Log(log_dir)
        self.last_stable_offset = 5
        self.is_leader = True
        self.followers = FollowerTracking(0, CONFIG)


class Path_:
    """The part of the replica manager `Fetches` uses."""

    stopped = False

    def __init__(self, parts: dict[TopicPartition, Part]) -> None:
        self.parts = parts

    def partition(self, tp: TopicPartition) -> Part | None:
        return self.parts.get(tp)

    async def run_in_io(self, fn: Any, *args: Any) -> Any:
        return await self.submit_io(fn, *args)

    def submit_io(self, fn: Any, *args: Any) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))


class TimedFetches(Fetches):
    """Reads that take their dir's time, counted per dir: on the disk (within a partition's
    timed read) or, ``cpu``, before it (the wait of a busy machine: a dir thread, the GIL)."""

    def __init__(
        self, path: Path_, delays: dict[Path, threading.Event | None], *, cpu: bool = False
    ) -> None:
        super().__init__(path, follower_budget_ms=CONFIG.follower_fetch_process_time_max_ms)  # type: ignore[arg-type]
        self.delays = delays
        self.cpu = cpu
        self.reads: dict[Path, int] = dict.fromkeys(delays, 0)
        self._parts = path.parts

    def _read_all(
        self,
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
        into_memory: bool = False,
        disk: ReadTime | None = None,
    ) -> list[FetchPartitionResult]:
        d = self._parts[requests[0].tp].log.log_dir
        self.reads[d] += 1
        gate = self.delays[d]
        if gate is not None:
            timed = disk.partition() if disk is not None and not self.cpu else nullcontext()
            with timed:
                assert gate.wait(10)
        return [
            FetchPartitionResult(
                r.tp, high_watermark=5, records=MemoryRecords(b"x" * r.fetch_offset)
            )
            for r in requests
        ]


def test_a_slow_dir_neither_holds_the_healthy_one_nor_queues_reads() -> None:
    fast_tp, slow_tp = TopicPartition("t", 0), TopicPartition("t", 1)
    gate = threading.Event()
    fetches = TimedFetches(
        Path_({fast_tp: Part(FAST), slow_tp: Part(SLOW)}), {FAST: None, SLOW: gate}
    )
    wanted = [FetchPartitionRequest(fast_tp, 3, 100), FetchPartitionRequest(slow_tp, 4, 100)]

    async def scenario() -> None:
        started = time.monotonic()
        fast, slow = await fetches.fetch(wanted, replica_id=FOLLOWER)
        # Answered at the budget, with the healthy dir's records and none of the slow one's.
        assert time.monotonic() - started < 5
        assert fast.records == b"xxx" and slow.records is None and slow.high_watermark == 5
        assert not fetches.dir_reads.slow(FAST)
        # The follower asks again at once: nothing more is queued behind the slow read.
        fast, slow = await fetches.fetch(wanted, replica_id=FOLLOWER)
        assert slow.records is None and fetches.reads[SLOW] == 1 and fetches.reads[FAST] == 2
        gate.set()
        late = fetches.dir_reads.late(SLOW, FOLLOWER)
        assert late is not None
        await asyncio.wrap_future(late.future)
        # The late read answers the next fetch, marked as timed already; its disk time
        # marked its dir slow.
        fast, slow = await fetches.fetch(wanted, replica_id=FOLLOWER)
        assert slow.records == b"xxxx" and slow.read_earlier and not fast.read_earlier
        assert fetches.reads[SLOW] == 1
        assert fetches.dir_reads.slow(SLOW) and not fetches.dir_reads.slow(FAST)

    asyncio.run(scenario())
    # The late read counted as the leader serving the follower slowly (beyond KIP-501): a
    # spell from when it began, which slow reads going on would carry past the lag time (with
    # nothing seen slow for half of it, the spell is over: `isr_rules.slow_leader_check`).
    tracking = fetches._parts[slow_tp].followers
    now = int(time.time() * 1000)
    slow_for_long, why = tracking.too_slow_for_all([FOLLOWER], now)
    assert not slow_for_long and "slower than" in why, why
    tracking.read_served(FOLLOWER, 10_000, now + CONFIG.replica_lag_time_max_ms // 2)
    slow_for_long, why = tracking.too_slow_for_all([FOLLOWER], now + CONFIG.replica_lag_time_max_ms)
    assert slow_for_long, why
    fetches.dir_reads.shutdown()


def test_a_follower_fetch_from_one_healthy_dir_is_read_in_one_trip() -> None:
    tp = TopicPartition("t", 0)
    fetches = TimedFetches(Path_({tp: Part(FAST)}), {FAST: None})
    results = asyncio.run(fetches.fetch([FetchPartitionRequest(tp, 2, 100)], replica_id=FOLLOWER))
    assert results[0].records == b"xx"
    assert not fetches.dir_reads.late(FAST, FOLLOWER) and fetches.reads[FAST] == 1
    fetches.dir_reads.shutdown()


def test_a_follower_served_late_by_a_slow_dir_counts_as_caught_up_when_the_read_ends() -> None:
    """KIP-501's rule credits a follower at its fetch's completion only when serving it took at
    least replica.read.time.insync.factor of the lag time; a read the leader itself found slow
    (past a dir's budget) is credited whatever its length: the time was the leader's."""
    config = IsrConfig(
        replica_lag_time_max_ms=10_000, follower_fetch_pending_reads_insync_enable=True
    )
    pending = isr.fetch_started(isr.FollowerState(last_caught_up_ms=0), 50, 1_000, config)
    assert pending.pending
    short = isr.fetch_sent(pending, 50, 1_000, 4_000, config)  # 3 s < 0.5 * 10 s
    assert short.last_caught_up_ms == 0 and not short.pending
    late = isr.fetch_sent(pending, 50, 1_000, 4_000, config, leader_slow=True)
    assert late.last_caught_up_ms == 4_000 and not late.pending
    # Only a fetch that was pending (it had caught up to what it last saw) is credited.
    behind = isr.fetch_sent(isr.FollowerState(), 50, 1_000, 4_000, config, leader_slow=True)
    assert behind.last_caught_up_ms == 0


def test_a_read_late_for_the_cpu_not_the_disk_counts_for_nothing() -> None:
    """The same late read, its time spent before its partition's read began (waiting for a
    dir thread, the GIL, a loaded machine): answered at the budget all the same, but neither
    the dir is marked slow nor the leader counted slow (leaders stepped down on a busy CPU)."""
    slow_tp = TopicPartition("t", 1)
    gate = threading.Event()
    fetches = TimedFetches(Path_({slow_tp: Part(SLOW)}), {SLOW: gate}, cpu=True)
    wanted = [FetchPartitionRequest(slow_tp, 4, 100)]

    async def scenario() -> None:
        # Read dir by dir, as once a slow send marked the dir slow, or with a second dir.
        [slow] = await fetches.dir_reads.read({SLOW: [0]}, wanted, FOLLOWER, 100, 0)
        assert slow.records is None
        late = fetches.dir_reads.late(SLOW, FOLLOWER)
        assert late is not None
        tracking = fetches._parts[slow_tp].followers
        now = int(time.time() * 1000)
        # Under way past the lag time, but no partition of it is on the disk: not slow.
        resign, why = tracking.too_slow_for_all([FOLLOWER], now + CONFIG.replica_lag_time_max_ms)
        assert not resign, why
        gate.set()
        await asyncio.wrap_future(late.future)

    asyncio.run(scenario())
    tracking = fetches._parts[slow_tp].followers
    now = int(time.time() * 1000)
    resign, why = tracking.too_slow_for_all([FOLLOWER], now + CONFIG.replica_lag_time_max_ms)
    assert not resign, why
    assert "served within" in why
    assert not fetches.dir_reads.slow(SLOW)
    fetches.dir_reads.shutdown()


def test_a_send_late_for_the_cpu_marks_no_dir_slow_and_one_late_for_the_disk_does() -> None:
    """A response to a follower that took longer than the budget to send while reading its
    records from the file (``sendfile``) in no time waited on the socket, the CPU or the event
    loop, not the disk: its dir is not marked slow (a slow dir has every Fetch read all its
    partitions: at 10,000 partitions RF 3 that kept the loop busy enough for sends to stay
    late, the dir marked slow again and again, acks=all round trips taking seconds). Neither
    late send counts against the leader; one whose file reads took longer than the budget
    marks its dir slow."""
    tp = TopicPartition("t", 0)
    fetches = TimedFetches(Path_({tp: Part(FAST)}), {FAST: None})
    budget_s = CONFIG.follower_fetch_process_time_max_ms / 1000
    fetches.follower_response([tp], FOLLOWER, 1, False)
    time.sleep(budget_s * 1.5)
    fetches.follower_response([tp], FOLLOWER, 1, True)  # nothing read from the file
    assert not fetches.dir_reads.slow(FAST)
    fetches.follower_response([tp], FOLLOWER, 2, False)
    time.sleep(budget_s * 1.5)
    fetches.follower_response([tp], FOLLOWER, 2, True, round(budget_s * 1000) - 1)
    assert not fetches.dir_reads.slow(FAST)
    tracking = fetches._parts[tp].followers
    resign, why = tracking.too_slow_for_all([FOLLOWER], int(time.time() * 1000) + 60_000)
    assert not resign and "slower than" not in why, why
    fetches.follower_response([tp], FOLLOWER, 3, False)
    fetches.follower_response([tp], FOLLOWER, 3, True, round(budget_s * 1000) + 1)
    assert fetches.dir_reads.slow(FAST)


def test_a_sent_regions_file_reads_are_told_to_the_response(tmp_path: Path) -> None:
    """The network layer tells a response how long its regions took to come off the file
    (each ``sendfile`` timed on its thread), and a follower's Fetch response hands the total
    to whoever watches its send: the measure of a slow disk, apart from a slow socket."""
    import os
    import socket

    from kio.schema.fetch.v12.response import FetchResponse

    from logkeel.server.api.fetch import FetchResponseFrame
    from logkeel.server.network import zero_copy
    from logkeel.server.replica.results import RegionRecords

    path = tmp_path / "segment"
    data = os.urandom(256 * 1024)  # above the inline copy's limit: sent by sendfile
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    frame = FetchResponseFrame(FetchResponse(throttle_time=timedelta(0), error_code=ErrorCode.none,
                                             session_id=i32(0), responses=()), [])  # fmt: skip
    told: list[tuple[bool, int]] = []
    frame.on_send = lambda done, file_read_ms: told.append((done, file_read_ms))
    real = zero_copy._sendfile_some

    def slow_disk(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        time.sleep(0.02)  # the file's pages read from a slow disk
        return real(out_fd, in_fd, offset, count)

    async def send() -> bytes:
        a, b = socket.socketpair()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
        received = bytearray()

        async def drain_peer() -> None:
            while len(received) < len(data):
                received.extend(await loop.sock_recv(b, 1 << 16))

        b.setblocking(False)
        reader = asyncio.create_task(drain_peer())
        try:
            frame.frame_parts(0)
            await zero_copy.send_parts(
                transport,  # type: ignore[arg-type]
                [RegionRecords(os.dup(fd), 0, len(data))],
                lambda: asyncio.sleep(0),
                lambda: False,
                on_file_read=frame.file_read,
            )
            await asyncio.wait_for(reader, 10)
            return bytes(received)
        finally:
            transport.close()
            b.close()

    zero_copy._sendfile_some = slow_disk  # type: ignore[assignment]
    try:
        assert asyncio.run(send()) == data
    finally:
        zero_copy._sendfile_some = real  # type: ignore[assignment]
        os.close(fd)
    frame.close()
    assert told[0] == (False, 0) and told[1][0] is True
    assert told[1][1] >= 20, told


def test_a_late_read_counts_from_its_dirs_oldest_partition_read_under_way() -> None:
    """Pure: a late read counts as slow from when its dir began the partition read it waits
    for (another follower's, if it is queued behind it), not from the fetch's start; once
    done, it served for as long as its longest partition read."""
    clock = DirClock()
    tracking = FollowerTracking(0, CONFIG)
    queued, other = clock.read(), clock.read()
    tracking.response_started(FOLLOWER, 1, 1_000, disk=queued)
    resign, why = tracking.too_slow_for_all([FOLLOWER], 1_000_000_000_000_000)
    assert not resign and "served within" in why  # no partition read under way
    with other.partition():
        since = clock.busy_since_ms()
        assert since is not None
        resign, why = tracking.too_slow_for_all([FOLLOWER], since + 50)
        assert not resign and "slower than" not in why
        resign, why = tracking.too_slow_for_all(
            [FOLLOWER], since + CONFIG.replica_lag_time_max_ms + 1
        )
        assert resign, why
    assert clock.busy_since_ms() is None
    with queued.partition():
        queued.read_records = True
    # Ended, its own partition read of records short: the spell is over.
    assert queued.longest_ms < CONFIG.follower_fetch_process_time_max_ms
    tracking.response_sent(1, since + CONFIG.replica_lag_time_max_ms + 2, leader=True)
    resign, why = tracking.too_slow_for_all([FOLLOWER], since + 2 * CONFIG.replica_lag_time_max_ms)
    assert not resign, why


def test_one_stretched_partition_read_does_not_stand_for_the_lag_time() -> None:
    """Pure: a late read whose longest partition read outlasted the budget (the thread
    descheduled on a loaded machine) starts a slow spell; a dir read answered in time, its
    partitions quick on the disk, ends it before the lag time is out."""
    tracking = FollowerTracking(0, CONFIG)
    late = DirClock().read()
    late.longest_ms = CONFIG.follower_fetch_process_time_max_ms + 50
    tracking.response_started(FOLLOWER, 1, 1_000, disk=late)
    tracking.response_sent(1, 2_000, leader=True)
    resign, why = tracking.too_slow_for_all([FOLLOWER], 2_000 + 100)
    assert not resign and "slower than" in why  # the spell began
    tracking.read_served(FOLLOWER, 3, 2_500)
    resign, why = tracking.too_slow_for_all([FOLLOWER], 2_000 + CONFIG.replica_lag_time_max_ms * 2)
    assert not resign and "served within" in why, why


def test_only_leaders_with_a_read_under_way_or_a_slow_spell_are_suspected_slow() -> None:
    """Pure: what the once-a-second resignation check looks at (`slow_suspected`): nothing
    on a quiet leader, a read for a follower under way, a slow spell until it is over."""
    tracking = FollowerTracking(0, CONFIG)
    assert not tracking.slow_suspected()
    late = DirClock().read()
    late.longest_ms = CONFIG.follower_fetch_process_time_max_ms + 50
    tracking.response_started(FOLLOWER, 1, 1_000, disk=late)
    assert tracking.slow_suspected()  # under way
    tracking.response_sent(1, 2_000, leader=True)
    tracking.too_slow_for_all([FOLLOWER], 2_100)
    assert tracking.slow_suspected()  # the spell it began
    tracking.read_served(FOLLOWER, 3, 2_500)
    resign, why = tracking.too_slow_for_all([FOLLOWER], 2_000 + CONFIG.replica_lag_time_max_ms * 2)
    assert not resign and "served within" in why, why
    assert not tracking.slow_suspected()
