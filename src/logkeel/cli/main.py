"""The `logkeel` command: one click group, each sub-command family in its own module."""

from __future__ import annotations

import logging

import click

from logkeel import __version__
from logkeel.cli.acls import acls_group
from logkeel.cli.audit import audit_command
from logkeel.cli.cluster import cluster_group
from logkeel.cli.configs import configs_command
from logkeel.cli.console import console_command
from logkeel.cli.elect import elect_command
from logkeel.cli.groups import groups_command
from logkeel.cli.log_commands import log_group
from logkeel.cli.log_dirs import log_dirs_group
from logkeel.cli.quotas import quotas_command
from logkeel.cli.reassign import reassign_command
from logkeel.cli.serve import serve
from logkeel.cli.topics import topics_command
from logkeel.cli.users import users_group
from logkeel.log_lines import SafeFormatter


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="logkeel")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """logkeel: a Kafka-compatible log broker."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler()
    # Client-supplied names reach log messages: each stays one line of valid UTF-8.
    handler.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])


cli.add_command(log_group)
cli.add_command(serve)
cli.add_command(audit_command)
cli.add_command(cluster_group)
cli.add_command(users_group)
cli.add_command(acls_group)
cli.add_command(elect_command)
cli.add_command(log_dirs_group)
cli.add_command(topics_command)
cli.add_command(groups_command)
cli.add_command(configs_command)
cli.add_command(quotas_command)
cli.add_command(reassign_command)
cli.add_command(console_command)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
