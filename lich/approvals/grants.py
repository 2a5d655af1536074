"""What ``session`` and ``always`` approvals granted, per session, and the short ids
of pending approval requests.

A grant is a list of ``[approvals]`` allow rules (``terminal(git status*)``) —
the rules the person was shown — matched exactly as the rules of a config file
are (:mod:`lich.approvals.rules`), so "the same tool and pattern for the rest of
the session" means what the rule says. Grants live in memory with the agent:
a new process starts asking again (an ``always`` approval also wrote its rules
to a config file, which the approvals plugin reads at the next start).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lich.types import ToolCall

if TYPE_CHECKING:
    from lich.tools import Tool

__all__ = ["ApprovalGrants"]

# The ids of requests waiting for an answer anywhere in this process: the gateway's
# `/approve 3f2a` names one, so two pending requests must never share an id.
_pending: set[str] = set()
_pending_lock = threading.Lock()


class ApprovalGrants:
    """The allow rules granted by ``session``/``always`` approvals, by session id."""

    def __init__(self) -> None:
        self._granted: dict[str, list[str]] = {}

    def rules_for(self, call: ToolCall, tool: Tool | None, work_dir: str) -> tuple[str, ...]:
        """The rules a ``session`` or ``always`` approval of ``call`` grants."""
        from lich.approvals.rules import suggest_rules

        return suggest_rules(call.name, call.args, tool, work_dir)

    def covers(self, session_id: str, call: ToolCall, tool: Tool | None, work_dir: str) -> bool:
        """Whether the session's grants already allow ``call``."""
        granted = self._granted.get(session_id)
        if not granted:
            return False
        from lich.approvals.rules import rules_cover

        return rules_cover(granted, call.name, call.args, tool, work_dir)

    def grant(self, session_id: str, rules: Sequence[str]) -> None:
        """Allow ``rules`` for the rest of ``session_id``."""
        granted = self._granted.setdefault(session_id, [])
        granted.extend(r for r in rules if r not in granted)

    def granted(self, session_id: str) -> tuple[str, ...]:
        """The rules granted in ``session_id`` so far."""
        return tuple(self._granted.get(session_id, ()))

    @staticmethod
    def new_request_id() -> str:
        """A short id no pending request of this process has (4 hex digits, longer
        only if those run out)."""
        with _pending_lock:
            size = 2
            while True:
                for _ in range(64):
                    candidate = secrets.token_hex(size)
                    if candidate not in _pending:
                        _pending.add(candidate)
                        return candidate
                size += 1

    @staticmethod
    @contextmanager
    def pending(request_id: str) -> Iterator[None]:
        """Hold ``request_id`` while its request waits; released afterwards."""
        try:
            yield
        finally:
            with _pending_lock:
                _pending.discard(request_id)


