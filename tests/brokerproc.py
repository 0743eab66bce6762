"""A real `logkeel serve` process for tests: start, stop (SIGTERM), kill -9, restart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    def __init__(self, data_dir: Path, *, port: int | None = None, overrides: dict[str, str] | None = None,
                 log_dirs: list[Path] | None = None, extra_args: list[str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.log_dirs = log_dirs or [self.data_dir / "logs"]
        self.extra_args = list(extra_args or [])
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / "broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            sys.executable, "-m", "logkeel", "-v", "serve",
            "--listen", self.bootstrap,
            "--log-dirs", ",".join(str(d) for d in self.log_dirs),
        ]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        args += self.extra_args
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not listen within {timeout}s:\n{self.output()}")

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the broker shuts down cleanly."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"broker ignored SIGTERM for {timeout}s:\n{self.output()}") from None
        self.proc = None
        return rc

    def kill(self) -> None:
        """kill -9: no shutdown at all."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            try:
                self.stop(timeout=15)
            except RuntimeError:
                self.kill()  # stop() already killed it; make sure nothing is left behind
