"""Fixtures shared by the whole suite."""

from __future__ import annotations

import pytest

from tests.brokerproc import BrokerProcess


@pytest.fixture
def broker(tmp_path):
    """A running `logkeel serve` on a free port with its own data dir."""
    with BrokerProcess(tmp_path / "broker", overrides={"log.flush.interval.ms": "1000"}) as b:
        yield b
