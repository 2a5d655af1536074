"""Provider kinds from plugins, and the chat function the agent builds from them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from lich import hookimpl
from lich.agent import Agent
from lich.config import ConfigError, LichConfig, ProviderConfig
from lich.plugins import PluginHost
from lich.providers import ProviderRegistry, build_chat, build_providers
from lich.testing import ScriptedChat, make_test_config
from lich.types import ChatFn, ChatOptions, ChatResult, Message, Provider, ToolDefinition


class FakeProvider:
    """A provider answering from a script; records that it was closed."""

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self.model = config.model
        self.closed = False
        self._chat = ScriptedChat([f"answer from {config.name}"], name=config.name)

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition], options: ChatOptions
    ) -> ChatResult:
        return await self._chat(messages, tools, options)

    async def aclose(self) -> None:
        self.closed = True


class FakeKind:
    @hookimpl
    def lich_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register("fake", FakeProvider)


def provider(name: str = "main", kind: str = "fake") -> ProviderConfig:
    return ProviderConfig(kind=kind, name=name, model=f"model-{name}")


def test_registry_registers_attributes_and_forgets_kinds() -> None:
    registry = ProviderRegistry()
    registry.current_plugin = "p"
    registry.register("fake", FakeProvider)
    assert registry.kinds() == ["fake"]
    assert registry.plugin_of("fake") == "p"
    registry.current_plugin = None  # outside the host there is no one to report to: raise
    with pytest.raises(ValueError, match="duplicate_provider_kind: fake"):
        registry.register("fake", FakeProvider)
    with pytest.raises(TypeError):
        registry.register("", FakeProvider)
    with pytest.raises(TypeError):
        registry.register("x", "not callable")  # type: ignore[arg-type]
    assert registry.remove_plugin("p") == ["fake"]
    assert registry.kinds() == []


def test_unknown_kind_names_the_plugin_to_enable() -> None:
    registry = ProviderRegistry()
    with pytest.raises(ConfigError) as info:
        registry.create(provider(kind="anthropic"), index=1)
    message = str(info.value)
    assert message.startswith("$.providers[1].kind: provider kind 'anthropic' is not registered")
    assert "enable the 'anthropic' plugin" in message
    with pytest.raises(ConfigError, match="enable the plugin that provides it"):
        registry.create(provider(kind="mystery"))


def test_no_provider_is_the_no_model_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no model configured: set LICH_MODEL"):
        build_providers(LichConfig(work_dir=str(tmp_path)), ProviderRegistry())


def test_one_provider_needs_no_router(tmp_path: Path) -> None:
    host = PluginHost()
    host.register_object(FakeKind(), "fake_kind")
    registry = ProviderRegistry()
    host.register_providers(registry)
    config = LichConfig(work_dir=str(tmp_path), providers=[provider()])
    providers = build_providers(config, registry)
    assert [p.name for p in providers] == ["main"]
    chat = build_chat(config, host, providers)
    assert chat == providers[0].chat


def test_several_providers_need_a_router(tmp_path: Path) -> None:
    host = PluginHost()
    host.register_object(FakeKind(), "fake_kind")
    registry = ProviderRegistry()
    host.register_providers(registry)
    config = LichConfig(work_dir=str(tmp_path), providers=[provider("a"), provider("b")])
    providers = build_providers(config, registry)
    with pytest.raises(ConfigError, match="no router plugin is loaded"):
        build_chat(config, host, providers)

    picked: list[list[str]] = []

    class LastOne:
        @hookimpl
        def lich_make_router(self, providers: list[Provider]) -> ChatFn:
            picked.append([p.name for p in providers])
            return providers[-1].chat

    class Declines:
        @hookimpl
        def lich_make_router(self) -> None:
            return None  # firstresult: the next implementation decides

    host.register_object(LastOne(), "last_one")
    host.register_object(Declines(), "declines")
    chat = build_chat(config, host, providers)
    assert chat == providers[-1].chat
    assert picked == [["a", "b"]]


async def test_agent_builds_its_chat_from_provider_plugins(tmp_path: Path) -> None:
    config = make_test_config(tmp_path, providers=[provider("solo")])
    agent = Agent(config, plugins=[("fake_kind", FakeKind())])
    assert agent.model == "model-solo"
    result = await agent.run("hi")
    assert result.text == "answer from solo"
    assert result.outcome.result is not None
    assert result.outcome.result.provider_name == "solo"
    await agent.aclose()
    assert all(isinstance(p, FakeProvider) and p.closed for p in agent.providers)


def test_agent_without_the_provider_plugin_is_a_config_error(tmp_path: Path) -> None:
    config = make_test_config(tmp_path, providers=[provider()])
    with pytest.raises(ConfigError, match=r"\$\.providers\[0\]\.kind"):
        Agent(config)


def test_builtin_provider_plugins_register_their_kinds() -> None:
    host = PluginHost()
    host.load(["openai_compat", "anthropic", "ollama"])
    assert [r.status for r in host.reports] == ["loaded"] * 3
    registry = ProviderRegistry()
    host.register_providers(registry)
    assert sorted(registry.kinds()) == ["anthropic", "ollama", "openai_compat"]
    assert registry.plugin_of("ollama") == "ollama"


def test_a_router_that_returns_no_chat_function_is_a_load_failure(tmp_path: Path) -> None:
    class Broken:
        @hookimpl
        def lich_make_router(self) -> object:
            return "not a chat function"

    class Good:
        @hookimpl
        def lich_make_router(self, providers: list[Provider]) -> ChatFn:
            return providers[0].chat

    host = PluginHost()
    host.register_object(FakeKind(), "fake_kind")
    host.register_object(Good(), "good_router")
    host.register_object(Broken(), "broken_router")  # registered last: asked first
    registry = ProviderRegistry()
    host.register_providers(registry)
    config = LichConfig(work_dir=str(tmp_path), providers=[provider("a"), provider("b")])
    providers = build_providers(config, registry)

    chat = build_chat(config, host, providers)

    assert chat == providers[0].chat  # the next router decided
    (report,) = [r for r in host.reports if r.plugin == "broken_router"]
    assert (report.status, report.phase) == ("failed", "register")
    assert report.error_type == "TypeError"
    assert "lich_make_router returned str, not a chat function" in (report.error_message or "")
    assert "broken_router" not in host.plugin_names()

    # Alone, it leaves no router: several providers are then the usual config error,
    # and strict mode names the plugin.
    alone = PluginHost()
    alone.register_object(FakeKind(), "fake_kind")
    alone.register_object(Broken(), "broken_router")
    with pytest.raises(ConfigError, match="no router plugin is loaded"):
        build_chat(config, alone, providers)
    assert [r.plugin for r in alone.failures] == ["broken_router"]


async def test_an_agent_with_a_broken_router_fails_at_assembly_not_at_the_first_call(
    tmp_path: Path,
) -> None:
    class Broken:
        @hookimpl
        def lich_make_router(self) -> object:
            return 42

    config = LichConfig(work_dir=str(tmp_path), plugins=(), strict_plugins=True,
                        providers=[provider("a")])
    from lich.plugins import PluginLoadError

    with pytest.raises(PluginLoadError, match="broken_router"):
        Agent(config, plugins=[("fake_kind", FakeKind()), ("broken_router", Broken())])
