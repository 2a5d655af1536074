"""The key rule, end to end: a key variable the config did not name is only ever sent to
its kind's well-known host.

Every way a provider is put together from the command line, the environment, a file
written by ``lich config init`` or by hand is pointed at a loopback server that
records the headers it receives; the default key variables are set to recognisable
values, and no request may carry them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lich.testing import ScriptedModel, ScriptedServer

from .conftest import Server

OPENAI_KEY = "sk-openai-must-not-leave"
ANTHROPIC_KEY = "sk-ant-must-not-leave"


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)


def _credentials(server: Server) -> list[str]:
    """Every credential-carrying header value the server saw."""
    seen = server.server.headers_seen
    assert seen, "the model server was never called"
    return [
        value for headers in seen for name, value in headers.items()
        if name.lower() in ("authorization", "x-api-key")
    ]


def _leaked(server: Server) -> list[str]:
    return [v for v in _credentials(server) if OPENAI_KEY in v or ANTHROPIC_KEY in v]


def _run(lich: Callable[..., Any], *args: str) -> None:
    result = lich(*args)
    assert result.exit_code == 0, result.stderr + result.stdout


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize(
    "how",
    ["flags", "env", "model flag, url env", "model env, url flag", "kind flag, anthropic"],
)
def test_no_default_key_for_a_host_given_on_the_command_line_or_in_the_environment(
    how: str, work: Path, lich: Any, scripted: Callable[..., Server],
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
) -> None:
    server = scripted(["done"])
    url = server.base_url
    args: list[str] = []
    if how == "flags":
        args = ["--model", "m", "--base-url", url]
    elif how == "env":
        monkeypatch.setenv("LICH_MODEL", "m")
        monkeypatch.setenv("LICH_BASE_URL", url)
    elif how == "model flag, url env":
        monkeypatch.setenv("LICH_BASE_URL", url)
        args = ["--model", "m"]
    elif how == "model env, url flag":
        monkeypatch.setenv("LICH_MODEL", "m")
        args = ["--base-url", url]
    else:
        server.server.stop()
        server = Server(ScriptedServer(ScriptedModel(["done"]), dialects=("anthropic",)).start())
        request.addfinalizer(server.server.stop)
        args = ["--model", "m", "--provider-kind", "anthropic",
                "--base-url", server.server.root_url]

    _run(lich, *args, "run", "hello")

    assert _leaked(server) == []
    assert _credentials(server) == []  # nothing was named, so nothing is sent


@pytest.mark.usefixtures("keys")
def test_no_default_key_for_the_host_written_by_config_init(
    work: Path, lich: Any, scripted: Callable[..., Server]
) -> None:
    server = scripted(["done"])
    _run(lich, "config", "init", "--model", "m", "--base-url", server.base_url)
    text = (work / ".lich" / "config.toml").read_text(encoding="utf-8")
    assert "\napi_key_env" not in text  # only a comment saying where the default goes

    _run(lich, "run", "hello")

    assert _leaked(server) == []


@pytest.mark.usefixtures("keys")
def test_no_default_key_for_the_host_of_a_hand_written_file_under_a_model_flag(
    work: Path, lich: Any, scripted: Callable[..., Server]
) -> None:
    server = scripted(["done"])
    (work / ".lich").mkdir()
    (work / ".lich" / "config.toml").write_text(
        f'[[providers]]\nname = "p"\nmodel = "x"\nbase_url = "{server.base_url}"\n',
        encoding="utf-8",
    )

    _run(lich, "--model", "m", "run", "hello")

    assert _leaked(server) == []


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize("where", ["flag", "env", "file"])
def test_a_key_variable_named_explicitly_is_sent_to_any_host(
    where: str, work: Path, lich: Any, scripted: Callable[..., Server],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = scripted(["done"])
    args = ["--model", "m", "--base-url", server.base_url]
    if where == "flag":
        args += ["--api-key-env", "OPENAI_API_KEY"]
    elif where == "env":
        monkeypatch.setenv("LICH_API_KEY_ENV", "OPENAI_API_KEY")
    else:
        (work / ".lich").mkdir()
        (work / ".lich" / "config.toml").write_text(
            f'[[providers]]\nname = "p"\nmodel = "x"\nbase_url = "{server.base_url}"\n'
            'api_key_env = "OPENAI_API_KEY"\n',
            encoding="utf-8",
        )
        args = []

    _run(lich, *args, "run", "hello")

    assert _credentials(server) == [f"Bearer {OPENAI_KEY}"]
