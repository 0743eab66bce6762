"""A local Apache ZooKeeper server process (Debian's `zookeeper` package), for tests and
`logkeel cluster up`.

ZooKeeper is started the way the package's jars allow without systemd: a generated `zoo.cfg`
and `ZooKeeperServerMain`. Readiness is ZooKeeper's own four-letter words: `ruok` answering `imok`, then
`srvr` showing a serving mode.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from logkeel.ports import free_port, port_is_free

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# The jar's dependencies (jute, netty, slf4j, ...) sit next to it in Debian's layout.
CLASSPATH = f"{ZOOKEEPER_JAR}:/usr/share/java/*"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperServerError(Exception):
    """ZooKeeper could not be started (not installed, exited early, never answered `imok`)."""


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send one of ZooKeeper's four-letter commands (`ruok`, `stat`, `mntr`...) and return
    the whole answer; the server closes the connection after answering."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


# ZooKeeper expires sessions in buckets of one tick, so an expiry (a dead broker noticed) comes
# up to a tick after the session timeout: 500 ms rather than the sample config's 2 s. Its
# largest session timeout would then be 20 ticks (10 s), below Kafka's 18 s default: set apart.
DEFAULT_TICK_MS = 500
MAX_SESSION_TIMEOUT_MS = 60_000


def zoo_cfg(data_dir: Path, port: int, tick_time_ms: int = DEFAULT_TICK_MS) -> str:
    return (
        f"tickTime={tick_time_ms}\n"
        f"maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}\n"
        f"dataDir={data_dir}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        # The embedded Jetty admin server would take port 8080 on every instance.
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=*\n"
    )


class ZooKeeperServer:
    """One standalone ZooKeeper on 127.0.0.1, its data and log under ``base_dir``.

    Use as a context manager, or `start()` then `stop()`; `stop()` is safe to call twice.
    """

    def __init__(
        self, base_dir: Path, port: int | None = None, *, tick_time_ms: int = DEFAULT_TICK_MS
    ) -> None:
        self.base_dir = Path(base_dir)
        self.host = "127.0.0.1"
        self.port = port if port is not None else free_port(host=self.host)
        self.tick_time_ms = tick_time_ms
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        """`host:port`, Kafka's `zookeeper.connect` without a chroot."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "zookeeper.out"

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        if not ZOOKEEPER_JAR.exists():
            raise ZooKeeperServerError(
                f"{ZOOKEEPER_JAR} not found: install Debian's `zookeeper` package"
            )
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperServerError("`java` not found on PATH: ZooKeeper needs a JRE")
        # Otherwise another server on the port would answer `imok` in this one's place.
        # ZooKeeper binds with SO_REUSEADDR: restarted on its port, the connections of its
        # last run (in TIME_WAIT) do not stand in its way.
        if not port_is_free(self.host, self.port, reuse_address=True):
            raise ZooKeeperServerError(f"port {self.port} on {self.host} is already in use")
        data_dir = self.base_dir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.base_dir / "zoo.cfg"
        cfg.write_text(zoo_cfg(data_dir, self.port, self.tick_time_ms))
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                [java, "-Xmx256m", "-cp", CLASSPATH, MAIN_CLASS, str(cfg)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Its own process group, so Ctrl-C at a terminal reaches it only through stop().
                start_new_session=True,
            )
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise ZooKeeperServerError(
                    f"ZooKeeper exited with code {self.process.returncode}: {self._log_tail()}"
                )
            try:
                if self.is_serving():
                    return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise ZooKeeperServerError(
                    f"ZooKeeper on port {self.port} did not answer imok within {timeout}s: "
                    f"{self._log_tail()}"
                )
            time.sleep(0.1)

    def is_serving(self) -> bool:
        """`ruok` answers `imok` as soon as the port is open, before the server has loaded its
        database; `srvr` tells when it is actually serving."""
        if four_letter_word(self.host, self.port, "ruok", timeout=1.0) != "imok":
            return False
        return "Mode: " in four_letter_word(self.host, self.port, "srvr", timeout=1.0)

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout)

    def _log_tail(self, limit: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return "(no log)"

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
