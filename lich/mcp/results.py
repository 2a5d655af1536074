"""What an MCP tool call gives back, as a :class:`lich.ToolResult` the model reads.

* text blocks, joined by newlines;
* ``structuredContent`` as JSON when there is no text (a server that sends both
  sends the text for the model) — unless it repeats a binary block's bytes (a
  server's structured copy of an image: server-filesystem's ``read_media_file``),
  which the content blocks already say, without the base64;
* images, audio and resources as one short placeholder line each, naming the type,
  MIME type and size — base64 bytes are no use to a text model and would flood
  its context;
* ``isError`` → a failed result carrying the server's text.

And what a server's tool annotations mean for approvals: they come from an
untrusted server, so they may only *tighten* — ``readOnlyHint`` never makes a
tool ``read_only``, while a tool that is destructive (``destructiveHint``, or by
the protocol's default when it says nothing) asks before every call. ``idempotentHint``
is taken as the tool's ``idempotent`` (a resumed turn runs such a call again rather
than telling the model it was interrupted).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from lich.guards import truncate_text
from lich.types import ToolResult

__all__ = ["is_idempotent", "map_result", "requires_approval"]


def _size(data: str) -> str:
    """The decoded size of base64 ``data``, for a placeholder."""
    try:
        n = len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        n = len(data)
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def _placeholder(block: Any) -> str | None:
    kind = getattr(block, "type", None)
    if kind == "text":
        return None
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {_size(block.data)}]"
    if kind == "resource":
        resource = block.resource
        mime = getattr(resource, "mime_type", None) or "unknown type"
        text = getattr(resource, "text", None)
        size = f"{len(text)} chars" if text is not None else _size(getattr(resource, "blob", ""))
        return f"[resource: {resource.uri} ({mime}, {size})]"
    if kind == "resource_link":
        link_mime = getattr(block, "mime_type", None) or "unknown type"
        length = getattr(block, "size", None)
        extra = f", {length} bytes" if length is not None else ""
        return f"[resource link: {block.uri} ({link_mime}{extra})]"
    return f"[{kind or 'unknown'} content]"


def _binary_data(block: Any) -> str | None:
    """The base64 bytes a block carries (an image's, an audio clip's, a blob's)."""
    kind = getattr(block, "type", None)
    if kind in ("image", "audio"):
        return getattr(block, "data", None) or None
    if kind == "resource":
        return getattr(block.resource, "blob", None) or None
    return None


def map_result(result: Any) -> ToolResult:
    """A ``CallToolResult`` as a :class:`ToolResult`."""
    parts: list[str] = []
    has_text = False
    binaries: list[str] = []
    for block in result.content or ():
        placeholder = _placeholder(block)
        if placeholder is None:
            has_text = True
            parts.append(block.text)
        else:
            parts.append(placeholder)
            data = _binary_data(block)
            if data:
                binaries.append(data)
    structured = getattr(result, "structured_content", None)
    if not has_text and structured is not None:
        encoded = json.dumps(structured, ensure_ascii=False, default=str)
        # A structured copy of a binary block would put its base64 back into the
        # context the placeholder keeps it out of: the blocks say it already.
        if not any(data in encoded for data in binaries):
            parts.insert(0, encoded)
    output = "\n".join(parts)
    if result.is_error:
        # The server's message is the error (cut: an error line is not for pages of text).
        text = truncate_text(output, 2000, style="inline")
        return ToolResult.failure(f"mcp_tool_error: {text}" if output else "mcp_tool_error")
    return ToolResult(ok=True, output=output)


def requires_approval(tool: Any) -> bool:
    """Whether a server's tool must ask before every call, from its annotations.

    No annotations, ``destructiveHint: true``, or no ``destructiveHint`` on a tool
    that does not claim to be read-only (the protocol's default is destructive):
    ask. ``readOnlyHint`` alone never makes a tool ``read_only`` in lich.
    """
    notes = getattr(tool, "annotations", None)
    if notes is None:
        return True
    if notes.destructive_hint is True:
        return True
    return notes.destructive_hint is None and notes.read_only_hint is not True


def is_idempotent(tool: Any) -> bool:
    """Whether a server's tool is ``idempotent`` in lich: its ``idempotentHint`` is true.

    Only the explicit hint counts (the protocol's default is ``false``; ``readOnlyHint``
    alone does not imply it, as it does not make a tool ``read_only``): a tool wrongly
    called idempotent could run twice when a turn is resumed after a crash.
    """
    notes = getattr(tool, "annotations", None)
    return notes is not None and getattr(notes, "idempotent_hint", None) is True
