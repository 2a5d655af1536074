"""Fixtures for the MCP client tests: the SDK-built fixture server over stdio and
streamable HTTP, and agents whose servers are always stopped after the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP SDK (lich-agent[mcp]) is not installed")

from lich.agent import Agent
from lich.testing import ScriptedChat, make_test_config

FIXTURE = Path(__file__).with_name("fixture_server.py")
# Generous: the fixture imports the whole SDK, slow on a loaded machine. The tests that
# need a start to fail set their own short timeout on the failing server only.
START_S = 60.0


def stdio_server(**overrides: Any) -> dict[str, Any]:
    """A ``[mcp.servers.<name>]`` table running the fixture over stdio."""
    table: dict[str, Any] = {"command": sys.executable, "args": [str(FIXTURE)],
                             "startup_timeout_s": START_S}
    table.update(overrides)
    return table


@pytest.fixture
def mcp_agent(tmp_path: Path) -> Iterator[Callable[..., Agent]]:
    """Factory: ``mcp_agent(servers, script=(), objects=(), **config)`` → an agent with
    the ``mcp`` plugin and these servers; closed (servers stopped) after the test."""
    agents: list[Agent] = []

    def build(servers: dict[str, Any], script: Any = (), *, objects: Any = (),
              mcp: dict[str, Any] | None = None, **config: Any) -> Agent:
        table = {**(mcp or {}), "servers": servers}
        cfg = make_test_config(tmp_path, plugins=("mcp",), mcp=table, **config)
        chat = script if callable(script) else ScriptedChat(script)
        agent = Agent(cfg, plugins=objects, chat=chat)
        agents.append(agent)
        return agent

    yield build
    import asyncio

    for agent in agents:
        asyncio.run(agent.aclose())


class HttpFixture:
    """The fixture server over streamable HTTP on 127.0.0.1, stopped by pid."""

    def __init__(self, log: Path) -> None:
        self._log = log.open("w", encoding="utf-8")
        self.process = subprocess.Popen(
            [sys.executable, str(FIXTURE), "http"], stdout=subprocess.PIPE,
            stderr=self._log, text=True, start_new_session=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"the HTTP fixture did not start: {line!r} (see {log})")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


@pytest.fixture
def http_fixture(tmp_path: Path) -> Iterator[HttpFixture]:
    """The fixture server over streamable HTTP."""
    server = HttpFixture(tmp_path / "http-fixture.log")
    yield server
    server.stop()
