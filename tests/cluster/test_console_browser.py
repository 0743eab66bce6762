"""`logkeel console` in a real browser: Debian's headless Chromium, driven by Selenium, against
a real `logkeel console` process over three real brokers on the session's ZooKeeper. The page
shows the three brokers, takes an action from its own page (through the CSRF checks), shows
the leader of a partition dead after a SIGKILL, the new leader it elected and the controller's
record of that election, and its message browser shows records produced beforehand. A screenshot of
each view is kept in the test's tmp_path."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.ports import free_port
from tests.cluster.test_cluster_brokers import FAILOVER_BOUND_S, Cluster, three_brokers
from tests.waiting import wait_until

TOPIC = "browsed"
VIEWS = ("brokers", "partitions", "groups", "elections", "throughput", "browser")


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with three_brokers(zookeeper, tmp_path_factory.mktemp("console"), "/console_browser") as c:
        yield c


@pytest.fixture
def console(cluster: Cluster, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    bootstrap = ",".join(b.bootstrap for b in cluster.brokers.values())
    log = (tmp_path / "console.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "logkeel", "console", "--bootstrap-server", bootstrap,
         "--listen", f"127.0.0.1:{port}", "--interval", "0.5", "--allow-actions"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until(lambda: urllib.request.urlopen(url, timeout=2).status == 200, 30,
                   "the console to serve its page", retry_on=(OSError,))  # fmt: skip
        yield url
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()


def test_a_designated_election_runs_only_confirmed_with_actions_allowed(cluster: Cluster) -> None:
    """Through the HTTP endpoint (the page's form posts the same): `logkeel elect --replica`'s
    election, handed to the controller through ZooKeeper. Runs before the other test kills a
    broker."""
    import warnings

    with warnings.catch_warnings():  # it would rather have httpx2, which is not packaged here
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from logkeel.console.app import ConsoleState, create_app
    from logkeel.server.network.client import ClientSecurity
    from tests.console.test_console_app import act

    cluster.create_topic("designated", 1, 3)
    [part] = wait_until(lambda: [p for p in cluster.partitions("designated").values()
                                 if len(p.isr_nodes) == 3], 20, "three in sync",
                        retry_on=(OSError, AssertionError, ValueError))  # fmt: skip
    chosen = next(r for r in part.replica_nodes if r != part.leader_id)
    state = ConsoleState([b.bootstrap for b in cluster.brokers.values()], ClientSecurity())
    body = {"topic": "designated", "partition": 0, "replica": chosen}
    with TestClient(create_app(state, allow_actions=True)) as client:
        refused = act(client, "designated-election", body)
        assert refused.status_code == 400 and "designated-0" in refused.json()["error"]
        done = act(client, "designated-election", {**body, "confirm": "designated-0"})
        assert done.status_code == 200, done.text
        [result] = done.json()["results"]
        assert (result["partition"], result["error"]) == ("designated-0", None)
    wait_until(lambda: cluster.partitions("designated")[0].leader_id == chosen, 20,
               f"replica {chosen} to lead", retry_on=(OSError, AssertionError))  # fmt: skip


def test_the_page_follows_a_broker_dying_and_browses_messages(
    cluster: Cluster, console: str, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    cluster.create_topic(TOPIC, 1, 3)
    leader = wait_until(lambda: cluster.partitions(TOPIC)[0].leader_id, 20, "a leader",
                        retry_on=(OSError, AssertionError, ValueError))  # fmt: skip
    producer = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
                         "acks": "all"})  # fmt: skip
    for i in range(3):
        producer.produce(TOPIC, key=f"key-{i}", value=f"hello {i}", partition=0)
    assert producer.flush(30) == 0

    def view(name: str) -> None:
        browser.find_element(By.CSS_SELECTOR, f"nav button[data-view='{name}']").click()

    def cells(selector: str) -> list[str]:
        """The text of each element (a row: its cells joined by "|"), read in one script: the
        page redraws every poll, so elements found earlier go stale."""
        return list(browser.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map((e) => e.cells ?"
            " [...e.cells].map((c) => c.textContent).join('|') : e.textContent);",
            selector,
        ))  # fmt: skip

    def shots(stage: str) -> None:
        for name in VIEWS:
            view(name)
            browser.save_screenshot(str(tmp_path / f"{stage}-{name}.png"))
        view("brokers")

    browser.get(console)
    wait_until(lambda: cells("#brokers tbody td:nth-child(3)") == ["alive"] * 3, 30,
               "the page to show three live brokers")  # fmt: skip
    wait_until(lambda: cells(f"#partitions tr[data-partition='{TOPIC}-0'] td.leader")
               == [str(leader)], 20, "the page to show the leader")  # fmt: skip
    shots("before")

    # An action from the page itself passes the CSRF checks (token, Origin, Host) of the real
    # server: the broker answers it (a dir it does not have is refused by name).
    form = browser.find_element(By.ID, "dir-form")
    form.find_element(By.NAME, "broker").send_keys(str(leader))
    form.find_element(By.NAME, "log_dir").send_keys("/nowhere")
    form.find_element(By.NAME, "confirm").send_keys(f"{leader}:/nowhere")
    form.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
    wait_until(lambda: "not a log dir" in "".join(cells("#dir-actions .action-result")), 20,
               "the broker's answer to the page's action")  # fmt: skip

    cluster.brokers[leader].kill()
    wait_until(
        lambda: cells(f"#brokers tr.dead[data-broker='{leader}'] td:nth-child(3)")[0:1] != [],
        FAILOVER_BOUND_S, f"the page to show broker {leader} dead",
    )  # fmt: skip

    def new_leader() -> str | None:
        [shown] = cells(f"#partitions tr[data-partition='{TOPIC}-0'] td.leader") or [""]
        return shown if shown not in ("", "none", str(leader)) else None

    elected = wait_until(new_leader, FAILOVER_BOUND_S + 10, "the page to show a new leader")
    view("elections")
    observed = wait_until(lambda: [r for r in cells("#observed tbody tr") if f"{TOPIC}-0" in r],
                          10, "the election in the elections view")  # fmt: skip
    assert observed[0].split("|")[2:4] == [str(leader), elected]
    # The controller's record of the same election, which outlives the console.
    wait_until(lambda: [r for r in cells("#history tbody tr") if f"|{TOPIC}-0|" in r
                        and r.startswith(tuple("0123456789")) and "|clean election|" in r],
               15, "the controller's record of the election")  # fmt: skip

    view("browser")
    form = browser.find_element(By.ID, "browse-form")
    form.find_element(By.NAME, "topic").send_keys(TOPIC)
    form.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
    rows = wait_until(lambda: cells("#messages tbody tr"), 20, "the browsed records")
    assert [r.split("|")[2:4] for r in rows] == [[f"key-{i}", f"hello {i}"] for i in range(3)]
    shots("after")
    assert all((tmp_path / f"{s}-{v}.png").stat().st_size > 0
               for s in ("before", "after") for v in VIEWS)  # fmt: skip
