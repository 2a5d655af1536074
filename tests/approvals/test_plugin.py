"""The builtin ``approvals`` plugin in real agent runs: its precedence, the defaults of
each mode, the deny rules applied again to final arguments, and its settings."""

from __future__ import annotations

import asyncio
import gc
import shutil
from pathlib import Path
from typing import Any

import pytest

from lich import Ask, Block, Rewrite, hookimpl
from lich.agent import Agent
from lich.approvals import plugin as approvals
from lich.config import BUILTIN_PLUGINS, ConfigError, LichConfig
from lich.gateway.config import GatewayConfig
from lich.gateway.runner import gateway_agent_config
from lich.hooks import RunInfo
from lich.testing import ScriptedChat
from lich.testing.scripted import Reply
from lich.tools import Tool, tool
from lich.types import ToolCall, ToolMessage, ToolResult


def _config(work: Path, **approvals_table: Any) -> LichConfig:
    return LichConfig(work_dir=str(work), persist_sessions=False,
                      tables={"approvals": approvals_table})


def _run(config: LichConfig, calls: list[tuple[str, dict[str, Any]]],
         plugins: list[tuple[str, object]] | None = None) -> list[ToolMessage]:
    import asyncio

    script = Reply("", tuple(ToolCall(f"c{i}", name, args) for i, (name, args) in
                             enumerate(calls)))
    agent = Agent(config, chat=ScriptedChat([script, "done"]), plugins=plugins or [])
    result = asyncio.run(agent.run("go"))
    return [m for m in result.messages if isinstance(m, ToolMessage)]


def _term(command: str) -> tuple[str, dict[str, Any]]:
    return ("terminal", {"command": command})


def test_the_default_asks_before_terminal_and_writes_and_allows_reads(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    results = _run(_config(tmp_path), [
        ("read_file", {"path": "notes.txt"}),
        ("write_file", {"path": "new.txt", "content": "x"}),
        ("edit_file", {"path": "notes.txt", "old_string": "hello", "new_string": "bye"}),
        _term("touch ran"),
        ("list_dir", {"path": "."}),
    ])
    assert "hello" in results[0].content
    assert not (tmp_path / "new.txt").exists()
    assert (tmp_path / "notes.txt").read_text() == "hello\n"
    assert not (tmp_path / "ran").exists()
    assert all('"ok": false' in r.content for r in results[1:4])
    assert "notes.txt" in results[4].content


def test_deny_beats_ask_beats_allow(tmp_path: Path) -> None:
    config = _config(tmp_path, allow=["terminal"], ask=["terminal(touch asked*)"],
                     deny=["terminal(touch denied*)"])
    results = _run(config, [_term("touch allowed"), _term("touch asked"),
                            _term("touch denied"), _term("touch allowed2 && touch denied2")])
    assert (tmp_path / "allowed").exists()
    assert not (tmp_path / "asked").exists()
    assert not (tmp_path / "denied").exists()
    assert ("blocked_by_plugin: approval_rule: denied by deny rule terminal(touch denied*)"
            in results[2].content)
    # A deny rule meets a compound line through any of its parts: nothing of it runs.
    assert "denied by deny rule" in results[3].content
    assert not (tmp_path / "allowed2").exists()


def test_an_allow_rule_covers_only_what_it_names(tmp_path: Path) -> None:
    config = _config(tmp_path, allow=["terminal(touch ok*)", "write_file(src/*)"])
    _run(config, [_term("touch ok1"), _term("touch ok2; touch sneaky"),
                  _term("touch ok3 $(touch sneaky2)"), _term("touch ok4 > redirected"),
                  _term(f"{shutil.which('touch')} ok5"),
                  ("write_file", {"path": "src/a.py", "content": "a"}),
                  ("write_file", {"path": "src/../top.py", "content": "b"})])
    assert (tmp_path / "ok1").exists()
    assert not (tmp_path / "ok2").exists()
    assert not (tmp_path / "sneaky").exists()
    assert not (tmp_path / "ok3").exists()
    assert not (tmp_path / "sneaky2").exists()
    assert not (tmp_path / "ok4").exists()
    assert not (tmp_path / "redirected").exists()
    assert (tmp_path / "ok5").exists()  # an absolute program, by its basename
    assert (tmp_path / "src" / "a.py").read_text() == "a"
    assert not (tmp_path / "top.py").exists()


class _Tools:
    """Two plugin tools that write a marker: one plain, one requiring approval."""

    def __init__(self, work: Path) -> None:
        @tool
        def mark(name: str) -> str:
            """Create a marker file."""
            (work / name).touch()
            return "marked"

        @tool(requires_approval=True)
        def mark_carefully(name: str) -> str:
            """Create a marker file, carefully."""
            (work / name).touch()
            return "marked"

        @tool(read_only=True)
        def peek() -> str:
            """Look."""
            return "seen"

        self.tools = [mark, mark_carefully, peek]

    @hookimpl
    def lich_register_tools(self, registry: Any) -> None:
        for item in self.tools:
            registry.register(item)


def test_mode_allow_allows_unlisted_tools_but_requires_approval_still_asks(
    tmp_path: Path,
) -> None:
    results = _run(_config(tmp_path, mode="allow"), [
        ("mark", {"name": "plain"}), ("mark_carefully", {"name": "careful"}),
        _term("touch term"), ("peek", {})],
        plugins=[("markers", _Tools(tmp_path))])
    assert (tmp_path / "plain").exists()
    assert not (tmp_path / "careful").exists()
    assert not (tmp_path / "term").exists()
    assert results[3].content == "seen"


def test_mode_deny_unlisted_denies_what_no_rule_allows(tmp_path: Path) -> None:
    config = _config(tmp_path, mode="deny-unlisted", allow=["mark_carefully"])
    results = _run(config, [("mark", {"name": "plain"}), ("mark_carefully", {"name": "ok"}),
                            ("peek", {})], plugins=[("markers", _Tools(tmp_path))])
    assert ("blocked_by_plugin: approval_rule: mark is not allowed by any rule "
            "(mode deny-unlisted)") in results[0].content
    assert (tmp_path / "ok").exists()
    assert results[2].content == "seen"


def test_the_hook_answers_ask_with_the_reason(tmp_path: Path) -> None:
    config = _config(tmp_path, mode="allow", ask=["read_file(private/*)"])
    agent = Agent(config, chat=ScriptedChat(["x"]), plugins=[("markers", _Tools(tmp_path))])
    run = RunInfo("r", "s", "go", str(tmp_path), agent.config, tools=agent.tools)

    def answer(name: str, args: dict[str, Any]) -> Any:
        return approvals.lich_before_tool_call(ToolCall("c", name, args), run)

    assert answer("read_file", {"path": "private/../private/k"}) == Ask(
        "read_file needs approval (rule read_file(private/*))")
    assert answer("mark_carefully", {"name": "x"}) == Ask(
        "mark_carefully needs approval (the tool requires approval)")
    assert answer("mark", {"name": "x"}) is None
    assert answer("read_file", {"path": "public"}) is None
    default = RunInfo("r", "s", "go", str(tmp_path), _config(tmp_path))
    assert approvals.lich_before_tool_call(
        ToolCall("c", "terminal", {"command": "ls"}), default) == Ask(
        "terminal needs approval (mode ask)")


class _RewriteLate:
    """Rewrites every terminal command to ``command`` after the approvals plugin
    judged it (``trylast``: the last before-hook)."""

    def __init__(self, command: str) -> None:
        self.command = command

    @hookimpl(trylast=True)
    def lich_before_tool_call(self, call: ToolCall) -> Rewrite | None:
        if call.name == "terminal":
            return Rewrite({"command": self.command})
        return None


def test_a_deny_rule_holds_against_a_later_rewrite(tmp_path: Path) -> None:
    config = _config(tmp_path, allow=["terminal"], deny=["terminal(touch denied*)"])
    results = _run(config, [_term("touch fine")], plugins=[("late", _RewriteLate("touch denied"))])
    assert not (tmp_path / "denied").exists()
    assert not (tmp_path / "fine").exists()
    assert "approval_rule: denied by deny rule terminal(touch denied*)" in results[0].content


def test_the_check_hook_judges_the_final_arguments_as_the_before_hook_does(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, deny=["write_file(.github/*)"], allow=["write_file(src/*)"])
    agent = Agent(config, chat=ScriptedChat(["x"]))
    run = RunInfo("r", "s", "go", str(tmp_path), config, tools=agent.tools)

    def check(name: str, args: dict[str, Any]) -> Block | Ask | None:
        return approvals.lich_check_tool_call(ToolCall("c", name, args), run)

    assert check("write_file", {"path": "src/../.github/ci.yml", "content": ""}) == Block(
        "approval_rule: denied by deny rule write_file(.github/*)")
    assert check("write_file", {"path": "src/x.py", "content": ""}) is None
    assert check("terminal", {"command": "rm -rf /"}) == Ask("terminal needs approval (mode ask)")


def test_a_later_rewrite_cannot_make_an_allowed_call_run_unasked(tmp_path: Path) -> None:
    """The before-hook allowed ``git status``; a ``trylast`` plugin rewrote it after; the
    check-hook asks about what will really run — and with no one to ask, it does not."""
    config = _config(tmp_path, allow=["terminal(git status*)"])
    results = _run(config, [_term("git status")], plugins=[("late", _RewriteLate("touch sneaky"))])
    assert not (tmp_path / "sneaky").exists()
    assert "approval_unavailable" in results[0].content


def test_the_settings_are_checked_with_paths_and_hints(tmp_path: Path) -> None:
    config = _config(tmp_path, mode="sometimes", allow=["read_file", "terminal(", 3],
                     alow=[], deny="terminal(rm*)")
    with pytest.raises(ConfigError) as caught:
        Agent(config, chat=ScriptedChat(["x"]))
    assert caught.value.problems == [
        "$.approvals.mode: must be one of 'ask', 'allow', 'deny-unlisted', got 'sometimes'",
        "$.approvals.allow[1]: bad rule 'terminal(': a pattern ends with ')': "
        "write terminal(pattern)",
        '$.approvals.allow[2]: a rule is a string like "terminal(git status*)", got int',
        '$.approvals.deny: expected an array of rules like "terminal(git status*)", '
        "got string",
        "$.approvals.alow: unknown key (did you mean 'allow'?)",
    ]


def test_the_plugin_is_a_default_builtin_right_after_the_tools() -> None:
    assert BUILTIN_PLUGINS[:2] == ("builtin_tools", "approvals")


def test_the_gateway_defaults_to_deny_unlisted(tmp_path: Path) -> None:
    config = _config(tmp_path, allow=["terminal(git status*)"])
    assert gateway_agent_config(config, GatewayConfig()).table("approvals") == {
        "allow": ["terminal(git status*)"], "mode": "deny-unlisted"}
    chosen = _config(tmp_path, mode="ask")
    assert gateway_agent_config(chosen, GatewayConfig()).table("approvals") == {"mode": "ask"}
    gateway = gateway_agent_config(_config(tmp_path), GatewayConfig(tools=("terminal",)))
    results = _run(gateway, [_term("touch x")])
    assert "mode deny-unlisted" in results[0].content
    assert not (tmp_path / "x").exists()


def test_the_tool_of_a_call_is_the_one_in_the_runs_registry(tmp_path: Path) -> None:
    """Two agents on one config with different tools of one name: each run is judged by
    the tool its own agent would run; a RunInfo without a registry by the mode alone."""
    loose = Tool("twin", "t", {"type": "object", "properties": {}},
                 lambda a, c: ToolResult.success(""))
    strict = Tool("twin", "t", {"type": "object", "properties": {}},
                  lambda a, c: ToolResult.success(""), requires_approval=True)
    watched = Tool("twin", "t", {"type": "object", "properties": {}},
                   lambda a, c: ToolResult.success(""), read_only=True)

    class Offer:
        def __init__(self, item: Tool) -> None:
            self.item = item

        @hookimpl
        def lich_register_tools(self, registry: Any) -> None:
            registry.register(self.item)

    def judge(config: LichConfig, item: Tool | None) -> Block | Ask | None:
        tools = None
        if item is not None:
            tools = Agent(config, chat=ScriptedChat(["x"]), plugins=[("offer", Offer(item))]).tools
        run = RunInfo("r", "s", "go", str(tmp_path), config, tools=tools)
        return approvals.lich_before_tool_call(ToolCall("c", "twin", {}), run)

    allow = _config(tmp_path, mode="allow")
    assert judge(allow, loose) is None
    assert judge(allow, strict) == Ask("twin needs approval (the tool requires approval)")
    assert judge(allow, loose) is None  # the strict agent on this config changed nothing
    ask = _config(tmp_path)
    assert judge(ask, watched) is None  # read-only: allowed in mode ask
    assert judge(ask, None) == Ask("twin needs approval (mode ask)")  # not found: the mode


def test_the_plugin_keeps_nothing_of_a_config_that_is_gone(tmp_path: Path) -> None:
    config = _config(tmp_path, mode="allow")
    run = RunInfo("r", "s", "go", str(tmp_path), config)
    approvals.lich_before_tool_call(ToolCall("c", "twin", {}), run)
    key = id(config)
    assert key in approvals._known
    del config, run
    gc.collect()
    assert key not in approvals._known


# -- the grants the plugin keeps itself ---------------------------------------------


def test_grants_forget_the_least_recently_used_session_beyond_their_bound() -> None:
    from lich.approvals.grants import ApprovalGrants

    grants = ApprovalGrants(max_sessions=2)
    grants.grant("a", ["echo(a)"])
    grants.grant("b", ["echo(b)"])
    assert grants.granted("a") == ("echo(a)",)  # a lookup makes "a" the most recent
    grants.grant("c", ["echo(c)", "echo(c)"])
    assert grants.granted("b") == ()  # the least recently used went
    assert grants.granted("a") == ("echo(a)",)
    assert grants.granted("c") == ("echo(c)",)  # each rule once


def test_the_plugin_answers_only_what_its_grants_cover(tmp_path: Path) -> None:
    """Its approver answers a covered request as ``session``; anything else is left to
    a person (``None``), and only an approved session/always answer grants."""
    from lich.approvals.grants import SESSION_GRANTS
    from lich.events import ApprovalResolved
    from lich.hooks import ApprovalRequest

    config = _config(tmp_path, ask=["mark"])
    agent = Agent(config, chat=ScriptedChat(["x"]), plugins=[("markers", _Tools(tmp_path))])
    run = RunInfo("r", "s-covered", "go", str(tmp_path), agent.config, tools=agent.tools)
    call = ToolCall("c", "mark", {"name": "x"})
    asked = ApprovalRequest("1a2b", call, "asks", tool=agent.tools.get("mark"))
    request = asyncio.run(approvals.lich_prepare_approval(asked, run))
    assert request is not None
    rules = request.rules
    assert rules == ("mark(x)",)
    assert approvals.lich_request_approval(request, run) is None
    approvals.lich_approval_resolved(request, ApprovalResolved("1a2b", "c", False, "session"),
                                     run)
    approvals.lich_approval_resolved(request, ApprovalResolved("1a2b", "c", True, "once"), run)
    assert SESSION_GRANTS.granted("s-covered") == ()
    approvals.lich_approval_resolved(request, ApprovalResolved("1a2b", "c", True, "session"),
                                     run)
    assert SESSION_GRANTS.granted("s-covered") == rules
    answer = approvals.lich_request_approval(request, run)
    assert answer is not None
    assert (answer.approved, answer.scope, answer.approver) == (True, "session", "session")
    other = RunInfo("r", "s-other", "go", str(tmp_path), agent.config, tools=agent.tools)
    assert approvals.lich_request_approval(request, other) is None


def test_a_config_collected_while_the_settings_cache_is_locked_does_not_deadlock(
    tmp_path: Path,
) -> None:
    # A config's weakref callback (which forgets its cache entry) runs wherever the
    # collection that frees it happens — also on the thread holding the cache's lock,
    # in the middle of _for_config's insert. With a plain Lock that thread deadlocked
    # on itself (a whole run hung in CI). Run it in a thread, bounded in time.
    import threading

    outcome: list[str] = []

    def collect_under_the_lock() -> None:
        doomed = LichConfig(work_dir=str(tmp_path))
        approvals._for_config(doomed)
        with approvals._lock:
            del doomed  # the last reference: its callback runs here, under the lock
            gc.collect()
            kept = LichConfig(work_dir=str(tmp_path))
            approvals._for_config(kept)  # and an insert under the lock still works
            outcome.append("done")

    worker = threading.Thread(target=collect_under_the_lock, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert outcome == ["done"], "the settings cache deadlocked on its own lock"


def test_a_dead_config_s_callback_leaves_a_newer_entry_alone(tmp_path: Path) -> None:
    config = LichConfig(work_dir=str(tmp_path))
    known = approvals._for_config(config)
    key = id(config)
    stale = approvals._forget(key)
    stale(object())  # a callback of some other (dead) config with the same id
    assert approvals._known[key][1] is known
