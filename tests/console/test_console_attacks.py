"""`logkeel console` attacked from outside: a real broker, the console as its own process, real
HTTP. What another site's page can do through a DNS-rebound name (read every view, the
messages and the token; act when the console listens on every interface), framing the page
(clickjacking), and numbers a request may carry that the wire cannot (out of range, floats,
booleans: answered 400, never a 500 or a silently truncated action)."""

from __future__ import annotations

import asyncio
import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP

from logkeel.console.actions import ANY_ADDRESS, TOKEN_HEADER, host_allowed, served_hosts
from logkeel.testing.broker_process import wait_listening
from tests.brokerproc import BrokerProcess, free_port
from tests.waiting import wait_until

TOPIC = "attacked"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    try:
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(3):
            p.produce(TOPIC, key=b"k", value=f"<img src=x onerror=alert({i})>".encode())
        assert p.flush(30) == 0
        yield b
    finally:
        b.stop()


def _console(broker: BrokerProcess, workdir: Path, listen_host: str, *extra: str) -> Iterator[str]:
    port = free_port()
    with open(workdir / f"console-{port}.log", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "logkeel", "console", "--bootstrap-server", broker.bootstrap,
             "--listen", f"{listen_host}:{port}", "--interval", "0.5", *extra],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        assert wait_listening(proc, port, 30), (workdir / f"console-{port}.log").read_text()
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(15)


@pytest.fixture(scope="module")
def read_only(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _console(broker, tmp_path_factory.mktemp("ro"), "127.0.0.1")


@pytest.fixture(scope="module")
def everywhere(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Listening on every interface, actions allowed: where the console cannot list its names."""
    yield from _console(broker, tmp_path_factory.mktemp("any"), "0.0.0.0", "--allow-actions")


def _token(address: str) -> str:
    page = httpx.get(f"http://{address}/", timeout=10).text
    return page.split('name="logkeel-console-token" content="')[1].split('"')[0]


@pytest.mark.parametrize(
    "path", ["/", "/api/overview", "/api/groups", f"/api/messages?topic={TOPIC}&partition=0"]
)
def test_a_dns_rebound_name_reads_nothing(read_only: str, path: str) -> None:
    # The attacker's name now resolves to 127.0.0.1: its page is same-origin with the console
    # and the browser sends Host: that name. Before, every view, the records and the page with
    # its token were answered.
    port = read_only.rpartition(":")[2]
    rebound = httpx.get(
        f"http://{read_only}{path}", headers={"host": f"rebind.attacker.test:{port}"}, timeout=30
    )
    assert rebound.status_code == 403
    assert "is not this console's address" in rebound.json()["error"]
    assert "onerror" not in rebound.text and "content=" not in rebound.text
    own = httpx.get(f"http://{read_only}{path}", timeout=30)
    assert own.status_code == 200


@pytest.mark.parametrize("path", ["/", "/api/overview", "/static/console.js", "/nowhere"])
def test_no_answer_may_be_framed_by_another_site(read_only: str, path: str) -> None:
    headers = httpx.get(f"http://{read_only}{path}", timeout=10).headers
    assert headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"


def test_listening_everywhere_a_rebound_name_takes_no_action(everywhere: str) -> None:
    # Listening on 0.0.0.0 the console took any Host: a rebound page read the token from "/"
    # and sent it back with Origin and Host its own name, and the election ran.
    port = everywhere.rpartition(":")[2]
    name = f"rebind.attacker.test:{port}"
    page = httpx.get(f"http://{everywhere}/", headers={"host": name}, timeout=10)
    assert page.status_code == 403 and "content=" not in page.text
    body = {"topic": TOPIC, "partition": 0, "confirm": f"{TOPIC}-0"}
    url = f"http://{everywhere}/api/actions/preferred-election"
    token = _token(everywhere)
    refused = httpx.post(url, json=body, timeout=40, headers={
        TOKEN_HEADER: token, "host": name, "origin": f"http://{name}"})  # fmt: skip
    assert refused.status_code == 403
    assert "is not this console's address" in refused.json()["error"]
    # The console's own page at an IP address still acts (the broker answers the election).
    own = httpx.post(url, json=body, timeout=40, headers={
        TOKEN_HEADER: token, "origin": f"http://{everywhere}"})  # fmt: skip
    assert own.status_code == 200
    assert own.json()["results"][0]["error"] == "ELECTION_NOT_NEEDED"


@pytest.mark.parametrize(
    "query",
    [
        "offset=99999999999999999999",  # past int64: the Fetch could not be written (500)
        "timestamp_ms=99999999999999999999999",
        "partition=99999999999",  # past int32
        "partition=-1",
        "offset=-5",
        "partition=1.5",
        # Not a topic name: the broker closed the connection, told as a 503 (broker failing).
        f"topic={'a' * 40000}",
        "topic=..%2F..%2Fetc",
        "topic=",
    ],
)
def test_browser_numbers_and_names_the_wire_cannot_carry_are_refused(
    read_only: str, query: str
) -> None:
    query = f"{query}&partition=0" if query.startswith("topic=") else f"topic={TOPIC}&{query}"
    r = httpx.get(f"http://{read_only}/api/messages?{query}", timeout=30)
    assert r.status_code == 400, r.text
    assert "(integers from 0)" in r.json()["error"]


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("preferred-election", {"topic": TOPIC, "partition": 1e300, "confirm": f"{TOPIC}-0"}),
        ("preferred-election", {"topic": TOPIC, "partition": 2**40, "confirm": f"{TOPIC}-{2**40}"}),
        # True was partition 1, 0.5 replica 0: an action other than the one asked for.
        ("preferred-election", {"topic": TOPIC, "partition": True, "confirm": f"{TOPIC}-1"}),
        ("reassignment", {"topic": TOPIC, "partition": 0, "replicas": [0.5], "confirm": f"{TOPIC}-0"}),
        ("reassignment", {"topic": TOPIC, "partition": 0, "replicas": "0,99999999999",
                          "confirm": f"{TOPIC}-0"}),
        # "false" was force=True: an unclean election that may lose records.
        ("designated-election", {"topic": TOPIC, "partition": 0, "replica": 0, "force": "false",
                                 "confirm": f"{TOPIC}-0"}),
        ("log-dir-online", {"broker": -1, "log_dir": "/x", "confirm": "-1:/x"}),
        ("preferred-election", {"topic": "a" * 300, "partition": 0, "confirm": "a" * 300 + "-0"}),
    ],
)  # fmt: skip
def test_numbers_an_action_cannot_mean_are_refused(
    everywhere: str, kind: str, body: dict[str, object]
) -> None:
    r = httpx.post(f"http://{everywhere}/api/actions/{kind}", json=body, timeout=40, headers={
        TOKEN_HEADER: _token(everywhere), "origin": f"http://{everywhere}"})  # fmt: skip
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("give ")


def test_a_burst_of_reads_from_a_stuck_broker_leaves_the_views_answering(
    broker: BrokerProcess, read_only: str
) -> None:
    # The broker stopped (SIGSTOP): every read waits for the admin timeout (10 s) in the
    # threadpool the views shared; 100 reads made the overview wait 19 s. Now the views answer
    # on the event loop, and reads past 8 at once are refused at once.
    assert broker.pid is not None
    base = f"http://{read_only}"

    async def attack() -> tuple[list[httpx.Response], httpx.Response]:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=60)) as c:
            reads = [
                asyncio.create_task(c.get(f"{base}/api/messages?topic={TOPIC}&partition=0"))
                for _ in range(40)
            ]
            await asyncio.sleep(0.5)
            overview = await c.get(f"{base}/api/overview", timeout=5)
            return list(await asyncio.gather(*reads)), overview

    os.kill(broker.pid, signal.SIGSTOP)
    try:
        reads, overview = asyncio.run(attack())
    finally:
        os.kill(broker.pid, signal.SIGCONT)
    assert overview.status_code == 200
    assert {r.status_code for r in reads} == {503}
    busy = [r for r in reads if "reads of messages are under way" in r.json()["error"]]
    assert len(busy) >= 40 - 8
    assert (
        httpx.get(f"{base}/api/messages?topic={TOPIC}&partition=0", timeout=30).status_code == 200
    )


def test_which_hosts_are_the_consoles_when_it_listens_everywhere() -> None:
    everywhere = served_hosts("0.0.0.0", 8080)
    assert ANY_ADDRESS in everywhere
    assert host_allowed("10.1.2.3:8080", everywhere)
    assert host_allowed("[::1]:8080", everywhere)
    assert host_allowed("LOCALHOST:8080", everywhere)
    assert host_allowed(f"{socket.gethostname()}:8080", everywhere)
    assert host_allowed(f"{socket.getfqdn()}:8080", everywhere)
    assert not host_allowed(f"{socket.gethostname()}:8081", everywhere)
    assert not host_allowed("rebind.attacker.test:8080", everywhere)
    assert not host_allowed("[bad:8080", everywhere)
    assert not host_allowed("", everywhere)
    loopback = served_hosts("127.0.0.1", 8080)
    assert host_allowed("localhost:8080", loopback)
    assert not host_allowed("10.1.2.3:8080", loopback)
    assert not host_allowed("rebind.attacker.test:8080", loopback)


class _Listener(http.server.BaseHTTPRequestHandler):
    """What an injected script would call home to."""

    hits: list[str] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_records_groups_and_clients_carrying_html_run_no_script(
    broker: BrokerProcess, read_only: str, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    listener = http.server.HTTPServer(("127.0.0.1", 0), _Listener)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    home = f"http://127.0.0.1:{listener.server_port}/xss"
    payloads = [
        f"<img src=x onerror=\"window.pwned=1;fetch('{home}')\">",
        "</script><script>window.pwned=2</script>",
        f"<svg onload=\"window.pwned=3;fetch('{home}')\">",
        "javascript:window.pwned=4",
    ]
    topic = "html-payloads"
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for text in payloads:
        p.produce(topic, key=text.encode(), value=text.encode(), headers=[(text, text.encode())])
    assert p.flush(30) == 0
    group = '<img src=x onerror="window.pwned=5">'
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "client.id": "<script>window.pwned=6</script>"})  # fmt: skip
    try:
        consumer.commit(offsets=[KafkaTP(topic, 0, 2)], asynchronous=False)
    finally:
        consumer.close()
    driver = browser
    try:
        driver.get(f"http://{read_only}/")
        wait_until(
            lambda: group in driver.find_element(By.ID, "groups").get_attribute("textContent"),
            30, "the group with an HTML id listed",
        )  # fmt: skip
        for view in ("brokers", "partitions", "groups", "elections", "throughput", "browser"):
            driver.find_element(By.CSS_SELECTOR, f"nav button[data-view={view}]").click()
        driver.find_element(By.CSS_SELECTOR, "#browse-form input[name=topic]").send_keys(topic)
        driver.find_element(By.CSS_SELECTOR, "#browse-form button").click()
        rows = wait_until(
            lambda: driver.find_elements(By.CSS_SELECTOR, "#messages tbody tr"), 30, "records"
        )
        assert len(rows) == len(payloads)
        cells = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#messages td.bytes")]
        assert cells[:2] == [payloads[0], payloads[0]]  # shown as text, not parsed
        assert f"{payloads[1]}={payloads[1]}" in cells
        assert driver.execute_script("return window.pwned") is None
        assert (
            driver.execute_script(
                "return document.querySelectorAll('main img, main svg[onload], main script').length"
            )
            == 0
        )
    finally:
        listener.shutdown()
    assert _Listener.hits == []
