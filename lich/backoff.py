"""Exponential backoff with optional jitter: the one retry schedule in lich.

The failover router waits by it between attempts at a provider, and the
gateway's adapters between reconnects and failed sends. The delay after
failure number ``n`` (counted from 0) is::

    min(base·2ⁿ + step·n, cap)

in whole milliseconds, so deterministic delays print and compare exactly. It
saturates at the cap for any ``n``: ``2ⁿ`` is never computed past the point
where it would overflow a float.

*Jitter* spreads the delays of many clients that failed at the same moment,
so they do not all retry in lock-step against the same server:

* ``"none"``: the delay itself (deterministic; what tests assert exactly);
* ``"full"``: uniformly anywhere in ``[0, delay]`` (spreads the most);
* ``"equal"``: uniformly in ``[delay/2, delay]`` (spreads, but always waits at
  least half, so a flapping connection never retries hot).

Jitter only ever shortens a delay: the deterministic value is the upper bound.
"""

from __future__ import annotations

import math
import random
from typing import Literal, TypeAlias, get_args

__all__ = ["JITTER_KINDS", "Backoff", "Jitter"]

Jitter: TypeAlias = Literal["none", "full", "equal"]
JITTER_KINDS: tuple[Jitter, ...] = get_args(Jitter)

# 2**64 base steps are far past any cap; from 2**1024 on a float overflows.
_MAX_DOUBLINGS = 64


class Backoff:
    """The delays ``min(base_s·2ⁿ + step_s·n, max_s)``, optionally jittered.

    Use :meth:`delay` for the wait after a given failure (the failover
    router counts attempts itself), or :meth:`next_delay` and :meth:`reset`
    to let the object count failures (a reconnect loop).

    :param base_s: the first delay (failure 0); negative counts as 0.
    :param max_s: the cap; never less than ``base_s``.
    :param step_s: a linear term added per failure (the failover router's
        schedule from lich-ts: 0.5 s, 1.25 s, 2.5 s, 4.75 s has ``step_s = base_s/2``).
    :param jitter: ``"none"``, ``"full"`` or ``"equal"`` (see the module docstring).
    :param rng: where jitter draws from (a seeded :class:`random.Random` in tests);
        the module-level generator by default.
    """

    def __init__(
        self,
        base_s: float,
        max_s: float,
        *,
        step_s: float = 0.0,
        jitter: Jitter = "none",
        rng: random.Random | None = None,
    ) -> None:
        if jitter not in JITTER_KINDS:
            raise ValueError(f"jitter must be one of {', '.join(JITTER_KINDS)}, got {jitter!r}")
        self.base_s = max(0.0, base_s)
        self.max_s = max(self.base_s, max_s)
        self.step_s = max(0.0, step_s)
        self.jitter: Jitter = jitter
        self._random = rng.random if rng is not None else random.random
        self.failures = 0

    def ceiling(self, failure: int) -> float:
        """The deterministic delay after failure number ``failure`` (from 0): the
        value :meth:`delay` gives without jitter, and its upper bound with it."""
        n = max(0, failure)
        base_ms = self.base_s * 1000
        exponential = base_ms * float(2 ** min(n, _MAX_DOUBLINGS))
        linear = self.step_s * 1000 * n
        total = min(exponential + linear, self.max_s * 1000)
        if not math.isfinite(total):  # an infinite cap, reached: nothing to floor
            return total
        return math.floor(total) / 1000

    def delay(self, failure: int) -> float:
        """The wait after failure number ``failure`` (from 0), jittered as configured."""
        ceiling = self.ceiling(failure)
        if self.jitter == "none" or ceiling <= 0 or not math.isfinite(ceiling):
            return ceiling
        low = ceiling / 2 if self.jitter == "equal" else 0.0
        return math.floor((low + (ceiling - low) * self._random()) * 1000) / 1000

    def next_delay(self) -> float:
        """The wait before the next attempt; counts one more failure."""
        delay = self.delay(self.failures)
        self.failures += 1
        return delay

    def reset(self) -> None:
        """Back to the first delay (after a success)."""
        self.failures = 0
