"""The TUI's approval dialog, driven with Textual's pilot on a real Agent.

Each test runs the scripted model, a tool plugin, and an in-process plugin whose
before-hook answers ``Ask``: the TUI's own approver (registered by the app) is
what answers, through the modal, from keys pressed by the pilot.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from approval_tools import Tools, diff_preview
from textual.content import Content
from textual.visual import visualize
from textual.widgets import Input, OptionList, Static
from tui_support import wait_for

from lich import Approval, ApprovalRequest, ToolCall
from lich.agent import Agent
from lich.approvals.present import describe, describe_sections
from lich.config import ConfigLocation
from lich.events import ApprovalRequested, ApprovalResolved, ToolCallStart
from lich.testing import AskFor, ScriptedChat, calls_responder, make_test_config
from lich.tui import state as st
from lich.tui.app import LichApp
from lich.tui.approval import PLUGIN_NAME
from lich.tui.format.notices import approval_requested_notice, approval_resolved_notice
from lich.tui.format.status import status_parts
from lich.tui.widgets.approval import ApprovalScreen, ArgsEditor, diff_text, parse_edited_args
from lich.types import ToolMessage

SIZE = (100, 32)


def make_app(work: Path, *calls: tuple[str, dict[str, Any]],
             ask: tuple[str, ...] = ("echo", "note"), **config: Any) -> tuple[LichApp, Tools]:
    tools = Tools(preview=diff_preview)
    # The approvals plugin keeps what an s/a answer grants (its own rules allow all here:
    # the asks are AskFor's).
    config.setdefault("plugins", ("approvals",))
    config.setdefault("approvals", {"mode": "allow"})
    agent = Agent(make_test_config(work, **config),
                  plugins=[("tools", tools), ("ask", AskFor(*ask))],
                  chat=ScriptedChat(responder=calls_responder(*calls)))
    return LichApp(agent), tools


def dialog(app: LichApp) -> ApprovalScreen | None:
    screen = app.screen
    return screen if isinstance(screen, ApprovalScreen) else None


def notices(app: LichApp) -> list[str]:
    return [str(w.render()) for w in app.transcript.query(".notice").results(Static)]


def tool_results(app: LichApp) -> list[str]:
    return [m.content for m in app.history if isinstance(m, ToolMessage)]


def static_text(screen: ApprovalScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def start(pilot: Any, text: str = "go") -> ApprovalScreen:
    app = pilot.app
    app.prompt.value = text
    await pilot.press("enter")
    await wait_for(pilot, lambda: dialog(app) is not None, "the approval dialog")
    screen = dialog(app)
    assert screen is not None
    await wait_for(pilot, lambda: screen.is_mounted and screen.focused is not None, "focus")
    return screen


async def finish(pilot: Any) -> None:
    await wait_for(pilot, lambda: not pilot.app.busy, "run end")


async def test_y_approves_the_call_and_the_log_says_so(tmp_path: Path) -> None:
    app, tools = make_app(tmp_path, ("echo", {"text": "hi"}))
    async with app.run_test(size=SIZE) as pilot:
        screen = await start(pilot)
        # What is asked, in the shared wording; the keyboard is in the dialog.
        assert static_text(screen, "#headline") == "echo wants to run — needs a human"
        assert '"text": "hi"' in static_text(screen, "#arguments")
        assert static_text(screen, "#rules") == (
            "a session or always answer allows exactly: echo(hi)")
        assert "denied if there is no answer within 300s" in static_text(screen, "#timeout")
        assert app.focused is not None
        assert app.focused.screen is screen
        assert "[y] yes, this call" in static_text(screen, "#legend")
        await wait_for(pilot, lambda: "⏸ echo waits for approval" in notices(app), "log")
        assert app.ui.phase == "approval"
        assert "echo waits for approval" in str(app.query_one("#status", Static).render())
        await pilot.press("y")
        await finish(pilot)
        assert dialog(app) is None
        assert tools.ran == [("echo", {"text": "hi"})]
        assert "✓ approved by tui (once)" in notices(app)
        assert tool_results(app) == ["echo: hi"]
        # The prompt has the keyboard again.
        assert app.focused is app.prompt


async def test_approval_notices_come_before_the_tools_result(tmp_path: Path) -> None:
    # In the order things happened: asked, approved, then the tool ran and answered.
    app, _tools = make_app(tmp_path, ("echo", {"text": "hi"}))
    async with app.run_test(size=SIZE) as pilot:
        await start(pilot)
        await pilot.press("y")
        await finish(pilot)
        lines = app.transcript.text().splitlines()
        assert lines[1:5] == ["⏸ echo waits for approval", "✓ approved by tui (once)",
                              '● echo({"text":"hi"})', "└ ok (echo: hi)"], lines


async def test_n_with_a_message_denies_and_the_model_reads_it(tmp_path: Path) -> None:
    app, tools = make_app(tmp_path, ("echo", {"text": "hi"}))
    async with app.run_test(size=SIZE) as pilot:
        screen = await start(pilot)
        await pilot.press("n")
        assert screen.mode == "deny"
        assert app.focused is screen.query_one("#deny-message", Input)
        # Esc goes back to the choices; n again, then the message.
        await pilot.press("escape")
        assert screen.mode == "ask"
        assert dialog(app) is screen
        await pilot.press("n")
        await pilot.press(*"not now")  # "n" typed here is text, not the choice key
        await pilot.press("enter")
        await finish(pilot)
        assert tools.ran == []
        (content,) = tool_results(app)
        assert json.loads(content)["error"] == "approval_denied: not now"
        assert "✗ denied by tui: approval_denied: not now" in notices(app)


async def test_escape_denies(tmp_path: Path) -> None:
    app, tools = make_app(tmp_path, ("echo", {"text": "hi"}))
    async with app.run_test(size=SIZE) as pilot:
        await start(pilot)
        await pilot.press("escape")
        await finish(pilot)
        assert tools.ran == []
        (content,) = tool_results(app)
        assert json.loads(content)["error"] == "approval_denied: the user denied this call"
        # Esc answered the dialog; it did not cancel the run.
        assert app.ui.last_error != "run cancelled"
        assert "final answer" in app.transcript_text()


async def test_s_covers_the_same_call_for_the_rest_of_the_session(tmp_path: Path) -> None:
    app, tools = make_app(tmp_path, ("echo", {"text": "hi"}), ("echo", {"text": "hi"}))
    async with app.run_test(size=SIZE) as pilot:
        await start(pilot)
        await pilot.press("s")
        await finish(pilot)
        assert tools.ran == [("echo", {"text": "hi"}), ("echo", {"text": "hi"})]
        shown = notices(app)
        assert "✓ approved by tui (session)" in shown
        assert "✓ allowed by an earlier session approval" in shown


async def test_a_second_request_after_the_first_is_answered_gets_its_own_dialog(
    tmp_path: Path,
) -> None:
    app, tools = make_app(tmp_path, ("echo", {"text": "one"}), ("note", {"path": "a.txt",
                                                                       "text": "two"}))
    async with app.run_test(size=SIZE) as pilot:
        first = await start(pilot)
        await pilot.press("y")
        await wait_for(pilot, lambda: dialog(app) not in (None, first), "the second dialog")
        second = dialog(app)
        assert second is not None
        assert second.request.call.name == "note"
        await wait_for(pilot, lambda: second.focused is not None, "focus")
        await pilot.press("escape")
        await finish(pilot)
        assert tools.ran == [("echo", {"text": "one"})]
        assert len(tool_results(app)) == 2


async def test_two_requests_at_once_never_stack_dialogs(tmp_path: Path) -> None:
    """Asked twice at once (two runs of one agent, an embedding), the approver still
    asks one question at a time, in order."""
    app, _ = make_app(tmp_path)
    first, second = (request(id=rid) for rid in ("aaaa", "bbbb"))
    async with app.run_test(size=SIZE) as pilot:
        asked = [asyncio.ensure_future(app.approver.lich_request_approval(r))
                 for r in (first, second)]
        await wait_for(pilot, lambda: dialog(app) is not None, "the first dialog")
        screen = dialog(app)
        assert screen is not None
        assert screen.request is first
        await wait_for(pilot, lambda: screen.focused is not None, "focus")
        assert sum(isinstance(s, ApprovalScreen) for s in app.screen_stack) == 1
        await pilot.press("y")
        await wait_for(pilot, lambda: dialog(app) not in (None, screen), "the second dialog")
        later = dialog(app)
        assert later is not None
        assert later.request is second
        assert sum(isinstance(s, ApprovalScreen) for s in app.screen_stack) == 1
        await wait_for(pilot, lambda: later.focused is not None, "focus")
        await pilot.press("escape")
        await wait_for(pilot, lambda: all(t.done() for t in asked), "both answers")
        assert [t.result() for t in asked] == [Approval(True, approver="tui"),
                                              Approval(False, approver="tui")]


async def test_e_runs_the_call_with_the_edited_arguments(tmp_path: Path) -> None:
    app, tools = make_app(tmp_path, ("echo", {"text": "hi"}))
    async with app.run_test(size=SIZE) as pilot:
        screen = await start(pilot)
        await pilot.press("e")
        editor = screen.query_one("#edit-args", ArgsEditor)
        assert app.focused is editor
        assert not screen.query_one("#legend").display  # the editor's own hint instead
        assert json.loads(editor.text) == {"text": "hi"}
        # Invalid JSON: the error is shown in place, and the dialog stays.
        editor.text = '{"text": "edited",'
        await pilot.press("enter")
        await pilot.pause()
        assert dialog(app) is screen
        assert screen.mode == "edit"
        assert static_text(screen, "#edit-error").startswith("not valid JSON: line 1")
        editor.text = '["not", "an object"]'
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "must be a JSON object" in static_text(screen, "#edit-error")
        # Esc goes back to the choices, e comes back to the editor, Ctrl+S confirms.
        await pilot.press("escape")
        assert screen.mode == "ask"
        assert screen.query_one("#legend").display
        await pilot.press("e")
        editor.text = '{"text": "edited"}'
        await pilot.press("ctrl+s")
        await finish(pilot)
        assert tools.ran == [("echo", {"text": "edited"})]
        assert "✓ approved by tui (once, edited arguments)" in notices(app)


async def test_the_preview_is_shown_as_a_diff(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, ("note", {"path": "a.txt", "text": "new line"}))
    async with app.run_test(size=SIZE) as pilot:
        screen = await start(pilot)
        shown = static_text(screen, "#preview").splitlines()
        assert shown == ["preview:", "  --- a/a.txt", "  +++ b/a.txt", "  @@ -1 +1 @@",
                         "  -old line", "  +new line"]
        await pilot.press("y")
        await finish(pilot)


def test_diff_lines_are_coloured_by_kind() -> None:
    text = diff_text(["preview:", "  --- a/x", "  +++ b/x", "  @@ -1 +1 @@", "  -old",
                      "  +new", "   same", "  +++ an added '++' line", "  --- a removed '--'"])
    styles = {text.plain[span.start:span.end]: str(span.style) for span in text.spans}
    assert styles == {"  --- a/x": "bold", "  +++ b/x": "bold", "  @@ -1 +1 @@": "cyan",
                      "  -old": "red", "  +new": "green",
                      "  +++ an added '++' line": "green", "  --- a removed '--'": "red"}
    assert text.plain.splitlines()[0] == "preview:"


async def test_a_long_request_scrolls_with_the_keyboard(tmp_path: Path) -> None:
    long_text = "\n".join(f"line {i}" for i in range(200))
    app, _ = make_app(tmp_path, ("note", {"path": "a.txt", "text": long_text}))
    async with app.run_test(size=SIZE) as pilot:
        screen = await start(pilot)
        details = screen.query_one("#details")
        assert app.focused is details
        await wait_for(pilot, lambda: details.max_scroll_y > 0, "a scrollable dialog")
        await pilot.press("end")
        await wait_for(pilot, lambda: details.scroll_y > 0, "scrolled down")
        await pilot.press("y")
        await finish(pilot)


PROJECT_CONFIG = """\
# my project's settings
max_turns = 7  # keep it short

[approvals]
# what runs without asking
allow = ["read_file"]
"""


async def test_a_writes_the_rule_to_the_chosen_config_keeping_its_comments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Brackets in a path are shown as they are (not read as markup).
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg[b]"))
    project = tmp_path / ".lich" / "config.toml"
    project.parent.mkdir()
    project.write_text(PROJECT_CONFIG)
    app, tools = make_app(tmp_path, ("echo", {"text": "hi"}), ("echo", {"text": "hi"}))
    async with app.run_test(size=SIZE) as pilot:
        screen = await start(pilot)
        await pilot.press("a")
        assert screen.mode == "always"
        # The rules and the files are shown before anything is written.
        assert "echo(hi)" in static_text(screen, "#always-rules")
        targets = screen.query_one("#targets", OptionList)
        assert app.focused is targets
        # As the list shows them (a str prompt would be read as markup).
        shown_labels = [visualize(targets, targets.get_option_at_index(i).prompt)
                        for i in range(targets.option_count)]
        labels = [c.plain for c in shown_labels if isinstance(c, Content)]
        assert labels == [f"this project: {project}",
                          f"your user config: {tmp_path / 'xdg[b]' / 'lich' / 'config.toml'}"]
        assert project.read_text() == PROJECT_CONFIG
        await pilot.press("enter")  # the first (highlighted) target
        await finish(pilot)
        assert tools.ran == [("echo", {"text": "hi"}), ("echo", {"text": "hi"})]
        written = project.read_text()
        assert written == PROJECT_CONFIG.replace('allow = ["read_file"]',
                                                 'allow = ["read_file", "echo(hi)"]')
        shown = notices(app)
        assert f"· added to [approvals] allow in {project} (this project): echo(hi)" in shown
        assert "✓ approved by tui (always)" in shown
        assert "✓ allowed by an earlier session approval" in shown  # the second call
        assert not (tmp_path / "xdg[b]").exists()


async def test_a_write_that_fails_is_shown_and_approves_for_the_session_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    project = tmp_path / ".lich" / "config.toml"
    project.parent.mkdir()
    project.write_text("[approvals\nbroken = \n")
    app, tools = make_app(tmp_path, ("echo", {"text": "hi"}), ("echo", {"text": "hi"}))
    async with app.run_test(size=SIZE) as pilot:
        await start(pilot)
        await pilot.press("a")
        await pilot.press("enter")
        await finish(pilot)
        assert tools.ran == [("echo", {"text": "hi"}), ("echo", {"text": "hi"})]
        assert project.read_text() == "[approvals\nbroken = \n"  # nothing half-written
        shown = notices(app)
        (error,) = [s for s in shown if s.startswith("· could not add the rules to")]
        assert str(project) in error
        assert "not valid TOML" in error
        assert error.endswith("approved for this session only")
        assert "✓ approved by tui (session)" in shown
        assert "✓ allowed by an earlier session approval" in shown


async def test_a_with_nowhere_to_write_says_so(tmp_path: Path) -> None:
    app, tools = make_app(tmp_path, ("echo", {"text": "hi"}))
    app.approver.write_rules = None  # an embedding that gives the TUI no config file
    async with app.run_test(size=SIZE) as pilot:
        screen = await start(pilot)
        await pilot.press("a")
        assert screen.mode == "always"
        assert "There is no config file to write them to." in static_text(
            screen, "#always-rules")
        assert screen.query_one("#targets", OptionList).option_count == 0
        await pilot.press("escape")
        await pilot.press("y")
        await finish(pilot)
        assert tools.ran == [("echo", {"text": "hi"})]


async def test_write_file_on_an_existing_file_shows_its_diff(tmp_path: Path) -> None:
    """The builtin tools and the builtin approvals plugin (mode ask): the real preview."""
    (tmp_path / "notes.txt").write_text("first\nsecond\n")
    agent = Agent(
        make_test_config(tmp_path, plugins=("builtin_tools", "approvals")),
        chat=ScriptedChat(responder=calls_responder(
            ("write_file", {"path": "notes.txt", "content": "first\nchanged\n"}))))
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        screen = await start(pilot)
        assert screen.request.call.name == "write_file"
        diff = static_text(screen, "#preview").splitlines()
        assert "  -second" in diff
        assert "  +changed" in diff
        assert any(line.startswith("  @@") for line in diff)
        await pilot.press("y")
        await finish(pilot)
        assert (tmp_path / "notes.txt").read_text() == "first\nchanged\n"


async def test_the_dialog_closes_itself_at_the_approval_timeout(tmp_path: Path) -> None:
    app, tools = make_app(tmp_path, ("echo", {"text": "hi"}), approval_timeout_s=1.5)
    # 1.5s only so the dialog surely opens first on a busy machine; nothing is timed.
    # Pushes are recorded, not polled for: the dialog may be gone before a poll sees it.
    pushed: list[object] = []
    push = app.push_screen

    def recording_push(screen: Any, *args: Any, **kwargs: Any) -> Any:
        pushed.append(screen)
        return push(screen, *args, **kwargs)

    app.push_screen = recording_push  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        app.prompt.value = "go"
        await pilot.press("enter")
        await finish(pilot)
        (screen,) = pushed
        assert isinstance(screen, ApprovalScreen)
        await wait_for(pilot, lambda: screen not in app.screen_stack, "the dialog closed")
        assert screen.answer.cancelled()
        assert dialog(app) is None
        assert tools.ran == []
        shown = notices(app)
        assert ("· approval dialog for echo closed: no answer within 1.5s "
                "(approval_timeout_s)") in shown
        assert any(s.startswith("✗ not approved: approval_timeout:") for s in shown)
        assert app.focused is app.prompt


async def test_ctrl_c_in_the_dialog_denies_and_cancels_the_run(tmp_path: Path) -> None:
    app, tools = make_app(tmp_path, ("echo", {"text": "hi"}), approval_timeout_s=0)
    async with app.run_test(size=SIZE) as pilot:
        screen = await start(pilot)
        assert not screen.query("#timeout")  # approval_timeout_s = 0: no limit to show
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: dialog(app) is None, "the dialog closing")
        await finish(pilot)
        assert tools.ran == []
        shown = notices(app)
        assert "· approval dialog for echo closed: the run was cancelled" in shown
        assert "✗ not approved: cancelled" in shown
        assert app.ui.last_error == "run cancelled"


async def test_quitting_with_the_dialog_up_stops_the_run(tmp_path: Path) -> None:
    app, tools = make_app(tmp_path, ("echo", {"text": "hi"}), approval_timeout_s=0)
    async with app.run_test(size=SIZE) as pilot:
        await start(pilot)
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not app.is_running, "the app exiting")
    assert tools.ran == []


async def test_the_approver_is_registered_for_the_apps_lifetime(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)
    host = app.agent.host
    assert not host.pm.has_plugin(PLUGIN_NAME)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert host.pm.get_plugin(PLUGIN_NAME) is app.approver
    assert not host.pm.has_plugin(PLUGIN_NAME)


# ---------------------------------------------------------------------------
# The pure parts: the shared wording's sections, the edited JSON, state, log lines
# ---------------------------------------------------------------------------


def request(**fields: Any) -> ApprovalRequest:
    values: dict[str, Any] = {"id": "3f2a", "reason": "needs a human",
                              "call": ToolCall("c1", "note", {"path": "a", "text": "b"})}
    return ApprovalRequest(**{**values, **fields})


def test_describe_is_its_sections_flattened() -> None:
    full = request(rules=("note(a)",), preview="+b", timeout_s=5)
    sections = describe_sections(full)
    assert [kind for kind, _ in sections] == [
        "headline", "arguments", "preview", "rules", "timeout"]
    assert describe(full) == [line for _, lines in sections for line in lines]
    bare = request()
    # No rule can cover the call: the question says a session answer covers it alone.
    assert describe_sections(bare)[-1] == (
        "rules", ["a session or always answer allows only this call "
                  "(no rule can cover exactly it)"])
    assert [kind for kind, _ in describe_sections(full, preview=False)] == [
        "headline", "arguments", "rules", "timeout"]


def test_edited_arguments_must_be_a_json_object() -> None:
    assert parse_edited_args('{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(ValueError, match=r"not valid JSON: line 2, column 1: Expecting"):
        parse_edited_args('{"a": 1,\n}')
    with pytest.raises(ValueError, match=r"must be a JSON object \(\{\.\.\.\}\), not list"):
        parse_edited_args("[1]")


def test_the_state_waits_for_approval_between_request_and_answer() -> None:
    call = ToolCall("c1", "echo", {"text": "hi"})
    state = st.apply_event(st.start_run(st.UiState()), ToolCallStart(1, call))
    waiting = st.apply_event(state, ApprovalRequested("3f2a", call, "needs a human"))
    assert (waiting.phase, waiting.active_tool, waiting.busy) == ("approval", call, True)
    answered = st.apply_event(waiting, ApprovalResolved("3f2a", "c1", True))
    assert (answered.phase, answered.active_tool) == ("tool", call)
    parts = status_parts(model="m", provider="", turns=1, tokens=0, phase="approval",
                         active_tool="echo")
    assert [p.text for p in parts if p.key == "phase"] == ["⏸ echo waits for approval"]
    cancelling = status_parts(model="m", provider="", turns=1, tokens=0, phase="approval",
                              active_tool="echo", cancelling=True)
    assert next(p.text for p in cancelling if p.key == "phase").endswith("cancelling")


def test_the_log_lines_of_approval_events() -> None:
    call = ToolCall("c1", "terminal", {"command": "ls"})
    asked = approval_requested_notice(ApprovalRequested("3f2a", call, "why"))
    assert (asked.text, asked.level) == ("⏸ terminal waits for approval", "warn")

    def line(**fields: Any) -> str:
        return approval_resolved_notice(ApprovalResolved("3f2a", "c1", **fields)).text

    assert line(approved=True, scope="session", approver="tui") == "✓ approved by tui (session)"
    assert line(approved=True, approver="tui", args={"command": "pwd"}) == (
        "✓ approved by tui (once, edited arguments)")
    assert line(approved=True, scope="session", approver="session") == (
        "✓ allowed by an earlier session approval")
    assert line(approved=False, approver="tui", message="approval_denied: no") == (
        "✗ denied by tui: approval_denied: no")
    assert line(approved=False, message="cancelled") == "✗ not approved: cancelled"


def test_always_offers_the_config_in_use_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    given = tmp_path / "ci.toml"
    agent = Agent(make_test_config(tmp_path), chat=ScriptedChat(["hi"]))
    app = LichApp(agent, config_location=ConfigLocation(given, "flag"))
    assert app.approver.targets is not None
    assert [label for label, _ in app.approver.targets()] == [
        "the config given with --config", "this project", "your user config"]
    assert app.approver.targets()[0][1] == given
