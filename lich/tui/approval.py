"""The TUI's approver: ``lich_request_approval`` answered by a person in a modal dialog.

:class:`TuiApprover` is an in-process plugin the app registers on its agent's
plugin host. For each request it pushes an
:class:`~lich.tui.widgets.approval.ApprovalScreen` and awaits the person's
answer. One question at a time: a second request (another call of the same
run) waits until the first is answered.

When lich stops waiting — ``approval_timeout_s`` passed, the run was cancelled
— the awaiting coroutine is cancelled; the dialog is then closed here and the
transcript says why. An ``always`` answer writes the request's rules to the
config file the person chose; if that write fails, the error is shown and the
call is approved for the session only (the rules still cover the session, and
nothing claims to be saved that is not).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lich.hooks import Approval, ApprovalRequest, hookimpl
from lich.tui.widgets.approval import APPROVER, ApprovalAnswer, ApprovalScreen

if TYPE_CHECKING:
    from lich.tui.app import LichApp

__all__ = ["PLUGIN_NAME", "RuleWriter", "TuiApprover"]

PLUGIN_NAME = "tui"
"""The approver's plugin name on the agent's host."""

RuleWriter = Callable[[Path, Sequence[str]], object]
"""Writes allow rules to a config file (``lich.approvals.store.add_allow_rules``)."""


class TuiApprover:
    """Answers ``lich_request_approval`` with a modal dialog in ``app``.

    :param app: the running TUI.
    :param targets: where an ``always`` answer may write, as ``(label, path)``
        pairs, asked for each request (the config may have changed); ``None`` or
        an empty answer: ``always`` is not offered.
    :param write_rules: writes the rules to the chosen file.
    """

    def __init__(
        self,
        app: LichApp,
        *,
        targets: Callable[[], Sequence[tuple[str, Path]]] | None = None,
        write_rules: RuleWriter | None = None,
    ) -> None:
        self.app = app
        self.targets = targets
        self.write_rules = write_rules
        self.screen: ApprovalScreen | None = None
        self._turn = asyncio.Lock()

    @hookimpl
    async def lich_request_approval(self, request: ApprovalRequest) -> Approval | None:
        """Ask the person in a dialog; ``None`` when the TUI is not running (the next
        approver, if any, is asked)."""
        if not self.app.is_running:
            return None
        async with self._turn:  # never two dialogs at once
            answer = await self._ask(request)
        if answer.write_to is None:
            return answer.approval
        return await self._write(request, *answer.write_to)

    async def _ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        future: asyncio.Future[ApprovalAnswer] = asyncio.get_running_loop().create_future()
        targets = list(self.targets()) if self.targets is not None and request.rules else []
        if self.write_rules is None:
            targets = []
        screen = ApprovalScreen(request, future, targets)
        self.screen = screen
        try:
            self.app.push_screen(screen)
            return await future
        except asyncio.CancelledError:
            self._withdraw(screen, request)
            raise
        finally:
            self.screen = None

    def _withdraw(self, screen: ApprovalScreen, request: ApprovalRequest) -> None:
        """lich stopped waiting: close the dialog and say why."""
        if not screen.answer.done():
            screen.answer.cancel()
        app = self.app
        if app.screen is screen:
            app.pop_screen()
        # (Covered by another screen, the dialog closes itself when it is uncovered.)
        if app.run_cancelled():
            why = "the run was cancelled"
        elif request.timeout_s is not None:
            why = f"no answer within {request.timeout_s:g}s (approval_timeout_s)"
        else:
            why = "lich stopped waiting"
        app.call_later(app.notice, f"· approval dialog for {request.call.name} closed: {why}",
                       "warn")

    async def _write(self, request: ApprovalRequest, label: str, path: Path) -> Approval:
        """``always``: write the rules, or fall back to the session when that fails."""
        assert self.write_rules is not None
        rules = list(request.rules)
        try:
            await asyncio.to_thread(self.write_rules, path, rules)
        except Exception as exc:  # an OSError, or a config file that does not parse
            problem = f"{type(exc).__name__}: {exc}"
            await self.app.notice(
                f"· could not add the rules to {path} ({problem}); approved for this "
                "session only", "error")
            return Approval(True, scope="session", approver=APPROVER,
                            message=f"always not saved to {path}: {problem}")
        await self.app.notice(f"· added to [approvals] allow in {path} ({label}): "
                              + ", ".join(rules))
        return Approval(True, scope="always", approver=APPROVER)
