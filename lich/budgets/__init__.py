"""The builtin ``budgets`` plugin: ``max_cost_usd`` and ``max_total_tokens`` per run.

Both are checked in ``lich_before_model_call``, at each turn boundary: when the
run has already spent its budget, it ends with ``stopped_reason="budget"``
before the next model call (never during one), and the reason names the
budget and what was spent. The limits come from the configuration
(``max_cost_usd = 0.50``, ``max_total_tokens = 200000``) or the flags
``--max-cost`` / ``--max-tokens``.

A cost budget needs prices: when the run's cost is unknown (no pricing plugin
such as ``prices`` is loaded, or a model has no price), the run stops with a
reason saying so, rather than running on with a limit nobody checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lich.hooks import RunInfo, Stop, hookimpl, needed_when
from lich.money import format_usd
from lich.types import Usage

if TYPE_CHECKING:
    from lich.config import LichConfig

__all__ = ["has_budget", "lich_before_model_call"]


def has_budget(config: LichConfig) -> bool:
    """Whether ``config`` sets a budget this plugin enforces. Without one its hook is
    idle, and runs do not call it (it is among the default plugins: a run without a
    budget pays nothing for it)."""
    return config.max_total_tokens is not None or config.max_cost_usd is not None


@hookimpl
@needed_when(has_budget)
async def lich_before_model_call(
    run: RunInfo, usage: Usage, cost_usd: float | None
) -> Stop | None:
    """Stop the run when ``max_total_tokens`` or ``max_cost_usd`` is spent.

    ``async def``: it runs on the event loop (no worker thread per turn) and
    does nothing but compare two numbers.
    """
    config = run.config
    if config is None:
        return None
    tokens = config.max_total_tokens
    if tokens is not None and usage.total_tokens >= tokens:
        return Stop(f"max_total_tokens: {usage.total_tokens:,} tokens used of {tokens:,}",
                    "max_total_tokens")
    limit = config.max_cost_usd
    if limit is None:
        return None
    if cost_usd is None:
        return Stop(
            f"max_cost_usd: the run's cost is unknown, so the budget of {format_usd(limit)} "
            "cannot be checked (load the `prices` plugin, and give models it does not know "
            "a price in [prices.models])",
            "max_cost_usd",
        )
    if cost_usd >= limit:
        return Stop(f"max_cost_usd: {format_usd(cost_usd)} spent of {format_usd(limit)}",
                    "max_cost_usd")
    return None
