"""Fixtures shared by the whole suite."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.brokerproc import BrokerProcess

# No per-example deadline: many property tests fsync or start processes, and on a loaded
# 2-core machine a deadline turns disk latency into flaky failures (timing is for bench/).
settings.register_profile("logkeel", deadline=None)
settings.load_profile("logkeel")


@pytest.fixture
def broker(tmp_path):
    """A running `logkeel serve` on a free port with its own data dir."""
    with BrokerProcess(tmp_path / "broker", overrides={"log.flush.interval.ms": "1000"}) as b:
        yield b
