"""The status bar: one line of parts, shortened to fit instead of wrapping."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from lich.tui.format.status import SEPARATOR, StatusPart, fit_status

__all__ = ["StatusBar"]


class StatusBar(Static):
    """Shows the parts :func:`lich.tui.format.status.status_parts` makes, fitted to its width."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", markup=False, **kwargs)  # type: ignore[arg-type]
        self._parts: Sequence[StatusPart] = ()

    def on_resize(self) -> None:
        """Refit the parts shown to the new width. Here, not in the app's resize
        handler: that one runs before this widget has its new size, so it fitted the
        line to the old width and the bar stayed cut until the next update."""
        if self._parts:
            self.show(self._parts)

    def show(self, parts: Sequence[StatusPart]) -> None:
        """Show ``parts``, shortened to the bar's width (the screen's before the first layout)."""
        self._parts = tuple(parts)
        # The bar has one column of padding at each end.
        width = max(10, (self.size.width or self.app.size.width) - 2)
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, part in enumerate(fit_status(parts, width)):
            if i:
                text.append(SEPARATOR, style="dim")
            text.append(part.text, style=part.style)
        self.update(text)
