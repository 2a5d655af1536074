"""lich's builtin tools, registered as a plugin (entry point ``builtin_tools``)."""

from __future__ import annotations

from typing import Any

from lich.hooks import hookimpl

__all__ = ["lich_register_tools"]


@hookimpl(trylast=True)
def lich_register_tools(registry: Any, config: Any) -> None:
    """Register the builtin tools."""
