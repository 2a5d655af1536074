"""``lich tui`` (and bare ``lich`` on a terminal): the Textual interface."""

from __future__ import annotations

import sys

import click

from lich.cli.common import EXIT_USAGE, CommandError, assemble, echo_error
from lich.cli.options import CliSettings, get_settings, json_option, session_options

__all__ = ["launch_tui", "terminal_problem", "tui_command"]


@click.command("tui")
@session_options
@json_option("Not supported: the TUI is a screen (one-shot runs print JSON events).")
@click.pass_context
def tui_command(ctx: click.Context) -> None:
    """The terminal UI (needs the `tui` extra: pip install 'lich-agent[tui]')."""
    ctx.exit(launch_tui(get_settings(ctx)))


def terminal_problem() -> str | None:
    """Why the TUI cannot run here (``"stdin is not a terminal"``), or ``None``.

    Textual on a pipe never sees a key and writes escape codes into the pipe: it
    would spin forever instead of failing, so this is checked first."""
    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)):
        try:
            if stream is None or not stream.isatty():
                return f"{name} is not a terminal"
        except ValueError:  # a closed stream
            return f"{name} is closed"
    return None


def launch_tui(settings: CliSettings) -> int:
    """Assemble the agent as every command does and run the TUI on it; the exit code.

    ``--resume`` is checked before the screen opens: a session that does not exist
    (or an ambiguous id prefix) exits 2, as ``lich --resume`` does, instead of opening
    a TUI on a conversation the user did not ask for.
    """
    from lich.cli.output import refuse_json
    from lich.sessions import SessionNotFound
    from lich.tui import TuiUnavailableError, require_textual, run_tui

    if refuse_json(settings, "lich tui", "for a run's events as JSON lines, use lich --json TASK"):
        return EXIT_USAGE
    try:
        require_textual()  # before anything is loaded: the install hint is the answer
        problem = terminal_problem()
        if problem is not None:
            echo_error(f"the TUI needs a terminal: {problem} (a task from a pipe: "
                       "echo TASK | lich; a conversation without the TUI: lich chat)")
            return EXIT_USAGE
        built = assemble(settings)
    except TuiUnavailableError:
        echo_error("the TUI needs Textual: pip install 'lich-agent[tui]'")
        return EXIT_USAGE
    except CommandError as exc:
        return exc.report()
    assert built.agent is not None
    resume = None
    if settings.resume:
        try:
            resume = built.agent.sessions.resolve(settings.resume)
        except (SessionNotFound, ValueError, OSError) as exc:  # OSError: a store's failure
            echo_error(f"--resume: {exc}")
            built.agent.sessions.close()
            return EXIT_USAGE
    return int(run_tui(built.agent, resume=resume, config_location=built.loaded.location))
