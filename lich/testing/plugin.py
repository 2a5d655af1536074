"""The pytest plugin of the testing kit: fixtures over :mod:`lich.testing`.

Installing lich registers it (entry point ``lich`` in the ``pytest11`` group),
so the fixtures are available in every test session; with plugin autoloading
off, load it with ``-p lich.testing.plugin``. The fixtures:

* ``lich_scripted_server`` — a factory of started
  :class:`~lich.testing.ScriptedServer` s, stopped after the test;
* ``lich_agent_factory`` — a factory of :class:`lich.Agent` s in ``tmp_path``
  answering from a script;
* ``lich_hook_recorder`` — a fresh :class:`~lich.testing.HookRecorder`;
* ``lich_postgres`` — a throw-away PostgreSQL cluster for the test session
  (:class:`lich.testing.postgres.PostgresCluster`), skipped with the reason
  when the machine has no PostgreSQL; ``lich_postgres_dsn`` — the DSN of a
  new, empty database on it for one test.

This module and :mod:`lich.testing.contracts` (the contract suites) are the
only ones of the kit that import pytest. See ``docs/testing.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lich.testing.helpers import HookRecorder, make_test_config
from lich.testing.scripted import ScriptedChat, ScriptedModel, ScriptRequest, Step
from lich.testing.server import ScriptedServer

if TYPE_CHECKING:
    from lich.agent import Agent
    from lich.testing.postgres import PostgresCluster

__all__ = ["lich_agent_factory", "lich_hook_recorder", "lich_postgres", "lich_postgres_dsn",
           "lich_scripted_server"]


@pytest.fixture
def lich_scripted_server() -> Iterator[Callable[..., ScriptedServer]]:
    """Factory: ``lich_scripted_server(steps, responder=None, dialects=("openai",))``
    returns a started :class:`ScriptedServer`; every server is stopped after the test."""
    servers: list[ScriptedServer] = []

    def start(
        steps: Sequence[Step | str] = (),
        responder: Callable[[ScriptRequest], Step] | None = None,
        dialects: Sequence[str] = ("openai",),
    ) -> ScriptedServer:
        server = ScriptedServer(ScriptedModel(steps, responder), dialects=dialects).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def lich_agent_factory(tmp_path: Path) -> Callable[..., Agent]:
    """Factory: ``lich_agent_factory(script, plugins=(), objects=(), **config)`` returns
    an :class:`lich.Agent` in ``tmp_path`` answering from ``script`` (a list of
    steps, a :class:`ScriptedChat`, or any chat function), with the named
    plugin entries loaded and the ``(name, object)`` plugins registered."""
    from lich.agent import Agent

    def build(
        script: Any = (),
        *,
        plugins: Sequence[str] = (),
        objects: Sequence[tuple[str, object]] = (),
        **config: Any,
    ) -> Agent:
        chat = script if callable(script) else ScriptedChat(script)
        cfg = make_test_config(tmp_path, plugins=tuple(plugins), **config)
        return Agent(cfg, plugins=objects, chat=chat)

    return build


@pytest.fixture
def lich_hook_recorder() -> HookRecorder:
    """A fresh :class:`HookRecorder`."""
    return HookRecorder()


def postgres_cluster_or_skip() -> Iterator[PostgresCluster]:
    """A throw-away PostgreSQL cluster, stopped (by pid) when the generator is closed; the
    test is skipped, saying why, without PostgreSQL binaries. The body of the
    ``lich_postgres`` fixture, for a fixture that needs a cluster of its own (one it
    restarts, say): ``yield from postgres_cluster_or_skip()``."""
    from lich.testing.postgres import PostgresCluster, PostgresUnavailable, find_binaries

    try:
        binaries = find_binaries()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    cluster = PostgresCluster.start(binaries=binaries)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def lich_postgres() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster started for the test session and stopped (by pid) after it."""
    yield from postgres_cluster_or_skip()


_databases = iter(range(1, 1_000_000))


@pytest.fixture
def lich_postgres_dsn(lich_postgres: PostgresCluster) -> str:
    """The DSN of a new, empty database (the superuser's password in it) for one test."""
    return lich_postgres.create_database(f"test_{next(_databases)}")
