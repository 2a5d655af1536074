"""The durable-turn tests' non-idempotent tool and the model that calls it.

``charge`` records every run in :data:`CHARGES` (a test clears it first), so "ran at
most once per call" is checked outside the transcript; the model answers ``pay N``
with one ``charge(N)`` call, then ``done: <text>``.
"""

from __future__ import annotations

from lich import hookimpl, tool
from lich.testing import Reply, ScriptRequest
from lich.tools import ToolRegistry
from lich.types import ToolCall

__all__ = ["CHARGES", "Tools", "charge", "responder"]

CHARGES: list[int] = []


@tool
def charge(amount: int) -> str:
    """Charge a card (not idempotent)."""
    CHARGES.append(amount)
    return f"charged {amount}"


class Tools:
    """A plugin registering :func:`charge`."""

    @hookimpl
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(charge)


def responder(request: ScriptRequest) -> Reply:
    """``pay N`` → one ``charge(N)`` call, then ``done: pay N``; anything else → done."""
    text = request.last_user()
    if text.startswith("pay ") and not request.tool_results_since_user():
        return Reply(tool_calls=[ToolCall("c1", "charge", {"amount": int(text[4:])})])
    return Reply(f"done: {text}")
