"""The ``ollama``provider plugin."""

from __future__ import annotations

from typing import Any

from lich.hooks import hookimpl


@hookimpl
def lich_register_providers(registry: Any) -> None:
    """Register the ``ollama`` provider kind."""
