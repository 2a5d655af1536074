"""The plugin zoo (``zoo/``, see its README): every kind of broken plugin at once.

The CLI is run as a real subprocess (``python -m lich``, the zoo listed in the
config's ``plugins``: a ``--plugin`` entry that fails would stop the run, by design)
against a scripted model server on 127.0.0.1 with the whole zoo loaded: the run must end
``final``, every load failure must be reported with its plugin named, every
run-time failure must land where the design says (before-hooks fail closed,
after-hooks and observers fail open, tool failures are results), and the process
must exit — a plugin thread blocked for an hour must not keep it alive.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lich_env import lich_env

from lich.agent import Agent
from lich.config import ConfigError
from lich.guards import DEFAULT_MAX_OUTPUT_CHARS
from lich.testing import Reply, ScriptedModel, ScriptedServer, ScriptRequest, make_test_config
from lich.types import ToolCall

from .conftest import TALLY, check_pairs, read_session

ZOO = Path(__file__).parent / "zoo"
# Everything but router_raises, whose failure is fatal by design (tested on its own).
ZOO_ENTRIES = [
    *sorted(str(p) for p in ZOO.glob("*.py") if p.name != "router_raises.py"),
    str(ZOO / "again" / "good_tools.py"),
]
HOOK_TIMEOUT_S = 1

# What each plugin that cannot load must be reported as: (status, phase, error text).
LOAD_FAILURES = {
    "import_error.py": ("failed", "import", "No module named 'lich_zoo_no_such_module'"),
    "syntax_error.py": ("failed", "import", "syntax_error.py:3"),
    "raises_at_import.py": ("failed", "import", "exploded at import"),
    "unknown_hook.py": ("failed", "validate", "lich_register_tool "),
    "unknown_arg.py": ("failed", "validate", "toolbox"),
    "half_registers.py": ("failed", "register", "gave up after registering zoo_half"),
    "fails_later.py": ("failed", "register", "could not register its providers"),
    "again/good_tools.py": ("skipped", "register", "duplicate_plugin_name: good_tools"),
}

# The calls the scripted model makes, in order, and what each must come back as:
# (tool, text) -> (ok, blocked_by, a piece of the content the model sees).
CALLS: list[tuple[tuple[str, str], tuple[bool, str | None, str]]] = [
    (("zoo_echo", "plain"), (True, None, "echo: plain")),
    (("zoo_echo", "before_raises"),
     (False, "before_raises", "hook_error (before_raises): RuntimeError: before_raises refuses")),
    (("zoo_echo", "before_hangs"),
     (False, "before_hangs", f"hook_error (before_hangs): timed out after {HOOK_TIMEOUT_S}s")),
    (("zoo_echo", "before_hangs_async"),
     (False, "before_hangs_async",
      f"hook_error (before_hangs_async): timed out after {HOOK_TIMEOUT_S}s")),
    (("zoo_echo", "before_wrong_type"),
     (False, "before_wrong_type", "lich_before_tool_call returned str")),
    (("zoo_echo", "after_raises"), (True, None, "echo: after_raises")),
    (("zoo_raises", "x"), (False, None, "ValueError: zoo_raises cannot handle 'x'")),
    (("zoo_hangs", "x"), (False, None, "timeout: tool:zoo_hangs exceeded 1s")),
    (("zoo_floods", "x"), (True, None, "[... truncated, 104837600 chars omitted ...]")),
    (("zoo_bad_result", "x"),
     (False, None, "bad_tool_result: zoo_bad_result returned dict, not ToolResult")),
    (("zoo_half", "x"), (False, None, "unknown_tool: zoo_half")),
    (("zoo_later", "x"), (False, None, "unknown_tool: zoo_later")),
]


def respond(request: ScriptRequest) -> Reply:
    done = request.tool_results_since_user()
    if len(done) < len(CALLS):
        (name, text), _ = CALLS[len(done)]
        return Reply(tool_calls=(ToolCall(f"call_{len(done)}", name, {"text": text}),))
    return Reply(f"survived {len(done)} calls")


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(ScriptedModel(responder=respond)) as s:
        yield s


@pytest.fixture
def work(tmp_path: Path, server: ScriptedServer) -> Path:
    work = tmp_path / "work"
    (work / ".lich").mkdir(parents=True)
    (work / ".lich" / "config.toml").write_text(
        f"hook_timeout_s = {HOOK_TIMEOUT_S}\n"
        "[[providers]]\nkind = \"openai_compat\"\nname = \"scripted\"\nmodel = \"m\"\n"
        f"base_url = \"{server.base_url}\"\n"
        # The zoo's tools are not declared read-only: without a rule every call would
        # ask (and, with no one to ask, be refused) before a hook or tool could misbehave.
        "[approvals]\nallow = [\"zoo_*\"]\n",
        encoding="utf-8",
    )
    return work


def lich(work: Path, *args: str, entries: list[str] = ZOO_ENTRIES,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m lich ARGS`` in ``work`` with ``entries`` added to the config's
    plugins (where a failing plugin is warned about, not fatal as with ``--plugin``);
    a hang fails the test (TimeoutExpired) instead of blocking the suite."""
    config = work / ".lich" / "config.toml"
    base = config.read_text(encoding="utf-8")
    if base.startswith("plugins = "):
        base = base.split("\n", 1)[1]
    config.write_text(f"plugins = {json.dumps(['+' + e for e in entries])}\n{base}",
                      encoding="utf-8")
    env = lich_env(work.parent / "home")
    return subprocess.run(
        [sys.executable, "-m", "lich", *args], cwd=work, capture_output=True,
        text=True, timeout=timeout, env=env,
    )


def test_the_cli_runs_with_the_whole_zoo_loaded(work: Path) -> None:
    proc = lich(work, "--json", "--max-turns", str(len(CALLS) + 2), "run", "go")
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    ends = [e for e in events if e["type"] == "tool_call_end"]
    assert [(e["call"]["name"], e["call"]["args"]["text"]) for e in ends] == [c for c, _ in CALLS]
    for event, (call, (ok, blocked_by, content)) in zip(ends, CALLS, strict=True):
        result = event["result"]
        assert result["ok"] is ok, (call, result)
        assert event["blocked_by"] == blocked_by, (call, event)
        assert content in (result.get("error") or result["output"]), (call, result)
    flood = next(e for e in ends if e["call"]["name"] == "zoo_floods")["result"]["output"]
    assert len(flood) < DEFAULT_MAX_OUTPUT_CHARS + 100  # clamped, not 100 MB
    run_end = events[-1]
    assert (run_end["type"], run_end["stopped_reason"]) == ("run_end", "final")

    # Each load failure on stderr, with its plugin named; each fail-open observer too.
    for name, (status, phase, _text) in LOAD_FAILURES.items():
        verb = "was skipped" if status == "skipped" else "failed to load"
        assert f"{ZOO / name}' {verb} ({phase}:" in proc.stderr, name
    assert "lich_after_tool_call of plugin after_raises failed (skipped)" in proc.stderr
    assert "lich_run_start of plugin event_raises failed (skipped)" in proc.stderr
    assert "lich_run_end of plugin event_raises failed (skipped)" in proc.stderr
    # event_raises fails on every event of the run (dozens): one warning, not one per event.
    assert proc.stderr.count("lich_event of plugin event_raises failed") == 1

    # The transcript: every call answered, the flood clamped there too.
    session = run_end["session_id"]
    contents = read_session(work / ".lich" / "sessions", session)
    check_pairs(contents.messages)
    assert max(len(m.content) for m in contents.messages) < DEFAULT_MAX_OUTPUT_CHARS + 200
    TALLY["zoo plugins tried"] += len(ZOO_ENTRIES) + 1  # + router_raises, below
    TALLY["zoo run-time failures survived"] += len(CALLS) - 2


def test_lich_plugins_names_every_failure(work: Path) -> None:
    proc = lich(work, "plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    reports = {r["entry"]: r for r in json.loads(proc.stdout)}
    for name, (status, phase, text) in LOAD_FAILURES.items():
        report = reports[str(ZOO / name)]
        assert (report["status"], report["phase"]) == (status, phase), report
        assert text in report["error_message"], report
        assert report["hooks"] == []
    loaded = {r["plugin"] for r in reports.values() if r["status"] == "loaded"}
    assert {"good_tools", "duplicate_tool", "before_raises", "before_hangs", "after_raises",
            "event_raises", "tool_raises", "tool_hangs", "tool_floods"} <= loaded
    # The later plugin registers first and keeps zoo_echo; the other is told.
    assert reports[str(ZOO / "good_tools.py")]["warnings"] == [] or reports[
        str(ZOO / "duplicate_tool.py")]["warnings"] == []
    warned = [w for r in reports.values() for w in r["warnings"]
              if w.startswith("duplicate_tool: zoo_echo (already registered by ")
              and w.endswith("; skipped")]
    assert len(warned) == 1

    strict = lich(work, "plugins", "--strict-plugins")
    assert strict.returncode != 0
    for name in LOAD_FAILURES:
        assert str(ZOO / name) in strict.stdout + strict.stderr, name

    tools = lich(work, "tools", "--json")
    assert tools.returncode == 0, tools.stderr
    owners = {t["name"]: t["plugin"] for t in json.loads(tools.stdout)}
    assert "zoo_half" not in owners
    assert "zoo_later" not in owners
    assert list(owners).count("zoo_echo") == 1
    assert owners["zoo_raises"] == "tool_raises"
    assert owners["zoo_hangs"] == "tool_hangs"
    assert owners["read_file"] == "builtin_tools"


def test_a_raising_router_plugin_is_a_configuration_error_naming_it(work: Path) -> None:
    """``lich_make_router`` failures propagate by design — as a configuration error
    (exit 2, one line naming the plugin), not as a traceback."""
    proc = lich(work, "run", "hi", entries=[str(ZOO / "router_raises.py")])
    assert proc.returncode == 2, proc.stderr
    assert "lich_make_router of plugin 'router_raises' failed: RuntimeError: router_raises " \
        "cannot route" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_failed_plugin_leaves_nothing_behind(tmp_path: Path) -> None:
    """In process: the half-registered tool, the tool of a plugin that failed in a later
    registration hook, and every hook of both are gone; the healthy plugins keep theirs."""
    from lich.config import ProviderConfig

    # A real provider (never called): provider registration runs, where fails_later fails.
    config = make_test_config(
        tmp_path, plugins=("openai_compat", *ZOO_ENTRIES),
        providers=(ProviderConfig(kind="openai_compat", name="p", model="m",
                                  base_url="http://127.0.0.1:9/v1"),),
    )
    agent = Agent(config)
    names = agent.tools.names()
    assert "zoo_half" not in names
    assert "zoo_later" not in names
    assert {"zoo_echo", "zoo_raises", "zoo_hangs", "zoo_floods", "zoo_bad_result"} <= set(names)
    for plugin in ("half_registers", "fails_later", "import_error", "unknown_hook",
                   "unknown_arg"):
        assert agent.host.pm.get_plugin(plugin) is None, plugin
    for spec in ("lich_register_tools", "lich_register_providers", "lich_before_tool_call"):
        owners = {impl.plugin_name for impl in getattr(agent.host.pm.hook, spec).get_hookimpls()}
        assert not owners & {"half_registers", "fails_later"}, spec
    failed = {r.plugin for r in agent.host.failures}
    assert {"half_registers", "fails_later", "import_error", "syntax_error", "raises_at_import",
            "unknown_hook", "unknown_arg", "good_tools"} <= failed


def test_a_raising_router_plugin_in_process(tmp_path: Path) -> None:
    from lich.config import ProviderConfig

    config = make_test_config(
        tmp_path, plugins=("openai_compat", str(ZOO / "router_raises.py")),
        providers=(ProviderConfig(kind="openai_compat", name="p", model="m",
                                  base_url="http://127.0.0.1:9/v1"),),
    )
    with pytest.raises(ConfigError, match="router_raises"):
        Agent(config)
