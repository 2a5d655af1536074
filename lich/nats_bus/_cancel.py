"""Cancellations that nats-py hands back as errors of its own.

A task cancelled while nats-py waits inside some of its calls does not always
see ``CancelledError``: ``Subscription.next_msg`` (under ``fetch``) answers one
that lands on a closed connection with ``ConnectionClosedError``, and the
JetStream helpers answer others with their timeout error. The task then goes on
as if nothing happened. In a loop that retries on errors (a consumer, a renewer,
an announcer) that is a task no cancel can end: the gateway's shutdown, or an
event loop's ``run()`` closing, waits for it for ever.

:func:`reraise_cancel` puts the cancellation back. The task's own count of
pending cancellations (``Task.cancelling()``, which nats-py does not touch) says
whether one came while the call ran.
"""

from __future__ import annotations

import asyncio

__all__ = ["reraise_cancel"]


def reraise_cancel(error: BaseException) -> None:
    """Raise ``CancelledError`` (from ``error``) if the running task was cancelled and
    not un-cancelled since: call it first in an ``except`` that would retry."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError(f"cancelled (nats-py raised {type(error).__name__})") \
            from error
