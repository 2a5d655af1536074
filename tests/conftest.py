"""What every test shares: the terminal it runs in (see ``lich_env``)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from lich_env import TERMINAL, TERMINAL_OVERRIDES


@pytest.fixture(autouse=True, scope="session")
def _pinned_terminal() -> Iterator[None]:
    """The same terminal size and type on every machine, for the whole session: in
    process (click and rich read the environment) and in every subprocess, which
    inherits it. Without it the output of ``--help`` or a table depends on the width
    of the terminal pytest was started from."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in TERMINAL.items():
            patch.setenv(name, value)
        for name in TERMINAL_OVERRIDES:
            patch.delenv(name, raising=False)
        yield


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most four. Each worker imports and collects
    the whole suite and starts its own brokers, databases, model servers and child
    processes: four keep that bounded on a machine with many cores."""
    return max(1, min(os.cpu_count() or 1, 4))
