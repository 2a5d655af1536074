"""The spans of real runs, collected with the SDK's in-memory exporter: names,
parents and attributes; content capture off and on; concurrent runs kept apart;
spans a tool starts nested under its ``execute_tool`` span."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from opentelemetry.trace import SpanKind, StatusCode

from lich.agent import Agent
from lich.config import ProviderConfig
from lich.events import Envelope
from lich.otel import SEMCONV_VERSION
from lich.testing import Fail, Reply, ScriptedChat, ScriptedServer, make_test_config
from lich.types import ToolCall, Usage

from .conftest import GuardPlugin, Spans, ToolsPlugin

CONTENT_KEYS = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
                "lich.tool.call.original_arguments", "lich.error.message"}
USER_INPUT = "please echo the magic word xyzzy"
ECHO_DESCRIPTION = "Say the text back."  # conftest's echo tool
#: The scripted servers of the last scripted_run: primary, backup.
SERVERS: list[ScriptedServer] = []


def server_attributes(server: ScriptedServer) -> dict[str, Any]:
    from urllib.parse import urlsplit

    url = urlsplit(server.base_url)
    return {"server.address": url.hostname, "server.port": url.port}


async def scripted_run(
    tmp_path: Path, server: Callable[..., ScriptedServer], spans: Spans,
    settings: dict[str, Any] | None = None,
) -> tuple[Any, list[Envelope]]:
    """A run over HTTP with two providers and the failover router:

    turn 1: ``primary`` asks for three calls (one rewritten, one blocked, one plain);
    turn 2: ``primary`` is rate limited (a retry), then refuses the key (a failover),
    and ``backup`` answers.
    """
    primary = server([
        Reply(tool_calls=[ToolCall("c1", "echo", {"text": "shout"}),
                          ToolCall("c2", "echo", {"text": "secret"}),
                          ToolCall("c3", "echo", {"text": "xyzzy"})],
              usage=Usage(120, 30, 150)),
        Fail(429, {"error": {"message": "slow down"}}, headers={"retry-after": "0"}),
        Fail(401, {"error": {"message": "bad key"}}),
    ])
    backup = server([Reply("the word was xyzzy", usage=Usage(200, 8, 208))])
    SERVERS[:] = [primary, backup]
    config = make_test_config(
        tmp_path,
        plugins=("openai_compat", "failover"),
        providers=(
            ProviderConfig(kind="openai_compat", name="primary", model="m-primary",
                           base_url=primary.base_url),
            ProviderConfig(kind="openai_compat", name="backup", model="m-backup",
                           base_url=backup.base_url),
        ),
        plugin_settings={"failover": {"base_delay_s": 0.001, "max_attempts": 2}},
        otel=settings or {},
        temperature=0.2,
    )
    agent = Agent(config, plugins=[("otel", spans.plugin()), ("guard", GuardPlugin()),
                                   ("tools", ToolsPlugin())])
    events: list[Envelope] = []
    try:
        result = await agent.run(USER_INPUT, on_event=events.append)
    finally:
        await agent.aclose()
    return result, events


async def test_a_scripted_run_as_spans(
    tmp_path: Path, lich_scripted_server: Callable[..., ScriptedServer], spans: Spans
) -> None:
    result, events = await scripted_run(tmp_path, lich_scripted_server, spans)
    assert result.stopped_reason == "final"
    (retry,) = [e.event for e in events if e.type == "retry"]

    assert sorted(s.name for s in spans.all) == sorted([
        "invoke_agent lich", "chat m-primary", "chat m-primary",
        "execute_tool echo", "execute_tool echo", "execute_tool echo",
    ])
    run = spans.one("invoke_agent lich")
    assert run.parent is None
    assert run.kind == SpanKind.INTERNAL
    assert run.instrumentation_scope is not None
    assert run.instrumentation_scope.schema_url.endswith(SEMCONV_VERSION)
    # Every other span is a direct child of the run, in its trace.
    children = spans.children(run)
    assert len(children) == 5
    assert {s.context.trace_id for s in spans.all} == {run.context.trace_id}
    assert dict(run.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "lich",
        "gen_ai.conversation.id": result.session_id,
        # An OpenAI-compatible server the conventions have no name for: the API's.
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "m-primary",
        "lich.run_id": result.run_id,
        "lich.stopped_reason": "final",
        "lich.turns_used": 2,
        "gen_ai.usage.input_tokens": result.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": result.usage.completion_tokens,
    }
    assert result.usage.prompt_tokens == 320
    assert run.status.status_code == StatusCode.UNSET

    first, second = sorted(spans.named("chat m-primary"), key=lambda s: s.start_time or 0)
    assert first.kind == SpanKind.CLIENT
    primary, backup = SERVERS
    assert dict(first.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.conversation.id": result.session_id,
        **server_attributes(primary),
        "gen_ai.request.model": "m-primary",
        "gen_ai.request.temperature": 0.2,
        "gen_ai.response.model": "m-primary",
        "gen_ai.response.id": "chatcmpl-scripted",
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "lich.provider": "primary",
        "lich.turn": 1,
    }
    assert first.events == ()
    # The retry and the failover are events of the one logical model call.
    assert [(e.name, dict(e.attributes or {})) for e in second.events] == [
        ("lich.retry", {"lich.provider": "primary", "lich.attempt": 2,
                        "error.type": "rate_limit", "lich.delay_s": retry.delay_s}),
        ("lich.failover", {"lich.from_provider": "primary", "lich.to_provider": "backup",
                           "error.type": "auth"}),
    ]
    assert second.attributes is not None
    assert second.attributes["lich.provider"] == "backup"
    # The provider that answered: its server, not the first provider's.
    assert {k: second.attributes[k] for k in ("server.address", "server.port")} == \
        server_attributes(backup)
    assert second.attributes["gen_ai.response.model"] == "m-backup"
    assert second.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert second.attributes["gen_ai.usage.input_tokens"] == 200
    assert second.attributes["lich.turn"] == 2
    assert first.end_time is not None
    assert second.start_time is not None
    assert first.end_time <= spans.tool_span("c1").start_time <= second.start_time  # type: ignore[operator]

    rewritten, blocked, plain = (spans.tool_span(c) for c in ("c1", "c2", "c3"))
    assert dict(rewritten.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": ECHO_DESCRIPTION,
        "lich.turn": 1,
        "lich.rewritten_by": ("guard",),
    }
    assert rewritten.status.status_code == StatusCode.UNSET
    assert blocked.attributes is not None
    assert blocked.attributes["lich.blocked_by"] == "guard"
    assert blocked.attributes["error.type"] == "blocked_by_plugin"
    assert blocked.status.status_code == StatusCode.ERROR
    assert plain.attributes is not None
    assert "error.type" not in plain.attributes
    assert "lich.blocked_by" not in plain.attributes


async def test_no_content_is_recorded_by_default(
    tmp_path: Path, lich_scripted_server: Callable[..., ScriptedServer], spans: Spans
) -> None:
    await scripted_run(tmp_path, lich_scripted_server, spans)
    assert spans.all
    for span in spans.all:
        attributes = dict(span.attributes or {})
        for event in span.events:
            attributes.update(event.attributes or {})
        assert not CONTENT_KEYS & set(attributes), span.name
        # Not under another name either: no attribute holds the input, the arguments,
        # a tool's output, the answer or a provider's error text.
        text = json.dumps({k: str(v) for k, v in attributes.items()})
        for secret in ("xyzzy", "SHOUT", "echo: ", "slow down", "bad key"):
            assert secret not in text, (span.name, secret)


async def test_content_is_recorded_when_configured(
    tmp_path: Path, lich_scripted_server: Callable[..., ScriptedServer], spans: Spans
) -> None:
    await scripted_run(tmp_path, lich_scripted_server, spans, {"capture_content": True})
    run = spans.one("invoke_agent lich")
    assert run.attributes is not None
    assert json.loads(str(run.attributes["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": USER_INPUT}]}]
    assert json.loads(str(run.attributes["gen_ai.output.messages"])) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "the word was xyzzy"}],
         "finish_reason": "stop"}]
    first = min(spans.named("chat m-primary"), key=lambda s: s.start_time or 0)
    assert first.attributes is not None
    (output,) = json.loads(str(first.attributes["gen_ai.output.messages"]))
    assert [p["type"] for p in output["parts"]] == ["tool_call"] * 3
    assert output["parts"][0] == {"type": "tool_call", "id": "c1", "name": "echo",
                                  "arguments": {"text": "shout"}}
    rewritten = spans.tool_span("c1").attributes
    assert rewritten is not None
    assert json.loads(str(rewritten["gen_ai.tool.call.arguments"])) == {"text": "SHOUT"}
    assert json.loads(str(rewritten["lich.tool.call.original_arguments"])) == {"text": "shout"}
    assert rewritten["gen_ai.tool.call.result"] == "echo: SHOUT"
    blocked = spans.tool_span("c2").attributes
    assert blocked is not None
    assert blocked["gen_ai.tool.call.result"] == "blocked_by_plugin: no secrets"
    second = max(spans.named("chat m-primary"), key=lambda s: s.start_time or 0)
    retry = second.events[0].attributes
    assert retry is not None
    assert "slow down" in str(retry["lich.error.message"])


async def test_the_environment_variable_turns_capture_on(
    lich_agent_factory: Callable[..., Agent], spans: Spans
) -> None:
    plugin = spans.plugin(environ={"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    agent = lich_agent_factory(["hello back"], objects=[("otel", plugin)])
    await agent.run("hello")
    attributes = spans.one("invoke_agent lich").attributes
    assert attributes is not None
    assert "hello" in str(attributes["gen_ai.input.messages"])


@pytest.mark.parametrize("tool_name", ["traced", "traced_async"])
async def test_a_span_a_tool_starts_is_a_child_of_its_execute_tool_span(
    tool_name: str, lich_agent_factory: Callable[..., Agent], spans: Spans
) -> None:
    """What MCP needs: the client library's spans nest under lich's tool span."""
    tools = ToolsPlugin(spans.provider)
    agent = lich_agent_factory(
        [Reply(tool_calls=[ToolCall("t1", tool_name, {"label": "one"}),
                           ToolCall("t2", tool_name, {"label": "two"})]), "done"],
        objects=[("otel", spans.plugin()), ("tools", tools)],
    )
    result = await agent.run("go")
    assert result.stopped_reason == "final"
    for call_id, label in (("t1", "one"), ("t2", "two")):
        tool_span = spans.tool_span(call_id)
        child = spans.one(f"child {label}")
        assert child.parent is not None
        assert child.parent.span_id == tool_span.context.span_id
        assert child.context.trace_id == tool_span.context.trace_id
        assert tools.seen[label] == tool_span.context.span_id
    # After the tools, nothing of lich's is left current in the caller.
    from opentelemetry import trace

    assert not trace.get_current_span().get_span_context().is_valid


async def test_concurrent_runs_do_not_mix_spans(
    lich_agent_factory: Callable[..., Agent], spans: Spans
) -> None:
    """Two runs interleaved on one agent (as the gateway runs conversations): each
    run's spans are in its own trace, under its own run span."""

    def responder(request: Any) -> Reply:
        done = len(request.tool_results_since_user())
        label = f"{request.last_user()}-{done}"
        if done < 3:
            return Reply(tool_calls=[ToolCall(f"{label}", "traced_async", {"label": label})],
                         delay_s=0.005)
        return Reply(f"finished {request.last_user()}")

    tools = ToolsPlugin(spans.provider)
    agent = lich_agent_factory(ScriptedChat(responder=responder),
                               objects=[("otel", spans.plugin()), ("tools", tools)])
    results = await asyncio.gather(agent.run("a"), agent.run("b"), agent.run("c"))
    assert [r.text for r in results] == ["finished a", "finished b", "finished c"]
    runs = spans.named("invoke_agent lich")
    assert len(runs) == 3
    assert len({r.context.trace_id for r in runs}) == 3
    for result in results:
        (run,) = [r for r in runs
                  if r.attributes and r.attributes["lich.run_id"] == result.run_id]
        assert run.attributes is not None
        assert run.attributes["gen_ai.conversation.id"] == result.session_id
        mine = [s for s in spans.all if s.context.trace_id == run.context.trace_id]
        names = sorted(s.name for s in mine)
        assert names == sorted(["invoke_agent lich", *["chat"] * 4,
                                *["execute_tool traced_async"] * 3,
                                *[f"child {result.outcome.messages[1].content}-{i}"
                                  for i in range(3)]])
        for span in mine:
            if span.name.startswith(("chat", "execute_tool")):
                assert span.parent is not None
                assert span.parent.span_id == run.context.span_id
        for i in range(3):
            label = f"{result.outcome.messages[1].content}-{i}"
            assert tools.seen[label] == spans.tool_span(label).context.span_id


async def test_a_failed_run_and_a_cancelled_tool(
    lich_agent_factory: Callable[..., Agent], spans: Spans
) -> None:
    from lich.cancel import CancelToken

    cancel = CancelToken()
    gate = asyncio.Event()

    class Slow:
        from lich import hookimpl

        @hookimpl
        def lich_register_tools(self, registry: Any) -> None:
            from lich import tool

            @tool
            async def wait_here() -> str:
                """Wait until cancelled."""
                gate.set()
                await asyncio.sleep(60)
                return "never"

            registry.register(wait_here)

    agent = lich_agent_factory([Reply(tool_calls=[ToolCall("w1", "wait_here", {})])],
                               objects=[("otel", spans.plugin()), ("slow", Slow())])
    task = asyncio.ensure_future(agent.run("wait", cancel=cancel))
    await asyncio.wait_for(gate.wait(), 10)
    cancel.cancel()
    result = await task
    assert result.stopped_reason == "aborted"
    run = spans.one("invoke_agent lich")
    assert run.attributes is not None
    assert run.attributes["lich.stopped_reason"] == "aborted"
    tool_span = spans.tool_span("w1")
    assert tool_span.attributes is not None
    assert tool_span.attributes["error.type"] == "cancelled"

    failing = lich_agent_factory([Fail(500, {"error": "boom"})],
                                 objects=[("otel", spans.plugin())])
    with pytest.raises(Exception, match=r"boom|500"):
        await failing.run("fail")
    (run,) = [s for s in spans.named("invoke_agent lich")
              if s.attributes and s.attributes["lich.stopped_reason"] == "error"]
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes is not None
    assert run.attributes["error.type"] == "server_error"  # a 5xx, not a rate limit
    (chat,) = [s for s in spans.children(run) if s.name == "chat"]
    assert chat.status.status_code == StatusCode.ERROR
    assert chat.attributes is not None
    assert chat.attributes["error.type"] == "server_error"


async def test_compression_is_a_span(
    lich_agent_factory: Callable[..., Agent], spans: Spans
) -> None:
    history_word = "word " * 400
    agent = lich_agent_factory(
        ["summary of the earlier talk", "the answer"],
        objects=[("otel", spans.plugin())],
        context_budget_tokens=200, compress_threshold=0.5,
    )
    from lich.types import AssistantMessage, UserMessage

    history = [m for i in range(6) for m in (UserMessage(f"{i} {history_word}"),
                                             AssistantMessage(f"reply {i}"))]
    result = await agent.run("now", history=history)
    assert result.text == "the answer"
    compress = spans.one("lich.compress")
    run = spans.one("invoke_agent lich")
    assert compress.parent is not None
    assert compress.parent.span_id == run.context.span_id
    attributes = dict(compress.attributes or {})
    assert attributes["lich.compress.ok"] is True
    assert attributes["lich.compress.summary_chars"] == len("summary of the earlier talk")
    assert attributes["lich.compress.tokens_before"] > attributes["lich.compress.tokens_after"]
    assert attributes["gen_ai.usage.output_tokens"] > 0
    assert compress.end_time is not None
    assert spans.one("chat").start_time is not None
    assert compress.end_time <= spans.one("chat").start_time  # type: ignore[operator]


async def test_usage_breakdown_cost_and_approvals_are_read_by_name(spans: Spans) -> None:
    """Fields newer than this plugin (cache and reasoning tokens, cost, the approval
    events) are read by name: present, they are recorded; absent, left out."""
    from lich.events import LlmEnd, LlmStart, RunEnd, RunStart, ToolCallEnd, ToolCallStart
    from lich.hooks import RunInfo
    from lich.types import AssistantMessage, ChatResult, ToolResult

    @attrs.frozen
    class RichUsage:
        prompt_tokens: int = 100
        completion_tokens: int = 20
        total_tokens: int = 120
        cache_read_tokens: int = 60
        cache_write_tokens: int = 0
        reasoning_tokens: int = 7

    @attrs.frozen
    class PricedEnd:
        turn: int
        result: Any
        cost_usd: float | None = 0.0042
        type: str = "llm_end"

    @attrs.frozen
    class ApprovalRequested:
        call: ToolCall
        reason: str
        approver: str = "cli"
        type: str = "approval_requested"

    @attrs.frozen
    class ApprovalResolved:
        call: ToolCall
        approved: bool
        decision: str = "approved"
        note: str = "the user typed: rm -rf yes"
        type: str = "approval_resolved"

    plugin = spans.plugin()
    seq = iter(range(1, 100))

    def emit(event: Any) -> None:
        plugin.lich_event(Envelope("r1", "s1", next(seq), 1.0, event))

    call = ToolCall("a1", "echo", {"text": "x"})
    emit(RunStart("hi", "/w", "m"))
    plugin.lich_run_start(RunInfo("r1", "s1", "hi", "/w", None))
    emit(LlmStart(1))
    result = ChatResult(AssistantMessage("", (call,)), RichUsage(), "tool_calls")  # type: ignore[arg-type]
    emit(PricedEnd(1, result))
    emit(ToolCallStart(1, call))
    emit(ApprovalRequested(call, "runs a shell command: rm -rf /tmp/x"))
    emit(ApprovalResolved(call, True))
    emit(ToolCallEnd(1, call, ToolResult(True, "x")))
    emit(LlmStart(2))
    emit(LlmEnd(2, ChatResult(AssistantMessage("ok"), Usage(1, 1, 2), "stop")))
    emit(RunEnd("final", 2, Usage(101, 21, 122)))

    first, second = sorted(spans.named("chat m"), key=lambda s: s.start_time or 0)
    assert first.attributes is not None
    assert second.attributes is not None
    assert first.attributes["gen_ai.usage.cache_read.input_tokens"] == 60
    assert first.attributes["gen_ai.usage.reasoning.output_tokens"] == 7
    assert "gen_ai.usage.cache_creation.input_tokens" not in first.attributes  # 0: left out
    assert first.attributes["lich.cost_usd"] == pytest.approx(0.0042)
    assert "lich.cost_usd" not in second.attributes  # a plain LlmEnd has no cost
    assert "gen_ai.usage.cache_read.input_tokens" not in second.attributes
    tool_span = spans.tool_span("a1")
    assert [(e.name, dict(e.attributes or {})) for e in tool_span.events] == [
        ("lich.approval_requested", {"lich.approval.approver": "cli"}),
        ("lich.approval_resolved", {"lich.approval.approved": True,
                                    "lich.approval.decision": "approved"}),
    ]
    run = spans.one("invoke_agent lich")
    assert run.attributes is not None
    assert "lich.cost_usd" not in run.attributes
    assert not plugin.tracing or not plugin.tracing.runs  # the run's state is gone


def test_events_of_a_run_without_a_span_are_ignored(spans: Spans) -> None:
    from lich.events import LlmStart, RunEnd, TextDelta

    plugin = spans.plugin()
    for event in (TextDelta("x"), LlmStart(1), RunEnd("final", 1, Usage())):
        plugin.lich_event(Envelope("nobody", "s", 1, 1.0, event))
    assert spans.all == ()


def test_a_late_run_start_opens_no_span(spans: Spans) -> None:
    """The first lich_run_start imports the SDK and may overrun hook_timeout_s,
    finishing after its run ended: it must not leave a span that never ends."""
    from lich.events import RunEnd, RunStart
    from lich.hooks import RunInfo

    plugin = spans.plugin()
    plugin.lich_event(Envelope("r1", "s1", 1, 1.0, RunStart("hi", "/w", "m")))
    plugin.lich_event(Envelope("r1", "s1", 2, 2.0, RunEnd("aborted", 0, Usage())))
    plugin.lich_run_start(RunInfo("r1", "s1", "hi", "/w", None))
    # Nor a run whose run_start event the plugin never saw.
    plugin.lich_run_start(RunInfo("r2", "s2", "hi", "/w", None))
    assert plugin.tracing is not None
    assert plugin.tracing.runs == {}
    assert spans.all == ()


async def test_the_run_is_a_child_of_the_callers_current_span(
    lich_agent_factory: Callable[..., Agent], spans: Spans
) -> None:
    """An application that runs lich inside its own span (a request) finds the run
    in that trace."""
    agent = lich_agent_factory(["hi"], objects=[("otel", spans.plugin())])
    with spans.provider.get_tracer("app").start_as_current_span("handle request") as outer:
        await agent.run("hello")
    run = spans.one("invoke_agent lich")
    assert run.parent is not None
    assert run.parent.span_id == outer.get_span_context().span_id
    assert run.context.trace_id == outer.get_span_context().trace_id
