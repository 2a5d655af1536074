"""lich's terminal interface (``lich tui``), built on Textual.

Importing this package is cheap and does not import Textual: only
:func:`run_tui` does, and a missing Textual is a :class:`TuiUnavailableError`
naming the ``pip install`` that fixes it. The state machine
(:mod:`lich.tui.state`), the formatting helpers (:mod:`lich.tui.format`) and
the input history (:mod:`lich.tui.input_history`) need no Textual either.

The app is :mod:`lich.tui.app` (runs, events, sessions), with its widgets in
:mod:`lich.tui.widgets` (one module each), what the slash commands of
:mod:`lich.slash` do in the TUI in :mod:`lich.tui.commands`, the run's
Textual messages in :mod:`lich.tui.messages`, the routing of log warnings in
:mod:`lich.tui.log_capture`, and the approver that asks about tool calls in a
dialog in :mod:`lich.tui.approval`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lich.agent import Agent
    from lich.config import ConfigLocation

__all__ = ["INSTALL_HINT", "TuiUnavailableError", "require_textual", "run_tui"]

INSTALL_HINT = "pip install 'lich-agent[tui]'"


class TuiUnavailableError(ModuleNotFoundError):
    """Textual is not installed; the message names the ``pip install`` that fixes it.

    A :class:`ModuleNotFoundError` whose ``name`` is ``"textual"``, so code that
    already handles a missing ``textual`` module handles this too.
    """


def require_textual() -> None:
    """Raise :class:`TuiUnavailableError` unless Textual can be imported."""
    try:
        import textual  # noqa: F401
    except ImportError as exc:
        raise TuiUnavailableError(
            f"the TUI needs Textual, which is not installed: run {INSTALL_HINT}", name="textual"
        ) from exc


def run_tui(
    agent: Agent,
    *,
    resume: str | None = None,
    owns_agent: bool = True,
    config_location: ConfigLocation | None = None,
) -> int:
    """Run the TUI on ``agent`` until the user quits; returns the exit code (0, or 1
    after a crash).

    :param agent: the assembled agent (``lich tui`` builds it with
        :func:`lich.cli.common.assemble`, as every command does).
    :param resume: a session id or ``latest`` to continue; an unknown one is
        reported inside the TUI, which then starts a new session.
    :param owns_agent: close the agent when the TUI ends.
    :param config_location: the config file in use (where an ``always`` approval
        offers to write its rules first).
    :raises TuiUnavailableError: Textual is not installed.
    """
    require_textual()
    from lich.tui.app import LichApp

    app = LichApp(agent, resume=resume, owns_agent=owns_agent, capture_logs=True,
                  config_location=config_location)
    app.run()
    # Non-zero when the app died on an error (Textual has printed the traceback by then).
    return int(app.return_code or 0)
