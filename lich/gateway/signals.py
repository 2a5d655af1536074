"""Stopping a long-running gateway process (``lich gateway``, ``lich worker``) on a signal:
the first SIGINT/SIGTERM asks for a graceful stop, a second cuts the grace period short."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from lich.gateway.formatting import log_event

__all__ = ["stop_on_signals"]

log = logging.getLogger("lich.gateway")


@asynccontextmanager
async def stop_on_signals(
    stop: asyncio.Event, cancel: Callable[[], None], *, install: bool = True
) -> AsyncIterator[None]:
    """While inside: the first SIGINT or SIGTERM sets ``stop``, a second also calls
    ``cancel`` (cancel the runs in flight). The handlers are removed on the way out.

    ``install=False`` (tests, or not the main thread) installs nothing: ``stop`` is
    then only set by the caller.
    """
    seen: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(signum: signal.Signals) -> None:
        seen.append(signum)
        log_event(log, logging.INFO, "signal", signal=signum.name,
                  action="stop" if len(seen) == 1 else "cancel runs")
        if len(seen) > 1:
            cancel()
        stop.set()

    installed: list[signal.Signals] = []
    if install:
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, on_signal, signum)
                installed.append(signum)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread, or a platform without signals
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
