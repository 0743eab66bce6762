"""The tests' `logkeel serve` process: the package's launcher, logging at DEBUG (``-v``), in a
group of its own when run as root (so that `logkeel.testing.network` can cut it off)."""

from __future__ import annotations

from pathlib import Path

from logkeel.testing.broker_process import LogkeelBroker, free_port, own_group

__all__ = ["BrokerProcess", "free_port"]


class BrokerProcess(LogkeelBroker):
    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        overrides: dict[str, str] | None = None,
        log_dirs: list[Path] | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        super().__init__(
            data_dir,
            port,
            log_dirs=log_dirs,
            overrides=overrides,
            extra_args=extra_args,
            verbose=True,
        )
        self.group = own_group(self.port)
