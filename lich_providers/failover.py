"""The ``failover`` router plugin."""

from __future__ import annotations

from typing import Any

from lich.hooks import hookimpl


@hookimpl(trylast=True)
def lich_make_router(providers: list[Any], config: Any) -> Any:
    """Return the failover router over ``providers``."""
    return None
