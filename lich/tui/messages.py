"""The Textual messages that carry a run's progress, and lich's log warnings, to the app.

A run's worker and lich's loggers (possibly on tool threads) post these;
``post_message`` is thread-safe, and messages arrive in the order they were posted.
"""

from __future__ import annotations

from textual.message import Message

from lich.agent import RunResult
from lich.events import Envelope
from lich.tui.format.blocks import NoticeLevel

__all__ = ["AgentEventMessage", "LogNotice", "RunFinished"]


class AgentEventMessage(Message):
    """An agent event, delivered to the app in emission order."""

    def __init__(self, serial: int, envelope: Envelope) -> None:
        super().__init__()
        self.serial = serial
        self.envelope = envelope


class RunFinished(Message):
    """``agent.run`` returned (``result``) or raised (``error``); posted after its events."""

    def __init__(
        self, serial: int, result: RunResult | None, error: BaseException | None
    ) -> None:
        super().__init__()
        self.serial = serial
        self.result = result
        self.error = error


class LogNotice(Message):
    """A warning logged by lich while the TUI owns the terminal."""

    def __init__(self, text: str, level: NoticeLevel) -> None:
        super().__init__()
        self.text = text
        self.level = level
