"""The admission id of the message being handled, on every log line written meanwhile.

A consumer of a bus that admits messages with an id (the nats bus: the
``Nats-Msg-Id`` every ingress gives a message) sets :data:`ADMISSION` while
it handles one. Context variables follow the work: the tasks the agent, the
plugin host and the tool executor start copy the context they were started
in, and so does :func:`asyncio.to_thread`. So every record logged while the
message is handled — by the consumer, the agent, a plugin's own logger, a
tool — can carry the id, and an operator greps one id to see one message's
whole story across ingress and worker.

:class:`AdmissionFilter` puts it on each record as ``record.admission``
(``None`` outside a message); :class:`ServiceFormatter`, the format of
``lich gateway`` and ``lich worker`` lines, writes it as ``admission=<id>``.
:func:`lich.gateway.formatting.log_event` writes it among its own fields.
Nothing here is imported for a plain run.
"""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar, Token

__all__ = [
    "ADMISSION",
    "AdmissionFilter",
    "ServiceFormatter",
    "current_admission",
    "reset_admission",
    "set_admission",
]

#: The admission id of the message this context is handling, if any.
ADMISSION: ContextVar[str | None] = ContextVar("lich_admission", default=None)


def current_admission() -> str | None:
    """The admission id of the message being handled here, or ``None``."""
    return ADMISSION.get()


def set_admission(admission: str | None) -> Token[str | None]:
    """Mark what runs from here on (in this context) as handling ``admission``.

    Returns the token :func:`reset_admission` takes to end it.
    """
    return ADMISSION.set(admission or None)


def reset_admission(token: Token[str | None]) -> None:
    """End what :func:`set_admission` began (the id before it is current again)."""
    ADMISSION.reset(token)


class AdmissionFilter(logging.Filter):
    """Adds ``admission`` (the current id, or ``None``) to every record; drops none.

    On a handler it sees every record that handler emits, whichever logger
    made it, so a plugin's own logger is covered as well as lich's. A record
    that already has an ``admission`` attribute (``extra=``) keeps it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "admission"):
            record.admission = ADMISSION.get()
        return True


class ServiceFormatter(logging.Formatter):
    """``<time> level=<LEVEL> [admission=<id>] <message>``: a long-running service's lines.

    The rest of a gateway line is the logfmt :func:`~lich.gateway.formatting.log_event`
    writes, which carries the admission among its fields already (``logfmt``
    records are marked so); any other record in a message's context gets
    ``admission=<id>`` before its message.
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s level=%(levelname)s %(message)s")
        # The time of the last record, to the second, as logging writes it: a busy
        # service logs many lines a second, and each would format the same date.
        self._second: int | None = None
        self._stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """``logging``'s own default time (``2026-01-02 03:04:05,678``), its date and
        time formatted once a second."""
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:
            self._stamp = time.strftime(self.default_time_format, self.converter(second))
            self._second = second
        msec = self.default_msec_format
        return self._stamp if msec is None else msec % (self._stamp, record.msecs)

    def formatMessage(self, record: logging.LogRecord) -> str:
        admission = getattr(record, "admission", None)
        if admission and not getattr(record, "logfmt", False):
            text = str(admission)
            if not text.isprintable() or any(c in text for c in ' "='):
                text = json.dumps(text)  # one logfmt value, whatever the broker carried
            record.message = f"admission={text} {record.message}"
        return super().formatMessage(record)
