"""The TUI's slash commands: each command of the shared table (:mod:`lich.slash`)
mapped to what the app does.

The table says which commands there are, how they are spelled and what
``/help`` says; this module only says what each one does in the TUI. The
operations that change the conversation (a new session, a resumed one, another
model) are the app's own methods, also used outside commands (``--resume``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from textual.binding import Binding

from lich.slash import SlashContext, SlashInput, SlashTable, model_lines, run_slash_command
from lich.tui.format.blocks import NoticeLevel
from lich.tui.format.commands import model_line, session_list_lines, usage_line

if TYPE_CHECKING:
    from lich.tui.app import LichApp

__all__ = ["TuiCommands", "key_bindings", "key_name", "keys_help_lines"]

_KEY_NAMES = {"escape": "Esc", "ctrl": "Ctrl", "shift": "Shift", "pageup": "PgUp",
              "pagedown": "PgDn"}


def key_name(key: str) -> str:
    """How ``/help`` writes a Textual key: ``ctrl+o`` → ``Ctrl+O``, ``escape`` → ``Esc``,
    ``enter,space`` → ``Enter/Space``."""
    def one(k: str) -> str:
        return "+".join(_KEY_NAMES.get(p, p.upper() if len(p) == 1 else p.capitalize())
                        for p in k.strip().split("+"))

    return "/".join(one(k) for k in key.split(","))


def key_bindings() -> list[Binding]:
    """Every key binding lich declares, in the order ``/help`` lists them: the input's
    first (what is typed most), then the app's, then the tool result lines'."""
    from lich.tui.app import LichApp
    from lich.tui.widgets.prompt import PromptInput
    from lich.tui.widgets.tool_view import ToolResultLine

    out: list[Binding] = []
    for owner in (PromptInput, LichApp, ToolResultLine):
        for binding in owner.BINDINGS:
            if isinstance(binding, Binding):
                out.append(binding)
            else:  # the tuple form Textual also accepts: (key, action[, description])
                out.append(Binding(*binding))
    return out


def keys_help_lines() -> list[str]:
    """The keys part of ``/help``, made from the bindings themselves so it cannot drift."""
    bindings = key_bindings()
    width = max(len(key_name(b.key)) for b in bindings)
    return ["keys:", *(f"  {key_name(b.key):<{width}}  {b.description}" for b in bindings)]

Handler = Callable[[str], Awaitable[None]]


class TuiCommands:
    """Runs slash commands in ``app``; output goes to the transcript as notices."""

    def __init__(self, app: LichApp) -> None:
        self.app = app
        #: The slash commands: the TUI's own and every loaded plugin's.
        self.table: SlashTable = app.agent.host.slash_commands()

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
        handler = self.handlers().get(command.command.name)
        if handler is not None and command.command.run is None:
            await handler(command.args)
            return
        # A plugin's command: its text as a notice; a failure is an error notice.
        context = SlashContext(command.args, "tui", self.app.session_id, self.app.agent.config,
                               host=self.app.agent.host)
        try:
            text = await run_slash_command(command.command, context)
        except Exception as exc:
            await self.app.notice(
                f"· /{command.command.name} failed: {type(exc).__name__}: {exc}", "error")
            return
        if text:
            await self.app.notice(text)

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
        for line in (*self.table.help_lines("tui"), *keys_help_lines()):
            await self.app.notice(line)

    async def _model(self, args: str) -> None:
        if not args:
            agent = self.app.agent
            if not agent.providers:
                # An injected chat function (tests, embedding): no provider to list.
                await self.app.notice(model_line(self.app.model_name, self.app.provider_name))
                return
            default_kind = agent.provider_kinds.default_kind() or ""
            for line in model_lines(agent.config.providers, default_kind):
                await self.app.notice(f"· {line}")
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
