"""Text helpers shared by the gateway: chunking replies, user-safe errors, log lines.

Nothing here imports a network library; the bus and every adapter use it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lich.logcontext import current_admission
from lich.secrets import redact_urls

__all__ = [
    "conversation_session_id",
    "flatten_line",
    "legacy_session_id",
    "log_event",
    "redact",
    "sanitize_error",
    "split_text",
    "utf16_len",
]

# Session ids must match lich.sessions' pattern: [A-Za-z0-9][A-Za-z0-9._-]{0,127}.
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_WHITESPACE = re.compile(r"\s+")


def utf16_len(text: str) -> int:
    """The length of ``text`` in UTF-16 code units (how Telegram counts its limits).

    A character outside the Basic Multilingual Plane (most emoji) is two
    units. A lone surrogate, which a model's JSON can smuggle in, counts as
    one instead of raising.
    """
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _fitting_prefix(text: str, limit: int, length: Callable[[str], int]) -> int:
    """The most code points of ``text`` whose ``length`` is at most ``limit`` (at least 1)."""
    if length is len:
        return max(1, min(limit, len(text)))
    # Lengths grow with the prefix, so the longest prefix that fits is a binary search away.
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if length(text[:mid]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    # A single code point longer than the limit still goes out, so splitting always ends.
    return max(1, lo)


def split_text(text: str, limit: int, length: Callable[[str], int] = len) -> list[str]:
    """Split ``text`` into chunks whose ``length`` is at most ``limit``.

    ``length`` is how the platform counts (code points by default;
    :func:`utf16_len` for Telegram). A chunk ends at the last newline inside
    the window, else at the last space, else hard at the limit; the
    whitespace at a cut is dropped, so ``"".join`` of the chunks loses only
    those separators. Cuts fall between code points, so a character (an
    emoji's surrogate pair, in UTF-16) is never split. Empty text gives no
    chunks.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    chunks: list[str] = []
    rest = text.strip()
    while rest:
        if length(rest) <= limit:
            chunks.append(rest)
            break
        end = _fitting_prefix(rest, limit, length)
        # One more character, so a separator right at the limit is still a clean cut.
        window = rest[: end + 1]
        cut = window.rfind("\n")
        if cut <= 0:
            cut = window.rfind(" ")
        if cut <= 0:
            cut = end
        chunk = rest[:cut].rstrip()
        if chunk:
            chunks.append(chunk)
        rest = rest[cut:].lstrip()
    return chunks


def flatten_line(text: str) -> str:
    """``text`` on one line: every run of whitespace (newlines included) becomes one space.

    IRC ends a command at a line break, so a reply with a newline would
    otherwise smuggle a second, arbitrary command onto the connection.
    """
    return _WHITESPACE.sub(" ", text).strip()


def _slugs(platform: str, chat_id: str) -> tuple[str, str]:
    platform_slug = _SLUG_UNSAFE.sub("-", platform).strip("-._")[:24] or "p"
    chat_slug = _SLUG_UNSAFE.sub("-", chat_id).strip("-._")[:48] or "chat"
    return platform_slug, chat_slug


def _keyed_mac(key: bytes, text: str, what: str) -> bytes:
    """HMAC-SHA256 of ``text`` under the install's ``key`` (``what`` names the id it
    makes, for the error about a key too short to be a secret)."""
    if len(key) < 16:
        raise ValueError(f"the {what} key must be at least 16 bytes")
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def keyed_status_id(name: str, key: bytes) -> str:
    """A status id for ``name`` (a message's admission id): an HMAC-SHA256 under ``key``
    (the install's secret), 18 bytes in URL-safe base64 — the shape of a random one.

    Every process of an install computes the same id for the same message, and no one
    without the key can: a worker can answer the status URL of a message whose ingress
    died (docs/cluster.md), and knowing an admission id (it is in the logs) does not
    give the URL.
    """
    mac = _keyed_mac(key, f"lich-status\x00{name}", "status id")
    return base64.urlsafe_b64encode(mac[:18]).decode("ascii")


def conversation_session_id(platform: str, chat_id: str, key: bytes) -> str:
    """The stable session id of one conversation: ``gw-<platform>-<chat>-<mac>``.

    Readable (the platform and a slug of the chat id) and unguessable: the
    last part is an HMAC-SHA256 of both under ``key``, the install's secret
    (:func:`lich.gateway._keys.load_or_create_key`), cut to 96 bits — so
    knowing a chat id is not enough to name, or find, its transcript, and two
    chat ids that slug alike still differ. Always a valid session id,
    whatever characters the platform uses for its chat ids.
    """
    mac = _keyed_mac(key, f"{platform}\x00{chat_id}", "session id").hex()[:24]
    platform_slug, chat_slug = _slugs(platform, chat_id)
    return f"gw-{platform_slug}-{chat_slug}-{mac}"


def person_ledger_id(platform: str, user_id: str, key: bytes) -> str:
    """The session id of one person's spend ledger: ``gw-spend-<platform>-<mac>``.

    The daily budget is the person's (platform and sender id) across all their
    chats, so what each of their runs cost is appended to a ledger of their own
    in the session store (surviving a restart, shared by the processes of one
    store). Keyed as :func:`conversation_session_id` is, under another purpose,
    so it names no conversation and cannot be computed without the install's key.
    """
    mac = _keyed_mac(key, f"{platform}\x00{user_id}", "spend ledger").hex()[:24]
    platform_slug, _ = _slugs(platform, user_id)
    return f"gw-spend-{platform_slug}-{mac}"


def legacy_session_id(platform: str, chat_id: str) -> str:
    """The session id earlier versions gave a conversation: an unkeyed hash anyone can compute.

    Only read, to move an existing transcript to its keyed name once
    (:class:`lich.gateway.GatewayBus` does it when the conversation is next used).
    """
    digest = hashlib.sha256(f"{platform}\x00{chat_id}".encode()).hexdigest()[:12]
    platform_slug, chat_slug = _slugs(platform, chat_id)
    return f"gw-{platform_slug}-{chat_slug}-{digest}"


# Shapes that look like credentials, whatever variable they came from.
_SECRET_PATTERNS = (
    (re.compile(r"(?i)\b(bearer|bot|basic|oauth)([ :]+)[A-Za-z0-9._~+/=-]{8,}"), r"\1\2[redacted]"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), "[redacted]"),
    # Telegram puts the bot token in the URL path.
    (re.compile(r"/bot\d+:[A-Za-z0-9_-]+"), "/bot[redacted]"),
    (re.compile(r"(?i)([?&](?:key|token|api_key|access_token)=)[^&\s]+"), r"\1[redacted]"),
)


def redact(text: str, secrets_: Iterable[str] = ()) -> str:
    """``text`` with every known secret value and credential-shaped string replaced."""
    for value in secrets_:
        if value and len(value) >= 4:
            text = text.replace(value, "[redacted]")
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return redact_urls(text)  # a bus's or a store's URL with its password


_KIND_TEXT = {
    "auth": "the model provider rejected lich's credentials",
    "rate_limit": "the model provider is rate limiting requests; try again shortly",
    "server_error": "the model provider failed (a server error); try again shortly",
    "overflow": "the conversation is too long for the model; send /new to start over",
    "bad_request": "the model provider refused the request",
    "network": "the model provider could not be reached; try again shortly",
    "unknown": "the model provider failed",
}


def sanitize_error(exc: BaseException) -> tuple[str, str]:
    """What a chat user may see about ``exc``, and a reference for the logs.

    Returns ``(text, ref)``: ``text`` is ``agent error: <plain reason> (ref <ref>)``
    — never a traceback, an exception message (which may quote a request,
    a URL or a key) or a secret; ``ref`` is a short random id the gateway
    logs next to the full error so an operator can find it.
    """
    ref = secrets.token_hex(4)
    kind = getattr(exc, "kind", None)
    if isinstance(kind, str) and kind in _KIND_TEXT and hasattr(exc, "provider_name"):
        reason = _KIND_TEXT[kind]
    elif isinstance(exc, TimeoutError):
        reason = "the request timed out"
    else:
        reason = "internal error"
    return f"agent error: {reason} (ref {ref})", ref


# What makes a logfmt value need quotes (one search, not a scan per character).
_NEEDS_QUOTES = re.compile(r'[ "=\n\r\t]')


def _logfmt_value(value: Any) -> str:
    if type(value) is int:  # counts, ports, sizes: the most common fields, never quoted
        return str(value)
    text = str(value)
    if text == "" or _NEEDS_QUOTES.search(text) is not None:
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        escaped = escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
        return f'"{escaped}"'
    return text


def log_event(
    logger: logging.Logger, level: int, event: str, /, **fields: Any
) -> None:
    """Log one structured line: ``gateway event=<event> key=value ...`` (logfmt).

    ``None`` values are left out; values with spaces or quotes are quoted. While
    a message is handled (:mod:`lich.logcontext`) its ``admission`` is one of
    the fields, unless the caller gave one.
    """
    if not logger.isEnabledFor(level):
        return
    parts = [f"event={_logfmt_value(event)}"]
    parts.extend(f"{k}={_logfmt_value(v)}" for k, v in fields.items() if v is not None)
    if "admission" not in fields:
        admission = current_admission()
        if admission is not None:
            parts.append(f"admission={_logfmt_value(admission)}")
    logger.log(level, "gateway %s", " ".join(parts), extra={"logfmt": True})


def parse_logfmt(line: str) -> Mapping[str, str]:
    """Read back a line written by :func:`log_event` (for tests and log tooling)."""
    out: dict[str, str] = {}
    for m in re.finditer(r'(\w+)=("(?:\\.|[^"\\])*"|\S*)', line):
        value = m.group(2)
        if value.startswith('"'):
            value = value[1:-1].replace("\\n", "\n").replace("\\r", "\r").replace("\\t", "\t")
            value = value.replace('\\"', '"').replace("\\\\", "\\")
        out[m.group(1)] = value
    return out
