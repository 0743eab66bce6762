"""A broker under a descriptor limit too low for its replicas (issue 19): it raises its soft
limit to the hard one, refuses the replicas past its budget with the reason and keeps serving
the others, and refuses to start with more replica logs on disk than the limit leaves room for
rather than failing with EMFILE mid-run."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from logkeel.storage import descriptors
from logkeel.testing.broker_process import BrokerUnavailable
from tests.brokerproc import BrokerProcess
from tests.server.admin_clients import admin, outcome
from tests.waiting import wait_until

# 1,500 descriptors: a quarter for index maps (375) and RESERVE for the rest leave 101 replicas.
HARD = 1500
ROOM = HARD - HARD // 4 - descriptors.RESERVE


class LimitedBroker(BrokerProcess):
    """`logkeel serve` started under prlimit: soft ``soft``, hard ``hard`` descriptors."""

    def __init__(self, workdir: Path, soft: int, hard: int) -> None:
        super().__init__(workdir)
        self.soft, self.hard = soft, hard

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.soft}:{self.hard}", "--", *super().command()]


def test_replicas_past_the_descriptor_budget_are_refused_and_the_start_too(
    tmp_path: Path,
) -> None:
    assert ROOM == 101
    broker = LimitedBroker(tmp_path / "b", soft=1100, hard=HARD)
    logs = broker.log_dirs[0]
    with broker:
        assert f"soft limit {HARD} (hard {HARD})" in broker.output()
        assert "raised from 1100" in broker.output()
        client = admin(broker.bootstrap)
        result = client.create_topics([NewTopic("many", ROOM + 20, 1)])
        assert outcome(result["many"]) == "OK"
        wait_until(
            lambda: broker.output(10**7).count("need more file descriptors") >= 20,
            60,
            "the replicas past the budget refused",
        )
        assert len(list(logs.glob("many-*"))) == ROOM
        # The replicas within the budget still serve: the broker answers, nothing crashed.
        topic = client.list_topics("many", timeout=10).topics["many"]
        assert len(topic.partitions) == ROOM + 20
        assert "Traceback" not in broker.output(10**7)

    # Fewer descriptors than the logs on disk need: a clear refusal at start-up.
    smaller = LimitedBroker(tmp_path / "b", soft=1400, hard=1400)
    with pytest.raises(BrokerUnavailable):
        smaller.start(60)
    assert f"{ROOM} replica logs need more file descriptors" in smaller.output(10**7)
