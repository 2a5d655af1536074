"""Waiting in tests without sleeping: poll a condition, with a bound.

A test that sleeps "long enough" for something to happen is slow on an idle
machine and flaky on a loaded one. :func:`wait_for` (and
:func:`async_wait_for` inside an event loop) instead re-checks a condition
every ``interval`` seconds and returns as soon as it holds. The ``timeout``
is not a performance claim: it only turns a hang into a failure that says
what never happened, so it should be far above what the condition needs,
even on a machine busy with other work.

For plugin authors too (exported by :mod:`lich.testing`); nothing
here imports pytest.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

__all__ = ["DEFAULT_TIMEOUT_S", "WaitTimeout", "async_wait_for", "wait_for"]

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
"""The default bound: generous, because it detects hangs, not slowness."""

Description = str | Callable[[], str] | None
"""What is awaited, for the failure message: text, or a function called only on failure
(so it can show state gathered while waiting, such as a child's stderr)."""


class WaitTimeout(AssertionError):
    """The condition did not hold within the bound.

    An :class:`AssertionError`, so that a test runner reports it as the test's failure.
    """


def _fail(
    condition: Callable[..., Any], what: Description, timeout: float, last: Any
) -> WaitTimeout:
    if callable(what):
        what = what()
    if not what:
        what = getattr(condition, "__qualname__", None) or repr(condition)
    return WaitTimeout(f"timed out after {timeout:g}s waiting for {what} (last value: {last!r})")


def _check_bounds(timeout: float, interval: float) -> None:
    if not timeout > 0:
        raise ValueError(f"timeout must be greater than 0, got {timeout}")
    if not interval > 0:
        raise ValueError(f"interval must be greater than 0, got {interval}")


def wait_for(
    condition: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT_S,
    what: Description = None,
    *,
    interval: float = 0.01,
) -> T:
    """Call ``condition()`` until it returns something truthy, and return that.

    :param condition: checked at once, then every ``interval`` seconds. An exception it
        raises propagates (a condition may fail early, e.g. when a child process died).
    :param timeout: seconds after which :class:`WaitTimeout` is raised.
    :param what: what is awaited, for the failure message.
    :raises WaitTimeout: naming ``what`` (or the condition) and its last value.

    Blocks the calling thread: inside an event loop use :func:`async_wait_for`.
    """
    _check_bounds(timeout, interval)
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _fail(condition, what, timeout, value)
        time.sleep(interval)


@overload
async def async_wait_for(
    condition: Callable[[], Awaitable[T]],
    timeout: float = ...,  # noqa: ASYNC109
    what: Description = ...,
    *,
    interval: float = ...,
    pause: Callable[[float], Awaitable[Any]] | None = ...,
) -> T: ...


@overload
async def async_wait_for(
    condition: Callable[[], T],
    timeout: float = ...,  # noqa: ASYNC109
    what: Description = ...,
    *,
    interval: float = ...,
    pause: Callable[[float], Awaitable[Any]] | None = ...,
) -> T: ...


async def async_wait_for(
    condition: Callable[[], Any],
    # A bound on polling that fails with a message, which asyncio.timeout() cannot give.
    timeout: float = DEFAULT_TIMEOUT_S,  # noqa: ASYNC109
    what: Description = None,
    *,
    interval: float = 0.01,
    pause: Callable[[float], Awaitable[Any]] | None = None,
) -> Any:
    """:func:`wait_for` for coroutines: the event loop keeps running between checks.

    :param condition: a function, or a function returning an awaitable (``async def``),
        whose result is checked for truth.
    :param pause: how to wait ``interval`` seconds between checks; ``asyncio.sleep`` by
        default (a Textual test passes ``pilot.pause`` so the app processes its messages).
    """
    _check_bounds(timeout, interval)
    sleep = pause or asyncio.sleep
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _fail(condition, what, timeout, value)
        await sleep(interval)
