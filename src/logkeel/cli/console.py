"""``logkeel console``: the web console over a cluster (`logkeel.console`), a process of its
own that asks the brokers through the admin commands' requests, TLS or SASL as
``--command-config`` says. Read-only unless ``--allow-actions``."""

from __future__ import annotations

import click

from logkeel.cli.broker_requests import (
    bootstrap_option,
    command_config_option,
    fail,
    parse_bootstrap,
)

__all__ = ["console_command"]


@click.command("console")
@bootstrap_option
@command_config_option
@click.option(
    "--listen", default="127.0.0.1:8080", show_default=True, metavar="HOST:PORT",
    help="Where the web page is served.",
)  # fmt: skip
@click.option(
    "--allow-actions", is_flag=True,
    help="Offer preferred and designated elections, bringing a log dir back online and "
    "reassigning a partition on the page (each confirmed and logged with the operator's "
    "address); read-only without it.",
)  # fmt: skip
@click.option("--interval", type=click.FloatRange(0.2, 60), default=2.0, show_default=True,
              help="Seconds between two polls of the cluster.")  # fmt: skip
def console_command(
    bootstrap_server: str, listen: str, allow_actions: bool, interval: float
) -> None:
    """A web page showing the cluster, refreshed as it changes."""
    # Imported here: the web stack is loaded by this command only, not by every `logkeel` run.
    import uvicorn

    from logkeel.cli.broker_requests import _current_security
    from logkeel.console.actions import served_hosts
    from logkeel.console.app import ConsoleState, create_app

    try:
        bootstrap = parse_bootstrap(bootstrap_server)
        [address] = parse_bootstrap(listen)
    except ValueError as exc:
        fail("console", str(exc).replace("--bootstrap-server", "the option"))
    host, _, port = address.rpartition(":")
    state = ConsoleState(bootstrap, _current_security(), interval_s=interval)
    click.echo(
        f"logkeel console on http://{host}:{port}/ for {','.join(bootstrap)}"
        + (" (actions allowed)" if allow_actions else " (read-only)"),
        err=True,
    )
    uvicorn.run(
        create_app(state, allow_actions=allow_actions, hosts=served_hosts(host, int(port))),
        host=host,
        port=int(port),
        log_level="warning",
    )
