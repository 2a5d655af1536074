"""A helper every widget shares: plain text that wraps."""

from __future__ import annotations

from rich.text import Text


def plain(text: str, style: str = "") -> Text:
    """``text`` as Rich text that wraps and is never read as markup."""
    return Text(text, style=style, no_wrap=False)
