"""`logkeel log ...`: offline tools over log dirs and segment files."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from logkeel.cli.log_load import check_command, load_command, recover_command
from logkeel.storage.tools.dump import dump_file
from logkeel.storage.tools.dump_render import render_json, render_text
from logkeel.storage.tools.dump_result import FileDump, unsupported_reason


@click.group("log")
def log_group() -> None:
    """Inspect, check and repair log dirs and segment files offline."""


@log_group.command("dump")
@click.argument(
    "files",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
)
@click.option(
    "--print-data", is_flag=True, help="Also print every record of each batch (.log files)."
)
@click.option(
    "--verify",
    is_flag=True,
    help="Check .index/.timeindex entries against the segment's .log file next to them.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@click.pass_context
def dump_command(
    ctx: click.Context, files: tuple[Path, ...], print_data: bool, verify: bool, as_json: bool
) -> None:
    """Dump segment files (.log, .index, .timeindex, .txnindex, .snapshot) read-only, like
    Kafka's DumpLogSegments. Files are dumped in the order given.

    Exit status: 0 when every file is sound, 1 when a file is corrupt or (--verify) an index
    disagrees with its log, 2 for a missing file or one of an unknown type.
    """
    reasons = [r for r in map(unsupported_reason, files) if r is not None]
    if reasons:
        raise click.BadParameter("\n".join(reasons), param_hint="FILES")

    out = sys.stdout
    troubled: list[tuple[str, int]] = []

    def dumps() -> Iterator[FileDump]:
        for path in files:
            dump = dump_file(path, print_data=print_data, verify=verify)
            try:
                yield dump
            finally:
                dump.close()
            if dump.problems:
                troubled.append((dump.file, dump.problems))

    try:
        if as_json:
            for piece in render_json(dumps(), single=len(files) == 1):
                out.write(piece)
        else:
            for dump in dumps():
                for line in render_text(dump):
                    out.write(line)
                    out.write("\n")
        out.flush()
    except BrokenPipeError:
        # `logkeel log dump big.log | head`: the reader is gone; stop quietly, and keep Python
        # from complaining about the unflushable stdout at exit.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        ctx.exit(1)
    for name, count in troubled:
        click.echo(f"{name}: {count} problem(s) found", err=True)
    if troubled:
        ctx.exit(1)


log_group.add_command(load_command)
log_group.add_command(check_command)
log_group.add_command(recover_command)
