"""Parsing ``[gateway]``: defaults, typed settings, every problem with its ``$.gateway`` path."""

from __future__ import annotations

import pytest

from lich.config import ConfigError, load_config
from lich.gateway.config import (
    DEFAULT_GATEWAY_TOOLS,
    Allowlist,
    GatewayConfig,
    parse_gateway_config,
    with_overrides,
)
from lich.gateway.runner import gateway_agent_config
from lich.testing import make_test_config


def test_defaults():
    config = parse_gateway_config({})
    assert config == GatewayConfig()
    assert config.platforms == ("webhook",)
    assert config.tools == DEFAULT_GATEWAY_TOOLS == (
        "read_file", "list_dir", "grep_files", "docs_read", "docs_search")
    assert (config.history_cap, config.max_conversations) == (40, 200)
    assert config.webhook.host == "127.0.0.1"
    assert config.webhook.max_body_bytes == 1_048_576
    assert config.telegram.poll_timeout_s == 50
    assert not config.telegram.allowlist.configured
    assert config.discord.max_reply_chars == 2000
    assert config.twitch.max_reply_chars == 500
    assert (config.twitch.rate_limit_messages, config.twitch.rate_limit_window_s) == (20, 30.0)
    assert parse_gateway_config(None) == config


def test_a_full_table():
    config = parse_gateway_config({
        "platforms": ["telegram", "discord", "telegram"],
        "tools": "all",
        "history_cap": 10,
        "telegram": {"base_url": "http://127.0.0.1:9/", "allowed_users": [1, "2"],
                     "allowed_chats": [-100]},
        "discord": {"require_mention": False, "allowed_chats": ["123"]},
        "twitch": {"channels": ["#Foo", "bar", "foo"], "allowed_users": ["Alice"]},
        "webhook": {"port": 0},
    })
    assert config.platforms == ("telegram", "discord")
    assert config.tools is None
    assert config.telegram.base_url == "http://127.0.0.1:9"
    assert config.telegram.allowlist == Allowlist(frozenset({"1", "2"}), frozenset({"-100"}))
    assert config.discord.require_mention is False
    assert config.twitch.channels == ("foo", "bar")
    assert config.twitch.allowlist.users == frozenset({"alice"})
    assert config.webhook.port == 0


def test_every_problem_is_reported_with_its_path():
    with pytest.raises(ConfigError) as info:
        parse_gateway_config({
            "platforms": "webhook",
            "tools": ["read_file", 3],
            "history_cap": 1,
            "grace_s": -1,
            "nonsense": 3,
            "telegram": {"base_url": "ftp://x", "poll_timeout_s": "50", "allowed_users": [1.5],
                         "allowed_chats": ["ok", " "], "typo": True},
            "discord": {"intents": True, "gateway_url": "https://not-a-websocket"},
            "twitch": {"channels": "lich", "allowed_chats": ["#"], "max_reply_chars": 501},
            "webhook": {"port": 70000, "host": "", "token_env": 5},
        })
    assert sorted(info.value.problems) == sorted([
        "$.gateway.platforms: expected an array of platform names, got string",
        "$.gateway.tools[1]: expected a tool name, got integer",
        "$.gateway.history_cap: must be at least 2, got 1",
        "$.gateway.grace_s: must be at least 0, got -1.0",
        "$.gateway.nonsense: unknown key (platform settings go in a [gateway.<platform>] table)",
        "$.gateway.telegram.base_url: expected a http or https URL, got 'ftp://x'",
        "$.gateway.telegram.poll_timeout_s: expected an integer, got string",
        "$.gateway.telegram.typo: unknown key",
        "$.gateway.telegram.allowed_users[0]: expected a string or an integer, got number",
        "$.gateway.telegram.allowed_chats[1]: must not be empty",
        "$.gateway.discord.intents: expected an integer, got boolean",
        "$.gateway.discord.gateway_url: expected a ws or wss URL, got 'https://not-a-websocket'",
        "$.gateway.twitch.channels: expected an array of ids, got string",
        "$.gateway.twitch.allowed_chats[0]: must not be empty",
        "$.gateway.twitch.max_reply_chars: must be between 16 and 500, got 501",
        "$.gateway.webhook.port: must be between 0 and 65535, got 70000",
        "$.gateway.webhook.host: must not be empty",
        "$.gateway.webhook.token_env: expected a string, got integer",
    ])


def test_the_webhook_connection_limits_and_allowed_hosts():
    webhook = parse_gateway_config({}).webhook
    assert (webhook.header_timeout_s, webhook.idle_timeout_s) == (10.0, 5.0)
    assert (webhook.max_connections, webhook.max_unauthenticated) == (100, 32)
    assert webhook.allowed_hosts == frozenset()
    listed = parse_gateway_config({"webhook": {
        "allowed_hosts": ["Lich.Example.", "[::1]", "10.0.0.7"], "header_timeout_s": 0.5}})
    assert listed.webhook.allowed_hosts == frozenset({"lich.example", "::1", "10.0.0.7"})
    assert listed.webhook.header_timeout_s == 0.5
    with pytest.raises(ConfigError) as info:
        parse_gateway_config({"webhook": {
            "header_timeout_s": 0, "idle_timeout_s": -1, "max_connections": 0,
            "allowed_hosts": ["gw.example:8089", "https://gw.example", " ", 7],
        }})
    assert sorted(info.value.problems) == sorted([
        "$.gateway.webhook.header_timeout_s: must be greater than 0, got 0.0",
        "$.gateway.webhook.idle_timeout_s: must be greater than 0, got -1.0",
        "$.gateway.webhook.max_connections: must be at least 1, got 0",
        "$.gateway.webhook.allowed_hosts[0]: expected a host name or an IP address without "
        "scheme or port, got 'gw.example:8089'",
        "$.gateway.webhook.allowed_hosts[1]: expected a host name or an IP address without "
        "scheme or port, got 'https://gw.example'",
        "$.gateway.webhook.allowed_hosts[2]: must not be empty",
        "$.gateway.webhook.allowed_hosts[3]: expected a host name, got integer",
    ])
    with pytest.raises(ConfigError, match=r"max_unauthenticated: must be at most "
                                          r"max_connections \(10\), got 32"):
        parse_gateway_config({"webhook": {"max_connections": 10}})


def test_a_typo_in_a_builtin_platform_table_names_the_key_meant():
    with pytest.raises(ConfigError) as info:
        parse_gateway_config({"telegram": {"allowed_user": [1]}, "platfroms": ["telegram"]})
    assert sorted(info.value.problems) == [
        "$.gateway.platfroms: unknown key (platform settings go in a [gateway.<platform>] table)",
        "$.gateway.telegram.allowed_user: unknown key (did you mean 'allowed_users'?)",
    ]


@pytest.mark.parametrize("platform", ["telegram", "discord", "twitch"])
def test_backoff_max_is_checked_against_backoff_min(platform):
    # A check across two fields: it is reported once both fields are numbers.
    with pytest.raises(ConfigError) as info:
        parse_gateway_config({platform: {"backoff_min_s": 5, "backoff_max_s": 1}})
    assert info.value.problems == [
        f"$.gateway.{platform}.backoff_max_s: must be at least backoff_min_s (5), got 1"]
    with pytest.raises(ConfigError) as info:
        parse_gateway_config({platform: {"backoff_min_s": 90}})  # above the default maximum
    assert info.value.problems == [
        f"$.gateway.{platform}.backoff_max_s: must be at least backoff_min_s (90), got "
        f"{parse_gateway_config({}).settings_for(platform).backoff_max_s:g}"]


def test_twitch_names_are_lower_cased_and_lose_their_hash():
    twitch = parse_gateway_config({"twitch": {
        "channels": ["#Foo", "BAR", "foo"],
        "allowed_users": ["Alice", "bob"],
        "allowed_chats": ["#Lich", 12],
    }}).twitch
    assert twitch.channels == ("foo", "bar")
    assert twitch.allowlist == Allowlist(frozenset({"alice", "bob"}), frozenset({"lich", "12"}))
    # Other platforms' ids are case-sensitive and kept as written.
    assert parse_gateway_config(
        {"discord": {"allowed_users": ["AbC"]}}).discord.allowlist.users == {"AbC"}


def test_not_a_table():
    with pytest.raises(ConfigError, match=r"\$\.gateway: expected a table, got array"):
        parse_gateway_config([1])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"\$\.gateway\.telegram: expected a table"):
        parse_gateway_config({"telegram": "yes"})


def test_third_party_platform_tables_are_kept_raw():
    config = parse_gateway_config({"matrix": {"homeserver": "https://m.example", "x": [1]},
                                   "extra": {"a": 1}})
    assert config.settings_for("matrix") == {"homeserver": "https://m.example", "x": [1]}
    # A platform may be called "extra": its table is its own, not GatewayConfig.extra.
    assert config.extra == {"matrix": {"homeserver": "https://m.example", "x": [1]},
                            "extra": {"a": 1}}
    assert config.settings_for("unknown") == {}
    assert config.settings_for("telegram") is config.telegram


def test_loaded_from_a_config_file(tmp_path):
    (tmp_path / ".lich").mkdir()
    (tmp_path / ".lich" / "config.toml").write_text(
        '[gateway]\nplatforms = ["telegram"]\n[gateway.telegram]\nallowed_users = [42]\n'
    )
    loaded = load_config(work_dir=tmp_path, env={}, trust=True)  # the test's own project
    assert parse_gateway_config(loaded.config.table("gateway")).telegram.allowlist.users == {"42"}


def test_allowlist_semantics():
    empty = Allowlist()
    assert not empty.configured
    assert not empty.allows("1", "1")
    users = Allowlist(frozenset({"1"}))
    assert users.allows("1", "anywhere")
    assert not users.allows("2", "1")
    chats = Allowlist(chats=frozenset({"g"}))
    assert chats.allows("anyone", "g")
    assert not chats.allows("anyone", "h")
    star = Allowlist(frozenset({"*"}))
    assert star.open
    assert star.allows("x", "y")
    assert not star.allows("x", "y", explicit=True)
    assert Allowlist(frozenset({"*", "x"})).allows("x", "y", explicit=True)


def test_overrides():
    config = with_overrides(GatewayConfig(), webhook_port=0, webhook_host="::1", grace_s=1.0)
    assert (config.webhook.port, config.webhook.host, config.grace_s) == (0, "::1", 1.0)


def test_the_gateway_toolset_never_widens_the_main_config(tmp_path):
    base = make_test_config(tmp_path)
    assert gateway_agent_config(base, GatewayConfig()).tools_enabled == DEFAULT_GATEWAY_TOOLS
    narrowed = make_test_config(tmp_path, tools_enabled=["read_file", "terminal"])
    assert gateway_agent_config(narrowed, GatewayConfig()).tools_enabled == ("read_file",)
    everything = GatewayConfig(tools=None)
    assert gateway_agent_config(narrowed, everything).tools_enabled == ("read_file", "terminal")
