"""The brokers of a running ``logkeel cluster up``, and the control socket through which
``logkeel cluster stop-broker|start-broker`` reach them.

``up`` owns its broker processes (it started them, it stops them at the end), so a broker is
stopped and started by ``up`` itself, asked over a Unix socket in its ``--dir``
(``control.sock``): one JSON request per connection, one JSON answer. A broker that exits on its
own is reported once by ``Brokers.exited`` and stays down until ``start-broker``.

``replication_defaults`` is what ``up`` gives a cluster of 3 or more brokers so that a topic it
creates by default, the internal ones included, survives one broker down: replication factor 3,
min.insync.replicas 2."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

from logkeel.testing.broker_process import BrokerUnavailable, LogkeelBroker

__all__ = [
    "SOCKET_NAME",
    "Brokers",
    "ControlError",
    "ControlServer",
    "ask",
    "replication_defaults",
]

SOCKET_NAME = "control.sock"
_STOP_TIMEOUT_S = 60.0  # a controlled shutdown moves leaderships away first
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux


class ControlError(Exception):
    """A control request that cannot be done; the message says why."""


def replication_defaults(brokers: int) -> dict[str, str]:
    """Broker configs for a local cluster of ``brokers``: with 3 or more, every topic it
    creates by default (internal ones included) gets 3 replicas and needs 2 in sync."""
    if brokers < 3:
        return {}
    return {
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
    }


class Brokers:
    """The brokers of one ``cluster up`` by id, stopped and started one at a time."""

    def __init__(self, brokers: dict[int, LogkeelBroker]) -> None:
        self._brokers = brokers
        self._lock = threading.Lock()

    def exited(self) -> list[tuple[int, LogkeelBroker, int]]:
        """Brokers that exited on their own since the last call: (id, broker, exit code)."""
        gone = []
        with self._lock:
            for node, broker in self._brokers.items():
                if broker.proc is not None and broker.proc.poll() is not None:
                    gone.append((node, broker, broker.stop()))  # reaps it: reported once
        return gone

    def stop(self, node: int, *, kill: bool) -> str:
        with self._lock:
            broker = self._get(node)
            if not broker.alive():
                raise ControlError(f"broker {node} is not running")
            if kill:
                broker.kill()
                return f"broker {node} ({broker.bootstrap}) killed (SIGKILL)"
            try:
                code = broker.stop(timeout=_STOP_TIMEOUT_S)
            except BrokerUnavailable:
                return f"broker {node} ignored SIGTERM for {_STOP_TIMEOUT_S:.0f}s and was killed"
            return f"broker {node} ({broker.bootstrap}) stopped (SIGTERM, exit code {code})"

    def start(self, node: int) -> str:
        with self._lock:
            broker = self._get(node)
            if broker.alive():
                raise ControlError(f"broker {node} is already running")
            try:
                broker.start()
            except BrokerUnavailable as exc:
                raise ControlError(f"broker {node} did not start: {exc}") from None
            return f"broker {node} ({broker.bootstrap}) started"

    def status(self) -> dict[str, Any]:
        """Each broker's address and pid (None: not running), by id."""
        with self._lock:
            return {
                str(n): {"address": b.bootstrap, "pid": b.pid if b.alive() else None}
                for n, b in sorted(self._brokers.items())
            }

    def stop_all(self) -> list[str]:
        """Stops every running broker, last first; the problems met."""
        problems = []
        with self._lock:
            for broker in reversed(list(self._brokers.values())):
                if broker.alive():
                    try:
                        broker.stop(timeout=_STOP_TIMEOUT_S)
                    except BrokerUnavailable as exc:
                        problems.append(str(exc))
        return problems

    def handle(self, request: Any) -> dict[str, Any]:
        """The answer to one control request: {"op": "stop", "broker": N, "kill": bool},
        {"op": "start", "broker": N} or {"op": "status"}."""
        try:
            if not isinstance(request, dict):
                raise ControlError("a request is a JSON object")
            op = request.get("op")
            if op == "status":
                return {"ok": True, "brokers": self.status()}
            node = request.get("broker")
            if not isinstance(node, int):
                raise ControlError("name the broker by its id")
            if op == "stop":
                return {"ok": True, "message": self.stop(node, kill=bool(request.get("kill")))}
            if op == "start":
                return {"ok": True, "message": self.start(node)}
            raise ControlError(f"unknown request {op!r}")
        except ControlError as exc:
            return {"ok": False, "error": str(exc)}

    def _get(self, node: int) -> LogkeelBroker:
        broker = self._brokers.get(node)
        if broker is None:
            known = ", ".join(map(str, sorted(self._brokers)))
            raise ControlError(f"no broker {node} in this cluster (brokers: {known})")
        return broker


class ControlServer:
    """The control socket of a running ``cluster up``, served on a thread of its own."""

    def __init__(self, base_dir: Path, brokers: Brokers) -> None:
        self.path = base_dir.resolve() / SOCKET_NAME
        if len(str(self.path)) > _MAX_SOCKET_PATH:
            raise ControlError(f"{self.path} is too long for a Unix socket: use a shorter --dir")
        self._brokers = brokers
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._thread = threading.Thread(target=self._serve, name="cluster-control", daemon=True)

    def start(self) -> None:
        if self.path.exists():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(self.path))
            except OSError:
                self.path.unlink()  # left by an `up` that died
            else:
                probe.close()
                raise ControlError(f"another `logkeel cluster up` runs in {self.path.parent}")
        self._sock.bind(str(self.path))
        self._sock.listen()
        self._thread.start()

    def close(self) -> None:
        self._sock.close()
        self.path.unlink(missing_ok=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed: `up` is stopping
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                line = conn.makefile("rb").readline()
                try:
                    answer = self._brokers.handle(json.loads(line))
                except ValueError:
                    answer = {"ok": False, "error": "a request is one line of JSON"}
                conn.sendall(json.dumps(answer).encode() + b"\n")
            except OSError:
                pass  # the asker went away; the broker change, if any, stands


def ask(base_dir: Path, request: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    """The answer of the ``cluster up`` running in ``base_dir``; ControlError when none."""
    path = base_dir.resolve() / SOCKET_NAME
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError as exc:
        sock.close()
        raise ControlError(
            f"no running `logkeel cluster up` in {base_dir} ({path}: {exc.strerror or exc})"
        ) from None
    with sock:
        try:
            sock.sendall(json.dumps(request).encode() + b"\n")
            line = sock.makefile("rb").readline()
        except OSError as exc:
            raise ControlError(f"{path}: {exc}") from None
    if not line:
        raise ControlError(f"`logkeel cluster up` in {base_dir} closed without an answer")
    answer: dict[str, Any] = json.loads(line)
    return answer
