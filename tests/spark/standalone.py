"""A standalone Spark cluster for tests: a master and workers started from the installed pyspark's
own `spark-class` (no download), on 127.0.0.1 with free ports, small memory.

Each daemon runs in a process group of its own; executors and their Python workers are children
of a worker, so killing the groups leaves no JVM behind, whatever the tests did.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from logkeel.ports import free_port
from logkeel.spark.session import require_java
from tests.waiting import wait_until

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0


def spark_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    java = require_java()
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(SPARK_HOME),
            "JAVA_HOME": str(Path(java).resolve().parent.parent),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            # Neither the daemons nor the executors may pick up a config of the machine.
            "SPARK_CONF_DIR": str(SPARK_HOME / "no-conf"),
        }
    )
    env.update(extra or {})
    return env


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM to the daemon's whole group (executors and Python workers included), SIGKILL
        to what is still there after a bound."""
        pid = self.process.pid

        def gone() -> bool:
            self.process.poll()  # reaps the daemon itself; the rest of its group is init's
            return not _group_alive(pid)

        for sig, bound in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)
            try:
                wait_until(gone, bound, f"the {self.name}'s processes to exit", 0.1)
                return
            except AssertionError:
                if sig == signal.SIGKILL:
                    raise


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class SparkCluster:
    base: Path
    workers: int = 2
    worker_memory: str = "768m"
    master_port: int = 0
    ui_port: int = 0
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def work_dirs(self) -> list[Path]:
        return [self.base / f"worker-{i}" / "work" for i in range(self.workers)]

    def _spawn(self, name: str, args: list[str]) -> Daemon:
        log = self.base / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=spark_env(),
                cwd=self.base,
                start_new_session=True,
            )
        daemon = Daemon(name, process, log)
        self.daemons.append(daemon)
        return daemon

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            state: dict = json.load(r)
        return state

    def alive_workers(self) -> int:
        return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.master_port, self.ui_port = free_port(), free_port()
        # The master's REST submission server is off by default; it is not used here.
        master = self._spawn(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(self.master_port), "--webui-port", str(self.ui_port)],
        )  # fmt: skip

        def master_up() -> bool:
            if not master.alive():
                raise RuntimeError(f"the Spark master exited: {master.log.read_text()[-2000:]}")
            return self.state().get("status") == "ALIVE"

        wait_until(master_up, START_TIMEOUT_S, "the Spark master's UI", 0.2, (OSError,))
        for i, work in enumerate(self.work_dirs):
            work.mkdir(parents=True)
            self._spawn(
                f"worker-{i}",
                ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--port", str(free_port()), "--webui-port", str(free_port()),
                 "--cores", "1", "--memory", self.worker_memory, "--work-dir", str(work),
                 self.url],
            )  # fmt: skip

        def workers_registered() -> bool:
            dead = [d for d in self.daemons if not d.alive()]
            if dead:
                raise RuntimeError(f"{dead[0].name} exited: {dead[0].log.read_text()[-2000:]}")
            return self.alive_workers() == self.workers

        wait_until(
            workers_registered, START_TIMEOUT_S, "both Spark workers registered", 0.2, (OSError,)
        )

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()

    def executor_logs(self) -> dict[Path, str]:
        """Every file the workers wrote for executors (stdout, stderr), by path."""
        out = {}
        for work in self.work_dirs:
            for path in sorted(work.rglob("*")):
                if path.is_file() and path.name in ("stdout", "stderr"):
                    out[path] = path.read_text(errors="replace")
        return out


@contextlib.contextmanager
def spark_cluster(base: Path, workers: int = 2) -> Iterator[SparkCluster]:
    cluster = SparkCluster(base, workers)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
