"""Plugins for testing approval policies and approval front ends.

An approval has two sides: a policy that answers a call ``Ask`` (a before- or
check-hook), and an approver that answers the question (``lich_request_approval``,
what a terminal, the TUI or the gateway does for a person). A test of one side
stands in for the other with these:

* :class:`AskFor` — a policy: ``Ask`` for every call of the named tools;
* :class:`ScriptedApprover` — an approver answering from the test's script and
  recording every request it was asked.

Both are plain plugin objects: pass them to ``Agent(plugins=[("ask", AskFor("echo")),
("ui", ScriptedApprover(Approval(True)))])`` or to ``lich_agent_factory(objects=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from lich.hooks import Approval, ApprovalRequest, Ask, hookimpl

if TYPE_CHECKING:
    from lich.types import ToolCall

__all__ = ["AskFor", "ScriptedApprover"]


class AskFor:
    """A plugin whose ``lich_before_tool_call`` answers ``Ask(reason)`` for calls of the
    tools ``names`` (and ``None`` for any other, which it leaves to the other plugins)."""

    def __init__(self, *names: str, reason: str = "needs a human") -> None:
        self.names = frozenset(names)
        self.reason = reason

    @hookimpl
    def lich_before_tool_call(self, call: ToolCall) -> Ask | None:
        """``Ask(reason)`` for a named tool's call."""
        return Ask(self.reason) if call.name in self.names else None


class ScriptedApprover:
    """An approver answering every ``lich_request_approval`` from a script.

    ``answer`` is the answer to every request (an :class:`~lich.Approval`, or ``None``:
    "I cannot ask", so the next approver is asked, or the call is denied as
    ``approval_unavailable`` when there is none), or a function of the
    :class:`~lich.ApprovalRequest` returning one — to approve with edited arguments,
    answer by tool, or count. :attr:`requests` holds every request, in order.
    """

    def __init__(self, answer: Approval | Callable[[ApprovalRequest], Approval | None] | None
                 ) -> None:
        self.answer = answer
        #: Every request this approver was asked, in order.
        self.requests: list[ApprovalRequest] = []

    @hookimpl
    async def lich_request_approval(self, request: ApprovalRequest) -> Approval | None:
        """Record ``request``; the scripted answer."""
        self.requests.append(request)
        if callable(self.answer):
            return self.answer(request)
        return self.answer
