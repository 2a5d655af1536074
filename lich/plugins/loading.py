"""Loading plugins: resolve each configured entry, import it, register it with a pluggy
manager, and keep a :class:`LoadReport` per entry.

Loading never raises. Each entry — an entry-point name in the group ``lich``,
a dotted module name, or a path to a ``.py`` file (relative to the work dir) —
yields one :class:`LoadReport`. A plugin that fails at any phase
(``resolve``, ``import``, ``register``, ``validate``) is unregistered whole:
no hook and nothing it registered stays behind.

Functions named ``lich_*`` in a plugin are hook implementations with or
without ``@hookimpl`` (as ``pytest_*`` functions are for pytest), so a typo in
a hook name is caught as a ``validate`` failure rather than silently ignored.

Also here: what is installed (:func:`available_plugins`,
:func:`installed_entry_points`), read from package metadata without importing
any plugin.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeAlias

import pluggy
from attrs import evolve, field, frozen

from lich import hookspecs
from lich.config import is_path_entry
from lich.hooks import PROJECT, RUNS_INLINE_ATTR
from lich.plugins import _entry_points as ep_index
from lich.plugins.policy import HookPolicy, inline_hooks, policy_table
from lich.suggest import did_you_mean

__all__ = [
    "ENTRY_POINT_GROUP",
    "TABLES_GROUP",
    "AvailablePlugin",
    "LoadReport",
    "PluginLoadError",
    "PluginLoader",
    "available_plugins",
    "installed_entry_points",
    "load_entry_point",
]

# The host's one logger, whichever of its modules logs: the CLI quiets it by this name.
log = logging.getLogger("lich.plugins")

ENTRY_POINT_GROUP = "lich"
#: Entry points naming which plugin claims a config table not named after it:
#: ``<table> = "<module of the plugin's entry point>"`` (read from metadata only).
TABLES_GROUP = "lich.tables"
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
    #: The hook specifications this plugin added (``lich_add_hookspecs``).
    hookspecs: tuple[str, ...] = ()
    #: The config tables it claims (``lich_register_config_tables``), once claimed.
    tables: tuple[str, ...] = ()
    phase: Phase | None = None
    error_type: str | None = None
    error_message: str | None = None
    #: ``file:line`` where the plugin's own code raised (the import that failed, the
    #: line of a hook that raised), when the traceback has it.
    error_at: str | None = None
    load_ms: float = 0.0
    warnings: tuple[str, ...] = field(default=(), converter=_str_tuple)

    @property
    def ok(self) -> bool:
        """Whether the plugin is loaded."""
        return self.status == "loaded"

    def describe_error(self, *, at: bool = False) -> str:
        """``<phase>: <ErrorType>: <message>`` for a failed or skipped entry; with ``at``,
        followed by `` (file:line)`` where the plugin's code raised, when known."""
        if self.status == "loaded":
            return ""
        kind = f"{self.error_type}: " if self.error_type else ""
        where = f" ({self.error_at})" if at and self.error_at else ""
        return f"{self.phase or 'load'}: {kind}{self.error_message or ''}{where}"


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
    import importlib.metadata

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


class PluginLoader:
    """Owns a pluggy manager with lich's hook specifications: loads plugin entries
    into it and keeps a :class:`LoadReport` per entry.

    :class:`~lich.plugins.PluginHost` is a loader that also calls the hooks.

    :param work_dir: where relative ``.py`` plugin paths are resolved.
    """

    def __init__(self, *, work_dir: str | os.PathLike[str] | None = None) -> None:
        self.work_dir = Path(work_dir or os.getcwd())
        self.pm: pluggy.PluginManager = _Manager(PROJECT)
        self.pm.add_hookspecs(hookspecs)
        #: How each hook is called (:mod:`lich.plugins.policy`): a hook is its spec
        #: and its row, so the loader that adds specs keeps the rows too.
        self.policies: dict[str, HookPolicy] = policy_table()
        self.reports: list[LoadReport] = []
        #: hook name -> the plugin whose lich_add_hookspecs added its spec
        self.spec_owners: dict[str, str] = {}
        # The plugin pm.register is registering (its lich_add_hookspecs runs inside it).
        self._registering: str | None = None
        # Inside load(): plugins whose implementations of hooks no spec names yet wait
        # for the end of the batch (the plugin adding the spec may come later in it).
        self._pending: list[str] | None = None
        self.pm.hook.lich_add_hookspecs.call_historic(kwargs={"host": self})

    # ------------------------------------------------------------ hook specs

    def add_hookspecs(self, module_or_class: ModuleType | type,
                      *policies: HookPolicy) -> list[str]:
        """Add the ``lich_*`` hook specifications of ``module_or_class`` (functions
        marked ``@lich.hooks.hookspec``) and their rows of the policy table
        (:class:`lich.plugins.policy.HookPolicy`: ``policies``, and the module's
        own ``HOOK_POLICIES`` if it has them); the names added.

        A hook with a row is called through the host's one caller
        (``host.call_hook``, ``host.call_hook_sync``) as its row says; one without
        can still be called plainly (``host.pm.hook.<name>(...)``).

        Called from a plugin's ``lich_add_hookspecs(host)``, the specs are that
        plugin's (``lich plugins`` shows them). Implementations already registered
        are checked against them now: one asking for an argument the spec lacks
        fails its plugin (phase ``validate``).

        :raises ValueError: no spec found, a name not starting ``lich_``, a spec
            that exists already, or a row for no spec of ``module_or_class`` (or
            for a hook that has one).
        """
        names = [n for n in dir(module_or_class)
                 if self.pm.parse_hookspec_opts(module_or_class, n) is not None]
        if not names:
            raise ValueError(f"no hook specification in {module_or_class!r} (mark each "
                             "with @lich.hooks.hookspec)")
        problems = [f"{n}: a hook name starts with {PROJECT}_" for n in names
                    if not n.startswith(f"{PROJECT}_")]
        for name in names:
            caller = getattr(self.pm.hook, name, None)
            if getattr(caller, "spec", None) is not None:
                owner = self.spec_owners.get(name, PROJECT)
                problems.append(f"{name}: specified already (by {owner})")
        rows = [*policies, *getattr(module_or_class, "HOOK_POLICIES", ())]
        problems += [f"{row.name}: a policy row for no hook of {module_or_class!r}, or "
                     "a second one" for row in rows
                     if row.name not in names or row.name in self.policies
                     or sum(r.name == row.name for r in rows) > 1]
        if problems:
            raise ValueError("cannot add hook specifications: " + "; ".join(problems))
        for name in names:
            self._fit_to_spec(name, getattr(module_or_class, name))
        self.pm.add_hookspecs(module_or_class)
        self.policies.update((row.name, row) for row in rows)
        owner = self._registering or PROJECT
        for name in names:
            self.spec_owners[name] = owner
        return names

    def _fit_to_spec(self, name: str, spec: Callable[..., Any]) -> None:
        """Fail every plugin whose implementation of ``name`` asks for an argument the
        new spec lacks (pluggy would refuse the whole spec)."""
        caller = getattr(self.pm.hook, name, None)
        if caller is None:
            return
        taken = [p for p in inspect.signature(spec).parameters if p != "self"]
        for impl in list(caller.get_hookimpls()):
            extra = [a for a in impl.argnames if a not in taken]
            if extra:
                self._fail_loaded(impl.plugin_name, "validate", TypeError(
                    f"{name}({', '.join(impl.argnames)}): "
                    f"{', '.join(repr(a) for a in extra)} not an argument of {name}, "
                    f"which takes ({', '.join(taken)})"))

    # ------------------------------------------------------------------ loading

    def load(self, entries: Sequence[str]) -> list[LoadReport]:
        """Load ``entries`` one by one, in order; returns their reports.

        The reports are also kept in :attr:`reports`. A plugin implementing a hook
        that no spec names is checked at the end, once every entry had its chance
        to add specs (``lich_add_hookspecs``), so the order of entries does not
        matter."""
        outer = self._pending is None
        if outer:
            self._pending = []
        try:
            for entry in entries:
                self.load_entry(entry)
        finally:
            if outer:
                pending, self._pending = self._pending, None
                for name in pending or ():
                    self._check_unknown(name)
        return [r for r in self.reports[len(self.reports) - len(entries):]]

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
        self._registering = name
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:
            # pluggy keeps the implementations it added before the failing one (and the
            # plugin's name): take them all out so nothing of a failed plugin stays.
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            if isinstance(exc, pluggy.PluginValidationError):
                failed = _failed(base, "validate", exc)
                # pluggy names the hook but not what it takes: say that instead.
                problem = self._argument_problem(plugin)
                return evolve(failed, error_message=problem) if problem else failed
            return _failed(base, "register", exc)
        finally:
            self._registering = None
        unknown = self._unknown_hooks(plugin)
        if unknown and self._pending is None:
            self.pm.unregister(plugin)
            return evolve(base, phase="validate", error_type="UnknownHook",
                          error_message=self._unknown_message(unknown))
        wrappers = sorted(
            caller.name
            for caller in self.pm.get_hookcallers(plugin) or ()
            for impl in caller.get_hookimpls()
            if impl.plugin is plugin and (impl.wrapper or impl.hookwrapper)
        )
        if wrappers:
            # lich calls each implementation itself (timeouts, threads, fail-closed): a
            # pluggy wrapper would be called as a plain implementation and do nothing.
            self.pm.unregister(plugin)
            return evolve(
                base,
                phase="validate",
                error_type="UnsupportedHookWrapper",
                error_message="hook wrappers (wrapper=True / hookwrapper=True) are not "
                "supported for " + ", ".join(wrappers)
                + "; implement the hook plainly (see docs/plugins.md)",
            )
        misplaced = self._inline_problem(plugin)
        if misplaced:
            self.pm.unregister(plugin)
            return evolve(base, phase="validate", error_type="UnsupportedInlineHook",
                          error_message=misplaced)
        hooks = sorted(c.name for c in self.pm.get_hookcallers(plugin) or ())
        if unknown and self._pending is not None:
            self._pending.append(name)
        specs = sorted(n for n, owner in self.spec_owners.items() if owner == name)
        return evolve(base, status="loaded", hooks=tuple(hooks), hookspecs=tuple(specs))

    def _unknown_hooks(self, plugin: object) -> list[str]:
        """The hooks ``plugin`` implements that no spec names (optional ones aside)."""
        return sorted(
            caller.name
            for caller in self.pm.get_hookcallers(plugin) or ()
            if caller.spec is None
            and any(impl.plugin is plugin and not impl.optionalhook
                    for impl in caller.get_hookimpls())
        )

    def _unknown_message(self, unknown: Sequence[str]) -> str:
        known = self._hook_names()
        return ("no hook specification named "
                + ", ".join(f"{name}{did_you_mean(name, known)}" for name in unknown)
                + " (hooks start with lich_; a plugin's own hooks need that plugin "
                "loaded; see docs/plugins.md)")

    def _check_unknown(self, name: str) -> None:
        """At the end of :meth:`load`: fail ``name`` if a hook it implements is still
        specified by no loaded plugin."""
        plugin = self.pm.get_plugin(name)
        if plugin is None:
            return
        unknown = self._unknown_hooks(plugin)
        if unknown:
            self._fail_loaded(name, "validate", LookupError(self._unknown_message(unknown)))
            for i, report in enumerate(self.reports):
                if report.plugin == name and report.phase == "validate":
                    self.reports[i] = evolve(report, error_type="UnknownHook")

    def _inline_problem(self, plugin: object) -> str | None:
        """What is wrong with ``plugin``'s :func:`~lich.hooks.runs_inline` markers: one
        on an ``async def`` (inline means called and answered at once), or on a hook
        lich does not call under a deadline (already inline, or no run-time hook)."""
        problems = []
        allowed = inline_hooks(self.policies)
        for caller in self.pm.get_hookcallers(plugin) or ():
            for impl in caller.get_hookimpls():
                if impl.plugin is not plugin or not getattr(impl.function, RUNS_INLINE_ATTR,
                                                            False):
                    continue
                if caller.name not in allowed:
                    problems.append(
                        f"{caller.name} cannot be marked runs_inline (only "
                        f"{', '.join(sorted(allowed))})")
                elif inspect.iscoroutinefunction(impl.function) or inspect.isasyncgenfunction(
                        impl.function):
                    problems.append(
                        f"{caller.name} is marked runs_inline but is an async def; an inline "
                        "hook is a plain def that answers at once (drop the marker, or the "
                        "async)")
        return "; ".join(sorted(problems)) or None

    def _hook_names(self) -> list[str]:
        """Every hook lich specifies."""
        return sorted(name for name, caller in vars(self.pm.hook).items()
                      if getattr(caller, "spec", None) is not None)

    def _argument_problem(self, plugin: object) -> str | None:
        """What is wrong with the arguments of ``plugin``'s hook implementations, naming
        the arguments each hook takes (``lich_before_tool_call takes (call, run)``)."""
        problems = []
        for attr in dir(plugin):
            opts = self.pm.parse_hookimpl_opts(plugin, attr)
            if opts is None:
                continue
            hook = opts.get("specname") or attr
            spec = getattr(getattr(self.pm.hook, hook, None), "spec", None)
            if spec is None:
                continue
            try:
                params = inspect.signature(getattr(plugin, attr)).parameters.values()
            except (TypeError, ValueError):
                continue
            # As pluggy counts them: the arguments without a default.
            wanted = [p.name for p in params if p.default is p.empty and p.kind in (
                p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            extra = [name for name in wanted if name not in spec.argnames]
            if extra:
                which = ", ".join(repr(name) for name in extra)
                problems.append(
                    f"{attr}({', '.join(wanted)}): {which} "
                    f"{'is not an argument' if len(extra) == 1 else 'are not arguments'} "
                    f"of {hook}, which takes ({', '.join(spec.argnames)})"
                )
        return "; ".join(problems) or None

    def _resolve(self, entry: str) -> _Resolved:
        if not entry:
            raise ValueError("empty plugin entry")
        if is_path_entry(entry):
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
            return _Resolved("entry_point", entry, ep.value, ep.load,
                             distribution=ep.distribution, version=ep.version)
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


def _failed(base: LoadReport, phase: Phase, exc: BaseException) -> LoadReport:
    message = str(exc) or type(exc).__name__
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}:{exc.lineno}" if exc.filename else f"line {exc.lineno}"
        message = f"{exc.msg} ({where})"
    at = None if isinstance(exc, SyntaxError) else _plugin_frame(base, exc)
    return evolve(
        base,
        status="failed",
        phase=phase,
        error_type=type(exc).__name__,
        error_message=message,
        error_at=at,
        hooks=(),
    )


# Frames that are never the plugin's own: Python's import machinery, pluggy, lich.
_NOT_THE_PLUGINS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    os.path.dirname(os.path.abspath(pluggy.__file__)))


def _plugin_frame(base: LoadReport, exc: BaseException) -> str | None:
    """``file:line`` where the plugin's own code raised ``exc`` (the import that failed,
    the line of a hook that raised): the innermost frame of the plugin's file or
    module, else the innermost one outside lich, pluggy and the import machinery."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    own = base.resolved or ""
    module = own.split(":", 1)[0] if base.source in ("entry_point", "module") else None
    fallback = None
    for frame in reversed(frames):
        filename = frame.filename
        if filename.startswith("<") or filename.startswith(_NOT_THE_PLUGINS):
            continue
        if base.source == "file" and os.path.abspath(filename) == own:
            return f"{filename}:{frame.lineno}"
        if module and _module_file(module) == os.path.abspath(filename):
            return f"{filename}:{frame.lineno}"
        fallback = fallback or f"{filename}:{frame.lineno}"
    return fallback


def _module_file(module: str) -> str | None:
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None)
    return os.path.abspath(path) if isinstance(path, str) else None


_EP_CACHE: dict[str, ep_index.EntryPointRecord] | None = None


def _entry_points(refresh: bool = False) -> dict[str, ep_index.EntryPointRecord]:
    """The group's entry points: once per process, from the cache that survives between
    processes when nothing was installed or removed since (:mod:`._entry_points`);
    ``refresh`` reads the metadata itself (a name not found may be newly installed)."""
    global _EP_CACHE
    if _EP_CACHE is None or refresh:
        _EP_CACHE = (ep_index.scan if refresh else ep_index.lookup)(ENTRY_POINT_GROUP)
    return _EP_CACHE


def installed_entry_points() -> frozenset[str]:
    """Names of the installed entry points of the group ``lich`` (metadata only, cached)."""
    return frozenset(_entry_points())


def load_entry_point(name: str) -> Any:
    """Import the installed entry point ``name`` of the group ``lich`` and return what it
    names (its plugin module or object), without registering it anywhere.

    :raises LookupError: no such entry point is installed.
    """
    record = _entry_points().get(name)
    if record is None:
        raise LookupError(f"no installed entry point {name!r} (group {ENTRY_POINT_GROUP!r})")
    return record.load()


def _distribution_of(module: str) -> tuple[str | None, str | None]:
    """The installed distribution (and its version) that provides ``module``, if any.

    Only asked for dotted-module entries, which are rare: ``packages_distributions``
    reads every installed distribution's file list.
    """
    import importlib.metadata

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
