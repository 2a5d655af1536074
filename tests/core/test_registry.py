"""The one registry shape behind tools, provider kinds and gateway platforms, and the
provider defaults a kind registers with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lich import Tool, hookimpl
from lich.config import ProviderConfig
from lich.gateway.registry import AdapterRegistry
from lich.plugins import PluginHost
from lich.providers import ProviderDefaults, ProviderRegistry
from lich.registry import DuplicateNameError
from lich.tools import ToolRegistry
from lich.types import ToolResult


def _tool(name: str) -> Tool:
    return Tool(name, "d", {"type": "object"}, lambda args, ctx: ToolResult(name))


def _factory(config: Any) -> Any:
    return object()


# (registry class, what, register one name, the host method that fills it)
KINDS: list[tuple[type[Any], str, Callable[[Any, str], None], str, str]] = [
    (ToolRegistry, "tool", lambda r, n: r.register(_tool(n)),
     "lich_register_tools", "register_tools"),
    (ProviderRegistry, "provider_kind", lambda r, n: r.register(n, _factory),
     "lich_register_providers", "register_providers"),
    (AdapterRegistry, "gateway_platform", lambda r, n: r.register(n, _factory),
     "lich_register_gateway_adapters", "register_into"),
]


@pytest.mark.parametrize(("cls", "what", "add", "hook", "method"), KINDS)
def test_every_registry_reports_a_duplicate_the_same_way(
    cls: type[Any], what: str, add: Callable[[Any, str], None], hook: str, method: str
) -> None:
    # Outside the plugin host: an error naming the code and the name.
    bare = cls()
    add(bare, "x")
    with pytest.raises(DuplicateNameError, match=rf"^duplicate_{what}: x$"):
        add(bare, "x")
    with pytest.raises(TypeError, match="must be a non-empty string"):
        add(bare, " ")

    # Through the host: the later plugin is told who has the name, and keeps loading.
    def plugin(tag: str) -> object:
        namespace = {hook: hookimpl(lambda registry, **_: add(registry, "shared"))}
        return type(f"Plugin_{tag}", (), {k: staticmethod(v) for k, v in namespace.items()})()

    host = PluginHost()
    if hook == "lich_register_gateway_adapters":
        from lich.gateway import hookspecs

        host.add_hookspecs(hookspecs)  # the gateway's own hook, as its plugin adds it
    host.register_object(plugin("a"), "first")
    host.register_object(plugin("b"), "second")  # registered last: its hook runs first
    registry = cls()
    if method == "register_tools":
        host.register_tools(registry, config=None)  # type: ignore[arg-type]
    elif method == "register_into":
        host.register_into(hook, registry)
    else:
        getattr(host, method)(registry)
    assert registry.names() == ["shared"]
    assert registry.plugin_of("shared") == "second"
    (first,) = [r for r in host.reports if r.plugin == "first"]
    assert first.status == "loaded"
    assert first.warnings == (
        f"duplicate_{what}: shared (already registered by second); skipped",)
    # Forgetting a plugin forgets what it registered, and only that.
    assert registry.remove_plugin("first") == []
    assert registry.remove_plugin("second") == ["shared"]
    assert len(registry) == 0


def _config(**kw: Any) -> ProviderConfig:
    return ProviderConfig(name="p", model="m", **kw)


def test_defaults_fill_the_url_and_send_the_default_key_to_the_well_known_host_only() -> None:
    defaults = ProviderDefaults(base_url="https://api.example.com/v1/", key_env="EXAMPLE_KEY")
    assert defaults.key_hosts == ("api.example.com",)

    at_home = defaults.resolve(_config(kind="k"))
    assert (at_home.base_url, at_home.api_key_env) == ("https://api.example.com/v1", "EXAMPLE_KEY")
    assert defaults.resolve(at_home) is at_home  # resolving twice changes nothing

    for elsewhere in ("http://127.0.0.1:8000/v1", "https://api.example.com.evil.test/v1",
                      "https://evil.test/api.example.com", "https://api.example.com@evil.test/",
                      "not a url", "http://[::1"):
        resolved = defaults.resolve(_config(kind="k", base_url=elsewhere))
        assert resolved.api_key_env is None, elsewhere
    # Over plain http the key would travel in clear text: not without naming it.
    assert defaults.resolve(_config(base_url="http://api.example.com/v1")).api_key_env is None
    # Host names are not case-sensitive, and another port is the same host.
    assert defaults.resolve(_config(base_url="HTTPS://API.Example.COM:8443")).api_key_env == (
        "EXAMPLE_KEY")
    # A variable the config names goes wherever the config says.
    named = defaults.resolve(_config(base_url="http://127.0.0.1:1", api_key_env="EXAMPLE_KEY"))
    assert named.api_key_env == "EXAMPLE_KEY"


def test_explicit_key_hosts_and_a_kind_without_a_default_key() -> None:
    multi = ProviderDefaults(base_url="https://a.example", key_env="K",
                             key_hosts=["A.example", "b.example"])
    assert multi.key_hosts == ("a.example", "b.example")
    assert multi.resolve(_config(base_url="https://b.example/x")).api_key_env == "K"
    keyless = ProviderDefaults(base_url="http://localhost:11434")
    assert keyless.resolve(_config()).api_key_env is None


def test_the_registry_resolves_the_default_kind_and_lists_every_default_key() -> None:
    registry = ProviderRegistry()
    registry.plugin_order = ["one", "two"]
    registry.current_plugin = "two"
    registry.register("beta", _factory, defaults=ProviderDefaults(key_env="BETA_KEY"))
    registry.current_plugin = "one"
    registry.register("alpha", _factory,
                      defaults=ProviderDefaults(base_url="https://alpha.example", key_env="A_KEY"))
    assert registry.kinds() == ["alpha", "beta"]  # plugin order, not registration order
    assert registry.default_kind() == "alpha"
    resolved = registry.resolve(_config())
    assert (resolved.kind, resolved.base_url, resolved.api_key_env) == (
        "alpha", "https://alpha.example", "A_KEY")
    assert registry.key_envs() == frozenset({"A_KEY", "BETA_KEY"})
    with pytest.raises(TypeError, match="ProviderDefaults"):
        registry.register("gamma", _factory, defaults={"key_env": "X"})  # type: ignore[arg-type]


def test_a_failing_plugin_does_not_take_a_healthy_plugins_name_with_it() -> None:
    """The plugin that won a name fails later and is forgotten: the registration it
    shadowed takes the name back."""

    class Shadow:
        @hookimpl
        def lich_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(_tool("list_dir"))

        @hookimpl
        def lich_register_providers(self, registry: ProviderRegistry) -> None:
            raise RuntimeError("shadow breaks later")

    class Healthy:
        @hookimpl
        def lich_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(_tool("list_dir"))

    host = PluginHost()
    host.register_object(Healthy(), "healthy")
    host.register_object(Shadow(), "shadow")  # registered last: its hook runs first
    tools = ToolRegistry()
    host.register_tools(tools, config=None)  # type: ignore[arg-type]
    assert tools.plugin_of("list_dir") == "shadow"

    host.register_providers(ProviderRegistry())  # shadow fails here and is forgotten

    assert [r.plugin for r in host.failures] == ["shadow"]
    assert tools.plugin_of("list_dir") == "healthy"
    item = tools.get("list_dir")
    assert item is not None
    assert item.plugin == "healthy"


def test_key_hosts_as_one_string_is_one_host_and_none_is_the_default() -> None:
    one = ProviderDefaults(base_url="https://a.example", key_env="K", key_hosts="API.x.example")
    assert one.key_hosts == ("api.x.example",)
    assert one.is_key_host("https://api.x.example/v1")
    assert ProviderDefaults(base_url="https://a.example", key_hosts=None).key_hosts == (
        "a.example",)
    assert ProviderDefaults(base_url="https://a.example", key_hosts=()).key_hosts == ()
