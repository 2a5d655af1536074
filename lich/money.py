"""Money as lich shows it: US dollars from the ``cost_usd`` of events and runs."""

from __future__ import annotations

__all__ = ["format_cost", "format_usd"]


def format_usd(cost: float) -> str:
    """``$0.0031``: four decimals below a dollar (a model call typically costs a
    fraction of a cent), two from a dollar up (``$12.40``)."""
    return f"${cost:,.4f}" if cost < 1 else f"${cost:,.2f}"


def format_cost(cost: float | None) -> str:
    """:func:`format_usd`, or ``cost unknown`` for ``None``."""
    return "cost unknown" if cost is None else format_usd(cost)
