"""Web tools: ``fetch_url``, ``web_search``, ``http_request`` (all through :class:`NetGuard`)."""

from __future__ import annotations

import asyncio
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from lich.guards import (
    ToolError,
    optional_int_arg,
    optional_string_arg,
    require_string_arg,
    truncate_text,
)
from lich.tools import Tool, ToolContext
from lich.types import ToolResult
from lich_builtin_tools._common import USER_AGENT, parse_charset, schema, time_cap_s
from lich_builtin_tools._net import FetchResult, NetGuard
from lich_builtin_tools._settings import (
    DEFAULT_SEARCH_URL,
    NetSettings,
    WebSearchSettings,
    tool_settings,
)

__all__ = ["DEFAULT_SEARCH_URL", "make_web_tools", "parse_search_results"]

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
_SEARCH_MAX_BYTES = 2_000_000
# Worst case UTF-8 is 4 bytes a character: read enough bytes for max_chars.
_BYTES_PER_CHAR = 4


def _integer(description: str) -> dict[str, str]:
    return {"type": "integer", "description": description}


def _decode(result: FetchResult) -> str:
    return result.body.decode(parse_charset(result.content_type), "replace")


async def _within(seconds: float, what: str, coro: Any) -> Any:
    try:
        async with asyncio.timeout(seconds):
            return await coro
    except TimeoutError:
        raise ToolError(f"timeout: {what} exceeded {round(seconds * 1000)}ms") from None


def _refuse_binary(head: FetchResult) -> None:
    ct = head.content_type
    if not 200 <= head.status < 300:
        raise ToolError(f"http_{head.status}")
    if ct.lower().startswith(("image/", "application/octet-stream")):
        raise ToolError(f"unsupported_content_type: {ct}")


def make_web_tools(guard: NetGuard | None = None) -> list[Tool]:
    """``fetch_url``, ``web_search`` and ``http_request`` sharing one :class:`NetGuard`."""
    net = guard or NetGuard()

    async def fetch_url(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raw = require_string_arg(args, "url")
        max_chars = optional_int_arg(args, "max_chars", 20_000, lo=1, hi=100_000)
        timeout_ms = optional_int_arg(args, "timeout_ms", 20_000, lo=1, hi=60_000)
        settings = tool_settings(ctx, "fetch_url", NetSettings)
        seconds = min(timeout_ms / 1000, time_cap_s(settings, fetch_url_tool.timeout_s))
        result: FetchResult = await _within(
            seconds,
            "fetch_url",
            net.request(
                "GET", raw, tool="fetch_url", allow_private=settings.allow_private,
                headers={"user-agent": USER_AGENT},
                max_bytes=max_chars * _BYTES_PER_CHAR, before_body=_refuse_binary,
            ),
        )
        ct = result.content_type
        body = truncate_text(_decode(result), max_chars)
        if "text/html" in ct.lower():
            body = "[html content]\n" + body
        header = f"# {result.status} {ct or 'unknown'} ({result.size_label()} bytes)"
        note = f"\n{result.cut_note()}" if result.cut else ""
        return ToolResult.success(f"{header}\n{body}{note}")

    fetch_url_tool = Tool(
        name="fetch_url",
        description=(
            "HTTP GET a URL and return its text (HTML is returned as-is, marked "
            "'[html content]'). Private, loopback and metadata addresses are refused."
        ),
        parameters=schema(
            {
                "url": {"type": "string", "description": "An http(s) URL."},
                "max_chars": _integer("Body chars (default 20000, max 100000)."),
                "timeout_ms": _integer("Timeout ms (default 20000, max 60000)."),
            },
            ["url"],
        ),
        execute=fetch_url,
        timeout_s=65.0,
        max_output_chars=101_000,
        # Reads only (a GET); the URL itself does leave the machine: docs/tools.md says
        # how to make it ask.
        read_only=True,
        primary_arg="url",
        primary_kind="url",
    )

    async def web_search(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        query = require_string_arg(args, "query")
        max_results = optional_int_arg(args, "max_results", 8, lo=1, hi=20)
        timeout_ms = optional_int_arg(args, "timeout_ms", 20_000, lo=1, hi=60_000)
        settings = tool_settings(ctx, "web_search", WebSearchSettings)
        base_url = settings.base_url
        seconds = min(timeout_ms / 1000, time_cap_s(settings, web_search_tool.timeout_s))
        sep = "&" if "?" in base_url else "?"
        url = f"{base_url}{sep}q={urllib.parse.quote_plus(query)}"
        try:
            result: FetchResult = await _within(
                seconds,
                "web_search",
                net.request(
                    "GET", url, tool="web_search", allow_private=settings.allow_private,
                    headers={"user-agent": USER_AGENT, "accept-language": "en"},
                    max_bytes=_SEARCH_MAX_BYTES,
                ),
            )
        except ToolError as exc:
            raise ToolError(f"search_failed: {exc}") from exc
        if not 200 <= result.status < 300:
            raise ToolError(f"search_failed: http_{result.status}")
        hits = parse_search_results(_decode(result))[:max_results]
        if not hits:
            return ToolResult.success("no results")
        return ToolResult.success(
            "\n".join(f"{i}. {title}\n   {link}" for i, (title, link) in enumerate(hits, 1))
        )

    web_search_tool = Tool(
        name="web_search",
        description="Search the web (DuckDuckGo HTML, no API key) and list titles with URLs.",
        parameters=schema(
            {
                "query": {"type": "string", "description": "What to search for."},
                "max_results": _integer("Results (default 8, max 20)."),
                "timeout_ms": _integer("Timeout ms (default 20000, max 60000)."),
            },
            ["query"],
        ),
        execute=web_search,
        timeout_s=65.0,
        read_only=True,
    )

    async def http_request(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raw = require_string_arg(args, "url")
        method = optional_string_arg(args, "method", "GET").upper()
        if method not in HTTP_METHODS:
            raise ToolError(f"invalid_method: {method}")
        headers = _header_arg(args.get("headers"))
        body_arg = args.get("body")
        body = (
            body_arg.encode("utf-8")
            if isinstance(body_arg, str) and body_arg and method not in ("GET", "HEAD")
            else None
        )
        timeout_ms = optional_int_arg(args, "timeout_ms", 30_000, lo=1, hi=120_000)
        max_chars = optional_int_arg(args, "max_chars", 20_000, lo=1, hi=100_000)
        settings = tool_settings(ctx, "http_request", NetSettings)
        seconds = min(timeout_ms / 1000, time_cap_s(settings, http_request_tool.timeout_s))
        result: FetchResult = await _within(
            seconds,
            "http_request",
            net.request(
                method, raw, tool="http_request", allow_private=settings.allow_private,
                headers=headers, body=body, max_bytes=max_chars * _BYTES_PER_CHAR,
            ),
        )
        lines = [f"# status {result.status}", f"# content-type {result.content_type or 'unknown'}"]
        for name in ("content-length", "ratelimit-remaining", "retry-after"):
            if name in result.headers:
                lines.append(f"# header {name}: {result.headers[name]}")
        lines.append("")
        lines.append(truncate_text(_decode(result), max_chars))
        if result.cut:
            lines.append(result.cut_note())
        return ToolResult.success("\n".join(lines))

    http_request_tool = Tool(
        name="http_request",
        description=(
            "Make an HTTP request (GET POST PUT PATCH DELETE HEAD OPTIONS) with headers and a "
            "body; returns status, content type, selected headers and the body. Non-2xx "
            "statuses are results, not errors. Private and loopback addresses are refused."
        ),
        parameters=schema(
            {
                "url": {"type": "string", "description": "An http(s) URL."},
                "method": {"type": "string", "description": "HTTP method (default GET)."},
                "headers": {"type": "object", "description": "Request headers."},
                "body": {"type": "string", "description": "Request body (not sent for GET/HEAD)."},
                "timeout_ms": _integer("Timeout ms (default 30000, max 120000)."),
                "max_chars": _integer("Body chars (default 20000, max 100000)."),
            },
            ["url"],
        ),
        execute=http_request,
        timeout_s=125.0,
        max_output_chars=101_000,
        requires_approval=True,
        primary_arg="url",
        primary_kind="url",
    )

    return [fetch_url_tool, web_search_tool, http_request_tool]


def _header_arg(value: Any) -> dict[str, str]:
    """A plain object of headers; anything else is ignored, null values skipped."""
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, str] = {}
    for name, item in value.items():
        if item is None:
            continue
        if isinstance(item, bool):
            item = "true" if item else "false"
        text = item if isinstance(item, str) else str(item)
        if "\n" in text or "\r" in text or "\n" in str(name) or "\r" in str(name):
            raise ToolError(f"invalid_header: {name}: header names and values are single lines")
        out[str(name)] = text
    return out


_RESULT_ANCHOR = re.compile(
    r"""<a\b[^>]*?\bclass="[^"]*\bresult__a\b[^"]*"[^>]*?\bhref="([^"]*)"[^>]*>(.{0,4000}?)</a>""",
    re.S | re.I,
)
_ENTITY = re.compile(r"&(?:amp|lt|gt|quot|#x27|#39);")
_ENTITIES = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#x27;": "'", "&#39;": "'"}
_TAG = re.compile(r"<[^>]+>")


def _decode_entities(text: str) -> str:
    return _ENTITY.sub(lambda m: _ENTITIES[m.group(0)], text)


def _unwrap(href: str) -> str:
    href = _decode_entities(href)
    if href.startswith(("//duckduckgo.com/l/?", "/l/?")):
        m = re.search(r"[?&]uddg=([^&]*)", href)
        if m:
            return urllib.parse.unquote(m.group(1))
    return href


def parse_search_results(page: str) -> list[tuple[str, str]]:
    """``(title, url)`` pairs from a DuckDuckGo HTML results page.

    Result anchors carry ``class="result__a"`` before ``href``; titles are
    entity-decoded then stripped of tags; DuckDuckGo's ``/l/?uddg=`` redirect
    links are unwrapped to their target.
    """
    # The title group is bounded so a page full of unclosed anchors stays linear.
    hits: list[tuple[str, str]] = []
    for m in _RESULT_ANCHOR.finditer(page):
        title = _TAG.sub("", _decode_entities(m.group(2))).strip()
        hits.append((title, _unwrap(m.group(1))))
    return hits
