"""Fixtures shared by the whole suite."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from logkeel.testing.faulty_fs import FaultyFs, available
from tests.brokerproc import BrokerProcess

# No per-example deadline: many property tests fsync or start processes, and on a loaded
# 2-core machine a deadline turns disk latency into flaky failures (timing is for bench/).
settings.register_profile("logkeel", deadline=None)
settings.load_profile("logkeel")


# Multi-process fault scenarios (brokers, ZooKeeper, a Spark cluster, real SIGKILL/SIGSTOP and
# network cuts) on a shared 2-core machine: one that fails is run once more, and the run's
# summary names it ("RERUN"). A rerun is a finding, not a pass to forget: it goes in the
# issue notes with what failed the first time.
# test_kafka_streaming.py: Spark streaming queries on a real broker; two of its tests failed
# once each under load (a query's result empty or short) and passed in every run after:
# undiagnosed, in issue 28's note. test_consumer_group_migration_clients.py: librdkafka's
# KIP-848 consumers migrating a group between protocols on a real broker; the cooperative case
# failed once in a loaded CI run (ConsumerGroupHeartbeat: GROUP_ID_NOT_FOUND, fatal to the
# client) and passed alone: undiagnosed, in issue 19's note of 2026-11-27.
# test_fetch_session_clients.py: two kafka-python consumers of one group polled in turn from
# one thread; the rebalance that splits the partitions between them did not finish within 60 s
# once in a fresh-clone CI run ("Pre-rebalance offset commit failed" from kafka-python), and
# passed in the 10 runs after, 3 at a time: undiagnosed, in issue 19's note of 2026-11-27.
_SCENARIO_MODULES = {
    "test_cluster_up.py",
    "test_standalone.py",
    "test_kafka_streaming.py",
    "test_consumer_group_migration_clients.py",
    "test_fetch_session_clients.py",
}


# The shared ZooKeeper, and one of a test's own (the failover attacks stop and restart it):
# a test with either runs brokers against a real ZooKeeper.
_ZOOKEEPER_FIXTURES = {"zookeeper", "own_zookeeper"}

_RERUNS: list[tuple[str, str]] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if (
            _ZOOKEEPER_FIXTURES & set(getattr(item, "fixturenames", ()))
            or item.path.name in _SCENARIO_MODULES
        ):
            item.add_marker(pytest.mark.flaky(reruns=1, reruns_delay=2))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.outcome == "rerun":
        errors = [line for line in str(report.longrepr).splitlines() if line.startswith("E ")]
        _RERUNS.append((report.nodeid, " | ".join(errors[:6])[:1500]))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _RERUNS:
        terminalreporter.section("why the reruns failed the first time")
        for nodeid, errors in _RERUNS:
            terminalreporter.write_line(f"{nodeid}: {errors}")


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


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Debian Chromium driven by Selenium (the console's browser tests)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} missing: install Debian's chromium and "
                    "chromium-driver (scripts/test does when it can)")  # fmt: skip
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1100,720"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
