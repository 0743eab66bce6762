"""A real local Spark (one per test session) for the logkeel.spark tests."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

JAVA_PACKAGE = "openjdk-17-jre-headless"


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


@pytest.fixture(scope="session")
def spark():
    if _java() is None:
        pytest.fail(
            "Spark needs a Java runtime (17+) and none is on PATH or in JAVA_HOME: "
            f"apt-get install {JAVA_PACKAGE} (scripts/test installs it)",
            pytrace=False,
        )
    # Python workers must run this interpreter, which has pyarrow and logkeel.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from logkeel.spark.session import spark_session

    session = spark_session(
        "local[2]",
        "logkeel-tests",
        {
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.log.level": "ERROR",
            "spark.sql.streaming.stopTimeout": "30s",
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One real `logkeel serve` for the Spark tests; every test uses its own topics."""
    from tests.brokerproc import BrokerProcess

    # Few __transaction_state partitions: the transactions tests create it on first use.
    b = BrokerProcess(
        tmp_path_factory.mktemp("spark-broker"),
        overrides={"transaction.state.log.num.partitions": "3"},
    )
    b.start()
    yield b
    try:
        b.stop(timeout=15)
    except RuntimeError:
        b.kill()
