"""The run-time hook points designed together: ``lich_instructions``, ``lich_user_prompt``,
``lich_prepare_tools``, ``lich_before_compress``, ``lich_after_final``, ``lich_event``'s
``run``, ``turn_end`` paired with every ``turn_start``, and auxiliary model roles."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from lich import (
    Block,
    Compression,
    FollowUp,
    InstructionSection,
    PromptEdit,
    RunInfo,
    hookimpl,
    tool,
)
from lich.agent import Agent
from lich.cancel import CancelToken
from lich.config import ConfigError, ModelRole, ProviderConfig
from lich.context import COMPRESSION_SYSTEM_PROMPT, estimate_text_tokens
from lich.events import Envelope, InstructionsCut, RunStart
from lich.instructions import assemble_instructions
from lich.testing import (
    Fail,
    Reply,
    ScriptedChat,
    ScriptedServer,
    ScriptRequest,
    make_test_config,
)
from lich.tools import ToolRegistry
from lich.types import Message, SystemMessage, ToolCall, ToolDefinition, UserMessage

from .conftest import assert_valid_transcript, event_types

HANG_S = 60
RAN: list[str] = []


@tool
def echo(text: str) -> str:
    """Echo the text."""
    RAN.append(f"echo:{text}")
    return f"echo: {text}"


@tool
def shout(text: str) -> str:
    """Shout the text."""
    RAN.append(f"shout:{text}")
    return text.upper()


@tool
async def wait_forever() -> str:
    """Waits until cancelled."""
    await asyncio.sleep(HANG_S)
    return "woke"


class Tools:
    @hookimpl
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        for item in (echo, shout, wait_forever):
            registry.register(item)


def make_agent(tmp_path: Path, chat: Any, *plugins: tuple[str, object], **config: Any) -> Agent:
    RAN.clear()
    return Agent(make_test_config(tmp_path, system_prompt="BASE PROMPT", **config),
                 plugins=[("tools", Tools()), *plugins], chat=chat)


def records(agent: Agent, session_id: str) -> list[dict[str, Any]]:
    return list(agent.sessions.read(session_id).records)


def is_summary_request(messages: Sequence[Message]) -> bool:
    return bool(messages) and messages[0] == SystemMessage(COMPRESSION_SYSTEM_PROMPT)


def system_of(messages: Sequence[Message]) -> str:
    first = messages[0]
    assert isinstance(first, SystemMessage)
    return first.content


# ------------------------------------------------------------------ lich_instructions


def test_assembly_puts_cacheable_sections_first_and_cuts_the_lowest_priority_first() -> None:
    sections = [
        InstructionSection("A" * 400, "a.md", priority=1),        # 100 tokens
        InstructionSection("DATE today", "clock", priority=9, cacheable=False),
        InstructionSection("B" * 400, "b.md", priority=1),        # same priority, later
        InstructionSection("C" * 40, "c.md", priority=5),
    ]
    base = "BASE"
    # Room for everything but one 100-token section: b.md (the later of the two lowest) goes.
    whole = sum(estimate_text_tokens(t) for t in
                [base, *(s.text for s in sections)]) + 4 * estimate_text_tokens("\n\n")
    prompt = assemble_instructions(base, sections, whole - 50)
    assert prompt.text == "\n\n".join([base, "A" * 400, "C" * 40, "DATE today"])
    assert [(r.source, r.kept) for r in prompt.reports] == [
        ("a.md", True), ("b.md", False), ("c.md", True), ("clock", True)]
    assert prompt.cuts == (InstructionsCut("b.md", 1, 100, whole - 50),)

    # A budget smaller than the base alone: every section is cut, lowest first; the base stays.
    tight = assemble_instructions(base, sections, 1)
    assert tight.text == base
    assert [c.source for c in tight.cuts] == ["b.md", "a.md", "c.md", "clock"]
    # Nothing to add: the prompt is the base, byte for byte.
    assert assemble_instructions(base, [], 1).text == base


def test_a_section_needs_text_and_a_source() -> None:
    with pytest.raises(ValueError, match="text must be a non-empty string"):
        InstructionSection("  ", "x")
    with pytest.raises(ValueError, match="source must be a non-empty string"):
        InstructionSection("rules", "")


class Instructions:
    def __init__(self, *sections: InstructionSection) -> None:
        self.sections = sections
        self.inputs: list[str] = []

    @hookimpl
    def lich_instructions(self, run: RunInfo) -> Sequence[InstructionSection]:
        self.inputs.append(run.input)
        return self.sections


class BrokenInstructions:
    @hookimpl
    async def lich_instructions(self, run: RunInfo) -> Any:
        raise RuntimeError("cannot read AGENTS.md")


class WrongInstructions:
    @hookimpl
    def lich_instructions(self) -> Any:
        return "not a section"


async def test_hook_instructions(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    chat = ScriptedChat(["ok"])
    plugin = Instructions(InstructionSection("RULES: use tabs", "AGENTS.md", priority=5),
                          InstructionSection("X" * 4000, "skills", priority=0))
    agent = make_agent(tmp_path, chat, ("instr", plugin), ("broken", BrokenInstructions()),
                       ("wrong", WrongInstructions()), instructions_budget_tokens=200)
    seen: list[Envelope] = []
    result = await agent.run("hello", session_id="s1", on_event=seen.append)

    assert result.stopped_reason == "final"
    assert plugin.inputs == ["hello"]
    # The model got the base prompt and the section that fits; the skills section was cut.
    assert system_of(chat.calls[0][0]) == "BASE PROMPT\n\nRULES: use tabs"
    types = event_types(seen)
    assert types[:2] == ["run_start", "instructions_cut"]
    start = seen[0].event
    assert isinstance(start, RunStart)
    assert [(r.source, r.priority, r.kept) for r in start.instructions] == [
        ("AGENTS.md", 5, True), ("skills", 0, False)]
    cut = seen[1].event
    assert isinstance(cut, InstructionsCut)
    assert (cut.source, cut.tokens, cut.budget_tokens) == ("skills", 1000, 200)
    # Recorded in the transcript too, and the failures named in the log.
    recorded = [r["event"]["type"] for r in records(agent, "s1") if r.get("kind") == "event"]
    assert "instructions_cut" in recorded
    assert "lich_instructions of plugin broken failed" in caplog.text
    assert "lich_instructions of plugin wrong returned str" in caplog.text
    await agent.aclose()


async def test_hook_instructions__survive_three_compressions_verbatim(tmp_path: Path) -> None:
    section = InstructionSection("PINNED: never delete files", "AGENTS.md")
    seen_systems: list[str] = []
    summaries = 0

    def respond(request: ScriptRequest) -> Reply:
        nonlocal summaries
        if request.messages[0] == SystemMessage(COMPRESSION_SYSTEM_PROMPT):
            summaries += 1
            return Reply(f"SUMMARY {summaries}")
        seen_systems.append(system_of(request.messages))
        if len(seen_systems) < 16:
            return Reply(tool_calls=[ToolCall(f"c{len(seen_systems)}", "echo",
                                              {"text": "y" * 600})])
        return Reply("done")

    # Two recent messages kept: each compression brings the estimate under the threshold,
    # so the next turn's tool output makes the next compression due.
    agent = make_agent(tmp_path, ScriptedChat(responder=respond),
                       ("instr", Instructions(section)),
                       ("shape", CompressGate(Compression(keep_recent=2))),
                       context_budget_tokens=1000, compress_threshold=0.5, max_turns=20)
    seen: list[Envelope] = []
    result = await agent.run("go", on_event=seen.append)

    assert result.stopped_reason == "final"
    assert event_types(seen).count("compress_end") >= 3, " ".join(
        f"{e.event.type}:{getattr(e.event, 'estimated_tokens', '')}" for e in seen)
    assert summaries >= 3
    # Every model call, before and after every compression, had the section verbatim.
    assert set(seen_systems) == {"BASE PROMPT\n\nPINNED: never delete files"}
    assert system_of(result.messages) == "BASE PROMPT\n\nPINNED: never delete files"
    await agent.aclose()


# ------------------------------------------------------------------ lich_user_prompt


class PromptPlugin:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.seen: list[tuple[str, str]] = []

    @hookimpl
    def lich_user_prompt(self, run: RunInfo, message: str) -> Any:
        self.seen.append((run.input, message))
        return self.answer


async def test_hook_user_prompt(tmp_path: Path) -> None:
    chat = ScriptedChat(["fine"])
    first = PromptPlugin(PromptEdit(text="hello, politely"))
    second = PromptPlugin(PromptEdit(context="(the user is on call)"))
    # pluggy calls the later-registered plugin first: register `second` before `first`.
    agent = make_agent(tmp_path, chat, ("second", second), ("first", first))
    seen: list[Envelope] = []
    result = await agent.run("hello", session_id="s1", on_event=seen.append)

    assert result.stopped_reason == "final"
    assert first.seen == [("hello", "hello")]
    assert second.seen == [("hello", "hello, politely")]
    wanted = "hello, politely\n\n(the user is on call)"
    assert chat.calls[0][0][-1] == UserMessage(wanted)
    start = seen[0].event
    assert isinstance(start, RunStart)
    assert start.input == wanted
    meta = [r for r in records(agent, "s1") if r.get("event") == "run_start"]
    assert meta[0]["input"] == wanted
    assert meta[0]["edited_by"] == ["first", "second"]
    assert agent.sessions.history("s1")[1] == UserMessage(wanted)
    await agent.aclose()


async def test_hook_user_prompt__a_block_stops_the_run_before_any_model_call(
    tmp_path: Path,
) -> None:
    chat = ScriptedChat(["never"])
    after = PromptPlugin(None)
    agent = make_agent(tmp_path, chat, ("after", after),
                       ("guard", PromptPlugin(Block("looks like a key"))))
    seen: list[Envelope] = []
    result = await agent.run("my key is sk-123", session_id="s1", on_event=seen.append)

    assert result.stopped_reason == "blocked"
    assert chat.calls == []
    assert after.seen == []  # the chain stopped at the block
    assert event_types(seen) == ["run_start", "prompt_blocked", "run_end"]
    blocked = seen[1].event
    assert (blocked.reason, blocked.blocked_by) == ("looks like a key", "guard")  # type: ignore[union-attr]
    # The refused message is not part of the conversation; the refusal is recorded.
    assert all(not isinstance(m, UserMessage) for m in agent.sessions.history("s1"))
    assert any(r.get("kind") == "event" and r["event"]["type"] == "prompt_blocked"
               for r in records(agent, "s1"))
    await agent.aclose()


def test_an_edit_cannot_empty_the_message() -> None:
    with pytest.raises(ValueError, match="text must be a non-empty string"):
        PromptEdit(text="  ")
    assert PromptEdit(context="only context").text is None


class RaisingPrompt:
    @hookimpl
    async def lich_user_prompt(self, message: str) -> Any:
        raise RuntimeError("filter broke")


async def test_hook_user_prompt__a_failing_hook_blocks_the_message(tmp_path: Path) -> None:
    chat = ScriptedChat(["never"])
    agent = make_agent(tmp_path, chat, ("filter", RaisingPrompt()))
    seen: list[Envelope] = []
    result = await agent.run("hello", on_event=seen.append)
    assert result.stopped_reason == "blocked"
    assert chat.calls == []
    blocked = seen[1].event
    assert blocked.reason == "hook_error (filter): RuntimeError: filter broke"  # type: ignore[union-attr]
    await agent.aclose()


async def test_hook_user_prompt__reaches_the_gateway_bus(tmp_path: Path) -> None:
    from lich.gateway import GatewayBus, InboundMessage

    chat = ScriptedChat(["fine"])
    agent = make_agent(tmp_path, chat, ("edit", PromptPlugin(PromptEdit(text="rewritten"))))
    bus = GatewayBus(agent)
    reply = await bus.handle(InboundMessage("webhook", "chat-1", "user-1", "original"))
    assert reply.text == "fine"
    assert chat.calls[0][0][-1] == UserMessage("rewritten")
    await agent.aclose()

    guarded = make_agent(tmp_path, chat, ("guard", PromptPlugin(Block("not here"))))
    reply = await GatewayBus(guarded).handle(InboundMessage("webhook", "chat-2", "u", "hi"))
    assert (reply.kind, reply.text) == ("reply", "message refused: guard: not here")
    assert len(chat.calls) == 1  # no model call for the refused one
    await guarded.aclose()


# ------------------------------------------------------------------ lich_prepare_tools


class ToolOffer:
    def __init__(self) -> None:
        self.turns: list[tuple[int, list[str]]] = []

    @hookimpl
    def lich_prepare_tools(self, turn: int,
                           tools: tuple[ToolDefinition, ...]) -> list[ToolDefinition]:
        self.turns.append((turn, [t.name for t in tools]))
        by_name = {t.name: t for t in tools}
        offered = [by_name["echo"].renamed("say"),
                   attrs.evolve(by_name["shout"], description="Shout (loud).")]
        return offered if turn == 1 else [by_name["echo"]]


async def test_hook_prepare_tools(tmp_path: Path) -> None:
    def respond(request: ScriptRequest) -> Reply:
        if len(request.tool_results_since_user()) == 0:
            return Reply(tool_calls=[ToolCall("c1", "say", {"text": "hi"}),
                                     ToolCall("c2", "wait_forever", {})])
        if len(request.tool_results_since_user()) == 2:
            # Turn 2 offers only echo: shout is not there to call.
            return Reply(tool_calls=[ToolCall("c3", "shout", {"text": "x"})])
        return Reply("done")

    chat = ScriptedChat(responder=respond)
    offer = ToolOffer()
    agent = make_agent(tmp_path, chat, ("offer", offer))
    seen: list[Envelope] = []
    result = await agent.run("go", on_event=seen.append)

    assert result.stopped_reason == "final"
    assert offer.turns[0] == (1, ["echo", "shout", "wait_forever"])  # asked every turn
    assert [t for t, _ in offer.turns] == [1, 2, 3]
    offered = [[(d.name, d.description) for d in call[1]] for call in chat.calls]
    assert offered[0] == [("say", "Echo the text."), ("shout", "Shout (loud).")]
    assert offered[1] == [("echo", "Echo the text.")]
    # The renamed call ran echo; the unoffered ones ran nothing.
    assert RAN == ["echo:hi"]
    tool_messages = [(m.name, m.content) for m in result.messages if m.role == "tool"]
    assert tool_messages[0] == ("say", "echo: hi")  # the name the model used
    assert "unknown_tool: wait_forever (not offered this turn)" in tool_messages[1][1]
    assert "unknown_tool: shout (not offered this turn)" in tool_messages[2][1]
    # Hooks and tool_call_end see the call under the tool's own name.
    ends = [e.event for e in seen if e.event.type == "tool_call_end"]
    assert ends[0].call.name == "echo"
    assert_valid_transcript(result.messages)
    await agent.aclose()


class BrokenOffer:
    @hookimpl
    def lich_prepare_tools(self) -> Any:
        return {"not": "definitions"}


async def test_hook_prepare_tools__a_bad_answer_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    chat = ScriptedChat(["ok"])
    agent = make_agent(tmp_path, chat, ("bad", BrokenOffer()))
    await agent.run("go")
    assert [d.name for d in chat.calls[0][1]] == ["echo", "shout", "wait_forever"]
    assert "lich_prepare_tools of plugin bad returned dict" in caplog.text
    await agent.aclose()


# ------------------------------------------------------------------ lich_before_compress


class CompressGate:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.seen: list[int] = []

    @hookimpl
    def lich_before_compress(self, messages: tuple[Message, ...]) -> Any:
        self.seen.append(len(messages))
        return self.answer


def _long_run_responder(summary_requests: list[Sequence[Message]]) -> Any:
    turns = 0

    def respond(request: ScriptRequest) -> Reply:
        nonlocal turns
        if is_summary_request(request.messages):
            summary_requests.append(request.messages)
            return Reply("SUMMARY")
        turns += 1
        if turns < 5:
            return Reply(tool_calls=[ToolCall(f"c{turns}", "echo", {"text": "z" * 600})])
        return Reply("done")

    return respond


async def test_hook_before_compress(tmp_path: Path) -> None:
    summaries: list[Sequence[Message]] = []
    gate = CompressGate(Block("mid-refactor"))
    agent = make_agent(tmp_path, ScriptedChat(responder=_long_run_responder(summaries)),
                       ("gate", gate), context_budget_tokens=300, compress_threshold=0.5)
    seen: list[Envelope] = []
    result = await agent.run("go", on_event=seen.append)

    assert result.stopped_reason == "final"
    assert summaries == []  # vetoed: no summariser call
    assert gate.seen  # it saw the conversation
    types = event_types(seen)
    assert "compress_start" not in types
    skipped = [e.event for e in seen if e.event.type == "compress_skipped"]
    assert skipped
    assert (skipped[0].reason, skipped[0].skipped_by) == ("mid-refactor", "gate")
    await agent.aclose()


async def test_hook_before_compress__shapes_the_summary(tmp_path: Path) -> None:
    summaries: list[Sequence[Message]] = []
    gate = CompressGate(Compression(keep_recent=2, focus="the files changed"))
    agent = make_agent(tmp_path, ScriptedChat(responder=_long_run_responder(summaries)),
                       ("gate", gate), context_budget_tokens=300, compress_threshold=0.5)
    result = await agent.run("go")
    assert result.stopped_reason == "final"
    assert summaries
    assert "Keep in particular: the files changed" in summaries[0][1].content
    await agent.aclose()


def test_a_compression_keeps_at_least_one_message() -> None:
    with pytest.raises(ValueError, match="keep_recent must be a positive integer"):
        Compression(keep_recent=0)


# ------------------------------------------------------------------ lich_after_final


class Insist:
    def __init__(self, times: int) -> None:
        self.times = times
        self.asked: list[str] = []

    @hookimpl
    def lich_after_final(self, outcome: Any) -> FollowUp | None:
        self.asked.append(outcome.final.content)
        if len(self.asked) <= self.times:
            return FollowUp("Run the tests too.")
        return None


async def test_hook_after_final(tmp_path: Path) -> None:
    chat = ScriptedChat(["first answer", "second answer"])
    insist = Insist(times=1)
    agent = make_agent(tmp_path, chat, ("insist", insist))
    seen: list[Envelope] = []
    result = await agent.run("go", session_id="s1", on_event=seen.append)

    assert (result.stopped_reason, result.text) == ("final", "second answer")
    assert insist.asked == ["first answer", "second answer"]
    assert chat.calls[1][0][-1] == UserMessage("Run the tests too.")
    types = event_types(seen)
    assert types.count("final") == 2
    assert types.count("turn_start") == types.count("turn_end") == 2
    continued = [e.event for e in seen if e.event.type == "run_continued"]
    assert [(c.turn, c.prompt, c.continued_by) for c in continued] == [
        (1, "Run the tests too.", "insist")]
    assert UserMessage("Run the tests too.") in agent.sessions.history("s1")
    await agent.aclose()


async def test_hook_after_final__is_bounded_by_the_turn_budget(tmp_path: Path) -> None:
    chat = ScriptedChat(["a1", "a2", "a3", "a4"])
    insist = Insist(times=100)  # never satisfied
    agent = make_agent(tmp_path, chat, ("insist", insist), max_turns=3)
    result = await agent.run("go")
    # Asked after turns 1 and 2; the answer of the last turn stands.
    assert (result.stopped_reason, result.text, result.outcome.turns_used) == ("final", "a3", 3)
    assert insist.asked == ["a1", "a2"]
    assert len(chat.calls) == 3
    await agent.aclose()


# ------------------------------------------------------------------ lich_event's run


class RunAwareAudit:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    @hookimpl
    def lich_event(self, event: Envelope, run: RunInfo) -> None:
        self.seen.append((event.type, run.run_id, run.input))


class OldAudit:
    def __init__(self) -> None:
        self.types: list[str] = []

    @hookimpl
    def lich_event(self, event: Envelope) -> None:
        self.types.append(event.type)


async def test_hook_event__gets_the_run(tmp_path: Path) -> None:
    audit, old = RunAwareAudit(), OldAudit()
    agent = make_agent(tmp_path, ScriptedChat(["ok"]), ("audit", audit), ("old", old),
                       ("edit", PromptPlugin(PromptEdit(text="edited"))))
    result = await agent.run("hello")
    assert {(run_id, text) for _, run_id, text in audit.seen} == {(result.run_id, "edited")}
    assert [t for t, _, _ in audit.seen] == old.types
    assert old.types[0] == "run_start"
    assert old.types[-1] == "run_end"
    await agent.aclose()


# ------------------------------------------------------------------ turn_end pairing


def assert_paired(types: list[str]) -> None:
    open_turn = False
    for kind in types:
        if kind == "turn_start":
            assert not open_turn, types
            open_turn = True
        elif kind == "turn_end":
            assert open_turn, types
            open_turn = False
        elif kind == "run_end":
            assert not open_turn, types


class StopAtTwo:
    @hookimpl
    def lich_before_model_call(self, turn: int) -> Any:
        from lich import Stop

        return Stop("enough") if turn == 2 else None


@pytest.mark.parametrize("ending", ["final", "max_turns", "budget", "error", "cancel"])
async def test_every_turn_start_has_its_turn_end(tmp_path: Path, ending: str) -> None:
    def respond(request: ScriptRequest) -> Reply | Fail:
        if ending == "error" and request.tool_results_since_user():
            return Fail(401)
        if ending == "cancel":
            return Reply(tool_calls=[ToolCall("w", "wait_forever", {})])
        if ending == "final" and request.tool_results_since_user():
            return Reply("done")
        return Reply(tool_calls=[ToolCall(f"c{len(request.messages)}", "echo", {"text": "a"})])

    plugins: list[tuple[str, object]] = [("stop", StopAtTwo())] if ending == "budget" else []
    agent = make_agent(tmp_path, ScriptedChat(responder=respond), *plugins, max_turns=3)
    seen: list[Envelope] = []
    token = CancelToken()

    def on_event(envelope: Envelope) -> None:
        seen.append(envelope)
        if envelope.event.type == "tool_call_start" and ending == "cancel":
            asyncio.get_running_loop().call_later(0.05, token.cancel)

    try:
        result = await agent.run("go", cancel=token, on_event=on_event)
        reason = result.stopped_reason
    except Exception:
        reason = "error"
    expected = {"final": "final", "max_turns": "budget", "budget": "budget",
                "error": "error", "cancel": "aborted"}[ending]
    assert reason == expected
    types = event_types(seen)
    assert types.count("turn_start") == types.count("turn_end") >= 1
    assert_paired(types)
    await agent.aclose()


# ------------------------------------------------------------------ model roles


async def test_chat_for_falls_back_to_the_runs_model_and_refuses_a_hand_made_run(
    tmp_path: Path,
) -> None:
    chat = ScriptedChat(["ok"])
    agent = make_agent(tmp_path, chat)
    assert agent.chat_for("judge") is agent.chat
    with pytest.raises(LookupError, match="no models"):
        RunInfo("r", "s", "i", str(tmp_path)).chat_for("compress")
    await agent.aclose()


def test_a_model_role_naming_an_unknown_provider_is_a_config_error(tmp_path: Path) -> None:
    config = make_test_config(
        tmp_path, providers=(ProviderConfig(name="main", model="m"),),
        models={"compress": ModelRole(model="small", provider="nope")})
    with pytest.raises(ConfigError, match=r"\$\.models\.compress\.provider: no provider "
                                          r"named 'nope' \(configured: main\)"):
        Agent(config, chat=ScriptedChat(["x"]))


async def test_the_compress_role_summarises_with_its_own_model(
    tmp_path: Path, lich_scripted_server: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    turns = 0

    def respond(request: ScriptRequest) -> Reply:
        nonlocal turns
        if is_summary_request(request.messages):
            return Reply("SUMMARY")
        turns += 1
        if turns < 7:
            return Reply(tool_calls=[ToolCall(f"c{turns}", "echo", {"text": "q" * 600})])
        return Reply("done")

    server: ScriptedServer = lich_scripted_server(responder=respond)
    monkeypatch.setenv("LICH_ROLE_KEY", "sk-loopback")
    config = make_test_config(
        tmp_path, plugins=("openai_compat",), context_budget_tokens=300,
        compress_threshold=0.5,
        providers=(ProviderConfig(kind="openai_compat", name="main", model="big-model",
                                  base_url=server.base_url, api_key_env="LICH_ROLE_KEY"),),
        models={"compress": ModelRole(model="small-model")})
    agent = Agent(config, plugins=[("tools", Tools()),
                                   ("shape", CompressGate(Compression(keep_recent=2)))])
    try:
        seen: list[Envelope] = []
        result = await agent.run("go", on_event=seen.append)
        run_seen: list[Any] = []

        class Peek:
            @hookimpl
            def lich_run_start(self, run: RunInfo) -> None:
                run_seen.append(run.chat_for("compress"))

        agent.host.register_object(Peek(), "peek")
        await agent.run("again")
    finally:
        await agent.aclose()
    assert result.stopped_reason == "final", event_types(seen)
    models = [(is_summary_request(r.messages), r.model) for r in server.model.requests]
    assert (True, "small-model") in models
    assert {m for summary, m in models if not summary} == {"big-model"}
    assert {m for summary, m in models if summary} == {"small-model"}
    # The run's hooks get the same role chat (built once per agent).
    assert run_seen == [agent.chat_for("compress")]
    assert json.dumps(event_types(seen)).count("compress_end") >= 1


# ------------------------------------------------------------------ per-run plugin state


class Counter:
    def __init__(self) -> None:
        self.ends: list[tuple[str, int]] = []

    @hookimpl
    def lich_run_start(self, run: RunInfo) -> None:
        run.state_for("counter")["calls"] = 0

    @hookimpl
    def lich_after_tool_call(self, run: RunInfo) -> None:
        run.state_for("counter")["calls"] += 1

    @hookimpl
    def lich_run_end(self, run: RunInfo) -> None:
        self.ends.append((run.run_id, run.state_for("counter")["calls"]))


async def test_state_for_is_one_mapping_per_plugin_and_run(tmp_path: Path) -> None:
    chat = ScriptedChat([Reply(tool_calls=[ToolCall("c1", "echo", {"text": "a"}),
                                           ToolCall("c2", "echo", {"text": "b"})]), "one",
                         "two"])
    counter = Counter()
    # The prompt edit makes a new RunInfo (its input changes): the state goes with it.
    agent = make_agent(tmp_path, chat, ("counter", counter),
                       ("edit", PromptPlugin(PromptEdit(context="ctx"))))
    first = await agent.run("go")
    second = await agent.run("again")
    assert counter.ends == [(first.run_id, 2), (second.run_id, 0)]
    run = RunInfo("r", "s", "i", str(tmp_path))
    assert run.state_for("a") is run.state_for("a")
    assert run.state_for("a") is not run.state_for("b")
    await agent.aclose()
