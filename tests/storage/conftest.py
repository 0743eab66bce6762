"""Fixtures shared by the storage tests."""

from __future__ import annotations

import pytest

from .startuputil import write_dir


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A log dir of one partition written by the engine (``append_workload``, 40 rounds);
    tests copy it before damaging it. Modules that need another shape define their own."""
    path = tmp_path_factory.mktemp("written") / "logs"
    write_dir(path, rounds=40)
    return path
