"""The plugin host: loads the config's plugin entries, keeps a report per entry,
and calls hooks through a typed facade.

Loading never raises. Each entry — an entry-point name in the group ``lich``,
a dotted module name, or a path to a ``.py`` file (relative to the work dir) —
yields one :class:`LoadReport`. A plugin that fails at any phase
(``resolve``, ``import``, ``register``, ``validate``) is unregistered whole:
no hook and nothing it registered stays behind.

Functions named ``lich_*`` in a plugin are hook implementations with or
without ``@hookimpl`` (as ``pytest_*`` functions are for pytest), so a typo in
a hook name is caught as a ``validate`` failure rather than silently ignored.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import pluggy
from attrs import evolve, field, frozen

from lich import hookspecs
from lich._threads import run_in_daemon_thread
from lich.hooks import PROJECT, Block, Rewrite, RunInfo, RunOutcome
from lich.types import ToolCall, ToolResult

if TYPE_CHECKING:
    import click

    from lich.config import LichConfig
    from lich.events import Envelope
    from lich.gateway.registry import AdapterRegistry
    from lich.providers import ProviderRegistry
    from lich.tools import ToolRegistry
    from lich.types import ChatFn, Provider

__all__ = [
    "ENTRY_POINT_GROUP",
    "AvailablePlugin",
    "LoadReport",
    "PluginHost",
    "PluginLoadError",
    "ToolDecision",
    "available_plugins",
    "installed_entry_points",
]

log = logging.getLogger("lich.plugins")

ENTRY_POINT_GROUP = "lich"
Status: TypeAlias = Literal["loaded", "failed", "skipped"]
Phase: TypeAlias = Literal["resolve", "import", "register", "validate"]
SourceKind: TypeAlias = Literal["entry_point", "module", "file", "object"]


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@frozen
class LoadReport:
    """What happened to one plugin entry. ``phase`` is where it failed (``None`` if it loaded)."""

    entry: str
    status: Status
    source: SourceKind | None = None
    resolved: str | None = None
    plugin: str | None = None
    distribution: str | None = None
    version: str | None = None
    hooks: tuple[str, ...] = ()
    phase: Phase | None = None
    error_type: str | None = None
    error_message: str | None = None
    load_ms: float = 0.0
    warnings: tuple[str, ...] = field(default=(), converter=_str_tuple)

    @property
    def ok(self) -> bool:
        """Whether the plugin is loaded."""
        return self.status == "loaded"

    def describe_error(self) -> str:
        """``<phase>: <ErrorType>: <message>`` for a failed or skipped entry."""
        if self.status == "loaded":
            return ""
        kind = f"{self.error_type}: " if self.error_type else ""
        return f"{self.phase or 'load'}: {kind}{self.error_message or ''}"


class PluginLoadError(Exception):
    """Strict mode: at least one plugin entry failed. Lists every failure."""

    def __init__(self, reports: Sequence[LoadReport]) -> None:
        self.reports = list(reports)
        lines = [f"  {r.entry}: {r.describe_error()}" for r in self.reports]
        super().__init__("plugin load failed (strict mode):\n" + "\n".join(lines))


@frozen
class AvailablePlugin:
    """An installed entry point of the group ``lich``, read from metadata only."""

    name: str
    value: str
    distribution: str | None
    version: str | None


def available_plugins() -> list[AvailablePlugin]:
    """Installed ``lich`` entry points, without importing any of them."""
    out = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        out.append(
            AvailablePlugin(
                name=ep.name,
                value=ep.value,
                distribution=dist.metadata["Name"] if dist is not None else None,
                version=dist.version if dist is not None else None,
            )
        )
    return sorted(out, key=lambda p: p.name)


@frozen
class ToolDecision:
    """The outcome of the before-hooks for one call."""

    call: ToolCall
    rewritten_by: tuple[str, ...] = ()
    blocked_by: str | None = None
    reason: str | None = None


class _Manager(pluggy.PluginManager):
    """A pluggy manager that also takes unmarked ``lich_*`` functions as implementations."""

    def parse_hookimpl_opts(self, plugin: object, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name.startswith(f"{PROJECT}_"):
            method = getattr(plugin, name, None)
            if inspect.isroutine(method):
                return {}
        return opts


class _Resolved:
    __slots__ = ("distribution", "load", "name", "resolved", "source", "version")

    def __init__(
        self,
        source: SourceKind,
        name: str,
        resolved: str,
        load: Callable[[], object],
        distribution: str | None = None,
        version: str | None = None,
    ) -> None:
        self.source = source
        self.name = name
        self.resolved = resolved
        self.load = load
        self.distribution = distribution
        self.version = version


class PluginHost:
    """Owns one pluggy manager: loads plugins, reports on them, calls their hooks.

    Make one per agent or per CLI invocation (never a module global), so tests
    get a fresh host each time.

    :param work_dir: where relative ``.py`` plugin paths are resolved.
    :param hook_timeout_s: how long a run-time hook may take before it counts
        as failed (a before-hook then blocks the call).
    """

    def __init__(
        self, *, work_dir: str | os.PathLike[str] | None = None, hook_timeout_s: float = 10.0
    ) -> None:
        self.work_dir = Path(work_dir or os.getcwd())
        self.hook_timeout_s = hook_timeout_s
        self.pm = _Manager(PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.reports: list[LoadReport] = []
        self._pending_events: set[asyncio.Task[Any]] = set()
        # plugin name -> the run whose lich_event failure was last logged as a warning
        self._event_warned: dict[str, str] = {}
        # Registries that can forget a plugin's items (tools, provider kinds, adapters).
        self._undo: list[Callable[[str], object]] = []

    # ------------------------------------------------------------------ loading

    def load(self, entries: Sequence[str]) -> list[LoadReport]:
        """Load ``entries`` one by one, in order; returns their reports.

        The reports are also kept in :attr:`reports`."""
        return [self.load_entry(entry) for entry in entries]

    def load_entry(self, entry: str) -> LoadReport:
        """Load one entry; never raises."""
        started = time.perf_counter()
        entry = entry.strip() if isinstance(entry, str) else str(entry)
        try:
            resolved = self._resolve(entry)
        except Exception as exc:
            return self._report(
                LoadReport(
                    entry=entry,
                    status="failed",
                    phase="resolve",
                    error_type=type(exc).__name__,
                    error_message=str(exc),
                ),
                started,
            )
        base = LoadReport(
            entry=entry,
            status="failed",
            source=resolved.source,
            resolved=resolved.resolved,
            plugin=resolved.name,
            distribution=resolved.distribution,
            version=resolved.version,
        )
        if self.pm.has_plugin(resolved.name) or self.pm.is_blocked(resolved.name):
            return self._report(
                evolve(
                    base,
                    status="skipped",
                    phase="register",
                    error_type="DuplicatePlugin",
                    error_message=f"duplicate_plugin_name: {resolved.name}",
                ),
                started,
            )
        try:
            plugin = resolved.load()
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return self._report(_failed(base, "import", exc), started)
        if base.version is None:
            # A loose module or file has no distribution metadata; its own __version__ is
            # the next best thing for "which version of this plugin is loaded".
            version = getattr(plugin, "__version__", None)
            if isinstance(version, str):
                base = evolve(base, version=version)
        return self._report(self._register(plugin, base), started)

    def register_object(self, plugin: object, name: str) -> LoadReport:
        """Register an in-process plugin object (a module, class instance or namespace).

        The same validation and reporting apply as for loaded entries.
        """
        started = time.perf_counter()
        base = LoadReport(entry=name, status="failed", source="object", resolved=repr(plugin),
                          plugin=name)
        if self.pm.has_plugin(name) or self.pm.get_name(plugin) is not None:
            return self._report(
                evolve(base, status="skipped", phase="register", error_type="DuplicatePlugin",
                       error_message=f"duplicate_plugin_name: {name}"),
                started,
            )
        return self._report(self._register(plugin, base), started)

    def _report(self, report: LoadReport, started: float) -> LoadReport:
        report = evolve(report, load_ms=round((time.perf_counter() - started) * 1000, 3))
        self.reports.append(report)
        if report.status == "failed":
            log.warning("plugin %s failed to load: %s", report.entry, report.describe_error())
        return report

    def _register(self, plugin: object, base: LoadReport) -> LoadReport:
        name = base.plugin or base.entry
        if self.pm.get_name(plugin) is not None:
            return evolve(
                base,
                status="skipped",
                phase="register",
                error_type="DuplicatePlugin",
                error_message=(
                    f"duplicate_plugin_name: {name} is already loaded as "
                    f"{self.pm.get_name(plugin)}"
                ),
            )
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:
            # pluggy keeps the implementations it added before the failing one (and the
            # plugin's name): take them all out so nothing of a failed plugin stays.
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            phase: Phase = "validate" if isinstance(exc, pluggy.PluginValidationError) else (
                "register"
            )
            return _failed(base, phase, exc)
        unknown = [
            caller.name
            for caller in self.pm.get_hookcallers(plugin) or ()
            if caller.spec is None
            and any(
                impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls()
            )
        ]
        if unknown:
            self.pm.unregister(plugin)
            return evolve(
                base,
                phase="validate",
                error_type="UnknownHook",
                error_message="no hook specification named "
                + ", ".join(sorted(unknown))
                + " (hooks start with lich_; see docs/plugins.md)",
            )
        hooks = sorted(c.name for c in self.pm.get_hookcallers(plugin) or ())
        return evolve(base, status="loaded", hooks=tuple(hooks))

    def _resolve(self, entry: str) -> _Resolved:
        if not entry:
            raise ValueError("empty plugin entry")
        if entry.endswith(".py") or os.sep in entry or "/" in entry:
            path = Path(entry).expanduser()
            if not path.is_absolute():
                path = self.work_dir / path
            path = path.resolve()
            if not path.is_file():
                raise FileNotFoundError(f"no plugin file at {path}")
            return _Resolved("file", path.stem, str(path), lambda: _import_file(path))
        # A miss rescans once: a distribution installed since the first scan is found too.
        ep = _entry_points().get(entry) or _entry_points(refresh=True).get(entry)
        if ep is not None:
            dist = getattr(ep, "dist", None)
            return _Resolved(
                "entry_point",
                entry,
                ep.value,
                ep.load,
                distribution=dist.metadata["Name"] if dist is not None else None,
                version=dist.version if dist is not None else None,
            )
        try:
            spec = importlib.util.find_spec(entry)
        except (ImportError, ValueError) as exc:
            raise LookupError(
                f"no entry point, module or .py file named {entry!r} ({exc})"
            ) from exc
        if spec is None:
            raise LookupError(
                f"no entry point (group {ENTRY_POINT_GROUP!r}), module or .py file named {entry!r}"
            )
        distribution, version = _distribution_of(entry)
        return _Resolved(
            "module",
            entry,
            spec.origin or entry,
            lambda: importlib.import_module(entry),
            distribution=distribution,
            version=version,
        )

    # -------------------------------------------------------------- reporting

    @property
    def failures(self) -> list[LoadReport]:
        """Reports of entries that failed or were skipped."""
        return [r for r in self.reports if r.status != "loaded"]

    def raise_if_failed(self) -> None:
        """Strict mode: raise :class:`PluginLoadError` listing every failed or skipped entry."""
        if self.failures:
            raise PluginLoadError(self.failures)

    def plugin_names(self) -> list[str]:
        """Names of the loaded plugins, in load order."""
        return [r.plugin for r in self.reports if r.status == "loaded" and r.plugin]

    def _fail_loaded(self, plugin_name: str, phase: Phase, exc: BaseException) -> None:
        """Turn a loaded plugin's report into a failure and unregister it."""
        plugin = self.pm.get_plugin(plugin_name)
        if plugin is not None:
            self.pm.unregister(plugin)
        for i, report in enumerate(self.reports):
            if report.plugin == plugin_name and report.status == "loaded":
                self.reports[i] = _failed(report, phase, exc)
                log.warning("plugin %s failed: %s", plugin_name, self.reports[i].describe_error())
                return
        # An implementation registered outside load()/register_object(): report it anyway.
        orphan = LoadReport(plugin_name, "failed", plugin=plugin_name)
        self.reports.append(_failed(orphan, phase, exc))

    def _warn(self, plugin_name: str, message: str) -> None:
        for i, report in enumerate(self.reports):
            if report.plugin == plugin_name:
                self.reports[i] = evolve(report, warnings=(*report.warnings, message))
                break
        log.warning("plugin %s: %s", plugin_name, message)

    # ---------------------------------------------------------- registration

    def _impls(self, hook_name: str) -> list[pluggy.HookImpl]:
        # pluggy calls implementations last-registered first; keep that order.
        caller = getattr(self.pm.hook, hook_name)
        return list(reversed(caller.get_hookimpls()))

    def _register_each(
        self,
        hook_name: str,
        kwargs: Mapping[str, Any],
        registry: Any,
        undo: Callable[[str], object],
    ) -> None:
        for impl in self._impls(hook_name):
            previous = getattr(registry, "current_plugin", None)
            if registry is not None:
                registry.current_plugin = impl.plugin_name
            try:
                _call_sync(impl, kwargs)
            except Exception as exc:
                undo(impl.plugin_name)
                self._forget_everywhere(impl.plugin_name)
                self._fail_loaded(impl.plugin_name, "register", exc)
            finally:
                if registry is not None:
                    registry.current_plugin = previous

    def _forget_everywhere(self, plugin_name: str) -> None:
        # A plugin that fails in one registration hook loses what it registered in the others.
        for forget in self._undo:
            forget(plugin_name)

    def _track(self, undo: Callable[[str], object]) -> None:
        if undo not in self._undo:
            self._undo.append(undo)

    def register_tools(self, registry: ToolRegistry, config: LichConfig) -> None:
        """Call ``lich_register_tools``; a plugin whose hook raises is unloaded whole."""
        registry.on_duplicate = self._warn
        self._track(registry.remove_plugin)
        self._register_each(
            "lich_register_tools", {"registry": registry, "config": config}, registry,
            registry.remove_plugin,
        )

    def register_providers(self, registry: ProviderRegistry) -> None:
        """Call ``lich_register_providers``; a plugin whose hook raises is unloaded whole."""
        registry.on_duplicate = self._warn
        registry.plugin_order = self.plugin_names()
        self._track(registry.remove_plugin)
        self._register_each(
            "lich_register_providers", {"registry": registry}, registry, registry.remove_plugin
        )

    def register_gateway_adapters(self, registry: AdapterRegistry) -> None:
        """Call ``lich_register_gateway_adapters``; a failing plugin is unloaded whole."""
        # As for tools and provider kinds: a platform name registered twice is reported
        # on the later plugin's load report and skipped, not a reason to unload it.
        registry.on_duplicate = self._warn
        self._track(registry.remove_plugin)
        self._register_each(
            "lich_register_gateway_adapters", {"registry": registry}, registry,
            registry.remove_plugin,
        )

    def check_config(self, config: LichConfig) -> list[str]:
        """``lich_check_config`` of every plugin: the problems they report, in plugin order.

        A plugin whose check raises anything but :class:`lich.config.ConfigError`
        fails (phase ``validate``) and is unloaded.
        """
        from lich.settings import ConfigError

        problems: list[str] = []
        for impl in self._impls("lich_check_config"):
            try:
                _call_sync(impl, {"config": config})
            except ConfigError as exc:
                problems.extend(exc.problems)
            except Exception as exc:
                self._forget_everywhere(impl.plugin_name)
                self._fail_loaded(impl.plugin_name, "validate", exc)
        return problems

    def register_commands(self, cli: click.Group) -> None:
        """Call ``lich_register_commands``; a plugin whose hook raises has its commands removed."""
        for impl in self._impls("lich_register_commands"):
            before = set(cli.commands)
            try:
                _call_sync(impl, {"cli": cli})
            except Exception as exc:
                for name in set(cli.commands) - before:
                    del cli.commands[name]
                self._forget_everywhere(impl.plugin_name)
                self._fail_loaded(impl.plugin_name, "register", exc)

    def make_router(self, providers: list[Provider], config: LichConfig) -> ChatFn | None:
        """``lich_make_router``: the first non-``None`` answer, or ``None``.

        :raises lich.config.ConfigError: a router plugin raised (its own
            ``ConfigError`` as it is; anything else named with the plugin).
        """
        from lich.config import ConfigError

        for impl in self._impls("lich_make_router"):
            try:
                result = _call_sync(impl, {"providers": providers, "config": config})
            except ConfigError:
                raise
            except Exception as exc:
                # A configuration error naming the plugin, not a traceback out of the CLI.
                raise ConfigError([
                    f"$.plugins: lich_make_router of plugin {impl.plugin_name!r} failed: "
                    f"{_describe(exc, self.hook_timeout_s)}"
                ]) from exc
            if result is None:
                continue
            if not callable(result):
                # Caught here, with the plugin's name, rather than as a bare TypeError at
                # the first model call; the next router (or none) decides instead.
                self._forget_everywhere(impl.plugin_name)
                self._fail_loaded(impl.plugin_name, "register", TypeError(
                    f"lich_make_router returned {type(result).__name__}, not a chat function "
                    "(an async callable (messages, tools, options) -> ChatResult)"))
                continue
            return result  # type: ignore[no-any-return]
        return None

    # ---------------------------------------------------------------- run time

    def has_impls(self, hook_name: str) -> bool:
        """Whether any loaded plugin implements ``hook_name``."""
        return bool(getattr(self.pm.hook, hook_name).get_hookimpls())

    async def _call_timed(self, impl: pluggy.HookImpl, kwargs: Mapping[str, Any]) -> Any:
        args = {name: kwargs[name] for name in impl.argnames}
        if inspect.iscoroutinefunction(impl.function):
            return await asyncio.wait_for(impl.function(**args), self.hook_timeout_s)
        # A plain function may block; a worker thread keeps a hanging hook from
        # freezing the event loop, and lets the timeout apply. A daemon thread, so a
        # hook that never returns cannot keep the process from exiting (see _threads).
        result = await asyncio.wait_for(
            run_in_daemon_thread(impl.function, **args), self.hook_timeout_s
        )
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, self.hook_timeout_s)
        return result

    async def _observe(self, hook_name: str, kwargs: Mapping[str, Any]) -> None:
        for impl in self._impls(hook_name):
            try:
                await self._call_timed(impl, kwargs)
            except Exception as exc:
                log.warning("%s of plugin %s failed (skipped): %s", hook_name, impl.plugin_name,
                            _describe(exc, self.hook_timeout_s))

    async def run_start(self, run: RunInfo) -> None:
        """``lich_run_start`` for every plugin; failures are logged and skipped."""
        await self._observe("lich_run_start", {"run": run})

    async def run_end(self, run: RunInfo, outcome: RunOutcome) -> None:
        """``lich_run_end`` for every plugin; failures are logged and skipped."""
        await self._observe("lich_run_end", {"run": run, "outcome": outcome})

    async def before_tool_call(self, call: ToolCall, run: RunInfo) -> ToolDecision:
        """Run the before-hooks one at a time: rewrites chain, the first block wins,
        and a hook that fails blocks (fail closed)."""
        rewritten_by: list[str] = []
        for impl in self._impls("lich_before_tool_call"):
            try:
                answer = await self._call_timed(impl, {"call": call, "run": run})
            except Exception as exc:
                reason = f"hook_error ({impl.plugin_name}): {_describe(exc, self.hook_timeout_s)}"
                return ToolDecision(call, tuple(rewritten_by), impl.plugin_name, reason)
            if answer is None:
                continue
            if isinstance(answer, Block):
                return ToolDecision(call, tuple(rewritten_by), impl.plugin_name, answer.reason)
            if isinstance(answer, Rewrite):
                call = evolve(call, args=dict(answer.args))
                rewritten_by.append(impl.plugin_name)
                continue
            reason = (
                f"hook_error ({impl.plugin_name}): lich_before_tool_call returned "
                f"{type(answer).__name__}; expected Block, Rewrite or None"
            )
            return ToolDecision(call, tuple(rewritten_by), impl.plugin_name, reason)
        return ToolDecision(call, tuple(rewritten_by))

    async def after_tool_call(
        self, call: ToolCall, result: ToolResult, run: RunInfo
    ) -> tuple[ToolResult, str | None]:
        """Run the after-hooks; returns the (possibly replaced) result and who replaced it last."""
        replaced_by: str | None = None
        for impl in self._impls("lich_after_tool_call"):
            try:
                answer = await self._call_timed(impl, {"call": call, "result": result, "run": run})
            except Exception as exc:
                log.warning("lich_after_tool_call of plugin %s failed (skipped): %s",
                            impl.plugin_name, _describe(exc, self.hook_timeout_s))
                continue
            if isinstance(answer, ToolResult):
                result, replaced_by = answer, impl.plugin_name
            elif answer is not None:
                log.warning("lich_after_tool_call of plugin %s returned %s (ignored)",
                            impl.plugin_name, type(answer).__name__)
        return result, replaced_by

    def event(self, envelope: Envelope) -> None:
        """``lich_event`` for every plugin, synchronously; async implementations are scheduled."""
        for impl in self._impls("lich_event"):
            try:
                result = impl.function(**({"event": envelope} if impl.argnames else {}))
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    self._pending_events.add(task)
                    task.add_done_callback(self._event_done)
            except Exception as exc:
                # Once per plugin and run: a broken observer fails on every event (every
                # streamed token), and a warning for each would drown the output.
                run_id = getattr(envelope, "run_id", "")
                if self._event_warned.get(impl.plugin_name) == run_id:
                    log.debug("lich_event of plugin %s failed again (skipped)",
                              impl.plugin_name, exc_info=True)
                    continue
                self._event_warned[impl.plugin_name] = run_id
                log.warning("lich_event of plugin %s failed (skipped; further failures in "
                            "this run are logged at debug level): %s", impl.plugin_name,
                            _describe(exc, self.hook_timeout_s), exc_info=True)

    def _event_done(self, task: asyncio.Task[Any]) -> None:
        self._pending_events.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("async lich_event implementation failed: %s", task.exception())

    async def drain_events(self) -> None:
        """Wait (bounded by ``hook_timeout_s``) for scheduled async ``lich_event`` calls."""
        if not self._pending_events:
            return
        pending = set(self._pending_events)
        _, late = await asyncio.wait(pending, timeout=self.hook_timeout_s)
        for task in late:
            task.cancel()


def _failed(base: LoadReport, phase: Phase, exc: BaseException) -> LoadReport:
    message = str(exc) or type(exc).__name__
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}:{exc.lineno}" if exc.filename else f"line {exc.lineno}"
        message = f"{exc.msg} ({where})"
    return evolve(
        base,
        status="failed",
        phase=phase,
        error_type=type(exc).__name__,
        error_message=message,
        hooks=(),
    )


def _describe(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"timed out after {timeout_s:g}s"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _call_sync(impl: pluggy.HookImpl, kwargs: Mapping[str, Any]) -> Any:
    """Call a registration-time hook, awaiting it if it is ``async def``."""
    result = impl.function(**{name: kwargs[name] for name in impl.argnames})
    if inspect.iscoroutine(result):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(result)
        # Inside a running loop we cannot block on it here: run it on a helper loop.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, result).result()
    return result


_EP_CACHE: dict[str, importlib.metadata.EntryPoint] | None = None


def _entry_points(refresh: bool = False) -> dict[str, importlib.metadata.EntryPoint]:
    global _EP_CACHE
    if _EP_CACHE is None or refresh:
        _EP_CACHE = {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return _EP_CACHE


def installed_entry_points() -> frozenset[str]:
    """Names of the installed entry points of the group ``lich`` (metadata only, cached)."""
    return frozenset(_entry_points())


def _distribution_of(module: str) -> tuple[str | None, str | None]:
    """The installed distribution (and its version) that provides ``module``, if any.

    Only asked for dotted-module entries, which are rare: ``packages_distributions``
    reads every installed distribution's file list.
    """
    top = module.split(".", 1)[0]
    try:
        names = importlib.metadata.packages_distributions().get(top) or []
        if not names:
            return None, None
        return names[0], importlib.metadata.version(names[0])
    except Exception:  # broken metadata must not break loading
        return None, None


def _import_file(path: Path) -> ModuleType:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    module_name = f"_lich_plugin_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module
