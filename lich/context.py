"""Keeping the conversation inside the context budget.

Token counts are estimates (characters / 4), the same rule the reference
harness used; they only need to be good enough to decide *when* to compress.
Compression summarises the older part of the conversation with the model
itself and keeps the rest verbatim, never splitting an assistant's tool calls
from their results and always keeping the latest user message.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence

from attrs import field, frozen

from lich.guards import truncate_text
from lich.types import (
    AssistantMessage,
    ChatFn,
    ChatOptions,
    ChatResult,
    Message,
    ProviderError,
    SystemMessage,
    ToolDefinition,
    ToolMessage,
    Usage,
    UserMessage,
)

__all__ = [
    "COMPRESSION_SYSTEM_PROMPT",
    "KEEP_RECENT",
    "SUMMARY_CLOSE",
    "SUMMARY_OPEN",
    "CompressResult",
    "CompressionSplit",
    "compress_messages",
    "estimate_text_tokens",
    "estimate_usage",
    "is_summary",
    "message_tokens",
    "schema_tokens",
    "split_for_compression",
]

log = logging.getLogger("lich.context")

KEEP_RECENT = 8
TRANSCRIPT_MAX_CHARS = 24_000
SUMMARY_OPEN = "[context summary of earlier turns]"
SUMMARY_CLOSE = "[end summary]"
COMPRESSION_SYSTEM_PROMPT = (
    "You compress conversations between a user and an AI agent. Write a terse, factual "
    "summary that keeps the user's goals, decisions made, file paths, commands run and "
    "their results, errors met, and open questions. Plain text only, no preamble."
)
_INSTRUCTION = (
    "Summarize the earlier conversation below so that the agent can continue the task "
    "from the summary alone."
)


def estimate_text_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``."""
    return math.ceil(len(text) / 4)


def message_tokens(message: Message) -> int:
    """Estimated tokens of one message: its text, its tool calls, and 8 per tool result."""
    tokens = estimate_text_tokens(message.content)
    if isinstance(message, AssistantMessage) and message.tool_calls:
        calls = [{"id": c.id, "name": c.name, "args": c.args} for c in message.tool_calls]
        tokens += estimate_text_tokens(json.dumps(calls, ensure_ascii=False))
    elif isinstance(message, ToolMessage):
        tokens += 8
    return tokens


def estimate_usage(prompt_tokens: int, answer: Message) -> Usage:
    """The estimated :class:`~lich.types.Usage` of a call whose provider reported none:
    ``prompt_tokens`` (the request's estimate: :func:`message_tokens` of its messages
    plus :func:`schema_tokens` of its tools) and the answer's :func:`message_tokens`,
    marked ``estimated``."""
    completion = message_tokens(answer)
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion,
                 total_tokens=prompt_tokens + completion, estimated=True)


def schema_tokens(definitions: Sequence[ToolDefinition]) -> int:
    """Estimated tokens the tool schemas add to every request."""
    if not definitions:
        return 0
    payload = [
        {"name": d.name, "description": d.description, "parameters": d.parameters}
        for d in definitions
    ]
    return estimate_text_tokens(json.dumps(payload, ensure_ascii=False))


@frozen
class CompressResult:
    """The outcome of one compression attempt.

    ``ok`` is ``False`` when the summarizer failed; ``messages`` is then the
    input unchanged. ``summary_chars`` is 0 when nothing was summarised.
    """

    messages: tuple[Message, ...]
    summary_chars: int
    ok: bool
    usage: Usage = field(factory=Usage)
    #: The summarizer's answer (``None``: no call was made, or it failed): what prices it.
    result: ChatResult | None = field(default=None, eq=False, repr=False)


@frozen
class CompressionSplit:
    """How :func:`split_for_compression` divides a conversation.

    ``before + [pinned] + after + recent`` (``pinned`` left out when ``None``)
    is the conversation without its system messages. ``before`` and ``after``
    are summarised; ``pinned`` — the latest user message (never an earlier
    summary), when the kept window does not reach back to it — and ``recent``
    are kept verbatim.
    """

    system: tuple[Message, ...]
    before: tuple[Message, ...]
    pinned: UserMessage | None
    after: tuple[Message, ...]
    recent: tuple[Message, ...]

    @property
    def older(self) -> tuple[Message, ...]:
        """Everything that is summarised."""
        return (*self.before, *self.after)


def split_for_compression(
    messages: Sequence[Message], keep_recent: int = KEEP_RECENT
) -> CompressionSplit:
    """Split a conversation for compression (see :class:`CompressionSplit`).

    ``recent`` holds at least the last ``keep_recent`` non-system messages,
    widened so that it does not start with a tool result (its assistant
    message comes along). The latest user message is always kept verbatim,
    but the work that followed it is summarised like anything else: a long
    single-task run (one request, then many tool turns) must be compressible.
    """
    system = tuple(m for m in messages if isinstance(m, SystemMessage))
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    start = max(0, len(rest) - keep_recent)
    # Never begin the kept window with orphaned tool results.
    while 0 < start < len(rest) and isinstance(rest[start], ToolMessage):
        start -= 1
    # An earlier summary is a user message too, but not the user's request: pinning it
    # instead would summarise the real request away on the second compression.
    last_user = max(
        (i for i, m in enumerate(rest) if isinstance(m, UserMessage) and not is_summary(m)),
        default=None,
    )
    if last_user is None or last_user >= start:
        return CompressionSplit(system, tuple(rest[:start]), None, (), tuple(rest[start:]))
    pinned = rest[last_user]
    assert isinstance(pinned, UserMessage)
    return CompressionSplit(
        system,
        tuple(rest[:last_user]),
        pinned,
        tuple(rest[last_user + 1 : start]),
        tuple(rest[start:]),
    )


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary written by :func:`compress_messages`."""
    return (
        isinstance(message, UserMessage)
        and message.content.startswith(f"{SUMMARY_OPEN}\n")
        and message.content.endswith(f"\n{SUMMARY_CLOSE}")
    )


def _transcript(messages: Sequence[Message]) -> str:
    lines = []
    for m in messages:
        line = f"[{m.role}] {m.content}"
        if isinstance(m, AssistantMessage) and m.tool_calls:
            calls = [{"name": c.name, "args": c.args} for c in m.tool_calls]
            line += f" tool_calls={json.dumps(calls, ensure_ascii=False)}"
        lines.append(line)
    text = "\n".join(lines)
    return truncate_text(text, TRANSCRIPT_MAX_CHARS)


async def compress_messages(
    chat: ChatFn, messages: Sequence[Message], *, keep_recent: int = KEEP_RECENT,
    focus: str | None = None,
) -> CompressResult:
    """Summarise the older part of ``messages`` with ``chat``.

    Returns ``[*system, summary (as a user message), *recent]``, or, when the
    latest user message is older than the kept window, ``[*system, latest user
    message, summary, *recent]``. A summarizer failure (a
    :class:`ProviderError` or an empty summary) leaves the messages unchanged
    with ``ok=False``. Cancellation propagates to the caller. ``focus`` is added to
    the summariser's instruction (what the summary must keep in particular).
    """
    split = split_for_compression(messages, keep_recent)
    if not split.older:
        return CompressResult(tuple(messages), 0, True)
    # The summarizer sees the pinned request in its place, so it knows what the work was for.
    shown = [*split.before, *([split.pinned] if split.pinned else []), *split.after]
    request: list[Message] = [
        SystemMessage(COMPRESSION_SYSTEM_PROMPT),
        UserMessage(f"{_INSTRUCTION}{f' Keep in particular: {focus}' if focus else ''}"
                    f"\n\n{_transcript(shown)}"),
    ]
    try:
        result = await chat(request, [], ChatOptions())
    except ProviderError as exc:
        log.warning("context compression failed (%s, %s): %s", exc.kind, exc.provider_name,
                    exc.message)
        return CompressResult(tuple(messages), 0, False)
    except Exception as exc:  # a broken chat function must not take the run down with it
        log.warning("context compression failed: %s: %s", type(exc).__name__, exc)
        return CompressResult(tuple(messages), 0, False)
    summary = result.message.content.strip()
    if not summary:
        log.warning("context compression failed: the summarizer returned no text")
        return CompressResult(tuple(messages), 0, False, result.usage, result)
    summary_message = UserMessage(f"{SUMMARY_OPEN}\n{summary}\n{SUMMARY_CLOSE}")
    head = (split.pinned, summary_message) if split.pinned else (summary_message,)
    return CompressResult(
        (*split.system, *head, *split.recent), len(summary), True, result.usage, result
    )
