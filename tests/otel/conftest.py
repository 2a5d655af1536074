"""What the otel tests share: an in-memory span pipeline and the plugins a run uses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lich import Block, Rewrite, hookimpl, tool
from lich.otel.plugin import OtelPlugin
from lich.tools import ToolRegistry
from lich.types import ToolCall


class Spans:
    """The spans a test's provider finished, with lookups by name and id."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def plugin(self, **kwargs: Any) -> OtelPlugin:
        """The plugin, sending to this provider (the environment: none of the host's)."""
        return OtelPlugin(self.provider, environ=kwargs.pop("environ", {}), **kwargs)

    @property
    def all(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.all if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.named(name)
        return span

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        pid = parent.context.span_id
        return [s for s in self.all if s.parent is not None and s.parent.span_id == pid]

    def tool_span(self, call_id: str) -> ReadableSpan:
        (span,) = [s for s in self.all
                   if s.attributes and s.attributes.get("gen_ai.tool.call.id") == call_id]
        return span


@pytest.fixture
def spans() -> Iterator[Spans]:
    out = Spans()
    yield out
    out.provider.shutdown()


@tool
def echo(text: str) -> str:
    """Say the text back.

    :param text: what to say.
    """
    return f"echo: {text}"


class ToolsPlugin:
    """``echo`` and ``traced``; ``traced`` starts a span of its own through the
    OpenTelemetry API, as an MCP client does, and reports the span current in it."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self.provider = provider
        self.seen: dict[str, int] = {}  # call label -> span id current inside the tool

    @hookimpl
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(echo)
        plugin = self

        @tool
        def traced(label: str) -> str:
            """Start a child span (a worker thread: a plain function).

            :param label: names the call.
            """
            return plugin._child(label)

        @tool
        async def traced_async(label: str) -> str:
            """Start a child span (on the event loop: an async function).

            :param label: names the call.
            """
            return plugin._child(label)

        registry.register(traced)
        registry.register(traced_async)

    def _child(self, label: str) -> str:
        self.seen[label] = trace.get_current_span().get_span_context().span_id
        tracer = (self.provider or trace.get_tracer_provider()).get_tracer("mcp-like")
        with tracer.start_as_current_span(f"child {label}"):
            return f"traced {label}"


class GuardPlugin:
    """Blocks ``echo`` of ``secret``; upper-cases ``echo`` of ``shout`` (a rewrite)."""

    @hookimpl
    def lich_before_tool_call(self, call: ToolCall) -> Block | Rewrite | None:
        if call.name != "echo":
            return None
        if call.args.get("text") == "secret":
            return Block("no secrets")
        if call.args.get("text") == "shout":
            return Rewrite({"text": "SHOUT"})
        return None
