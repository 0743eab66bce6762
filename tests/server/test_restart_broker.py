"""Restarting the broker between produce and consume: cleanly (SIGTERM) and with kill -9 while
an acks=all producer is writing. Every acknowledged message must be there afterwards, once,
in order; offsets, log start offsets, producer ids and idempotent-producer state survive."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import confluent_kafka
from kio.schema.errors import ErrorCode

from tests.brokerproc import BrokerProcess
from tests.server.test_clients_matrix import Msg, check, consume, produce
from tests.server.test_fetch_api import delete_records, list_offsets
from tests.server.test_produce_api import (
    RawClient,
    batch,
    fetch_request,
    init_producer_id,
    produce_one,
)
from tests.waiting import wait_until


def test_clean_restart_keeps_every_message_and_the_broker_state(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", overrides={"num.partitions": "1"})
    broker.start()
    try:
        sent = [
            Msg(f"k{i}".encode(), f"message {i}".encode(), (("n", str(i).encode()),))
            for i in range(5000)
        ]
        assert produce("confluent", broker.bootstrap, "durable", sent, codec="lz4") == list(
            range(5000)
        )
        with RawClient(broker.port) as c:
            for i in range(10):
                produce_one(c, 9, "trimmed", 0, batch([str(i).encode()]))
            assert delete_records(c, 2, "trimmed", 4).low_watermark == 4
            pid = init_producer_id(c).producer_id
            first = batch([b"i0", b"i1"], producer_id=pid, producer_epoch=0, base_sequence=0)
            assert produce_one(c, 9, "idem", 0, first).base_offset == 0

        assert broker.stop() == 0
        broker.start()

        check(consume("confluent", broker.bootstrap, {"durable": 5000}), "durable", sent)
        with RawClient(broker.port) as c:
            assert list_offsets(c, 5, "trimmed", -2).offset == 4
            assert list_offsets(c, 5, "trimmed", -1).offset == 10
            # Producer ids are never handed out twice, across restarts too.
            assert init_producer_id(c).producer_id > pid
            # The idempotent producer's retry after the restart is still recognised.
            retry = produce_one(c, 9, "idem", 0, first)
            assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)
            nxt = batch([b"i2"], producer_id=pid, producer_epoch=0, base_sequence=2)
            assert produce_one(c, 9, "idem", 0, nxt).base_offset == 2
        # New writes continue after the old ones.
        more = [Msg(b"k", b"after restart")]
        assert produce("kafka-python", broker.bootstrap, "durable", more) == [5000]
    finally:
        broker.kill()


def test_kill_9_during_acks_all_produce_loses_no_acknowledged_message(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", overrides={"num.partitions": "1"})
    broker.start()
    acked: list[tuple[int, int]] = []  # (sequence number, offset)
    failed: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def delivered(err: object, msg: confluent_kafka.Message) -> None:
        seq = int(msg.value())
        with lock:
            if err is None:
                acked.append((seq, msg.offset()))
            else:
                failed.append(seq)

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60_000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
        }
    )
    sent = 0

    def produce_forever() -> None:
        nonlocal sent
        while not stop.is_set():
            try:
                producer.produce("crash", value=str(sent).encode(), on_delivery=delivered)
                sent += 1
            except BufferError:
                producer.poll(0.05)
                continue
            if sent % 100 == 0:
                producer.poll(0)
                time.sleep(0.005)

    writer = threading.Thread(target=produce_forever)
    writer.start()
    try:
        wait_until(lambda: len(acked) >= 3000, 30, "3000 acks")
        broker.kill()  # kill -9 mid-stream: nothing is flushed, no marker is written
        acked_before_kill = len(acked)
        assert acked_before_kill >= 3000
        time.sleep(0.5)
        broker.start()  # unclean start: recovery, then the producer carries on
        wait_until(
            lambda: len(acked) >= acked_before_kill + 3000, 30, "3000 more acks after the restart"
        )
    finally:
        stop.set()
        writer.join()
    remaining = producer.flush(60)
    try:
        assert remaining == 0
        assert len(acked) >= acked_before_kill + 3000, (len(acked), acked_before_kill)
        got = consume("confluent", broker.bootstrap, {"crash": len(acked)}, timeout=60)
        values = [int(g.value) for g in got]
        offsets = [g.offset for g in got]
        assert offsets == list(range(len(got)))
        # Exactly once, in production order: no duplicates, no reordering.
        assert values == sorted(set(values))
        # Every acknowledged message is there, at the offset its acknowledgement named.
        by_seq = {int(g.value): g.offset for g in got}
        for seq, offset in acked:
            assert by_seq.get(seq) == offset, (seq, offset)
        assert not failed, failed[:10]
        assert "unclean" in broker.output() or "recover" in broker.output()
    finally:
        broker.kill()


def test_partitions_of_a_dir_offline_at_start_answer_storage_errors(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    broker = BrokerProcess(tmp_path / "b", overrides={"num.partitions": "2"}, log_dirs=dirs)
    broker.start()
    try:
        with RawClient(broker.port) as c:
            for partition in (0, 1):
                for i in range(3):
                    produce_one(c, 9, "jbod", partition, batch([f"{partition}-{i}".encode()]))
        assert broker.stop() == 0
        holder = {p: next(d for d in dirs if (d / f"jbod-{p}").is_dir()) for p in (0, 1)}
        assert holder[0] != holder[1]
        # Make one dir unusable at start-up: its meta.properties names another node.
        meta = holder[0] / "meta.properties"
        original = meta.read_text()
        meta.write_text(original.replace("node.id=0", "node.id=99"))
        broker.start()
        with RawClient(broker.port) as c:
            assert produce_one(c, 9, "jbod", 0, batch([b"x"])).error_code == (
                ErrorCode.kafka_storage_error
            )
            response = c.call(fetch_request(12, "jbod", {0: 0}))
            assert response.responses[0].partitions[0].error_code == ErrorCode.kafka_storage_error
            assert list_offsets(c, 5, "jbod", -1).error_code == ErrorCode.kafka_storage_error
            # The other dir serves as before.
            assert produce_one(c, 9, "jbod", 1, batch([b"1-3"])).base_offset == 3
        assert not (holder[1] / "jbod-0").exists()  # no empty stand-in was created
        assert broker.stop() == 0
        meta.write_text(original)
        broker.start()
        with RawClient(broker.port) as c:
            response = c.call(fetch_request(12, "jbod", {0: 0}))
            partition = response.responses[0].partitions[0]
            assert partition.error_code == ErrorCode.none and partition.high_watermark == 3
    finally:
        broker.kill()
