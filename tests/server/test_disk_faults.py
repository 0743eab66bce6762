"""A real failing disk under a running broker: one of its two log dirs is a FUSE mount that
starts answering EIO. Only that dir goes offline; the broker keeps serving from the other."""

from __future__ import annotations

import errno
import json
from pathlib import Path

from click.testing import CliRunner
from confluent_kafka.admin import NewTopic

from logkeel.cli.main import cli
from logkeel.testing.faulty_fs import FaultyFs
from tests.brokerproc import BrokerProcess
from tests.server.admin_clients import admin, offline_log_dirs, outcome, produce, read_partition
from tests.waiting import wait_until


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


def test_a_healed_disk_comes_back_without_a_restart(tmp_path: Path, faulty_fs: FaultyFs) -> None:
    """Beyond KIP-18: the broker probes its offline dir (log.dir.recovery.check.interval.ms);
    once it answers IO again with the same directory id, it is recovered and served again,
    with what it held before the failure."""
    failing = faulty_fs.mountpoint / "logs"
    healthy = tmp_path / "healthy"
    overrides = {"log.dir.recovery.check.interval.ms": "300"}
    with BrokerProcess(tmp_path / "b", log_dirs=[failing, healthy], overrides=overrides) as broker:
        a = admin(broker.bootstrap)
        [f] = a.create_topics([NewTopic("back", 2, 1)]).values()
        assert outcome(f) == "OK"
        wait_until(lambda: len(list(failing.glob("back-*")) + list(healthy.glob("back-*"))) == 2)
        [on_failing] = [int(p.name.rsplit("-", 1)[1]) for p in failing.glob("back-*")]
        assert produce(broker.bootstrap, "back", on_failing, [b"kept"]) == ["OK"]

        faulty_fs.fail(errno.EIO, ops={"write", "fsync"})
        assert produce(broker.bootstrap, "back", on_failing, [b"lost"]) != ["OK"]
        wait_until(lambda: offline_log_dirs(broker.bootstrap) == [str(failing)], what="offline")
        faulty_fs.heal()
        wait_until(lambda: offline_log_dirs(broker.bootstrap) == [], what="the dir back online")
        assert produce(broker.bootstrap, "back", on_failing, [b"again"]) == ["OK"]
        start, values = read_partition(broker.bootstrap, "back", on_failing)
        assert values[0] == b"kept" and values[-1] == b"again"
        assert "is online again: 1 partition(s)" in broker.output()


def test_an_operator_brings_a_healed_disk_back_on_demand(
    tmp_path: Path, faulty_fs: FaultyFs
) -> None:
    """`logkeel log-dirs online DIR --broker N`: with the broker's own probe off, the healed dir
    comes back when the operator asks, with what it held; asked while the disk still fails, the
    command says so and the dir stays offline."""
    failing = faulty_fs.mountpoint / "logs"
    healthy = tmp_path / "healthy"
    overrides = {"log.dir.recovery.check.interval.ms": "0"}
    with BrokerProcess(tmp_path / "b", log_dirs=[failing, healthy], overrides=overrides) as broker:
        a = admin(broker.bootstrap)
        [f] = a.create_topics([NewTopic("asked", 2, 1)]).values()
        assert outcome(f) == "OK"
        wait_until(lambda: len(list(failing.glob("asked-*")) + list(healthy.glob("asked-*"))) == 2)
        [on_failing] = [int(p.name.rsplit("-", 1)[1]) for p in failing.glob("asked-*")]
        assert produce(broker.bootstrap, "asked", on_failing, [b"kept"]) == ["OK"]

        faulty_fs.fail(errno.EIO, ops={"write", "fsync"})
        assert produce(broker.bootstrap, "asked", on_failing, [b"lost"]) != ["OK"]
        wait_until(lambda: offline_log_dirs(broker.bootstrap) == [str(failing)], what="offline")
        args = ["log-dirs", "online", str(failing), "--bootstrap-server", broker.bootstrap,
                "--broker", "0"]  # fmt: skip
        still = CliRunner().invoke(cli, args)
        assert still.exit_code == 1
        assert "still offline" in still.output
        assert offline_log_dirs(broker.bootstrap) == [str(failing)]

        faulty_fs.heal()
        done = CliRunner().invoke(cli, args)
        assert done.exit_code == 0, done.output
        assert "is online again: 1 partition(s)" in done.output
        assert offline_log_dirs(broker.bootstrap) == []
        assert produce(broker.bootstrap, "asked", on_failing, [b"again"]) == ["OK"]
        _, values = read_partition(broker.bootstrap, "asked", on_failing)
        assert values[0] == b"kept" and values[-1] == b"again"
        described = CliRunner().invoke(
            cli, ["log-dirs", "describe", "--bootstrap-server", broker.bootstrap, "--json"]
        )
        assert described.exit_code == 0, described.output
        states = {d["log_dir"]: d for d in json.loads(described.output)}
        assert states[str(failing)]["state"] == "online"
        assert f"asked-{on_failing}" in states[str(failing)]["partitions"]

        # The healed dir's replica can be moved off the disk that failed (KIP-113).
        moved = CliRunner().invoke(cli, ["log-dirs", "move", "--bootstrap-server", broker.bootstrap,
                                         "--topic", "asked", "--partition", str(on_failing),
                                         "--to", str(healthy), "--timeout", "60"])  # fmt: skip
        assert moved.exit_code == 0, moved.output
        assert not (failing / f"asked-{on_failing}").exists()
        assert (healthy / f"asked-{on_failing}").is_dir()
        _, values = read_partition(broker.bootstrap, "asked", on_failing)
        assert values[0] == b"kept" and values[-1] == b"again"
