"""Fixtures for the command-line tests: an isolated environment, a work dir whose
config points at a scripted model server on 127.0.0.1, and ways to run ``lich``
in process (CliRunner) and as a real subprocess."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from lich_env import SUITE_TRUST, is_personal

from lich.cli import build_cli
from lich.testing import ScriptedModel, ScriptedServer, Step

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "lich" / "schemas" / "events.schema.json"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No LICH_* variables or keys from the developer's shell, no user config, and the
    ``lich`` logger put back as it was (the CLI sets its level and handler)."""
    for var in [name for name in os.environ if is_personal(name)]:
        monkeypatch.delenv(var)
    for name, value in SUITE_TRUST.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))  # the entry-point cache
    logger = logging.getLogger("lich")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The work dir (also the current directory)."""
    path = tmp_path / "work"
    path.mkdir()
    monkeypatch.chdir(path)
    return path


class Server:
    """A started :class:`ScriptedServer` plus what tests need around it."""

    def __init__(self, server: ScriptedServer) -> None:
        self.server = server

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def requests(self) -> list[Any]:
        return self.server.model.requests

    def user_messages(self, index: int = -1) -> list[str]:
        """The user messages of request ``index``."""
        return [m.content for m in self.requests[index].messages if m.role == "user"]


@pytest.fixture
def scripted() -> Iterator[Callable[..., Server]]:
    """Factory: ``scripted(steps=(), responder=None)`` → a server on 127.0.0.1."""
    servers: list[ScriptedServer] = []

    def start(
        steps: Sequence[Step | str] = (), responder: Callable[[Any], Step] | None = None
    ) -> Server:
        server = ScriptedServer(ScriptedModel(steps, responder)).start()
        servers.append(server)
        return Server(server)

    yield start
    for server in servers:
        server.stop()


def config_text(base_url: str, *, plugins: Sequence[str] | None = None, extra: str = "") -> str:
    """A config.toml with one openai_compat provider at ``base_url``."""
    lines = []
    if plugins is not None:
        lines.append("plugins = [" + ", ".join(json.dumps(p) for p in plugins) + "]")
    lines.append(extra)
    lines += [
        "[[providers]]",
        'kind = "openai_compat"',
        'name = "scripted"',
        'model = "scripted-model"',
        f'base_url = "{base_url}"',
    ]
    return "\n".join(lines) + "\n"


def write_config(work: Path, base_url: str, **kwargs: Any) -> Path:
    """Write ``<work>/.lich/config.toml`` (see :func:`config_text`)."""
    path = work / ".lich" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config_text(base_url, **kwargs), encoding="utf-8")
    return path


@pytest.fixture
def lich() -> Callable[..., Result]:
    """Run ``lich ARGS`` in process: ``lich(*args, input=None)`` → click ``Result``."""

    def invoke(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(build_cli(), list(args), input=input, catch_exceptions=False)

    return invoke


def lich_command() -> list[str]:
    """How to start the ``lich`` program in a subprocess."""
    return [sys.executable, "-m", "lich"]


def run_lich(
    *args: str,
    cwd: Path,
    input: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m lich ARGS`` to completion."""
    return subprocess.run(
        [*lich_command(), *args], cwd=cwd, input=input, capture_output=True, text=True,
        env=env if env is not None else dict(os.environ), timeout=timeout,
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    """Parse ``--json`` output: every non-empty line must be a JSON object."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]
