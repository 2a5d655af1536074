"""Tool names: ``mcp__<server>__<tool>``, Claude Code's convention, so an approval
rule such as ``mcp__git__*`` reads the same in both.

Providers accept ``[A-Za-z0-9_-]{1,64}`` as a function name: every other character
becomes ``_``, and a name longer than 64 characters keeps its first 55 and ends in
``_`` and 8 hex digits of a hash of the *original* server and tool names, so two
long names that share a prefix still differ. Two originals can still sanitise to
the same name (``a.b`` and ``a_b``): the caller reports that collision, never
picks one silently.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_TOOL_NAME", "PREFIX", "mcp_tool_name", "sanitise"]

PREFIX = "mcp__"
MAX_TOOL_NAME = 64
_HASH_CHARS = 8
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def sanitise(part: str) -> str:
    """``part`` with every character outside ``[A-Za-z0-9_-]`` replaced by ``_``."""
    return _UNSAFE.sub("_", part) or "_"


def mcp_tool_name(server: str, tool: str) -> str:
    """The lich tool name of ``server``'s ``tool``: at most 64 characters of
    ``[A-Za-z0-9_-]``."""
    name = f"{PREFIX}{sanitise(server)}__{sanitise(tool)}"
    if len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_HASH_CHARS]
    return f"{name[:MAX_TOOL_NAME - _HASH_CHARS - 1]}_{digest}"
