"""``lich tui`` (and bare ``lich`` on a terminal): the Textual interface."""

from __future__ import annotations

import click

from lich.cli.common import EXIT_USAGE, CommandError, assemble, echo_error
from lich.cli.options import Settings, get_settings, session_options

__all__ = ["launch_tui", "tui_command"]


@click.command("tui")
@session_options
@click.pass_context
def tui_command(ctx: click.Context) -> None:
    """The terminal UI (needs the `tui` extra: pip install 'lich[tui]')."""
    ctx.exit(launch_tui(get_settings(ctx)))


def launch_tui(settings: Settings) -> int:
    """Assemble the agent as every command does and run the TUI on it; the exit code."""
    from lich.tui import TuiUnavailableError, require_textual, run_tui

    try:
        require_textual()  # before anything is loaded: the install hint is the answer
        built = assemble(settings)
    except TuiUnavailableError:
        echo_error("the TUI needs Textual: pip install 'lich[tui]'")
        return EXIT_USAGE
    except CommandError as exc:
        return exc.report()
    assert built.agent is not None
    return int(run_tui(built.agent, resume=settings.resume))
