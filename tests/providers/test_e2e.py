"""End to end: a real :class:`lich.Agent` over HTTP on 127.0.0.1, one scripted
server per dialect, the provider plugins loaded from config."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lich.agent import Agent
from lich.config import ConfigError, ProviderConfig
from lich.hooks import hookimpl
from lich.testing import Fail, Reply, ScriptedServer, make_test_config, tool_loop_responder
from lich.tools import ToolRegistry, tool
from lich.types import ProviderError

from .conftest import DIALECT_OF, KINDS


class EchoPlugin:
    """A tool plugin for the runs: ``echo(text)``."""

    @hookimpl
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        @tool
        def echo(text: str) -> str:
            """Say the text back."""
            return f"echo: {text}"

        registry.register(echo)


def base_url(kind: str, server: ScriptedServer) -> str:
    return server.base_url if kind == "openai_compat" else server.root_url


def records(path: str | None) -> list[dict[str, Any]]:
    assert path is not None
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_agent_run_through_each_dialect(
    kind: str, stream: bool, tmp_path: Path, lich_scripted_server: Callable[..., ScriptedServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = lich_scripted_server(
        responder=tool_loop_responder(1, tool="echo", args={"text": "hi"}, final="all done now"),
        dialects=(DIALECT_OF[kind],),
    )
    monkeypatch.setenv("LICH_E2E_KEY", "sk-loopback")
    config = make_test_config(
        tmp_path,
        plugins=(kind, "failover"),
        stream=stream,
        providers=(ProviderConfig(kind=kind, name="main", model="m-e2e",
                                  base_url=base_url(kind, server), api_key_env="LICH_E2E_KEY"),),
    )
    agent = Agent(config, plugins=[("echo", EchoPlugin())])
    events: list[Any] = []
    try:
        result = await agent.run("say hi", on_event=events.append)
    finally:
        await agent.aclose()

    assert (result.stopped_reason, result.text) == ("final", "all done now")
    assert result.usage.total_tokens > 0
    requests = server.model.requests
    assert [(r.dialect, r.stream, r.model) for r in requests] == [
        (DIALECT_OF[kind], stream, "m-e2e")
    ] * 2
    assert "echo" in requests[0].tools
    assert [(m.name, m.content) for m in requests[1].tool_results_since_user()] == [
        ("echo", "echo: hi")
    ]
    deltas = [e.event.text for e in events if e.type == "text_delta"]
    assert "".join(deltas) == ("all done now" if stream else "")
    headers = {k.lower(): v for k, v in server.headers_seen[0].items()}
    if kind == "anthropic":
        assert headers["x-api-key"] == "sk-loopback"
    else:
        assert headers["authorization"] == "Bearer sk-loopback"
    # The transcript holds the whole exchange.
    kinds = [r["message"]["role"] for r in records(result.session_path) if r["kind"] == "message"]
    assert kinds == ["system", "user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
async def test_rate_limited_anthropic_fails_over_to_openai_compat(
    stream: bool, tmp_path: Path, lich_scripted_server: Callable[..., ScriptedServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's "done when": providers = [anthropic (429 always), openai_compat (ok)]."""
    claude = lich_scripted_server(
        responder=lambda _: Fail(429, {"error": {"message": "rate limited, slow down"}},
                                 headers={"retry-after": "0"}),
        dialects=("anthropic",),
    )
    local = lich_scripted_server(["The answer, from the second provider."], dialects=("openai",))
    monkeypatch.setenv("LICH_E2E_ANTHROPIC_KEY", "sk-ant-loopback")
    config = make_test_config(
        tmp_path,
        plugins=("anthropic", "openai_compat", "failover"),
        stream=stream,
        providers=(
            ProviderConfig(kind="anthropic", name="claude", model="claude-test",
                           base_url=claude.root_url, api_key_env="LICH_E2E_ANTHROPIC_KEY"),
            ProviderConfig(kind="openai_compat", name="local", model="local-test",
                           base_url=local.base_url),
        ),
        plugin_settings={"failover": {"base_delay_s": 0.001}},
    )
    agent = Agent(config)
    try:
        result = await agent.run("hello")
    finally:
        await agent.aclose()

    assert result.stopped_reason == "final"
    assert result.text == "The answer, from the second provider."
    assert result.outcome.result is not None
    assert result.outcome.result.provider_name == "local"
    assert len(claude.model.requests) == 3  # retried in place, then failed over
    assert len(local.model.requests) == 1

    lines = records(result.session_path)
    events = [r["event"] for r in lines if r["kind"] == "event"]
    failovers = [e for e in events if e["type"] == "failover"]
    assert len(failovers) == 1
    failover = failovers[0]
    assert (failover["from_provider"], failover["to_provider"], failover["kind"]) == (
        "claude", "local", "rate_limit")
    assert "HTTP 429" in failover["message"]
    assert "rate limited, slow down" in failover["message"]
    retries = [e for e in events if e["type"] == "retry"]
    assert [(e["provider"], e["attempt"], e["kind"]) for e in retries] == [
        ("claude", 2, "rate_limit"), ("claude", 3, "rate_limit")
    ]
    last = [r for r in lines if r["kind"] == "message"][-1]["message"]
    assert (last["role"], last["content"]) == ("assistant", "The answer, from the second provider.")


async def test_all_providers_failing_ends_the_run_with_every_attempt(
    tmp_path: Path, lich_scripted_server: Callable[..., ScriptedServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    claude = lich_scripted_server(responder=lambda _: Fail(401), dialects=("anthropic",))
    llama = lich_scripted_server(responder=lambda _: Fail(404, {"error": "model 'x' not found"}),
                                 dialects=("ollama",))
    monkeypatch.setenv("LICH_E2E_ANTHROPIC_KEY", "bad-key")
    config = make_test_config(
        tmp_path,
        plugins=("anthropic", "ollama", "failover"),
        providers=(
            ProviderConfig(kind="anthropic", name="claude", model="c", base_url=claude.root_url,
                           api_key_env="LICH_E2E_ANTHROPIC_KEY"),
            ProviderConfig(kind="ollama", name="llama", model="x", base_url=llama.root_url),
        ),
    )
    agent = Agent(config)
    with pytest.raises(ProviderError) as info:
        await agent.run("hello")
    await agent.aclose()
    assert [(a[0], a[1], a[2]) for a in info.value.attempts] == [
        ("claude", 1, "auth"), ("llama", 1, "bad_request")
    ]
    assert "model 'x' not found" in info.value.message
    assert "authentication_error" in info.value.message  # the Anthropic error shape on the wire
    sessions = list((tmp_path / ".lich" / "sessions").glob("*.jsonl"))
    (path,) = sessions
    lines = records(str(path))
    errors = [r["event"] for r in lines if r["kind"] == "event" and r["event"]["type"] == "error"]
    assert len(errors) == 1
    assert "all 2 providers failed" in errors[0]["message"]
    assert [r for r in lines if r["kind"] == "meta"][-1]["stopped_reason"] == "error"


def test_run_sync_twice_reuses_the_provider_across_event_loops(
    tmp_path: Path, lich_scripted_server: Callable[..., ScriptedServer],
) -> None:
    server = lich_scripted_server([Reply("first"), Reply("second")])
    config = make_test_config(
        tmp_path,
        plugins=("openai_compat",),
        providers=(ProviderConfig(kind="openai_compat", name="main", model="m",
                                  base_url=server.base_url),),
    )
    agent = Agent(config)
    assert agent.run_sync("one").text == "first"
    assert agent.run_sync("two").text == "second"
    # The connections went with their closed loops; collect them here, in this thread.
    # Left to a later collection they warn (ResourceWarning) from whichever thread runs
    # it, and on CPython 3.11 the traceback formatting in a scripted server's thread,
    # concurrent with an import's ast.parse in this one, fails that import with
    # "SystemError: AST constructor recursion depth mismatch".
    del agent
    gc.collect()


# ---------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("missing", KINDS)
def test_provider_kind_without_its_plugin_is_a_config_error(
    missing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keys set: the providers that can be built are fine (a missing key is another error).
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    others = tuple(k for k in KINDS if k != missing)
    config = make_test_config(
        tmp_path,
        plugins=(*others, "failover"),
        providers=(
            ProviderConfig(kind=others[0], name="fine", model="m"),
            ProviderConfig(kind=missing, name="orphan", model="m"),
        ),
    )
    with pytest.raises(ConfigError) as info:
        Agent(config)
    message = str(info.value)
    assert message.startswith("$.providers[1].kind: provider kind")
    assert f"enable the {missing!r} plugin (add it to `plugins` in the config)" in message
    registered = message.rsplit("(registered kinds: ", 1)[1].rstrip(")")
    assert sorted(registered.split(", ")) == sorted(others)


def test_several_providers_without_a_router_is_a_config_error(tmp_path: Path) -> None:
    config = make_test_config(
        tmp_path,
        plugins=("openai_compat",),
        providers=(ProviderConfig(kind="openai_compat", name="a", model="m",
                                  base_url="http://127.0.0.1:9/v1"),
                   ProviderConfig(kind="openai_compat", name="b", model="m",
                                  base_url="http://127.0.0.1:9/v1")),
    )
    with pytest.raises(ConfigError, match="no router plugin is loaded"):
        Agent(config)


def test_bad_failover_settings_surface_when_the_agent_is_built(tmp_path: Path) -> None:
    config = make_test_config(
        tmp_path,
        plugins=("openai_compat", "failover"),
        providers=(ProviderConfig(kind="openai_compat", name="a", model="m"),),
        plugin_settings={"failover": {"max_attempts": "three"}},
    )
    with pytest.raises(ConfigError, match=r"\$\.plugin_settings\.failover\.max_attempts"):
        Agent(config)


def test_plugin_modules_import_without_httpx() -> None:
    code = (
        "import sys\n"
        "import lich_providers.openai_compat, lich_providers.anthropic\n"
        "import lich_providers.ollama, lich_providers.failover\n"
        "print(sorted(m for m in ('httpx', 'httpcore', 'anyio') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == "[]"
