"""ollama specifics: request extras, the done_reason quirk, 200-with-error, NDJSON."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from lich.config import ProviderConfig
from lich.events import TextDelta
from lich.types import ChatOptions, ProviderError, Usage, UserMessage
from lich_providers.ollama import OllamaProvider, synthesize_tool_call_id

from .conftest import Wire, make_provider


def answer(message: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "qwen-test", "created_at": "2025-01-01T00:00:00Z",
                            "done": True, "done_reason": "stop", **extra}
    if message is not None:
        body["message"] = message
    return body


async def chat(items: list[Any], *, chat_options: ChatOptions | None = None,
               events: list[Any] | None = None, **config: Any) -> Any:
    wire = Wire("ollama", items)
    provider = make_provider("ollama", wire, **config)
    opts = chat_options or ChatOptions(on_event=events.append if events is not None else None)
    try:
        return await provider.chat([UserMessage("hi")], [], opts), wire
    finally:
        await provider.aclose()


OK = answer({"role": "assistant", "content": "x"})


async def test_minimal_request() -> None:
    _, wire = await chat([httpx.Response(200, json=OK)])
    assert str(wire.requests[0].url) == "http://localhost:11434/api/chat"
    assert wire.bodies[0] == {
        "model": "m-1", "messages": [{"role": "user", "content": "hi"}], "stream": False
    }


async def test_trailing_slash_in_base_url() -> None:
    _, wire = await chat([httpx.Response(200, json=OK)], base_url="http://127.0.0.1:9/")
    assert str(wire.requests[0].url) == "http://127.0.0.1:9/api/chat"


@pytest.mark.parametrize(
    ("config_think", "option_think", "expected"),
    [(None, None, None), (True, None, True), (None, True, True), (False, True, True),
     (False, None, False), (None, False, False)],
)
async def test_think(config_think: Any, option_think: Any, expected: Any) -> None:
    _, wire = await chat([httpx.Response(200, json=OK)], think=config_think,
                         chat_options=ChatOptions(think=option_think))
    assert wire.bodies[0].get("think") == expected


async def test_keep_alive_options_and_extras() -> None:
    _, wire = await chat(
        [httpx.Response(200, json=OK)],
        keep_alive="10m",
        options={"options": {"num_ctx": 8192, "num_predict": 1}, "format": "json"},
        max_tokens=256,
    )
    body = wire.bodies[0]
    assert body["keep_alive"] == "10m"
    assert body["format"] == "json"
    # Config extras sit beside what lich computed; lich's value wins a clash.
    assert body["options"] == {"num_ctx": 8192, "num_predict": 256}
    assert "temperature" not in body


def test_default_ids_look_like_the_reference() -> None:
    first, second = synthesize_tool_call_id(), synthesize_tool_call_id()
    assert re.fullmatch(r"ollama_[0-9a-z]+_\d+", first)
    assert first != second


async def test_synthesized_ids_without_injection() -> None:
    body = answer({"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "a", "arguments": {}}}, {"function": {"name": "b", "arguments": {}}}
    ]})
    provider = OllamaProvider(
        ProviderConfig(kind="ollama", name="o", model="m"),
        transport=Wire("ollama", [httpx.Response(200, json=body)]).transport,
    )
    result = await provider.chat([UserMessage("hi")], [], ChatOptions())
    ids = [c.id for c in result.message.tool_calls]
    assert all(i.startswith("ollama_") for i in ids)
    assert len(set(ids)) == 2
    await provider.aclose()


async def test_ids_sent_by_newer_servers_are_kept() -> None:
    body = answer({"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_xyz", "function": {"name": "a", "arguments": {}}}]})
    result, _ = await chat([httpx.Response(200, json=body)])
    assert result.message.tool_calls[0].id == "call_xyz"


@pytest.mark.parametrize(
    ("done_reason", "tools", "expected"),
    [("stop", True, "tool_calls"), ("stop", False, "stop"), ("length", False, "length"),
     ("max_tokens", False, "length"), ("load", False, "unknown"), (None, False, "unknown")],
)
async def test_done_reason_quirk(done_reason: Any, tools: bool, expected: str) -> None:
    message: dict[str, Any] = {"role": "assistant", "content": "x"}
    if tools:
        message["tool_calls"] = [{"function": {"name": "a", "arguments": {}}}]
    result, _ = await chat([httpx.Response(200, json=answer(message, done_reason=done_reason))])
    assert result.finish_reason == expected


async def test_usage_and_model() -> None:
    body = answer({"role": "assistant", "content": "x"}, prompt_eval_count=12, eval_count=3)
    result, _ = await chat([httpx.Response(200, json=body)])
    assert result.usage == Usage(12, 3, 15)
    assert result.model == "qwen-test"
    result, _ = await chat([httpx.Response(200, json=OK)])
    assert result.usage == Usage()


async def test_200_with_error_is_bad_request() -> None:
    with pytest.raises(ProviderError) as info:
        await chat([httpx.Response(200, json={"error": "model runner has unexpectedly stopped"})])
    assert info.value.kind == "bad_request"
    assert "model runner has unexpectedly stopped" in info.value.message


async def test_200_without_message_is_bad_request() -> None:
    with pytest.raises(ProviderError) as info:
        await chat([httpx.Response(200, json=answer(None))])
    assert info.value.kind == "bad_request"
    assert "no message" in info.value.message


async def test_overflow_message_specific_to_ollama() -> None:
    with pytest.raises(ProviderError) as info:
        await chat([httpx.Response(400, json={"error": "input is too long for the model"})])
    assert info.value.kind == "overflow"


def ndjson(*objects: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objects)


async def test_hand_written_stream_with_thinking_and_tools() -> None:
    def chunk(message: dict[str, Any]) -> dict[str, Any]:
        return {"model": "qwen-test", "created_at": "t", "message": message, "done": False}

    body = ndjson(
        chunk({"role": "assistant", "content": "", "thinking": "Let me think"}),
        chunk({"role": "assistant", "content": "Checking"}),
        chunk({"role": "assistant", "content": " the weather."}),
        chunk({"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "weather", "arguments": {"city": "Toronto"}}}]}),
        {"model": "qwen-test", "created_at": "t", "message": {"role": "assistant", "content": ""},
         "done": True, "done_reason": "stop", "prompt_eval_count": 30, "eval_count": 12},
    )
    complete = answer(
        {"role": "assistant", "content": "Checking the weather.", "tool_calls": [
            {"function": {"name": "weather", "arguments": {"city": "Toronto"}}}]},
        prompt_eval_count=30, eval_count=12,
    )
    events: list[Any] = []
    streamed, _ = await chat([httpx.Response(200, content=body)], events=events,
                             chat_options=ChatOptions(stream=True, on_event=events.append))
    plain, _ = await chat([httpx.Response(200, json=complete)])
    assert streamed == plain
    assert streamed.finish_reason == "tool_calls"
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Checking", " the weather."]


async def test_error_line_inside_the_stream() -> None:
    body = ndjson({"message": {"role": "assistant", "content": "par"}, "done": False},
                  {"error": "an error was encountered while running the model"})
    with pytest.raises(ProviderError) as info:
        await chat([httpx.Response(200, content=body)], chat_options=ChatOptions(stream=True))
    assert info.value.kind == "bad_request"
    assert "error was encountered" in info.value.message
