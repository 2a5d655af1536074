"""lich's terminal interface (``lich tui``), built on Textual.

Importing this package is cheap and does not import Textual: only
:func:`run_tui` does, and a missing Textual is a :class:`TuiUnavailableError`
naming the ``pip install`` that fixes it. The state machine
(:mod:`lich.tui.state`), the formatting helpers (:mod:`lich.tui.format`) and
the input history (:mod:`lich.tui.input_history`) need no Textual either.

The app is :mod:`lich.tui.app` (runs, events, sessions), with its widgets in
:mod:`lich.tui.widgets` (one module each), what the slash commands of
:mod:`lich._slash` do in the TUI in :mod:`lich.tui.commands`, the run's
Textual messages in :mod:`lich.tui.messages` and the routing of log warnings
in :mod:`lich.tui.log_capture`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lich.config import LichConfig

__all__ = ["INSTALL_HINT", "TuiUnavailableError", "run_tui"]

INSTALL_HINT = "pip install 'lich[tui]'"


class TuiUnavailableError(ModuleNotFoundError):
    """Textual is not installed; the message names the ``pip install`` that fixes it.

    A :class:`ModuleNotFoundError` whose ``name`` is ``"textual"``, so code that
    already handles a missing ``textual`` module handles this too.
    """


def _require_textual() -> None:
    try:
        import textual  # noqa: F401
    except ImportError as exc:
        raise TuiUnavailableError(
            f"the TUI needs Textual, which is not installed: run {INSTALL_HINT}", name="textual"
        ) from exc


def run_tui(
    config: LichConfig, *, resume: str | None = None, plugins: Sequence[str] = ()
) -> int:
    """Run the TUI until the user quits; returns the exit code (0, or 1 after a crash).

    :param config: the effective configuration; its ``plugins`` are loaded.
    :param resume: a session id or ``latest`` to continue; an unknown one is
        reported inside the TUI, which then starts a new session.
    :param plugins: extra plugin entries for this run (added to the config's).
    :raises TuiUnavailableError: Textual is not installed.
    :raises lich.config.ConfigError: no usable provider is configured.
    :raises lich.plugins.PluginLoadError: a plugin failed in strict mode.
    """
    _require_textual()
    import attrs

    from lich.agent import Agent
    from lich.tui.app import LichApp

    if plugins:
        extra = tuple(p for p in plugins if p not in config.plugins)
        # (a dict: mypy cannot type evolve() through the attrs converter of ``plugins``)
        changes: dict[str, Any] = {"plugins": config.plugins + extra}
        config = attrs.evolve(config, **changes)
    agent = Agent(config)
    app = LichApp(agent, resume=resume, owns_agent=True, capture_logs=True)
    app.run()
    # Non-zero when the app died on an error (Textual has printed the traceback by then).
    return int(app.return_code or 0)
