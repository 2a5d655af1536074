"""The plugin host: loading entries, load reports, failures as data, strict mode."""

from __future__ import annotations

import importlib.metadata
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import click
import pytest

import lich
import lich.plugins.loading
from lich import Block, ToolResult, hookimpl, tool
from lich.agent import Agent, build_tool_registry
from lich.hooks import RunInfo
from lich.plugins import PluginHost, PluginLoadError, available_plugins
from lich.providers import ProviderRegistry
from lich.testing import ScriptedChat, make_test_config
from lich.tools import ToolRegistry
from lich.types import ToolCall

from .conftest import FIXTURES


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A work dir holding copies of the fixture plugins (entries are relative to it)."""
    plugins = tmp_path / "plugins"
    shutil.copytree(FIXTURES, plugins)
    return tmp_path


def host_in(work: Path, **kw: Any) -> PluginHost:
    return PluginHost(work_dir=work, **kw)


def run_info(work: Path) -> RunInfo:
    return RunInfo("run1", "sess1", "input", str(work))


def tools_of(host: PluginHost, work: Path) -> ToolRegistry:
    return build_tool_registry(host, make_test_config(work))


# ------------------------------------------------------------------ sources


def test_entry_point_plugin_reports_its_distribution() -> None:
    host = PluginHost()
    (report,) = host.load(["builtin_tools"])
    assert report.status == "loaded"
    assert report.ok
    assert report.source == "entry_point"
    assert report.plugin == "builtin_tools"
    assert report.distribution == "lich-agent"
    assert report.version == lich.__version__
    assert "lich_register_tools" in report.hooks
    assert report.phase is None
    assert report.error_message is None


def test_an_entry_point_installed_after_the_first_scan_is_found(
    fixtures_on_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    PluginHost().load(["builtin_tools"])  # the entry points have been scanned once
    # Whatever the scan below caches is put back afterwards.
    monkeypatch.setattr(lich.plugins.loading, "_EP_CACHE", lich.plugins.loading._EP_CACHE)
    real = importlib.metadata.entry_points
    late = importlib.metadata.EntryPoint("late_plugin", "lich_fixture_mod", "lich")

    def with_late(**kw: Any) -> Any:
        found = list(real(**kw))
        return [*found, late] if kw.get("group") == "lich" else found

    monkeypatch.setattr(importlib.metadata, "entry_points", with_late)
    (report,) = PluginHost().load(["late_plugin"])
    assert report.status == "loaded", report.describe_error()
    assert report.source == "entry_point"
    assert report.resolved == "lich_fixture_mod"


def test_file_plugin_relative_to_the_work_dir(work: Path) -> None:
    host = host_in(work)
    (report,) = host.load(["plugins/good_plugin.py"])
    assert report.status == "loaded", report.describe_error()
    assert report.source == "file"
    assert report.plugin == "good_plugin"
    assert report.resolved == str((work / "plugins" / "good_plugin.py").resolve())
    assert report.hooks == ("lich_before_tool_call", "lich_register_tools")
    assert report.load_ms >= 0
    assert tools_of(host, work).names() == ["fixture_echo"]
    assert host.plugin_names() == ["good_plugin"]


def test_file_plugin_reports_its_own_version(work: Path) -> None:
    plugin = work / "versioned.py"
    plugin.write_text('__version__ = "2.3.1"\n\ndef lich_run_start(run):\n    pass\n')
    (report,) = host_in(work).load(["versioned.py"])
    assert report.status == "loaded", report.describe_error()
    assert (report.distribution, report.version) == (None, "2.3.1")


def test_module_plugin_of_an_installed_distribution_reports_it() -> None:
    # lich_builtin_tools is also importable as a plain module; its distribution is lich's
    # (lich-agent).
    (distribution,) = set(importlib.metadata.packages_distributions()["lich_builtin_tools"])
    (report,) = PluginHost().load(["lich_builtin_tools"])
    assert report.source == "module"
    assert report.distribution == distribution
    assert report.version == importlib.metadata.version(distribution)


def test_file_plugin_by_absolute_path(work: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (report,) = host_in(elsewhere).load([str(work / "plugins" / "good_plugin.py")])
    assert report.status == "loaded"


def test_module_plugin_by_dotted_name(fixtures_on_path: Path) -> None:
    host = PluginHost()
    (report,) = host.load(["lich_fixture_mod"])
    assert report.status == "loaded", report.describe_error()
    assert report.source == "module"
    assert report.plugin == "lich_fixture_mod"
    assert report.hooks == ("lich_run_start",)  # an unmarked lich_* function counts


async def test_module_plugin_hook_is_called(fixtures_on_path: Path, tmp_path: Path) -> None:
    host = PluginHost()
    host.load(["lich_fixture_mod"])
    module = sys.modules["lich_fixture_mod"]
    await host.run_start(run_info(tmp_path))
    assert module.STARTED == ["run1"]


def test_in_process_objects_are_plugins_too(tmp_path: Path) -> None:
    class Namespace:
        @hookimpl
        def lich_run_start(self, run: RunInfo) -> None:
            pass

    host = PluginHost()
    report = host.register_object(Namespace(), "ns")
    assert report.status == "loaded"
    assert report.source == "object"
    again = host.register_object(Namespace(), "ns")
    assert again.status == "skipped"
    assert again.error_message == "duplicate_plugin_name: ns"


# ------------------------------------------------------------------ failures are data


def test_unknown_entry_fails_at_resolve(work: Path) -> None:
    (report,) = host_in(work).load(["no_such_plugin_anywhere"])
    assert report.status == "failed"
    assert report.phase == "resolve"
    assert report.error_type == "LookupError"
    assert "no_such_plugin_anywhere" in (report.error_message or "")


def test_missing_file_fails_at_resolve(work: Path) -> None:
    (report,) = host_in(work).load(["plugins/absent.py"])
    assert report.status == "failed"
    assert report.phase == "resolve"
    assert report.error_type == "FileNotFoundError"
    assert "absent.py" in (report.error_message or "")


def test_empty_entry_fails_at_resolve(work: Path) -> None:
    (report,) = host_in(work).load(["  "])
    assert report.phase == "resolve"
    assert report.error_message == "empty plugin entry"


def test_import_error_fails_at_import(work: Path) -> None:
    (report,) = host_in(work).load(["plugins/import_error_plugin.py"])
    assert report.status == "failed"
    assert report.phase == "import"
    assert report.error_type == "ModuleNotFoundError"
    assert "lich_no_such_dependency" in (report.error_message or "")
    assert report.describe_error().startswith("import: ModuleNotFoundError: ")


def test_syntax_error_fails_at_import_naming_the_line(work: Path) -> None:
    (work / "broken.py").write_text("from lich import hookimpl\n\ndef lich_run_start(:\n    pass\n")
    (report,) = host_in(work).load(["broken.py"])
    assert report.status == "failed"
    assert report.phase == "import"
    assert report.error_type == "SyntaxError"
    assert "broken.py:3" in (report.error_message or "")


def test_a_plugin_raising_at_import_time_fails_cleanly(work: Path) -> None:
    (work / "raises.py").write_text("raise RuntimeError('no config for me')\n")
    (report,) = host_in(work).load(["raises.py"])
    assert (report.phase, report.error_type) == ("import", "RuntimeError")
    assert report.error_message == "no config for me"
    # A failed file import leaves no half-initialised module behind.
    assert not [m for m in sys.modules if m.startswith("_lich_plugin_raises_")]


@pytest.mark.parametrize("marker", ["wrapper=True", "hookwrapper=True"])
def test_a_hook_wrapper_fails_validation_instead_of_being_ignored(
    work: Path, marker: str
) -> None:
    (work / "wrapping.py").write_text(textwrap.dedent(f"""
        from lich import hookimpl

        @hookimpl({marker})
        def lich_before_tool_call(call):
            outcome = yield
            return outcome

        @hookimpl
        def lich_run_start(run):
            pass
    """))
    host = host_in(work)
    (report,) = host.load(["wrapping.py"])
    assert (report.status, report.phase, report.error_type) == (
        "failed", "validate", "UnsupportedHookWrapper")
    assert report.error_message == (
        "hook wrappers (wrapper=True / hookwrapper=True) are not supported for "
        "lich_before_tool_call; implement the hook plainly (see docs/plugins.md)")
    assert host.pm.get_plugin("wrapping") is None
    assert not host.has_impls("lich_run_start")  # nothing of it stays


def test_unknown_hook_name_fails_validation_and_registers_nothing(work: Path) -> None:
    host = host_in(work)
    (report,) = host.load(["plugins/unknown_hook_plugin.py"])
    assert report.status == "failed"
    assert report.phase == "validate"
    assert report.error_type == "UnknownHook"
    assert report.error_message == (
        "no hook specification named lich_before_tool (did you mean "
        "'lich_before_tool_call'?) (hooks start with lich_; a plugin's own hooks need "
        "that plugin loaded; see docs/plugins.md)"
    )
    assert host.pm.get_plugin("unknown_hook_plugin") is None


async def test_hookimpl_asking_for_an_unknown_argument_fails_validation_whole(work: Path) -> None:
    # bad_args_plugin also has a *valid* before-hook that blocks everything: after the
    # failed load it must be gone, or it would still block every tool call.
    host = host_in(work)
    (report,) = host.load(["plugins/bad_args_plugin.py"])
    assert report.status == "failed"
    assert report.phase == "validate"
    assert report.error_type == "PluginValidationError"
    # The hook's own arguments are named, so the fix is plain.
    assert report.error_message == (
        "lich_run_start(run, budget): 'budget' is not an argument of lich_run_start, "
        "which takes (run)"
    )
    assert host.pm.get_plugin("bad_args_plugin") is None
    assert not host.has_impls("lich_before_tool_call")
    decision = await host.before_tool_call(ToolCall("1", "anything", {}), run_info(work))
    assert decision.blocked_by is None
    # The name is free again: a fixed version of the plugin could load under it.
    (work / "fixed").mkdir()
    (work / "fixed" / "bad_args_plugin.py").write_text("def lich_run_start(run):\n    pass\n")
    (again,) = host.load(["fixed/bad_args_plugin.py"])
    assert again.status == "loaded", again.describe_error()


def test_duplicate_plugin_is_skipped(work: Path) -> None:
    host = host_in(work)
    first, second = host.load(["plugins/good_plugin.py", "plugins/good_plugin.py"])
    assert first.status == "loaded"
    assert second.status == "skipped"
    assert second.phase == "register"
    assert second.error_message == "duplicate_plugin_name: good_plugin"
    assert tools_of(host, work).names() == ["fixture_echo"]


def test_duplicate_tool_is_reported_and_skipped_first_registration_wins(work: Path) -> None:
    # Registration hooks run in pluggy order (the plugin loaded last first), so a later
    # plugin's tool takes the name and the earlier plugin's duplicate is reported and skipped.
    host = host_in(work)
    host.load(["plugins/good_plugin.py", "plugins/dup_tool_plugin.py"])
    registry = tools_of(host, work)
    assert sorted(registry.names()) == ["dup_own", "fixture_echo"]
    assert registry.get("fixture_echo").plugin == "dup_tool_plugin"  # type: ignore[union-attr]
    good = next(r for r in host.reports if r.plugin == "good_plugin")
    assert good.status == "loaded"  # the rest of the plugin is fine
    assert good.warnings == (
        "duplicate_tool: fixture_echo (already registered by dup_tool_plugin); skipped",)
    dup = next(r for r in host.reports if r.plugin == "dup_tool_plugin")
    assert dup.warnings == ()


async def test_registration_hook_raising_leaves_nothing_behind(work: Path) -> None:
    host = host_in(work)
    host.load(["plugins/good_plugin.py", "plugins/raising_register_plugin.py"])
    providers = ProviderRegistry()
    host.register_providers(providers)
    assert "half_kind" in providers.kinds()  # registered before the failure below

    registry = tools_of(host, work)

    assert registry.names() == ["fixture_echo"]  # half_tool is gone
    assert "half_kind" not in providers.kinds()  # and so is its provider kind
    report = next(r for r in host.reports if r.plugin == "raising_register_plugin")
    assert report.status == "failed"
    assert report.phase == "register"
    assert report.error_type == "RuntimeError"
    assert report.error_message == "registration exploded"
    assert host.pm.get_plugin("raising_register_plugin") is None
    # Its before-hook went with it: nothing blocks an ordinary call.
    decision = await host.before_tool_call(ToolCall("1", "fixture_echo", {}), run_info(work))
    assert decision.blocked_by is None
    assert host.plugin_names() == ["good_plugin"]


def test_loading_never_raises_and_good_plugins_still_load(work: Path) -> None:
    (work / "broken.py").write_text("def (")
    entries = [
        "plugins/import_error_plugin.py",
        "broken.py",
        "plugins/good_plugin.py",
        "nowhere_to_be_found",
        "plugins/unknown_hook_plugin.py",
        "plugins/bad_args_plugin.py",
        "plugins/good_plugin.py",
    ]
    host = host_in(work)
    reports = host.load(entries)
    assert [r.entry for r in reports] == entries
    assert [r.status for r in reports] == [
        "failed", "failed", "loaded", "failed", "failed", "failed", "skipped",
    ]  # fmt: skip
    assert [r.phase for r in reports] == [
        "import", "import", None, "resolve", "validate", "validate", "register",
    ]  # fmt: skip
    assert host.plugin_names() == ["good_plugin"]
    assert len(host.failures) == 6


def test_strict_mode_lists_every_failure(work: Path) -> None:
    host = host_in(work)
    host.load(["plugins/good_plugin.py", "plugins/import_error_plugin.py", "ghost_plugin"])
    with pytest.raises(PluginLoadError) as info:
        host.raise_if_failed()
    text = str(info.value)
    assert "plugins/import_error_plugin.py: import: ModuleNotFoundError" in text
    assert "ghost_plugin: resolve: LookupError" in text
    assert "good_plugin.py:" not in text
    failed = [r.entry for r in info.value.reports]
    assert failed == ["plugins/import_error_plugin.py", "ghost_plugin"]


def test_strict_mode_in_the_agent(work: Path) -> None:
    config = make_test_config(
        work, plugins=("plugins/good_plugin.py", "plugins/bad_args_plugin.py", "ghost_plugin"),
        strict_plugins=True,
    )
    with pytest.raises(PluginLoadError) as info:
        Agent(config, chat=ScriptedChat())
    assert len(info.value.reports) == 2
    assert "bad_args_plugin.py: validate:" in str(info.value)
    # Not strict: the same config builds an agent, failures stay in the reports.
    agent = Agent(make_test_config(work, plugins=config.plugins), chat=ScriptedChat())
    assert [r.status for r in agent.host.reports] == ["loaded", "failed", "failed"]
    assert agent.tools.names() == ["fixture_echo"]


def test_strict_mode_reports_a_registration_failure_too(work: Path) -> None:
    config = make_test_config(
        work, plugins=("plugins/raising_register_plugin.py",), strict_plugins=True
    )
    with pytest.raises(PluginLoadError, match="registration exploded"):
        Agent(config, chat=ScriptedChat())


# ------------------------------------------------------------------ hooks, sync and async


def _assert_async_registration_works(tmp_path: Path) -> None:
    @tool
    def from_async() -> str:
        """Registered by an async hook."""
        return "ok"

    class AsyncPlugin:
        @hookimpl
        async def lich_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(from_async)

    host = PluginHost()
    host.register_object(AsyncPlugin(), "async_plugin")
    assert tools_of(host, tmp_path).names() == ["from_async"]


def test_async_registration_hooks_work_inside_and_outside_an_event_loop(tmp_path: Path) -> None:
    _assert_async_registration_works(tmp_path)  # no running loop: the host runs one


async def test_async_registration_hook_inside_a_running_loop(tmp_path: Path) -> None:
    _assert_async_registration_works(tmp_path)  # inside a loop: the host uses a helper loop


async def test_hooks_may_take_fewer_arguments_than_the_spec(tmp_path: Path) -> None:
    seen: list[Any] = []

    class Minimal:
        @hookimpl
        def lich_after_tool_call(self, result: ToolResult) -> None:
            seen.append(result)

        @hookimpl
        def lich_before_tool_call(self) -> Block:
            return Block("no arguments needed")

    host = PluginHost()
    assert host.register_object(Minimal(), "minimal").status == "loaded"
    decision = await host.before_tool_call(ToolCall("1", "t", {}), run_info(tmp_path))
    assert decision.reason == "no arguments needed"
    await host.after_tool_call(ToolCall("1", "t", {}), ToolResult.success("r"), run_info(tmp_path))
    assert seen == [ToolResult.success("r")]


def test_available_plugins_lists_the_builtins_from_metadata() -> None:
    names = {p.name: p for p in available_plugins()}
    for builtin in ("builtin_tools", "openai_compat", "anthropic", "ollama", "failover"):
        assert builtin in names
        assert names[builtin].distribution == "lich-agent"


def test_file_plugin_source_code_path_is_not_a_module_name(work: Path) -> None:
    # "x/y.py" must be read as a path even though "x" might be an importable package.
    (work / "json").mkdir()
    (work / "json" / "plug.py").write_text(
        textwrap.dedent(
            """
            def lich_run_end(run, outcome):
                pass
            """
        )
    )
    (report,) = host_in(work).load(["json/plug.py"])
    assert report.source == "file"
    assert report.status == "loaded"


def test_a_hook_argument_error_says_what_the_hook_takes(work: Path) -> None:
    (work / "wrong_args.py").write_text(
        "def lich_before_tool_call(tool_call, runinfo, budget=None):\n"
        "    return None\n",
        encoding="utf-8",
    )
    # (An argument with a default is not asked for, as pluggy counts them.)
    (report,) = host_in(work).load(["wrong_args.py"])
    assert (report.status, report.phase) == ("failed", "validate")
    assert report.error_message == (
        "lich_before_tool_call(tool_call, runinfo): 'tool_call', 'runinfo' are not "
        "arguments of lich_before_tool_call, which takes (call, run)"
    )


def test_a_command_name_taken_by_another_plugin_is_reported(work: Path) -> None:
    for name in ("first", "second"):
        (work / f"{name}.py").write_text(
            "import click\n"
            "def lich_register_commands(cli):\n"
            f"    @cli.command('hello')\n"
            f"    def hello():\n"
            f"        click.echo({name!r})\n",
            encoding="utf-8",
        )
    host = host_in(work)
    host.load(["first.py", "second.py"])
    group = click.Group("scratch")
    host.register_commands(group)
    # One of them keeps the name (pluggy calls later plugins first); the other is told.
    kept = group.commands["hello"].callback
    assert kept is not None
    warned = [r for r in host.reports if r.warnings]
    assert len(warned) == 1
    (warning,) = warned[0].warnings
    assert warning.startswith("command_name_taken: command 'hello' not added; plugin ")
    assert warned[0].plugin not in warning


def test_the_host_does_not_keep_the_registries_of_agents_it_assembled(tmp_path: Path) -> None:
    """Every assembly (each ``/model`` switch) fills new registries on the same host; the
    host only keeps them while they live, and still undoes a failed plugin in the live one."""
    import gc
    import weakref

    class Tools:
        @hookimpl
        def lich_register_tools(self, registry: ToolRegistry) -> None:
            @tool
            def ping() -> str:
                """Ping."""
                return "pong"

            registry.register(ping)

    host = PluginHost(work_dir=tmp_path)
    host.register_object(Tools(), "tools")
    config = make_test_config(tmp_path)
    dropped = []
    for _ in range(50):
        registry = ToolRegistry()
        host.register_tools(registry, config)
        dropped.append(weakref.ref(registry))
        del registry
    gc.collect()
    assert all(ref() is None for ref in dropped)
    assert len(host._undo) <= 1

    live = ToolRegistry()
    host.register_tools(live, config)
    assert live.has("ping")
    host._forget_everywhere("tools")
    assert not live.has("ping")
