"""A tool call in the transcript: its call line, its result line, its full output."""

from __future__ import annotations

import time
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import Static

from lich.tui.format.tools import OUTPUT_PREVIEW_CHARS, tool_call_line, tool_result_line
from lich.tui.widgets.text import plain
from lich.types import ToolCall, ToolResult

__all__ = ["ToolResultLine", "ToolView"]


class ToolResultLine(Static, can_focus=True):
    """A tool's outcome line; Enter, Space or a click shows or hides the full output."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,space", "toggle_output",
                "on a tool result line: show or hide its full output", show=False),
    ]

    def action_toggle_output(self) -> None:
        """Toggle the owning :class:`ToolView`."""
        view = self.parent
        if isinstance(view, ToolView):
            view.toggle()

    def on_click(self) -> None:
        """A click toggles too."""
        self.action_toggle_output()


#: How much of a running call's live output its block shows: the last lines only.
LIVE_TAIL_LINES = 8
LIVE_TAIL_CHARS = 2_000


class ToolView(Widget):
    """One tool call: ``● name(args)``, then ``└ ok|error (preview)``, and the full
    output (hidden until expanded). While it runs, the last lines of what the tool
    reported so far (``tool_output`` events) show under the ``running…`` line."""

    DEFAULT_CSS = """
    ToolView { height: auto; padding: 0 0 0 2; }
    ToolView > .call { color: $accent; }
    ToolView > ToolResultLine { padding: 0 0 0 2; color: $text-muted; }
    ToolView > ToolResultLine.ok { color: $success; }
    ToolView > ToolResultLine.error { color: $error; }
    ToolView > ToolResultLine:focus { text-style: reverse; }
    ToolView > .output { display: none; padding: 0 0 0 4; color: $text-muted; }
    ToolView.expanded > .output { display: block; }
    ToolView > .live { display: none; padding: 0 0 0 4; color: $text-muted; }
    ToolView.live > .live { display: block; }
    """

    def __init__(self, call: ToolCall, result: ToolResult | None = None) -> None:
        super().__init__()
        self.call = call
        self.result = result
        self._call_line = Static(plain(tool_call_line(call)), classes="call", markup=False)
        self._result_line = ToolResultLine("", markup=False)
        self._output = Static("", classes="output", markup=False)
        self._live = Static("", classes="live", markup=False)
        self._live_text = ""

    def compose(self) -> ComposeResult:
        yield self._call_line
        yield self._result_line
        yield self._live
        yield self._output

    @property
    def live_text(self) -> str:
        """What the running call's block shows of its live output (its last lines)."""
        return self._live_text

    def add_output(self, text: str) -> None:
        """The running call reported ``text``: show it, keeping the last lines. Once
        the call has ended its result is what counts, and late text is ignored."""
        if self.result is not None:
            return
        tail = (self._live_text + text)[-LIVE_TAIL_CHARS:]
        self._live_text = "\n".join(tail.split("\n")[-LIVE_TAIL_LINES:])
        self._live.update(plain(self._live_text.rstrip("\n")))
        self.add_class("live")

    def on_mount(self) -> None:
        """Show the result given at construction (resumed history); a call still
        running shows how long it has been running, every second."""
        self._started = time.monotonic()
        if self.result is None:
            self._timer = self.set_interval(1.0, self._show)
        self._show()

    _timer: object = None
    _started = 0.0

    @property
    def expanded(self) -> bool:
        """Whether the full output is shown."""
        return self.has_class("expanded")

    def toggle(self) -> None:
        """Show or hide the full output."""
        self.set_class(not self.expanded, "expanded")
        self._show()

    def finish(self, call: ToolCall, result: ToolResult) -> None:
        """The call ended: show its outcome (``call`` carries the final arguments)."""
        self.call = call
        self.result = result
        stop = getattr(self._timer, "stop", None)
        if callable(stop):
            stop()
        # The result replaces what was shown while it ran (a preview, the full output).
        self.remove_class("live")
        self._live_text = ""
        self._call_line.update(plain(tool_call_line(call)))
        self._show()

    @property
    def summary(self) -> str:
        """The two visible lines, as text."""
        return f"{tool_call_line(self.call)}\n{self._line()}"

    def _line(self) -> str:
        line = tool_result_line(self.result)
        if self.result is None and self._started:
            # While it runs: how long so far (its live output shows below).
            line += f" ({int(time.monotonic() - self._started)}s)"
        return line

    def _show(self) -> None:
        result = self.result
        line = self._line()
        if result is not None:
            if self._has_more(result):
                line += " [-]" if self.expanded else " [+]"
            self._result_line.set_class(result.ok, "ok")
            self._result_line.set_class(not result.ok, "error")
            full = result.output or "(no output)"
            if result.error:
                full = f"error: {result.error}\n{full}"
            self._output.update(plain(full))
        self._result_line.update(plain(line))

    @staticmethod
    def _has_more(result: ToolResult) -> bool:
        text = result.output.strip()
        return "\n" in text or len(text) > OUTPUT_PREVIEW_CHARS
