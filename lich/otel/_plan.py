"""What the plugin hands the tracer: plain data, no OpenTelemetry import."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping

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
    #: Each provider's (by its config name) ``gen_ai.provider.name``: what its kind
    #: declared itself (:meth:`lich.providers.ProviderRegistry.identity`).
    provider_kinds: Mapping[str, str]
    first_provider: str
    temperature: float | None
    max_tokens: int | None
    started_ns: int | None = None
    caller: contextvars.Context | None = None
    #: Each provider's ``(server.address, server.port)``, from its resolved base URL.
    provider_servers: Mapping[str, tuple[str, int]] = attrs.field(factory=dict)
    #: The description of a tool by its name (``gen_ai.tool.description``), if any.
    tool_description: Callable[[str], str | None] = lambda _name: None
