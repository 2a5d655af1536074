"""Streamed requests answered the way some servers and proxies really answer them.

A server that ignores ``stream: true`` sends ``200 application/json`` with the whole
answer: every provider reads it as its non-streamed answer (no "stream broken", no
retry). A 200 body that is not JSON at all is a clear ``bad_request``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from lich.events import Event, TextDelta
from lich.testing import Reply
from lich.types import ChatOptions, ProviderError, ToolCall, UserMessage
from tests.providers.conftest import Wire, make_provider


def whole_answer(wire: Wire, reply: Reply, content_type: str = "application/json") -> Any:
    """A Wire item: the dialect's non-streamed answer to the (streamed) request."""

    def answer(request: httpx.Request) -> httpx.Response:
        parsed = wire.dialect.parse(json.loads(request.content))
        assert parsed.stream  # the provider did ask for a stream
        status, _, body = wire.dialect.respond(parsed, reply)
        return httpx.Response(status, headers={"content-type": content_type}, content=body)

    return answer


async def ask_streamed(kind: str, item: Any) -> tuple[Any, list[Event], Wire]:
    wire = Wire(kind)
    wire.push(item(wire) if callable(item) else item)
    provider = make_provider(kind, wire)
    events: list[Event] = []
    try:
        result = await provider.chat([UserMessage("hi")], [],
                                     ChatOptions(stream=True, on_event=events.append))
    finally:
        await provider.aclose()
    return result, events, wire


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
async def test_a_whole_json_answer_to_a_streamed_request_is_the_answer(
    kind: str, content_type: str
) -> None:
    result, events, wire = await ask_streamed(
        kind, lambda w: whole_answer(w, Reply("the whole answer"), content_type))
    assert result.message.content == "the whole answer"
    assert result.finish_reason == "stop"
    assert result.provider_name == kind
    # A streaming UI still sees the text (as one piece).
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["the whole answer"]
    assert len(wire.requests) == 1


async def test_a_whole_json_answer_keeps_its_tool_calls(kind: str) -> None:
    step = Reply("", (ToolCall("c1", "read_file", {"path": "a.txt"}),))
    result, _, _ = await ask_streamed(kind, lambda w: whole_answer(w, step))
    assert [(c.name, c.args) for c in result.message.tool_calls] == [
        ("read_file", {"path": "a.txt"})]
    assert result.finish_reason == "tool_calls"


async def test_an_error_object_in_a_whole_json_answer_is_reported(kind: str) -> None:
    body = ({"type": "error", "error": {"type": "invalid_request_error", "message": "no such"}}
            if kind == "anthropic" else {"error": {"message": "no such model"}})
    with pytest.raises(ProviderError) as info:
        await ask_streamed(kind, httpx.Response(200, json=body))
    assert info.value.kind == "bad_request"
    assert "no such" in info.value.message


@pytest.mark.parametrize("content_type", ["application/json", "text/html; charset=utf-8"])
async def test_a_200_body_that_is_not_json_is_bad_request(kind: str, content_type: str) -> None:
    garbage = b"\x00\xff}{ garbage <<<>>> not json at all"
    with pytest.raises(ProviderError) as info:
        await ask_streamed(kind, httpx.Response(200, headers={"content-type": content_type},
                                                content=garbage))
    error = info.value
    # bad_request: the router moves on instead of retrying an answer that will not change.
    assert (error.kind, error.status) == ("bad_request", 200)
    assert "garbage" in error.message
    assert error.url is not None
    assert error.url.startswith("http")


async def test_an_empty_json_body_is_bad_request(kind: str) -> None:
    with pytest.raises(ProviderError) as info:
        await ask_streamed(kind, httpx.Response(200, headers={"content-type": "application/json"},
                                                content=b""))
    assert info.value.kind == "bad_request"
    assert "(empty body)" in info.value.message


async def test_ndjson_labelled_application_json_is_still_read_as_a_stream() -> None:
    # Some proxies in front of Ollama relabel its NDJSON stream.
    wire = Wire("ollama")
    parsed = wire.dialect.parse({"model": "m-1", "messages": [], "stream": True})
    lines = b"".join(wire.dialect.stream(parsed, Reply("two lines")))
    assert lines.count(b"\n") > 1
    result, events, _ = await ask_streamed(
        "ollama", httpx.Response(200, headers={"content-type": "application/json"},
                                 content=lines))
    assert result.message.content == "two lines"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "two lines"


async def test_a_whole_json_answer_under_another_label_is_the_answer_too(kind: str) -> None:
    # No stream event in the body, but one JSON document: that is the answer.
    result, events, wire = await ask_streamed(
        kind, lambda w: whole_answer(w, Reply("labelled text/plain"), "text/plain"))
    assert result.message.content == "labelled text/plain"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "labelled text/plain"
    assert len(wire.requests) == 1


async def test_a_body_that_is_neither_a_stream_nor_json_is_bad_request(kind: str) -> None:
    with pytest.raises(ProviderError) as info:
        await ask_streamed(kind, httpx.Response(
            200, headers={"content-type": "text/plain"}, content=b"Service temporarily odd\n"))
    assert (info.value.kind, info.value.status) == ("bad_request", 200)
    assert "Service temporarily odd" in info.value.message
