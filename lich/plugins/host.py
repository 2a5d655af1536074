"""The plugin host: a :class:`~lich.plugins.loading.PluginLoader` and a
:class:`~lich.plugins.calling.HookCaller` over one pluggy manager, plus the
registration fan-out that joins the two.

The registration hooks (tools, provider kinds, gateway adapters, CLI commands,
the router, config checks) sit here because they need both halves: they are
called like hooks, but a plugin whose registration hook raises is failed in its
load report and unloaded whole — with whatever it already put into any
registry.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
import weakref
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

from lich.hooks import NEEDED_WHEN_ATTR
from lich.plugins.calling import HookCaller
from lich.plugins.loading import PluginLoader

if TYPE_CHECKING:
    import click

    from lich.config import LichConfig
    from lich.gateway.bus import GatewayBus, MessageBus
    from lich.gateway.registry import AdapterRegistry
    from lich.providers import ProviderRegistry
    from lich.sessions import SessionStore
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
        HookCaller.__init__(self, self.pm, hook_timeout_s=hook_timeout_s)
        # Registries that can forget a plugin's items (tools, provider kinds, adapters),
        # held weakly: every agent assembled on this host (each /model switch) makes new
        # registries, and the host must not keep the old ones alive.
        self._undo: list[weakref.WeakMethod[Callable[[str], object]]] = []

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

    def register_tools(self, registry: ToolRegistry, config: LichConfig) -> None:
        """Call ``lich_register_tools``; a plugin whose hook raises is unloaded whole."""
        registry.on_duplicate = self._warn
        registry.on_warning = self._warn
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
        fails (phase ``validate``) and is unloaded. A budget (``max_cost_usd``,
        ``max_total_tokens``) that no loaded plugin enforces is a problem too.
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
        # The budgets are core keys that a plugin enforces: set with no such plugin loaded
        # (a plugin list without `budgets`), they would silently limit nothing.
        limits = [key for key in ("max_cost_usd", "max_total_tokens")
                  if getattr(config, key, None) is not None]
        if limits and not self.has_impls("lich_before_model_call"):
            problems.extend(
                f"$.{key}: no loaded plugin enforces it (none implements "
                "lich_before_model_call); add \"budgets\" to plugins" for key in limits)
        return problems

    def register_commands(self, cli: click.Group, reserved: Collection[str] = ()) -> None:
        """Call ``lich_register_commands``; a plugin whose hook raises has its commands removed.

        A command whose name is taken — one of ``reserved`` (the builtin commands), or a
        command already in ``cli`` (another plugin's) — is not added: the one there stays,
        and the plugin's load report gets a warning naming the collision.
        """
        owners: dict[str, str] = {}
        for impl in self._impls("lich_register_commands"):
            before = dict(cli.commands)
            try:
                _call_sync(impl, {"cli": cli})
            except Exception as exc:
                for name in set(cli.commands) - set(before):
                    del cli.commands[name]
                self._forget_everywhere(impl.plugin_name)
                self._fail_loaded(impl.plugin_name, "register", exc)
                continue
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
                    owners[name] = impl.plugin_name
                    continue
                if name in before:
                    cli.commands[name] = before[name]
                else:
                    del cli.commands[name]
                self._warn(impl.plugin_name,
                           f"command_name_taken: command {name!r} not added; {taken} "
                           f"{name!r} keeps the name (rename the plugin's command)")

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
                    f"{self._describe(exc)}"
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

    def make_bus(self, config: LichConfig, local: GatewayBus) -> MessageBus | None:
        """``lich_make_bus``: the first non-``None`` answer, or ``None`` (use ``local``).

        :raises lich.config.ConfigError: a bus plugin raised (its own
            ``ConfigError`` as it is; anything else named with the plugin), or
            answered with something that is not a bus.
        """
        from lich.config import ConfigError

        for impl in self._impls("lich_make_bus"):
            try:
                result = _call_sync(impl, {"config": config, "local": local})
            except ConfigError:
                raise
            except Exception as exc:
                raise ConfigError([
                    f"$.bus: lich_make_bus of plugin {impl.plugin_name!r} failed: "
                    f"{self._describe(exc)}"
                ]) from exc
            if result is None:
                continue
            needed = ("submit", "handle", "start", "drain", "close", "cancel_runs", "park",
                      "parked")
            missing = [name for name in needed if not callable(getattr(result, name, None))]
            if missing:
                # The gateway would fail at its first message, far from the cause.
                raise ConfigError([
                    f"$.bus: lich_make_bus of plugin {impl.plugin_name!r} returned "
                    f"{type(result).__name__}, not a bus (it has no {', '.join(missing)})"
                ])
            return result  # type: ignore[no-any-return]
        return None

    def make_session_store(self, config: LichConfig) -> SessionStore | None:
        """``lich_make_session_store``: the first non-``None`` answer, or ``None``.

        :raises lich.config.ConfigError: a store plugin raised (its own
            ``ConfigError`` as it is; anything else named with the plugin).
        """
        from lich.config import ConfigError
        from lich.sessions import SessionStore

        for impl in self._impls("lich_make_session_store"):
            try:
                result = _call_sync(impl, {"config": config})
            except ConfigError:
                raise
            except Exception as exc:
                raise ConfigError([
                    f"$.session_store: lich_make_session_store of plugin "
                    f"{impl.plugin_name!r} failed: {self._describe(exc)}"
                ]) from exc
            if result is None:
                continue
            if not isinstance(result, SessionStore):
                self._forget_everywhere(impl.plugin_name)
                self._fail_loaded(impl.plugin_name, "register", TypeError(
                    f"lich_make_session_store returned {type(result).__name__}, not a "
                    "session store (see lich.sessions.SessionStore)"))
                continue
            return result
        return None


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
