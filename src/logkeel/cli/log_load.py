"""`logkeel log load|check|recover`: the broker's start-up path, run offline on log dirs.

- ``load`` runs exactly what a broker runs at start-up (LogManager.startup), then shuts down
  cleanly, so a crashed dir comes out recovered;
- ``check`` is a read-only fsck (logkeel.storage.tools.check);
- ``recover`` is an unclean start-up forced on every dir, with eager validation: every
  segment is checked and repaired, then the dirs are shut down cleanly.

Exported for the ``log`` group as ``load_command``, ``check_command`` and ``recover_command``.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from logkeel.storage.engine.validation import EAGER, LAZY
from logkeel.storage.log_dir import META_PROPERTIES, MetaProperties, MetaPropertiesError
from logkeel.storage.log_manager import LogManager
from logkeel.storage.recovery.load_report import StartupReport
from logkeel.storage.tools.check import CheckReport, check_dirs, log_bytes

_DIRS = click.argument(
    "dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path)
)


def _node_id(dirs: tuple[Path, ...]) -> int:
    """The node these dirs belong to, so that loading them does not reject them as foreign."""
    for d in dirs:
        try:
            return MetaProperties.parse((d / META_PROPERTIES).read_text()).node_id
        except (OSError, MetaPropertiesError, UnicodeDecodeError):
            continue
    return 0


def _run_startup(dirs: tuple[Path, ...], validation: str, *, force_recovery: bool) -> StartupReport:
    manager = LogManager(
        dirs,
        node_id=_node_id(dirs),
        startup_validation=validation,
        recovery_threads_per_dir=2,
        validation_rate_bytes_per_sec=0,
    )
    try:
        report = manager.startup(start_background=False, force_recovery=force_recovery)
        if validation == EAGER:
            # Segments created or re-opened after the eager pass (none normally) are checked too.
            manager.validate_all()
            for repair in manager.validator.repairs:
                report.problems.append(
                    f"{repair.tp}: truncated at offset {repair.offset} ({repair.bytes} bytes): {repair.reason}"
                )
    finally:
        manager.shutdown()
    return report


def _print_startup(report: StartupReport, as_json: bool, verb: str) -> None:
    if not as_json:
        click.echo(
            f"{verb} {report.partitions} partition(s), {report.segments} segment(s): "
            f"{report.segments_opened} opened, {report.segments_recovered} recovered, "
            f"{report.segments_validated} validated, {report.bytes_scanned} bytes scanned, "
            f"{'clean' if report.clean else 'unclean'} shutdown before, {report.elapsed_ms:.0f} ms"
        )
        for line in report.progress:
            click.echo(f"  {line}")
        for t in report.truncations:
            click.echo(f"truncated {t.topic}-{t.partition} at offset {t.offset}: {t.bytes} bytes")
        for tp, why in report.offline:
            click.echo(f"offline {tp}: {why}")
        for d, why in report.offline_dirs:
            click.echo(f"offline dir {d}: {why}")
        for problem in report.problems:
            click.echo(f"repaired: {problem}")
        return
    click.echo(json.dumps(report.to_json()))


def _exit_code(report: StartupReport) -> int:
    return 1 if report.offline or report.offline_dirs else 0


@click.command("load")
@_DIRS
@click.option(
    "--validation",
    type=click.Choice([LAZY, EAGER]),
    default=LAZY,
    show_default=True,
    help=(
        "log.startup.validation: lazy validates segments on first access (after a clean "
        "shutdown nothing is opened at start-up); eager validates every one."
    ),
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the report as one JSON object (last line)."
)
@click.pass_context
def load_command(
    ctx: click.Context, dirs: tuple[Path, ...], validation: str, as_json: bool
) -> None:
    """Load log dirs exactly as the broker does at start-up, then shut down cleanly.

    A dir that was not shut down cleanly comes out recovered. Exit status 1 when a partition
    or dir could not be loaded (it is listed with its reason), else 0.
    """
    report = _run_startup(dirs, validation, force_recovery=False)
    _print_startup(report, as_json, "loaded")
    ctx.exit(_exit_code(report))


@click.command("recover")
@_DIRS
@click.option(
    "--json", "as_json", is_flag=True, help="Print the report as one JSON object (last line)."
)
@click.pass_context
def recover_command(ctx: click.Context, dirs: tuple[Path, ...], as_json: bool) -> None:
    """Repair log dirs offline: what an unclean start-up does, forced, with every segment
    validated (bad indexes rebuilt, a corrupt tail truncated and reported).

    Exit status 1 when a partition or dir could not be repaired, else 0.
    """
    report = _run_startup(dirs, EAGER, force_recovery=True)
    _print_startup(report, as_json, "recovered")
    ctx.exit(_exit_code(report))


@click.command("check")
@_DIRS
@click.option(
    "--json", "as_json", is_flag=True, help="Print the report as one JSON object (last line)."
)
@click.option(
    "--index-interval-bytes",
    type=int,
    default=None,
    help="index.interval.bytes the logs were written with: also checks that indexes are complete.",
)
@click.pass_context
def check_command(
    ctx: click.Context, dirs: tuple[Path, ...], as_json: bool, index_interval_bytes: int | None
) -> None:
    """Check log dirs read-only (fsck): every batch CRC and its records, index, time index, transaction index,
    producer snapshot and checkpoint. Nothing is modified.

    Exit status 0 when healthy, 1 when a problem was found (each is printed with its file,
    offset or position and what is wrong). Warnings (e.g. no clean-shutdown marker) alone
    leave the status 0.
    """
    report = _check_with_progress(dirs, index_interval_bytes)
    if as_json:
        click.echo(json.dumps(report.to_json()))
    else:
        for p in report.problems:
            where = "".join(
                f" {k} {v}"
                for k, v in (("offset", p.offset), ("position", p.position))
                if v is not None
            )
            click.echo(f"{p.severity}: {p.file}{where}: {p.what}")
        click.echo(
            f"checked {report.partitions} partition(s), {report.segments} segment(s), "
            f"{report.batches} batches, {report.bytes_scanned} bytes in {report.elapsed_ms:.0f} ms: "
            + ("healthy" if report.healthy else f"{len(report.errors)} problem(s)")
        )
    ctx.exit(0 if report.healthy else 1)


def _check_with_progress(dirs: tuple[Path, ...], index_interval_bytes: int | None) -> CheckReport:
    if not sys.stderr.isatty():
        return check_dirs(dirs, index_interval_bytes=index_interval_bytes)
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("checking", total=log_bytes(dirs))
        return check_dirs(
            dirs,
            index_interval_bytes=index_interval_bytes,
            progress=lambda n: bar.advance(task, n),
        )


logging.getLogger(__name__).addHandler(logging.NullHandler())
