"""The controller alone moving a leaving broker's leaderships (issue 19): a real ZooKeeper, one
controller in this process with no broker around it, three broker registrations (each its own
ZooKeeper session), one topic of N partitions at RF 3 led evenly by the three. Two faults:

- shutdown: broker 3 asks for a controlled shutdown; the controller moves its ~N/3
  leaderships (and takes it out of every ISR);
- gone: broker 3's session ends (what a SIGKILL detected by its closed port does); the same
  moves, on a fresh topic;
- failover: the controller's own broker goes (its registration's session and the controller's
  end together, as the crash detector deletes both at once after a SIGKILL); a second
  controller, a standby with its context loaded as every broker keeps one, takes office and
  moves the dead controller's broker's leaderships, on a fresh topic (``--phases``).

Each is timed from the request (the session's close) until ZooKeeper wrote the first and the
last of the moved leaderships, from the state znodes' own write times, as
`bench/cluster_scale.py` does. That cluster runs three brokers, a producer and the bench's
probes on the same 2 cores; here the controller has the machine to itself: what is left is
what its own work and ZooKeeper's cost, the floor under the cluster's figures.

    .venv/bin/python bench/controller_moves.py --partitions 2000,10000
    .venv/bin/python bench/controller_moves.py --partitions 10000 --phases failover

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cluster_scale import ZkView
from logkeel.cluster.controller import Controller
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_data import BrokerRegistration, EndPoint, TopicAssignment
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.ports import free_port
from logkeel.storage.log_dir import random_uuid

BROKERS = (1, 2, 3)
TIMEOUT_S = 300.0


def register(connect: str, broker: int) -> tuple[ZkMetadataClient, int]:
    """A broker's registration in a session of its own (closed ports: nobody probes it up)."""
    client = ZkMetadataClient(connect, session_timeout_ms=18_000).start()
    port = free_port()
    reg = BrokerRegistration(broker, (EndPoint("PLAINTEXT", "127.0.0.1", port),))
    return client, client.register_broker(reg)


def wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


PHASES = ("shutdown", "gone", "failover")


def start_controller(connect: str, broker: int) -> tuple[Controller, ZkMetadataClient]:
    client = ZkMetadataClient(connect, session_timeout_ms=18_000).start()
    controller = Controller(client, broker)
    controller.start()
    controller.crash_detector.stop()  # nothing listens on the registered ports
    return controller, client


def run(connect: str, root: ZkMetadataClient, n: int, phases: list[str]) -> dict[str, Any]:
    sessions = {b: register(connect, b) for b in BROKERS}
    controller, controller_client = start_controller(connect, 1)
    standby: tuple[Controller, ZkMetadataClient] | None = None
    out: dict[str, Any] = {"partitions": n}
    try:
        for phase in phases:
            # The broker whose leaderships move: the controller's own on a failover.
            leaving = 1 if phase == "failover" else 3
            if phase == "failover":
                standby = start_controller(connect, 2)
            topic = f"moves-{phase}-{n}"
            # Replica lists rotate, so each broker is the first (preferred) of a third.
            assignment = {p: tuple(BROKERS[(p + i) % 3] for i in range(3)) for p in range(n)}
            root.create_topic(TopicAssignment(topic, random_uuid(), assignment), {})
            view = ZkView(root.zk, n, topic)
            wait_for(lambda v=view: _all_led(v), f"{topic}: every partition led")
            before = view.states()
            client, epoch = sessions[leaving]
            if phase == "failover":
                # The standby's context has read the new topic (its watches keep it since).
                wait_for(lambda s=standby[0], t=topic: _standby_knows(s, t, n), "a warm standby")
            started_wall = time.time()
            if phase == "failover":
                crash(controller, controller_client)
                client.close()
            elif phase == "shutdown":
                answered = threading.Event()
                client.request_controlled_shutdown(
                    3, epoch, lambda _e, left, done=answered: left == 0 and done.set()
                )
                wait_for(answered.is_set, "the controller's answer")
            else:
                client.close()
            wait_for(lambda v=view, b=leaving: v.none_led_by(b), f"{topic}: none led by {leaving}")
            written = view.moves_written(before, leaving, started_wall)
            if isinstance(written, str):
                out[f"{phase}_zk_written"] = written
            else:
                first, last, again = written
                out[f"{phase}_moved"] = sum(1 for s in before if s.leader == leaving)
                out[f"{phase}_zk_first_written_s"] = first
                out[f"{phase}_zk_written_s"] = last
                out[f"{phase}_zk_written_again"] = again
            print(f"{n} {phase}: {out}", file=sys.stderr, flush=True)
            if phase != "failover":
                client.close()  # it left; it registers again for the next fault
                sessions[3] = register(connect, 3)
    finally:
        controller.stop()
        controller_client.close()
        if standby is not None:
            standby[0].stop()
            standby[1].close()
        for client, _epoch in sessions.values():
            client.close()
    return out


def crash(controller: Controller, client: ZkMetadataClient) -> None:
    """As a SIGKILL: the controller's thread ends where it is, without resigning, and nothing
    of it runs on (left running, it decided the moves of its own broker's leaderships and
    failed to write them, on the same interpreter as the standby taking over); its session's
    end removes /controller."""
    controller._stopping = True
    controller._events.put("stop")
    client.close()


def _standby_knows(controller: Controller, topic: str, n: int) -> bool:
    """Whether the standby's context holds a state for each of the topic's ``n`` partitions."""
    ctx = controller._standby
    if ctx is None:
        return False
    with ctx.lock:
        return sum(tp in ctx.states for tp in ctx._topic_tps.get(topic, ())) == n


def _all_led(view: ZkView) -> bool:
    try:
        states = view.states()
    except Exception:  # noqa: BLE001 - not every state created yet
        return False
    return all(s.leader != -1 and len(s.isr) == 3 for s in states)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="2000", help="comma-separated partition counts")
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated, in order")
    args = parser.parse_args()
    phases = args.phases.split(",")
    if unknown := set(phases) - set(PHASES):
        parser.error(f"unknown phases {sorted(unknown)}; known: {', '.join(PHASES)}")
    counts = [int(x) for x in args.partitions.split(",")]
    with tempfile.TemporaryDirectory(prefix="controller-moves-") as base:
        zk = ZooKeeperServer(Path(base) / "zookeeper").start()
        try:
            runs = []
            for n in counts:
                top = ZkMetadataClient(zk.connect_string).start()
                top.zk.ensure_path(f"/moves-{n}")
                top.close()
                root = ZkMetadataClient(
                    f"{zk.connect_string}/moves-{n}", session_timeout_ms=18_000
                ).start()
                try:
                    runs.append(run(f"{zk.connect_string}/moves-{n}", root, n, phases))
                finally:
                    root.close()
        finally:
            zk.stop()
    print(json.dumps({"runs": runs}))


if __name__ == "__main__":
    main()
