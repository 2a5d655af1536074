"""The Anthropic and Ollama dialects of the scripted server, over real loopback HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from lich.testing import DIALECTS, Fail, Reply, ScriptedServer
from lich.types import ToolCall


def post(server: ScriptedServer, path: str, body: Any) -> httpx.Response:
    with httpx.Client(timeout=10) as client:
        return client.post(f"{server.root_url}{path}", json=body)


def test_dialects_are_registered() -> None:
    assert {"openai", "anthropic", "ollama"} <= set(DIALECTS)


@pytest.mark.parametrize(
    ("fail", "expected"),
    [
        (Fail(429), {"type": "error",
                     "error": {"type": "rate_limit_error", "message": "scripted failure"}}),
        (Fail(529, "too busy"), {"type": "error",
                                 "error": {"type": "overloaded_error", "message": "too busy"}}),
        (Fail(500, {"error": "boom"}), {"type": "error",
                                        "error": {"type": "api_error", "message": "boom"}}),
        (Fail(400, {"type": "error", "error": {"type": "invalid_request_error",
                                               "message": "as given"}}),
         {"type": "error", "error": {"type": "invalid_request_error", "message": "as given"}}),
    ],
)
def test_anthropic_error_shape(
    fail: Fail, expected: Any, lich_scripted_server: Callable[..., ScriptedServer]
) -> None:
    server = lich_scripted_server([Fail(fail.status, fail.body, {"retry-after": "3"})],
                                  dialects=("anthropic",))
    response = post(server, "/v1/messages",
                    {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == fail.status
    assert response.json() == expected
    assert response.headers["retry-after"] == "3"


@pytest.mark.parametrize(
    ("body", "message"),
    [({"error": {"message": "nested"}}, "nested"), ("plain", "plain"), ({"error": "flat"}, "flat")],
)
def test_ollama_error_shape(
    body: Any, message: str, lich_scripted_server: Callable[..., ScriptedServer]
) -> None:
    server = lich_scripted_server([Fail(500, body)], dialects=("ollama",))
    response = post(server, "/api/chat", {"model": "m", "messages": [], "stream": False})
    assert (response.status_code, response.json()) == (500, {"error": message})


def test_anthropic_refuses_what_the_real_api_refuses(
    lich_scripted_server: Callable[..., ScriptedServer],
) -> None:
    server = lich_scripted_server(dialects=("anthropic",))
    bad = [
        {"model": "c", "messages": [{"role": "user", "content": "x"}]},  # no max_tokens
        {"model": "c", "max_tokens": 5, "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [{"type": "text", "text": ""}]}]},
        {"model": "c", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope",
                                          "content": "r"}]}]},
        {"model": "c", "max_tokens": 5, "messages": [{"role": "system", "content": "s"}]},
    ]
    for body in bad:
        response = post(server, "/v1/messages", body)
        assert response.status_code == 400, body
    assert server.model.requests == []


def test_ollama_refuses_string_arguments_and_streams_by_default(
    lich_scripted_server: Callable[..., ScriptedServer],
) -> None:
    server = lich_scripted_server([Reply("a b")], dialects=("ollama",))
    bad = {"model": "m", "messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "f", "arguments": "{}"}}]}]}
    assert post(server, "/api/chat", bad).status_code == 400
    response = post(server, "/api/chat", {"model": "m", "messages": [
        {"role": "user", "content": "hi"}]})
    assert response.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert [line["message"]["content"] for line in lines] == ["a ", "b", ""]
    assert lines[-1]["done"] is True
    assert lines[-1]["done_reason"] == "stop"


def test_ollama_says_stop_even_with_tool_calls(
    lich_scripted_server: Callable[..., ScriptedServer],
) -> None:
    server = lich_scripted_server([Reply(tool_calls=(ToolCall("x", "f", {"a": 1}),))],
                                  dialects=("ollama",))
    body = post(server, "/api/chat", {"model": "m", "stream": False,
                                      "messages": [{"role": "user", "content": "hi"}]}).json()
    assert body["done_reason"] == "stop"
    assert body["message"]["tool_calls"] == [{"function": {"name": "f", "arguments": {"a": 1}}}]


def test_anthropic_stream_event_sequence(
    lich_scripted_server: Callable[..., ScriptedServer],
) -> None:
    server = lich_scripted_server([Reply("hi", (ToolCall("t1", "f", {"a": 1}),))],
                                  dialects=("anthropic",))
    response = post(server, "/v1/messages", {"model": "c", "max_tokens": 5, "stream": True,
                                             "messages": [{"role": "user", "content": "x"}]})
    assert response.headers["content-type"] == "text/event-stream"
    names = [line[len("event: "):] for line in response.text.splitlines()
             if line.startswith("event: ")]
    assert names == [
        "message_start", "content_block_start", "ping", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta",
        "content_block_delta", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop",
    ]


def test_servers_speak_several_dialects_at_once(
    lich_scripted_server: Callable[..., ScriptedServer],
) -> None:
    server = lich_scripted_server(["one", "two", "three"],
                                  dialects=("openai", "anthropic", "ollama"))
    assert post(server, "/v1/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": "x"}]}).json()["choices"][0]["message"]["content"] == "one"
    assert post(server, "/v1/messages", {"model": "m", "max_tokens": 1, "messages": [
        {"role": "user", "content": "x"}]}).json()["content"][0]["text"] == "two"
    assert post(server, "/api/chat", {"model": "m", "stream": False, "messages": [
        {"role": "user", "content": "x"}]}).json()["message"]["content"] == "three"
