"""A log dir that disappears under a running broker (JBOD, KIP-18): its partitions are reported
offline, the other dir keeps serving, and DescribeLogDirs and the metrics say which dir failed.

The broker runs in-process here (a real ``Broker`` with real dirs and a real socket) so the test
can remove one of its dirs while it runs and watch it notice on its own, at its next checkpoint.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from logkeel.config import BrokerConfig
from logkeel.server.broker import Broker
from tests.server.test_admin_wire import Wire
from tests.waiting import wait_until


class InProcessBroker:
    """A ``Broker`` on its own event loop in a background thread."""

    def __init__(self, config: BrokerConfig, **kwargs: Any) -> None:
        self.config = config
        self.kwargs = kwargs
        self.loop = asyncio.new_event_loop()
        self.broker: Broker | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> Broker:
        self._thread.start()

        async def start() -> Broker:
            broker = Broker(self.config, **self.kwargs)
            await broker.start()
            return broker

        self.broker = self.call(start())
        return self.broker

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.broker is not None:
            self.call(self.broker.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def two_dir_broker(tmp_path: Path) -> Iterator[tuple[InProcessBroker, Path, Path]]:
    a, b = tmp_path / "a", tmp_path / "b"
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": f"{a},{b}",
            # Checkpoints touch every dir; a short interval makes the broker notice quickly.
            "log.flush.offset.checkpoint.interval.ms": "100",
        }
    )
    proc = InProcessBroker(config)
    proc.start()
    yield proc, a, b
    proc.stop()


def test_partitions_of_a_removed_dir_go_offline(
    two_dir_broker: tuple[InProcessBroker, Path, Path],
) -> None:
    proc, a, b = two_dir_broker
    broker = proc.broker
    assert broker is not None
    wire = Wire(broker.port)
    try:
        [created] = wire.create_topics([{"name": "jbod", "partitions": 2}])
        assert created.error_code == ErrorCode.none
        wait_until(
            lambda: len(broker.log_manager.logs) == 2, 10.0, "len(broker.log_manager.logs) == 2"
        )
        in_a = [
            tp.partition
            for tp in broker.log_manager.logs
            if broker.log_manager.dir_of(tp).path == a
        ]
        in_b = [
            tp.partition
            for tp in broker.log_manager.logs
            if broker.log_manager.dir_of(tp).path == b
        ]
        assert len(in_a) == 1 and len(in_b) == 1  # one partition per dir

        shutil.rmtree(a)  # the disk is gone
        wait_until(
            lambda: not broker.log_manager.dirs[0].online,
            10.0,
            "not broker.log_manager.dirs[0].online",
        )

        [topic] = wire.metadata(["jbod"], version=12).topics
        parts = {p.partition_index: p for p in topic.partitions}
        lost, alive = parts[in_a[0]], parts[in_b[0]]
        assert lost.error_code == ErrorCode.leader_not_available
        assert lost.leader_id == -1
        assert tuple(lost.offline_replicas) == (0,)
        assert tuple(lost.isr_nodes) == ()
        assert alive.error_code == ErrorCode.none
        assert alive.leader_id == 0 and tuple(alive.offline_replicas) == ()

        results = {r.log_dir: r for r in wire.describe_log_dirs(None).results}
        assert results[str(a)].error_code == ErrorCode.kafka_storage_error
        assert results[str(a)].topics == ()
        assert results[str(b)].error_code == ErrorCode.none
        [t] = results[str(b)].topics
        assert (t.name, [p.partition_index for p in t.partitions]) == ("jbod", in_b)

        # The broker keeps serving admin requests on the surviving dir.
        [more] = wire.create_topics([{"name": "jbod-after", "partitions": 1}])
        assert more.error_code == ErrorCode.none
        wait_until(
            lambda: any(tp.topic == "jbod-after" for tp in broker.log_manager.logs),
            10.0,
            'any(tp.topic == "jbod-after" for tp in broker.log_manager.logs)',
        )
        assert (
            broker.log_manager.dir_of(
                next(tp for tp in broker.log_manager.logs if tp.topic == "jbod-after")
            ).path
            == b
        )

        metrics = broker.metrics.render().decode()
        assert f'logkeel_log_dir_online{{log_dir="{a}"}} 0.0' in metrics
        assert f'logkeel_log_dir_online{{log_dir="{b}"}} 1.0' in metrics
        assert "logkeel_offline_log_dirs 1.0" in metrics
        assert "logkeel_offline_partitions 1.0" in metrics
        assert f'logkeel_log_dir_failures_total{{log_dir="{a}"}} 1.0' in metrics
    finally:
        wire.close()
