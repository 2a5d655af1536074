"""Shared helpers for the core tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from lich.events import Envelope
from lich.types import AssistantMessage, Message, ToolMessage

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``tests/core/fixtures`` importable by module name; its modules forgotten afterwards."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    before = set(sys.modules)
    yield FIXTURES
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) or ""
        if origin.startswith(str(FIXTURES)):
            del sys.modules[name]


def event_types(envelopes: Sequence[Envelope]) -> list[str]:
    """The ``type`` of each envelope's event, in order."""
    return [e.event.type for e in envelopes]


def assert_valid_transcript(messages: Sequence[Message]) -> None:
    """Every tool call is answered exactly once, right after its assistant message,
    and no tool result answers a call that was not made."""
    i = 0
    while i < len(messages):
        message = messages[i]
        if isinstance(message, ToolMessage):
            raise AssertionError(f"orphan tool result at {i}: {message}")
        i += 1
        if isinstance(message, AssistantMessage) and message.tool_calls:
            wanted = [c.id for c in message.tool_calls]
            answered = []
            while i < len(messages) and isinstance(messages[i], ToolMessage):
                answer = messages[i]
                assert isinstance(answer, ToolMessage)
                answered.append(answer.tool_call_id)
                i += 1
            assert answered == wanted, f"tool calls {wanted} answered by {answered}"
