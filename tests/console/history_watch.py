"""The console's history as a test over a real cluster sees it: a `logkeel console` app (its
pollers running) over the cluster's brokers, asked through its /api/elections endpoint."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

from logkeel.console.app import ConsoleState, create_app
from logkeel.server.network.client import ClientSecurity
from tests.waiting import wait_until

with warnings.catch_warnings():  # it would rather have httpx2, which is not packaged here
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


def wait_for_history(
    bootstraps: Iterable[str],
    wanted: Callable[[list[dict[str, Any]]], bool],
    timeout: float,
    what: str,
) -> list[dict[str, Any]]:
    """The console's history rows once ``wanted`` holds of them."""
    state = ConsoleState(list(bootstraps), ClientSecurity(), interval_s=0.3)
    with TestClient(create_app(state)) as client:

        def rows() -> list[dict[str, Any]] | None:
            answer = client.get("/api/elections")
            assert answer.status_code == 200, answer.text
            found: list[dict[str, Any]] = answer.json()["history"]
            return found if wanted(found) else None

        result: list[dict[str, Any]] = wait_until(rows, timeout, what)
        return result
