"""The status line: its segments, and how they shorten to fit the terminal's width."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attrs import frozen
from rich.cells import cell_len
from rich.text import Text

from lich.tui.format.text import format_usage

__all__ = [
    "RUN_LABEL",
    "SEPARATOR",
    "SPINNER_FRAMES",
    "TUI_LABEL",
    "StatusPart",
    "fit_status",
    "status_parts",
]

SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

SEPARATOR = " · "

RUN_LABEL = "run"
"""Marks a counter of the run in flight (or of the last run, between runs)."""
TUI_LABEL = "tui"
"""Marks a counter of the whole TUI: every run since it started, across /new and /resume."""


@frozen
class StatusPart:
    """One segment of the status line and its Rich style."""

    key: str
    text: str
    style: str = ""


def status_parts(
    *,
    model: str,
    provider: str,
    turns: int,
    tokens: int,
    phase: str,
    frame: int = 0,
    active_tool: str | None = None,
    cancelling: bool = False,
    compress_count: int = 0,
    budget_exhausted: bool = False,
    session_id: str | None = None,
    priced: bool = False,
    cost_usd: float | None = None,
) -> list[StatusPart]:
    """The status line's segments, in order: model, turns, tokens, phase, compressions,
    budget, session. ``frame`` picks the spinner frame for a busy phase.

    Each counter says what it counts: ``run turns`` (``turns``: the run in flight, or
    the last one), ``tui tokens`` and ``tui compressed`` (``tokens``,
    ``compress_count``: every run since the TUI started, across sessions). With
    ``priced`` (a plugin prices calls), ``tui $0.0031`` follows the tokens
    (``tui cost ?`` once a call had no known price).
    """
    spinner = SPINNER_FRAMES[frame % len(SPINNER_FRAMES)]
    label = model or "?"
    if provider:
        label += f" ({provider})"
    parts = [
        StatusPart("model", label, "bold"),
        StatusPart("turns", f"{RUN_LABEL} turns {turns}"),
        StatusPart("tokens", f"{TUI_LABEL} tokens {format_usage(tokens)}"),
    ]
    if priced:
        from lich.money import format_usd

        cost = format_usd(cost_usd) if cost_usd is not None else "cost ?"
        parts.append(StatusPart("cost", f"{TUI_LABEL} {cost}"))
    if cancelling:
        parts.append(StatusPart("phase", f"{spinner} cancelling", "bold yellow"))
    elif phase == "tool":
        tool = f" {active_tool}" if active_tool else ""
        parts.append(StatusPart("phase", f"{spinner} tool{tool}", "bold cyan"))
    elif phase == "thinking":
        parts.append(StatusPart("phase", f"{spinner} thinking", "bold green"))
    else:
        parts.append(StatusPart("phase", "idle", "dim"))
    if compress_count:
        parts.append(StatusPart("compressed", f"{TUI_LABEL} compressed {compress_count}"))
    if budget_exhausted:
        parts.append(StatusPart("budget", "budget exhausted", "bold red"))
    if session_id:
        parts.append(StatusPart("session", f"session {session_id}", "dim"))
    return parts


# Widths are terminal cells, not characters: a CJK character or an emoji takes two.
def _width(parts: Sequence[StatusPart]) -> int:
    return sum(cell_len(p.text) for p in parts) + cell_len(SEPARATOR) * max(0, len(parts) - 1)


def _clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` cells (at least the "…"), "…" marking a cut."""
    clipped = Text(text)
    clipped.truncate(limit, overflow="ellipsis")
    return clipped.plain


def _abbreviate_count(text: str) -> str:
    """``tui tok 1,234,567`` → ``tui tok 1.2M`` (and ``12,345`` → ``12k``)."""
    head, _, number = text.rpartition(" ")
    digits = number.replace(",", "")
    if not digits.isdigit():
        return text
    n = int(digits)
    if n >= 1_000_000:
        short = f"{n / 1_000_000:.1f}M"
    elif n >= 10_000:
        short = f"{n // 1000}k"
    else:
        return text
    return f"{head} {short}"


def fit_status(parts: Sequence[StatusPart], width: int) -> list[StatusPart]:
    """``parts`` shortened until they fit ``width`` columns.

    Shortening order: the session id keeps its last 8 characters (the random
    part), labels get terse, the model name is clipped, the running tool's
    name goes, and finally the line is cut.
    """
    out = list(parts)

    def replace(key: str, text: str) -> None:
        for i, p in enumerate(out):
            if p.key == key:
                out[i] = StatusPart(p.key, text, p.style)

    def text_of(key: str) -> str | None:
        return next((p.text for p in out if p.key == key), None)

    steps: list[tuple[str, Callable[[str], str]]] = [
        ("session", lambda t: "session …" + t.removeprefix("session ")[-8:]),
        ("session", lambda t: "…" + t.removeprefix("session …")),
        # Terse, but each counter keeps saying whether it is the run's or the TUI's.
        ("turns", lambda t: t.replace(" turns ", " t", 1)),
        ("tokens", lambda t: t.replace(" tokens ", " tok ", 1)),
        ("compressed", lambda t: t.replace(" compressed ", " cmp ", 1)),
        ("model", lambda t: _clip(t, 24)),
        ("phase", lambda t: " ".join(t.split(" ")[:2])),  # drop the tool name
        ("tokens", _abbreviate_count),
        ("model", lambda t: _clip(t, 12)),
        ("budget", lambda t: "budget!"),
        ("model", lambda t: _clip(t, 8)),
    ]
    for key, shorten in steps:
        if _width(out) <= width:
            return out
        current = text_of(key)
        if current is not None:
            replace(key, shorten(current))
    if _width(out) <= width:
        return out
    # Still too wide: keep whole parts from the left, clip the one that crosses the edge.
    kept: list[StatusPart] = []
    used = 0
    for p in out:
        sep = cell_len(SEPARATOR) if kept else 0
        room = width - used - sep
        if room <= 0:
            break
        if cell_len(p.text) > room:
            kept.append(StatusPart(p.key, _clip(p.text, room), p.style))
            break
        kept.append(p)
        used += sep + cell_len(p.text)
    return kept
