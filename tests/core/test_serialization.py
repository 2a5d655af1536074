"""The one converter: tagged JSON for every message and event type, and back."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lich import events as ev
from lich import serialization as ser
from lich.types import (
    AssistantMessage,
    ChatResult,
    Message,
    ProviderError,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    Usage,
    UserMessage,
    json_type_name,
)

CALL = ToolCall("c1", "read_file", {"path": "a.txt", "nested": {"k": [1, 2.5, None, True]}})
RESULT = ChatResult(AssistantMessage("hi", (CALL,)), Usage(3, 4, 7), "tool_calls", "m", "p")

MESSAGES: list[Message] = [
    SystemMessage("be brief"),
    UserMessage("héllo ✓"),
    AssistantMessage("plain"),
    AssistantMessage("", (CALL, ToolCall("c2", "x", {}, args_error="Expecting ',' delimiter"))),
    ToolMessage("c1", "read_file", "contents"),
    ToolMessage("c2", "x", '{"ok": false}', is_error=True),
]

EVENTS: dict[type[Any], ev.Event] = {
    ev.RunStart: ev.RunStart("input", "/work", "model-x", (
        ev.InstructionReport("AGENTS.md", 5, 120), ev.InstructionReport("skills", 0, 900,
                                                                        kept=False))),
    ev.InstructionsCut: ev.InstructionsCut("skills", 0, 900, 1000),
    ev.PromptBlocked: ev.PromptBlocked("looks like a key", "keyguard"),
    ev.CompressSkipped: ev.CompressSkipped(9000, "mid-refactor", "pinner"),
    ev.RunContinued: ev.RunContinued(2, "run the tests", "insist"),
    ev.TurnStart: ev.TurnStart(1),
    ev.CompressStart: ev.CompressStart(900),
    ev.CompressEnd: ev.CompressEnd(120, 400, ok=False),
    ev.LlmStart: ev.LlmStart(2),
    ev.TextDelta: ev.TextDelta("pie", "openai"),
    ev.StreamReset: ev.StreamReset("openai", "failover"),
    ev.Retry: ev.Retry("openai", 2, "rate_limit", 1.25, "429"),
    ev.Failover: ev.Failover("a", "b", "auth", "401"),
    ev.LlmEnd: ev.LlmEnd(2, RESULT),
    ev.ToolCallStart: ev.ToolCallStart(2, CALL),
    ev.ToolOutput: ev.ToolOutput("c1", "ok\n\x1b[31mred ✓"),
    ev.ToolCallEnd: ev.ToolCallEnd(
        2, CALL, ToolResult.failure("blocked_by_plugin: no", "partial"), 1.5,
        rewritten_by=("a", "b"), blocked_by="c", replaced_by=None,
    ),
    ev.Final: ev.Final(AssistantMessage("done"), ChatResult(AssistantMessage("done"))),
    ev.BudgetExhausted: ev.BudgetExhausted(25),
    ev.TurnEnd: ev.TurnEnd(25),
    ev.ApprovalRequested: ev.ApprovalRequested(
        "3f2a", ToolCall("c1", "terminal", {"command": "git push"}), "terminal needs approval",
        ("approvals",), ("terminal(git push*)",), None),
    ev.ApprovalResolved: ev.ApprovalResolved(
        "3f2a", "c1", True, "always", "terminal", {"command": "git push --dry-run"}, "ok", 4.5),
    ev.ErrorEvent: ev.ErrorEvent("auth", "p: auth 401: bad key"),
    ev.RunEnd: ev.RunEnd("error", 3, Usage(1, 2, 3), "ProviderError: boom"),
}


def test_every_event_type_has_a_sample() -> None:
    assert set(EVENTS) == set(typing.get_args(ev.Event))


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: f"{m.role}")
def test_messages_round_trip_tagged_by_role(message: Message) -> None:
    data = ser.message_to_dict(message)
    assert data["role"] == message.role
    assert json.loads(json.dumps(data)) == data  # plain JSON
    assert ser.message_from_dict(data) == message


def test_message_json_shape_leaves_out_empty_defaults() -> None:
    assert ser.message_to_dict(AssistantMessage("x")) == {"role": "assistant", "content": "x"}
    assert ser.message_to_dict(ToolMessage("1", "t", "r")) == {
        "role": "tool", "tool_call_id": "1", "name": "t", "content": "r",
    }  # fmt: skip
    assert ser.message_to_dict(MESSAGES[3])["tool_calls"][1]["args_error"] == (
        "Expecting ',' delimiter"
    )
    assert "args_error" not in ser.message_to_dict(MESSAGES[3])["tool_calls"][0]


@pytest.mark.parametrize("event", list(EVENTS.values()), ids=lambda e: e.type)
def test_events_round_trip_tagged_by_type(event: ev.Event) -> None:
    data = ser.event_to_dict(event)
    assert data["type"] == event.type
    assert json.loads(json.dumps(data)) == data
    assert ser.event_from_dict(data) == event


def test_envelopes_carry_the_schema_version_and_their_place() -> None:
    envelope = ev.Envelope("run1", "sess1", 4, 1700000000.5, EVENTS[ev.ToolCallEnd])
    data = ser.envelope_to_dict(envelope)
    assert {k: data[k] for k in ("v", "run_id", "session_id", "seq", "ts", "type")} == {
        "v": ev.EVENT_SCHEMA_VERSION, "run_id": "run1", "session_id": "sess1", "seq": 4,
        "ts": 1700000000.5, "type": "tool_call_end",
    }  # fmt: skip
    assert data["rewritten_by"] == ["a", "b"]
    assert ser.event_from_dict(data) == envelope.event
    assert envelope.type == "tool_call_end"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"role": "robot", "content": "x"}, "unknown message role: 'robot'"),
        ("just text", "a message must be a JSON object"),
        ({"role": "user"}, "$.content"),
        ({"role": "user", "content": 3}, "$.content: expected a string, got integer"),
        ({"role": "user", "content": "x", "mood": "happy"}, "$.mood: unknown key"),
        ({"role": "tool", "tool_call_id": "1", "name": "t", "content": "c", "is_error": "no"},
         "$.is_error: expected true or false, got string"),
        ({"role": "assistant", "content": "", "tool_calls": [{"id": "1", "name": "t",
                                                              "args": [1]}]},
         "expected a JSON object"),
    ],
)
def test_bad_messages_are_errors_naming_the_problem(data: Any, problem: str) -> None:
    with pytest.raises(ser.SerializationError) as info:
        ser.message_from_dict(data)
    assert problem in str(info.value)


def test_bad_events_are_errors() -> None:
    with pytest.raises(ser.SerializationError, match="unknown event type: 'nope'"):
        ser.event_from_dict({"type": "nope"})
    with pytest.raises(ser.SerializationError, match="turn"):
        ser.event_from_dict({"type": "turn_start", "turn": "one"})
    with pytest.raises(ser.SerializationError):
        ser.messages_from_dicts({"role": "user"})


def test_structure_and_unstructure_any_type() -> None:
    assert ser.unstructure(Usage(1, 2, 3)) == {
        "prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3,
        "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0,
    }  # fmt: skip
    # A usage written before the breakdowns existed (events v1, transcripts v1) still reads.
    assert ser.structure({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
                         Usage) == Usage(1, 2, 3)
    assert ser.structure({"ok": True, "output": "x"}, ToolResult) == ToolResult(True, "x")
    with pytest.raises(ser.SerializationError, match=r"invalid ToolResult: .*\$\.ok"):
        ser.structure({"output": "x"}, ToolResult)


_text = st.text(max_size=30)
_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_calls = st.builds(
    ToolCall, _text, _text, st.dictionaries(_text, _json, max_size=3), st.none() | _text
)
_messages = st.one_of(
    st.builds(SystemMessage, _text),
    st.builds(UserMessage, _text),
    st.builds(AssistantMessage, _text, st.lists(_calls, max_size=3)),
    st.builds(ToolMessage, _text, _text, _text, st.booleans()),
)


@settings(database=None, deadline=None, max_examples=200)
@given(st.lists(_messages, max_size=6))
def test_any_message_list_round_trips_through_json(messages: list[Message]) -> None:
    text = json.dumps([ser.message_to_dict(m) for m in messages], ensure_ascii=False)
    assert ser.messages_from_dicts(json.loads(text)) == messages


def test_tool_result_content_for_the_model() -> None:
    assert ToolResult.success("raw").to_content() == "raw"
    assert ToolResult.failure("boom", "partial").to_content() == (
        '{"ok": false, "output": "partial", "error": "boom"}'
    )


def test_usage_adds_up_and_provider_errors_read_well() -> None:
    assert Usage(1, 2, 3) + Usage(10, 20, 30) == Usage(11, 22, 33)
    error = ProviderError("rate_limit", "openai", "slow down", status=429, retry_after=2.0)
    assert str(error) == "openai: rate_limit 429: slow down"
    assert error.retry_after == 2.0
    assert "rate_limit" in repr(error)
    assert isinstance(error, Exception)


def test_messages_are_frozen_and_args_are_copied() -> None:
    args = {"a": 1}
    call = ToolCall("1", "t", args)
    args["a"] = 2
    assert call.args == {"a": 1}
    with pytest.raises(AttributeError):
        call.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("value", "name"),
    [(None, "null"), (True, "boolean"), (3, "integer"), (2.5, "number"), ("x", "string"),
     ([1], "array"), ((1,), "array"), ({"a": 1}, "object"), (b"x", "bytes")],
)
def test_json_type_name(value: object, name: str) -> None:
    assert json_type_name(value) == name
