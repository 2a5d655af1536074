"""openai_compat specifics: response quirks, hand-written SSE transcripts, body extras."""

from __future__ import annotations

import json
from typing import Any

import attrs
import httpx
import pytest

from lich.events import TextDelta
from lich.types import ChatOptions, ProviderError, Usage, UserMessage

from .conftest import DATA, Wire, make_provider


def completion(message: dict[str, Any], finish: Any = "stop", **extra: Any) -> dict[str, Any]:
    return {"id": "x", "model": "gpt-test",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], **extra}


async def chat(items: list[Any], *, stream: bool = False, events: list[Any] | None = None,
               **config: Any) -> Any:
    wire = Wire("openai_compat", items)
    provider = make_provider("openai_compat", wire, **config)
    options = ChatOptions(stream=stream, on_event=(events.append if events is not None else None))
    try:
        return await provider.chat([UserMessage("hi")], [], options), wire
    finally:
        await provider.aclose()


async def test_response_mapping_and_model() -> None:
    body = completion(
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "x"}'}}]},
        finish="tool_calls",
        usage={"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    )
    result, _ = await chat([httpx.Response(200, json=body)])
    assert result.message.content == ""
    assert result.message.tool_calls[0].id == "call_9"
    assert result.usage == Usage(11, 7, 18)
    assert result.model == "gpt-test"
    assert result.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("usage", "expected"),
    [(None, Usage(0, 0, 0)), ({"prompt_tokens": 3, "completion_tokens": 4}, Usage(3, 4, 7))],
)
async def test_usage_defaults_and_recomputed_total(usage: Any, expected: Usage) -> None:
    body = completion({"role": "assistant", "content": "hi"})
    if usage is not None:
        body["usage"] = usage
    result, _ = await chat([httpx.Response(200, json=body)])
    assert result.usage == expected


@pytest.mark.parametrize(
    ("finish", "expected"),
    [("stop", "stop"), ("length", "length"), ("content_filter", "unknown"), (None, "unknown"),
     ("tool_calls", "unknown")],  # no tool calls present: the label alone does not count
)
async def test_finish_reasons(finish: Any, expected: str) -> None:
    result, _ = await chat([httpx.Response(200, json=completion({"content": "x"}, finish))])
    assert result.finish_reason == expected


async def test_content_parts_are_joined() -> None:
    body = completion({"role": "assistant", "content": [
        {"type": "text", "text": "Hello, "}, {"type": "image_url"}, {"type": "text", "text": "you"}
    ]})
    result, _ = await chat([httpx.Response(200, json=body)])
    assert result.message.content == "Hello, you"


@pytest.mark.parametrize(
    ("error", "kind", "status"),
    [({"message": "upstream rate limited", "code": 429}, "rate_limit", 429),
     ({"message": "weird"}, "bad_request", None),
     ("plain string error", "bad_request", None)],
)
async def test_200_with_error_object(error: Any, kind: str, status: int | None) -> None:
    with pytest.raises(ProviderError) as info:
        await chat([httpx.Response(200, json={"error": error})])
    assert (info.value.kind, info.value.status) == (kind, status)


async def test_missing_choices_is_bad_request() -> None:
    with pytest.raises(ProviderError) as info:
        await chat([httpx.Response(200, json={"choices": []})])
    assert info.value.kind == "bad_request"
    assert "no choices" in info.value.message


async def test_max_tokens_from_config_and_options() -> None:
    _, wire = await chat([httpx.Response(200, json=completion({"content": "x"}))], max_tokens=99)
    assert wire.bodies[0]["max_tokens"] == 99
    wire = Wire("openai_compat", [httpx.Response(200, json=completion({"content": "x"}))])
    provider = make_provider("openai_compat", wire, max_tokens=99)
    await provider.chat([UserMessage("hi")], [], ChatOptions(max_tokens=7))
    assert wire.bodies[0]["max_tokens"] == 7
    assert "temperature" not in wire.bodies[0]
    assert "tools" not in wire.bodies[0]
    assert "stream" not in wire.bodies[0]


async def test_config_options_are_extra_body_fields_that_cannot_override_lich() -> None:
    _, wire = await chat(
        [httpx.Response(200, json=completion({"content": "x"}))],
        options={"top_p": 0.5, "seed": 7, "model": "not-this-one"},
    )
    body = wire.bodies[0]
    assert (body["top_p"], body["seed"], body["model"]) == (0.5, 7, "m-1")


# A transcript shaped like OpenAI's: keep-alive comments, the role chunk, tool-call
# deltas by index (two calls interleaved), a finish chunk, then the usage chunk.
SSE = (DATA / "openai_compat.stream.sse").read_bytes()

COMPLETE = completion(
    {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "call_A", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "caf\\u00e9.txt"}'}},
        {"id": "call_B", "type": "function",
         "function": {"name": "list_dir", "arguments": '{"path": "src"}'}},
    ]},
    finish="tool_calls",
    usage={"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29},
)


async def test_hand_written_stream_equals_complete_answer() -> None:
    events: list[Any] = []
    streamed, wire = await chat([httpx.Response(200, content=SSE)], stream=True, events=events)
    plain, _ = await chat([httpx.Response(200, json=COMPLETE)])
    # The same answer; the response ids are each recording's own (every chunk of a
    # stream carries the answer's id).
    assert (streamed.response_id, plain.response_id) == ("c", "x")
    assert attrs.evolve(streamed, response_id="x") == plain
    assert [(c.id, c.name, c.args) for c in streamed.message.tool_calls] == [
        ("call_A", "read_file", {"path": "café.txt"}),
        ("call_B", "list_dir", {"path": "src"}),
    ]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Let me ", "check."]
    assert wire.bodies[0]["stream_options"] == {"include_usage": True}


async def test_stream_with_crlf_lines_and_no_done_marker() -> None:
    text = (
        'data: {"model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}\r\n\r\n'
        'data: {"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\r\n\r\n'
    )
    result, _ = await chat([httpx.Response(200, content=text.encode())], stream=True)
    assert result.message.content == "hi"
    assert result.finish_reason == "stop"


async def test_stream_tool_calls_without_index() -> None:
    """Some servers omit ``index``: calls are told apart by id, pieces continue the last."""
    chunks = [
        {"tool_calls": [{"id": "a", "function": {"name": "one", "arguments": '{"x":'}}]},
        {"tool_calls": [{"function": {"arguments": " 1}"}}]},
        {"tool_calls": [{"id": "b", "function": {"name": "two", "arguments": "{}"}}]},
        {"tool_calls": [{"id": "b", "function": {"name": "two"}}]},  # repeated name
    ]
    text = "".join(
        f"data: {json.dumps({'choices': [{'index': 0, 'delta': d}]})}\n\n" for d in chunks
    ) + (
        'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'
        "data: [DONE]\n\n"
    )
    result, _ = await chat([httpx.Response(200, content=text.encode())], stream=True)
    assert [(c.id, c.name, c.args) for c in result.message.tool_calls] == [
        ("a", "one", {"x": 1}), ("b", "two", {})
    ]


@pytest.mark.parametrize(
    ("error", "kind"),
    [({"message": "overloaded", "code": 503}, "server_error"),
     ({"message": "something broke"}, "network")],
)
async def test_error_inside_the_stream(error: Any, kind: str) -> None:
    text = (
        'data: {"choices":[{"index":0,"delta":{"content":"par"}}]}\n\n'
        f"data: {json.dumps({'error': error})}\n\n"
    )
    with pytest.raises(ProviderError) as info:
        await chat([httpx.Response(200, content=text.encode())], stream=True)
    assert info.value.kind == kind
    assert error["message"] in info.value.message


async def test_stream_without_usage_chunk_reports_zero_usage() -> None:
    text = (
        b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    result, _ = await chat([httpx.Response(200, content=text)], stream=True)
    assert result.usage == Usage()
