"""The TUI's slash commands: each command of the shared table (:mod:`lich._slash`)
mapped to what the app does.

The table says which commands there are, how they are spelled and what
``/help`` says; this module only says what each one does in the TUI. The
operations that change the conversation (a new session, a resumed one, another
model) are the app's own methods, also used outside commands (``--resume``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from lich._slash import SLASH_COMMANDS, SlashInput
from lich.tui.format.blocks import NoticeLevel
from lich.tui.format.commands import model_line, session_list_lines, usage_line

if TYPE_CHECKING:
    from lich.tui.app import LichApp

__all__ = ["KEYS_HELP", "TuiCommands"]

KEYS_HELP = (
    "keys: Enter send · Up/Down older/newer input · Esc cancel the run · "
    "Ctrl+O expand the newest tool output · Ctrl+Q quit"
)
"""The last line of ``/help``: the keys (the commands come from the shared table)."""

Handler = Callable[[str], Awaitable[None]]


class TuiCommands:
    """Runs slash commands in ``app``; output goes to the transcript as notices."""

    def __init__(self, app: LichApp) -> None:
        self.app = app

    def handlers(self) -> dict[str, Handler]:
        """The handler of each command, by its name in the shared table; a handler
        gets the argument, or ``""``."""
        return {
            "help": self._help,
            "model": self._model,
            "usage": self._usage,
            "clear": self._clear,
            "sessions": self._sessions,
            "resume": self._resume,
            "new": self._new,
            "exit": self._exit,
        }

    async def run(self, command: SlashInput) -> None:
        """Run ``command``; an unknown one is an error notice, a missing argument a warning."""
        if command.command is None or command.error is not None:
            level: NoticeLevel = "error" if command.command is None else "warn"
            await self.app.notice(
                f"· {command.error or f'unknown command /{command.typed}'}", level
            )
            return
        await self.handlers()[command.command.name](command.args)

    async def _refused_while_busy(self, what: str) -> bool:
        """True (after saying so) when a run is in flight: ``what`` changes the conversation."""
        if self.app.busy:
            await self.app.notice(
                f"· busy: {what} waits until the run ends (Esc cancels it)", "warn"
            )
        return self.app.busy

    async def _exit(self, _args: str) -> None:
        await self.app.action_quit()

    async def _help(self, _args: str) -> None:
        for line in (*SLASH_COMMANDS.help_lines("tui"), KEYS_HELP):
            await self.app.notice(line)

    async def _model(self, args: str) -> None:
        if not args:
            await self.app.notice(model_line(self.app.model_name, self.app.provider_name))
        elif not await self._refused_while_busy("/model NAME"):
            await self.app.switch_model(args)

    async def _usage(self, _args: str) -> None:
        await self.app.notice(usage_line(self.app.ui.total_usage))

    async def _clear(self, _args: str) -> None:
        await self.app.clear_transcript()

    async def _sessions(self, _args: str) -> None:
        app = self.app
        for line in session_list_lines(app.agent.sessions.list(), app.session_id):
            await app.notice(line)

    async def _resume(self, args: str) -> None:
        # The table requires the argument: the parser has refused a bare /resume already.
        if not await self._refused_while_busy("/resume"):
            await self.app.resume_session(args)

    async def _new(self, _args: str) -> None:
        if not await self._refused_while_busy("/new"):
            await self.app.new_session()
