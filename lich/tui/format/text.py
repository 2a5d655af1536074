"""Text previews shared by every formatter: one-line previews, compact JSON, grouped numbers."""

from __future__ import annotations

import json
import re
from typing import Any

from lich.guards import truncate_text

__all__ = ["format_args", "format_usage", "preview"]

_WS = re.compile(r"\s+")


def preview(text: str, limit: int) -> str:
    """``text`` on one line (whitespace runs become one space), cut at ``limit``
    characters with a note of how many were left out."""
    return truncate_text(_WS.sub(" ", text).strip(), limit, style="inline")


def format_args(args: dict[str, Any]) -> str:
    """Tool arguments as compact JSON (non-ASCII kept readable)."""
    try:
        return json.dumps(args, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return str(args)


def format_usage(tokens: int) -> str:
    """``1234567`` → ``1,234,567``."""
    return f"{tokens:,}"
