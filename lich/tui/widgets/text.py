"""A helper every widget shares: plain text that wraps."""

from __future__ import annotations

from rich.text import Text

from lich.visible import visible


def plain(text: str, style: str = "") -> Text:
    """``text`` as Rich text that wraps and is never read as markup, with what a
    terminal would act on spelled out (:func:`lich.visible.visible`)."""
    return Text(visible(text), style=style, no_wrap=False)
