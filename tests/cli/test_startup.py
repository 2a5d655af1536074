"""Start-up stays cheap: `lich --version` and `lich --help` import nothing heavy, and a plain
run loads no library of a plugin that is not configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lich import __version__
from lich.testing import tool_loop_responder

from .conftest import Server, run_lich, write_config

# Modules that must never be imported just to print the version or the help.
HEAVY = ("httpx", "httpcore", "anyio", "textual", "websockets", "uvicorn", "starlette",
         "prompt_toolkit", "rich", "lich.agent", "lich.loop", "lich.tui")


def _modules_after(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> list[str]:
    code = textwrap.dedent(f'''
        import json, sys
        from lich.cli import main
        try:
            main({args!r})
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
        print(json.dumps(sorted(sys.modules)), file=sys.stderr)
    ''')
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stderr.strip().splitlines()[-1]))


def _heavy(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_version_imports_no_plugin_and_nothing_heavy(work: Path) -> None:
    modules = _modules_after(["--version"], work)

    assert _heavy(modules, HEAVY) == []
    # No plugin is loaded at all, and not even the config machinery.
    assert _heavy(modules, ("lich_providers", "lich_builtin_tools", "lich.gateway", "pluggy",
                            "lich.plugins", "lich.config", "cattrs")) == []


def test_python_dash_m_version_is_just_the_version(work: Path) -> None:
    proc = run_lich("--version", cwd=work)

    assert proc.returncode == 0
    assert proc.stdout == f"lich {__version__}\n"


@pytest.mark.parametrize("args", [["--help"], ["chat", "--help"], ["config", "--help"]])
def test_help_imports_nothing_heavy(work: Path, args: list[str]) -> None:
    modules = _modules_after(args, work)

    # Plugin modules may be imported (their commands belong in the help) but they are
    # cheap: none of them pulls in an HTTP client, Textual or a server.
    assert _heavy(modules, HEAVY) == []


def test_help_lists_every_builtin_command(work: Path) -> None:
    proc = run_lich("--help", cwd=work)

    assert proc.returncode == 0
    builtins = proc.stdout.split("Commands:")[1].split("Plugin commands:")[0]
    for name in ("run", "chat", "demo", "tui", "config", "plugins", "tools", "sessions"):
        assert f"\n  {name} " in builtins
    assert "130" in proc.stdout  # the exit codes are documented in the help


def test_help_lists_the_gateway_plugin_command(work: Path) -> None:
    """The default plugins include the gateway, whose command comes from a hook."""
    from lich.config import BUILTIN_PLUGINS

    if "gateway" not in BUILTIN_PLUGINS:
        pytest.skip("the gateway plugin is not among the default plugins")
    proc = run_lich("--help", cwd=work)

    assert proc.returncode == 0
    assert "gateway" in proc.stdout.split("Plugin commands:")[1]


def test_bare_lich_without_a_terminal_or_input_prints_usage(work: Path) -> None:
    # stdin is a terminal here only in real use; with stdin closed (not a terminal) and empty,
    # lich reads an empty task and says so.
    proc = run_lich(cwd=work, input="")

    assert proc.returncode == 2
    assert "no task" in proc.stderr


# The optional dependencies of builtin plugins that do nothing until configured.
IDLE_DEPENDENCIES = ("nats", "psycopg", "psycopg_pool", "mcp", "opentelemetry", "genai_prices")
# The hooks lich calls on every model call, tool call or event of a run.
PER_TURN_HOOKS = ("lich_before_model_call", "lich_price_call", "lich_before_tool_call",
                  "lich_check_tool_call", "lich_request_approval", "lich_after_tool_call",
                  "lich_event")


def test_a_plain_run_imports_no_dependency_of_an_idle_plugin(
    work: Path, scripted: Callable[..., Server]
) -> None:
    """The default plugins (MCP with no servers, postgres without a DSN, the gateway) and
    the nats bus, enabled and unconfigured: a run with tool calls loads none of their
    libraries."""
    from lich.config import BUILTIN_PLUGINS

    (work / "notes.txt").write_text("a note\n", encoding="utf-8")
    server = scripted(responder=tool_loop_responder(2, "read_file", {"path": "notes.txt"}))
    config = write_config(work, server.base_url, plugins=[*BUILTIN_PLUGINS, "nats"])
    modules = _modules_after(["--config", str(config), "--no-stream", "read the notes"], work)

    assert len(server.requests) == 3  # two tool turns and the answer: the run happened
    assert "lich_providers.openai_compat" in modules
    assert _heavy(modules, IDLE_DEPENDENCIES) == []


def test_unconfigured_plugins_need_no_per_turn_hook(tmp_path: Path) -> None:
    """What a run with the default plugins (and the nats bus) calls per turn: the
    approvals plugin only — nothing of MCP, postgres, the gateway or nats, and the
    budgets check only when a budget is set."""
    from lich.config import BUILTIN_PLUGINS, LichConfig
    from lich.plugins import PluginHost

    host = PluginHost(work_dir=tmp_path)
    reports = host.load([*BUILTIN_PLUGINS, "nats"])
    assert [r.entry for r in reports if r.status != "loaded"] == []

    def needed(config: LichConfig) -> set[str]:
        return {hook for hook in PER_TURN_HOOKS if host.needs(hook, config)}

    plain = LichConfig(work_dir=str(tmp_path))
    # lich_request_approval: the approvals plugin answers what its grants cover, first
    # (asked only when a call needs approval, not every turn).
    assert needed(plain) == {"lich_before_tool_call", "lich_check_tool_call",
                             "lich_request_approval"}
    implementers = {hook: sorted(i.plugin_name for i in getattr(host.pm.hook, hook).get_hookimpls())
                    for hook in PER_TURN_HOOKS}
    assert {hook: names for hook, names in implementers.items() if names} == {
        "lich_before_model_call": ["budgets"],  # idle without a budget (needed_when)
        "lich_before_tool_call": ["approvals"],
        "lich_check_tool_call": ["approvals"],
        "lich_request_approval": ["approvals"],
    }
    for budget in ({"max_cost_usd": 1.0}, {"max_total_tokens": 1000}):
        with_budget = LichConfig(work_dir=str(tmp_path), **budget)  # type: ignore[arg-type]
        assert needed(with_budget) == needed(plain) | {"lich_before_model_call"}
def test_a_run_with_stderr_not_a_terminal_never_imports_rich(
    work: Path, scripted: Any
) -> None:
    # Its progress lines are plain `[lich] …` lines written without rich (B2-cold in
    # docs/performance.md); rich is imported once something needs its console.
    server: Server = scripted(["hello there"])
    write_config(work, server.base_url)
    modules = _modules_after(["say hello"], work)
    assert "lich.agent" in modules  # it did run
    assert _heavy(modules, ("rich",)) == []


def test_rich_decides_when_the_environment_makes_stderr_a_terminal(
    work: Path, scripted: Any
) -> None:
    server: Server = scripted(["hello there"])
    write_config(work, server.base_url)
    env = {**os.environ, "FORCE_COLOR": "1"}
    modules = _modules_after(["say hello"], work, env=env)
    assert "rich.console" in modules


# What a one-shot run (`lich TASK`, stdin not a terminal, the default plugins) never
# imports: the other commands and front ends, the terminal's approval prompt, plugins
# not configured, and — once the entry-point cache is written — importlib.metadata
# (B2-cold in docs/performance.md).
ONE_SHOT_NEVER = ("importlib.metadata", "lich.cli.approve", "lich.cli.chat", "lich.cli.tui",
                  "lich.tui", "lich.cli.sessions", "lich.cli.config", "lich.cli.plugins",
                  "lich.cli.demo", "lich.gateway.app", "lich.gateway.runner", "lich.mcp.client",
                  "lich.mcp.serve", "lich.otel", "lich.prices", "lich.nats_bus", "textual",
                  "prompt_toolkit", "uvicorn", "starlette")


def test_a_one_shot_run_stays_within_its_import_budget(work: Path, scripted: Any) -> None:
    """Which modules a warm one-shot run imports, and which structure functions cattrs
    generates: only those of the config sections the file has (no `[gateway]`, `[mcp]`
    or `tools` table here, so none for them)."""
    server: Server = scripted(["hello there"] * 3)
    write_config(work, server.base_url)
    env = {**os.environ, "XDG_CACHE_HOME": str(work.parent / "cache")}
    code = textwrap.dedent('''
        import json, linecache, sys
        from lich.cli import main
        try:
            main(["--no-stream", "say hello"])
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
        generated = sorted(k for k in linecache.cache if "cattrs generated structure" in k)
        print(json.dumps([sorted(sys.modules), generated]), file=sys.stderr)
    ''')

    def run() -> tuple[list[str], list[str]]:
        proc = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True,
                              text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        modules, generated = json.loads(proc.stderr.strip().splitlines()[-1])
        return modules, generated

    run()  # creates .lich/sessions in the work dir (on sys.path: `python -c`)
    settled = time.time() - 3600  # the entry-point cache stores only a settled state
    os.utime(work, (settled, settled))
    run()  # writes the entry-point cache
    modules, generated = run()

    assert len(server.requests) == 3
    assert "lich.agent" in modules
    assert "lich_providers.openai_compat" in modules
    assert _heavy(modules, ONE_SHOT_NEVER) == []
    assert [name.rsplit(" ", 1)[-1].rstrip(">") for name in generated] == [
        "lich.config.LichConfig", "lich.config.ProviderConfig"]
