"""A confluent-kafka producer sending as fast as it may, recording when each record was
acknowledged and the throttles the broker reported: the client side of the quota tests and of
``bench/quotas.py``."""

from __future__ import annotations

import threading
import time
from typing import Any

import confluent_kafka

__all__ = ["Producing"]


class Producing:
    """A confluent-kafka producer sending 1 KiB records as fast as it may, recording when each
    was acknowledged and every throttle the broker reported."""

    def __init__(self, bootstrap: str, client_id: str, topic: str, acks: int = 1) -> None:
        self.acks: list[float] = []
        self.throttles: list[float] = []  # seconds, as confluent-kafka reports them
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
            "batch.size": 16384, "queue.buffering.max.kbytes": 1024, "acks": acks,
            "throttle_cb": lambda event: self.throttles.append(event.throttle_time),
        })  # fmt: skip
        self.topic = topic
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.started = 0.0

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.acks.append(time.monotonic())

    def _run(self) -> None:
        value = b"x" * 1024
        self.started = time.monotonic()
        while not self.stop.is_set():
            try:
                self.producer.produce(self.topic, value, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.01)
                continue
            self.producer.poll(0)
        self.producer.purge()
        self.producer.flush(10)

    def bytes_by(self, seconds: float) -> int:
        return self.bytes_between(0.0, seconds)

    def bytes_between(self, start_s: float, end_s: float) -> int:
        """Bytes acknowledged from ``start_s`` to ``end_s`` after the producer started."""
        start, end = self.started + start_s, self.started + end_s
        return 1024 * sum(1 for t in self.acks if start < t <= end)
