"""`logkeel elect` against a bootstrap broker it cannot reach: a message on stderr and exit
status 1, as the other admin commands fail, never a traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from logkeel.cli.elect import elect_command
from logkeel.ports import free_port


@pytest.mark.parametrize(
    "election", [["--preferred"], ["--topic", "t", "--partition", "0", "--replica", "1"]]
)
def test_an_unreachable_bootstrap_broker_is_a_clear_error(election: list[str]) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    result = CliRunner().invoke(elect_command, [*election, "--bootstrap-server", bootstrap])
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1
    assert result.stderr.startswith("logkeel elect: "), result.stderr
    assert bootstrap in result.stderr and "ConnectionRefusedError" in result.stderr
