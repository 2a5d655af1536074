"""Turning lich's events into spans, with the OpenTelemetry API and SDK.

Imported by :mod:`lich.otel.plugin` when the first run starts, never before:
this module imports OpenTelemetry at the top.

Spans are started and ended inline, as the events arrive (``lich_event`` is
synchronous); the SDK's :class:`~opentelemetry.sdk.trace.export.BatchSpanProcessor`
encodes and sends them from its own thread. State is kept per ``run_id``, so the
concurrent runs of a gateway never share a span.

The ``chat``, ``execute_tool`` and compression spans are made the *current* span
(``opentelemetry.context.attach``) while the model call or the tool runs: the
loop emits ``tool_call_start`` and ``tool_call_end`` from the run's own task, and
the tool runs in a task or thread that copies that task's context. So a span a
tool starts through the OpenTelemetry API (an MCP client, an instrumented HTTP
client) is a child of lich's ``execute_tool`` span.
"""

from __future__ import annotations

import atexit
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from lich.otel import _semconv as sc
from lich.otel._plan import ExportPlan, RunStartInfo
from lich.types import Usage

__all__ = ["ExportTrouble", "Tracing", "build_provider", "watch_export"]

log = logging.getLogger("lich.otel")

_IDENTIFIER = re.compile(r"[A-Za-z_][\w.-]{0,63}")
#: The OTLP/HTTP exporter's loggers (a logger's filter sees only its own records, not
#: its children's): one line per failed attempt, a traceback's worth.
_EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                     "opentelemetry.exporter.otlp.proto.http._common")
_ERRNO_REASON = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


class ExportTrouble(logging.Filter):
    """The exporter's own log lines, turned into one warning of lich's: the first
    failure to export (a collector that is down or unreachable) is said once, with
    its reason and where the spans were going, and the exporter's lines — one per
    retry, each a wall of urllib3 text — are dropped. :attr:`reason` tells
    :meth:`Tracing.shutdown` not to wait for an export that cannot succeed."""

    def __init__(self, endpoint: str) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.reason: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        if self.reason is None:
            text = record.getMessage()
            found = _ERRNO_REASON.search(text)
            self.reason = (found.group(1).strip().lower() if found
                           else text.splitlines()[0][:200] if text else "export failed")
            log.warning("otel: spans cannot be exported to %s (%s); they are dropped",
                        self.endpoint, self.reason)
        return False


def _watch_exporter(endpoint: str) -> ExportTrouble:
    trouble = ExportTrouble(endpoint)
    for name in _EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, ExportTrouble)]:
            logger.removeFilter(old)  # a later provider of the same process watches now
        logger.addFilter(trouble)
    return trouble


def _endpoint(plan: ExportPlan) -> str:
    import os

    return (plan.endpoint or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
                .rstrip("/") + "/v1/traces"))


def _exporters(plan: ExportPlan) -> list[SpanExporter]:
    out: list[SpanExporter] = []
    for name in plan.exporters:
        if name == "console":
            # Standard error: standard output is lich's own (the answer, --json events).
            out.append(ConsoleSpanExporter(out=sys.stderr))
        elif name == "otlp_http":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            out.append(OTLPSpanExporter(endpoint=plan.endpoint, headers=dict(plan.headers) or None))
    return out


def build_provider(plan: ExportPlan) -> TracerProvider:
    """A tracer provider exporting through a batch processor per exporter of ``plan``.

    ``service.name`` is ``lich`` unless ``OTEL_SERVICE_NAME`` or
    ``OTEL_RESOURCE_ATTRIBUTES`` names one. The SDK's own exit handler is off: the
    caller flushes at exit within ``plan.flush_timeout_s`` (:meth:`Tracing.shutdown`).
    """
    resource = Resource.create()
    service = resource.attributes.get("service.name")
    if not isinstance(service, str) or service.startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "lich"}))
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for exporter in _exporters(plan):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def watch_export(plan: ExportPlan) -> ExportTrouble | None:
    """Turn the OTLP exporter's failure lines into one of lich's (:class:`ExportTrouble`,
    to hand to :class:`Tracing`); ``None`` without that exporter."""
    return _watch_exporter(_endpoint(plan)) if "otlp_http" in plan.exporters else None


def _error_code(error: str | None, default: str) -> str:
    """The code at the head of a lich error string (``blocked_by_plugin: …`` →
    ``blocked_by_plugin``, ``ValueError: …`` → ``ValueError``)."""
    head = (error or "").split(":", 1)[0].strip()
    return head if _IDENTIFIER.fullmatch(head) else default


def _usage_attributes(usage: Any) -> dict[str, int]:
    if type(usage) is Usage:  # lich's own, what every provider returns: read directly
        out = {sc.USAGE_INPUT_TOKENS: int(usage.prompt_tokens),
               sc.USAGE_OUTPUT_TOKENS: int(usage.completion_tokens)}
        # As below: a breakdown count only "when non-zero" (and an int).
        if type(read := usage.cache_read_tokens) is int and read > 0:
            out[sc.USAGE_CACHE_READ_INPUT_TOKENS] = read
        if type(written := usage.cache_write_tokens) is int and written > 0:
            out[sc.USAGE_CACHE_CREATION_INPUT_TOKENS] = written
        if type(reasoning := usage.reasoning_tokens) is int and reasoning > 0:
            out[sc.USAGE_REASONING_OUTPUT_TOKENS] = reasoning
        return out
    out = {sc.USAGE_INPUT_TOKENS: int(usage.prompt_tokens),
           sc.USAGE_OUTPUT_TOKENS: int(usage.completion_tokens)}
    # Read by name: the breakdown is newer than some Usage objects a plugin may hand
    # over; a count that is absent or 0 is left out (the conventions: "when non-zero").
    for name, key in (("cache_read_tokens", sc.USAGE_CACHE_READ_INPUT_TOKENS),
                      ("cache_write_tokens", sc.USAGE_CACHE_CREATION_INPUT_TOKENS),
                      ("reasoning_tokens", sc.USAGE_REASONING_OUTPUT_TOKENS)):
        value = getattr(usage, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out[key] = value
    return out


def _cost(event: Any) -> float | None:
    value = getattr(event, "cost_usd", None)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "content": text}


def _assistant_message(message: Any, finish_reason: str | None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if message.content:
        parts.append(_text_part(message.content))
    for call in message.tool_calls:
        parts.append({"type": "tool_call", "id": call.id, "name": call.name,
                      "arguments": dict(call.args)})
    out: dict[str, Any] = {"role": "assistant", "parts": parts}
    if finish_reason:
        out["finish_reason"] = finish_reason
    return out


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


class _Run:
    """The open spans of one run."""

    __slots__ = ("asked", "attached", "capture", "chat", "chat_attributes", "chat_name",
                 "compress", "ctx", "error_kind", "info", "span", "tool_names", "tools")

    def __init__(self, info: RunStartInfo, span: Span, ctx: otel_context.Context) -> None:
        self.info = info
        self.capture = info.capture_content
        self.span = span
        self.ctx = ctx
        self.chat: Span | None = None
        self.compress: Span | None = None
        self.tools: dict[str, Span] = {}
        self.asked: dict[str, str] = {}  # call id -> the arguments the model asked for (JSON)
        # (span, token) pairs made current, innermost last: detached in that order.
        self.attached: list[tuple[Span, object]] = []
        self.error_kind: str | None = None
        # What every chat span of the run carries besides its turn, and its name: the
        # same for each model call, so built once per run rather than per span.
        rest: dict[str, Any] = {sc.CONVERSATION_ID: info.session_id}
        if info.first_provider:
            rest[sc.PROVIDER_NAME] = self.kind_of(info.first_provider)
            rest.update(self.server_of(info.first_provider))
        if info.model:
            rest[sc.REQUEST_MODEL] = info.model
        if info.temperature is not None:
            rest[sc.REQUEST_TEMPERATURE] = info.temperature
        if info.max_tokens is not None:
            rest[sc.REQUEST_MAX_TOKENS] = info.max_tokens
        self.chat_attributes = rest
        self.chat_name = f"{sc.OP_CHAT} {info.model}" if info.model else sc.OP_CHAT
        self.tool_names: dict[str, str] = {}  # tool name -> its span's name

    def kind_of(self, provider: str) -> str:
        return self.info.provider_kinds.get(provider) or provider

    def server_of(self, provider: str) -> dict[str, Any]:
        """``server.address`` and ``server.port`` of ``provider`` (none when unknown)."""
        server = self.info.provider_servers.get(provider)
        return {} if server is None else {sc.SERVER_ADDRESS: server[0],
                                          sc.SERVER_PORT: server[1]}


class Tracing:
    """The spans of every open run, fed by :meth:`on_event`.

    :param provider: where the spans go (the plugin's own, or one a test or an
        embedding application passes in).
    :param flush_timeout_s: how long :meth:`shutdown` waits for the export at exit.
    :param trouble: the exporter's failures (:func:`watch_export`): once one is known,
        :meth:`shutdown` does not wait.
    """

    def __init__(self, provider: trace.TracerProvider, *, flush_timeout_s: float = 5.0,
                 trouble: ExportTrouble | None = None) -> None:
        from lich import __version__

        self.provider = provider
        self.trouble = trouble
        self.tracer = provider.get_tracer("lich", __version__, schema_url=sc.SCHEMA_URL)
        self.flush_timeout_s = flush_timeout_s
        self.runs: dict[str, _Run] = {}
        self._flushing = threading.Lock()
        self._handlers: dict[str, Callable[[_Run, Any], None]] = {
            "llm_start": self._llm_start,
            "llm_end": self._llm_end,
            "error": self._error,
            "retry": self._retry,
            "failover": self._failover,
            "stream_reset": self._stream_reset,
            "tool_call_start": self._tool_start,
            "tool_call_end": self._tool_end,
            "approval_requested": self._approval,
            "approval_resolved": self._approval,
            "compress_start": self._compress_start,
            "compress_end": self._compress_end,
            "final": self._final,
            "run_end": self._run_end,
        }

    # ------------------------------------------------------------------ runs

    def start_run(self, info: RunStartInfo) -> None:
        """Open the run's ``invoke_agent`` span, a child of whatever span was current
        where the run was started (an embedding application's request, say)."""
        parent = info.caller.run(otel_context.get_current) if info.caller is not None else None
        attributes: dict[str, Any] = {
            sc.OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.AGENT_NAME: info.agent_name,
            sc.CONVERSATION_ID: info.session_id,
            sc.LICH_RUN_ID: info.run_id,
        }
        if info.first_provider:
            attributes[sc.PROVIDER_NAME] = info.provider_kinds.get(
                info.first_provider, info.first_provider)
        if info.model:
            attributes[sc.REQUEST_MODEL] = info.model
        if info.capture_content:
            attributes[sc.INPUT_MESSAGES] = _json(
                [{"role": "user", "parts": [_text_part(info.input)]}])
        span = self.tracer.start_span(
            f"{sc.OP_INVOKE_AGENT} {info.agent_name}", context=parent, kind=SpanKind.INTERNAL,
            attributes=attributes, start_time=info.started_ns,
        )
        self.runs[info.run_id] = _Run(info, span, trace.set_span_in_context(span, parent))

    def on_event(self, envelope: Any) -> None:
        """Handle one event envelope; events of runs without a span are ignored."""
        handler = self._handlers.get(envelope.event.type)
        if handler is None:
            return
        run = self.runs.get(envelope.run_id)
        if run is not None:
            handler(run, envelope)

    # ----------------------------------------------------------------- helpers

    def _enter(self, run: _Run, span: Span) -> None:
        token = otel_context.attach(trace.set_span_in_context(span, run.ctx))
        run.attached.append((span, token))

    def _leave(self, run: _Run, span: Span) -> None:
        attached = run.attached
        if attached and attached[-1][0] is span:  # the usual case: the innermost span
            otel_context.detach(attached.pop()[1])  # type: ignore[arg-type]
            return
        if not any(s is span for s, _ in attached):
            return
        while run.attached:
            held, token = run.attached.pop()
            otel_context.detach(token)  # type: ignore[arg-type]
            if held is span:
                return

    def _child(self, run: _Run, name: str, kind: SpanKind,
               attributes: Mapping[str, Any]) -> Span:
        return self.tracer.start_span(name, context=run.ctx, kind=kind, attributes=attributes)

    @staticmethod
    def _fail(span: Span, error_type: str) -> None:
        span.set_attributes({sc.ERROR_TYPE: error_type})
        span.set_status(Status(StatusCode.ERROR, error_type))

    # ------------------------------------------------------------ model calls

    def _llm_start(self, run: _Run, envelope: Any) -> None:
        # The attributes go in at start_span, so the SDK checks them once and takes no
        # lock for them; the ones that do not change within a run were built with it.
        span = self.tracer.start_span(run.chat_name, context=run.ctx, kind=SpanKind.CLIENT,
                                      attributes={sc.OPERATION_NAME: sc.OP_CHAT,
                                                  sc.LICH_TURN: envelope.event.turn,
                                                  **run.chat_attributes})
        run.chat = span
        # _enter(), inline: this is per model call.
        run.attached.append((span, otel_context.attach(trace.set_span_in_context(span, run.ctx))))

    def _llm_end(self, run: _Run, envelope: Any) -> None:
        span, run.chat = run.chat, None
        if span is None:
            return
        result = envelope.event.result
        # One set_attributes call: the SDK checks and locks per call, and this is per turn.
        attributes: dict[str, Any] = {sc.RESPONSE_FINISH_REASONS: (result.finish_reason,),
                                      **_usage_attributes(result.usage)}
        provider = result.provider_name
        if provider:
            # The provider that answered (after a failover, not the first one).
            attributes[sc.PROVIDER_NAME] = run.kind_of(provider)
            attributes[sc.LICH_PROVIDER] = provider
            attributes.update(run.server_of(provider))
        if result.response_id:
            attributes[sc.RESPONSE_ID] = result.response_id
        if result.model:
            attributes[sc.RESPONSE_MODEL] = result.model
        cost = _cost(envelope.event)
        if cost is not None:
            attributes[sc.LICH_COST_USD] = cost
        if run.capture:
            attributes[sc.OUTPUT_MESSAGES] = _json(
                [_assistant_message(result.message, result.finish_reason)])
        span.set_attributes(attributes)
        span.end()
        self._leave(run, span)

    def _error(self, run: _Run, envelope: Any) -> None:
        event = envelope.event
        run.error_kind = event.kind
        span, run.chat = run.chat, None
        if span is None:
            return
        self._fail(span, event.kind)
        if run.capture and event.message:
            span.set_attribute(sc.LICH_ERROR_MESSAGE, event.message)
        span.end()
        self._leave(run, span)

    def _target(self, run: _Run) -> Span:
        return run.chat if run.chat is not None else run.span

    def _retry(self, run: _Run, envelope: Any) -> None:
        event = envelope.event
        attributes: dict[str, Any] = {sc.LICH_PROVIDER: event.provider,
                                      sc.LICH_ATTEMPT: event.attempt,
                                      sc.ERROR_TYPE: event.kind, sc.LICH_DELAY_S: event.delay_s}
        if run.capture and event.message:
            attributes[sc.LICH_ERROR_MESSAGE] = event.message
        self._target(run).add_event(sc.EVENT_RETRY, attributes)

    def _failover(self, run: _Run, envelope: Any) -> None:
        event = envelope.event
        attributes: dict[str, Any] = {sc.LICH_FROM_PROVIDER: event.from_provider,
                                      sc.LICH_TO_PROVIDER: event.to_provider,
                                      sc.ERROR_TYPE: event.kind}
        if run.capture and event.message:
            attributes[sc.LICH_ERROR_MESSAGE] = event.message
        self._target(run).add_event(sc.EVENT_FAILOVER, attributes)

    def _stream_reset(self, run: _Run, envelope: Any) -> None:
        event = envelope.event
        attributes: dict[str, Any] = {sc.LICH_PROVIDER: event.provider}
        if run.capture and event.reason:
            attributes[sc.LICH_ERROR_MESSAGE] = event.reason
        self._target(run).add_event(sc.EVENT_STREAM_RESET, attributes)

    # ------------------------------------------------------------------ tools

    def _tool_start(self, run: _Run, envelope: Any) -> None:
        call = envelope.event.call
        attributes: dict[str, Any] = {
            sc.OPERATION_NAME: sc.OP_EXECUTE_TOOL,
            sc.TOOL_NAME: call.name,
            sc.TOOL_CALL_ID: call.id,
            sc.TOOL_TYPE: sc.TOOL_TYPE_FUNCTION,
            sc.LICH_TURN: envelope.event.turn,
        }
        description = run.info.tool_description(call.name)
        if description:
            attributes[sc.TOOL_DESCRIPTION] = description
        if run.capture:
            attributes[sc.TOOL_CALL_ARGUMENTS] = run.asked[call.id] = _json(dict(call.args))
        name = run.tool_names.get(call.name)
        if name is None:
            name = run.tool_names[call.name] = f"{sc.OP_EXECUTE_TOOL} {call.name}"
        span = self.tracer.start_span(name, context=run.ctx, kind=SpanKind.INTERNAL,
                                      attributes=attributes)
        # A model may repeat a call id; the later call's span replaces the earlier one's
        # entry (the earlier one has ended by then: tools run one at a time).
        run.tools[call.id] = span
        run.attached.append((span, otel_context.attach(trace.set_span_in_context(span, run.ctx))))

    def _tool_end(self, run: _Run, envelope: Any) -> None:
        event = envelope.event
        span = run.tools.pop(event.call.id, None)
        if span is None:
            return
        result = event.result
        attributes: dict[str, Any] = {}
        if event.blocked_by:
            attributes[sc.LICH_BLOCKED_BY] = event.blocked_by
        if event.rewritten_by:
            attributes[sc.LICH_REWRITTEN_BY] = tuple(event.rewritten_by)
        if event.replaced_by:
            attributes[sc.LICH_REPLACED_BY] = event.replaced_by
        if run.capture:
            asked = run.asked.pop(event.call.id, None)
            if event.rewritten_by:
                # The start recorded what the model asked for; the end, what ran.
                if asked is not None:
                    attributes[sc.LICH_ORIGINAL_ARGUMENTS] = asked
                attributes[sc.TOOL_CALL_ARGUMENTS] = _json(dict(event.call.args))
            attributes[sc.TOOL_CALL_RESULT] = (result.output if result.ok
                                               else (result.error or ""))
        if attributes:
            span.set_attributes(attributes)
        if not result.ok:
            self._fail(span, _error_code(result.error, "tool_error"))
        span.end()
        self._leave(run, span)

    def _approval(self, run: _Run, envelope: Any) -> None:
        """``approval_requested`` / ``approval_resolved``, read by field name: a span
        event on the tool call's span (the run's span when none is open)."""
        event = envelope.event
        attributes: dict[str, Any] = {}
        fields = attrs.fields(type(event)) if attrs.has(type(event)) else ()
        for f in fields:
            if f.name == "type":
                continue
            value = getattr(event, f.name, None)
            key = sc.LICH_APPROVAL_PREFIX + f.name
            if isinstance(value, bool | int | float):
                attributes[key] = value
            elif isinstance(value, str) and (run.capture or _IDENTIFIER.fullmatch(value)):
                # A short identifier (a decision, an approver's name) is no content; a
                # free-text reason may quote the arguments, so it waits for capture_content.
                attributes[key] = value
        call = getattr(event, "call", None)
        call_id = getattr(call, "id", None) or getattr(event, "call_id", None)
        span = run.tools.get(call_id) if isinstance(call_id, str) else None
        if span is None and run.tools:
            span = next(reversed(run.tools.values()))
        name = (sc.EVENT_APPROVAL_REQUESTED if event.type == "approval_requested"
                else sc.EVENT_APPROVAL_RESOLVED)
        (span or run.span).add_event(name, attributes)

    # ------------------------------------------------------------- compression

    def _compress_start(self, run: _Run, envelope: Any) -> None:
        run.compress = self._child(run, sc.SPAN_COMPRESS, SpanKind.INTERNAL, {
            sc.LICH_COMPRESS_TOKENS_BEFORE: envelope.event.estimated_tokens})
        self._enter(run, run.compress)

    def _compress_end(self, run: _Run, envelope: Any) -> None:
        span, run.compress = run.compress, None
        if span is None:
            return
        event = envelope.event
        span.set_attributes({
            sc.LICH_COMPRESS_TOKENS_AFTER: event.estimated_tokens,
            sc.LICH_COMPRESS_SUMMARY_CHARS: event.summary_chars,
            sc.LICH_COMPRESS_OK: event.ok,
            **_usage_attributes(event.usage),
        })
        if not event.ok:
            self._fail(span, "compress_failed")
        span.end()
        self._leave(run, span)

    # -------------------------------------------------------------- run end

    def _final(self, run: _Run, envelope: Any) -> None:
        if run.capture:
            event = envelope.event
            run.span.set_attribute(sc.OUTPUT_MESSAGES, _json(
                [_assistant_message(event.message, event.result.finish_reason)]))

    def _run_end(self, run: _Run, envelope: Any) -> None:
        event = envelope.event
        self.runs.pop(envelope.run_id, None)
        # Whatever is still open was cut short (a cancel, a failure): end it as such.
        interrupted = "cancelled" if event.stopped_reason == "aborted" else "interrupted"
        for span in [*run.tools.values(), run.chat, run.compress]:
            if span is not None:
                self._fail(span, interrupted)
                span.end()
        run.tools.clear()
        run.chat = run.compress = None
        while run.attached:
            _, token = run.attached.pop()
            otel_context.detach(token)  # type: ignore[arg-type]
        span = run.span
        attributes: dict[str, Any] = {sc.LICH_STOPPED_REASON: event.stopped_reason,
                                      sc.LICH_TURNS_USED: event.turns_used,
                                      **_usage_attributes(event.usage)}
        cost = _cost(event)
        if cost is not None:
            attributes[sc.LICH_COST_USD] = cost
        if event.stopped_reason == "error" and run.capture and event.error:
            attributes[sc.LICH_ERROR_MESSAGE] = event.error
        span.set_attributes(attributes)
        if event.stopped_reason == "error":
            self._fail(span, run.error_kind or _error_code(event.error, "error"))
        span.end()
        if not self.runs:
            self.flush_soon()

    # ------------------------------------------------------------ exporting

    def flush_soon(self) -> None:
        """Ask the batch processor to export what it holds, without waiting for it.

        Called when the last open run ends, so a finished run shows up in the
        backend at once rather than after the processor's schedule delay; at most
        one flush runs at a time (a run ending meanwhile is in the next batch).
        """
        force_flush = getattr(self.provider, "force_flush", None)
        if force_flush is None or not self._flushing.acquire(blocking=False):
            return

        def flush() -> None:
            try:
                force_flush()
            except Exception:
                log.debug("flushing spans failed", exc_info=True)
            finally:
                self._flushing.release()

        threading.Thread(target=flush, name="lich-otel-flush", daemon=True).start()

    def shutdown(self) -> None:
        """Export what is left and stop the processors, waiting at most
        ``flush_timeout_s`` (an unreachable collector must not hold the exit)."""
        shutdown = getattr(self.provider, "shutdown", None)
        if shutdown is None:
            return
        trouble = self.trouble
        worker = threading.Thread(target=shutdown, name="lich-otel-shutdown", daemon=True)
        worker.start()
        deadline = time.monotonic() + self.flush_timeout_s
        # In slices: once an export has failed (the collector is down), the exporter
        # only retries until its own timeout, and the exit must not wait for that.
        while worker.is_alive() and time.monotonic() < deadline:
            if trouble is not None and trouble.reason is not None:
                return  # said once already, when it failed
            worker.join(min(0.05, max(0.0, deadline - time.monotonic())))
        if worker.is_alive() and (trouble is None or trouble.reason is None):
            log.warning("otel: spans not exported within %gs at exit; the rest are dropped",
                        self.flush_timeout_s)

    def shutdown_at_exit(self) -> None:
        """Register :meth:`shutdown` to run when the interpreter exits."""
        atexit.register(self.shutdown)
