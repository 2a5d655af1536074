"""Provider kinds as registered by plugins, and the chat function built from them.

The core knows no provider: every kind — the builtin ones included — is
registered by its plugin through ``lich_register_providers``, together with
its :class:`ProviderDefaults` (the well-known base URL, the environment
variable its key is read from by default, and the hosts that default key may
be sent to). The failover router is whatever ``lich_make_router`` returns.

The key rule lives here, once, for every kind: a key variable the config did
not name in ``api_key_env`` is only ever sent to its kind's well-known hosts.
A ``base_url`` pointing anywhere else gets no key unless the config names one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeAlias
from urllib.parse import urlsplit

import attrs
from attrs import field, frozen

from lich.config import ConfigError, LichConfig, ProviderConfig, no_model_message
from lich.events import Event, Failover, Retry
from lich.registry import Registry
from lich.secrets import redact_url, redact_urls, redact_values, secret_values
from lich.suggest import did_you_mean
from lich.types import (
    ChatFn,
    ChatOptions,
    ChatResult,
    Message,
    Provider,
    ProviderError,
    ToolDefinition,
)

if TYPE_CHECKING:
    from lich.plugins import PluginHost

__all__ = [
    "ProviderDefaults",
    "ProviderFactory",
    "ProviderIdentity",
    "ProviderKind",
    "ProviderRegistry",
    "build_chat",
    "build_providers",
    "host_of",
    "redact_provider_error",
    "redacting_chat",
    "secret_env_names",
]

ProviderFactory: TypeAlias = Callable[[ProviderConfig], Provider]


def host_of(url: str | None) -> str:
    """The lower-case host name of ``url`` ('' when there is none)."""
    if not url:
        return ""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:  # a malformed URL (bad port, bad IPv6 literal) has no trusted host
        return ""


def _scheme_of(url: str | None) -> str:
    try:
        return urlsplit(url or "").scheme.lower()
    except ValueError:
        return ""


def _hosts(value: Iterable[str] | str | None) -> tuple[str, ...] | None:
    if value is None:
        return None  # the default: filled in from base_url after init
    if isinstance(value, str):  # one host, not its characters
        value = (value,)
    return tuple(h.lower() for h in value)


@frozen
class ProviderDefaults:
    """What a provider kind assumes when a ``[[providers]]`` entry leaves it out.

    :param base_url: the kind's well-known endpoint, used when ``base_url`` is not set.
    :param key_env: the environment variable holding the key by default
        (``api_key_env`` not set), e.g. ``"EXAMPLE_API_KEY"``.
    :param key_hosts: the hosts ``key_env`` may be sent to; by default the host
        of ``base_url``. Any other host gets the default key only when the
        config names the variable itself in ``api_key_env``.
    """

    base_url: str | None = None
    key_env: str | None = None
    key_hosts: tuple[str, ...] = field(converter=_hosts, default=None)

    def __attrs_post_init__(self) -> None:
        # None (or left out): the host of base_url, as documented; () means no host.
        if self.key_hosts is None:
            host = host_of(self.base_url)
            object.__setattr__(self, "key_hosts", (host,) if host else ())

    def is_key_host(self, base_url: str | None) -> bool:
        """Whether ``base_url`` points at a host the default key may be sent to.

        The host must be one of ``key_hosts``, and when the kind's own endpoint is
        ``https`` so must ``base_url`` be: ``http://api.example.com`` would carry the
        key in clear text to whoever answers for that name.
        """
        host = host_of(base_url)
        if not host or host not in self.key_hosts:
            return False
        if _scheme_of(self.base_url) == "https":
            return _scheme_of(base_url) == "https"
        return True

    def resolve(self, config: ProviderConfig) -> ProviderConfig:
        """``config`` with the base URL and the key variable this kind will use.

        ``api_key_env`` stays as the config named it; when it is not named, the
        default ``key_env`` is filled in only for a well-known host. Resolving a
        resolved config changes nothing.
        """
        base_url = (config.base_url or self.base_url or "").rstrip("/") or None
        key_env = config.api_key_env
        if not key_env and self.key_env and self.is_key_host(base_url):
            key_env = self.key_env
        if base_url == config.base_url and key_env == config.api_key_env:
            return config
        return attrs.evolve(config, base_url=base_url, api_key_env=key_env)


#: What a provider kind says it is, for telemetry (``gen_ai.provider.name``): a name,
#: or a function of the resolved config (one API spoken to many services).
ProviderIdentity: TypeAlias = str | Callable[[ProviderConfig], str]


@frozen
class ProviderKind:
    """One registered kind: its factory, its defaults, what it says it is
    (``identity``; the kind's name when it said nothing) and the plugin that
    registered it."""

    name: str
    factory: ProviderFactory
    defaults: ProviderDefaults = ProviderDefaults()
    identity: ProviderIdentity | None = None


class ProviderRegistry(Registry[ProviderKind]):
    """Provider kinds: kind name → :class:`ProviderKind`, each attributed to its plugin."""

    what = "provider_kind"

    def __init__(self) -> None:
        super().__init__()
        #: The plugins in the order the config lists them (set by the plugin host):
        #: the default kind is the first kind of the first of them that registers one.
        self.plugin_order: list[str] = []

    def register(
        self, kind: str, factory: ProviderFactory, *, defaults: ProviderDefaults | None = None,
        identity: ProviderIdentity | None = None,
    ) -> None:
        """Register ``factory`` for ``kind`` with the kind's ``defaults``.

        ``identity`` is who a provider of this kind talks to, as telemetry names it
        (``gen_ai.provider.name``: ``"anthropic"``, ``"openai"``): a name, or a
        function of the resolved :class:`~lich.config.ProviderConfig` for a kind that
        speaks one API to many services (by its ``base_url``). Without it the kind's
        name stands in. A kind registered twice keeps the first registration; the
        later one is reported on its plugin's load report (``duplicate_provider_kind``).
        """
        if not callable(factory):
            raise TypeError(f"provider factory for {kind!r} is not callable")
        if defaults is not None and not isinstance(defaults, ProviderDefaults):
            raise TypeError(
                f"defaults for provider kind {kind!r} must be a lich.providers.ProviderDefaults"
            )
        if identity is not None and not (isinstance(identity, str) or callable(identity)):
            raise TypeError(f"identity for provider kind {kind!r} must be a name or a function")
        self._add(kind, ProviderKind(kind, factory, defaults or ProviderDefaults(), identity))

    def kinds(self) -> list[str]:
        """Registered kinds, in the order their plugins are listed in ``plugins``.

        (Registration itself runs later plugins first, so that one can take a name
        before a builtin does.) Outside the plugin host: registration order.
        """
        rank = {plugin: i for i, plugin in enumerate(self.plugin_order)}
        last = len(rank)
        return sorted(self._items, key=lambda n: rank.get(self._owners[n] or "", last))

    def ordered(self) -> list[ProviderKind]:
        """The registered kinds themselves, in the order of :meth:`kinds`."""
        return [self._items[n] for n in self.kinds()]

    def default_kind(self) -> str | None:
        """The kind a provider without ``kind`` gets: the first of :meth:`kinds`."""
        return next(iter(self.kinds()), None)

    def key_envs(self) -> frozenset[str]:
        """Every default key variable a registered kind reads (for scrubbing and redaction)."""
        return frozenset(k.defaults.key_env for k in self._items.values() if k.defaults.key_env)

    def resolve(self, config: ProviderConfig, index: int = 0) -> ProviderConfig:
        """``config`` with its kind, base URL and key variable as they will be used.

        :raises ConfigError: the kind is not registered.
        """
        kind_name = config.kind or self.default_kind()
        kind = self._items.get(kind_name) if kind_name else None
        if kind is None:
            raise ConfigError([self._unknown_kind(config.kind, index)])
        # No base URL is no error here: a kind need not speak HTTP at all.
        return kind.defaults.resolve(
            config if config.kind else attrs.evolve(config, kind=kind.name)
        )

    def identity(self, config: ProviderConfig) -> str:
        """Who a provider of ``config`` talks to, as its kind declared it
        (:meth:`register`'s ``identity``); the kind's name when it declared nothing,
        or when its function fails or says nothing. ``""`` for an unknown kind."""
        try:
            resolved = self.resolve(config)
        except ConfigError:
            return ""
        kind = self._items[resolved.kind or ""]
        declared = kind.identity
        if callable(declared):
            try:
                declared = declared(resolved)
            except Exception:  # a plugin's bug must not break a run's telemetry
                declared = None
        return declared if isinstance(declared, str) and declared else kind.name

    def _unknown_kind(self, kind: str | None, index: int) -> str:
        known = ", ".join(self.kinds()) or "none"
        if not kind:
            return (f"$.providers[{index}].kind: no provider kind is registered by any loaded "
                    "plugin; enable a provider plugin (add it to `plugins` in the config)")
        from lich.plugins import installed_entry_points

        # By convention a provider plugin's entry point is named after its kind: point at
        # the installed one rather than guessing.
        installed = kind in installed_entry_points()
        guess = "" if installed else did_you_mean(kind, self.kinds())
        if guess:  # a typo of a loaded kind ("openai-compat")
            return (f"$.providers[{index}].kind: unknown provider kind {kind!r}{guess} "
                    f"(registered kinds: {known})")
        plugin = f"the {kind!r} plugin" if installed else "the plugin that provides it"
        return (f"$.providers[{index}].kind: provider kind {kind!r} is not registered by any "
                f"loaded plugin; enable {plugin} (add it to `plugins` in the config) "
                f"(registered kinds: {known})")

    def create(self, config: ProviderConfig, index: int = 0) -> Provider:
        """Build the provider for ``config``.

        A provider may say it cannot work as configured before any request is made:
        when it has a ``config_problem()`` method returning a reason (the builtin HTTP
        providers: a required API key that is not set), that is a configuration error.

        :raises ConfigError: the kind is unknown, or the provider reports a problem.
        """
        resolved = self.resolve(config, index)
        kind = self._items[resolved.kind or ""]
        provider = kind.factory(resolved)
        check = getattr(provider, "config_problem", None)
        problem = check() if callable(check) else None
        if problem:
            raise ConfigError([f"$.providers[{index}]: provider {resolved.name!r}: {problem}"])
        return provider


def secret_env_names(config: LichConfig, registry: ProviderRegistry) -> frozenset[str]:
    """The environment variables that hold provider keys: never shown to a model.

    Every default key variable of a registered kind, and every ``api_key_env``
    the config names.
    """
    named = {p.api_key_env for p in config.providers if p.api_key_env}
    return registry.key_envs() | named


def build_providers(config: LichConfig, registry: ProviderRegistry) -> list[Provider]:
    """One provider per ``providers`` entry, in config order."""
    if not config.providers:
        raise ConfigError([no_model_message()])
    providers: list[Provider] = []
    problems: list[str] = []
    for i, p in enumerate(config.providers):
        try:
            providers.append(registry.create(p, i))
        except ConfigError as exc:  # every entry's problems at once, not one per try
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return providers


def build_chat(
    config: LichConfig, host: PluginHost, providers: Sequence[Provider]
) -> ChatFn:
    """The chat function the loop calls: the router plugin's, or the lone provider's."""
    router = host.make_router(list(providers), config)
    if router is not None:
        return router
    if len(providers) == 1:
        return providers[0].chat
    raise ConfigError(
        [
            "$.providers: several providers are configured but no router plugin is loaded "
            "(none implements lich_make_router); enable one — `lich plugins available` "
            "lists the installed plugins, and the default plugins include a router"
        ]
    )


def redact_provider_error(exc: ProviderError, names: Iterable[str] = ()) -> ProviderError:
    """``exc`` with the value of every secret variable, and the credentials of every
    URL in it (:func:`lich.secrets.redact_urls`), replaced by ``[redacted]``.

    The values are those of ``names`` (the provider key variables) and of
    every secret-looking name (:func:`lich.secrets.is_secret_name`) in the
    environment now. A provider's error body is the server's text: one that
    quotes the request's ``Authorization`` header would otherwise carry the key
    into the events, the transcript and the gateway log. ``exc`` itself is
    returned when nothing needed hiding.
    """
    values = secret_values(names)
    # And the credentials of a URL the error quotes (a base_url with user:password@,
    # a ?key= of a proxy): an HTTP library's message names the URL it called.
    message = redact_urls(redact_values(exc.message, values))
    attempts = tuple(
        (provider, attempt, kind, redact_urls(redact_values(text, values)))
        for provider, attempt, kind, text in exc.attempts
    )
    url = redact_url(exc.url) if exc.url else exc.url  # shown in every line (where)
    proxy = redact_url(exc.proxy) if exc.proxy else exc.proxy
    if (message, attempts, url, proxy) == (exc.message, exc.attempts, exc.url, exc.proxy):
        return exc
    return attrs.evolve(exc, message=message, attempts=attempts, url=url, proxy=proxy)


def redacting_chat(chat: ChatFn, names: Iterable[str] = ()) -> ChatFn:
    """``chat``, whose :class:`~lich.types.ProviderError` messages are redacted
    (:func:`redact_provider_error`) before anything else sees them.

    Done once, where provider errors enter lich, so that no later consumer
    (event, transcript, ``--json`` stream, gateway reply or log) has to remember to.
    The ``retry`` and ``failover`` events a router emits during the call quote
    the failed attempt's message: theirs are redacted too.
    """
    frozen_names = frozenset(names)

    async def chat_redacted(
        messages: Sequence[Message], tools: Sequence[ToolDefinition], options: ChatOptions
    ) -> ChatResult:
        on_event = options.on_event
        if on_event is not None:
            def emit_redacted(event: Event) -> None:
                if isinstance(event, (Retry, Failover)):
                    clean = redact_urls(redact_values(event.message,
                                                      secret_values(frozen_names)))
                    if clean != event.message:
                        event = attrs.evolve(event, message=clean)
                on_event(event)

            options = attrs.evolve(options, on_event=emit_redacted)
        try:
            return await chat(messages, tools, options)
        except ProviderError as exc:
            redacted = redact_provider_error(exc, frozen_names)
            if redacted is exc:
                raise
            # ``from None``: the original, which still quotes the key, must not be
            # printed as the cause in a traceback.
            raise redacted from None

    return chat_redacted
