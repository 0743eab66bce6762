"""`logkeel audit DIR...`: compare the replicas several brokers hold, with a Spark job."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from logkeel.storage.log_dir import META_PROPERTIES, MetaProperties, MetaPropertiesError
from logkeel.storage.tools.replica_rank import PartitionReport, elect_command

if TYPE_CHECKING:  # pyspark is the optional [spark] extra
    from pyspark.sql import SparkSession


def _format_ranges(ranges: list[dict[str, Any]]) -> str:
    if not ranges:
        return "-"
    parts = []
    for r in ranges:
        last = "end" if r["last_offset"] is None else r["last_offset"]
        parts.append(
            f"{r['first_offset']}..{last} ({r['segment']}@{r['position']}, {r['bytes']} B)"
        )
    return "\n".join(parts)


def _print_table(reports: list[PartitionReport], show_all: bool) -> set[tuple[str, int]]:
    """Prints the table (the partitions whose replicas differ, or all) and the summary; returns
    the partitions listed."""
    from rich.console import Console
    from rich.table import Table

    from logkeel.spark.audit import differs, summarize

    listed = reports if show_all else [r for r in reports if differs(r)]
    console = Console()
    if listed:
        table = Table(title="Replica audit", show_lines=True)
        for name in (
            "partition",
            "replica",
            "log start",
            "log end",
            "leader epoch",
            "corrupt/missing",
            "best",
        ):
            table.add_column(name, overflow="fold")
        for report in listed:
            best = report.best_replica
            for i, r in enumerate(report.replicas):
                table.add_row(
                    f"{report.topic}-{report.partition}" if i == 0 else "",
                    r.path,
                    str(r.log_start_offset),
                    str(r.log_end_offset),
                    str(r.last_leader_epoch),
                    _format_ranges(r.corrupt_ranges),
                    "yes" if r is best else "",
                )
        console.print(table)
    if not reports:
        click.echo("no partition directories found", err=True)
        return set()
    s = summarize(reports)
    summary = Table(title="Audit summary")
    for name in ("partitions", "replicas", "replicas differ", "corrupt/missing ranges"):
        summary.add_column(name, justify="right")
    summary.add_row(
        f"{s.partitions:,}", f"{s.replicas:,}", f"{s.differing:,}", f"{s.corrupt_ranges:,}"
    )
    console.print(summary)
    if not show_all and s.partitions > len(listed):
        click.echo(
            f"{s.partitions - len(listed):,} partition(s) whose replicas agree are not listed "
            "(--all lists them)"
        )
    return {(r.topic, r.partition) for r in listed}


def _audit_with_progress(
    audit: Callable[..., list[PartitionReport]], spark: SparkSession, dirs: list[str]
) -> list[PartitionReport]:
    """Runs the audit with its progress on stderr: a counted line each time tasks completed
    more partitions, and a rich progress bar above them when stderr is a terminal."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    console = Console(stderr=True)

    def line(done: int, total: int) -> str:
        return f"audit: {done:,} of {total:,} partitions checked"

    if not console.is_terminal:
        return audit(spark, dirs, lambda done, total: click.echo(line(done, total), err=True))
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("auditing partitions", total=None)

        def report(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)
            bar.console.print(line(done, total))

        return audit(spark, dirs, report)


def _broker_of(partition_dir: str) -> int | None:
    """The broker whose log dir holds ``partition_dir`` (its meta.properties), if readable."""
    try:
        text = (Path(partition_dir).parent / META_PROPERTIES).read_text()
        return MetaProperties.parse(text).node_id
    except (OSError, MetaPropertiesError):
        return None


def add_elect_commands(reports: list[dict[str, Any]], bootstrap: str) -> None:
    """Names the command that makes each partition's best replica the leader: what an operator
    runs after the incident, once the audit has said which copy to keep."""
    for report in reports:
        best = report.get("best_replica")
        broker = _broker_of(best) if best else None
        report["best_broker"] = broker
        report["elect_command"] = (
            None
            if broker is None
            else elect_command(report["topic"], report["partition"], broker, bootstrap)
        )


@click.command("audit")
@click.argument(
    "dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list instead of a table.")
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="List every partition in the table, not only those whose replicas differ.",
)
@click.option(
    "--bootstrap-server",
    default="127.0.0.1:9092",
    show_default=True,
    help="A broker of the cluster, for the printed `logkeel elect` commands.",
)
@click.option(
    "--master",
    default=None,
    metavar="URL",
    help="Spark master (default: local[*], Spark in this process). On a cluster the dirs must "
    "be readable under the same paths on every executor.",
)
@click.option(
    "--conf",
    "confs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting, as spark-submit's --conf (repeatable), e.g. "
    "spark.executor.memory=512m for workers with less memory than Spark's 1g default.",
)
def audit_command(
    dirs: tuple[Path, ...],
    as_json: bool,
    show_all: bool,
    bootstrap_server: str,
    master: str | None,
    confs: tuple[str, ...],
) -> None:
    """Audit the replicas in the log dirs DIRS of several brokers (or partition dirs).

    For each partition and replica: log start and end offsets, last leader epoch, and corrupt or
    missing offset ranges; and which replica holds the most intact data, the one to recover
    from (the longest run of valid batches without a hole, then the highest leader epoch).
    Files are only read, so live brokers' dirs can be audited.

    Progress goes to stderr as tasks complete ("audit: 1,200 of 5,000 partitions checked", with
    a bar on a terminal). The table lists the partitions whose replicas differ or hold damage
    (--all: every partition), then a summary; --json prints every partition.
    """
    # pyspark is the optional [spark] extra: imported when the command runs, so that the rest of
    # the CLI works without it.
    from pyspark.sql import SparkSession

    from logkeel.spark.audit import audit, audit_json
    from logkeel.spark.session import JavaMissingError, spark_session

    # Called from a program that already runs Spark: use its session and leave it running.
    embedded = SparkSession.getActiveSession() is not None
    settings = {"spark.ui.enabled": "false", "spark.log.level": "ERROR"}
    for conf in confs:
        key, sep, value = conf.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {conf!r}", param_hint="--conf")
        settings[key.strip()] = value
    try:
        spark = spark_session(master, "logkeel audit", settings)
    except JavaMissingError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        reports = _audit_with_progress(audit, spark, [str(d) for d in dirs])
    finally:
        if not embedded:
            spark.stop()
    as_dicts = audit_json(reports)
    add_elect_commands(as_dicts, bootstrap_server)
    if as_json:
        json.dump(as_dicts, sys.stdout)
        sys.stdout.write("\n")
        return
    listed = _print_table(reports, show_all)
    for report in as_dicts:
        if report.get("elect_command") and (report["topic"], report["partition"]) in listed:
            click.echo(f"{report['topic']}-{report['partition']}: {report['elect_command']}")
