"""``lich chat``: a conversation at the prompt, with memory, in one session.

Each line is one run of the agent on the same session, with the history of
the previous runs. Ctrl-C cancels the run in flight (the chat goes on); at
the prompt it clears the line (terminal) or ends the chat (piped input).
Slash commands manage the session; they come from the table in
:mod:`lich.slash`, shared with the TUI, and ``/help`` lists them.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lich.cli._render import HumanRenderer, counted, make_err_console
from lich.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    assemble,
    echo_error,
)
from lich.cli.options import CliSettings, get_settings, json_option, session_options
from lich.cli.run import describe_provider_error, run_agent
from lich.private_files import touch_private
from lich.slash import SlashContext, SlashTable, model_lines, run_slash_command
from lich.visible import visible

if TYPE_CHECKING:
    from rich.console import Console

    from lich.agent import Agent
    from lich.config import LichConfig
    from lich.types import Message, Usage

__all__ = ["KEYS_HELP", "ChatSession", "chat", "chat_command"]

KEYS_HELP = "  Ctrl-C cancels a running answer; Ctrl-D leaves."
"""The last line of ``/help``: the keys (the commands come from the shared table)."""


class _LineReader:
    """Plain line input: piped stdin, or a terminal whose output is redirected."""

    def __init__(self, prompt: str | None) -> None:
        self.prompt = prompt

    async def read(self) -> str | None:
        if self.prompt:
            sys.stderr.write(self.prompt)
            sys.stderr.flush()
        # Blocking on purpose: between runs the loop has nothing else to do, and a Ctrl-C
        # raised here (default SIGINT handler) ends the chat at once.
        line = sys.stdin.readline()
        return None if line == "" else line.rstrip("\n")


class _PromptReader:
    """Line editing and persistent history with prompt_toolkit (both ends are terminals)."""

    def __init__(self) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, InMemoryHistory

        history: Any
        try:
            import platformdirs

            path = Path(platformdirs.user_state_dir("lich")) / "chat_history"
            touch_private(path)  # what was typed stays private: 0600 in a 0700 state dir
            history = FileHistory(str(path))
        except OSError:
            history = InMemoryHistory()
        self.session: Any = PromptSession(history=history)

    async def read(self) -> str | None:
        while True:
            try:
                return str(await self.session.prompt_async("> "))
            except KeyboardInterrupt:
                continue  # Ctrl-C at the prompt clears the line, as in a shell
            except EOFError:
                return None


class _ReadlineReader:
    """Line editing with the standard library's readline (when prompt_toolkit is missing)."""

    def __init__(self) -> None:
        import readline

        self.readline: Any = readline
        self.path: Path | None = None
        try:
            import platformdirs

            self.path = Path(platformdirs.user_state_dir("lich")) / "chat_history_readline"
            touch_private(self.path)  # what was typed stays private: 0600 in a 0700 state dir
            readline.read_history_file(str(self.path))
        except OSError:
            self.path = None

    async def read(self) -> str | None:
        try:
            # Blocking on purpose, as in _LineReader: between runs the loop is idle.
            line = input("> ")  # noqa: ASYNC250
        except EOFError:
            return None
        except KeyboardInterrupt:
            sys.stdout.write("\n")
            return ""  # Ctrl-C at the prompt clears the line, as in a shell
        if self.path is not None and line.strip():
            try:
                self.readline.append_history_file(1, str(self.path))
            except OSError:
                pass
        return line


class ChatSession:
    """The state of one ``lich chat``: agent, session id, history, usage so far."""

    def __init__(
        self, settings: CliSettings, config: LichConfig, agent: Agent, err: Console
    ) -> None:
        self.settings = settings
        self.config = config
        self.agent = agent
        self.err = err
        self.session_id = agent.sessions.new_id()
        self.history: list[Message] | None = None
        from lich.types import Usage

        self.total = Usage()
        self.last: Usage | None = None
        self.runs = 0
        # The chat's cost so far (None once a run's cost was unknown), and the last run's.
        self.cost: float | None = 0.0
        self.last_cost: float | None = None
        #: The slash commands: chat's own and every loaded plugin's.
        self.slash: SlashTable = agent.host.slash_commands()

    # ---------------------------------------------------------------- output

    def say(self, text: str, style: str = "dim") -> None:
        """A line for the user on stderr."""
        from rich.text import Text

        self.err.print(Text(visible(text), style=style if self.err.is_terminal else ""),
                       soft_wrap=True)

    # -------------------------------------------------------------- sessions

    def resume(self, ref: str) -> bool:
        """Continue session ``ref``; False (after saying why) when there is none."""
        from lich.sessions import SessionNotFound

        try:
            sid = self.agent.sessions.resolve(ref)
            history = self.agent.sessions.history(sid)
        except (SessionNotFound, ValueError, OSError) as exc:
            echo_error(str(exc))
            return False
        self.session_id, self.history = sid, history
        count = sum(1 for m in history if m.role in ("user", "assistant"))
        self.say(f"resumed session {sid} ({count} messages)")
        return True

    # -------------------------------------------------------------- commands

    def handlers(self) -> dict[str, Callable[[str], Awaitable[bool]]]:
        """The handler of each slash command, by its name in the shared table.

        A handler gets the argument (``""`` when none was given) and returns True
        when the chat should end.
        """
        return {
            "help": self._help, "model": self._model, "usage": self._usage,
            "clear": self._clear, "sessions": self._sessions, "resume": self._resume,
            "new": self._new, "exit": self._exit,
        }

    async def command(self, line: str) -> bool:
        """Handle a slash command line; True when the chat should end.

        An unknown command, or one missing its argument, is reported and the chat goes on.

        :raises ValueError: ``line`` is not a slash command.
        """
        parsed = self.slash.parse(line, "chat")
        if parsed is None:
            raise ValueError(f"not a slash command: {line!r}")
        if parsed.command is None or parsed.error is not None:
            echo_error(parsed.error or f"unknown command /{parsed.typed}")
            return False
        handler = self.handlers().get(parsed.command.name)
        if handler is not None and parsed.command.run is None:
            return await handler(parsed.args)
        # A plugin's command: its text on stderr with chat's other lines; its failure
        # is an error line, and the chat goes on.
        context = SlashContext(parsed.args, "chat", self.session_id, self.config,
                               host=self.agent.host)
        try:
            text = await run_slash_command(parsed.command, context)
        except Exception as exc:
            echo_error(f"/{parsed.command.name} failed: {type(exc).__name__}: {exc}")
            return False
        if text:
            self.say(text, "")
        return False

    async def _exit(self, _arg: str) -> bool:
        return True

    async def _help(self, _arg: str) -> bool:
        for line in self.slash.help_lines("chat"):
            self.say(line, "")
        self.say(KEYS_HELP, "")
        return False

    async def _clear(self, _arg: str) -> bool:
        # Like Ctrl-L: only the screen is cleared. Rich writes no control codes
        # when stderr is not a terminal, so piped output is left alone.
        self.err.clear()
        return False

    def _cost(self, cost: float | None) -> str:
        # Only when a plugin prices calls: without one, every cost is unknown by design.
        if not self.agent.host.has_impls("lich_price_call"):
            return ""
        from lich.money import format_cost

        return f", {format_cost(cost)}"

    async def _usage(self, _arg: str) -> bool:
        self.say(f"this chat: {counted(self.runs, 'run')}, {usage_line(self.total)}"
                 f"{self._cost(self.cost)}", "")
        if self.last is not None:
            self.say(f"last run: {usage_line(self.last)}{self._cost(self.last_cost)}", "")
        return False

    async def _model(self, arg: str) -> bool:
        if not arg:
            default_kind = self.agent.provider_kinds.default_kind() or ""
            for line in model_lines(self.config.providers, default_kind):
                self.say(line, "")
            return False
        from lich.config import ConfigError
        from lich.plugins import PluginLoadError

        try:
            agent = self.agent.with_model(arg)
        except (ConfigError, PluginLoadError, ValueError) as exc:
            echo_error(str(exc))
            return False
        await self.agent.aclose()
        self.agent, self.config = agent, agent.config
        self.say(f"model: {arg} (provider {agent.config.providers[0].name})")
        return False

    async def _sessions(self, _arg: str) -> bool:
        sessions = self.agent.sessions.list()[:15]
        if not sessions:
            self.say(f"no sessions in {self.agent.sessions.describe()}", "")
        for info in sessions:
            mark = "*" if info.session_id == self.session_id else " "
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.modified))
            self.say(f"{mark} {info.session_id}  {when}  {info.title}", "")
        return False

    async def _resume(self, arg: str) -> bool:
        # The table requires the argument: parse() has refused a bare /resume already.
        self.resume(arg)
        return False

    async def _new(self, _arg: str) -> bool:
        self.session_id = self.agent.sessions.new_id()
        self.history = None
        self.say(f"new session {self.session_id}")
        return False

    # ------------------------------------------------------------------ runs

    async def ask(self, text: str) -> bool:
        """Run one line through the agent, keeping the conversation.

        Returns False when stdout is gone (the reader of a pipe left): the chat ends.
        """
        from lich.cancel import CancelToken
        from lich.types import ProviderError

        human = HumanRenderer(self.err)
        cancel = CancelToken()
        human.on_closed = cancel.cancel

        def on_signal(name: str, count: int) -> None:
            human.close()
            if count == 1:
                human.note("cancelling… (Ctrl-C again to stop at once)", "yellow", always=True)

        try:
            outcome = await run_agent(self.agent, text, history=self.history,
                                      session_id=self.session_id, on_event=human,
                                      on_signal=on_signal, cancel=cancel)
        except ProviderError as exc:
            human.close()
            echo_error(describe_provider_error(exc))
            return True
        finally:
            human.close()
        result = outcome.result
        if result is None:
            self.say("cancelled", "yellow")
            # The transcript on disk is the truth after a hard cancel.
            self._reload()
            return not human.closed
        self.history = list(result.messages)
        self.runs += 1
        self.last = result.usage
        self.total = self.total + result.usage
        self.last_cost = result.cost_usd
        self.cost = (None if self.cost is None or result.cost_usd is None
                     else self.cost + result.cost_usd)
        turns = result.outcome.turns_used
        state = "" if result.stopped_reason == "final" else f" · {result.stopped_reason}"
        cost = self._cost(result.cost_usd).replace(", ", " · ", 1)
        self.say(f"[{counted(turns, 'turn')} · "
                 f"{counted(result.usage.total_tokens, 'token')}{cost}{state}]")
        return not human.closed

    def _reload(self) -> None:
        if self.agent.sessions.exists(self.session_id):
            self.history = self.agent.sessions.history(self.session_id)


def _reader(interactive_in: bool, interactive_out: bool) -> Any:
    if interactive_in and interactive_out:
        for make in (_PromptReader, _ReadlineReader):
            try:
                return make()
            except Exception:  # not installed, or no usable terminal after all: next one
                continue
    return _LineReader("> " if interactive_in else None)


@click.command("chat")
@session_options
@json_option("Not supported: chat is a conversation (one-shot runs print JSON events).")
@click.pass_context
def chat_command(ctx: click.Context) -> None:
    """Talk with the agent; it remembers the conversation (one session).

    Slash commands: /help lists them (the same as in the TUI). Ctrl-C cancels the
    answer in progress, not the chat.
    """
    ctx.exit(chat(get_settings(ctx)))


def chat(settings: CliSettings) -> int:
    """``lich chat``: returns the exit code."""
    from lich.cli.output import refuse_json

    if refuse_json(settings, "lich chat",
                   "for a run's events as JSON lines, use lich --json TASK"):
        return EXIT_USAGE
    err = make_err_console()
    try:
        built = assemble(settings, console=err)
    except CommandError as exc:
        return exc.report()
    agent = built.agent
    assert agent is not None
    state = ChatSession(settings, built.config, agent, err)
    if settings.resume and not state.resume(settings.resume):
        return EXIT_USAGE
    stdin_tty = bool(sys.stdin and sys.stdin.isatty())
    stdout_tty = bool(sys.stdout and sys.stdout.isatty())
    if stdin_tty and not settings.yes:
        from lich.cli.approve import install_terminal_approver

        # Piped lines are the conversation, not answers: with stdin not a terminal a call
        # that needs approval is denied (approval_unavailable), as in a one-shot run.
        install_terminal_approver(built.host, built.loaded, err)
    if stdin_tty:
        state.say(f"lich chat · model {agent.model} · session {state.session_id}")
        state.say("/help for commands · Ctrl-C cancels an answer · Ctrl-D leaves")

    async def loop() -> None:
        reader = _reader(stdin_tty, stdout_tty)
        try:
            while True:
                line = await reader.read()
                if line is None:
                    break
                line = line.strip()
                if not line:
                    continue  # an empty line is not a question (and does not end the chat)
                if SlashTable.is_command(line):
                    if await state.command(line):
                        break
                    continue
                if not await state.ask(line):
                    break
        finally:
            await state.agent.aclose()

    # Ctrl-C at a plain prompt raises KeyboardInterrupt right away (asyncio's own handler
    # would only cancel the task once the blocking read returns).
    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread (embedding): keep what is there
        previous = None
    try:
        asyncio.run(loop())
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return EXIT_OK


def usage_line(usage: Usage) -> str:
    """``P prompt + C completion = T tokens`` (digits grouped)."""
    return (f"{usage.prompt_tokens:,} prompt + {usage.completion_tokens:,} completion = "
            f"{counted(usage.total_tokens, 'token')}")
