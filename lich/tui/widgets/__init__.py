"""The TUI's widgets, one module each: the transcript, tool blocks, the status bar, the input."""

from __future__ import annotations

from lich.tui.widgets.prompt import PromptInput
from lich.tui.widgets.status import StatusBar
from lich.tui.widgets.tool_view import ToolResultLine, ToolView
from lich.tui.widgets.transcript import TRANSCRIPT_CAP, Transcript

__all__ = ["TRANSCRIPT_CAP", "PromptInput", "StatusBar", "ToolResultLine", "ToolView", "Transcript"]
