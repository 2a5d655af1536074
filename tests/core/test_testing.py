"""The plugin authors' testing kit (``lich.testing``): scripts, the server, the fixtures."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lich import hookimpl
from lich.agent import Agent
from lich.config import ProviderConfig
from lich.events import TextDelta
from lich.testing import (
    Fail,
    HookRecorder,
    Reply,
    ScriptedChat,
    ScriptedModel,
    ScriptedServer,
    ScriptRequest,
    demo_responder,
    make_test_config,
    tool_loop_responder,
)
from lich.types import (
    AssistantMessage,
    ChatOptions,
    ProviderError,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    Usage,
    UserMessage,
)

from .conftest import FIXTURES

ECHO_DEF = ToolDefinition("echo", "Echo.", {"type": "object"})


def _request(*messages: Any) -> ScriptRequest:
    return ScriptRequest(tuple(messages), (), "m", False)


# ------------------------------------------------------------------ the script


def test_scripted_model_steps_then_responder_then_exhausted() -> None:
    model = ScriptedModel(["first", Reply("second")])
    assert model.next(_request(UserMessage("a"))) == Reply("first")
    model.push("pushed")
    assert model.next(_request()) == Reply("second")
    assert model.next(_request()) == Reply("pushed")
    assert model.next(_request()) == Reply("(script exhausted)")
    assert len(model.requests) == 4

    answering = ScriptedModel(["queued"], responder=lambda r: Reply(f"re: {r.last_user()}"))
    assert answering.next(_request(UserMessage("x"))).text == "queued"
    assert answering.next(_request(UserMessage("y"))).text == "re: y"


def test_script_request_helpers() -> None:
    request = _request(
        UserMessage("old"),
        ToolMessage("0", "t", "stale"),
        UserMessage("new"),
        AssistantMessage("", (ToolCall("1", "t", {}),)),
        ToolMessage("1", "t", "fresh"),
    )
    assert request.last_user() == "new"
    assert [m.content for m in request.tool_results_since_user()] == ["fresh"]


async def test_scripted_chat_answers_and_records() -> None:
    chat = ScriptedChat([Reply("hi", tool_calls=[ToolCall("1", "echo", {})])])
    result = await chat([UserMessage("u")], [ECHO_DEF], ChatOptions())
    assert result.message == AssistantMessage("hi", (ToolCall("1", "echo", {}),))
    assert result.finish_reason == "tool_calls"
    assert result.provider_name == "scripted"
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens
    assert result.usage.prompt_tokens >= 1
    assert chat.requests[0].tools == ("echo",)
    assert chat.calls[0][0] == [UserMessage("u")]
    fixed = await ScriptedChat([Reply("x", usage=Usage(1, 2, 3))])([], [], ChatOptions())
    assert fixed.usage == Usage(1, 2, 3)
    assert fixed.finish_reason == "stop"


@pytest.mark.parametrize(
    ("status", "kind"), [(401, "auth"), (403, "auth"), (429, "rate_limit"), (500, "server_error"),
                         (400, "bad_request")],
)
async def test_scripted_failures_raise_provider_errors(status: int, kind: str) -> None:
    chat = ScriptedChat([Fail(status, body="nope", headers={"retry-after": "2"})])
    with pytest.raises(ProviderError) as info:
        await chat([], [], ChatOptions())
    assert (info.value.kind, info.value.status, info.value.message) == (kind, status, "nope")
    assert info.value.retry_after == 2.0


async def test_a_retry_after_date_is_ignored_in_process() -> None:
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    with pytest.raises(ProviderError) as info:
        await ScriptedChat([Fail(503, headers={"Retry-After": date})])([], [], ChatOptions())
    assert info.value.kind == "server_error"
    assert info.value.retry_after is None


async def test_scripted_chat_streams_text_deltas() -> None:
    deltas: list[Any] = []
    options = ChatOptions(stream=True, on_event=deltas.append)
    result = await ScriptedChat([Reply("a b c")])([], [], options)
    assert [d.text for d in deltas] == ["a ", "b ", "c"]
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert result.message.content == "a b c"
    deltas.clear()
    await ScriptedChat([Reply("abc", chunks=("ab", "c"))])([], [], options)
    assert [d.text for d in deltas] == ["ab", "c"]


async def test_delay_lets_tests_exercise_cancellation() -> None:
    chat = ScriptedChat([Reply("late", delay_s=30)])
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(chat([], [], ChatOptions()), 0.05)


def test_tool_loop_responder_serves_many_conversations() -> None:
    respond = tool_loop_responder(2, tool="echo", args={"text": "x"}, final="fin")
    fresh = _request(UserMessage("go"))
    one_done = _request(
        UserMessage("go"), AssistantMessage("", (ToolCall("call_1", "echo", {}),)),
        ToolMessage("call_1", "echo", "x"),
    )
    assert respond(fresh).tool_calls == (ToolCall("call_1", "echo", {"text": "x"}),)
    assert respond(one_done).tool_calls[0].id == "call_2"
    two_done = _request(*one_done.messages, ToolMessage("call_2", "echo", "x"))
    assert respond(two_done) == Reply("fin")


def test_demo_responder_writes_reads_lists_and_reports() -> None:
    respond = demo_responder("hello.txt")
    names = []
    messages: list[Any] = [UserMessage("demo")]
    for _ in range(3):
        reply = respond(_request(*messages))
        assert isinstance(reply, Reply)
        (call,) = reply.tool_calls
        names.append(call.name)
        messages += [AssistantMessage(reply.text, reply.tool_calls),
                     ToolMessage(call.id, call.name, "ok output")]
    assert names == ["write_file", "read_file", "list_dir"]
    final = respond(_request(*messages))
    assert isinstance(final, Reply)
    assert final.text.startswith("Done. I wrote hello.txt")
    messages[-1] = ToolMessage("demo_3", "list_dir", "denied", is_error=True)
    failed = respond(_request(*messages))
    assert isinstance(failed, Reply)
    assert failed.text == "Some steps failed: list_dir: denied"


# ------------------------------------------------------------------ the HTTP server


def _post(server: ScriptedServer, body: Any, path: str = "/v1/chat/completions",
          **kw: Any) -> httpx.Response:
    with httpx.Client(timeout=10) as client:
        return client.post(server.root_url + path, json=body, **kw)


def test_server_answers_the_openai_dialect(
    lich_scripted_server: Callable[..., ScriptedServer],
) -> None:
    server = lich_scripted_server(
        [Reply("calling", tool_calls=[ToolCall("t1", "echo", {"text": "hi"})]),
         Reply("done", usage=Usage(5, 6, 11))]
    )
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    first = _post(server, {"model": "scripted", "messages": [{"role": "user", "content": "go"}],
                           "tools": [{"type": "function", "function": {"name": "echo"}}]},
                  headers={"authorization": "Bearer test-key"})
    assert first.status_code == 200
    choice = first.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["id"] == "t1"
    assert json.loads(call["function"]["arguments"]) == {"text": "hi"}
    assert first.json()["usage"]["total_tokens"] > 0
    assert server.headers_seen[0]["authorization"] == "Bearer test-key"

    second = _post(server, {"model": "scripted", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "t1", "content": "hi"},
    ]})
    assert second.json()["choices"][0]["message"] == {"role": "assistant", "content": "done"}
    assert second.json()["usage"] == {"prompt_tokens": 5, "completion_tokens": 6,
                                      "total_tokens": 11}
    # The server read the request back as lich messages (tool names resolved).
    request = server.model.requests[1]
    assert request.dialect == "openai"
    assert request.tools == ()
    assert request.messages[2] == ToolMessage("t1", "echo", "hi")
    assert server.model.requests[0].tools == ("echo",)


def test_server_streams_server_sent_events(
    lich_scripted_server: Callable[..., ScriptedServer],
) -> None:
    server = lich_scripted_server(
        [Reply("hello there", tool_calls=[ToolCall("t1", "echo", {"text": "abc"})])]
    )
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=10) as client, client.stream(
        "POST", server.base_url + "/chat/completions", json=body
    ) as response:
        assert response.headers["content-type"] == "text/event-stream"
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "hello there"
    args = "".join(
        tc["function"].get("arguments", "")
        for c in chunks if c["choices"]
        for tc in c["choices"][0]["delta"].get("tool_calls", [])
    )
    assert json.loads(args) == {"text": "abc"}
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "tool_calls"
    assert chunks[-1]["usage"]["total_tokens"] > 0


def test_server_failures_and_bad_requests(
    lich_scripted_server: Callable[..., ScriptedServer],
) -> None:
    server = lich_scripted_server(
        [Fail(429, headers={"retry-after": "1"}), Fail(401, body={"error": {"message": "bad"}})]
    )
    ok_body = {"messages": [{"role": "user", "content": "x"}]}
    limited = _post(server, ok_body)
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "1"
    denied = _post(server, ok_body)
    assert (denied.status_code, denied.json()) == (401, {"error": {"message": "bad"}})
    assert _post(server, ok_body, path="/v1/other").status_code == 404
    bad = _post(server, {"messages": "not a list"})
    assert bad.status_code == 400
    assert "bad request" in bad.json()["error"]["message"]
    with httpx.Client(timeout=10) as client:
        assert client.get(server.root_url + "/health").json() == {"status": "ok"}


def test_server_as_a_context_manager_frees_its_port() -> None:
    with ScriptedServer(ScriptedModel(["hi"])) as server:
        port = server.port
        response = _post(server, {"messages": [{"role": "user", "content": "x"}]})
        assert response.json()["choices"][0]["message"]["content"] == "hi"
    with pytest.raises(httpx.ConnectError), httpx.Client(timeout=5) as client:
        client.get(f"http://127.0.0.1:{port}/health")


async def test_agent_end_to_end_through_the_server_and_a_real_provider(
    lich_scripted_server: Callable[..., ScriptedServer], tmp_path: Path
) -> None:
    server = lich_scripted_server(responder=tool_loop_responder(1, tool="fixture_echo"))
    for stream in (False, True):
        config = make_test_config(
            tmp_path,
            plugins=("openai_compat", str(FIXTURES / "good_plugin.py")),
            providers=[ProviderConfig(kind="openai_compat", name="local", model="scripted",
                                      base_url=server.base_url)],
            stream=stream,
        )
        agent = Agent(config)
        try:
            result = await asyncio.wait_for(agent.run("echo something"), 30)
        finally:
            await agent.aclose()
        assert result.text == "done", stream
        tool_msg = result.messages[3]
        assert isinstance(tool_msg, ToolMessage)
        assert tool_msg.content == "fixture_echo: hi"
        assert result.usage.total_tokens > 0
    assert [r.stream for r in server.model.requests] == [False, False, True, True]


# ------------------------------------------------------------------ the fixtures


def test_hook_recorder_fixture_records_run_hooks(
    lich_agent_factory: Callable[..., Agent], lich_hook_recorder: HookRecorder
) -> None:
    agent = lich_agent_factory(["hello"], objects=[("rec", lich_hook_recorder)])
    agent.run_sync("hi")
    assert [n for n in lich_hook_recorder.names() if n != "lich_event"] == [
        "lich_run_start", "lich_run_end",
    ]  # fmt: skip
    assert lich_hook_recorder.events()[0] == "run_start"
    assert lich_hook_recorder.events()[-1] == "run_end"


async def test_agent_factory_loads_plugin_entries_and_objects(
    lich_agent_factory: Callable[..., Agent], tmp_path: Path
) -> None:
    (tmp_path / "plugin.py").write_text((FIXTURES / "good_plugin.py").read_text())
    seen: list[str] = []

    class Observer:
        @hookimpl
        def lich_run_end(self, outcome: Any) -> None:
            seen.append(outcome.stopped_reason)

    agent = lich_agent_factory(
        [Reply(tool_calls=[ToolCall("1", "fixture_echo", {"text": "x"})]), "ok"],
        plugins=["plugin.py"], objects=[("observer", Observer())], max_turns=4,
    )
    assert agent.config.work_dir == str(tmp_path)
    assert agent.config.max_turns == 4
    assert agent.tools.names() == ["fixture_echo"]
    result = await agent.run("go")
    assert result.messages[3].content == "fixture_echo: x"
    assert seen == ["final"]


def test_agent_factory_accepts_any_chat_function(lich_agent_factory: Callable[..., Agent]) -> None:
    chat = ScriptedChat(responder=lambda r: Reply(r.last_user().upper()))
    agent = lich_agent_factory(chat)
    assert agent.run_sync("shout").text == "SHOUT"
    assert agent.chat is chat
