"""The data path in-process: the zero-copy Fetch encoding, the purgatory, READ_COMMITTED with
aborted transactions, and a log dir failing under a running broker."""

from __future__ import annotations

import asyncio
import errno
import importlib
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import PartitionState
from logkeel.config import BrokerConfig
from logkeel.records.builder import build_batch, build_control_batch
from logkeel.records.control import ControlRecordType
from logkeel.server.api.fetch import FetchResponseFrame
from logkeel.server.broker import Broker
from logkeel.server.protocol import ApiKey, encode_response, response_schema
from logkeel.server.replica.purgatory import DelayedOperation, DelayedOperationPurgatory
from logkeel.server.replica.results import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchPartitionRequest,
    RegionRecords,
    close_records,
)
from logkeel.storage.topic_partition import TopicPartition
from logkeel.testing.faulty_fs import FaultyFs
from tests.waiting import wait_until

T = TypeVar("T")


def run_broker(
    tmp_path: Path,
    fn: Callable[[Broker], Awaitable[T]],
    *,
    dirs: int = 1,
    log_dirs: list[Path] | None = None,
    **overrides: str,
) -> T:
    async def main() -> T:
        nonlocal log_dirs
        log_dirs = log_dirs or [tmp_path / f"dir{i}" for i in range(dirs)]
        props = {
            "log.dirs": ",".join(str(d) for d in log_dirs),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            **overrides,
        }
        broker = Broker(BrokerConfig.from_properties(None, props))
        await broker.start()
        try:
            return await fn(broker)
        finally:
            await broker.stop()

    return asyncio.run(main())


def records(*values: bytes, **opts: Any) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(now, None, v, ()) for v in values], **opts)


# -- zero-copy encoding --------------------------------------------------------------------------


def _response_with(version: int, topics: list[list[bytes | None]], region_for: Any) -> Any:
    mod = importlib.import_module(response_schema(ApiKey.FETCH, version).__module__)
    import dataclasses
    import uuid

    def make(cls: type, **values: Any) -> Any:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    out_topics = []
    for t, parts in enumerate(topics):
        partitions = tuple(
            make(
                mod.PartitionData,
                partition_index=i,
                error_code=ErrorCode.none,
                high_watermark=100 + i,
                last_stable_offset=90 + i,
                log_start_offset=i,
                aborted_transactions=(mod.AbortedTransaction(producer_id=7, first_offset=3),)
                if i % 2
                else None,
                preferred_read_replica=-1,
                records=region_for(data),
            )
            for i, data in enumerate(parts)
        )
        out_topics.append(
            make(
                mod.FetchableTopicResponse,
                topic=f"t{t}",
                topic_id=uuid.UUID(int=t + 1),
                partitions=partitions,
            )
        )
    from datetime import timedelta

    from kio.static.primitive import i32Timedelta

    return make(
        mod.FetchResponse,
        throttle_time=i32Timedelta.parse(timedelta(0)),
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(out_topics),
    )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    version=st.integers(4, 18),
    topics=st.lists(
        st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=4),
        min_size=1,
        max_size=3,
    ),
    corr=st.integers(0, 2**31 - 1),
)
def test_zero_copy_frame_is_byte_identical_to_kio(
    tmp_path: Path, version: int, topics: list[list[bytes | None]], corr: int
) -> None:
    """Records kept as file regions encode to exactly the frame kio writes with the bytes."""
    path = tmp_path / "segment"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    regions: list[RegionRecords] = []
    try:

        def region_for(data: bytes | None) -> Any:
            if not data:
                return data
            position = os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, b"junk" + data + b"junk")
            region = RegionRecords(os.dup(fd), position + 4, len(data))
            regions.append(region)
            return region

        frame = FetchResponseFrame(_response_with(version, topics, region_for), regions)
        expected = encode_response(corr, _response_with(version, topics, lambda d: d))
        parts = frame.frame_parts(corr)
        assert sum(isinstance(p, RegionRecords) for p in parts) == len(regions)
        assert frame.encode(corr) == expected
        frame.close()
        assert all(r.closed for r in regions)
    finally:
        os.close(fd)


# -- purgatory -----------------------------------------------------------------------------------


class Flag(DelayedOperation):
    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.ready = False

    def try_complete(self) -> bool:
        return self.force_complete() if self.ready else False


class Counted(Flag):
    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.checks = 0

    def try_complete(self) -> bool:
        self.checks += 1
        return super().try_complete()


def test_an_operation_watching_many_changed_keys_is_checked_once() -> None:
    """A follower's fetch watches every partition it replicates; thousands of leaderships
    changing at once re-check it once, not once per partition."""

    async def main() -> None:
        purgatory: DelayedOperationPurgatory[int] = DelayedOperationPurgatory("test")
        many, one = Counted(10_000), Counted(10_000)
        waits = [asyncio.create_task(purgatory.wait(many, range(1000))),
                 asyncio.create_task(purgatory.wait(one, [5]))]  # fmt: skip
        while purgatory.pending < 2:
            await asyncio.sleep(0)
        parked = many.checks, one.checks
        assert purgatory.check_and_complete_keys(range(2000)) == 0
        assert (many.checks, one.checks) == (parked[0] + 1, parked[1] + 1)
        many.ready = one.ready = True
        assert purgatory.check_and_complete_keys([5, 7]) == 2
        await asyncio.gather(*waits)
        assert purgatory.watched_keys() == 0

    asyncio.run(main())


def test_purgatory_completes_on_check_expires_and_forgets_cancelled_waits() -> None:
    async def main() -> None:
        purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory("test")
        op = Flag(10_000)
        waiter = asyncio.create_task(purgatory.wait(op, ["a", "b"]))
        await asyncio.sleep(0.01)
        assert purgatory.pending == 1 and purgatory.check_and_complete("a") == 0
        op.ready = True
        assert purgatory.check_and_complete("b") == 1
        await waiter
        assert op.completed and not op.expired and purgatory.watched_keys() == 0

        slow = Flag(50)
        await purgatory.wait(slow, ["a"])
        assert slow.expired and purgatory.pending == 0

        cancelled = Flag(10_000)
        task = asyncio.create_task(purgatory.wait(cancelled, ["c"]))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert purgatory.pending == 0 and purgatory.watched_keys() == 0

        ready = Flag(10_000)
        ready.ready = True
        await purgatory.wait(ready, ["d"])  # complete at once: never parked
        assert ready.completed and purgatory.watched_keys() == 0

        parked = Flag(10_000)
        task = asyncio.create_task(purgatory.wait(parked, ["e"]))
        await asyncio.sleep(0.01)
        purgatory.shutdown()
        await task
        assert parked.expired

    asyncio.run(main())


# -- transactions and isolation ------------------------------------------------------------------


def test_read_committed_stops_at_the_lso_and_reports_aborted_transactions(tmp_path: Path) -> None:
    async def scenario(broker: Broker) -> None:
        broker.metadata.create_topic("txn", 1, 1, {})
        rm = broker.replica_manager
        tp = TopicPartition("txn", 0)
        txn = records(
            b"t1", b"t2", producer_id=4000, producer_epoch=0, base_sequence=0, is_transactional=True
        )
        assert (await rm.appends.append_records(tp, txn, acks=-1)).base_offset == 0
        plain = records(b"p1")
        assert (await rm.appends.append_records(tp, plain, acks=1)).base_offset == 2

        async def fetch(isolation: int) -> Any:
            (r,) = await rm.fetches.fetch(
                [FetchPartitionRequest(tp, 0, 1 << 20)], isolation_level=isolation
            )
            return r

        committed = await fetch(READ_COMMITTED)
        assert committed.last_stable_offset == 0 and committed.records is None
        assert committed.high_watermark == 3
        uncommitted = await fetch(READ_UNCOMMITTED)
        assert uncommitted.size > 0 and uncommitted.aborted_transactions is None
        close_records([uncommitted])

        # A client may not write the marker; the broker itself (the coordinator's path) may.
        marker = build_control_batch(
            ControlRecordType.ABORT,
            producer_id=4000,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp=int(time.time() * 1000),
        )
        refused = await rm.appends.append_records(tp, marker, acks=1)
        assert refused.error == ErrorCode.invalid_record
        done = await rm.appends.append_records(tp, marker, acks=-1, origin_is_client=False)
        assert done.error == ErrorCode.none and done.base_offset == 3

        committed = await fetch(READ_COMMITTED)
        assert committed.last_stable_offset == 4 and committed.high_watermark == 4
        assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [
            (4000, 0)
        ]
        assert committed.size > 0
        close_records([committed])

    run_broker(tmp_path, scenario)


# -- log dir failure ------------------------------------------------------------------------------


def test_a_failed_log_dir_answers_storage_errors_and_the_other_dir_serves(
    tmp_path: Path, faulty_fs: FaultyFs
) -> None:
    failing_dir = faulty_fs.mountpoint / "dir0"

    async def scenario(broker: Broker) -> None:
        broker.metadata.create_topic("jbod", 2, 1, {})
        rm = broker.replica_manager
        tps = [TopicPartition("jbod", 0), TopicPartition("jbod", 1)]
        for tp in tps:
            assert (await rm.appends.append_records(tp, records(b"before"), acks=-1)).error == 0
        logs = {tp: rm.partition(tp).log for tp in tps}
        assert logs[tps[0]].log_dir != logs[tps[1]].log_dir  # one partition per dir
        doomed, survivor = sorted(tps, key=lambda tp: logs[tp].log_dir != failing_dir)
        # Taking a dir offline closes its logs: it must happen on an IO thread, never the loop.
        loop_thread = threading.current_thread()
        handled_in: list[threading.Thread] = []
        handled = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_failure(log_dir: str, reason: str) -> None:
            handled_in.append(threading.current_thread())
            loop.call_soon_threadsafe(handled.set)

        broker.log_manager.add_dir_failure_listener(on_failure)

        # A long poll on the doomed partition, waiting for data past the end.
        waiting = asyncio.create_task(
            rm.fetches.fetch([FetchPartitionRequest(doomed, 1, 1 << 20)], max_wait_ms=30_000)
        )
        await asyncio.sleep(0.05)
        assert not waiting.done()

        # The disk fails for real: its writes answer EIO.
        faulty_fs.fail(errno.EIO, ops={"write", "fsync"})

        failed = await rm.appends.append_records(doomed, records(b"lost"), acks=-1)
        assert failed.error == ErrorCode.kafka_storage_error
        (result,) = await asyncio.wait_for(waiting, 5)
        assert result.error == ErrorCode.kafka_storage_error
        await asyncio.wait_for(handled.wait(), 5)
        assert handled_in and loop_thread not in handled_in
        again = await rm.appends.append_records(doomed, records(b"again"), acks=1)
        assert again.error == ErrorCode.kafka_storage_error
        (fetched,) = await rm.fetches.fetch([FetchPartitionRequest(doomed, 0, 1 << 20)])
        assert fetched.error == ErrorCode.kafka_storage_error
        assert doomed in broker.log_manager.offline_partitions

        # The other dir is untouched.
        ok = await rm.appends.append_records(survivor, records(b"after"), acks=-1)
        assert ok.error == ErrorCode.none and ok.base_offset == 1
        (fetched,) = await rm.fetches.fetch([FetchPartitionRequest(survivor, 0, 1 << 20)])
        assert fetched.error == ErrorCode.none and fetched.high_watermark == 2
        close_records([fetched])

    run_broker(tmp_path, scenario, log_dirs=[failing_dir, tmp_path / "dir1"])
    faulty_fs.heal()


def test_metadata_changes_create_reconfigure_and_delete_logs(tmp_path: Path) -> None:
    async def scenario(broker: Broker) -> None:
        rm = broker.replica_manager
        broker.metadata.create_topic("life", 2, 1, {"max.message.bytes": "1000"})
        tp = TopicPartition("life", 1)
        p = rm.partition(tp)
        assert p is not None and p.is_leader and p.log is not None
        too_big = await rm.appends.append_records(tp, records(b"x" * 2000), acks=1)
        assert too_big.error == ErrorCode.message_too_large
        await asyncio.to_thread(
            broker.metadata.set_topic_configs, "life", {"max.message.bytes": "100000"}
        )
        assert (await rm.appends.append_records(tp, records(b"x" * 2000), acks=1)).error == 0
        await asyncio.to_thread(broker.metadata.create_partitions, "life", 3)
        assert rm.partition(TopicPartition("life", 2)) is not None
        directory = p.log.dir
        await asyncio.to_thread(broker.metadata.delete_topic, "life")
        assert rm.partition(tp) is None
        assert not directory.exists()
        gone = await rm.appends.append_records(tp, records(b"y"), acks=1)
        assert gone.error == ErrorCode.unknown_topic_or_partition

    run_broker(tmp_path, scenario)


def test_log_append_time_and_min_insync_replicas(tmp_path: Path) -> None:
    async def scenario(broker: Broker) -> None:
        rm = broker.replica_manager
        broker.metadata.create_topic("stamped", 1, 1, {"message.timestamp.type": "LogAppendTime"})
        before = int(time.time() * 1000)
        r = await rm.appends.append_records(TopicPartition("stamped", 0), records(b"a"), acks=1)
        assert r.error == ErrorCode.none and before <= r.log_append_time <= before + 60_000
        (f,) = await rm.fetches.fetch(
            [FetchPartitionRequest(TopicPartition("stamped", 0), 0, 1 << 20)]
        )
        from logkeel.records.batch import BatchHeader, TimestampType

        header = BatchHeader.parse(await rm.run_in_io(f.records.read_bytes))
        assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
        assert header.max_timestamp == r.log_append_time
        close_records([f])

        broker.metadata.create_topic("strict", 1, 1, {"min.insync.replicas": "2"})
        tp = TopicPartition("strict", 0)
        refused = await rm.appends.append_records(tp, records(b"b"), acks=-1)
        assert refused.error == ErrorCode.not_enough_replicas
        assert (await rm.appends.append_records(tp, records(b"b"), acks=1)).error == ErrorCode.none

        # The convenience read for internal readers (the group coordinator).
        error, data, hw = await rm.fetches.read_records(tp, 0, 1 << 20)
        assert (error, hw) == (ErrorCode.none, 1)
        from logkeel.records.record import decode_records

        assert [r.value for r in decode_records(data)[1]] == [b"b"]

    run_broker(tmp_path, scenario)


def count_sendfile(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes each ``sendfile`` call sent, as the test goes on."""
    from logkeel.server.network import zero_copy as network

    sent: list[int] = []
    real = network._sendfile_some

    def counting(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        n = real(out_fd, in_fd, offset, count)
        if n > 0:
            sent.append(n)
        return n

    monkeypatch.setattr(network, "_sendfile_some", counting)
    return sent


def test_fetched_records_go_to_the_socket_with_sendfile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record bytes of a Fetch response travel by sendfile, not through Python."""
    from tests.server.test_produce_api import RawClient, fetch_request

    sent_by_sendfile = count_sendfile(monkeypatch)
    payload = os.urandom(3 * 1024 * 1024)

    async def scenario(broker: Broker) -> None:
        broker.metadata.create_topic("zero-copy", 1, 1, {"max.message.bytes": "10000000"})
        tp = TopicPartition("zero-copy", 0)
        appends = broker.replica_manager.appends
        assert (await appends.append_records(tp, records(payload))).error == 0

        def fetch() -> Any:
            with RawClient(broker.port) as c:
                return c.call(fetch_request(12, "zero-copy", {0: 0}))

        response = await asyncio.to_thread(fetch)
        data = response.responses[0].partitions[0].records
        from logkeel.records.record import decode_records

        assert decode_records(data)[1][0].value == payload
        assert sum(sent_by_sendfile) == len(data)

    run_broker(tmp_path, scenario)


def test_a_long_poll_of_a_replica_removed_and_added_again_is_not_counted(tmp_path: Path) -> None:
    """A reassignment undone and redone while a follower's fetch waits in the purgatory: that
    fetch comes from the replica's earlier incarnation (its offset is of the deleted log), so
    it is answered NOT_LEADER_OR_FOLLOWER, not counted as the new replica caught up (which
    would put an empty log in the ISR)."""

    async def scenario(broker: Broker) -> None:
        rm = broker.replica_manager
        broker.metadata.create_topic("again", 1, 1, {})
        tp = TopicPartition("again", 0)
        assert (await rm.appends.append_records(tp, records(b"a", b"b"), acks=1)).error == 0
        node = broker.node_id

        def replicas(rs: list[int], epoch: int) -> None:
            broker.metadata.update_partition(
                PartitionState("again", 0, rs, node, 0, [node], partition_epoch=epoch)
            )

        replicas([node, 7], 1)
        waiting = asyncio.create_task(
            rm.fetches.fetch(
                [FetchPartitionRequest(tp, 2, 1 << 20)], replica_id=7, max_wait_ms=3000, min_bytes=1
            )  # fmt: skip
        )
        # Parked: nothing past offset 2 yet (polled off the loop, which serves the fetch).
        await asyncio.to_thread(wait_until, lambda: rm.fetch_purgatory.pending > 0, 10,
                                "the follower's fetch parked")  # fmt: skip
        replicas([node], 2)
        replicas([node, 7], 3)
        assert (await rm.appends.append_records(tp, records(b"c"), acks=1)).error == 0
        [result] = await asyncio.wait_for(waiting, 10)
        assert result.error == ErrorCode.not_leader_or_follower
        p = rm.partition(tp)
        assert p is not None and 7 not in p.followers.snapshot()

    run_broker(tmp_path, scenario)


def test_the_leader_sends_a_consumer_only_to_a_follower_holding_its_offset(tmp_path: Path) -> None:
    """KIP-392 on a real log: an in-sync follower in the consumer's rack is named as its
    preferred read replica (no records read), unless the follower's own fetches said it has
    deleted the consumer's offset, or the consumer gave no rack."""
    from logkeel.server.replica import partition_reads

    async def scenario(broker: Broker) -> None:
        rm = broker.replica_manager
        broker.metadata.create_topic("near", 1, 1, {})
        tp = TopicPartition("near", 0)
        assert (await rm.appends.append_records(tp, records(b"a", b"b"), acks=1)).error == 0
        node = broker.node_id
        broker.metadata.update_partition(
            PartitionState("near", 0, [node, 7], node, 0, [node, 7], partition_epoch=1)
        )
        racks = {node: "r1", 7: "r2"}
        p = rm.partition(tp)
        assert p is not None

        async def follower_at(log_start: int) -> None:
            fetched = FetchPartitionRequest(tp, 2, 1 << 20, log_start_offset=log_start)
            close_records(await rm.fetches.fetch([fetched], replica_id=7))

        def consumer(offset: int, rack: str) -> Any:
            request = FetchPartitionRequest(tp, offset, 1 << 20, client_rack=rack)
            result, _ = partition_reads.read(p, request, -1, 1 << 20, 0, True, racks)
            close_records([result])
            return result.preferred_read_replica, result.records is not None

        await follower_at(0)
        assert p.high_watermark == 2
        assert consumer(0, "r2") == (7, False)
        assert consumer(0, "r1") == (-1, True)  # the leader's own rack
        assert consumer(0, "") == (-1, True)
        await follower_at(1)  # the follower deleted offset 0
        assert consumer(0, "r2") == (-1, True)
        assert consumer(1, "r2") == (7, False)

    run_broker(tmp_path, scenario)


def test_a_small_cached_region_is_copied_on_the_loop_and_a_cold_one_sent_by_sendfile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tail read (just appended, in the page cache) skips the sendfile thread; a region the
    page cache does not hold still goes to it, so a cold or slow disk never stalls the loop.
    Both arrive byte for byte."""
    import socket

    from logkeel.server.network import zero_copy as network
    from logkeel.server.replica.results import RegionRecords

    sent_by_sendfile = count_sendfile(monkeypatch)
    path = tmp_path / "segment"
    data = os.urandom(8192)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)

    async def send(region: RegionRecords) -> bytes:
        a, b = socket.socketpair()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
        try:
            await network.send_parts(
                transport,  # type: ignore[arg-type]
                [b"head", region],
                lambda: asyncio.sleep(0),
                lambda: False,
            )
            return b.recv(1 << 16)
        finally:
            transport.close()
            b.close()

    try:
        os.pread(fd, len(data), 0)  # in the page cache
        assert asyncio.run(send(RegionRecords(os.dup(fd), 100, 4000))) == b"head" + data[100:4100]
        assert sent_by_sendfile == []
        os.fsync(fd)  # clean pages can be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        assert asyncio.run(send(RegionRecords(os.dup(fd), 200, 4000))) == b"head" + data[200:4200]
        assert sum(sent_by_sendfile) == 4000
    finally:
        os.close(fd)


def test_a_long_poll_that_waited_out_unchanged_answers_its_first_read(tmp_path: Path) -> None:
    """A long poll at the log end that expires with nothing moved is answered with its first
    read, not read again (half of an idle broker's CPU at 2,000 partitions was the second
    read of every partition of its followers' sessions); one whose log start moved meanwhile
    is read again and answers the new log start."""

    async def scenario(broker: Broker) -> None:
        rm = broker.replica_manager
        broker.metadata.create_topic("idle", 1, 1, {})
        tp = TopicPartition("idle", 0)
        assert (await rm.appends.append_records(tp, records(b"a", b"b"), acks=1)).error == 0
        reads: list[int] = []
        read = rm.fetches._read

        async def counted(*args: Any) -> Any:
            reads.append(1)
            return await read(*args)

        rm.fetches._read = counted  # type: ignore[method-assign]
        at_end = [FetchPartitionRequest(tp, 2, 1 << 20)]
        [idle] = await rm.fetches.fetch(at_end, max_wait_ms=200, min_bytes=1)
        assert (idle.error, idle.high_watermark, idle.log_start_offset, idle.size) == (0, 2, 0, 0)
        assert len(reads) == 1, "an unchanged long poll was read again"

        reads.clear()
        waiting = asyncio.create_task(rm.fetches.fetch(at_end, max_wait_ms=1000, min_bytes=1))
        await asyncio.to_thread(wait_until, lambda: rm.fetch_purgatory.pending > 0, 10,
                                "the fetch parked")  # fmt: skip
        assert await rm.offsets.delete_records(tp, 1) == (ErrorCode.none, 1)
        [moved] = await asyncio.wait_for(waiting, 10)
        assert (moved.error, moved.high_watermark, moved.log_start_offset) == (0, 2, 1)
        assert len(reads) == 2

    run_broker(tmp_path, scenario)


def test_a_session_long_poll_reads_only_the_partitions_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An incremental session's partitions whose last read found nothing (`session_reads`)
    are not read while they stay unchanged, and its long poll still watches them: an append
    to one ends the poll and only that one is read, its result after the others'."""
    from logkeel.server.replica import partition_reads
    from logkeel.server.replica.session_reads import SessionReads, stamp

    read_tps: list[TopicPartition] = []
    read_one = partition_reads.read

    def counted(p: Any, r: FetchPartitionRequest, *args: Any) -> Any:
        read_tps.append(r.tp)
        return read_one(p, r, *args)

    monkeypatch.setattr(partition_reads, "read", counted)

    async def scenario(broker: Broker) -> None:
        rm = broker.replica_manager
        broker.metadata.create_topic("quiet", 3, 1, {})
        tps = [TopicPartition("quiet", i) for i in range(3)]
        for tp in tps:
            assert (await rm.appends.append_records(tp, records(b"a"), acks=1)).error == 0
        reads = SessionReads(-1)
        at_end = [FetchPartitionRequest(tp, 1, 1 << 20) for tp in tps]
        stamps: dict[int, Any] = {}
        first = await rm.fetches.fetch(at_end, max_wait_ms=0, stamps=stamps)
        for r, result in zip(at_end, first, strict=True):
            reads.read((r.tp.topic, r.tp.partition), r, stamps[id(r)], result)
        assert len(reads) == 3

        read_tps.clear()
        unread = reads.unread(rm.partition, 0)
        assert await rm.fetches.fetch([], max_wait_ms=200, unread=list(unread.values())) == []
        assert read_tps == [], "an unchanged session was read"

        unread = reads.unread(rm.partition, 0)
        waiting = asyncio.create_task(
            rm.fetches.fetch([], max_wait_ms=5000, unread=list(unread.values()))
        )
        await asyncio.to_thread(wait_until, lambda: rm.fetch_purgatory.pending > 0, 10,
                                "the session's poll parked")  # fmt: skip
        assert (await rm.appends.append_records(tps[1], records(b"b"), acks=1)).error == 0
        [changed] = await asyncio.wait_for(waiting, 10)
        assert changed.tp == tps[1] and changed.size > 0 and changed.high_watermark == 2
        close_records([changed])
        assert read_tps == [tps[1]]
        assert stamp(rm.partition(tps[0]), at_end[0], -1, 0) == unread[("quiet", 0)].stamp

    run_broker(tmp_path, scenario)


def test_a_sequence_gap_right_after_refusing_sends_as_not_the_leader_is_retriable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker refuses a producer's pipelined requests as not the leader (clients learned of
    its leadership from another broker first), becomes the leader, and the next request has a
    sequence gap where the refused ones were. Answered OUT_OF_ORDER_SEQUENCE_NUMBER, librdkafka
    bumped its epoch and sent everything unacknowledged again: batches this replica already
    held from the old leader were written twice (seen in an attack test, with librdkafka's
    "skipped sequence numbers ... caused by previous failed request (NOT_LEADER_FOR_PARTITION)").
    It is answered NOT_LEADER_OR_FOLLOWER now, so the refused ones go first; a gap with no
    refusal before it is still OUT_OF_ORDER_SEQUENCE_NUMBER."""
    from logkeel.server.replica import appends

    def send(seq: int) -> bytes:
        return records(f"v{seq}".encode(), producer_id=0, producer_epoch=0, base_sequence=seq)

    async def scenario(broker: Broker) -> None:
        rm = broker.replica_manager
        broker.metadata.create_topic("moving", 1, 1, {})
        tp = TopicPartition("moving", 0)
        p = rm.partition(tp)
        led = broker.metadata.partition(tp)
        assert p is not None and p.is_leader and led is not None
        assert (await rm.appends.append_records(tp, send(0), acks=1)).error == ErrorCode.none

        p.leader_id = 7  # not the leader yet, as before the change is applied here
        refused = await rm.appends.append_records(tp, send(1), acks=1)
        assert refused.error == ErrorCode.not_leader_or_follower
        p.apply_state(led)  # the leader now
        gap = await rm.appends.append_records(tp, send(2), acks=1)
        assert gap.error == ErrorCode.not_leader_or_follower, gap  # before: OUT_OF_ORDER
        # The refused one, then the next, in order: nothing lost, nothing twice.
        assert (await rm.appends.append_records(tp, send(1), acks=1)).base_offset == 1
        assert (await rm.appends.append_records(tp, send(2), acks=1)).base_offset == 2

        # No refusal lately: a gap is the producer's.
        monkeypatch.setattr(appends, "_GAP_AFTER_REFUSAL_S", 0.0)
        gap = await rm.appends.append_records(tp, send(4), acks=1)
        assert gap.error == ErrorCode.out_of_order_sequence_number

    run_broker(tmp_path, scenario)
