"""``Agent``: events and envelopes, run_end on every path, per-run usage, history, resume."""

from __future__ import annotations

import asyncio
import datetime
import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lich import hookimpl, tool
from lich.agent import DEFAULT_SYSTEM_PROMPT, Agent, default_system_prompt
from lich.cancel import CancelToken
from lich.events import Envelope, RunEnd, TextDelta
from lich.hooks import RunOutcome
from lich.testing import Fail, HookRecorder, Reply, ScriptedChat, ScriptRequest, make_test_config
from lich.tools import ToolRegistry
from lich.types import (
    AssistantMessage,
    ChatOptions,
    ChatResult,
    Message,
    ProviderError,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    Usage,
    UserMessage,
)

from .conftest import assert_valid_transcript, event_types

HANG_S = 60


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


@tool
async def wait_forever() -> str:
    """Waits until cancelled."""
    if "started" in SIGNALS:
        SIGNALS["started"].set()
    await asyncio.sleep(HANG_S)
    return "woke"


# Set per test: an asyncio.Event belongs to the loop of the test that first waits on it.
SIGNALS: dict[str, asyncio.Event] = {}


class Tools:
    @hookimpl
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(echo)
        registry.register(wait_forever)


TODAY = datetime.date(2026, 3, 14)


def make_agent(tmp_path: Path, chat: Any, *plugins: tuple[str, object], **config: Any) -> Agent:
    return Agent(make_test_config(tmp_path, **config), plugins=[("tools", Tools()), *plugins],
                 chat=chat, today=lambda: TODAY)


def test_the_default_system_prompt_names_the_work_dir_the_os_and_the_date(
    tmp_path: Path,
) -> None:
    prompt = default_system_prompt(str(tmp_path), today=TODAY)

    assert prompt.startswith(DEFAULT_SYSTEM_PROMPT)
    assert f"Working directory: {tmp_path}\n" in prompt
    assert f"Operating system: {platform.system()}\n" in prompt
    assert prompt.endswith("Today's date: 2026-03-14")


async def test_runs_get_the_default_system_prompt_unless_one_is_configured(
    tmp_path: Path,
) -> None:
    default = make_agent(tmp_path, ScriptedChat(["a"]))
    configured = make_agent(tmp_path, ScriptedChat(["b"]), system_prompt="be terse")

    first = await default.run("hi")
    second = await configured.run("hi")

    assert first.messages[0] == SystemMessage(default_system_prompt(str(tmp_path), today=TODAY))
    assert second.messages[0] == SystemMessage("be terse")


def run_end_outcome(recorder: HookRecorder) -> RunOutcome:
    (outcome,) = [kw["outcome"] for n, kw in recorder.calls if n == "lich_run_end"]
    assert isinstance(outcome, RunOutcome)
    return outcome


def session_lines(path: str | None) -> list[dict[str, Any]]:
    assert path is not None
    return [json.loads(line) for line in Path(path).read_text("utf-8").splitlines()]


# ------------------------------------------------------------------ events


async def test_event_order_for_a_tool_turn_and_a_final_answer(tmp_path: Path) -> None:
    chat = ScriptedChat([Reply(tool_calls=[ToolCall("c1", "echo", {"text": "hi"})]), "done"])
    recorder = HookRecorder()
    agent = make_agent(tmp_path, chat, ("rec", recorder))
    seen: list[Envelope] = []
    result = await agent.run("say hi", on_event=seen.append)

    assert event_types(seen) == [
        "run_start", "turn_start", "llm_start", "llm_end", "tool_call_start", "tool_call_end",
        "turn_end", "turn_start", "llm_start", "llm_end", "final", "turn_end", "run_end",
    ]  # fmt: skip
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert {(e.run_id, e.session_id) for e in seen} == {(result.run_id, result.session_id)}
    assert all(e.ts > 0 for e in seen)
    assert recorder.events() == event_types(seen)
    end = seen[-1].event
    assert isinstance(end, RunEnd)
    assert (end.stopped_reason, end.turns_used, end.usage) == ("final", 2, result.usage)
    assert result.text == "done"
    assert result.stopped_reason == "final"


async def test_budget_stop_through_the_agent(tmp_path: Path) -> None:
    def tools_forever(request: ScriptRequest) -> Reply:
        return Reply(tool_calls=[ToolCall(f"c{len(request.messages)}", "echo", {"text": "x"})])

    recorder = HookRecorder()
    agent = make_agent(tmp_path, ScriptedChat(responder=tools_forever), ("rec", recorder),
                       max_turns=2)
    seen: list[Envelope] = []
    result = await agent.run("loop", on_event=seen.append)
    assert result.stopped_reason == "budget"
    assert event_types(seen)[-3:] == ["budget_exhausted", "turn_end", "run_end"]
    assert run_end_outcome(recorder).stopped_reason == "budget"
    assert_valid_transcript(result.messages)
    last = result.messages[-1]
    assert isinstance(last, ToolMessage)
    assert json.loads(last.content)["error"] == "turn_budget_exhausted"


async def test_streamed_text_arrives_as_text_delta_events(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, ScriptedChat([Reply("one two three")]), stream=True)
    seen: list[Envelope] = []
    await agent.run("hi", on_event=seen.append)
    deltas = [e.event for e in seen if isinstance(e.event, TextDelta)]
    assert "".join(d.text for d in deltas) == "one two three"
    types = event_types(seen)
    assert types.index("llm_start") < types.index("text_delta") < types.index("llm_end")


# ------------------------------------------------------------------ run_end on every path


async def test_run_end_on_a_provider_error_then_reraise(tmp_path: Path) -> None:
    chat = ScriptedChat([Reply(tool_calls=[ToolCall("c1", "echo", {"text": "a"})]), Fail(401)])
    recorder = HookRecorder()
    agent = make_agent(tmp_path, chat, ("rec", recorder))
    seen: list[Envelope] = []
    with pytest.raises(ProviderError) as info:
        await agent.run("fail please", session_id="failing", on_event=seen.append)
    assert info.value.kind == "auth"

    outcome = run_end_outcome(recorder)
    assert outcome.stopped_reason == "error"
    assert outcome.turns_used == 2
    assert outcome.error is not None
    assert "auth" in outcome.error
    assert outcome.usage.total_tokens > 0  # the first, successful call is counted
    assert event_types(seen)[-3:] == ["error", "turn_end", "run_end"]
    end = seen[-1].event
    assert isinstance(end, RunEnd)
    assert end.stopped_reason == "error"
    # The completed tool turn was recorded as it happened; the run_end meta closes the file.
    records = session_lines(str(agent.sessions.path_for("failing")))
    roles = [r["message"]["role"] for r in records if r["kind"] == "message"]
    assert roles == ["system", "user", "assistant", "tool"]
    assert records[-1]["event"] == "run_end"
    assert records[-1]["stopped_reason"] == "error"


async def test_run_end_on_an_unexpected_exception(tmp_path: Path) -> None:
    async def broken(*_: Any) -> ChatResult:
        raise RuntimeError("bug in a router")

    recorder = HookRecorder()
    agent = make_agent(tmp_path, broken, ("rec", recorder))
    with pytest.raises(RuntimeError, match="bug in a router"):
        await agent.run("x")
    outcome = run_end_outcome(recorder)
    assert outcome.stopped_reason == "error"
    assert outcome.error == "RuntimeError: bug in a router"


async def test_abort_before_the_first_turn(tmp_path: Path) -> None:
    recorder = HookRecorder()
    chat = ScriptedChat(["never"])
    agent = make_agent(tmp_path, chat, ("rec", recorder))
    token = CancelToken()
    token.cancel()
    result = await agent.run("stop at once", cancel=token)
    assert result.stopped_reason == "aborted"
    assert result.messages == (SystemMessage(default_system_prompt(str(tmp_path), today=TODAY)),
                               UserMessage("stop at once"))
    assert chat.calls == []
    assert run_end_outcome(recorder).stopped_reason == "aborted"


async def test_abort_during_a_model_call(tmp_path: Path) -> None:
    entered = asyncio.Event()

    async def slow_chat(*_: Any) -> ChatResult:
        entered.set()
        await asyncio.sleep(HANG_S)
        raise AssertionError("unreachable")

    recorder = HookRecorder()
    agent = make_agent(tmp_path, slow_chat, ("rec", recorder))
    token = CancelToken()
    task = asyncio.create_task(agent.run("x", cancel=token))
    await asyncio.wait_for(entered.wait(), 10)
    token.cancel()
    result = await asyncio.wait_for(task, 20)
    assert result.stopped_reason == "aborted"
    assert_valid_transcript(result.messages)
    assert run_end_outcome(recorder).stopped_reason == "aborted"
    records = session_lines(result.session_path)
    assert records[-1]["stopped_reason"] == "aborted"


async def test_abort_during_a_tool_answers_every_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = asyncio.Event()
    monkeypatch.setitem(SIGNALS, "started", started)
    calls = [ToolCall("w", "wait_forever", {}), ToolCall("e", "echo", {"text": "never"})]
    recorder = HookRecorder()
    agent = make_agent(tmp_path, ScriptedChat([Reply(tool_calls=calls), "x"]), ("rec", recorder))
    token = CancelToken()
    task = asyncio.create_task(agent.run("x", cancel=token))
    await asyncio.wait_for(started.wait(), 10)
    token.cancel()
    result = await asyncio.wait_for(task, 20)

    assert result.stopped_reason == "aborted"
    assert_valid_transcript(result.messages)
    answers = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert [json.loads(m.content)["error"] for m in answers] == ["cancelled", "cancelled"]
    assert run_end_outcome(recorder).stopped_reason == "aborted"
    # The session on disk is just as valid: it resumes without repairs.
    history = agent.sessions.history(result.session_id)
    assert list(history) == list(result.messages)


async def test_a_cancel_lands_even_while_a_before_hook_hangs(tmp_path: Path) -> None:
    entered = asyncio.Event()

    class SlowGuard:
        @hookimpl
        async def lich_before_tool_call(self) -> None:
            entered.set()
            await asyncio.sleep(HANG_S)

    calls = [ToolCall("e", "echo", {"text": "a"})]
    agent = make_agent(tmp_path, ScriptedChat([Reply(tool_calls=calls), "x"]),
                       ("guard", SlowGuard()), hook_timeout_s=HANG_S)
    token = CancelToken()
    task = asyncio.create_task(agent.run("x", cancel=token))
    await asyncio.wait_for(entered.wait(), 10)
    token.cancel()
    result = await asyncio.wait_for(task, 20)
    assert result.stopped_reason == "aborted"
    assert_valid_transcript(result.messages)


async def test_task_cancellation_still_calls_run_end(tmp_path: Path) -> None:
    entered = asyncio.Event()

    async def slow_chat(*_: Any) -> ChatResult:
        entered.set()
        await asyncio.sleep(HANG_S)
        raise AssertionError("unreachable")

    recorder = HookRecorder()
    agent = make_agent(tmp_path, slow_chat, ("rec", recorder))
    task = asyncio.create_task(agent.run("x"))
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 20)
    assert run_end_outcome(recorder).stopped_reason == "aborted"


# ------------------------------------------------------------------ usage and history


async def test_concurrent_runs_on_one_agent_keep_their_own_usage(tmp_path: Path) -> None:
    arrived: list[str] = []
    both_in = asyncio.Event()
    per_input = {"A": Usage(1, 1, 2), "B": Usage(100, 10, 110)}

    async def interleaving_chat(
        messages: Sequence[Message], tools: Sequence[ToolDefinition], options: ChatOptions
    ) -> ChatResult:
        user = next(m.content for m in reversed(messages) if isinstance(m, UserMessage))
        arrived.append(user)
        if len(arrived) >= 2:
            both_in.set()
        await asyncio.wait_for(both_in.wait(), 10)  # both runs are mid-call at once
        has_tool_result = isinstance(messages[-1], ToolMessage)
        message = (
            AssistantMessage(f"done {user}") if has_tool_result
            else AssistantMessage("", (ToolCall(f"{user}1", "echo", {"text": user}),))
        )
        return ChatResult(message, per_input[user], "stop")

    recorder = HookRecorder()
    agent = make_agent(tmp_path, interleaving_chat, ("rec", recorder))
    a, b = await asyncio.gather(agent.run("A"), agent.run("B"))
    assert a.usage == Usage(2, 2, 4)
    assert b.usage == Usage(200, 20, 220)
    assert (a.text, b.text) == ("done A", "done B")
    ends = {kw["run"].input: kw["outcome"].usage
            for n, kw in recorder.calls if n == "lich_run_end"}
    assert ends == {"A": Usage(2, 2, 4), "B": Usage(200, 20, 220)}
    assert a.session_id != b.session_id


async def test_result_messages_hold_each_message_once(tmp_path: Path) -> None:
    chat = ScriptedChat(["second answer"])
    agent = make_agent(tmp_path, chat, system_prompt="be brief")
    history: list[Message] = [
        SystemMessage("be brief"), UserMessage("first"), AssistantMessage("first answer"),
    ]
    result = await agent.run("second", history=history)
    assert result.messages == (
        SystemMessage("be brief"), UserMessage("first"), AssistantMessage("first answer"),
        UserMessage("second"), AssistantMessage("second answer"),
    )
    assert history == [
        SystemMessage("be brief"), UserMessage("first"), AssistantMessage("first answer"),
    ]  # the caller's list is untouched
    # Feeding the result back in does not duplicate anything either.
    chat.model.push("third answer")
    again = await agent.run("third", history=result.messages)
    assert len(again.messages) == 7
    assert sum(isinstance(m, SystemMessage) for m in again.messages) == 1


async def test_resuming_a_session_by_id(tmp_path: Path) -> None:
    chat = ScriptedChat(["one", "two"])
    agent = make_agent(tmp_path, chat)
    first = await agent.run("first")
    second = await agent.run("second", session_id=first.session_id)

    assert second.session_id == first.session_id
    assert second.session_path == first.session_path
    assert [m.content for m in second.messages[1:]] == ["first", "one", "second", "two"]
    # The model saw the earlier turn.
    assert [m.content for m in chat.calls[1][0]][1:] == ["first", "one", "second"]
    # The file has each message once, and two runs.
    records = session_lines(second.session_path)
    contents = [r["message"]["content"] for r in records if r["kind"] == "message"]
    assert contents[1:] == ["first", "one", "second", "two"]
    assert [r["event"] for r in records if r["kind"] == "meta"] == [
        "run_start", "run_end", "run_start", "run_end",
    ]  # fmt: skip


async def test_resuming_with_a_new_system_prompt_keeps_one_system_message(
    tmp_path: Path,
) -> None:
    first = await make_agent(tmp_path, ScriptedChat(["one"]), system_prompt="old").run("a")
    agent = make_agent(tmp_path, ScriptedChat(["two", "three"]), system_prompt="new")
    await agent.run("b", session_id=first.session_id)
    history = agent.sessions.history(first.session_id)
    assert history == [
        SystemMessage("new"), UserMessage("a"), AssistantMessage("one"),
        UserMessage("b"), AssistantMessage("two"),
    ]
    third = await agent.run("c", session_id=first.session_id)
    assert sum(isinstance(m, SystemMessage) for m in third.messages) == 1


async def test_resuming_a_session_with_a_dangling_tool_call(tmp_path: Path) -> None:
    # A run killed mid-tool leaves a tool call without an answer in the file.
    agent = make_agent(tmp_path, ScriptedChat(["recovered"]))
    writer = agent.sessions.open("crashed")
    writer.message(SystemMessage(DEFAULT_SYSTEM_PROMPT))
    writer.message(UserMessage("do it"))
    writer.message(AssistantMessage("", (ToolCall("t1", "echo", {"text": "x"}),
                                         ToolCall("t2", "echo", {"text": "y"}))))
    writer.message(ToolMessage("t1", "echo", "echo: x"))
    writer.close()

    result = await agent.run("are you there?", session_id="crashed")
    sent = agent.chat.calls[0][0]  # type: ignore[attr-defined]
    assert_valid_transcript(sent)
    dangling = sent[4]
    assert isinstance(dangling, ToolMessage)
    assert dangling.tool_call_id == "t2"
    assert dangling.is_error
    assert json.loads(dangling.content)["error"] == "cancelled"
    assert sent[5] == UserMessage("are you there?")
    assert result.text == "recovered"


def test_run_sync_for_scripts(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, ScriptedChat(["sync answer"]))
    result = agent.run_sync("hello")
    assert result.text == "sync answer"
    assert result.session_path is not None
    assert Path(result.session_path).is_file()


async def test_an_unwritable_session_dir_does_not_fail_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the session dir should be")
    recorder = HookRecorder()
    chat = ScriptedChat([Reply(tool_calls=[ToolCall("c1", "echo", {"text": "a"})]), "fine"])
    agent = make_agent(tmp_path, chat, ("rec", recorder), session_dir=str(blocker / "sessions"))
    result = await agent.run("hi")
    assert result.text == "fine"
    assert result.session_path is None
    assert run_end_outcome(recorder).stopped_reason == "final"
    warnings = [r for r in caplog.records if "session persistence failed" in r.getMessage()]
    assert len(warnings) == 1  # said once, not once per record


async def test_sessions_can_be_switched_off(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, ScriptedChat(["x"]), persist_sessions=False)
    result = await agent.run("hi")
    assert result.session_path is None
    assert not (tmp_path / ".lich").exists()


# ------------------------------------------------------------------ tools the agent offers


async def test_tools_enabled_and_disabled_apply_to_plugin_tools(tmp_path: Path) -> None:
    chat = ScriptedChat([Reply(tool_calls=[ToolCall("c1", "wait_forever", {})]), "ok"])
    agent = make_agent(tmp_path, chat, tools_enabled=["echo", "wait_forever"],
                       tools_disabled=["wait_forever"])
    assert agent.tools.names() == ["echo"]
    result = await agent.run("x")
    assert [t.name for t in chat.calls[0][1]] == ["echo"]
    tool_msg = result.messages[3]
    assert isinstance(tool_msg, ToolMessage)
    assert json.loads(tool_msg.content)["error"] == "unknown_tool: wait_forever"


async def test_tool_settings_from_config_reach_the_tool(tmp_path: Path) -> None:
    seen: list[Any] = []

    @tool
    def configured(ctx: Any) -> str:
        """Reads its settings."""
        seen.append(dict(ctx.settings))
        return "ok"

    class P:
        @hookimpl
        def lich_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(configured)

    chat = ScriptedChat([Reply(tool_calls=[ToolCall("c1", "configured", {})]), "ok"])
    agent = make_agent(tmp_path, chat, ("p", P()), tools={"configured": {"flavour": "mild"}})
    await agent.run("x")
    assert seen == [{"flavour": "mild"}]


async def test_a_failed_run_still_counts_the_summarizer_tokens(tmp_path: Path) -> None:
    from lich import context

    def respond(request: ScriptRequest) -> Reply | Fail:
        first = request.messages[0] if request.messages else None
        if isinstance(first, SystemMessage) and first.content == context.COMPRESSION_SYSTEM_PROMPT:
            return Reply("summary", usage=Usage(100, 10, 110))
        return Fail(400, {"error": {"message": "bad request"}})

    config = make_test_config(tmp_path, context_budget_tokens=200, compress_threshold=0.5)
    agent = Agent(config, chat=ScriptedChat(responder=respond))
    history = [UserMessage(f"earlier {i}: " + "x" * 200) for i in range(12)]
    envelopes: list[Envelope] = []

    with pytest.raises(ProviderError):
        await agent.run("go on", history=history, on_event=envelopes.append)

    (end,) = [e.event for e in envelopes if isinstance(e.event, RunEnd)]
    assert end.stopped_reason == "error"
    assert end.usage == Usage(100, 10, 110)


def test_with_model_refuses_an_agent_given_a_chat_function(tmp_path: Path) -> None:
    from lich.config import ProviderConfig
    from lich.testing import ScriptedChat, make_test_config

    config = make_test_config(tmp_path, providers=(
        ProviderConfig(kind="openai_compat", name="p", model="m"),))
    agent = Agent(config, chat=ScriptedChat(["hi"]))
    with pytest.raises(ValueError, match="given a chat function"):
        agent.with_model("other")
