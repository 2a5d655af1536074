"""Text from a model, a tool or a chat user, made safe to show on a terminal.

A terminal obeys what it is sent: an escape sequence in a model's answer can
write to the clipboard (OSC 52), set the window title, erase or overwrite lines
(so a tool call seems to have done something else), and a bidi override or a
zero-width character makes the text on screen differ from the text that is
there. :func:`visible` spells each such character out — ``\\x1b``, ``\\u202e``
— so the reader sees that it is there and the terminal does nothing with it.

Every front end that writes to a terminal (the command's answer and progress
lines, ``lich sessions show``, the approval question, the TUI) shows text
through it; transcripts and ``--json`` keep the bytes exactly as they came.
Newlines and tabs stay as they are. The zero-width joiner stays too: emoji
sequences (👩‍💻) are made of it, and it hides nothing on its own.
"""

from __future__ import annotations

import re

__all__ = ["visible"]


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF \
        else f"\\U{code:08x}"


_CONTROLS = [c for c in range(0x20) if c not in (0x09, 0x0A)] + [0x7F] + list(range(0x80, 0xA0))
# Bidi embeddings, overrides, isolates and marks: text shown in another order than stored.
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
# Invisible: zero-width space and non-joiner, word joiner, invisible operators, the
# byte-order mark, the Mongolian vowel separator, and the tag characters (U+E0000…),
# which carry whole hidden ASCII strings.
_INVISIBLE = [0x180E, 0x200B, 0x200C, *range(0x2060, 0x2065), 0xFEFF, *range(0xE0000, 0xE0080)]

_TABLE = {code: _escape(code) for code in (*_CONTROLS, *_BIDI, *_INVISIBLE)}
_UNSAFE = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(_TABLE)) + "]")


def visible(text: str) -> str:
    """``text`` with every character a terminal would act on, or that would hide or
    reorder text on screen, written out as an escape (``\\x1b[2J`` shows as the six
    characters ``\\x1b[2J``); ``text`` itself when there is none (the usual case)."""
    if _UNSAFE.search(text) is None:
        return text
    return text.translate(_TABLE)
