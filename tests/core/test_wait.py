"""The polling helpers tests use instead of sleeps (lich.testing.wait)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from lich.testing import WaitTimeout, async_wait_for, wait_for


def counting_up_to(n: int) -> tuple[list[int], Callable[[], str | None]]:
    """A condition that is falsy on its first ``n`` calls, then returns ``"ready"``."""
    calls: list[int] = []
    counter = itertools.count(1)

    def condition() -> str | None:
        calls.append(next(counter))
        return "ready" if len(calls) > n else None

    return calls, condition


def test_returns_the_conditions_truthy_value_without_waiting_when_it_already_holds() -> None:
    calls, condition = counting_up_to(0)
    assert wait_for(condition) == "ready"
    assert calls == [1]


def test_polls_until_the_condition_holds() -> None:
    calls, condition = counting_up_to(3)
    assert wait_for(condition, interval=0.001) == "ready"
    assert calls == [1, 2, 3, 4]


def test_a_condition_that_never_holds_fails_with_what_was_awaited_and_the_last_value() -> None:
    with pytest.raises(WaitTimeout) as info:
        wait_for(lambda: 0, timeout=0.05, what="the answer")
    assert str(info.value) == "timed out after 0.05s waiting for the answer (last value: 0)"
    assert isinstance(info.value, AssertionError)  # a test failure, not an error


def test_without_a_description_the_message_names_the_condition() -> None:
    def server_is_up() -> bool:
        return False

    with pytest.raises(WaitTimeout, match=r"waiting for .*server_is_up \(last value: False\)"):
        wait_for(server_is_up, timeout=0.02)


def test_a_callable_description_is_called_only_on_failure() -> None:
    described: list[int] = []

    def describe() -> str:
        described.append(1)
        return "the child (stderr: boom)"

    assert wait_for(lambda: True, what=describe) is True
    assert described == []
    with pytest.raises(WaitTimeout, match=r"the child \(stderr: boom\)"):
        wait_for(lambda: None, timeout=0.02, what=describe)
    assert described == [1]


def test_an_exception_in_the_condition_ends_the_wait_at_once() -> None:
    def child_died() -> bool:
        raise RuntimeError("the child exited with 3")

    with pytest.raises(RuntimeError, match="exited with 3"):
        wait_for(child_died)


@pytest.mark.parametrize(("timeout", "interval"), [(0, 0.01), (-1, 0.01), (1, 0), (1, -0.5)])
def test_bounds_must_be_positive(timeout: float, interval: float) -> None:
    with pytest.raises(ValueError, match="must be greater than 0"):
        wait_for(lambda: True, timeout, interval=interval)


async def test_async_variant_polls_a_plain_condition() -> None:
    calls, condition = counting_up_to(2)
    assert await async_wait_for(condition, interval=0.001) == "ready"
    assert calls == [1, 2, 3]


async def test_async_variant_awaits_a_coroutine_condition() -> None:
    answers = iter([None, "", "pong"])

    async def ping() -> str | None:
        return next(answers)

    assert await async_wait_for(ping, interval=0.001) == "pong"


async def test_async_variant_pauses_with_the_given_function() -> None:
    pauses: list[float] = []
    _, condition = counting_up_to(2)

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    await async_wait_for(condition, interval=0.25, pause=pause)
    assert pauses == [0.25, 0.25]


async def test_async_variant_fails_with_a_message() -> None:
    with pytest.raises(WaitTimeout, match=r"after 0.02s waiting for the webhook to listen"):
        await async_wait_for(lambda: False, 0.02, "the webhook to listen")
