"""The ``[gateway]`` configuration table, parsed and checked.

:class:`lich.config.LichConfig` keeps ``gateway`` as a raw mapping (the core
does not know the platforms); :func:`parse_gateway_config` turns it into
frozen :class:`GatewayConfig` values with :func:`lich.settings.structure_settings`
and reports every problem at once as a :class:`lich.config.ConfigError` with
``$.gateway...`` paths. The gateway plugin checks it in ``lich_check_config``,
so ``lich config validate`` and every run refuse a bad table.

A table under ``[gateway]`` that is not a builtin platform is kept, raw, for
a third-party adapter of that name (:meth:`GatewayConfig.settings_for`).

.. code-block:: toml

    [gateway]
    platforms = ["webhook", "telegram"]
    tools = ["read_file", "list_dir"]       # or "all"
    history_cap = 40

    [gateway.telegram]
    allowed_users = [123456789]
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
from attrs import field, frozen

from lich.settings import (
    ConfigError,
    at_least,
    between,
    each,
    greater_than,
    json_type_name,
    non_empty,
    setting,
    structure_settings,
    url,
)

__all__ = [
    "BUILTIN_PLATFORMS",
    "DEFAULT_GATEWAY_TOOLS",
    "Allowlist",
    "DiscordSettings",
    "GatewayConfig",
    "TelegramSettings",
    "TwitchSettings",
    "WebhookSettings",
    "parse_gateway_config",
]

DEFAULT_GATEWAY_TOOLS: tuple[str, ...] = (
    "read_file",
    "list_dir",
    "grep_files",
    "docs_read",
    "docs_search",
)
"""What a gateway agent may use unless ``[gateway] tools`` says otherwise: reading only."""

BUILTIN_PLATFORMS = ("webhook", "telegram", "discord", "twitch")

# Discord gateway intents: GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT.
DISCORD_DEFAULT_INTENTS = (1 << 9) | (1 << 12) | (1 << 15)


@frozen
class Allowlist:
    """Who may talk to a bot on a public platform.

    A message is allowed when its user is in ``users`` or its chat in
    ``chats``; ``"*"`` in either allows everyone. An empty allowlist allows
    nobody (default-deny).
    """

    users: frozenset[str] = frozenset()
    chats: frozenset[str] = frozenset()

    @property
    def configured(self) -> bool:
        """Whether anything is allowed at all."""
        return bool(self.users or self.chats)

    @property
    def open(self) -> bool:
        """Whether ``"*"`` lets everyone in."""
        return "*" in self.users or "*" in self.chats

    def allows(self, user_id: str, chat_id: str, *, explicit: bool = False) -> bool:
        """Whether ``user_id`` in ``chat_id`` may talk to the bot.

        ``explicit=True`` ignores the ``"*"`` wildcard: only a listed user or
        chat counts (used for Discord direct messages).
        """
        if not explicit and self.open:
            return True
        return user_id in self.users or chat_id in self.chats


def _id(value: Any) -> str:
    """One id of an allowlist: a string or an integer (Telegram and Discord ids are numbers)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"expected a string or an integer, got {json_type_name(value)}")
    text = str(value).strip()
    if not text:
        raise ValueError("must not be empty")
    return text


def _login(value: Any) -> str:
    # Twitch logins and channel names are case-insensitive.
    return _id(value).lower()


def _channel(value: Any) -> str:
    name = _login(value).lstrip("#")
    if not name:
        raise ValueError("must not be empty")
    return name


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


_ids = each(_id, into=frozenset, what="an array of ids")
_logins = each(_login, into=frozenset, what="an array of ids")
_channels = each(_channel, into=_unique, what="an array of ids")
_channel_set = each(_channel, into=frozenset, what="an array of ids")


_ws_url = url("ws", "wss")
_is_http_url = url("http", "https")


def _http_url(value: Any) -> str:
    """An http(s) URL, without a trailing slash (paths are appended to it)."""
    if not isinstance(value, str):
        raise TypeError(f"expected a URL string, got {json_type_name(value)}")
    _is_http_url(value)
    return value.rstrip("/")


def _platform(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a platform name, got {json_type_name(value)}")
    if not value.strip():
        raise ValueError("must not be empty")
    return value.strip()


def _tool_name(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a tool name, got {json_type_name(value)}")
    return value


_DEFAULT_TOOLS: tuple[str, ...] | None = DEFAULT_GATEWAY_TOOLS  # typed as the field is
_tool_names = each(_tool_name, what='"all" or an array of tool names')


def _tools(value: Any) -> tuple[str, ...] | None:
    return None if value == "all" else _tool_names(value)


def _check_backoff(lo: float, hi: float) -> None:
    # A check across two fields: reported at backoff_max_s once both are numbers.
    if lo > hi:
        raise ValueError(f"backoff_max_s: must be at least backoff_min_s ({lo:g}), got {hi:g}")


def _host_name(value: Any) -> str:
    """One entry of ``allowed_hosts``: a host name or an IP address, without a port."""
    if not isinstance(value, str):
        raise TypeError(f"expected a host name, got {json_type_name(value)}")
    name = value.strip().lower()
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    if not bare:
        raise ValueError("must not be empty")
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    if any(c in bare for c in "/:@ \t") or name != bare:
        raise ValueError(
            f"expected a host name or an IP address without scheme or port, got {value!r}")
    return bare.rstrip(".")


_host_names = each(_host_name, into=frozenset, what="an array of host names")


@frozen
class WebhookSettings:
    """``[gateway.webhook]``: an HTTP endpoint, loopback-only unless a token is set.

    The connection limits apply before any request is read: ``header_timeout_s``
    bounds the time to send a request's headers, ``idle_timeout_s`` how long a
    kept-alive connection may wait for its next request, ``max_connections`` the
    open connections and ``max_unauthenticated`` those that have not yet sent a whole
    authorized request (the oldest of them is dropped to make room for a new one).
    ``allowed_hosts`` are the ``Host`` names accepted besides the loopback ones.
    ``reply_timeout_s``: how long ``POST /message`` waits for its reply before it
    answers ``202`` with a status URL to poll (unset: as long as the run takes).
    Without a token variable set, a token is generated and kept in ``token_file``
    (:meth:`token_path`) unless ``open`` says to serve loopback without one.
    """

    host: str = setting("127.0.0.1", check=non_empty)
    port: int = setting(8089, check=between(0, 65535))
    token_env: str = setting("LICH_GATEWAY_TOKEN", check=non_empty)
    max_body_bytes: int = setting(1_048_576, check=at_least(1))
    header_timeout_s: float = setting(10.0, check=greater_than(0))
    idle_timeout_s: float = setting(5.0, check=greater_than(0))
    max_connections: int = setting(100, check=at_least(1))
    max_unauthenticated: int = setting(32, check=at_least(1))
    allowed_hosts: frozenset[str] = setting(frozenset(), parse=_host_names)
    reply_timeout_s: float | None = setting(None, check=greater_than(0))
    #: No token set: ``open = true`` serves without one (every local user can then
    #: drive the agent); otherwise a token is generated into ``token_file``.
    open: bool = False
    #: Where a generated token is kept (``0600``); empty: ``webhook-token`` in the
    #: user state dir. ``~`` is expanded.
    token_file: str = ""

    def __attrs_post_init__(self) -> None:
        if self.max_unauthenticated > self.max_connections:
            raise ValueError(
                f"max_unauthenticated: must be at most max_connections "
                f"({self.max_connections}), got {self.max_unauthenticated}")

    def token_path(self) -> Path:
        """Where the generated token is kept: ``token_file``, or ``webhook-token`` in
        the user state dir."""
        if self.token_file:
            return Path(self.token_file).expanduser()
        import platformdirs

        return Path(platformdirs.user_state_dir("lich")) / "webhook-token"


@frozen
class TelegramSettings:
    """``[gateway.telegram]``: Bot API long polling, or a webhook.

    ``allowed_users`` and ``allowed_chats`` make up its :attr:`allowlist`.
    With ``webhook_url`` (the public URL Telegram posts updates to, which
    reaches ``listen_host:listen_port``) the bot is set to a webhook checked
    with the secret in ``webhook_secret_env``, instead of polling.
    """

    base_url: str = setting("https://api.telegram.org", parse=_http_url)
    token_env: str = setting("LICH_TELEGRAM_BOT_TOKEN", check=non_empty)
    allowed_users: frozenset[str] = setting(frozenset(), parse=_ids)
    allowed_chats: frozenset[str] = setting(frozenset(), parse=_ids)
    poll_timeout_s: int = setting(50, check=between(0, 600))
    backoff_min_s: float = setting(2.0, check=at_least(0))
    backoff_max_s: float = setting(30.0, check=at_least(0))
    send_interval_s: float = setting(1.0, check=at_least(0))
    send_retries: int = setting(4, check=between(0, 100))
    max_retry_after_s: float = setting(60.0, check=at_least(0))
    max_reply_chars: int = setting(4096, check=between(16, 4096))
    webhook_url: str | None = setting(None, parse=_http_url)
    webhook_secret_env: str = setting("LICH_TELEGRAM_WEBHOOK_SECRET", check=non_empty)
    listen_host: str = setting("127.0.0.1", check=non_empty)
    listen_port: int = setting(8090, check=between(0, 65535))

    def __attrs_post_init__(self) -> None:
        _check_backoff(self.backoff_min_s, self.backoff_max_s)

    @property
    def allowlist(self) -> Allowlist:
        """Who may talk to the bot."""
        return Allowlist(self.allowed_users, self.allowed_chats)


@frozen
class DiscordSettings:
    """``[gateway.discord]``: gateway websocket in, REST out.

    ``allowed_users`` and ``allowed_chats`` (guild or channel ids) make up its
    :attr:`allowlist`.
    """

    gateway_url: str = setting(
        "wss://gateway.discord.gg/?v=10&encoding=json", check=_ws_url)
    api_base_url: str = setting("https://discord.com/api/v10", parse=_http_url)
    token_env: str = setting("LICH_DISCORD_BOT_TOKEN", check=non_empty)
    allowed_users: frozenset[str] = setting(frozenset(), parse=_ids)
    allowed_chats: frozenset[str] = setting(frozenset(), parse=_ids)
    require_mention: bool = True
    intents: int = setting(DISCORD_DEFAULT_INTENTS, check=at_least(0))
    use_resume_url: bool = True
    backoff_min_s: float = setting(1.0, check=at_least(0))
    backoff_max_s: float = setting(60.0, check=at_least(0))
    invalid_session_delay_s: float = setting(2.0, check=at_least(0))
    send_retries: int = setting(4, check=between(0, 100))
    max_retry_after_s: float = setting(60.0, check=at_least(0))
    max_reply_chars: int = setting(2000, check=between(16, 2000))

    def __attrs_post_init__(self) -> None:
        _check_backoff(self.backoff_min_s, self.backoff_max_s)

    @property
    def allowlist(self) -> Allowlist:
        """Who may talk to the bot."""
        return Allowlist(self.allowed_users, self.allowed_chats)


@frozen
class TwitchSettings:
    """``[gateway.twitch]``: IRC over websocket.

    Logins and channels are lower-cased, channels lose their ``#``;
    ``allowed_users`` and ``allowed_chats`` (channels) make up its :attr:`allowlist`.
    """

    url: str = setting("wss://irc-ws.chat.twitch.tv:443", check=_ws_url)
    token_env: str = setting("LICH_TWITCH_OAUTH_TOKEN", check=non_empty)
    nick: str = ""
    nick_env: str = setting("LICH_TWITCH_NICK", check=non_empty)
    channels: tuple[str, ...] = setting((), parse=_channels)
    allowed_users: frozenset[str] = setting(frozenset(), parse=_logins)
    allowed_chats: frozenset[str] = setting(frozenset(), parse=_channel_set)
    rate_limit_messages: int = setting(20, check=at_least(1))
    rate_limit_window_s: float = setting(30.0, check=greater_than(0))
    backoff_min_s: float = setting(1.0, check=at_least(0))
    backoff_max_s: float = setting(60.0, check=at_least(0))
    max_reply_chars: int = setting(500, check=between(16, 500))

    def __attrs_post_init__(self) -> None:
        _check_backoff(self.backoff_min_s, self.backoff_max_s)

    @property
    def allowlist(self) -> Allowlist:
        """Who may talk to the bot."""
        return Allowlist(self.allowed_users, self.allowed_chats)


@frozen
class GatewayConfig:
    """The whole ``[gateway]`` table.

    ``platforms`` are de-duplicated; ``tools`` is ``None`` for "the tools the
    main config allows" (``"all"``); ``extra`` holds the raw tables of
    third-party platforms.
    """

    platforms: tuple[str, ...] = setting(
        ("webhook",), parse=each(_platform, into=_unique, what="an array of platform names"))
    tools: tuple[str, ...] | None = setting(_DEFAULT_TOOLS, parse=_tools)
    history_cap: int = setting(40, check=at_least(2))
    max_conversations: int = setting(200, check=at_least(1))
    queue_limit: int = setting(5, check=at_least(1))
    grace_s: float = setting(30.0, check=at_least(0))
    #: What one person (platform + sender id) may spend per UTC day across all their
    #: chats, in US dollars (needs ``prices``); the name is older than the rule.
    max_cost_usd_per_conversation_day: float | None = setting(None, check=greater_than(0))
    webhook: WebhookSettings = WebhookSettings()
    telegram: TelegramSettings = TelegramSettings()
    discord: DiscordSettings = DiscordSettings()
    twitch: TwitchSettings = TwitchSettings()
    extra: Mapping[str, Mapping[str, Any]] = field(factory=dict)

    def settings_for(self, platform: str) -> Any:
        """The settings of ``platform``: a typed value for builtins, the raw table otherwise."""
        if platform in BUILTIN_PLATFORMS:
            return getattr(self, platform)
        return self.extra.get(platform, {})


# The keys of [gateway] that are its own; any other table is a third-party platform's.
_OWN_KEYS = frozenset(a.name for a in attrs.fields(GatewayConfig)) - {"extra"}


def parse_gateway_config(
    raw: Mapping[str, Any] | None, *, path: str = "$.gateway"
) -> GatewayConfig:
    """Parse the raw ``[gateway]`` table.

    :raises ConfigError: listing every problem with its ``$.gateway...`` path.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError([f"{path}: expected a table, got {json_type_name(raw)}"])
    own = {key: value for key, value in raw.items() if key in _OWN_KEYS}
    problems: list[str] = []
    extra: dict[str, Mapping[str, Any]] = {}
    for key, value in raw.items():
        if key in _OWN_KEYS:
            continue
        if isinstance(value, Mapping):
            # A third-party platform's own settings; its adapter checks them.
            extra[str(key)] = dict(value)
        else:
            problems.append(
                f"{path}.{key}: unknown key (platform settings go in a [gateway.<platform>] table)"
            )
    try:
        config = structure_settings(own, GatewayConfig, path)
    except ConfigError as exc:
        problems[:0] = exc.problems
    if problems:
        raise ConfigError(problems)
    return attrs.evolve(config, extra=extra)


def with_overrides(config: GatewayConfig, **changes: Any) -> GatewayConfig:
    """A copy of ``config`` with top-level fields changed (``webhook_<field>`` for the webhook)."""
    webhook_changes = {
        key.removeprefix("webhook_"): changes.pop(key)
        for key in list(changes)
        if key.startswith("webhook_")
    }
    if webhook_changes:
        changes["webhook"] = attrs.evolve(config.webhook, **webhook_changes)
    return attrs.evolve(config, **changes)
