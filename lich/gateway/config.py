"""The ``[gateway]`` configuration table, parsed and checked.

:class:`lich.config.LichConfig` keeps ``gateway`` as a raw mapping (the core
does not know the platforms); :func:`parse_gateway_config` turns it into
frozen :class:`GatewayConfig` values and reports every problem at once as a
:class:`lich.config.ConfigError` with ``$.gateway...`` paths.

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

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs
from attrs import field, frozen

from lich.config import ConfigError
from lich.types import json_type_name

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


@frozen
class WebhookSettings:
    """``[gateway.webhook]``: an HTTP endpoint, loopback-only unless a token is set."""

    host: str = "127.0.0.1"
    port: int = 8089
    token_env: str = "LICH_GATEWAY_TOKEN"
    max_body_bytes: int = 1_048_576


@frozen
class TelegramSettings:
    """``[gateway.telegram]``: Bot API long polling."""

    base_url: str = "https://api.telegram.org"
    token_env: str = "LICH_TELEGRAM_BOT_TOKEN"
    allowlist: Allowlist = Allowlist()
    poll_timeout_s: int = 50
    backoff_min_s: float = 2.0
    backoff_max_s: float = 30.0
    send_interval_s: float = 1.0
    send_retries: int = 4
    max_retry_after_s: float = 60.0
    max_reply_chars: int = 4096


@frozen
class DiscordSettings:
    """``[gateway.discord]``: gateway websocket in, REST out."""

    gateway_url: str = "wss://gateway.discord.gg/?v=10&encoding=json"
    api_base_url: str = "https://discord.com/api/v10"
    token_env: str = "LICH_DISCORD_BOT_TOKEN"
    allowlist: Allowlist = Allowlist()
    require_mention: bool = True
    intents: int = DISCORD_DEFAULT_INTENTS
    use_resume_url: bool = True
    backoff_min_s: float = 1.0
    backoff_max_s: float = 60.0
    invalid_session_delay_s: float = 2.0
    send_retries: int = 4
    max_retry_after_s: float = 60.0
    max_reply_chars: int = 2000


@frozen
class TwitchSettings:
    """``[gateway.twitch]``: IRC over websocket."""

    url: str = "wss://irc-ws.chat.twitch.tv:443"
    token_env: str = "LICH_TWITCH_OAUTH_TOKEN"
    nick: str = ""
    nick_env: str = "LICH_TWITCH_NICK"
    channels: tuple[str, ...] = ()
    allowlist: Allowlist = Allowlist()
    rate_limit_messages: int = 20
    rate_limit_window_s: float = 30.0
    backoff_min_s: float = 1.0
    backoff_max_s: float = 60.0
    max_reply_chars: int = 500


@frozen
class GatewayConfig:
    """The whole ``[gateway]`` table.

    ``tools`` is ``None`` for "the tools the main config allows" (``"all"``);
    ``extra`` holds the raw tables of third-party platforms.
    """

    platforms: tuple[str, ...] = ("webhook",)
    tools: tuple[str, ...] | None = DEFAULT_GATEWAY_TOOLS
    history_cap: int = 40
    max_conversations: int = 200
    queue_limit: int = 5
    grace_s: float = 30.0
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


# ---------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------

Checker = Callable[[Any, str, list[str]], Any]
_MISSING = object()


def _type_name(value: Any) -> str:
    # A config file's mappings are TOML tables.
    return "table" if isinstance(value, Mapping) else json_type_name(value)


def _string(*, nonempty: bool = False) -> Checker:
    def check(value: Any, path: str, problems: list[str]) -> Any:
        if not isinstance(value, str):
            problems.append(f"{path}: expected a string, got {_type_name(value)}")
            return _MISSING
        if nonempty and not value.strip():
            problems.append(f"{path}: must not be empty")
            return _MISSING
        return value

    return check


def _url(*schemes: str) -> Checker:
    def check(value: Any, path: str, problems: list[str]) -> Any:
        if not isinstance(value, str):
            problems.append(f"{path}: expected a URL string, got {_type_name(value)}")
            return _MISSING
        parts = urlsplit(value)
        if parts.scheme not in schemes or not parts.netloc:
            problems.append(
                f"{path}: expected a {' or '.join(schemes)} URL, got {value!r}"
            )
            return _MISSING
        return value.rstrip("/") if parts.scheme.startswith("http") else value

    return check


def _integer(lo: int, hi: int | None = None) -> Checker:
    def check(value: Any, path: str, problems: list[str]) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{path}: expected an integer, got {_type_name(value)}")
            return _MISSING
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            problems.append(f"{path}: must be {bound}, got {value}")
            return _MISSING
        return value

    return check


def _number(lo: float, *, strict: bool = False) -> Checker:
    def check(value: Any, path: str, problems: list[str]) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(f"{path}: expected a number, got {_type_name(value)}")
            return _MISSING
        if value < lo or (strict and value == lo):
            word = "greater than" if strict else "at least"
            problems.append(f"{path}: must be {word} {lo:g}, got {value}")
            return _MISSING
        return float(value)

    return check


def _boolean(value: Any, path: str, problems: list[str]) -> Any:
    if not isinstance(value, bool):
        problems.append(f"{path}: expected true or false, got {_type_name(value)}")
        return _MISSING
    return value


def _ids(*, lower: bool = False) -> Checker:
    """A list of ids: strings or integers (Telegram and Discord ids are numbers)."""

    def check(value: Any, path: str, problems: list[str]) -> Any:
        if not isinstance(value, list | tuple):
            problems.append(f"{path}: expected an array of ids, got {_type_name(value)}")
            return _MISSING
        out: list[str] = []
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, str | int):
                problems.append(
                    f"{path}[{i}]: expected a string or an integer, got {_type_name(item)}"
                )
                continue
            text = str(item).strip()
            if not text:
                problems.append(f"{path}[{i}]: must not be empty")
                continue
            out.append(text.lower() if lower else text)
        return tuple(out)

    return check


def _channels(value: Any, path: str, problems: list[str]) -> Any:
    items = _ids(lower=True)(value, path, problems)
    if items is _MISSING:
        return items
    return tuple(dict.fromkeys(c.lstrip("#") for c in items if c.lstrip("#")))


def _tools(value: Any, path: str, problems: list[str]) -> Any:
    if value == "all":
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        problems.append(f'{path}: expected "all" or an array of tool names')
        return _MISSING
    return tuple(value)


def _platforms(value: Any, path: str, problems: list[str]) -> Any:
    if not isinstance(value, list | tuple):
        problems.append(f"{path}: expected an array of platform names, got {_type_name(value)}")
        return _MISSING
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            problems.append(f"{path}[{i}]: expected a platform name")
            continue
        out.append(item.strip())
    return tuple(dict.fromkeys(out))


_ALLOWLIST_KEYS = {"allowed_users", "allowed_chats"}

_WEBHOOK_FIELDS: dict[str, Checker] = {
    "host": _string(nonempty=True),
    "port": _integer(0, 65535),
    "token_env": _string(nonempty=True),
    "max_body_bytes": _integer(1),
}
_BACKOFF_FIELDS: dict[str, Checker] = {
    "backoff_min_s": _number(0),
    "backoff_max_s": _number(0),
}
_TELEGRAM_FIELDS: dict[str, Checker] = {
    "base_url": _url("http", "https"),
    "token_env": _string(nonempty=True),
    "poll_timeout_s": _integer(0, 600),
    **_BACKOFF_FIELDS,
    "send_interval_s": _number(0),
    "send_retries": _integer(0, 100),
    "max_retry_after_s": _number(0),
    "max_reply_chars": _integer(16, 4096),
}
_DISCORD_FIELDS: dict[str, Checker] = {
    "gateway_url": _url("ws", "wss"),
    "api_base_url": _url("http", "https"),
    "token_env": _string(nonempty=True),
    "require_mention": _boolean,
    "intents": _integer(0),
    "use_resume_url": _boolean,
    **_BACKOFF_FIELDS,
    "invalid_session_delay_s": _number(0),
    "send_retries": _integer(0, 100),
    "max_retry_after_s": _number(0),
    "max_reply_chars": _integer(16, 2000),
}
_TWITCH_FIELDS: dict[str, Checker] = {
    "url": _url("ws", "wss"),
    "token_env": _string(nonempty=True),
    "nick": _string(),
    "nick_env": _string(nonempty=True),
    "channels": _channels,
    "rate_limit_messages": _integer(1),
    "rate_limit_window_s": _number(0, strict=True),
    **_BACKOFF_FIELDS,
    "max_reply_chars": _integer(16, 500),
}
_TOP_FIELDS: dict[str, Checker] = {
    "platforms": _platforms,
    "tools": _tools,
    "history_cap": _integer(2),
    "max_conversations": _integer(1),
    "queue_limit": _integer(1),
    "grace_s": _number(0),
}
_PLATFORM_TABLES: dict[str, tuple[type[Any], dict[str, Checker], bool]] = {
    # name: (settings class, fields, has an allowlist)
    "webhook": (WebhookSettings, _WEBHOOK_FIELDS, False),
    "telegram": (TelegramSettings, _TELEGRAM_FIELDS, True),
    "discord": (DiscordSettings, _DISCORD_FIELDS, True),
    "twitch": (TwitchSettings, _TWITCH_FIELDS, True),
}


def _parse_table(
    raw: Mapping[str, Any],
    path: str,
    fields: Mapping[str, Checker],
    problems: list[str],
    allow_extra: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in raw.items():
        checker = fields.get(key)
        if checker is None:
            if key not in allow_extra:
                problems.append(f"{path}.{key}: unknown key")
            continue
        parsed = checker(value, f"{path}.{key}", problems)
        if parsed is not _MISSING:
            values[key] = parsed
    return values


def _parse_platform(
    name: str, raw: Any, path: str, problems: list[str]
) -> Any:
    cls, fields, has_allowlist = _PLATFORM_TABLES[name]
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: expected a table, got {_type_name(raw)}")
        return cls()
    extra = frozenset(_ALLOWLIST_KEYS) if has_allowlist else frozenset()
    values = _parse_table(raw, path, fields, problems, extra)
    if has_allowlist:
        lower = name == "twitch"  # Twitch logins and channels are case-insensitive
        users = _ids(lower=lower)(raw.get("allowed_users", ()), f"{path}.allowed_users", problems)
        chats_check = _channels if name == "twitch" else _ids()
        chats = chats_check(raw.get("allowed_chats", ()), f"{path}.allowed_chats", problems)
        values["allowlist"] = Allowlist(
            frozenset(users) if users is not _MISSING else frozenset(),
            frozenset(chats) if chats is not _MISSING else frozenset(),
        )
    lo, hi = values.get("backoff_min_s"), values.get("backoff_max_s")
    lo = lo if lo is not None else getattr(cls(), "backoff_min_s", None)
    hi = hi if hi is not None else getattr(cls(), "backoff_max_s", None)
    if lo is not None and hi is not None and lo > hi:
        problems.append(
            f"{path}.backoff_max_s: must be at least backoff_min_s ({lo:g}), got {hi:g}"
        )
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # pragma: no cover - the checkers catch these first
        problems.append(f"{path}: {exc}")
        return cls()


def parse_gateway_config(
    raw: Mapping[str, Any] | None, *, path: str = "$.gateway"
) -> GatewayConfig:
    """Parse the raw ``[gateway]`` table.

    :raises ConfigError: listing every problem with its ``$.gateway...`` path.
    """
    problems: list[str] = []
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError([f"{path}: expected a table, got {_type_name(raw)}"])
    top: dict[str, Any] = {}
    platforms: dict[str, Any] = {}
    extra: dict[str, Mapping[str, Any]] = {}
    for key, value in raw.items():
        if key in _TOP_FIELDS:
            parsed = _TOP_FIELDS[key](value, f"{path}.{key}", problems)
            if parsed is not _MISSING:
                top[key] = parsed
        elif key in _PLATFORM_TABLES:
            platforms[key] = _parse_platform(key, value, f"{path}.{key}", problems)
        elif isinstance(value, Mapping):
            # A third-party platform's own settings; its adapter checks them.
            extra[str(key)] = dict(value)
        else:
            problems.append(
                f"{path}.{key}: unknown key (platform settings go in a [gateway.<platform>] table)"
            )
    if problems:
        raise ConfigError(problems)
    return GatewayConfig(**top, **platforms, extra=extra)


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
