"""The MCP SDK's own client spans, in a run with the ``otel`` and ``mcp`` plugins and
the SDK-built fixture server over stdio: each ``tools/call`` request span is a child
of lich's ``execute_tool`` span for that call, in the run's trace, and the W3C trace
context the server receives in ``_meta`` names that request span.

The MCP sessions run on the ``mcp`` plugin's own event loop, in another thread: what
these tests prove is that the caller's span context crosses that hand-over (and that
the session's own traffic, which belongs to no tool call, does not pick it up).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

pytest.importorskip("mcp", reason="the MCP SDK (lich-agent[mcp]) is not installed")

from lich.agent import Agent
from lich.events import Envelope, ToolCallEnd
from lich.testing import Reply, ScriptedChat, make_test_config
from lich.types import ToolCall
from tests.mcp_client.conftest import stdio_server

from .conftest import Spans

TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
TOOL = "mcp__fx__trace_context"
SEND = "MCP send tools/call trace_context"  # the SDK's name for its request span


@pytest.fixture
def sdk_spans(spans: Spans, monkeypatch: pytest.MonkeyPatch) -> Spans:
    """``spans``, receiving the MCP SDK's spans too.

    The SDK starts its spans on a tracer from the *global* provider, which the
    ``otel`` plugin installs when it builds one itself (tests/otel/test_export.py
    proves that, in a fresh process); a test's provider is never made global (it
    could not be undone), so the SDK's tracer is pointed at it for this test only.
    """
    import mcp.shared._otel as sdk_otel

    monkeypatch.setattr(sdk_otel, "_tracer", spans.provider.get_tracer("mcp-python-sdk"))
    return spans


def _sdk_sends(spans: Spans) -> list[ReadableSpan]:
    return [s for s in spans.all if s.name.startswith("MCP send ")]


async def test_mcp_request_spans_nest_under_execute_tool(tmp_path: Path, sdk_spans: Spans) -> None:
    # Two calls in one turn: each request span must find its own execute_tool span,
    # not the other's, though both cross to the same background loop.
    chat = ScriptedChat([
        Reply(tool_calls=[ToolCall("c1", TOOL, {}), ToolCall("c2", TOOL, {})]),
        Reply("both traced"),
    ])
    config = make_test_config(tmp_path, plugins=("mcp",), mcp={"servers": {"fx": stdio_server()}})
    agent = Agent(config, plugins=[("otel", sdk_spans.plugin())], chat=chat)
    events: list[Envelope] = []
    try:
        result = await agent.run("in which trace do you run?", on_event=events.append)
    finally:
        await agent.aclose()
    assert result.stopped_reason == "final"

    run = sdk_spans.one("invoke_agent lich")
    trace_id = run.context.trace_id
    sends = {s.context.span_id: s for s in _sdk_sends(sdk_spans) if s.name == SEND}
    assert len(sends) == 2
    outputs = {e.event.call.id: e.event.result for e in events if isinstance(e.event, ToolCallEnd)}
    for call_id in ("c1", "c2"):
        tool_span = sdk_spans.tool_span(call_id)
        assert tool_span.name == f"execute_tool {TOOL}"
        assert tool_span.parent is not None
        assert tool_span.parent.span_id == run.context.span_id
        # The server side: the traceparent it got names a request span of the run's trace.
        answer = outputs[call_id]
        assert answer.ok, answer.error
        match = TRACEPARENT.fullmatch(json.loads(answer.output)["traceparent"])
        assert match is not None
        assert int(match.group(1), 16) == trace_id
        send = sends[int(match.group(2), 16)]
        # The client side: that request span is a child of this call's execute_tool span.
        assert send.kind == SpanKind.CLIENT
        assert send.context.trace_id == trace_id
        assert send.parent is not None
        assert send.parent.span_id == tool_span.context.span_id
    # The handshake and the tool listing happened while the agent was assembled, in no
    # run: none of the session's own requests is in the run's trace.
    in_run = [s.name for s in _sdk_sends(sdk_spans) if s.context.trace_id == trace_id]
    assert in_run == [SEND, SEND]


async def test_session_traffic_started_by_a_call_stays_out_of_its_span(
    tmp_path: Path, sdk_spans: Spans
) -> None:
    """A server that died is restarted inside the next call to it; the new session
    must not keep that call's span as its context for the rest of its life (it would
    parent later, unrelated requests to a span long ended)."""
    chat = ScriptedChat([
        Reply(tool_calls=[ToolCall("c1", "mcp__fx__crash", {})]),
        Reply(tool_calls=[ToolCall("c2", TOOL, {})]),
        Reply(tool_calls=[ToolCall("c3", "mcp__fx__grow", {"name": "sprout"})]),
        Reply("done"),
    ])
    config = make_test_config(tmp_path, plugins=("mcp",), mcp={"servers": {"fx": stdio_server()}})
    agent = Agent(config, plugins=[("otel", sdk_spans.plugin())], chat=chat)
    events: list[Envelope] = []
    try:
        result = await agent.run("crash, then trace", on_event=events.append)
    finally:
        await agent.aclose()
    assert result.stopped_reason == "final"
    outputs = {e.event.call.id: e.event.result for e in events if isinstance(e.event, ToolCallEnd)}
    assert not outputs["c1"].ok
    assert outputs["c2"].ok, outputs["c2"].error
    assert outputs["c3"].ok, outputs["c3"].error

    run = sdk_spans.one("invoke_agent lich")
    restarted_in = sdk_spans.tool_span("c2")
    by_id = {s.context.span_id: s for s in sdk_spans.all}

    def parent_name(span: ReadableSpan) -> str | None:
        return by_id[span.parent.span_id].name if span.parent is not None else None

    # c2's own request nests under c2 ...
    (send,) = [s for s in _sdk_sends(sdk_spans) if s.name == SEND]
    assert send.parent is not None
    assert send.parent.span_id == restarted_in.context.span_id
    # ... but the session restarted inside c2 is not c2's: its handshake, its
    # tool-change subscription (open until the agent closed) and the tool listing
    # that c3's change announced are in no run's trace. In the run's trace are the
    # three calls' requests, each under its own execute_tool span.
    in_run = sorted((s.name, parent_name(s)) for s in _sdk_sends(sdk_spans)
                    if s.context.trace_id == run.context.trace_id)
    assert in_run == [
        ("MCP send tools/call crash", "execute_tool mcp__fx__crash"),
        ("MCP send tools/call grow", "execute_tool mcp__fx__grow"),
        (SEND, f"execute_tool {TOOL}"),
    ]
    restart = [s.name for s in _sdk_sends(sdk_spans) if s.context.trace_id != run.context.trace_id]
    # Started twice (at assembly, then in c2), and c3's change listed the tools again.
    assert restart.count("MCP send tools/list") >= 3
    assert restart.count("MCP send subscriptions/listen") == 2
