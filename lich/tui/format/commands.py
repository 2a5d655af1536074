"""What the TUI's slash commands print: ``/usage``, ``/model`` and ``/sessions``.

The commands themselves, their help and their parsing are in :mod:`lich.slash`,
shared with ``lich chat``.
"""

from __future__ import annotations

from collections.abc import Sequence

from lich.sessions import SessionInfo
from lich.tui.format.text import format_usage, preview
from lich.types import Usage

__all__ = ["model_line", "session_list_lines", "usage_line"]


def usage_line(usage: Usage) -> str:
    """``/usage``: the session's tokens."""
    return (
        f"· tokens used this session: {format_usage(usage.total_tokens)} "
        f"(prompt {format_usage(usage.prompt_tokens)} · "
        f"completion {format_usage(usage.completion_tokens)})"
    )


def model_line(model: str, provider: str) -> str:
    """``/model``: what answers."""
    return f"· model: {model or '?'} · provider: {provider or '?'}"


def session_list_lines(
    sessions: Sequence[SessionInfo], current: str | None = None, cap: int = 10
) -> list[str]:
    """``/sessions``: the newest ``cap`` sessions, newest first, the current one marked."""
    if not sessions:
        return ["· no sessions yet"]
    shown = sessions[:cap]
    lines = [f"· sessions ({len(sessions)}, newest first; /resume ID to continue one):"]
    for info in shown:
        mark = "*" if info.session_id == current else " "
        title = preview(info.title, 40) if info.title else "(no messages)"
        lines.append(f" {mark}{info.session_id}  {title}")
    if len(sessions) > cap:
        lines.append(f"  … {len(sessions) - cap} older")
    return lines
