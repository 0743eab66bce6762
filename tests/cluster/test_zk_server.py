from __future__ import annotations

import socket

import pytest

from logkeel.cluster.zk_server import (
    ZooKeeperServer,
    ZooKeeperServerError,
    four_letter_word,
    zoo_cfg,
)


def test_session_server_answers_ruok_and_stat(zookeeper: ZooKeeperServer) -> None:
    assert zookeeper.is_running()
    assert four_letter_word(zookeeper.host, zookeeper.port, "ruok") == "imok"
    assert "Mode: standalone" in four_letter_word(zookeeper.host, zookeeper.port, "stat")


def test_zoo_cfg_has_the_settings_tests_rely_on(tmp_path) -> None:
    cfg = zoo_cfg(tmp_path, 12345)
    assert "tickTime=500\n" in cfg and "maxSessionTimeout=60000\n" in cfg
    assert f"dataDir={tmp_path}\n" in cfg
    assert "clientPort=12345\n" in cfg
    assert "admin.enableServer=false\n" in cfg
    assert "4lw.commands.whitelist=*\n" in cfg


def test_stop_closes_the_port_and_is_idempotent(tmp_path) -> None:
    server = ZooKeeperServer(tmp_path).start(timeout=30)
    port = server.port
    server.stop()
    server.stop()
    assert not server.is_running()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


def test_port_in_use_is_refused(tmp_path, zookeeper: ZooKeeperServer) -> None:
    clash = ZooKeeperServer(tmp_path, port=zookeeper.port)
    with pytest.raises(ZooKeeperServerError, match="already in use"):
        clash.start(timeout=20)
    assert not clash.is_running()
    # The session server is untouched by the failed second start.
    assert four_letter_word(zookeeper.host, zookeeper.port, "ruok") == "imok"
