"""The message input: history recall with Up and Down, and a border that says whether
a run is in flight."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Input

from lich.tui.input_history import InputHistory

__all__ = ["BUSY_TITLE", "READY_TITLE", "PromptInput"]

READY_TITLE = "› ready"
BUSY_TITLE = "… busy — Esc cancels"


class PromptInput(Input):
    """The message input: Up recalls older entries, Down newer ones."""

    # The descriptions are what /help says about each key.
    BINDINGS: ClassVar[list[BindingType]] = [
        # Input's own Enter binding, restated so that /help lists it with the others.
        Binding("enter", "submit", "send the message (or run the slash command)", show=False),
        Binding("up", "history_older", "recall an older input", show=False),
        Binding("down", "history_newer",
                "recall a newer input (past the newest: what you were typing)", show=False),
    ]

    def __init__(self, history: InputHistory, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.history = history
        self.border_title = READY_TITLE

    def set_busy(self, busy: bool) -> None:
        """Show whether a run is in flight (the app styles ``.busy``)."""
        self.set_class(busy, "busy")
        self.border_title = BUSY_TITLE if busy else READY_TITLE

    def take(self, text: str) -> None:
        """``text`` was accepted: remember it and empty the input."""
        self.history.push(text)
        self.value = ""

    def _recall(self, text: str | None) -> None:
        if text is None:
            return
        self.value = text
        self.cursor_position = len(text)

    def action_history_older(self) -> None:
        """Up: an older input."""
        self._recall(self.history.older(self.value))

    def action_history_newer(self) -> None:
        """Down: a newer input (past the newest, the text typed before recalling)."""
        self._recall(self.history.newer())
