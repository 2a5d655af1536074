"""While the TUI owns the terminal, lich's warnings become transcript notices.

A warning written to the terminal's stderr would tear the screen, so the
``lich`` logger's own handlers (the CLI's stderr handler) are set aside while
the app runs and put back when it ends.
"""

from __future__ import annotations

import logging

from textual.message_pump import MessagePump

from lich.tui.format.blocks import NoticeLevel
from lich.tui.format.notices import ERROR_PREVIEW_CHARS
from lich.tui.format.text import preview
from lich.tui.messages import LogNotice

__all__ = ["LogCapture", "NoticeHandler"]


class NoticeHandler(logging.Handler):
    """Posts each ``lich`` warning to ``target`` as a :class:`LogNotice`.

    ``post_message`` is thread-safe (tools log from threads).
    """

    def __init__(self, target: MessagePump) -> None:
        super().__init__(logging.WARNING)
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = preview(record.getMessage(), ERROR_PREVIEW_CHARS)
            level: NoticeLevel = "error" if record.levelno >= logging.ERROR else "warn"
            self.target.post_message(LogNotice(f"· {record.levelname.lower()}: {text}", level))
        except Exception:
            self.handleError(record)


class LogCapture:
    """Routes the ``lich`` logger to ``target`` between :meth:`start` and :meth:`stop`."""

    def __init__(self, target: MessagePump, logger_name: str = "lich") -> None:
        self.target = target
        self.logger_name = logger_name
        self._handler: NoticeHandler | None = None
        self._propagate = True
        self._saved: list[logging.Handler] = []

    @property
    def active(self) -> bool:
        """Whether warnings are being captured."""
        return self._handler is not None

    def start(self) -> None:
        """Set the logger's handlers aside and capture its warnings (no-op when started)."""
        if self._handler is not None:
            return
        logger = logging.getLogger(self.logger_name)
        self._handler = NoticeHandler(self.target)
        self._propagate = logger.propagate
        self._saved = list(logger.handlers)
        for handler in self._saved:
            logger.removeHandler(handler)
        logger.addHandler(self._handler)
        logger.propagate = False

    def stop(self) -> None:
        """Put the logger back as it was (no-op when not started)."""
        if self._handler is None:
            return
        logger = logging.getLogger(self.logger_name)
        logger.removeHandler(self._handler)
        for handler in self._saved:
            logger.addHandler(handler)
        logger.propagate = self._propagate
        self._handler = None
        self._saved = []
