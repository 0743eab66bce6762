"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

from logkeel.testing.faulty_fs import FaultyFs, available
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


@pytest.fixture
def faulty_fs(tmp_path) -> Iterator[FaultyFs]:
    """A FUSE passthrough mount at ``tmp_path / "mnt"`` that fails or slows down on demand;
    unmounted in teardown whatever the test did."""
    problem = available()
    if problem is not None:
        # The disk-fault tests are real faults or nothing: a machine without FUSE fails them
        # (scripts/test installs fuse3 and mfusepy) rather than skipping them quietly.
        pytest.fail(f"FUSE is not available: {problem}")
    fs = FaultyFs(tmp_path / "backing", tmp_path / "mnt")
    fs.mount()
    try:
        yield fs
    finally:
        fs.unmount()
