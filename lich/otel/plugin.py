"""The builtin ``otel`` plugin (entry point ``otel`` in the group ``lich``): every run
as OpenTelemetry GenAI spans.

A run is an ``invoke_agent`` span; each model call a ``chat {model}`` client span,
each tool call an ``execute_tool {name}`` span, a context compression a
``lich.compress`` span; retries, failovers and approvals are span events. The
names follow one pinned revision of the GenAI semantic conventions
(:mod:`lich.otel._semconv`); ``docs/telemetry.md`` lists every span and attribute.

It implements only ``lich_check_config``, ``lich_register_providers`` (to read what
each provider kind declares itself: ``gen_ai.provider.name``), ``lich_run_start``
and ``lich_event``.
Spans are started and ended inline as the events arrive; the SDK's batch
processor exports them from its own thread. Message and tool contents are
recorded only with ``capture_content = true``.

Settings (``[otel]``), each overridden by the standard variable
named, as ``LICH_*`` variables override the config file:

* ``exporter``: ``"otlp_http"`` (the default), ``"console"`` or ``"none"``
  (``OTEL_TRACES_EXPORTER``: ``otlp``, ``console``, ``none``, comma-separated);
* ``endpoint``: the OTLP/HTTP URL, ``/v1/traces`` appended unless given
  (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_ENDPOINT``;
  default ``http://localhost:4318``);
* ``headers``: sent with every export (``OTEL_EXPORTER_OTLP_HEADERS`` wins per
  header); ``headers_env``: header → the environment variable holding its value,
  for credentials, which never live in the config;
* ``capture_content``: record messages and tool arguments and results
  (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``); off by default;
* ``agent_name``: ``gen_ai.agent.name`` (``"lich"``);
* ``flush_timeout_s``: how long the exit waits for the last export (5).

``OTEL_SDK_DISABLED=true`` turns the plugin off. Importing this module imports
no OpenTelemetry module (it only checks that the packages are installed: a
missing extra fails the plugin's load, as data, naming the ``pip install``);
the SDK is imported, in a worker thread, when the first run starts.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from attrs import frozen

from lich.hooks import hookimpl, needed_when
from lich.otel._plan import ExportPlan, RunStartInfo
from lich.settings import ConfigError, between, non_empty, one_of, setting, structure_settings, url

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from lich.config import LichConfig, ProviderConfig
    from lich.events import Envelope
    from lich.hooks import RunInfo
    from lich.otel._tracing import Tracing
    from lich.providers import ProviderRegistry
    from lich.settings import ConfigTables

__all__ = [
    "EXPORTERS",
    "INSTALL_HINT",
    "SETTINGS_PATH",
    "OtelPlugin",
    "OtelSettings",
    "export_plan",
    "lich_check_config",
    "lich_event",
    "lich_register_config_tables",
    "lich_register_providers",
    "lich_run_start",
    "load_settings",
]

log = logging.getLogger("lich.otel")

INSTALL_HINT = "pip install 'lich-agent[otel]'"
SETTINGS_PATH = "$.otel"
EXPORTERS = ("otlp_http", "console", "none")

_REQUIRED = {"opentelemetry.trace": "opentelemetry-api",
             "opentelemetry.sdk.trace": "opentelemetry-sdk"}
_OTLP_MODULE = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
_TRACES_PATH = "/v1/traces"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a stub in sys.modules
        return False


_missing = [dist for module, dist in _REQUIRED.items() if not _installed(module)]
if _missing:
    # Raised at import, so the plugin fails to load with this message on its report
    # (`lich plugins`), instead of failing later in the middle of a run.
    raise ImportError(f"the otel plugin needs {', '.join(_missing)}: {INSTALL_HINT}")


def _str_table(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a table of strings, got {type(value).__name__}")
    bad = [str(k) for k, v in value.items() if not isinstance(v, str) or not str(k).strip()]
    if bad:
        raise TypeError(f"every value must be a string and every name non-empty: {', '.join(bad)}")
    return {str(k): v for k, v in value.items()}


def _exporter(value: Any) -> None:
    if value is not None:  # unset: OTEL_TRACES_EXPORTER, else otlp_http
        one_of(*EXPORTERS)(value)


@frozen
class OtelSettings:
    """``[otel]``; see the module docstring."""

    exporter: str | None = setting(None, check=_exporter)
    endpoint: str | None = setting(None, check=url("http", "https"))
    headers: Mapping[str, str] = setting(factory=dict, parse=_str_table)
    headers_env: Mapping[str, str] = setting(factory=dict, parse=_str_table)
    capture_content: bool | None = None
    agent_name: str = setting("lich", check=non_empty)
    flush_timeout_s: float = setting(5.0, check=between(0.1, 300))


def load_settings(config: LichConfig) -> OtelSettings:
    """The checked ``[otel]`` table of ``config``.

    :raises lich.config.ConfigError: naming every bad ``$.otel.<key>``.
    """
    return structure_settings(config.table("otel"), OtelSettings, SETTINGS_PATH)


def _env(environ: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    """The first of ``names`` set to a non-empty value, with that value."""
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


def _env_header_names(environ: Mapping[str, str]) -> set[str]:
    found = _env(environ, "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
    if found is None:
        return set()
    return {unquote(item.split("=", 1)[0]).strip().lower()
            for item in found[1].split(",") if "=" in item}


def _traces_url(endpoint: str) -> str:
    path = urlsplit(endpoint).path
    return endpoint if path.rstrip("/").endswith(_TRACES_PATH) else (
        endpoint.rstrip("/") + _TRACES_PATH)


def export_plan(
    settings: OtelSettings, environ: Mapping[str, str] | None = None
) -> tuple[ExportPlan, list[str]]:
    """Where the spans go: ``settings`` with the ``OTEL_*`` variables of ``environ``
    over them, and the problems found (a variable names an exporter or protocol
    lich cannot use, the OTLP exporter is not installed).

    No exporter (``"none"``, ``OTEL_SDK_DISABLED=true``) is ``exporters == ()``.
    """
    environ = os.environ if environ is None else environ
    problems: list[str] = []
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ExportPlan((), flush_timeout_s=settings.flush_timeout_s), problems
    chosen: list[str] = []
    from_env = _env(environ, "OTEL_TRACES_EXPORTER")
    if from_env is not None:
        for raw in from_env[1].split(","):
            name = raw.strip().lower()
            mapped = {"otlp": "otlp_http", "console": "console", "none": "none"}.get(name)
            if mapped is None:
                problems.append(f"OTEL_TRACES_EXPORTER: {raw.strip()!r} is not an exporter "
                                "the otel plugin has; use otlp, console or none")
            elif mapped not in chosen:
                chosen.append(mapped)
    else:
        chosen.append(settings.exporter or "otlp_http")
    exporters = tuple(name for name in chosen if name != "none")
    if "otlp_http" in exporters:
        protocol = _env(environ, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                        "OTEL_EXPORTER_OTLP_PROTOCOL")
        if protocol is not None and protocol[1] != "http/protobuf":
            problems.append(f"{protocol[0]}: {protocol[1]!r} is not supported; the otel "
                            "plugin exports OTLP over HTTP (http/protobuf)")
        if not _installed(_OTLP_MODULE):
            where = "OTEL_TRACES_EXPORTER" if from_env else f"{SETTINGS_PATH}.exporter"
            problems.append(f"{where}: otlp_http needs opentelemetry-exporter-otlp-proto-http: "
                            f"{INSTALL_HINT}")
    endpoint = None
    if settings.endpoint and _env(environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                                  "OTEL_EXPORTER_OTLP_ENDPOINT") is None:
        endpoint = _traces_url(settings.endpoint)
    overridden = _env_header_names(environ)
    headers = {k: v for k, v in settings.headers.items() if k.lower() not in overridden}
    for header, variable in settings.headers_env.items():
        if header.lower() in overridden:
            continue
        value = environ.get(variable)
        if value:
            headers[header] = value
        else:
            log.warning("otel: %s is not set; spans are exported without the %s header",
                        variable, header)
    return ExportPlan(exporters, endpoint, headers, settings.flush_timeout_s), problems


def _capture(settings: OtelSettings, environ: Mapping[str, str]) -> bool:
    found = _env(environ, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    if found is not None:
        return found[1].lower() == "true"
    return bool(settings.capture_content)


class OtelPlugin:
    """The plugin's state: the tracer, built when the first run starts, and the
    runs whose ``run_start`` event arrived before their ``lich_run_start``.

    :param tracer_provider: send the spans to this provider (a test's, or an
        embedding application's) instead of building one from the settings; it is
        then neither installed as the global provider nor shut down at exit.
    :param environ: the environment read for the ``OTEL_*`` variables
        (``os.environ`` by default).
    :param install_global: make the provider built from the settings the global
        one when none is set yet, so that spans other libraries start (an MCP
        client's) are exported with lich's.

    The entry point registers one instance through this module's functions; a
    test or an embedding application registers its own instance as a plugin
    object (``Agent(config, plugins=[("otel", OtelPlugin(provider))])``).
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        install_global: bool = True,
    ) -> None:
        self._given = tracer_provider
        self._environ = environ
        self._install_global = install_global
        self._lock = threading.Lock()  # building the tracer
        self._runs_lock = threading.Lock()  # opening and ending runs
        self._tracing: Tracing | None = None
        self._off = False
        # run id -> (start in ns, model, the caller's context) from the run_start event,
        # which comes before lich_run_start.
        self._pending: dict[str, tuple[int, str, contextvars.Context]] = {}
        # The provider kinds of the agent being built (what a provider says it is).
        self._registry: ProviderRegistry | None = None

    @hookimpl
    def lich_register_providers(self, registry: ProviderRegistry) -> None:
        """Keep the registry: each kind's declared identity names its providers'
        spans (nothing is registered)."""
        self._registry = registry

    def _identity(self, provider: ProviderConfig) -> str:
        registry = self._registry
        found = registry.identity(provider) if registry is not None else ""
        return found or provider.kind or provider.name

    def _server(self, provider: ProviderConfig) -> tuple[str, int] | None:
        registry = self._registry
        base_url = provider.base_url
        if registry is not None:
            with contextlib.suppress(ConfigError):
                base_url = registry.resolve(provider).base_url
        return _server_of(base_url)

    @property
    def environ(self) -> Mapping[str, str]:
        """The environment the ``OTEL_*`` variables are read from."""
        return os.environ if self._environ is None else self._environ

    @property
    def tracing(self) -> Tracing | None:
        """The tracer once the first run started (``None`` before, or when off)."""
        return self._tracing

    @hookimpl
    def lich_register_config_tables(self, tables: ConfigTables) -> None:
        """Claim ``[otel]`` (an instance registered as a plugin object claims it too)."""
        tables.claim("otel", OtelSettings,
                     help="OpenTelemetry traces: the exporter and its endpoint")

    @hookimpl
    def lich_check_config(self, config: LichConfig) -> None:
        """Check ``[otel]`` and the ``OTEL_*`` variables lich reads."""
        settings = load_settings(config)
        if self._given is None:
            _, problems = export_plan(settings, self.environ)
            if problems:
                raise ConfigError(problems)

    def _tracing_for(self, settings: OtelSettings) -> Tracing | None:
        with self._lock:
            if self._tracing is not None or self._off:
                return self._tracing
            if self._given is not None:
                from lich.otel._tracing import Tracing

                self._tracing = Tracing(self._given, flush_timeout_s=settings.flush_timeout_s)
                return self._tracing
            # The first run's settings set up the export for the process (one config
            # per process is the rule; /model keeps the config's [otel]). Decided before
            # anything of OpenTelemetry is imported: switched off (exporter "none",
            # OTEL_SDK_DISABLED), the plugin never loads the SDK.
            plan, problems = export_plan(settings, self.environ)
            if problems:
                raise ConfigError(problems)
            if not plan.exporters:
                self._off = True
                return None
            from opentelemetry import trace

            from lich.otel._tracing import Tracing, build_provider, watch_export

            provider = build_provider(plan)
            if self._install_global and isinstance(trace.get_tracer_provider(),
                                                   trace.ProxyTracerProvider):
                trace.set_tracer_provider(provider)
            self._tracing = Tracing(provider, flush_timeout_s=plan.flush_timeout_s,
                                    trouble=watch_export(plan))
            self._tracing.shutdown_at_exit()
            return self._tracing

    def records(self, config: LichConfig) -> bool:
        """Whether runs on ``config`` get spans: ``False`` when the export is switched
        off (exporter ``"none"``, ``OTEL_SDK_DISABLED``), so that they need no event
        hook (see :func:`lich.hooks.needed_when`)."""
        if self._given is not None or self._tracing is not None:
            return True
        if self._off:
            return False
        plan, problems = export_plan(load_settings(config), self.environ)
        return bool(plan.exporters or problems)

    @hookimpl
    def lich_run_start(self, run: RunInfo) -> None:
        """Open the run's ``invoke_agent`` span (building the tracer on the first run).

        A run whose ``run_start`` event this plugin did not see gets no span, nor
        one that already ended: the first call, which imports the SDK, may overrun
        ``hook_timeout_s`` and finish after its run did.
        """
        config = run.config
        settings = load_settings(config) if config is not None else OtelSettings()
        tracing = self._tracing_for(settings)
        with self._runs_lock:
            pending = self._pending.pop(run.run_id, None)
            if tracing is None or pending is None:
                return
            self._open(tracing, run, settings, pending)

    def _open(self, tracing: Tracing, run: RunInfo, settings: OtelSettings,
              pending: tuple[int, str, contextvars.Context]) -> None:
        config = run.config
        providers = config.providers if config is not None else ()
        tracing.start_run(RunStartInfo(
            run_id=run.run_id,
            session_id=run.session_id,
            input=run.input,
            model=pending[1],
            agent_name=settings.agent_name,
            capture_content=_capture(settings, self.environ),
            provider_kinds={p.name: self._identity(p) for p in providers},
            provider_servers={p.name: server for p in providers
                              if (server := self._server(p)) is not None},
            tool_description=_describer(run),
            first_provider=providers[0].name if providers else "",
            temperature=config.temperature if config is not None else None,
            max_tokens=config.max_tokens if config is not None else None,
            started_ns=pending[0],
            caller=pending[2],
        ))

    @hookimpl
    def lich_event(self, event: Envelope) -> None:
        """Start, annotate and end spans as the run's events arrive."""
        kind = event.event.type
        if kind == "run_start":
            # The caller's context: the run's span becomes a child of whatever span
            # was current where the run was started. A copy is cheap and needs no
            # OpenTelemetry import on the event loop.
            self._pending[event.run_id] = (int(event.ts * 1e9),
                                           getattr(event.event, "model", ""),
                                           contextvars.copy_context())
            return
        tracing = self._tracing
        if kind == "run_end":
            # Under the lock lich_run_start opens a span in: a late opening sees the
            # run gone instead of leaving a span that never ends.
            with self._runs_lock:
                self._pending.pop(event.run_id, None)
                if tracing is not None:
                    tracing.on_event(event)
        elif tracing is not None:
            tracing.on_event(event)


def _server_of(url: str | None) -> tuple[str, int] | None:
    """``(host, port)`` of ``url`` (the scheme's port when none is given)."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def _describer(run: RunInfo) -> Callable[[str], str | None]:
    """A tool's description by its name, from the run's registry (read when the tool
    is called: a server's tools may have changed since the run began)."""

    def describe(name: str) -> str | None:
        tool = run.tool(name)
        return tool.description if tool is not None and tool.description else None

    return describe


_PLUGIN = OtelPlugin()


@hookimpl
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim ``[otel]``: the exporter and what spans carry."""
    _PLUGIN.lich_register_config_tables(tables)


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check ``[otel]`` and the ``OTEL_*`` variables lich reads."""
    _PLUGIN.lich_check_config(config)


@hookimpl
def lich_register_providers(registry: ProviderRegistry) -> None:
    """Read what each provider kind declares itself (``gen_ai.provider.name``)."""
    _PLUGIN.lich_register_providers(registry)


@hookimpl
def lich_run_start(run: RunInfo) -> None:
    """Open the run's ``invoke_agent`` span."""
    _PLUGIN.lich_run_start(run)


@hookimpl
@needed_when(_PLUGIN.records)
def lich_event(event: Envelope) -> None:
    """Turn the run's events into spans (not called when the export is switched off)."""
    _PLUGIN.lich_event(event)
