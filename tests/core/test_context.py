"""Token estimates and compression (``lich.context``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lich import context
from lich.testing import Fail, Reply, ScriptedChat
from lich.types import (
    AssistantMessage,
    ChatOptions,
    ChatResult,
    Message,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    Usage,
    UserMessage,
)

from .conftest import assert_valid_transcript


def test_text_estimate_is_chars_over_four_rounded_up() -> None:
    assert context.estimate_text_tokens("") == 0
    assert context.estimate_text_tokens("abcdefg") == 2
    assert context.estimate_text_tokens("abcdefgh") == 2
    assert context.estimate_text_tokens("abcdefghi") == 3


def test_message_estimate_counts_tool_calls_and_tool_results() -> None:
    assert context.message_tokens(UserMessage("abcd")) == 1
    calls = (ToolCall("1", "read_file", {"path": "a.txt"}),)
    payload = json.dumps([{"id": "1", "name": "read_file", "args": {"path": "a.txt"}}])
    assert context.message_tokens(AssistantMessage("abcd", calls)) == 1 + -(-len(payload) // 4)
    assert context.message_tokens(ToolMessage("1", "read_file", "abcd")) == 1 + 8


def test_schema_estimate_includes_every_definition() -> None:
    assert context.schema_tokens(()) == 0
    one = ToolDefinition("a", "d" * 400, {"type": "object"})
    two = ToolDefinition("b", "d" * 400, {"type": "object"})
    assert context.schema_tokens((one,)) >= 100
    assert context.schema_tokens((one, two)) >= 200


def _conversation() -> list[Message]:
    """system, then three user turns; the middle one uses two tools."""
    return [
        SystemMessage("sys"),
        UserMessage("first question"),
        AssistantMessage("first answer"),
        UserMessage("second question"),
        AssistantMessage("", (ToolCall("a", "t", {}), ToolCall("b", "t", {}))),
        ToolMessage("a", "t", "ra"),
        ToolMessage("b", "t", "rb"),
        AssistantMessage("second answer"),
        UserMessage("third question"),
        AssistantMessage("", (ToolCall("c", "t", {}),)),
        ToolMessage("c", "t", "rc"),
    ]


def test_split_never_starts_the_kept_window_with_tool_results() -> None:
    messages = _conversation()
    for keep in range(1, len(messages)):
        split = context.split_for_compression(messages, keep)
        assert list(split.system) == [messages[0]]
        assert _joined(split) == messages[1:]
        assert not isinstance(split.recent[0], ToolMessage), keep
        # Every part is a valid transcript on its own: no pair is split.
        assert_valid_transcript(list(split.before))
        assert_valid_transcript(list(split.after))
        assert_valid_transcript(list(split.recent))


def test_split_always_keeps_the_latest_user_message() -> None:
    messages: list[Message] = [
        UserMessage("old"),
        UserMessage("latest request"),
        *[m for i in range(6) for m in (
            AssistantMessage("", (ToolCall(f"c{i}", "t", {}),)),
            ToolMessage(f"c{i}", "t", "r"),
        )],
    ]  # fmt: skip
    split = context.split_for_compression(messages, keep_recent=2)
    # The request is pinned; the tool turns that followed it are summarised, except the last.
    assert split.pinned == UserMessage("latest request")
    assert list(split.before) == [UserMessage("old")]
    assert list(split.after) == messages[2:12]
    assert list(split.recent) == messages[12:]


def test_split_keeps_the_latest_user_message_in_the_window_when_it_is_recent() -> None:
    messages = _conversation()
    split = context.split_for_compression(messages, keep_recent=3)
    assert split.pinned is None
    assert split.recent[0] == UserMessage("third question")


def _joined(split: context.CompressionSplit) -> list[Message]:
    pinned = [split.pinned] if split.pinned is not None else []
    return [*split.before, *pinned, *split.after, *split.recent]


@settings(database=None, deadline=None, max_examples=150)
@given(
    st.lists(
        st.sampled_from(["user", "summary", "answer", "tools1", "tools2"]), min_size=1, max_size=25
    ),
    st.integers(min_value=0, max_value=12),
)
def test_split_properties_hold_for_any_conversation(shape: list[str], keep: int) -> None:
    messages: list[Message] = [SystemMessage("s")]
    for i, kind in enumerate(shape):
        if kind == "user":
            messages.append(UserMessage(f"u{i}"))
        elif kind == "summary":
            messages.append(
                UserMessage(f"{context.SUMMARY_OPEN}\ns{i}\n{context.SUMMARY_CLOSE}")
            )
        elif kind == "answer":
            messages.append(AssistantMessage(f"a{i}"))
        else:
            n = 1 if kind == "tools1" else 2
            ids = [f"{i}.{j}" for j in range(n)]
            messages.append(AssistantMessage("", tuple(ToolCall(x, "t", {}) for x in ids)))
            messages.extend(ToolMessage(x, "t", "r") for x in ids)
    split = context.split_for_compression(messages, keep)
    assert [*split.system, *_joined(split)] == messages
    assert_valid_transcript(list(split.before))
    assert_valid_transcript(list(split.after))
    assert_valid_transcript(list(split.recent))
    users = [m for m in messages if isinstance(m, UserMessage) and not context.is_summary(m)]
    assert split.pinned is None or not context.is_summary(split.pinned)
    if users:
        assert users[-1] in split.recent or split.pinned is users[-1]


async def test_compress_summarises_older_and_keeps_system_and_recent() -> None:
    chat = ScriptedChat([Reply("  the summary  ", usage=Usage(7, 3, 10))])
    messages = _conversation()
    result = await context.compress_messages(chat, messages, keep_recent=3)

    assert result.ok
    assert result.summary_chars == len("the summary")
    assert result.usage == Usage(7, 3, 10)
    assert result.messages[0] is messages[0]
    summary = result.messages[1]
    assert isinstance(summary, UserMessage)
    assert summary.content == (
        f"{context.SUMMARY_OPEN}\nthe summary\n{context.SUMMARY_CLOSE}"
    )
    assert list(result.messages[2:]) == messages[-3:]
    # One summarizer call: its own system prompt, the older messages as a transcript, no tools.
    (request, tools, _options), = chat.calls
    assert tools == []
    assert request[0] == SystemMessage(context.COMPRESSION_SYSTEM_PROMPT)
    transcript = request[1].content
    assert "[user] first question" in transcript
    assert "third question" not in transcript
    assert 'tool_calls=[{"name": "t"' in transcript


async def test_a_long_single_task_run_is_compressible() -> None:
    # One request, then many tool turns: the request stays verbatim, the work is summarised.
    request = UserMessage("refactor the project")
    turns = [m for i in range(10) for m in (
        AssistantMessage("", (ToolCall(f"c{i}", "t", {"i": i}),)),
        ToolMessage(f"c{i}", "t", f"result {i}"),
    )]  # fmt: skip
    messages: list[Message] = [SystemMessage("sys"), request, *turns]
    chat = ScriptedChat(["did ten steps"])
    result = await context.compress_messages(chat, messages, keep_recent=4)

    assert result.ok
    assert result.messages[0] == SystemMessage("sys")
    assert result.messages[1] is request
    assert isinstance(result.messages[2], UserMessage)
    assert "did ten steps" in result.messages[2].content
    assert list(result.messages[3:]) == turns[-4:]
    assert_valid_transcript(list(result.messages))
    transcript = chat.calls[0][0][1].content
    assert "[user] refactor the project" in transcript
    assert "result 0" in transcript
    assert "result 9" not in transcript


async def test_a_second_compression_still_pins_the_request_not_the_earlier_summary() -> None:
    # The first summary is a user message placed after the pinned request; the next
    # compression must pin the request again and fold the old summary into the new one.
    request = UserMessage("refactor the project")

    def turns(start: int, stop: int) -> list[Message]:
        return [m for i in range(start, stop) for m in (
            AssistantMessage("", (ToolCall(f"c{i}", "t", {}),)),
            ToolMessage(f"c{i}", "t", f"result {i}"),
        )]  # fmt: skip

    first = await context.compress_messages(
        ScriptedChat(["first summary"]), [SystemMessage("sys"), request, *turns(0, 10)],
        keep_recent=4,
    )
    assert context.is_summary(first.messages[2])
    chat = ScriptedChat(["second summary"])
    second = await context.compress_messages(
        chat, [*first.messages, *turns(10, 20)], keep_recent=4
    )
    assert second.ok
    assert second.messages[1] is request
    assert "second summary" in second.messages[2].content
    assert sum(context.is_summary(m) for m in second.messages) == 1
    assert list(second.messages[3:]) == turns(18, 20)
    assert "first summary" in chat.calls[0][0][1].content
    assert not context.is_summary(request)


async def test_compress_failure_returns_messages_unchanged() -> None:
    messages = _conversation()
    result = await context.compress_messages(ScriptedChat([Fail(503)]), messages, keep_recent=2)
    assert not result.ok
    assert result.summary_chars == 0
    assert list(result.messages) == messages


async def test_compress_survives_a_chat_function_that_breaks() -> None:
    async def broken(_m: Sequence[Message], _t: Any, _o: ChatOptions) -> ChatResult:
        raise KeyError("not a ProviderError")

    result = await context.compress_messages(broken, _conversation(), keep_recent=2)
    assert not result.ok
    assert list(result.messages) == _conversation()


async def test_empty_summary_is_a_failure() -> None:
    result = await context.compress_messages(ScriptedChat(["   "]), _conversation(), keep_recent=2)
    assert not result.ok
    assert list(result.messages) == _conversation()


async def test_nothing_older_than_the_window_means_no_model_call() -> None:
    chat = ScriptedChat(["unused"])
    messages = [SystemMessage("s"), UserMessage("u"), AssistantMessage("a")]
    result = await context.compress_messages(chat, messages, keep_recent=8)
    assert result.ok
    assert result.summary_chars == 0
    assert list(result.messages) == messages
    assert chat.calls == []


async def test_long_transcripts_are_truncated_with_the_marker() -> None:
    chat = ScriptedChat(["s"])
    messages: list[Message] = [UserMessage("z" * 5000) for _ in range(10)]
    await context.compress_messages(chat, messages, keep_recent=1)
    text = chat.calls[0][0][1].content
    assert "chars omitted ...]" in text
    assert len(text) < context.TRANSCRIPT_MAX_CHARS + 500
