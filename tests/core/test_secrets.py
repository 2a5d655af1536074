"""lich.secrets and the redaction of provider errors where they enter lich."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from lich.events import Failover, Retry
from lich.providers import redacting_chat
from lich.secrets import redact_values, secret_values
from lich.types import ChatOptions, ChatResult, Message, ProviderError, ToolDefinition

KEY = "sk-core-test-key-123456789"


def test_secret_values_cover_named_and_secret_looking_variables() -> None:
    env = {"ODD_VAR": "odd-value-1", "GITHUB_TOKEN": "ghp-value-2", "PLAIN": "plain-value",
           "SHORT_TOKEN": "abc"}
    assert secret_values({"ODD_VAR"}, env) == {"odd-value-1", "ghp-value-2"}


def test_redact_values_hides_the_longer_secret_whole() -> None:
    text = "a=secret-outer-secret-inner b=secret-inner"
    assert redact_values(text, ["secret-inner", "secret-outer-secret-inner"]) == (
        "a=[redacted] b=[redacted]")


async def test_a_provider_error_is_redacted_with_its_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ODD_PROVIDER_VAR", KEY)

    async def chat(
        messages: Sequence[Message], tools: Sequence[ToolDefinition], options: ChatOptions
    ) -> ChatResult:
        raise ProviderError("auth", "p", f"bad key {KEY}", status=401,
                            attempts=(("p", 1, "auth", f"echo {KEY}"),))

    wrapped = redacting_chat(chat, {"ODD_PROVIDER_VAR"})
    with pytest.raises(ProviderError) as caught:
        await wrapped([], [], ChatOptions())
    err = caught.value
    assert KEY not in str(err)
    assert err.message == "bad key [redacted]"
    assert err.attempts == (("p", 1, "auth", "echo [redacted]"),)
    assert err.status == 401
    assert err.__cause__ is None
    assert err.__suppress_context__


async def test_retry_and_failover_events_during_the_call_are_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ODD_PROVIDER_VAR", KEY)
    seen: list[object] = []

    async def chat(
        messages: Sequence[Message], tools: Sequence[ToolDefinition], options: ChatOptions
    ) -> ChatResult:
        options.emit(Retry("p", 1, "rate_limit", 0.0, f"slow down {KEY}"))
        options.emit(Failover("p", "q", "auth", f"bad key {KEY}"))
        raise ProviderError("auth", "q", "no")

    wrapped = redacting_chat(chat, {"ODD_PROVIDER_VAR"})
    with pytest.raises(ProviderError):
        await wrapped([], [], ChatOptions(on_event=seen.append))
    assert seen == [Retry("p", 1, "rate_limit", 0.0, "slow down [redacted]"),
                    Failover("p", "q", "auth", "bad key [redacted]")]
