"""anthropic specifics: headers, turn shaping, content blocks, a hand-written SSE transcript."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from lich.events import TextDelta
from lich.types import (
    AssistantMessage,
    ChatOptions,
    ProviderError,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)

from .conftest import DATA, Wire, make_provider


def message(content: list[dict[str, Any]], stop: Any = "end_turn", **extra: Any) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": content, "stop_reason": stop, **extra}


async def chat(items: list[Any], messages: Any = None, *, stream: bool = False,
               events: list[Any] | None = None, chat_options: ChatOptions | None = None,
               **config: Any) -> Any:
    wire = Wire("anthropic", items)
    provider = make_provider("anthropic", wire, **config)
    opts = chat_options or ChatOptions(
        stream=stream, on_event=(events.append if events is not None else None)
    )
    try:
        return await provider.chat(messages or [UserMessage("hi")], [], opts), wire
    finally:
        await provider.aclose()


async def test_url_and_headers() -> None:
    _, wire = await chat([httpx.Response(200, json=message([{"type": "text", "text": "x"}]))])
    request = wire.requests[0]
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers


async def test_configured_version_header_wins() -> None:
    _, wire = await chat([httpx.Response(200, json=message([{"type": "text", "text": "x"}]))],
                         headers={"Anthropic-Version": "2099-01-01"})
    assert wire.requests[0].headers["anthropic-version"] == "2099-01-01"


async def test_max_tokens_default_config_and_option() -> None:
    reply = message([{"type": "text", "text": "x"}])
    _, wire = await chat([httpx.Response(200, json=reply)])
    assert wire.bodies[0]["max_tokens"] == 4096
    _, wire = await chat([httpx.Response(200, json=reply)], max_tokens=1000)
    assert wire.bodies[0]["max_tokens"] == 1000
    _, wire = await chat([httpx.Response(200, json=reply)], chat_options=ChatOptions(max_tokens=5),
                         max_tokens=1000)
    assert wire.bodies[0]["max_tokens"] == 5
    assert "system" not in wire.bodies[0]
    assert "tools" not in wire.bodies[0]


async def test_empty_assistant_turns_are_left_out() -> None:
    history = [
        UserMessage("one"),
        AssistantMessage(""),          # nothing at all
        UserMessage("two"),
        AssistantMessage("   ", (ToolCall("t1", "noop", {}),)),  # blank text, one call
        ToolMessage("t1", "noop", ""),
    ]
    _, wire = await chat([httpx.Response(200, json=message([{"type": "text", "text": "x"}]))],
                         history)
    assert wire.bodies[0]["messages"] == [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
        {"role": "assistant",
         "content": [{"type": "tool_use", "id": "t1", "name": "noop", "input": {}}]},
        {"role": "user",
         "content": [{"type": "tool_result", "tool_use_id": "t1", "content": ""}]},
    ]


async def test_text_blocks_are_joined_and_thinking_is_ignored() -> None:
    reply = message([
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "text", "text": "First."},
        {"type": "text", "text": ""},
        {"type": "text", "text": "Second."},
    ], usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
              "cache_creation_input_tokens": 1})
    result, _ = await chat([httpx.Response(200, json=reply)])
    assert result.message.content == "First.\nSecond."
    assert result.usage == Usage(111, 5, 116, cache_read_tokens=100, cache_write_tokens=1)
    assert result.model == "claude-test"


@pytest.mark.parametrize(
    ("stop", "expected"),
    [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
     ("refusal", "unknown"), (None, "unknown")],
)
async def test_stop_reasons(stop: Any, expected: str) -> None:
    result, _ = await chat([httpx.Response(200, json=message([{"type": "text", "text": "x"}],
                                                             stop))])
    assert result.finish_reason == expected


async def test_tool_use_blocks() -> None:
    reply = message([
        {"type": "text", "text": "Sure."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}},
    ], stop="tool_use")
    result, _ = await chat([httpx.Response(200, json=reply)])
    assert result.message.tool_calls == (ToolCall("toolu_1", "read_file", {"path": "a"}),)
    assert result.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("error", "kind", "status"),
    [({"type": "overloaded_error", "message": "Overloaded"}, "server_error", 529),
     ({"type": "rate_limit_error", "message": "slow down"}, "rate_limit", 429),
     ({"type": "invalid_request_error",
       "message": "prompt is too long: 210000 tokens > 200000 maximum"}, "overflow", 400),
     ({"type": "authentication_error", "message": "invalid x-api-key"}, "auth", 401),
     ({"type": "brand_new_error", "message": "?"}, "network", None)],
)
async def test_error_event_inside_the_stream(error: Any, kind: str, status: int | None) -> None:
    text = (
        'event: message_start\ndata: {"type":"message_start","message":{"id":"m","model":"c",'
        '"content":[],"usage":{"input_tokens":3,"output_tokens":1}}}\n\n'
        f"event: error\ndata: {json.dumps({'type': 'error', 'error': error})}\n\n"
    )
    with pytest.raises(ProviderError) as info:
        await chat([httpx.Response(200, content=text.encode())], stream=True)
    assert (info.value.kind, info.value.status) == (kind, status)
    assert error["message"] in info.value.message


# A transcript shaped like the Messages API's: a thinking block, two text blocks,
# pings, a tool_use whose JSON arrives in pieces (split inside a unicode escape).
SSE = (DATA / "anthropic.stream.sse").read_text(encoding="utf-8")

COMPLETE = message(
    [
        {"type": "thinking", "thinking": "The user wants", "signature": "abc"},
        {"type": "text", "text": "Looking now."},
        {"type": "text", "text": "Then more."},
        {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {"path": "café.txt"}},
    ],
    stop="tool_use",
    usage={"input_tokens": 25, "output_tokens": 42},
)


async def test_hand_written_stream_equals_complete_answer() -> None:
    events: list[Any] = []
    streamed, wire = await chat([httpx.Response(200, content=SSE.encode())], stream=True,
                                events=events)
    plain, _ = await chat([httpx.Response(200, json=COMPLETE)])
    assert streamed == plain
    assert streamed.message.content == "Looking now.\nThen more."
    assert streamed.message.tool_calls == (ToolCall("toolu_9", "read_file", {"path": "café.txt"}),)
    assert streamed.usage == Usage(25, 42, 67)
    # The deltas add up to the answer text, block separator included.
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == ["Looking ", "now.", "\nThen more."]
    assert wire.bodies[0]["stream"] is True


async def test_truncated_tool_json_in_stream_is_an_args_error() -> None:
    head = SSE.split("event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                     "\"index\":3,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"e9")[0]
    text = head + (
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":"
        "{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":4096}}\n\n"
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    )
    result, _ = await chat([httpx.Response(200, content=text.encode())], stream=True)
    (call,) = result.message.tool_calls
    assert call.args == {}
    assert call.args_error is not None
    assert "not valid JSON" in call.args_error


async def test_error_body_with_200_is_mapped() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(ProviderError) as info:
        await chat([httpx.Response(200, json=body)])
    assert info.value.kind == "server_error"
