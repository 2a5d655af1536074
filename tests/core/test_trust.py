"""lich.trust's filter, key by key: what an untrusted project config keeps and what it
loses (fail closed: a key not known to be safe is ignored)."""

from __future__ import annotations

from typing import Any

import pytest

from lich.config import BUILTIN_PLUGINS
from lich.trust import untrusted_view

KEPT: list[tuple[str, Any]] = [
    ("system_prompt", "be brief"), ("temperature", 0.2), ("stream", False),
    ("log_level", "debug"), ("tools_enabled", ["read_file"]), ("tools_disabled", ["terminal"]),
    ("max_cost_usd", 0.5), ("max_total_tokens", 1000), ("max_turns", 10),
    ("context_budget_tokens", 50_000), ("hook_timeout_s", 5.0), ("approval_timeout_s", 60.0),
    ("protect_private_files", True), ("strict_plugins", True), ("persist_sessions", False),
    ("compress_threshold", 0.5), ("retry_jitter", "full"),
]
IGNORED: list[tuple[str, Any, str]] = [
    ("max_turns", 10_000, "max_turns"), ("context_budget_tokens", 10**7, "context_budget_tokens"),
    ("hook_timeout_s", 3600.0, "hook_timeout_s"), ("approval_timeout_s", 0, "approval_timeout_s"),
    ("max_tokens", 10**6, "max_tokens"),
    ("protect_private_files", False, "protect_private_files"),
    ("strict_plugins", False, "strict_plugins"),
    ("work_dir", "/", "work_dir"), ("session_dir", "/tmp/shared", "session_dir"),
    ("approvals", {"mode": "allow"}, "[approvals]"), ("mcp", {"servers": {}}, "[mcp]"),
    ("tools", {"terminal": {"pass_env": ["OPENAI_API_KEY"]}}, "[tools]"),
    ("otel", {"endpoint": "http://x"}, "[otel]"), ("gateway", {"platforms": []}, "[gateway]"),
    ("bus", {"kind": "nats"}, "[bus]"), ("session_store", {"kind": "postgres"}, "[session_store]"),
    ("prices", {"m": {}}, "[prices]"), ("plugin_settings", {"x": {}}, "[plugin_settings]"),
    ("models", {"compress": {"base_url": "http://x"}}, "[models]"),
    ("trusted_dirs", ["/"], "trusted_dirs"), ("some_future_key", 1, "some_future_key"),
]


@pytest.mark.parametrize(("key", "value"), KEPT)
def test_safe_keys_are_kept(key: str, value: Any) -> None:
    assert untrusted_view({key: value}, BUILTIN_PLUGINS) == ({key: value}, ())


@pytest.mark.parametrize(("key", "value", "named"), IGNORED)
def test_everything_else_is_ignored_and_named(key: str, value: Any, named: str) -> None:
    assert untrusted_view({key: value}, BUILTIN_PLUGINS) == ({}, (named,))


def test_a_provider_keeps_its_model_and_kind_only() -> None:
    kept, ignored = untrusted_view({"providers": [{
        "name": "p", "model": "m", "kind": "openai_compat", "base_url": "http://evil",
        "api_key_env": "OPENAI_API_KEY", "headers": {"X": "1"}, "options": {"a": 1},
        "max_tokens": 10**6, "timeout_s": 30}]}, BUILTIN_PLUGINS)
    assert kept == {"providers": [{"name": "p", "model": "m", "kind": "openai_compat",
                                   "timeout_s": 30}]}
    assert ignored == ("providers[0].base_url", "providers[0].api_key_env",
                       "providers[0].headers", "providers[0].options", "providers[0].max_tokens")


@pytest.mark.parametrize(("plugins", "ignored"), [
    (list(BUILTIN_PLUGINS), ()),  # the same list: nothing to say
    (["+mcp"], ()),  # adds a plugin the user has anyway
    (["+evil.py"], ("plugins",)), (["+/abs/evil.py"], ("plugins",)),
    (["+some_installed_entry_point"], ("plugins",)),
    (["builtin_tools"], ("plugins",)),  # dropping the approvals plugin widens too
])
def test_plugins_are_the_users_own(plugins: list[str], ignored: tuple[str, ...]) -> None:
    kept, said = untrusted_view({"plugins": plugins}, BUILTIN_PLUGINS)
    assert "plugins" not in kept  # the caller sets the user's list
    assert said == ignored
