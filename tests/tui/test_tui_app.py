"""Pilot tests: the Textual app at 80×24 driving a real Agent on the scripted model."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Markdown, Static
from tui_support import GatedChat, ToolsPlugin, make_agent, send, wait_for

from lich.agent import Agent
from lich.config import ProviderConfig
from lich.events import Failover, Retry, StreamReset, TextDelta
from lich.slash import SLASH_COMMANDS
from lich.testing import Fail, Reply, ScriptedChat, make_test_config
from lich.tui.app import LichApp
from lich.tui.commands import key_bindings, key_name, keys_help_lines
from lich.tui.widgets import ToolView
from lich.types import ToolCall, UserMessage

SIZE = (80, 24)


def assistant_blocks(app: LichApp) -> list[Markdown]:
    return list(app.transcript.query(Markdown).filter(".assistant"))


def notices(app: LichApp) -> list[str]:
    return [str(w.render()) for w in app.transcript.query(".notice").results(Static)]


def run_end_records(app: LichApp) -> list[dict[str, Any]]:
    path = app.agent.sessions.path_for(app.session_id)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r.get("kind") == "meta" and r.get("event") == "run_end"]


async def test_streamed_reply_is_shown_while_the_model_call_is_in_flight(tmp_path: Path) -> None:
    scripted = ScriptedChat(
        [Reply("Hello **world**, streamed.", chunks=("Hello ", "**world**", ", streamed."))]
    )
    gated = GatedChat(scripted)
    agent, _ = make_agent(tmp_path, chat=gated)
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "say hello")
        await wait_for(pilot, lambda: "you › say hello" in app.transcript_text(), "user line")
        await wait_for(pilot, gated.streamed.is_set, "model call streamed")
        # the answer has not returned yet, but its text is on screen
        await wait_for(
            pilot,
            lambda: any("Hello **world**, streamed." in m.source for m in assistant_blocks(app)),
            "streamed markdown",
        )
        assert app.busy
        assert app.ui.phase == "thinking"
        gated.gate.set()
        await wait_for(pilot, lambda: not app.busy, "run end")
        blocks = assistant_blocks(app)
        assert len(blocks) == 1
        assert blocks[0].source == "Hello **world**, streamed."
        assert app.ui.phase == "idle"
        assert app.ui.turns_used == 1
        assert app.ui.usage.total_tokens > 0
        # the request really carried the streaming option
        assert scripted.calls[0][2].stream


async def test_non_streamed_reply_is_rendered_whole(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path, ["# Title\n\nplain answer"], stream=False)
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hi")
        await wait_for(pilot, lambda: not app.busy, "run end")
        blocks = assistant_blocks(app)
        assert [b.source for b in blocks] == ["# Title\n\nplain answer"]


async def test_tool_block_shows_name_args_and_outcome(tmp_path: Path) -> None:
    agent, scripted = make_agent(
        tmp_path,
        [
            Reply(
                "Shouting now.",
                (
                    ToolCall("c1", "shout", {"text": "hi"}),
                    ToolCall("c2", "shout", {}),
                    ToolCall("c3", "lines", {"count": 30}),
                ),
            ),
            Reply("All done."),
        ],
    )
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "shout hi")
        await wait_for(pilot, lambda: not app.busy, "run end")
        views = list(app.transcript.query(ToolView))
        assert [v.call.name for v in views] == ["shout", "shout", "lines"]
        ok, bad, long = views
        assert ok.summary == '● shout({"text":"hi"})\n└ ok (HI!)'
        assert bad.result is not None
        assert not bad.result.ok
        assert bad.summary.splitlines()[1].startswith("└ error: missing_arg: text")
        assert long.result is not None
        assert long.result.output.count("\n") == 29
        # collapsed: only the preview; Ctrl+O expands the newest block to the full output
        assert not long.expanded
        output = long.query_one(".output", Static)
        assert not output.display
        await pilot.press("ctrl+o")
        assert long.expanded
        assert output.display
        assert "line 30" in str(output.render())
        # the model got the tool results and answered
        assert [b.source for b in assistant_blocks(app)] == ["Shouting now.", "All done."]
        tool_messages = scripted.requests[1].tool_results_since_user()
        assert next(m.content for m in tool_messages) == "HI!"
        assert app.ui.last_error is not None
        assert "missing_arg" in app.ui.last_error


async def test_tool_result_line_toggles_with_enter(tmp_path: Path) -> None:
    agent, _ = make_agent(
        tmp_path, [Reply(tool_calls=(ToolCall("c1", "lines", {"count": 5}),)), Reply("ok")]
    )
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "lines please")
        await wait_for(pilot, lambda: not app.busy, "run end")
        view = app.transcript.query_one(ToolView)
        line = view.query_one("ToolResultLine")
        assert "[+]" in str(line.render())
        line.focus()
        await pilot.press("enter")
        assert view.expanded
        assert "[-]" in str(line.render())
        await pilot.press("enter")
        assert not view.expanded


async def test_escape_cancels_a_slow_run(tmp_path: Path) -> None:
    agent, scripted = make_agent(tmp_path, [Reply("too late", delay_s=60), "after cancel"])
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "take your time")
        await wait_for(pilot, lambda: len(scripted.calls) == 1, "model call started")
        assert app.busy
        assert app.prompt.has_class("busy")
        assert app.prompt.border_title == "… busy — Esc cancels"
        await pilot.press("escape")
        await wait_for(pilot, lambda: not app.busy, "cancelled run to end")
        assert app.ui.last_error == "run cancelled"
        assert any("cancelled" in n for n in notices(app))
        assert not app.prompt.has_class("busy")
        assert app.prompt.border_title == "› ready"
        assert "too late" not in app.transcript_text()
        # the transcript stays valid: the run ended aborted and the input is recorded
        assert [r["stopped_reason"] for r in run_end_records(app)] == ["aborted"]
        assert app.history[-1] == UserMessage("take your time")
        history = agent.sessions.history(app.session_id)
        assert history[-1] == UserMessage("take your time")
        # and the conversation goes on
        await send(pilot, "again")
        await wait_for(pilot, lambda: not app.busy, "second run")
        assert assistant_blocks(app)[-1].source == "after cancel"
        assert [r["stopped_reason"] for r in run_end_records(app)] == ["aborted", "final"]


async def test_escape_while_idle_does_nothing(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path, ["hi"])
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("escape")
        assert not app.busy
        assert app.ui.last_error is None
        assert notices(app) == []


async def test_second_enter_while_busy_does_not_start_a_second_run(tmp_path: Path) -> None:
    gated = GatedChat(ScriptedChat(["first answer", "second answer"]))
    agent, _ = make_agent(tmp_path, chat=gated)
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "first")
        await wait_for(pilot, gated.streamed.is_set, "first model call")
        await send(pilot, "second")
        await send(pilot, "second")
        assert app.runs_started == 1
        assert len(gated.inner.calls) == 1
        assert app.prompt.value == "second"  # kept, not lost
        assert any("busy" in n for n in notices(app))
        assert "you › second" not in app.transcript_text()
        gated.gate.set()
        await wait_for(pilot, lambda: not app.busy, "first run end")
        await pilot.press("enter")  # the kept text goes now
        await wait_for(pilot, lambda: app.runs_started == 2 and not app.busy, "second run")
        assert len(gated.inner.calls) == 2
        assert [b.source for b in assistant_blocks(app)] == ["first answer", "second answer"]


async def test_history_keys_up_older_down_newer(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path, ["a1", "a2", "a3"])
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        for text in ("one", "two", "three"):
            await send(pilot, text)
            await wait_for(pilot, lambda: not app.busy, f"run for {text}")
        prompt = app.prompt
        await pilot.press("d", "r", "a", "f", "t")
        assert prompt.value == "draft"
        seen = []
        for key in ("up", "up", "up", "up", "down", "down", "down"):
            await pilot.press(key)
            seen.append(prompt.value)
        assert seen == ["three", "two", "one", "one", "two", "three", "draft"]
        await pilot.press("up")
        assert prompt.cursor_position == len("three")


async def test_resume_latest_restores_the_previous_conversation(tmp_path: Path) -> None:
    agent, _ = make_agent(
        tmp_path,
        [Reply(tool_calls=(ToolCall("c1", "shout", {"text": "plum"}),)), "I will remember PLUM."],
    )
    first = LichApp(agent)
    async with first.run_test(size=SIZE) as pilot:
        await send(pilot, "remember the word plum")
        await wait_for(pilot, lambda: not first.busy, "first run")
        first_session = first.session_id

    agent2, scripted2 = make_agent(tmp_path, ["The word was PLUM."])
    app = LichApp(agent2)
    async with app.run_test(size=SIZE) as pilot:
        assert app.session_id != first_session
        await send(pilot, "/resume latest")
        await wait_for(pilot, lambda: app.session_id == first_session, "resume")
        text = app.transcript_text()
        assert "you › remember the word plum" in text
        assert "I will remember PLUM." in text
        view = app.transcript.query_one(ToolView)
        assert view.summary == '● shout({"text":"plum"})\n└ ok (PLUM!)'
        assert any(n.startswith(f"· resumed session {first_session}") for n in notices(app))
        # Up recalls the resumed conversation's inputs
        await pilot.press("up")
        assert app.prompt.value == "/resume latest"
        await pilot.press("up")
        assert app.prompt.value == "remember the word plum"
        # the next message continues that conversation, in the same session file
        await send(pilot, "what was the word?")
        await wait_for(pilot, lambda: not app.busy, "continued run")
        sent = scripted2.requests[0].messages
        assert UserMessage("remember the word plum") in sent
        assert sent[-1] == UserMessage("what was the word?")
        assert app.session_id == first_session
        stored = agent2.sessions.history(first_session)
        assert [m.content for m in stored if isinstance(m, UserMessage)] == [
            "remember the word plum", "what was the word?"
        ]


async def test_resume_at_start_and_bad_refs(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path, ["first answer"])
    first = LichApp(agent)
    async with first.run_test(size=SIZE) as pilot:
        await send(pilot, "first question")
        await wait_for(pilot, lambda: not first.busy, "first run")

    agent2, _ = make_agent(tmp_path, [])
    app = LichApp(agent2, resume="latest")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.session_id == first.session_id, "resume at start")
        assert "first answer" in app.transcript_text()
        await send(pilot, "/resume no-such-session")
        await wait_for(pilot, lambda: any("cannot resume" in n for n in notices(app)), "error")
        assert app.session_id == first.session_id
        await send(pilot, "/resume ../../etc/passwd")
        await wait_for(
            pilot, lambda: sum("cannot resume" in n for n in notices(app)) == 2, "second error"
        )
        await send(pilot, "/resume")
        await wait_for(pilot, lambda: any("usage: /resume" in n for n in notices(app)), "usage")

    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    agent3, _ = make_agent(empty_dir, [])
    fresh = LichApp(agent3, resume="latest")
    async with fresh.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: any("cannot resume" in n for n in notices(fresh)), "err")
        assert fresh.session_id  # a new session instead


async def test_slash_commands(tmp_path: Path) -> None:
    agent, scripted = make_agent(tmp_path, ["answer one"])
    app = LichApp(agent, model="demo-model", provider="openai_compat")
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/help")
        assert any("/resume" in n for n in notices(app))
        await send(pilot, "/model")
        assert "· model: demo-model · provider: openai_compat" in notices(app)
        await send(pilot, "/sessions")
        assert "· no sessions yet" in notices(app)
        await send(pilot, "/bogus")
        assert "· unknown command /bogus (/help lists the commands)" in notices(app)
        assert scripted.calls == []  # commands never reach the model

        await send(pilot, "question")
        await wait_for(pilot, lambda: not app.busy, "run")
        await send(pilot, "/usage")
        total = app.ui.usage.total_tokens
        assert total > 0
        assert any(n.startswith(f"· tokens used this session: {total:,}") for n in notices(app))
        await send(pilot, "/sessions")
        assert any(n.startswith(f" *{app.session_id}  question") for n in notices(app))

        await send(pilot, "/clear")
        await wait_for(pilot, lambda: len(app.transcript.children) == 0, "clear")
        assert len(app.history) > 0  # the conversation is kept

        old = app.session_id
        await send(pilot, "/new")
        await wait_for(pilot, lambda: app.session_id != old, "new session")
        assert app.history == []
        assert app.ui.usage.total_tokens == total  # usage is per TUI session

        await send(pilot, "/exit")
        await wait_for(pilot, lambda: app.return_code is not None, "exit")
    assert app.return_value == 0


async def test_help_is_generated_from_the_shared_table(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path, [])
    app = LichApp(agent)
    assert set(app.commands.handlers()) == {c.name for c in SLASH_COMMANDS.for_front_end("tui")}
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/help")
        assert notices(app) == [*SLASH_COMMANDS.help_lines("tui"), *keys_help_lines()]


async def test_help_lists_every_key_binding(tmp_path: Path) -> None:
    from textual.app import App
    from textual.binding import Binding

    from lich.tui.widgets.prompt import PromptInput
    from lich.tui.widgets.tool_view import ToolResultLine

    declared = [b for owner in (LichApp, PromptInput, ToolResultLine) for b in owner.BINDINGS]
    # Textual's own app keys that a user can press (not its internal "system" ones).
    inherited = [b for b in App.BINDINGS if isinstance(b, Binding) and not b.system]
    agent, _ = make_agent(tmp_path, [])
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/help")
        shown = notices(app)

    keys_part = shown[shown.index("keys:") + 1:]
    listed = {line.split()[0] for line in keys_part}
    for binding in [*declared, *inherited]:
        assert isinstance(binding, Binding)
        assert key_name(binding.key) in listed, binding
    for binding in key_bindings():
        assert binding.description  # every key says what it does
        matching = [ln for ln in keys_part if ln.split()[0] == key_name(binding.key)
                    and ln.endswith(binding.description)]
        assert len(matching) == 1, binding
    assert {"Enter", "Up", "Down", "Esc", "Ctrl+O", "Tab", "Shift+Tab", "Ctrl+Q",
            "Enter/Space"} <= listed


async def test_unknown_commands_and_missing_arguments(tmp_path: Path) -> None:
    agent, scripted = make_agent(tmp_path, [])
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/sesions")
        await send(pilot, "/resume")
        errors = app.transcript.query(".notice.error").results(Static)
        warnings = app.transcript.query(".notice.warn").results(Static)
        assert [str(w.render()) for w in errors] == [
            "· unknown command /sesions: did you mean /sessions? (/help lists them)"
        ]
        assert [str(w.render()) for w in warnings] == [
            "· usage: /resume ID|latest — continue a recorded session (/sessions lists them)"
        ]
        assert app.prompt.value == ""  # a command is taken even when it is refused
        assert scripted.calls == []
        await send(pilot, "/Q")
        await wait_for(pilot, lambda: app.return_code is not None, "exit")


async def test_model_name_switches_the_first_provider(
    tmp_path: Path, lich_scripted_server: Any
) -> None:
    server = lich_scripted_server(["one", "two"])
    provider = ProviderConfig(
        kind="openai_compat", name="local", model="scripted-1", base_url=server.base_url
    )
    config = make_test_config(tmp_path, plugins=("openai_compat",), providers=(provider,))
    first_agent = Agent(config)
    app = LichApp(first_agent, owns_agent=True)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hello")
        await wait_for(pilot, lambda: not app.busy, "first run")
        await send(pilot, "/model other-model")
        assert "· model: other-model (provider local)" in notices(app)
        assert app.agent is not first_agent
        assert "other-model (openai_compat)" in str(app.query_one("#status", Static).render())
        await send(pilot, "again")
        await wait_for(pilot, lambda: not app.busy, "second run")
        await send(pilot, "/model")
        assert "· model: other-model (provider local, kind openai_compat)" in notices(app)
    assert [r.model for r in server.model.requests] == ["scripted-1", "other-model"]
    # The conversation went on across the switch.
    assert [m.content for m in server.model.requests[1].messages if m.role == "user"] == [
        "hello", "again"
    ]


async def test_model_lists_the_models_as_chat_does(
    tmp_path: Path, lich_scripted_server: Any
) -> None:
    """``/model`` with no argument: the same lines in the TUI as in ``lich chat``, one per
    provider in failover order, before and after ``/model NAME``."""
    import io

    from rich.console import Console

    from lich.cli.chat import ChatSession
    from lich.cli.options import CliSettings

    server = lich_scripted_server(["one"])
    providers = (
        ProviderConfig(kind="openai_compat", name="main", model="first-model",
                       base_url=server.base_url),
        ProviderConfig(kind="openai_compat", name="spare", model="second-model",
                       base_url=server.base_url),
    )
    config = make_test_config(tmp_path, plugins=("openai_compat", "failover"),
                              providers=providers)

    async def chat_lines(*commands: str) -> list[str]:
        out = io.StringIO()
        session = ChatSession(CliSettings(), config, Agent(config), Console(file=out, width=200))
        for command in commands:
            await session.command(command)
        await session.agent.aclose()
        return out.getvalue().splitlines()

    def model_notices(app: LichApp) -> list[str]:
        return [n.removeprefix("· ") for n in notices(app)
                if n.startswith(("· model: ", "· fallback: "))]

    app = LichApp(Agent(config), owns_agent=True)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/model")
        listed = model_notices(app)
        await app.clear_transcript()
        await send(pilot, "/model other-model")
        await app.clear_transcript()
        await send(pilot, "/model")
        switched = model_notices(app)

    assert listed == [
        "model: first-model (provider main, kind openai_compat)",
        "fallback: second-model (provider spare, kind openai_compat)",
    ]
    assert listed == await chat_lines("/model")
    assert switched[0] == "model: other-model (provider main, kind openai_compat)"
    chat_switched = await chat_lines("/model other-model", "/model")
    assert switched == chat_switched[1:]  # after chat's "model: other-model (provider main)"


async def test_model_name_is_refused_without_providers_or_while_busy(tmp_path: Path) -> None:
    gated = GatedChat(ScriptedChat(["done"]))
    agent, _ = make_agent(tmp_path, chat=gated)
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/model other")
        assert notices(app)[-1] == (
            "· cannot switch models: this agent was given a chat function, not providers"
        )
        await send(pilot, "work")
        await wait_for(pilot, gated.streamed.is_set, "model call")
        await send(pilot, "/model other")
        assert notices(app)[-1] == (
            "· busy: /model NAME waits until the run ends (Esc cancels it)"
        )
        assert app.agent is agent
        gated.gate.set()
        await wait_for(pilot, lambda: not app.busy, "run end")


async def test_new_and_resume_are_refused_while_busy(tmp_path: Path) -> None:
    gated = GatedChat(ScriptedChat(["done"]))
    agent, _ = make_agent(tmp_path, chat=gated)
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "work")
        await wait_for(pilot, gated.streamed.is_set, "model call")
        session = app.session_id
        await send(pilot, "/new")
        await send(pilot, "/resume latest")
        assert app.session_id == session
        assert sum("busy" in n for n in notices(app)) == 2
        await send(pilot, "/usage")  # harmless commands still work
        assert any("tokens used" in n for n in notices(app))
        gated.gate.set()
        await wait_for(pilot, lambda: not app.busy, "run end")


async def test_model_error_is_shown_and_the_tui_recovers(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path, [Fail(401, {"error": {"message": "bad key"}}), "fine now"])
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hello")
        await wait_for(pilot, lambda: not app.busy, "failed run")
        errors = [n for n in notices(app) if n.startswith("· error:")]
        assert len(errors) == 1
        assert "auth" in errors[0]
        assert "bad key" in errors[0]
        assert app.ui.last_error is not None
        assert "bad key" in app.ui.last_error
        await send(pilot, "again")
        await wait_for(pilot, lambda: not app.busy, "second run")
        assert assistant_blocks(app)[-1].source == "fine now"


async def test_budget_notice_and_status(tmp_path: Path) -> None:
    loop_reply = Reply(tool_calls=(ToolCall("c1", "shout", {"text": "x"}),))
    agent, _ = make_agent(tmp_path, [loop_reply, loop_reply], max_turns=2)
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "loop")
        await wait_for(pilot, lambda: not app.busy, "budget run")
        assert "· budget exhausted (turn cap reached)" in notices(app)
        assert app.ui.budget_exhausted
        assert "budget" in str(app.query_one("#status", Static).render())


async def test_status_bar_fits_80_columns(tmp_path: Path) -> None:
    gated = GatedChat(ScriptedChat(["ok"]))
    agent, _ = make_agent(tmp_path, chat=gated)
    app = LichApp(agent, model="a-rather-long-model-name-for-the-status-bar", provider="ollama")
    async with app.run_test(size=SIZE) as pilot:
        status = app.query_one("#status", Static)
        idle = str(status.render())
        assert "idle" in idle
        assert app.session_id[-8:] in idle
        await send(pilot, "hi")
        await wait_for(pilot, gated.streamed.is_set, "model call")
        await wait_for(pilot, lambda: "thinking" in str(status.render()), "thinking phase")
        for text in (idle, str(status.render())):
            assert len(text) <= 78
        # every part of the layout is on the 24-line screen
        assert app.prompt.region.bottom <= 24
        assert status.region.y < app.prompt.region.y
        gated.gate.set()
        await wait_for(pilot, lambda: not app.busy, "run end")


async def test_transcript_is_capped(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path, [])
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        app.transcript.cap = 5
        for i in range(8):
            await app.notice(f"· note {i}")
        await pilot.pause()
        assert notices(app) == [f"· note {i}" for i in range(3, 8)]


def test_run_tui_runs_the_app_on_the_agent_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lich.tui import run_tui

    agent = Agent(make_test_config(tmp_path), chat=ScriptedChat(["hi"]))
    seen: dict[str, Any] = {}

    def fake_run(self: LichApp) -> int:
        seen["agent"] = self.agent
        seen["resume"] = self._resume_ref
        seen["owns"] = self.owns_agent
        seen["capture_logs"] = self.capture_logs
        return 0

    monkeypatch.setattr(LichApp, "run", fake_run)
    assert run_tui(agent, resume="latest") == 0
    assert seen == {"agent": agent, "resume": "latest", "owns": True, "capture_logs": True}


def test_run_tui_without_textual_names_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lich.tui import TuiUnavailableError, run_tui

    monkeypatch.setitem(sys.modules, "textual", None)
    with pytest.raises(TuiUnavailableError, match=r"pip install 'lich-agent\[tui\]'") as info:
        run_tui(Agent(make_test_config(tmp_path), chat=ScriptedChat(["hi"])))
    # code that handles a missing textual module handles this too
    assert isinstance(info.value, ModuleNotFoundError)
    assert info.value.name == "textual"


async def test_plugin_load_failures_are_shown(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path, [], plugins=("./no_such_plugin.py",))
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: bool(notices(app)), "plugin notice")
        (text,) = notices(app)
        assert text.startswith("· plugin './no_such_plugin.py' failed to load")
        assert app.agent.tools.has("shout")  # the in-process plugin still works


async def test_captured_log_warnings_become_notices(tmp_path: Path) -> None:
    import logging

    logger = logging.getLogger("lich")
    outside = logging.Handler()
    logger.addHandler(outside)
    try:
        agent, _ = make_agent(tmp_path, [])
        app = LichApp(agent, capture_logs=True)
        async with app.run_test(size=SIZE) as pilot:
            assert outside not in logger.handlers  # set aside while the TUI owns the screen
            logging.getLogger("lich.tools").warning("[tools.x] timeout_s = %r is bad", -1)
            logging.getLogger("lich.tools").info("not shown")
            await wait_for(pilot, lambda: bool(notices(app)), "log notice")
            assert notices(app) == ["· warning: [tools.x] timeout_s = -1 is bad"]
        assert outside in logger.handlers
        assert logger.propagate
    finally:
        logger.removeHandler(outside)


async def test_end_to_end_over_the_scripted_server(
    tmp_path: Path, lich_scripted_server: Any
) -> None:
    """The openai_compat provider plugin streaming from the scripted HTTP server."""
    server = lich_scripted_server(
        [
            Reply("Calling the tool.", (ToolCall("c1", "shout", {"text": "wire"}),)),
            Reply("Done over **HTTP**.", chunks=("Done ", "over ", "**HTTP**", ".")),
        ]
    )
    provider = ProviderConfig(
        kind="openai_compat", name="local", model="scripted-1", base_url=server.base_url
    )
    config = make_test_config(
        tmp_path, plugins=("openai_compat",), providers=(provider,), stream=True
    )
    agent = Agent(config, plugins=[("test_tools", ToolsPlugin())])
    app = LichApp(agent, owns_agent=True)
    async with app.run_test(size=SIZE) as pilot:
        assert "scripted-1 (openai_compat)" in str(app.query_one("#status", Static).render())
        await send(pilot, "over the wire")
        await wait_for(pilot, lambda: not app.busy, "run end")
        view = app.transcript.query_one(ToolView)
        assert view.summary == '● shout({"text":"wire"})\n└ ok (WIRE!)'
        assert [b.source for b in assistant_blocks(app)] == [
            "Calling the tool.", "Done over **HTTP**."
        ]
        assert [r.stream for r in server.model.requests] == [True, True]
        assert app.ui.usage.total_tokens > 0


async def test_quit_while_busy_cancels_the_run(tmp_path: Path) -> None:
    gated = GatedChat(ScriptedChat(["never shown"]))
    agent, _ = make_agent(tmp_path, chat=gated)
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "long job")
        await wait_for(pilot, gated.streamed.is_set, "model call")
        run = app._run
        assert run is not None
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: app.return_code is not None, "exit")
    assert app.return_value == 0
    assert run.cancel.cancelled
    assert [r["stopped_reason"] for r in run_end_records(app)] == ["aborted"]


class FlakyProviderChat:
    """A model call that retries, streams half an answer, loses the stream and fails
    over before answering — the notices a real router would cause. It waits on
    :attr:`gate` after the failover so a test can look at the screen in between."""

    def __init__(self, inner: ScriptedChat) -> None:
        self.inner = inner
        self.name = inner.name
        self.gate = asyncio.Event()
        self.failed_over = asyncio.Event()

    async def __call__(self, messages: Any, tools: Any, options: Any) -> Any:
        options.emit(Retry("main", 1, "rate_limit", 0.5, "slow down"))
        options.emit(TextDelta("Half an ans", "main"))
        options.emit(StreamReset("main", "network: connection reset"))
        options.emit(Failover("main", "backup", "network", "connection reset"))
        self.failed_over.set()
        await self.gate.wait()
        return await self.inner(messages, tools, options)


async def test_retry_failover_and_stream_reset_show_as_notices(tmp_path: Path) -> None:
    chat = FlakyProviderChat(ScriptedChat(["The whole answer."]))
    agent, _ = make_agent(tmp_path, chat=chat)
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hi")
        await wait_for(pilot, chat.failed_over.is_set, "failover")
        await wait_for(pilot, lambda: len(notices(app)) >= 2, "notices")
        shown = notices(app)
        assert "· retrying main in 0.5s (attempt 1, rate_limit: slow down)" in shown
        assert "· main failed (network: connection reset); failing over to backup" in shown
        # the lost stream's partial answer is taken off the screen at once
        assert "Half an ans" not in app.transcript_text()
        assert assistant_blocks(app) == []
        chat.gate.set()
        await wait_for(pilot, lambda: not app.busy, "run end")
        assert [b.source for b in assistant_blocks(app)] == ["The whole answer."]


async def test_ctrl_c_when_idle_asks_for_a_second_one_then_quits(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path, ["hi"])
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.is_running
        assert notices(app) == ["Ctrl-C again to quit (or Ctrl+Q)"]
        assert not app._notifications  # no Textual toast
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_code == 0


async def test_ctrl_c_during_a_run_cancels_it_and_does_not_quit(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path, [Reply("late", delay_s=30)])
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "slow")
        await wait_for(pilot, lambda: app.busy, "the run to start")
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: not app.busy, "the run to be cancelled")
        assert app.is_running
        assert run_end_records(app)[-1]["stopped_reason"] == "aborted"


async def test_the_status_bar_is_refitted_after_a_resize(tmp_path: Path) -> None:
    from lich.tui.widgets.status import StatusBar

    agent, _ = make_agent(tmp_path, ["hi"])
    app = LichApp(agent)
    async with app.run_test(size=(160, 24)) as pilot:
        await pilot.pause()
        bar = app.query_one("#status", StatusBar)
        wide = str(bar.render())
        await pilot.resize_terminal(60, 24)
        await pilot.pause()
        await pilot.pause()
        narrow = str(bar.render())
        # Fitted to the new width (parts shortened or left out), not the old line cut.
        assert narrow != wide
        assert len(narrow) <= bar.size.width - 2


async def test_a_running_tool_shows_it_is_running_and_for_how_long(tmp_path: Path) -> None:
    import threading

    from lich.tools import tool

    release = threading.Event()

    @tool(read_only=True)
    def wait_here() -> str:
        """Wait until the test lets go."""
        release.wait(60)
        return "done"

    agent, _ = make_agent(tmp_path, [Reply(tool_calls=[ToolCall("w1", "wait_here", {})]),
                                     "finished"], plugin=ToolsPlugin(wait_here))
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "go")
        await wait_for(pilot, lambda: "└ running… (" in app.transcript.text(), "the tool")
        await wait_for(pilot, lambda: "└ running… (0s)" not in app.transcript.text(),
                       "the running line to count on")
        assert "└ running… (" in app.transcript.text()
        release.set()
        await wait_for(pilot, lambda: not app.busy, "the run to end")
        assert "└ ok (done)" in app.transcript.text()
        assert "running" not in app.transcript.text()


async def test_a_running_terminal_command_shows_its_output_as_it_comes(tmp_path: Path) -> None:
    """A real ``terminal`` command prints, waits, prints: the block shows the first line
    while the command still runs (it waits for a file only the test writes), and the
    result replaces the live lines when it ends."""
    import attrs

    from lich_builtin_tools._terminal import make_terminal_tool

    terminal = attrs.evolve(make_terminal_tool(), requires_approval=False)
    command = ("echo first; while [ ! -e gate ]; do sleep 0.02; done; "
               "echo second >&2")
    agent, scripted = make_agent(
        tmp_path,
        [Reply("Running it.", (ToolCall("c1", "terminal", {"command": command}),)),
         Reply("Done.")],
        plugin=ToolsPlugin(terminal),
    )
    app = LichApp(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "run it")
        await wait_for(pilot, lambda: bool(list(app.transcript.query(ToolView))), "tool block")
        view = app.transcript.query_one(ToolView)
        live = view.query_one(".live", Static)
        await wait_for(pilot, lambda: "first" in view.live_text, "live output")
        assert view.result is None  # still running: it waits for the gate
        assert live.display
        assert "first" in str(live.render())
        assert view.summary.splitlines()[1].startswith("└ running…")
        (tmp_path / "gate").touch()
        await wait_for(pilot, lambda: not app.busy, "run end")
        assert view.result is not None
        assert view.result.output == "first\nsecond\n\n[exit 0]"
        assert not live.display
        assert view.live_text == ""
        # The model read the whole result, exactly as without live output.
        tool_messages = scripted.requests[1].tool_results_since_user()
        assert next(m.content for m in tool_messages) == "first\nsecond\n\n[exit 0]"
        # The transcript keeps the result, not the live pieces.
        records = app.agent.sessions.path_for(app.session_id).read_text()
        assert "tool_output" not in records
