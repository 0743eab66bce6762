"""Brokers as child processes, for the tests and the benchmarks: `logkeel serve` (and, through
the same base, any other Kafka-compatible broker a benchmark compares with).

A child is started on a loopback port, waited for until it accepts connections, stopped with
SIGTERM (a clean shutdown; SIGKILL if it ignores it), killed with SIGKILL (no shutdown at all,
as a crash test wants) and restarted on the same port and dirs. Its output goes to a log file
in its work dir, where ``output()`` reads it back for error messages.

A child may run with a group id of its own (``group``; `own_group` derives one from its port,
for root): iptables' ``owner`` match can then tell its traffic from its peers' on the one
loopback address they share (`logkeel.testing.network`). Root keeps its file access whatever
the group. The tests' brokers do; `logkeel cluster up` does not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Self

from logkeel.ports import free_port

__all__ = [
    "BrokerUnavailable",
    "ChildBroker",
    "LogkeelBroker",
    "free_port",
    "own_group",
    "serve_command",
    "wait_listening",
]


class BrokerUnavailable(RuntimeError):
    """A broker could not be started, or would not stop; the message says why."""


def serve_command(*args: str, verbose: bool = False) -> list[str]:
    """The argv of `logkeel serve ARGS` from this interpreter's environment."""
    return [sys.executable, "-m", "logkeel", *(["-v"] if verbose else []), "serve", *args]


def wait_listening(
    proc: subprocess.Popen[bytes] | subprocess.Popen[str], port: int, timeout: float = 30.0
) -> bool:
    """Waits until something accepts connections on 127.0.0.1:``port``: True, or False when
    ``proc`` exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


# Group ids of child brokers: this plus the port (far above the system's and users' groups).
GROUP_BASE = 100_000


def own_group(port: int) -> int | None:
    """A group id for the broker on ``port`` alone, or None when we cannot switch groups
    (not root)."""
    return GROUP_BASE + port if os.geteuid() == 0 else None


class ChildBroker(ABC):
    """One broker process listening on 127.0.0.1:``port``, its output in ``log_path``;
    ``group``: the group id it runs with (None: ours)."""

    name = "broker"

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / f"{self.name}.log"
        self.group: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @abstractmethod
    def command(self) -> list[str]:
        """The argv that starts this broker on ``self.port``."""

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def start(self, timeout: float = 30.0) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:  # the child keeps its own descriptor
            try:
                self.proc = subprocess.Popen(
                    self.command(),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env(),
                    cwd=self.workdir,
                    group=self.group,
                )
            except OSError as e:
                raise BrokerUnavailable(f"{self.name} could not be started: {e}") from e
        if wait_listening(self.proc, self.port, timeout):
            return self
        code = self.proc.poll()
        if code is not None:
            self.proc = None
            raise BrokerUnavailable(f"{self.name} exited with {code} at start-up:\n{self.output()}")
        self.kill()
        raise BrokerUnavailable(
            f"{self.name} did not listen within {timeout:.0f}s:\n{self.output()}"
        )

    def output(self, limit: int = 20_000) -> str:
        """The end of what the broker wrote (all its runs in this work dir)."""
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except FileNotFoundError:
            return ""

    def output_tail(self, lines: int = 5) -> str:
        return " | ".join(self.output().strip().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for a clean shutdown; returns the exit code. A broker that ignores
        SIGTERM for ``timeout`` seconds is killed and ``BrokerUnavailable`` raised."""
        proc, self.proc = self.proc, None
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # What it is stuck on goes into its output before it dies (logkeel dumps its
            # threads and tasks on SIGUSR1; another broker may just die of it).
            proc.send_signal(signal.SIGUSR1)
            time.sleep(1)
            proc.kill()
            proc.wait()
            raise BrokerUnavailable(
                f"{self.name} ignored SIGTERM for {timeout}s:\n{self.output(60_000)}"
            ) from None

    def freeze(self) -> None:
        """SIGSTOP: a broker that hangs (a stalled VM, a GC pause) with its sockets open."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT: the frozen broker runs on, unaware of the time it lost."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: no shutdown at all."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait()

    def restart(self) -> Self:
        self.stop()
        return self.start()

    def __enter__(self) -> Self:
        # `with broker.start():` must not launch a second process and orphan the first.
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(BrokerUnavailable):  # stop() killed it: nothing is left
            self.stop(timeout=15)


class LogkeelBroker(ChildBroker):
    """`logkeel serve` on ``port`` with ``log_dirs`` (default: one, ``workdir/logs``).

    ``overrides`` become ``--override key=value``; ``extra_args`` are further serve options;
    ``verbose`` adds ``-v`` (DEBUG logging).
    """

    name = "logkeel"

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        *,
        log_dirs: list[Path] | None = None,
        overrides: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(workdir, port)
        self.log_dirs = list(log_dirs or [self.workdir / "logs"])
        self.overrides = dict(overrides or {})
        self.extra_args = list(extra_args or [])
        self.verbose = verbose

    def command(self) -> list[str]:
        # Given listeners (several, TLS, SASL) replace the one --listen would set; the first
        # must be a PLAINTEXT one on ``port``, which start() waits for.
        listen = [] if "listeners" in self.overrides else ["--listen", self.bootstrap]
        args = [*listen, "--log-dirs", ",".join(str(d) for d in self.log_dirs)]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        return serve_command(*args, *self.extra_args, verbose=self.verbose)

    def env(self) -> dict[str, str]:
        return dict(os.environ, PYTHONUNBUFFERED="1")
