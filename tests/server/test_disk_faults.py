"""A real failing disk under a running broker: one of its two log dirs is a FUSE mount that
starts answering EIO. Only that dir goes offline; the broker keeps serving from the other."""

from __future__ import annotations

import errno
from pathlib import Path

from confluent_kafka.admin import NewTopic

from logkeel.testing.faulty_fs import FaultyFs
from tests.brokerproc import BrokerProcess
from tests.server.admin_clients import (
    admin,
    offline_log_dirs,
    outcome,
    produce,
    read_partition,
    wait_until,
)


def test_eio_from_one_disk_takes_only_its_dir_offline(tmp_path: Path, faulty_fs: FaultyFs) -> None:
    failing = faulty_fs.mountpoint / "logs"
    healthy = tmp_path / "healthy"
    with BrokerProcess(tmp_path / "b", log_dirs=[failing, healthy]) as broker:
        a = admin(broker.bootstrap)
        [f] = a.create_topics([NewTopic("jbod", 2, 1)]).values()
        assert outcome(f) == "OK"
        wait_until(lambda: len(list(failing.glob("jbod-*")) + list(healthy.glob("jbod-*"))) == 2)
        [on_failing] = [int(p.name.rsplit("-", 1)[1]) for p in failing.glob("jbod-*")]
        on_healthy = 1 - on_failing
        for p in (0, 1):
            assert produce(broker.bootstrap, "jbod", p, [b"before"]) == ["OK"]

        faulty_fs.fail(errno.EIO, ops={"write", "fsync"})
        assert produce(broker.bootstrap, "jbod", on_failing, [b"lost"]) != ["OK"]
        wait_until(lambda: offline_log_dirs(broker.bootstrap) == [str(failing)], what="offline")
        assert produce(broker.bootstrap, "jbod", on_healthy, [b"after"]) == ["OK"]
        assert read_partition(broker.bootstrap, "jbod", on_healthy) == (0, [b"before", b"after"])
        [f] = a.create_topics([NewTopic("later", 1, 1)]).values()
        assert outcome(f) == "OK"
        assert produce(broker.bootstrap, "later", 0, [b"x"]) == ["OK"]
        assert (healthy / "later-0").is_dir()
        assert "Input/output error" in broker.output()
        faulty_fs.heal()
