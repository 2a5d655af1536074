"""What ``session`` and ``always`` approvals granted, per session.

A grant is a list of ``[approvals]`` allow rules (``terminal(git status*)``) —
the rules the person was shown — matched exactly as the rules of a config file
are (:mod:`lich.approvals.rules`), so "the same tool and pattern for the rest of
the session" means what the rule says. Grants live in memory, in the approvals
plugin (:data:`SESSION_GRANTS`, by session id, so a later run of the session and
the agent a ``/model`` switch makes keep them): a new process starts asking
again (an ``always`` approval also wrote its rules to a config file, which the
approvals plugin reads at the next start).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lich.types import ToolCall

if TYPE_CHECKING:
    from lich.tools import Tool

__all__ = ["MAX_SESSIONS", "SESSION_GRANTS", "ApprovalGrants"]

#: How many sessions' grants are kept; the least recently used beyond it are
#: forgotten (those sessions are asked again), so a long-lived gateway with ever
#: new conversations does not grow without bound.
MAX_SESSIONS = 4096


class ApprovalGrants:
    """The allow rules granted by ``session``/``always`` approvals, by session id.

    :param max_sessions: how many sessions to remember (least recently used go first).
    """

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._granted: OrderedDict[str, list[str]] = OrderedDict()
        self._max = max_sessions
        # Runs of one process (the gateway's conversations) grant and look up
        # concurrently from worker threads (plain-def hooks) and the loop.
        self._lock = threading.Lock()

    def rules_for(self, call: ToolCall, tool: Tool | None, work_dir: str) -> tuple[str, ...]:
        """The rules a ``session`` or ``always`` approval of ``call`` grants."""
        from lich.approvals.rules import suggest_rules

        return suggest_rules(call.name, call.args, tool, work_dir)

    def covers(self, session_id: str, call: ToolCall, tool: Tool | None, work_dir: str) -> bool:
        """Whether the session's grants already allow ``call``."""
        granted = self.granted(session_id)
        if not granted:
            return False
        from lich.approvals.rules import rules_cover

        return rules_cover(list(granted), call.name, call.args, tool, work_dir)

    def grant(self, session_id: str, rules: Sequence[str]) -> None:
        """Allow ``rules`` for the rest of ``session_id``."""
        with self._lock:
            granted = self._granted.setdefault(session_id, [])
            granted.extend(r for r in dict.fromkeys(rules) if r not in granted)
            self._granted.move_to_end(session_id)
            while len(self._granted) > self._max:
                self._granted.popitem(last=False)

    def granted(self, session_id: str) -> tuple[str, ...]:
        """The rules granted in ``session_id`` so far."""
        with self._lock:
            rules = self._granted.get(session_id)
            if rules is None:
                return ()
            self._granted.move_to_end(session_id)
            return tuple(rules)


#: The grants of every session of this process: the approvals plugin's own state.
SESSION_GRANTS = ApprovalGrants()
