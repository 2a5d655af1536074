"""The one backoff: its schedule, its cap for any failure count, and its jitter."""

from __future__ import annotations

import random

import pytest

from lich.backoff import JITTER_KINDS, Backoff


def test_without_jitter_the_delays_double_to_the_cap_and_reset() -> None:
    backoff = Backoff(0.5, 3.0)
    assert [backoff.next_delay() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff.failures == 5
    backoff.reset()
    assert backoff.next_delay() == 0.5


def test_the_linear_step_gives_the_failover_schedule() -> None:
    backoff = Backoff(0.5, 8.0, step_s=0.25)
    assert [backoff.delay(n) for n in range(5)] == [0.5, 1.25, 2.5, 4.75, 8.0]


def test_delays_are_whole_milliseconds() -> None:
    backoff = Backoff(0.0003333, 10.0)
    assert [backoff.delay(n) for n in range(4)] == [0.0, 0.0, 0.001, 0.002]


@pytest.mark.parametrize("jitter", JITTER_KINDS)
@pytest.mark.parametrize("failure", [64, 65, 1100, 10**6, 10**18])
def test_any_failure_count_saturates_at_the_cap(jitter: str, failure: int) -> None:
    # 2**1024 does not fit a float: a naive 2**n raised OverflowError from ~1020 on.
    backoff = Backoff(0.5, 60.0, step_s=0.25, jitter=jitter)  # type: ignore[arg-type]
    assert backoff.ceiling(failure) == 60.0
    assert 0.0 <= backoff.delay(failure) <= 60.0
    assert Backoff(1e290, 1e300).delay(failure) == pytest.approx(1e300)  # base·2ⁿ is inf


def test_an_infinite_cap_never_raises() -> None:
    endless = Backoff(1.0, float("inf"))
    assert endless.delay(10**6) == endless.delay(64)  # 2ⁿ stops growing at 2**64
    assert Backoff(1e300, float("inf")).delay(100) == float("inf")
    assert Backoff(1e300, float("inf"), jitter="full").delay(100) == float("inf")


def test_zero_base_and_negative_values_never_wait() -> None:
    assert [Backoff(0.0, 0.0, jitter="full").next_delay() for _ in range(3)] == [0.0] * 3
    assert Backoff(-1.0, -1.0).delay(3) == 0.0
    assert Backoff(1.0, 4.0).delay(-2) == 1.0  # a negative count is the first failure


def test_the_cap_is_never_below_the_base() -> None:
    assert Backoff(2.0, 1.0).delay(5) == 2.0


@pytest.mark.parametrize(("jitter", "low_share"), [("full", 0.0), ("equal", 0.5)])
def test_jitter_stays_within_its_bounds_at_every_step(jitter: str, low_share: float) -> None:
    backoff = Backoff(1.0, 16.0, jitter=jitter, rng=random.Random(7))  # type: ignore[arg-type]
    for failure in range(8):
        ceiling = backoff.ceiling(failure)
        for _ in range(200):
            assert ceiling * low_share - 0.001 <= backoff.delay(failure) <= ceiling


@pytest.mark.parametrize("jitter", ["full", "equal"])
def test_jitter_spreads_the_delays_of_clients_that_failed_together(jitter: str) -> None:
    rng = random.Random(2024)
    clients = [Backoff(1.0, 60.0, jitter=jitter, rng=rng) for _ in range(100)]  # type: ignore[arg-type]
    delays = [client.delay(3) for client in clients]  # all at their 4th failure: ceiling 8 s
    assert len(set(delays)) > 90  # not in lock-step
    assert max(delays) - min(delays) > 2.0  # spread over the range, not bunched


def test_a_seeded_generator_repeats_its_delays() -> None:
    first = Backoff(1.0, 60.0, jitter="full", rng=random.Random(5))
    second = Backoff(1.0, 60.0, jitter="full", rng=random.Random(5))
    assert [first.next_delay() for _ in range(6)] == [second.next_delay() for _ in range(6)]


def test_an_unknown_jitter_is_refused() -> None:
    with pytest.raises(ValueError, match="jitter must be one of none, full, equal"):
        Backoff(1.0, 2.0, jitter="some")  # type: ignore[arg-type]
