"""The plugin host: a :class:`~lich.plugins.loading.PluginLoader` and a
:class:`~lich.plugins.calling.HookCaller` over one pluggy manager, plus the
registration fan-out that joins the two.

The registration hooks (tools, provider kinds, config tables, slash commands, CLI
commands, the router, config checks) sit here because they need both halves: they are
called like hooks, but a plugin whose registration hook raises is failed in its
load report and unloaded whole — with whatever it already put into any
registry.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import attrs

from lich.hooks import NEEDED_WHEN_ATTR
from lich.plugins.calling import HookCaller
from lich.plugins.loading import PluginLoader
from lich.plugins.policy import HookPolicy, UnloadPhase

if TYPE_CHECKING:
    import click

    from lich.config import LichConfig
    from lich.processes import ProcessRunner
    from lich.providers import ProviderRegistry
    from lich.sessions import SessionStore
    from lich.settings import ConfigTables
    from lich.slash import SlashTable
    from lich.tools import ToolRegistry
    from lich.types import ChatFn, Provider

__all__ = ["PluginHost"]

# The host's one logger, whichever of its modules logs: the CLI quiets it by this name.
log = logging.getLogger("lich.plugins")


class PluginHost(PluginLoader, HookCaller):
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
        # Two independent bases over one manager, each initialised by name: they take
        # different parameters, and the caller gets the manager the loader made.
        PluginLoader.__init__(self, work_dir=work_dir)
        HookCaller.__init__(self, self.pm, hook_timeout_s=hook_timeout_s,
                            policies=self.policies)
        # Registries that can forget a plugin's items (tools, provider kinds, adapters),
        # held weakly: every agent assembled on this host (each /model switch) makes new
        # registries, and the host must not keep the old ones alive.
        self._undo: list[weakref.WeakMethod[Callable[[str], object]]] = []
        # The claims of the plugins loaded when they were last asked for, by those names.
        self._tables: tuple[tuple[str, ...], ConfigTables] | None = None

    def _fail_plugin(self, plugin_name: str, phase: UnloadPhase, exc: BaseException) -> None:
        # A plugin that fails in one registration hook loses what it registered in the
        # others too, then its load report says why.
        self._forget_everywhere(plugin_name)
        self._fail_loaded(plugin_name, phase, exc)

    def add_hook_policies(self, *policies: HookPolicy) -> None:
        """Add the rows of hooks a plugin specifies (beside its hook specs).

        :raises ValueError: a row for a hook that already has one.
        """
        for row in policies:
            if row.name in self.policies:
                raise ValueError(f"two hook policies for {row.name}")
            self.policies[row.name] = row

    def _register_each(self, hook_name: str, registry: Any, **kwargs: Any) -> None:
        """A registration hook whose implementations fill ``registry``, each as its
        plugin (``registry.current_plugin``)."""

        @contextmanager
        def as_plugin(plugin_name: str) -> Iterator[None]:
            previous = registry.current_plugin
            registry.current_plugin = plugin_name
            try:
                yield
            finally:
                registry.current_plugin = previous

        self.call_hook_sync(hook_name, each=as_plugin, registry=registry, **kwargs)

    def _forget_everywhere(self, plugin_name: str) -> None:
        # A plugin that fails in one registration hook loses what it registered in the others.
        for ref in list(self._undo):
            forget = ref()
            if forget is not None:
                forget(plugin_name)

    def _track(self, undo: Callable[[str], object]) -> None:
        """Remember a registry's ``remove_plugin`` (a bound method) while it lives."""
        live = [ref for ref in self._undo if ref() is not None]
        if all(ref() != undo for ref in live):
            live.append(weakref.WeakMethod(undo))
        self._undo = live

    def needs(self, hook_name: str, config: LichConfig | None) -> bool:
        """Whether a run on ``config`` must call ``hook_name``: some plugin implements it
        and has not declared itself idle for ``config`` (:func:`lich.hooks.needed_when`).

        Asked once per run for each per-turn hook; a declaration that raises counts
        as needed (the hook is called, and answers for itself).
        """
        for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
            predicate = getattr(impl.function, NEEDED_WHEN_ATTR, None)
            if predicate is None or config is None:
                return True
            try:
                if predicate(config):
                    return True
            except Exception as exc:
                log.warning("the needed_when of %s of plugin %s failed (it is called): %s",
                            hook_name, impl.plugin_name, self._describe(exc))
                return True
        return False

    def register_tools(
        self, registry: ToolRegistry, config: LichConfig, runner: ProcessRunner | None = None,
    ) -> None:
        """Call ``lich_register_tools``; a plugin whose hook raises is unloaded whole.

        ``runner`` is what processes started while registering go through (an
        MCP plugin's servers); ``None`` asks :meth:`make_process_runner`.
        """
        if runner is None:
            runner = self.make_process_runner(config)
        registry.on_duplicate = self._warn
        registry.on_warning = self._warn
        self._track(registry.remove_plugin)
        self._register_each("lich_register_tools", registry, config=config, runner=runner)

    def register_providers(self, registry: ProviderRegistry) -> None:
        """Call ``lich_register_providers``; a plugin whose hook raises is unloaded whole."""
        registry.on_duplicate = self._warn
        registry.plugin_order = self.plugin_names()
        self._track(registry.remove_plugin)
        self._register_each("lich_register_providers", registry)

    def register_into(self, hook_name: str, registry: Any, **kwargs: Any) -> None:
        """Call the registration hook ``hook_name`` with ``registry`` (passed as
        ``registry``) and ``kwargs``, as lich calls its own: each plugin's names are
        attributed to it, a name taken twice is a warning on the later plugin's load
        report, and a plugin whose hook raises is unloaded whole, with what it
        registered here and in every other registry.

        For a plugin's own registration hooks (``lich_add_hookspecs``): the
        gateway calls ``lich_register_gateway_adapters`` through it. ``registry``
        is a :class:`lich.registry.Registry` (or has its ``current_plugin``,
        ``on_duplicate`` and ``remove_plugin``).
        """
        registry.on_duplicate = self._warn
        if hasattr(registry, "on_warning"):
            registry.on_warning = self._warn
        self._track(registry.remove_plugin)
        self._register_each(hook_name, registry, **kwargs)

    def config_tables(self) -> ConfigTables:
        """The config tables the loaded plugins claim (``lich_register_config_tables``),
        and the core's own claim of ``[session_store]`` for its JSONL store.

        Asked again after more plugins were loaded, the hook is called again. Each
        loaded plugin's report lists what it claims (``LoadReport.tables``).
        """
        from lich.session_table import DEFAULT_STORE_KIND, JsonlStoreSettings, parse_jsonl_table
        from lich.settings import ConfigTables

        names = tuple(self.plugin_names())
        if self._tables is not None and self._tables[0] == names:
            return self._tables[1]
        tables = ConfigTables()
        tables.claim("session_store", JsonlStoreSettings, kind=DEFAULT_STORE_KIND, default=True,
                     parse=parse_jsonl_table,
                     help="where transcripts are kept (kind picks the store)")
        self.register_into("lich_register_config_tables", tables, tables=tables)
        for i, report in enumerate(self.reports):
            if report.ok and report.plugin:
                self.reports[i] = attrs.evolve(
                    report, tables=tuple(tables.of_plugin(report.plugin)))
        self._tables = (tuple(self.plugin_names()), tables)
        return tables

    def table_problems(self, config: LichConfig) -> list[str]:
        """What is wrong with the plugin tables of ``config``: each claimed table
        structured with its settings class, and every table no loaded plugin claims
        (with the closest known name, and the installed plugin that is not enabled
        but would claim it). Tables given as ``[plugin_settings.<name>]`` need no
        claim (deprecated, read for one release).
        """
        from lich.config import CORE_KEYS
        from lich.settings import ConfigError, json_type_name
        from lich.suggest import closest

        tables = self.config_tables()
        problems: list[str] = []
        for name, raw in config.tables.items():
            claim = tables.claim_for(name, raw)
            if claim is not None:
                try:
                    claim.structure(raw)
                except ConfigError as exc:
                    if name in config.legacy_tables:
                        # Where the user wrote it: [plugin_settings.<name>] (deprecated).
                        here, there = f"$.{name}", f"$.plugin_settings.{name}"
                        problems.extend(there + p[len(here):] if p.startswith(here) else p
                                        for p in exc.problems)
                    else:
                        problems.extend(exc.problems)
                continue
            kinds = tables.kinds(name)
            if kinds:
                kind = raw.get("kind") if isinstance(raw, Mapping) else None
                if not isinstance(raw, Mapping):
                    problems.append(f"$.{name}: expected a table, got {json_type_name(raw)}")
                    continue
                if not isinstance(kind, str) or not kind.strip():
                    problems.append(f"$.{name}.kind: " + (
                        "must not be empty" if isinstance(kind, str)
                        else f"expected a kind name, got {json_type_name(kind)}"))
                    continue
                which = f"[{name}] kind {kind!r}"
                hint = self._disabled_owner(name, kind)
                problems.append(
                    f"$.{name}.kind: no loaded plugin claims {which} (claimed kinds: "
                    f"{', '.join(repr(k) for k in kinds)}){hint}")
                continue
            if name in config.legacy_tables:
                continue
            hint = self._disabled_owner(name, None)
            if not hint:
                guess = closest(name, [*CORE_KEYS, *tables.tables()])
                if guess is not None:
                    hint = f" (did you mean {guess!r}?)"
                elif name in self.plugin_names():
                    hint = (f" (plugin {name!r} is loaded but claims no table: it may still "
                            f"read [plugin_settings.{name}], deprecated)")
            problems.append(f"$.{name}: no loaded plugin claims the table [{name}]{hint}")
        return problems

    def _disabled_owner(self, table: str, kind: str | None) -> str:
        """`` (plugin 'x' claims it: ...)`` for an installed plugin that is not loaded
        and would claim the table (or the kind), read from metadata only — no
        plugin that is not enabled is ever imported to ask.

        Who would claim what is declared, not asked: a table (or a kind) named as
        an installed plugin's entry point is that plugin's (``[otel]``: ``otel``;
        ``[bus] kind = "nats"``: ``nats``), and a distribution may name others in
        the entry-point group ``lich.tables`` (``<table> = "<the plugin's module>"``).
        """
        from lich.plugins import _entry_points as ep_index
        from lich.plugins.loading import TABLES_GROUP, _entry_points

        installed = _entry_points()
        loaded = {r.plugin for r in self.reports if r.ok}
        owner = None
        for candidate in (kind, table):
            if candidate and candidate in installed and candidate not in loaded:
                owner = candidate
                break
        if owner is None:
            declared = ep_index.lookup(TABLES_GROUP).get(table if kind is None else kind)
            if declared is not None:
                owner = next((n for n, ep in installed.items()
                              if ep.value == declared.value and n not in loaded), None)
        if owner is None:
            return ""
        failed = any(r.plugin == owner and not r.ok for r in self.reports)
        state = "did not load (see `lich plugins`)" if failed else "is not enabled"
        return (f" (the installed plugin {owner!r} claims it, and {state}: add "
                f"\"{owner}\" to plugins, or \"+{owner}\")")

    def slash_commands(self) -> SlashTable:
        """The slash commands of the interactive front ends: the builtin ones and
        every loaded plugin's (``lich_register_slash_commands``), in one table."""
        from lich import slash

        if not self.pm.has_plugin(slash.BUILTIN_PLUGIN):
            # The front ends' own commands register through the same hook, first
            # (tryfirst), so that a plugin cannot take their names.
            self.pm.register(slash, name=slash.BUILTIN_PLUGIN)
        registry = slash.SlashRegistry()
        self.register_into("lich_register_slash_commands", registry)
        return registry.table()

    def check_config(self, config: LichConfig) -> list[str]:
        """``lich_check_config`` of every plugin: the problems they report, in plugin order.

        A plugin whose check raises anything but :class:`lich.config.ConfigError`
        fails (phase ``validate``) and is unloaded. A budget (``max_cost_usd``,
        ``max_total_tokens``) that no loaded plugin enforces is a problem too, and so
        is every problem of the plugin tables (:meth:`table_problems`).
        """
        # The claimed tables first, each checked with its plugin's settings class.
        problems = self.table_problems(config)
        checked = self.call_hook_sync("lich_check_config", config=config)
        for answer in checked.collected:
            # A plugin that still checks its claimed table itself says it again: once.
            problems.extend(p for p in answer.value.problems if p not in problems)
        # The budgets are core keys that a plugin enforces: set with no such plugin loaded
        # (a plugin list without `budgets`), they would silently limit nothing.
        limits = [key for key in ("max_cost_usd", "max_total_tokens")
                  if getattr(config, key, None) is not None]
        if limits and not self.has_impls("lich_before_model_call"):
            problems.extend(
                f"$.{key}: no loaded plugin enforces it (none implements "
                "lich_before_model_call); add \"budgets\" to plugins" for key in limits)
        elif "max_cost_usd" in limits and not self.has_impls("lich_price_call"):
            # Every call's cost would be unknown: the run would stop before its first call
            # (after writing a transcript), a budget of no use; say so before any call.
            problems.append(
                "$.max_cost_usd (--max-cost): no loaded plugin prices model calls (none "
                "implements lich_price_call), so the budget cannot be checked; enable the "
                "`prices` plugin: plugins = [\"+prices\"] (pip install 'lich-agent[prices]')")
        return problems

    def register_commands(self, cli: click.Group, reserved: Collection[str] = ()) -> None:
        """Call ``lich_register_commands``; a plugin whose hook raises has its commands removed.

        A command whose name is taken — one of ``reserved`` (the builtin commands), or a
        command already in ``cli`` (another plugin's) — is not added: the one there stays,
        and the plugin's load report gets a warning naming the collision.
        """
        owners: dict[str, str] = {}

        @contextmanager
        def adding(plugin_name: str) -> Iterator[None]:
            before = dict(cli.commands)
            try:
                yield
            except Exception:
                for name in set(cli.commands) - set(before):
                    del cli.commands[name]
                raise
            for name, command in list(cli.commands.items()):
                if before.get(name) is command:
                    continue
                if name in reserved:
                    taken = "the builtin command"
                elif name in before:
                    owner = owners.get(name)
                    taken = (f"plugin {owner!r}'s command" if owner
                             else "an existing command")
                else:
                    owners[name] = plugin_name
                    continue
                if name in before:
                    cli.commands[name] = before[name]
                else:
                    del cli.commands[name]
                self._warn(plugin_name,
                           f"command_name_taken: command {name!r} not added; {taken} "
                           f"{name!r} keeps the name (rename the plugin's command)")

        self.call_hook_sync("lich_register_commands", each=adding, cli=cli)

    def make_router(self, providers: list[Provider], config: LichConfig) -> ChatFn | None:
        """``lich_make_router``: the first non-``None`` answer, or ``None``.

        :raises lich.config.ConfigError: a router plugin raised (its own
            ``ConfigError`` as it is; anything else named with the plugin).
        """
        router = self.call_hook_sync("lich_make_router", providers=providers, config=config)
        return router.value  # type: ignore[no-any-return]

    def make_process_runner(self, config: LichConfig) -> ProcessRunner:
        """``lich_make_process_runner``: the first answer, or :data:`lich.processes.DIRECT`.

        :raises lich.config.ConfigError: a runner plugin raised (its own
            ``ConfigError`` as it is; anything else named with the plugin).
        """
        from lich.processes import DIRECT

        runner: ProcessRunner | None = self.call_hook_sync(
            "lich_make_process_runner", config=config).value
        return DIRECT if runner is None else runner

    def make_session_store(self, config: LichConfig) -> SessionStore | None:
        """``lich_make_session_store``: the first non-``None`` answer, or ``None``.

        :raises lich.config.ConfigError: a store plugin raised (its own
            ``ConfigError`` as it is; anything else named with the plugin).
        """
        return self.call_hook_sync(  # type: ignore[no-any-return]
            "lich_make_session_store", config=config).value
