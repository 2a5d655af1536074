"""The provider contract, checked the same way for every kind (through httpx.MockTransport).

Every test here runs for ``openai_compat``, ``anthropic`` and ``ollama``: the
answers are rendered by the scripted dialects (the same code the loopback
server uses), so one scripted reply means the same thing in all three wires.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from typing import Any

import httpx
import pytest

from lich.events import TextDelta
from lich.testing import Fail, Reply
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
    UserMessage,
)

from .conftest import DATA, URL_OF, Wire, byte_stream, make_provider

TOOLS = [
    ToolDefinition(
        "read_file",
        "Read a file from the work dir.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    ToolDefinition(
        "list_dir",
        "List a directory.",
        {"type": "object", "properties": {"path": {"type": "string"}}},
    ),
]

# A conversation that exercises every mapping rule: two system messages, text
# plus two tool calls, two tool results (one failed), an assistant turn with no
# text but a tool call.
HISTORY: list[Message] = [
    SystemMessage("You are terse."),
    UserMessage("What is in notes.txt and in src/?"),
    AssistantMessage(
        "Let me look.",
        (ToolCall("call_1", "read_file", {"path": "notes.txt"}),
         ToolCall("call_2", "list_dir", {"path": "src"})),
    ),
    ToolMessage("call_1", "read_file", "buy milk"),
    ToolMessage("call_2", "list_dir", '{"ok": false, "output": "", "error": "not_found: src"}',
                is_error=True),
    AssistantMessage("notes.txt says: buy milk. There is no src/ directory."),
    SystemMessage("Answer in English."),
    UserMessage("Thanks! Anything else?"),
    AssistantMessage("", (ToolCall("call_3", "list_dir", {}),)),
    ToolMessage("call_3", "list_dir", "- notes.txt"),
]
OPTIONS = ChatOptions(temperature=0.2, max_tokens=512)

REPLIES = {
    "plain": Reply("Hello, world."),
    "one_tool": Reply(tool_calls=(ToolCall("call_a", "read_file", {"path": "a.txt"}),)),
    "two_tools": Reply(
        "Reading both.",
        (ToolCall("call_a", "read_file", {"path": "a.txt"}),
         ToolCall("call_b", "list_dir", {"path": "docs", "depth": 2})),
    ),
    "unicode": Reply("Grüße — 你好 🌍", chunks=("Grü", "ße — ", "你", "好 🌍")),
    "no_args": Reply("ok", (ToolCall("call_c", "list_dir", {}),)),
    "length": Reply("cut sh", finish_reason="length"),
}


def collect() -> tuple[list[TextDelta], ChatOptions]:
    events: list[Any] = []
    return events, ChatOptions(stream=True, on_event=events.append)


async def ask(kind: str, step: Any, *, stream: bool = False, **config: Any) -> ChatResult:
    wire = Wire(kind, [step])
    provider = make_provider(kind, wire, **config)
    try:
        return await provider.chat([UserMessage("hi")], TOOLS, ChatOptions(stream=stream))
    finally:
        await provider.aclose()


def without_ids(result: ChatResult) -> ChatResult:
    import attrs

    calls = tuple(attrs.evolve(c, id="") for c in result.message.tool_calls)
    return attrs.evolve(result, message=attrs.evolve(result.message, tool_calls=calls))


# ---------------------------------------------------------------------------
# answers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_plain_answer(kind: str, stream: bool) -> None:
    wire = Wire(kind, [REPLIES["plain"]])
    provider = make_provider(kind, wire)
    result = await provider.chat([UserMessage("hi")], [], ChatOptions(stream=stream))
    assert result.message == AssistantMessage("Hello, world.")
    assert result.finish_reason == "stop"
    assert result.provider_name == kind
    assert result.model == "m-1"
    # default_usage of the scripted model: ceil(2/4)=1 prompt, ceil(13/4)=4 completion
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (1, 4)
    assert result.usage.total_tokens == 5
    assert [str(r.url) for r in wire.requests] == [URL_OF[kind]]
    assert wire.requests[0].headers["content-type"] == "application/json"
    await provider.aclose()


@pytest.mark.parametrize("stream", [False, True])
async def test_one_tool_call(kind: str, stream: bool) -> None:
    result = await ask(kind, REPLIES["one_tool"], stream=stream)
    assert result.finish_reason == "tool_calls"
    assert result.message.content == ""
    (call,) = result.message.tool_calls
    assert (call.name, call.args, call.args_error) == ("read_file", {"path": "a.txt"}, None)
    # Ollama sends no ids: they are synthesised.
    assert call.id == ("ollama_test_1" if kind == "ollama" else "call_a")


@pytest.mark.parametrize("stream", [False, True])
async def test_two_tool_calls_in_one_reply(kind: str, stream: bool) -> None:
    result = await ask(kind, REPLIES["two_tools"], stream=stream)
    assert result.finish_reason == "tool_calls"
    assert result.message.content == "Reading both."
    assert [(c.name, c.args) for c in result.message.tool_calls] == [
        ("read_file", {"path": "a.txt"}),
        ("list_dir", {"path": "docs", "depth": 2}),
    ]
    ids = [c.id for c in result.message.tool_calls]
    assert len(set(ids)) == 2
    if kind != "ollama":
        assert ids == ["call_a", "call_b"]


@pytest.mark.parametrize("stream", [False, True])
async def test_length_finish_reason(kind: str, stream: bool) -> None:
    result = await ask(kind, REPLIES["length"], stream=stream)
    assert result.finish_reason == "length"
    assert result.message.content == "cut sh"


async def test_tool_result_round_trip(kind: str) -> None:
    """A tool call from one answer, answered with a tool result, reaches the wire correlated."""
    wire = Wire(kind, [REPLIES["two_tools"], Reply("all read")])
    provider = make_provider(kind, wire)
    first = await provider.chat([UserMessage("read")], TOOLS, ChatOptions())
    a, b = first.message.tool_calls
    history = [
        UserMessage("read"),
        first.message,
        ToolMessage(a.id, a.name, "contents of a"),
        ToolMessage(b.id, b.name, "not_found: docs", is_error=True),
    ]
    second = await provider.chat(history, TOOLS, ChatOptions())
    assert second.message.content == "all read"
    # What the server understood from the second request:
    seen = wire.dialect.parse(wire.bodies[1])
    results = [m for m in seen.messages if isinstance(m, ToolMessage)]
    assert [(r.name, r.content) for r in results] == [
        ("read_file", "contents of a"), ("list_dir", "not_found: docs")
    ]
    (assistant,) = [m for m in seen.messages if isinstance(m, AssistantMessage)]
    assert [c.name for c in assistant.tool_calls] == ["read_file", "list_dir"]
    if kind != "ollama":  # Ollama correlates by position, without ids
        assert [r.tool_call_id for r in results] == [c.id for c in assistant.tool_calls]
        assert [r.tool_call_id for r in results] == [a.id, b.id]
    await provider.aclose()


def _shape(messages: list[Message] | tuple[Message, ...]) -> list[Any]:
    out: list[Any] = []
    for m in messages:
        if isinstance(m, AssistantMessage):
            out.append(("assistant", m.content, [(c.name, c.args) for c in m.tool_calls]))
        elif isinstance(m, ToolMessage):
            out.append(("tool", m.name, m.content))
        elif isinstance(m, UserMessage):
            out.append(("user", m.content))
    return out


async def test_history_survives_the_wire(kind: str) -> None:
    wire = Wire(kind, [Reply("ok")])
    provider = make_provider(kind, wire)
    await provider.chat(HISTORY, TOOLS, OPTIONS)
    seen = wire.dialect.parse(wire.bodies[0])
    assert _shape(seen.messages) == _shape(HISTORY)
    assert seen.tools == ("read_file", "list_dir")
    await provider.aclose()


# ---------------------------------------------------------------------------
# golden request bodies
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_golden_request_body(kind: str, stream: bool) -> None:
    wire = Wire(kind, [Reply("ok")])
    provider = make_provider(kind, wire)
    options = ChatOptions(temperature=0.2, max_tokens=512, stream=stream)
    await provider.chat(HISTORY, TOOLS, options)
    name = f"{kind}.stream.request.json" if stream else f"{kind}.request.json"
    golden = json.loads((DATA / name).read_text(encoding="utf-8"))
    assert wire.bodies[0] == golden
    await provider.aclose()


# ---------------------------------------------------------------------------
# streaming
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("reply", sorted(REPLIES))
async def test_streaming_equals_non_streaming(kind: str, reply: str) -> None:
    plain = await ask(kind, REPLIES[reply], stream=False)
    wire = Wire(kind, [REPLIES[reply]])
    provider = make_provider(kind, wire)
    events, options = collect()
    streamed = await provider.chat([UserMessage("hi")], TOOLS, options)
    assert streamed == plain
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert "".join(d.text for d in deltas) == plain.message.content
    assert all(d.provider == kind and d.text for d in deltas)
    if plain.message.content:
        assert len(deltas) == len(REPLIES[reply].stream_pieces())
    assert wire.bodies[0]["stream"] is True
    await provider.aclose()


async def test_stream_deltas_arrive_before_the_stream_ends(kind: str) -> None:
    """Text is emitted as it arrives, not after the whole answer was read."""
    seen_when_blocked: list[str] = []
    gate = asyncio.Event()
    wire = Wire(kind)
    dialect = wire.dialect
    events, options = collect()

    def respond(request: httpx.Request) -> httpx.Response:
        parsed = dialect.parse(json.loads(request.content))
        pieces = list(dialect.stream(parsed, Reply("first second")))

        async def body() -> Any:
            # Everything up to and including the first text delta, then wait.
            head = 4 if kind == "anthropic" else (2 if kind == "openai_compat" else 1)
            for piece in pieces[:head]:
                yield piece
            await asyncio.sleep(0)
            seen_when_blocked.extend(e.text for e in events if isinstance(e, TextDelta))
            gate.set()
            for piece in pieces[head:]:
                yield piece

        return httpx.Response(200, content=body())

    wire.push(respond)
    provider = make_provider(kind, wire)
    result = await provider.chat([UserMessage("hi")], [], options)
    assert gate.is_set()
    assert seen_when_blocked == ["first "]
    assert result.message.content == "first second"
    await provider.aclose()


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------

OVERFLOW_BODY = "This model's maximum context length is 8192 tokens; your messages are too long"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (401, "invalid x-api-key", "auth"),
        (403, "permission denied", "auth"),
        (429, "slow down", "rate_limit"),
        (500, "internal error", "server_error"),
        (502, "bad gateway", "server_error"),
        (503, "unavailable", "server_error"),
        (529, "overloaded", "server_error"),
        (400, OVERFLOW_BODY, "overflow"),
        (400, "invalid value for field 'foo'", "bad_request"),
        (404, "model not found", "bad_request"),
        (422, "unprocessable", "bad_request"),
    ],
)
async def test_status_error_kinds(
    kind: str, stream: bool, status: int, message: str, expected: str
) -> None:
    with pytest.raises(ProviderError) as info:
        await ask(kind, Fail(status, {"error": {"message": message}}), stream=stream)
    error = info.value
    assert error.kind == expected
    assert error.status == status
    assert error.provider_name == kind
    assert message in error.message
    assert f"HTTP {status}" in error.message


async def test_error_body_is_cut_to_500_chars(kind: str) -> None:
    body = "x" * 2000
    with pytest.raises(ProviderError) as info:
        await ask(kind, httpx.Response(500, text=body))
    assert "x" * 500 in info.value.message
    assert "x" * 501 not in info.value.message
    assert "1500 chars omitted" in info.value.message


@pytest.mark.parametrize("stream", [False, True])
async def test_unparseable_success_body_is_bad_request(kind: str, stream: bool) -> None:
    garbage = "<html>gateway says hi</html>"
    if stream:
        garbage = "data: {not json\n\n" if kind != "ollama" else "{not json\n"
    with pytest.raises(ProviderError) as info:
        await ask(kind, httpx.Response(200, text=garbage), stream=stream)
    assert info.value.kind == "bad_request"
    assert "not json" in info.value.message or "gateway says hi" in info.value.message


async def test_success_body_of_the_wrong_shape_is_bad_request(kind: str) -> None:
    with pytest.raises(ProviderError) as info:
        await ask(kind, httpx.Response(200, json={"unexpected": True}))
    assert info.value.kind == "bad_request"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("connection refused"),
        httpx.ReadTimeout("read timed out"),
        httpx.RemoteProtocolError("server disconnected"),
    ],
    ids=["connect", "timeout", "disconnect"],
)
async def test_transport_failures_are_network(kind: str, stream: bool, exc: Exception) -> None:
    with pytest.raises(ProviderError) as info:
        await ask(kind, exc, stream=stream)
    assert info.value.kind == "network"
    assert type(exc).__name__ in info.value.message


def _stream_head(kind: str, text: str) -> bytes:
    """The first bytes of a streamed answer, up to one text delta."""
    wire = Wire(kind)
    parsed = wire.dialect.parse(
        {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
         "stream": True}
    )
    pieces = list(wire.dialect.stream(parsed, Reply(text)))
    head = {"openai_compat": 2, "anthropic": 4, "ollama": 1}[kind]
    return b"".join(pieces[:head])


async def test_stream_broken_midway_is_network(kind: str) -> None:
    closed: list[bool] = []
    body = byte_stream(_stream_head(kind, "partial answer"),
                       then=httpx.ReadError("connection reset"), closed=closed)
    wire = Wire(kind, [httpx.Response(200, content=body)])
    provider = make_provider(kind, wire)
    events, options = collect()
    with pytest.raises(ProviderError) as info:
        await provider.chat([UserMessage("hi")], [], options)
    assert info.value.kind == "network"
    assert "stream broken" in info.value.message
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["partial "]
    assert closed == [True]
    await provider.aclose()


async def test_stream_that_just_ends_is_network(kind: str) -> None:
    wire = Wire(kind, [httpx.Response(200, content=_stream_head(kind, "partial answer"))])
    provider = make_provider(kind, wire)
    _, options = collect()
    with pytest.raises(ProviderError) as info:
        await provider.chat([UserMessage("hi")], [], options)
    assert info.value.kind == "network"
    assert "ended before" in info.value.message
    await provider.aclose()


@pytest.mark.parametrize("stream", [False, True])
async def test_timeout_is_network(kind: str, stream: bool) -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        raise AssertionError("not reached")

    # The message proves the provider's own timeout ended the call (a hang would end in
    # pytest's timeout instead): no wall-clock assertion needed.
    with pytest.raises(ProviderError) as info:
        await ask(kind, slow, stream=stream, timeout_s=0.05)
    assert info.value.kind == "network"
    assert "timed out after 0.05s" in info.value.message


async def test_stream_that_stalls_is_network(kind: str) -> None:
    async def stalled() -> Any:
        yield _stream_head(kind, "partial answer")
        await asyncio.sleep(30)

    wire = Wire(kind, [httpx.Response(200, content=stalled())])
    provider = make_provider(kind, wire, timeout_s=0.05)
    _, options = collect()
    with pytest.raises(ProviderError) as info:
        await provider.chat([UserMessage("hi")], [], options)
    assert info.value.kind == "network"
    assert "stalled" in info.value.message
    await provider.aclose()


# ---------------------------------------------------------------------------
# Retry-After
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_seconds(kind: str, status: int) -> None:
    with pytest.raises(ProviderError) as info:
        await ask(kind, Fail(status, headers={"retry-after": "2"}))
    assert info.value.retry_after == 2.0
    assert info.value.kind == ("rate_limit" if status == 429 else "server_error")


async def test_retry_after_http_date(kind: str) -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    with pytest.raises(ProviderError) as info:
        await ask(kind, Fail(429, headers={"retry-after": when}))
    assert info.value.retry_after is not None
    # HTTP-dates have one-second resolution; anything near two minutes is right.
    assert 100 <= info.value.retry_after <= 121


async def test_retry_after_date_in_the_past_is_zero(kind: str) -> None:
    when = email.utils.formatdate(time.time() - 3600, usegmt=True)
    with pytest.raises(ProviderError) as info:
        await ask(kind, Fail(429, headers={"retry-after": when}))
    assert info.value.retry_after == 0.0


async def test_retry_after_unreadable_or_absent_is_none(kind: str) -> None:
    with pytest.raises(ProviderError) as info:
        await ask(kind, Fail(429, headers={"retry-after": "soon-ish"}))
    assert info.value.retry_after is None
    with pytest.raises(ProviderError) as info:
        await ask(kind, Fail(429))
    assert info.value.retry_after is None


# ---------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------

# (kind, config, env, expected auth header or error naming the variable)
KEY_CASES: list[tuple[str, dict[str, Any], dict[str, str], tuple[str, str] | str | None]] = [
    # openai_compat: a key is required for api.openai.com only
    ("openai_compat", {}, {"OPENAI_API_KEY": "sk-1"}, ("authorization", "Bearer sk-1")),
    ("openai_compat", {}, {}, "OPENAI_API_KEY"),
    ("openai_compat", {}, {"OPENAI_API_KEY": "   "}, "OPENAI_API_KEY"),
    ("openai_compat", {"api_key_env": "MY_OPENAI"}, {"OPENAI_API_KEY": "sk-1"}, "MY_OPENAI"),
    ("openai_compat", {"api_key_env": "MY_OPENAI"}, {"MY_OPENAI": "sk-2"},
     ("authorization", "Bearer sk-2")),
    # a custom host needs no key, and never receives OPENAI_API_KEY unless named
    ("openai_compat", {"base_url": "http://127.0.0.1:1234/v1"}, {"OPENAI_API_KEY": "sk-1"}, None),
    ("openai_compat", {"base_url": "http://127.0.0.1:1234/v1", "api_key_env": "LOCAL_KEY"},
     {}, None),
    ("openai_compat", {"base_url": "http://127.0.0.1:1234/v1", "api_key_env": "LOCAL_KEY"},
     {"LOCAL_KEY": "lk"}, ("authorization", "Bearer lk")),
    # anthropic: required for api.anthropic.com, and wherever api_key_env names one
    ("anthropic", {}, {"ANTHROPIC_API_KEY": "sk-ant"}, ("x-api-key", "sk-ant")),
    ("anthropic", {}, {}, "ANTHROPIC_API_KEY"),
    # another host never receives ANTHROPIC_API_KEY unless the config names it
    ("anthropic", {"base_url": "http://127.0.0.1:9/"}, {"ANTHROPIC_API_KEY": "sk-ant"}, None),
    ("anthropic", {"base_url": "http://127.0.0.1:9/", "api_key_env": "ANTHROPIC_API_KEY"},
     {"ANTHROPIC_API_KEY": "sk-ant"}, ("x-api-key", "sk-ant")),
    ("anthropic", {"base_url": "http://127.0.0.1:9/", "api_key_env": "PROXY_KEY"}, {},
     "PROXY_KEY"),
    # a look-alike host is another host
    ("openai_compat", {"base_url": "https://api.openai.com.evil.test/v1"},
     {"OPENAI_API_KEY": "sk-1"}, None),
    ("anthropic", {"base_url": "https://evil.test/api.anthropic.com"},
     {"ANTHROPIC_API_KEY": "sk-ant"}, None),
    ("anthropic", {"api_key_env": "CLAUDE_KEY"}, {"ANTHROPIC_API_KEY": "sk-ant"}, "CLAUDE_KEY"),
    ("anthropic", {"api_key_env": "CLAUDE_KEY"}, {"CLAUDE_KEY": "ck"}, ("x-api-key", "ck")),
    # ollama: never required; a Bearer token when one resolves
    ("ollama", {}, {"OPENAI_API_KEY": "sk-1", "ANTHROPIC_API_KEY": "sk-ant"}, None),
    ("ollama", {"api_key_env": "OLLAMA_KEY"}, {}, None),
    ("ollama", {"api_key_env": "OLLAMA_KEY"}, {"OLLAMA_KEY": "ok"}, ("authorization", "Bearer ok")),
]


@pytest.mark.parametrize(("kind_", "config", "env", "expected"), KEY_CASES)
async def test_key_rules(
    kind_: str, config: dict[str, Any], env: dict[str, str],
    expected: tuple[str, str] | str | None,
) -> None:
    wire = Wire(kind_, [Reply("ok")])
    provider = make_provider(kind_, wire, env=env, **config)
    if isinstance(expected, str):
        with pytest.raises(ProviderError) as info:
            await provider.chat([UserMessage("hi")], [], ChatOptions())
        assert info.value.kind == "auth"
        assert f"set the environment variable {expected}" in info.value.message
        assert wire.requests == []  # failed before any request
        return
    await provider.chat([UserMessage("hi")], [], ChatOptions())
    headers = wire.requests[0].headers
    secrets = {"authorization", "x-api-key"}
    if expected is None:
        assert not secrets & set(headers.keys())
    else:
        name, value = expected
        assert headers[name] == value
        assert not (secrets - {name}) & set(headers.keys())
    await provider.aclose()


async def test_user_info_naming_the_well_known_host_is_not_that_host() -> None:
    # https://api.anthropic.com@evil.test goes to evil.test (httpx turns the user info
    # into Basic credentials of its own); the key must not go with it.
    wire = Wire("anthropic", [Reply("ok")])
    provider = make_provider("anthropic", wire, env={"ANTHROPIC_API_KEY": "sk-ant"},
                             base_url="https://api.anthropic.com@evil.test")
    await provider.chat([UserMessage("hi")], [], ChatOptions())
    (request,) = wire.requests
    assert request.url.host == "evil.test"
    assert "x-api-key" not in request.headers
    assert all("sk-ant" not in value for value in request.headers.values())
    await provider.aclose()


async def test_key_is_read_at_call_time(kind: str) -> None:
    env: dict[str, str] = {}
    wire = Wire(kind, [Reply("ok")])
    provider = make_provider(kind, wire, env=env, api_key_env="LATE_KEY")
    env["LATE_KEY"] = "late"
    await provider.chat([UserMessage("hi")], [], ChatOptions())
    headers = wire.requests[0].headers
    assert headers.get("x-api-key") == "late" or headers.get("authorization") == "Bearer late"


async def test_configured_headers_are_sent(kind: str) -> None:
    wire = Wire(kind, [Reply("ok")])
    provider = make_provider(kind, wire, headers={"x-team": "blue"})
    await provider.chat([UserMessage("hi")], [], ChatOptions())
    assert wire.requests[0].headers["x-team"] == "blue"


# ---------------------------------------------------------------------------
# malformed tool arguments
# ---------------------------------------------------------------------------


async def test_malformed_arguments_set_args_error(kind: str) -> None:
    bad = {
        "openai_compat": {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "read_file", "arguments": '{"path": "a.t'}},
                {"id": "c2", "type": "function",
                 "function": {"name": "read_file", "arguments": '["a.txt"]'}},
            ]}}]},
        "anthropic": {"type": "message", "role": "assistant", "stop_reason": "tool_use",
                      "content": [
                          {"type": "tool_use", "id": "c1", "name": "read_file",
                           "input": '{"path": "a.t'},
                          {"type": "tool_use", "id": "c2", "name": "read_file",
                           "input": ["a.txt"]},
                      ]},
        "ollama": {"model": "m-1", "done": True, "done_reason": "stop", "message": {
            "role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "read_file", "arguments": '{"path": "a.t'}},
                {"function": {"name": "read_file", "arguments": ["a.txt"]}},
            ]}},
    }[kind]
    result = await ask(kind, httpx.Response(200, json=bad))
    first, second = result.message.tool_calls
    assert first.args == {}
    assert second.args == {}
    assert first.args_error is not None
    assert "not valid JSON" in first.args_error
    assert second.args_error is not None
    assert second.args_error.startswith("arguments must be a JSON object, got array")
    assert result.finish_reason == "tool_calls"


async def test_arguments_as_object_or_as_string_are_accepted(kind: str) -> None:
    """Each wire's usual form, plus the other one (some proxies send it)."""
    body = {
        "openai_compat": {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "read_file", "arguments": {"path": "a"}}},
                {"id": "c2", "type": "function",
                 "function": {"name": "read_file", "arguments": '{"path": "b"}'}},
            ]}}]},
        "anthropic": {"type": "message", "stop_reason": "tool_use", "content": [
            {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a"}},
            {"type": "tool_use", "id": "c2", "name": "read_file", "input": '{"path": "b"}'},
        ]},
        "ollama": {"done": True, "done_reason": "stop", "message": {
            "role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "read_file", "arguments": {"path": "a"}}},
                {"function": {"name": "read_file", "arguments": '{"path": "b"}'}},
            ]}},
    }[kind]
    result = await ask(kind, httpx.Response(200, json=body))
    assert [(c.args, c.args_error) for c in result.message.tool_calls] == [
        ({"path": "a"}, None), ({"path": "b"}, None)
    ]


# ---------------------------------------------------------------------------
# cancellation
# ---------------------------------------------------------------------------


async def test_cancel_while_waiting_for_the_answer(kind: str) -> None:
    arrived = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        arrived.set()
        await asyncio.sleep(60)
        raise AssertionError("not reached")

    provider = make_provider(kind, Wire(kind, [hang]))
    task = asyncio.create_task(provider.chat([UserMessage("hi")], [], ChatOptions()))
    await asyncio.wait_for(arrived.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    await provider.aclose()


async def test_cancel_mid_stream_closes_the_stream(kind: str) -> None:
    closed: list[bool] = []
    first_delta = asyncio.Event()

    async def body() -> Any:
        try:
            yield _stream_head(kind, "partial answer")
            await asyncio.sleep(60)
        finally:
            closed.append(True)

    wire = Wire(kind, [httpx.Response(200, content=body())])
    provider = make_provider(kind, wire)
    options = ChatOptions(stream=True, on_event=lambda e: first_delta.set())
    task = asyncio.create_task(provider.chat([UserMessage("hi")], [], options))
    await asyncio.wait_for(first_delta.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert closed == [True]
    await provider.aclose()


# ---------------------------------------------------------------------------
# client lifecycle
# ---------------------------------------------------------------------------


def test_client_survives_a_new_event_loop(kind: str) -> None:
    """``Agent.run_sync`` runs a fresh loop per call; the provider must cope."""
    wire = Wire(kind, [Reply("one"), Reply("two")])
    provider = make_provider(kind, wire)
    first = asyncio.run(provider.chat([UserMessage("hi")], [], ChatOptions()))
    second = asyncio.run(provider.chat([UserMessage("hi")], [], ChatOptions()))
    assert (first.message.content, second.message.content) == ("one", "two")
    asyncio.run(provider.aclose())


async def test_aclose_is_idempotent_and_the_provider_reopens(kind: str) -> None:
    wire = Wire(kind, [Reply("one"), Reply("two")])
    provider = make_provider(kind, wire)
    await provider.chat([UserMessage("hi")], [], ChatOptions())
    await provider.aclose()
    await provider.aclose()
    result = await provider.chat([UserMessage("hi")], [], ChatOptions())
    assert result.message.content == "two"
    await provider.aclose()


async def test_malformed_arguments_reach_the_model_as_an_error_not_a_run(
    kind: str, tmp_path: Any
) -> None:
    """The loop answers ``invalid_tool_arguments: …`` and never runs the tool."""
    from lich.agent import Agent
    from lich.hooks import hookimpl
    from lich.testing import make_test_config
    from lich.tools import ToolRegistry, tool

    ran: list[str] = []

    class Plugin:
        @hookimpl
        def lich_register_tools(self, registry: ToolRegistry) -> None:
            @tool
            def read_file(path: str = "") -> str:
                """Read."""
                ran.append(path)
                return "contents"

            registry.register(read_file)

    broken = {
        "openai_compat": {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": '}}]}}]},
        "anthropic": {"type": "message", "stop_reason": "tool_use", "content": [
            {"type": "tool_use", "id": "c1", "name": "read_file", "input": '{"path": '}]},
        "ollama": {"done": True, "done_reason": "stop", "message": {
            "role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "read_file", "arguments": '{"path": '}}]}},
    }[kind]
    wire = Wire(kind, [httpx.Response(200, json=broken), Reply("sorry, fixed")])
    provider = make_provider(kind, wire)
    agent = Agent(make_test_config(tmp_path), plugins=[("p", Plugin())], chat=provider.chat)
    result = await agent.run("read it")
    await provider.aclose()
    assert result.text == "sorry, fixed"
    assert ran == []
    seen = wire.dialect.parse(wire.bodies[1])
    (answer,) = [m for m in seen.messages if isinstance(m, ToolMessage)]
    content = json.loads(answer.content)
    assert content["ok"] is False
    assert content["error"].startswith("invalid_tool_arguments: arguments are not valid JSON")
