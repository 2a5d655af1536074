"""A run's journal (:class:`lich.journal.TurnJournal`): the agent calls it at its steps,
in order, through the run's own writer, and knows nothing of what it records — any
journal works, not only the durable turns of :mod:`lich.turns`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lich import hookimpl, tool
from lich.agent import Agent
from lich.journal import RunRecorder, TurnJournal
from lich.testing import Reply, ScriptedChat, ScriptRequest, make_test_config
from lich.tools import Tool, ToolRegistry
from lich.types import ToolCall, ToolResult


@tool
def note(text: str) -> str:
    """Write a note."""
    return f"noted {text}"


@tool
def forbidden() -> str:
    """Never runs: the journal stops it."""
    raise AssertionError("the journal stopped this call")


class Tools:
    @hookimpl
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(note)
        registry.register(forbidden)


class Ledger:
    """A journal of its own: a ledger record before each call, a verdict after."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.recorder: RunRecorder | None = None

    def fence(self, writer: object) -> None:
        self.steps.append("fence")

    def message_fields(self) -> Mapping[str, Any]:
        self.steps.append("message_fields")
        return {"ledger": "L1"}

    def attach(self, recorder: RunRecorder, run_id: str, *, continuing: bool) -> None:
        self.steps.append(f"attach continuing={continuing}")
        self.recorder = recorder
        recorder.append("meta", event="ledger_open", run_id=run_id)

    async def before_tool(self, call: ToolCall, tool: Tool | None) -> ToolResult | None:
        self.steps.append(f"before {call.name} ({tool.name if tool else None})")
        if call.name == "forbidden":
            return ToolResult.failure("ledger_closed: not today")
        assert self.recorder is not None
        self.recorder.append("meta", event="ledger_call", call_id=call.id)
        assert await self.recorder.flush()
        return None

    def after_tool(self, call: ToolCall, result: ToolResult, cancelled: bool) -> ToolResult:
        self.steps.append(f"after {call.name} ok={result.ok} cancelled={cancelled}")
        return ToolResult.success(result.output + " [ledgered]") if result.ok else result


async def test_a_journal_is_called_at_its_steps_through_the_runs_writer(tmp_path: Path) -> None:
    def respond(request: ScriptRequest) -> Reply:
        if not request.tool_results_since_user():
            return Reply(tool_calls=[ToolCall("c1", "note", {"text": "a"}),
                                     ToolCall("c2", "forbidden", {})])
        return Reply("done")

    ledger = Ledger()
    assert isinstance(ledger, TurnJournal)
    agent = Agent(make_test_config(tmp_path), plugins=[("tools", Tools())],
                  chat=ScriptedChat(responder=respond))
    result = await agent.run("go", session_id="s1", turn=ledger)

    assert ledger.steps == [
        "fence", "message_fields", "attach continuing=False",
        "before note (note)", "after note ok=True cancelled=False",
        "before forbidden (forbidden)", "after forbidden ok=False cancelled=False",
    ]
    tool_outputs = [m.content for m in result.messages if m.role == "tool"]
    assert "noted a [ledgered]" in tool_outputs[0]
    assert "ledger_closed: not today" in tool_outputs[1]
    records = agent.sessions.read("s1").records
    kinds = [r.get("event") or r.get("kind") for r in records]
    # Its records are in the run's transcript, in the order of the steps.
    assert kinds.index("ledger_open") < kinds.index("ledger_call")
    user = [r for r in records if r.get("kind") == "message"
            and r["message"]["role"] == "user"]
    assert user[0]["ledger"] == "L1"
    await agent.aclose()


async def test_without_kept_transcripts_a_journal_has_nothing_to_do(tmp_path: Path) -> None:
    ledger = Ledger()
    agent = Agent(make_test_config(tmp_path, persist_sessions=False),
                  plugins=[("tools", Tools())],
                  chat=ScriptedChat([Reply(tool_calls=[ToolCall("c1", "note", {"text": "a"})]),
                                     "done"]))
    result = await agent.run("go", turn=ledger)
    assert result.text == "done"
    assert ledger.steps == []
    await agent.aclose()
