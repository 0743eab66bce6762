"""Client quotas in a 3-broker cluster on a real ZooKeeper: a quota set through one broker is
described and enforced by the others."""

from __future__ import annotations

import json
from pathlib import Path

from logkeel.cli.broker_requests import Admin
from logkeel.cluster.zk_server import ZooKeeperServer
from tests.cluster.test_cluster_brokers import PROBE_ERRORS, three_brokers
from tests.server.test_client_quotas import _quotas, first_throttle
from tests.waiting import wait_until


def test_a_quota_set_through_one_broker_is_applied_by_another(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    with three_brokers(zookeeper, tmp_path, "/cluster_quotas") as cluster:
        one, three = cluster.brokers[1], cluster.brokers[3]
        done = _quotas("--bootstrap-server", one.bootstrap, "--alter", "--client", "busy",
                       "--add-config", "request_percentage=0.5")  # fmt: skip
        assert done.exit_code == 0, done.output

        def described() -> bool:
            shown = _quotas("--bootstrap-server", three.bootstrap, "--describe", "--json")
            return bool(json.loads(shown.output) == [
                {"entity": {"client-id": "busy"}, "quotas": {"request_percentage": 0.5}}
            ])  # fmt: skip

        wait_until(
            described,
            15.0,
            "broker 3 to describe the quota set through broker 1",
            retry_on=PROBE_ERRORS,
        )
        busy, idle = (
            Admin(three.bootstrap, client_id="busy"),
            Admin(three.bootstrap, client_id="idle"),
        )
        with busy, idle:
            first_throttle(busy, idle)
