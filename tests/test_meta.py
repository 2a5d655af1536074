"""Tests about the project itself, and one behaviour test per hook.

Meta: every ``lich_*`` hook specification has a test named
``test_hook_<name>`` somewhere in ``tests/`` and an entry in
``docs/plugins.md`` with its exact signature; the builtin plugins are entry
points in the installed metadata, as ``pyproject.toml`` declares them;
``lich.__all__`` is sorted and complete.

Hooks: ``test_hook_lich_*`` below check what each hook really does, through
the plugin host and a real :class:`lich.Agent` against the scripted model.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import inspect
import json
import re
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import attrs
import click
import pytest
from click.testing import CliRunner

import lich
from lich import Block, ProviderConfig, Rewrite, ToolResult, hookspecs, tool
from lich.config import BUILTIN_PLUGINS, ConfigError
from lich.events import ToolCallEnd
from lich.plugins import PluginHost
from lich.testing import HookRecorder, ScriptedChat, calls_responder, make_test_config
from lich.types import (
    AssistantMessage,
    ChatOptions,
    ChatResult,
    Message,
    ProviderError,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    Usage,
)

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PLUGIN_DOCS = ROOT / "docs" / "plugins.md"


def hook_specs() -> dict[str, Callable[..., Any]]:
    """Every hook specification of lich, by name: the core's (:mod:`lich.hookspecs`)
    and the gateway's own (added by its plugin)."""
    from lich.gateway import hookspecs as gateway_hookspecs

    return {
        name: fn
        for where in (hookspecs, gateway_hookspecs)
        for name, fn in inspect.getmembers(where, inspect.isfunction)
        if name.startswith("lich_") and hasattr(fn, "lich_spec")
    }


def spec_signature(name: str, fn: Callable[..., Any]) -> str:
    """``lich_x(a: A, b: B) -> R`` from :func:`inspect.signature` (annotations as written)."""
    sig = inspect.signature(fn)

    def shown(annotation: Any) -> str:
        if isinstance(annotation, str):
            return annotation
        return inspect.formatannotation(annotation)

    params = ", ".join(
        f"{p.name}: {shown(p.annotation)}" if p.annotation is not p.empty else p.name
        for p in sig.parameters.values() if p.name != "self"  # a spec class's method
    )
    returns = "" if sig.return_annotation is sig.empty else f" -> {shown(sig.return_annotation)}"
    return f"{name}({params}){returns}"


def test_the_hook_specifications_are_found() -> None:
    assert set(hook_specs()) >= {
        "lich_register_tools", "lich_register_providers", "lich_make_router",
        "lich_register_commands", "lich_register_gateway_adapters", "lich_run_start",
        "lich_before_tool_call", "lich_after_tool_call", "lich_run_end", "lich_event",
    }
    assert spec_signature("lich_run_end", hook_specs()["lich_run_end"]) == (
        "lich_run_end(run: RunInfo, outcome: RunOutcome) -> None"
    )


def test_every_hook_spec_has_a_test() -> None:
    names: set[str] = set()
    # Test modules only: fixture trees (e.g. the reliability suite's broken-plugin zoo)
    # hold files that do not even parse, on purpose.
    for path in TESTS.rglob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names.update(
            node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        )

    def tested(spec: str) -> bool:
        short = spec.removeprefix("lich_")
        return any(
            n == f"test_hook_{x}" or n.startswith(f"test_hook_{x}__")
            for n in names for x in (spec, short)
        )

    missing = [spec for spec in hook_specs() if not tested(spec)]
    assert not missing, f"hooks without a test_hook_<name> test in tests/: {missing}"


def test_every_hook_spec_is_documented_with_its_exact_signature() -> None:
    docs = PLUGIN_DOCS.read_text(encoding="utf-8")
    missing = [
        spec_signature(name, fn) for name, fn in hook_specs().items()
        if spec_signature(name, fn) not in docs
    ]
    assert not missing, f"docs/plugins.md lacks these signatures verbatim: {missing}"
    for name in hook_specs():
        assert re.search(rf"^#+ .*`{name}`", docs, re.M), f"no section heading for {name}"
    # And the docs name no hook that does not exist (a renamed or removed spec); the
    # testing kit's fixtures (lich_agent_factory, ...) are the only other lich_ names.
    import lich.testing.plugin

    mentioned = set(re.findall(r"\b(lich_[a-z_]+)\(", docs)) - set(lich.testing.plugin.__all__)
    # The forecast example's own hook is a third party's (plugins_example/forecast.py).
    known = {*hook_specs(), "lich_forecast_sources"}
    assert mentioned <= known, mentioned - known


def test_the_hook_reference_is_generated_from_the_current_docstrings() -> None:
    # docs/plugins.md's hook reference is rendered from the specifications' docstrings:
    # a spec changed without rerunning the generator leaves the page stale.
    spec = importlib.util.spec_from_file_location(
        "make_hook_reference", ROOT / "docs" / "make_hook_reference.py")
    assert spec is not None
    assert spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    page = PLUGIN_DOCS.read_text(encoding="utf-8")
    assert generator.rendered(page) == page, (
        "docs/plugins.md: the hook reference is stale; run python docs/make_hook_reference.py")
    documented = set(re.findall(r"^#### `(lich_[a-z_]+)`", generator.reference(), re.M))
    assert documented == set(hook_specs()) | {
        name for module in generator.spec_modules()[1:] for name, _ in generator.specs(module)}


async def test_the_python_examples_in_the_plugin_docs_work(
    tmp_path: Path, lich_agent_factory: Callable[..., Any]
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", PLUGIN_DOCS.read_text(encoding="utf-8"), re.S)
    shout = next(b for b in blocks if b.startswith("# shout.py"))
    doc_test = next(b for b in blocks if "def test_shout(" in b)
    provider = next(b for b in blocks if "class EchoProvider" in b)
    (tmp_path / "shout.py").write_text(shout)
    (tmp_path / "echo_provider.py").write_text(provider)

    namespace: dict[str, Any] = {}
    exec(compile(doc_test, str(PLUGIN_DOCS), "exec"), namespace)
    await namespace["test_shout"](lich_agent_factory)

    config = make_test_config(
        tmp_path, plugins=("echo_provider.py",),
        providers=(ProviderConfig(kind="echo", name="local", model="echo-1"),),
    )
    assert (await lich.Agent(config).run("echo me")).text == "echo me"


def installed_distribution() -> str:
    """The name of the installed distribution that provides the ``lich`` package (the
    project's own, ``lich-agent``, once installed from this checkout)."""
    (name,) = set(importlib.metadata.packages_distributions()["lich"])
    return name


def test_builtin_entry_points_are_declared_in_the_installed_metadata() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
        "lich"
    ]
    distribution = installed_distribution()
    installed = {
        ep.name: ep for ep in importlib.metadata.entry_points(group="lich")
        if ep.dist is not None and ep.dist.metadata["Name"] == distribution
    }
    assert {name: ep.value for name, ep in installed.items()} == declared, (
        "the installed metadata is stale: run `pip install -e .`"
    )
    for name in BUILTIN_PLUGINS:
        assert name in installed, f"builtin plugin {name!r} is not an entry point of lich"
        assert importlib.util.find_spec(installed[name].module) is not None, name
    assert lich.__version__ == importlib.metadata.version(distribution)


DISTRIBUTION = "lich-agent"  # `lich` on PyPI is an unrelated project
# `lich[mcp]` (or `lich\[mcp\]` in a regex), `lich>=0.1`, `pip install lich`.
OLD_NAME = re.compile(r"(?<![\w-])lich\\?\[[a-z,]+\\?\]|\blich>=|pip install (-U )?lich\b(?!-)")


def test_the_distribution_name_is_used_everywhere() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION
    # The extras that name the project itself (all = [...], test = [...all]).
    own = [dep for deps in project["optional-dependencies"].values() for dep in deps
           if re.match(r"lich[\[>=< ]", dep) or re.match(r"lich-", dep)]
    assert own
    assert all(dep.startswith(f"{DISTRIBUTION}[") for dep in own), own
    example = tomllib.loads((ROOT / "plugins_example" / "pyproject.toml").read_text())
    assert any(d.startswith(f"{DISTRIBUTION}>=") for d in example["project"]["dependencies"])
    # Every pip line of the docs, the README and lich's own messages installs this one.
    wrong = []
    for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "lich").rglob("*.py"),
                 *(ROOT / "docs").rglob("Dockerfile"), *(ROOT / "tests").rglob("*.py")]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if path.name != "test_meta.py" and OLD_NAME.search(line):
                wrong.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert wrong == []


def test_lich_all_is_sorted_and_complete() -> None:
    exported = lich.__all__
    assert exported == sorted(exported)
    assert len(set(exported)) == len(exported)
    assert set(exported) == {*lich._EXPORTS, "__version__"}
    assert set(exported) <= set(dir(lich))
    for name in exported:
        assert getattr(lich, name) is not None, name
    # A plugin author finds everything the core's hooks pass and return in `lich` itself
    # (a plugin's own hooks pass its own types: the gateway's are in lich.gateway).
    from lich.gateway import hookspecs as gateway_hookspecs

    needed = set()
    for name, fn in hook_specs().items():
        if hasattr(gateway_hookspecs, name):
            continue
        for annotation in fn.__annotations__.values():
            needed.update(re.findall(r"\b[A-Z][A-Za-z]+\b", str(annotation)))
    needed -= {"Any", "None", "Group"}  # typing and click, not lich
    # The gateway's own types are found in the package that owns them, not the root.
    needed -= set(importlib.import_module("lich.gateway").__all__)
    needed |= {"hookimpl", "tool", "Tool", "Block", "Rewrite", "ToolResult", "ToolContext",
               "ToolError", "Agent"}
    assert needed <= set(exported), needed - set(exported)


def test_lich_exports_and_its_type_checking_block_say_the_same() -> None:
    # `_EXPORTS` is the one list (the lazy imports and __all__ come from it); type
    # checkers read the TYPE_CHECKING block instead, so the two must not drift apart.
    tree = ast.parse(Path(lich.__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
    seen: dict[str, str] = {}
    for statement in block.body:
        assert isinstance(statement, ast.ImportFrom), ast.dump(statement)
        for alias in statement.names:
            assert alias.asname == alias.name, f"{alias.name}: re-export it as itself"
            seen[alias.name] = statement.module or ""
    assert seen == lich._EXPORTS


def test_the_gateway_s_types_are_not_in_the_root_namespace() -> None:
    for name in ("AdapterRegistry", "GatewayBus", "MessageBus"):
        assert name not in lich.__all__
        assert name in importlib.import_module("lich.gateway").__all__


# ===========================================================================
# One behaviour test per hook
# ===========================================================================


def tool_messages(messages: Sequence[Message]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


class Echo:
    """A plugin offering ``echo(text)``."""

    def lich_register_tools(self, registry: Any) -> None:
        @tool
        def echo(text: str) -> str:
            """Echo."""
            return f"echo: {text}"

        registry.register(echo)


async def test_hook_lich_register_tools(tmp_path: Path) -> None:
    seen: list[Any] = []

    class Greeter:
        def lich_register_tools(self, registry: Any, config: Any) -> None:
            seen.append(config.plugin_settings.get("greeter", {}))
            greeting = config.plugin_settings["greeter"]["greeting"]

            @tool
            def greet(name: str) -> str:
                """Greet someone."""
                return f"{greeting}, {name}"

            @tool
            def wave() -> str:
                """Wave."""
                return "~"

            registry.register(greet)
            registry.register(wave)

    class Broken:
        def lich_register_tools(self, registry: Any) -> None:
            @tool
            def half() -> str:
                """Registered, then the hook fails."""
                return ""

            registry.register(half)
            raise RuntimeError("no database")

    config = make_test_config(tmp_path, plugin_settings={"greeter": {"greeting": "hello"}},
                              tools_disabled=("wave",))
    chat = ScriptedChat(responder=calls_responder(("greet", {"name": "ada"})))
    agent = lich.Agent(config, plugins=[("greeter", Greeter()), ("broken", Broken())], chat=chat)

    assert seen == [{"greeting": "hello"}]
    assert agent.tools.names() == ["greet"]  # `wave` disabled by config, `half` unloaded
    assert agent.tools.get("greet").plugin == "greeter"  # type: ignore[union-attr]
    broken = next(r for r in agent.host.reports if r.plugin == "broken")
    assert (broken.status, broken.phase, broken.error_message) == (
        "failed", "register", "no database"
    )
    result = await agent.run("greet ada")
    assert [d.name for d in chat.calls[0][1]] == ["greet"]
    assert [m.content for m in tool_messages(result.messages)] == ["hello, ada"]


class FakeProvider:
    """A provider that answers ``"<name>: <last user text>"``."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.name = config.name
        self.model = config.model
        self.closed = False

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition], options: ChatOptions
    ) -> ChatResult:
        return ChatResult(
            AssistantMessage(f"{self.name}: {messages[-1].content}"), Usage(3, 2, 5), "stop",
            self.model, self.name,
        )

    async def aclose(self) -> None:
        self.closed = True


class FakeKind:
    """A plugin registering the provider kind ``fake``."""

    def __init__(self) -> None:
        self.built: list[FakeProvider] = []

    def lich_register_providers(self, registry: Any) -> None:
        def factory(config: ProviderConfig) -> FakeProvider:
            provider = FakeProvider(config)
            self.built.append(provider)
            return provider

        registry.register("fake", factory)


def fake_providers(*names: str) -> tuple[ProviderConfig, ...]:
    return tuple(ProviderConfig(kind="fake", name=n, model=f"{n}-model") for n in names)


async def test_hook_lich_register_providers(tmp_path: Path) -> None:
    kind = FakeKind()

    class Impostor:
        def lich_register_providers(self, registry: Any) -> None:
            registry.register("fake", lambda config: None)

    config = make_test_config(tmp_path, providers=fake_providers("primary"))
    # Registered first = called last: the impostor comes second for "fake".
    agent = lich.Agent(config, plugins=[("impostor", Impostor()), ("fake_kind", kind)])
    assert [p.config for p in kind.built] == list(config.providers)
    assert agent.model == "primary-model"
    result = await agent.run("hi")
    assert result.text == "primary: hi"
    await agent.aclose()
    assert kind.built[0].closed
    # A kind registered twice keeps the first; the second plugin gets a warning.
    impostor = next(r for r in agent.host.reports if r.plugin == "impostor")
    assert impostor.warnings == (
        "duplicate_provider_kind: fake (already registered by fake_kind); skipped",)
    # A kind nobody registered is a configuration error naming the path.
    unknown = make_test_config(tmp_path, providers=(
        ProviderConfig(kind="nope", name="x", model="m"),
    ))
    with pytest.raises(ConfigError, match=r"\$\.providers\[0\]\.kind: provider kind 'nope'"):
        lich.Agent(unknown, plugins=[("fake_kind", FakeKind())])


async def test_hook_lich_make_router(tmp_path: Path) -> None:
    class LastFirst:
        """Routes to the last provider (a router that ignores config order)."""

        def lich_make_router(self, providers: list[Any], config: Any) -> Any:
            assert [p.name for p in providers] == ["a", "b"]
            return providers[-1].chat

    class Undecided:
        def __init__(self) -> None:
            self.asked = 0

        def lich_make_router(self, providers: list[Any]) -> None:
            self.asked += 1
            return None

    undecided = Undecided()
    config = make_test_config(tmp_path, providers=fake_providers("a", "b"))
    # Registered last, Undecided is asked first; its None passes the question on.
    agent = lich.Agent(config, plugins=[("fake_kind", FakeKind()), ("last_first", LastFirst()),
                                        ("undecided", undecided)])
    assert undecided.asked == 1
    assert (await agent.run("route me")).text == "b: route me"
    with pytest.raises(ConfigError, match="no router plugin is loaded"):
        lich.Agent(config, plugins=[("fake_kind", FakeKind())])
    single = make_test_config(tmp_path, providers=fake_providers("solo"))
    assert (await lich.Agent(single, plugins=[("fake_kind", FakeKind())]).run("x")).text == (
        "solo: x"
    )


async def test_hook_lich_make_session_store(tmp_path: Path) -> None:
    from lich.sessions import JsonlSessionStore

    class Memo(JsonlSessionStore):
        """A store of its own kind (files, elsewhere): what the agent must then use."""

    @attrs.frozen
    class MemoSettings:
        """``[session_store] kind = "memo"``: no settings."""

    class Wants:
        def lich_register_config_tables(self, tables: Any) -> None:
            tables.claim("session_store", MemoSettings, kind="memo")

        def lich_make_session_store(self, config: Any) -> Any:
            if config.table("session_store").get("kind") != "memo":
                return None
            return Memo(tmp_path / "memo")

    class Undecided:
        def __init__(self) -> None:
            self.asked = 0

        def lich_make_session_store(self) -> None:
            self.asked += 1
            return None

    class NotAStore:
        def lich_make_session_store(self) -> Any:
            return "a string"

    undecided = Undecided()
    config = make_test_config(tmp_path, session_store={"kind": "memo"})
    chat = ScriptedChat(["stored"])
    agent = lich.Agent(config, chat=chat, plugins=[("wants", Wants()), ("undecided", undecided)])
    # The kind is the plugin's: it claims [session_store] for it, as postgres does.
    assert undecided.asked == 1
    assert isinstance(agent.sessions, Memo)
    result = await agent.run("keep this")
    assert Path(result.session_path or "").parent == tmp_path / "memo"
    assert agent.sessions.read(result.session_id).messages[-1].content == "stored"

    # No answer: the JSONL store for no kind (or "jsonl"); any other kind is an error.
    default = lich.Agent(make_test_config(tmp_path), chat=chat, plugins=[("wants", Wants())])
    assert type(default.sessions) is JsonlSessionStore
    assert default.sessions.describe() == str(tmp_path / ".lich" / "sessions")
    with pytest.raises(ConfigError, match=r"\$\.session_store\.kind: no loaded plugin "
                                          r"claims \[session_store\] kind 'memo'"):
        lich.Agent(config, chat=chat)
    with pytest.raises(ConfigError, match=r"\$\.session_store\.dsn: the jsonl store"):
        lich.Agent(make_test_config(tmp_path, session_store={"dsn": "x"}), chat=chat)
    # An answer that is not a store fails its plugin; the next one decides.
    host = lich.PluginHost()
    host.register_object(Wants(), "wants")
    host.register_object(NotAStore(), "not_a_store")
    agent = lich.Agent(config, chat=chat, host=host)
    assert isinstance(agent.sessions, Memo)
    assert "not a session store" in next(
        r for r in host.reports if r.entry == "not_a_store").describe_error()


def test_hook_lich_register_commands(tmp_path: Path) -> None:
    class Hello:
        def lich_register_commands(self, cli: click.Group) -> None:
            @click.command()
            @click.argument("name")
            def hello(name: str) -> None:
                """Say hello."""
                click.echo(f"hello {name}")

            cli.add_command(hello)

    class HalfDone:
        def lich_register_commands(self, cli: click.Group) -> None:
            cli.add_command(click.Command("half", callback=lambda: None))
            raise RuntimeError("missing extra")

    host = PluginHost(work_dir=tmp_path)
    host.register_object(Hello(), "hello")
    host.register_object(HalfDone(), "half_done")
    cli = click.Group("lich")
    host.register_commands(cli)
    assert sorted(cli.commands) == ["hello"]
    result = CliRunner().invoke(cli, ["hello", "ada"])
    assert (result.exit_code, result.output) == (0, "hello ada\n")
    failed = next(r for r in host.reports if r.plugin == "half_done")
    assert (failed.status, failed.phase, failed.error_message) == (
        "failed", "register", "missing extra"
    )


def test_hook_lich_register_gateway_adapters(tmp_path: Path) -> None:
    from lich.gateway.registry import AdapterRegistry

    def factory(context: Any) -> Any:
        return ("adapter for", context)

    class Irc:
        def lich_register_gateway_adapters(self, registry: Any) -> None:
            registry.register("irc", factory)

    class HalfDone:
        def lich_register_gateway_adapters(self, registry: Any) -> None:
            registry.register("matrix", factory)
            raise RuntimeError("matrix needs an extra")  # this plugin fails whole

    host = PluginHost(work_dir=tmp_path)
    host.load(["gateway"])  # the hook is the gateway's own: its plugin adds the spec
    host.register_object(Irc(), "irc_plugin")
    host.register_object(HalfDone(), "half_done")
    registry = AdapterRegistry()
    host.register_into("lich_register_gateway_adapters", registry)
    assert registry.names() == ["irc", "webhook", "telegram", "discord", "twitch"]
    assert "matrix" not in registry  # it went with the failed plugin
    assert registry.plugin_of("irc") == "irc_plugin"
    assert registry.create(cast(Any, SimpleNamespace(name="irc"))) == (
        "adapter for", SimpleNamespace(name="irc")
    )
    failed = next(r for r in host.reports if r.plugin == "half_done")
    assert (failed.status, failed.phase, failed.error_message) == (
        "failed", "register", "matrix needs an extra"
    )
    assert host.plugin_names() == ["gateway", "irc_plugin"]


async def test_hook_lich_run_start(tmp_path: Path) -> None:
    order: list[str] = []
    recorder = HookRecorder()

    async def chat(messages: Any, tools: Any, options: ChatOptions) -> ChatResult:
        order.append("model")
        return ChatResult(AssistantMessage("ok"))

    class Starts:
        async def lich_run_start(self, run: Any) -> None:
            order.append("run_start")

    config = make_test_config(tmp_path, plugin_settings={"mine": {"k": 1}})
    agent = lich.Agent(config, plugins=[("recorder", recorder), ("starts", Starts())], chat=chat)
    result = await agent.run("the input", session_id="sess-1")
    assert order == ["run_start", "model"]
    (run,) = [kw["run"] for name, kw in recorder.calls if name == "lich_run_start"]
    assert (run.run_id, run.session_id, run.input, run.work_dir) == (
        result.run_id, "sess-1", "the input", str(tmp_path)
    )
    assert run.settings_for("mine") == {"k": 1}
    assert run.settings_for("other") == {}
    assert run.config is config


async def test_hook_lich_before_tool_call(tmp_path: Path) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    class Upper:
        def lich_before_tool_call(self, call: ToolCall) -> Rewrite | None:
            seen.append(("upper", dict(call.args)))
            return Rewrite({"text": call.args["text"].upper()})

    class Veto:
        def lich_before_tool_call(self, call: ToolCall, run: Any) -> Block | None:
            seen.append(("veto", dict(call.args)))
            return Block("no shouting") if call.args["text"] == "STOP" else None

    class Crash:
        def lich_before_tool_call(self, call: ToolCall) -> None:
            if call.args["text"] == "crash":
                raise ValueError("bug")

    events: list[ToolCallEnd] = []
    chat = ScriptedChat(responder=calls_responder(
        ("echo", {"text": "hi"}), ("echo", {"text": "stop"}), ("echo", {"text": "crash"})
    ))
    # Registered last = called first: crash, veto, upper... so register veto last of the two.
    agent = lich.Agent(
        make_test_config(tmp_path),
        plugins=[("echo", Echo()), ("veto", Veto()), ("upper", Upper()), ("crash", Crash())],
        chat=chat,
    )
    result = await agent.run("go", on_event=lambda e: isinstance(e.event, ToolCallEnd)
                             and events.append(e.event))  # type: ignore[func-returns-value]
    contents = [m.content for m in tool_messages(result.messages)]
    assert contents[0] == "echo: HI"  # upper ran before veto and rewrote
    assert json.loads(contents[1])["error"] == "blocked_by_plugin: no shouting"
    assert json.loads(contents[2])["error"] == (
        "blocked_by_plugin: hook_error (crash): ValueError: bug"
    )
    assert seen[:2] == [("upper", {"text": "hi"}), ("veto", {"text": "HI"})]
    assert [(e.rewritten_by, e.blocked_by) for e in events] == [
        (("upper",), None), (("upper",), "veto"), ((), "crash")
    ]
    assert events[0].call.args == {"text": "HI"}


async def test_hook_lich_request_approval(tmp_path: Path) -> None:
    """A before-hook's ``Ask`` reaches the approver, whose answer decides the call."""
    asked: list[tuple[str, str, dict[str, Any]]] = []

    class Ask_:
        def lich_before_tool_call(self, call: ToolCall) -> lich.Ask:
            return lich.Ask(f"{call.name} writes")

    class Person:
        def lich_request_approval(self, call: ToolCall, reason: str,
                                  request: lich.ApprovalRequest) -> lich.Approval:
            asked.append((reason, request.id, dict(call.args)))
            return lich.Approval(call.args["text"] != "no", message="not that")

    chat = ScriptedChat(responder=calls_responder(
        ("echo", {"text": "yes"}), ("echo", {"text": "no"})))
    agent = lich.Agent(make_test_config(tmp_path), chat=chat,
                       plugins=[("echo", Echo()), ("ask", Ask_()), ("person", Person())])
    result = await agent.run("go")
    contents = [m.content for m in tool_messages(result.messages)]
    assert contents[0] == "echo: yes"
    assert json.loads(contents[1])["error"] == "approval_denied: not that"
    assert [(r, a) for r, _, a in asked] == [
        ("echo writes", {"text": "yes"}), ("echo writes", {"text": "no"})]
    assert asked[0][1] != asked[1][1]  # each request has its own id


async def test_hook_lich_prepare_approval(tmp_path: Path) -> None:
    """Each implementation completes the request the one before returned; one that
    changes what is asked about is skipped."""
    from attrs import evolve

    seen: list[tuple[tuple[str, ...], str | None]] = []

    class Ask_:
        def lich_before_tool_call(self) -> lich.Ask:
            return lich.Ask("asks")

    class Rules:  # registered first: called last, after Preview
        def lich_prepare_approval(self, request: lich.ApprovalRequest,
                                  run: lich.RunInfo) -> lich.ApprovalRequest:
            return evolve(request, rules=(f"echo({request.call.args['text']})", run.work_dir))

    class Preview:
        async def lich_prepare_approval(self, request: lich.ApprovalRequest) -> Any:
            return evolve(request, preview="would echo")

    class Swapper:  # called first: tries to change the call itself
        def lich_prepare_approval(self, request: lich.ApprovalRequest) -> Any:
            return evolve(request, call=evolve(request.call, args={"text": "other"}))

    class Person:
        def lich_request_approval(self, request: lich.ApprovalRequest) -> lich.Approval:
            seen.append((request.rules, request.preview))
            return lich.Approval(True)

    agent = lich.Agent(make_test_config(tmp_path), chat=ScriptedChat(
        responder=calls_responder(("echo", {"text": "hi"}))),
        plugins=[("echo", Echo()), ("ask", Ask_()), ("rules", Rules()),
                 ("preview", Preview()), ("swapper", Swapper()), ("person", Person())])
    events: list[Any] = []
    result = await agent.run("go", on_event=events.append)
    assert seen == [(("echo(hi)", str(tmp_path)), "would echo")]
    (requested,) = [e.event for e in events if type(e.event).__name__ == "ApprovalRequested"]
    assert requested.rules == ("echo(hi)", str(tmp_path))
    assert [m.content for m in tool_messages(result.messages)] == ["echo: hi"]


async def test_hook_lich_approval_resolved(tmp_path: Path) -> None:
    """Once per request, after its event, a denial included; a failing one is skipped."""
    order: list[str] = []

    class Ask_:
        def lich_before_tool_call(self) -> lich.Ask:
            return lich.Ask("asks")

    class Person:
        def lich_request_approval(self, call: ToolCall) -> lich.Approval:
            return lich.Approval(call.args["text"] == "yes", scope="session")

    class Keeper:
        def lich_approval_resolved(self, request: lich.ApprovalRequest,
                                   resolved: lich.ApprovalResolved, run: lich.RunInfo) -> None:
            assert resolved.id == request.id
            order.append(f"hook {request.call.args['text']} {resolved.approved} "
                         f"{resolved.scope} {run.session_id == session[0]}")

    class Broken:
        def lich_approval_resolved(self) -> None:
            raise RuntimeError("keeper bug")

    session: list[str] = []

    def on_event(envelope: Any) -> None:
        session[:] = [envelope.session_id]
        if type(envelope.event).__name__ == "ApprovalResolved":
            order.append("event")

    agent = lich.Agent(make_test_config(tmp_path), chat=ScriptedChat(
        responder=calls_responder(("echo", {"text": "yes"}), ("echo", {"text": "no"}))),
        plugins=[("echo", Echo()), ("ask", Ask_()), ("person", Person()),
                 ("keeper", Keeper()), ("broken", Broken())])
    result = await agent.run("go", on_event=on_event)
    assert order == ["event", "hook yes True session True", "event", "hook no False session True"]
    assert next(m.content for m in tool_messages(result.messages)) == "echo: yes"


async def test_hook_lich_after_tool_call(tmp_path: Path) -> None:
    class Censor:
        def lich_after_tool_call(self, call: ToolCall, result: ToolResult) -> ToolResult | None:
            if "secret" in result.output:
                return ToolResult(ok=True, output=result.output.replace("secret", "[censored]"))
            return None

    class Broken:
        def lich_after_tool_call(self, result: ToolResult) -> None:
            raise RuntimeError("observer bug")

    events: list[ToolCallEnd] = []
    chat = ScriptedChat(responder=calls_responder(
        ("echo", {"text": "my secret"}), ("echo", {"text": "plain"})
    ))
    agent = lich.Agent(
        make_test_config(tmp_path),
        plugins=[("echo", Echo()), ("censor", Censor()), ("broken", Broken())], chat=chat,
    )
    result = await agent.run("go", on_event=lambda e: isinstance(e.event, ToolCallEnd)
                             and events.append(e.event))  # type: ignore[func-returns-value]
    assert [m.content for m in tool_messages(result.messages)] == [
        "echo: my [censored]", "echo: plain"
    ]
    assert [e.replaced_by for e in events] == ["censor", None]
    # The model was told the replaced result too.
    sent = chat.requests[-1].tool_results_since_user()
    assert sent[0].content == "echo: my [censored]"


async def test_hook_lich_run_end(tmp_path: Path) -> None:
    recorder = HookRecorder()
    agent = lich.Agent(make_test_config(tmp_path), plugins=[("recorder", recorder)],
                       chat=ScriptedChat(["all done"]))
    result = await agent.run("finish")
    ends = [kw for name, kw in recorder.calls if name == "lich_run_end"]
    assert len(ends) == 1
    outcome = ends[0]["outcome"]
    assert (outcome.stopped_reason, outcome.turns_used, outcome.error) == ("final", 1, None)
    assert outcome.final.content == "all done"
    assert outcome.usage == result.usage
    assert ends[0]["run"].run_id == result.run_id

    async def failing(messages: Any, tools: Any, options: Any) -> ChatResult:
        raise ProviderError("auth", "scripted", "bad key", status=401)

    failing_recorder = HookRecorder()
    agent = lich.Agent(make_test_config(tmp_path), plugins=[("recorder", failing_recorder)],
                       chat=failing)
    with pytest.raises(ProviderError):
        await agent.run("doomed")
    (end,) = [kw["outcome"] for name, kw in failing_recorder.calls if name == "lich_run_end"]
    assert end.stopped_reason == "error"
    assert end.error is not None
    assert "bad key" in end.error


async def test_hook_lich_event(tmp_path: Path) -> None:
    sync_seen: list[Any] = []
    async_seen: list[str] = []

    class SyncObserver:
        def lich_event(self, event: Any) -> None:
            sync_seen.append(event)

    class AsyncObserver:
        async def lich_event(self, event: Any) -> None:
            async_seen.append(event.type)

    class Crashing:
        def lich_event(self) -> None:
            raise RuntimeError("telemetry down")

    chat = ScriptedChat(responder=calls_responder(("echo", {"text": "x"})))
    agent = lich.Agent(
        make_test_config(tmp_path),
        plugins=[("echo", Echo()), ("sync", SyncObserver()), ("async", AsyncObserver()),
                 ("crashing", Crashing())],
        chat=chat,
    )
    result = await agent.run("observe")
    types = [e.type for e in sync_seen]
    assert types[0] == "run_start"
    assert types[-1] == "run_end"
    for expected in ("llm_start", "llm_end", "tool_call_start", "tool_call_end", "final"):
        assert expected in types
    assert types.index("tool_call_start") < types.index("tool_call_end")
    assert [e.seq for e in sync_seen] == list(range(1, len(sync_seen) + 1))
    assert {(e.run_id, e.session_id) for e in sync_seen} == {(result.run_id, result.session_id)}
    # Async implementations were awaited before run() returned, and saw the same events.
    assert async_seen == types
