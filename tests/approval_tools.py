"""The tools the approval tests run (tests/core/test_approvals.py, the TUI's dialog
tests): ``echo(text)`` and ``note(path, text)``, a writer with a preview, recording
what actually ran — so a test sees whether an asked call ran, and with which
arguments."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lich import hookimpl, tool


def size_preview(args: Any, work_dir: Path) -> str:
    """``would write N chars to <path>``: what ``note`` previews by default."""
    return f"would write {len(args['text'])} chars to {work_dir / args['path']}"


def diff_preview(args: Any, work_dir: Path) -> str:
    """A one-line unified diff of ``path`` to ``text``: what a file writer previews."""
    return (f"--- a/{args['path']}\n+++ b/{args['path']}\n@@ -1 +1 @@\n"
            f"-old line\n+{args['text']}")


class Tools:
    """A plugin offering ``echo(text)`` and ``note(path, text)`` (previewed with
    ``preview``); :attr:`ran` records every call that ran, in order."""

    def __init__(self, preview: Callable[[Any, Path], str] = size_preview) -> None:
        self.preview = preview
        self.ran: list[tuple[str, dict[str, Any]]] = []

    @hookimpl
    def lich_register_tools(self, registry: Any) -> None:
        ran = self.ran

        @tool
        def echo(text: str) -> str:
            """Echo."""
            ran.append(("echo", {"text": text}))
            return f"echo: {text}"

        @tool(preview=self.preview)
        def note(path: str, text: str) -> str:
            """Write a note (records only)."""
            ran.append(("note", {"path": path, "text": text}))
            return "noted"

        registry.register(echo)
        registry.register(note)
