"""What the plugin hands the tracer: plain data, no OpenTelemetry import."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping

import attrs

__all__ = ["ExportPlan", "RunStartInfo"]


@attrs.frozen
class ExportPlan:
    """Where spans go, resolved from the settings and the ``OTEL_*`` variables.

    ``exporters`` are ``"otlp_http"`` and/or ``"console"``. ``endpoint`` is the full
    traces URL, or ``None`` to let the exporter read ``OTEL_EXPORTER_OTLP_*``;
    ``headers`` are sent besides those of ``OTEL_EXPORTER_OTLP_HEADERS``.
    """

    exporters: tuple[str, ...]
    endpoint: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    flush_timeout_s: float = 5.0


@attrs.frozen
class RunStartInfo:
    """What the tracer needs to open a run's span."""

    run_id: str
    session_id: str
    input: str
    model: str
    agent_name: str
    capture_content: bool
    provider_kinds: Mapping[str, str]
    first_provider: str
    temperature: float | None
    max_tokens: int | None
    started_ns: int | None = None
    caller: contextvars.Context | None = None
