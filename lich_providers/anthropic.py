"""The ``anthropic`` provider plugin: the Anthropic Messages API.

``POST {base_url}/v1/messages`` with ``x-api-key`` and
``anthropic-version: 2023-06-01``. Two structural differences from lich's
messages: every system message is hoisted into the top-level ``system``
string (joined with ``\\n``), and consecutive tool messages become *one* user
turn of ``tool_result`` blocks, because the API wants tool results inside a
user turn right after the assistant turn that asked for them. Assistant text
that is empty is not sent (the API rejects empty text blocks).

Streaming is server-sent events: ``message_start``, ``content_block_start``,
``content_block_delta`` (``text_delta``, ``input_json_delta``),
``content_block_stop``, ``message_delta`` (stop reason, usage),
``message_stop``, plus ``ping`` and ``error``. A key is always required.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from lich.hooks import hookimpl
from lich.providers import ProviderDefaults
from lich.types import (
    AssistantMessage,
    ChatOptions,
    ChatResult,
    FinishReason,
    Message,
    ProviderError,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    Usage,
    UserMessage,
)
from lich_providers._base import (
    HttpProvider,
    StreamAssembler,
    loads_event,
    parse_tool_args,
    read_key,
    sse_events,
)
from lich_providers._http import SseEvent, cut, kind_for_status

if TYPE_CHECKING:
    from lich.providers import ProviderRegistry

__all__ = ["AnthropicProvider", "lich_register_providers"]

API_VERSION = "2023-06-01"
DEFAULT_KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULTS = ProviderDefaults(base_url="https://api.anthropic.com", key_env=DEFAULT_KEY_ENV)
DEFAULT_MAX_TOKENS = 4096

# What build_body folds a history into (see HttpProvider.wire_fold): the system texts,
# the complete turns, the trailing tool_result blocks.
_Fold = tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]

# The statuses behind the error types the API reports inside a stream (or a body).
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _usage(usage: Any) -> Usage:
    """The ``usage`` object of an answer (a stream's is assembled from ``message_start``
    and ``message_delta``).

    The API's ``input_tokens`` leaves the cache out: lich's ``prompt_tokens`` is the
    whole prompt, ``input_tokens + cache_creation_input_tokens +
    cache_read_input_tokens``, with the two cache counts kept as its breakdown. The
    API reports no separate thinking count (thinking is billed as output).
    """
    if not isinstance(usage, dict):
        return Usage()
    written = _int(usage.get("cache_creation_input_tokens"))
    read = _int(usage.get("cache_read_input_tokens"))
    prompt = _int(usage.get("input_tokens")) + written + read
    completion = _int(usage.get("output_tokens"))
    return Usage(prompt, completion, prompt + completion,
                 cache_read_tokens=read, cache_write_tokens=written)


def _finish(reason: Any, has_tool_calls: bool) -> FinishReason:
    if has_tool_calls:
        return "tool_calls"
    if reason in ("end_turn", "stop_sequence"):
        return "stop"
    if reason == "max_tokens":
        return "length"
    return "unknown"


class AnthropicProvider(HttpProvider):
    """Claude models through the Messages API."""

    kind = "anthropic"
    path = "/v1/messages"
    overflow = re.compile(r"context|token|maximum", re.I)
    defaults = DEFAULTS

    def auth_headers(self) -> dict[str, str]:
        """``x-api-key`` and ``anthropic-version``; ``auth`` error when a named key is not set.

        ANTHROPIC_API_KEY is read for api.anthropic.com only; another host (a proxy,
        a compatible server) gets the variable ``api_key_env`` names, or no key.
        """
        var = self.config.api_key_env
        headers: dict[str, str] = {}
        if var is not None:
            key = read_key(self.env, var)
            if key is None:
                raise self.missing_key(var)
            headers["x-api-key"] = key
        # A configured version header (e.g. to try a newer API) is left alone.
        if not any(h.lower() == "anthropic-version" for h in self.config.headers):
            headers["anthropic-version"] = API_VERSION
        return headers

    def build_body(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ChatOptions,
    ) -> dict[str, Any]:
        """The Messages API request body."""
        start: _Fold = ([], [], [])
        system, turns, results = self.wire_fold(messages, start, self._fold)
        # A new list for the caller; a trailing group of tool results is made a turn here,
        # per request (the next request may add to the group).
        turns = [*turns, {"role": "user", "content": [*results]}] if results else [*turns]

        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": options.max_tokens or self.config.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": turns,
        }
        if system:
            body["system"] = "\n".join(system)
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                for t in tools
            ]
        if options.temperature is not None:
            body["temperature"] = options.temperature
        if options.stream:
            body["stream"] = True
        return body

    def _fold(self, state: _Fold, new: Sequence[Message]) -> _Fold:
        # The wire_fold() step: system texts, complete turns, and the tool results not yet
        # closed into a user turn (a later tool message joins them), each a new list.
        system, turns, results = [*state[0]], [*state[1]], [*state[2]]
        wire_of = self.wire_of
        for m in new:
            if isinstance(m, ToolMessage):
                results.append(wire_of(m, _tool_result))
                continue
            if results:
                turns.append({"role": "user", "content": results})
                results = []
            if isinstance(m, SystemMessage):
                system.append(m.content)
                continue
            turn = wire_of(m, _turn)
            if turn is not None:
                turns.append(turn)
        return system, turns, results

    def error_from(self, error: Any, what: str) -> ProviderError:
        """The :class:`ProviderError` for an API error object (``{"type", "message"}``)."""
        kind_name = error.get("type") if isinstance(error, dict) else None
        message = str(error.get("message") if isinstance(error, dict) else error)
        status = _ERROR_STATUS.get(str(kind_name))
        # An error type we do not know, reported mid-stream, is treated as a broken stream.
        kind = kind_for_status(status, message, self.overflow) if status else "network"
        return self.http.error(
            kind, f"{what}: {kind_name or 'error'}: {cut(message)}", status=status
        )

    def parse_response(self, data: Any) -> ChatResult:
        """A Messages API answer as a :class:`ChatResult`."""
        if not isinstance(data, dict):
            raise self.http.bad_stream("response is not a JSON object", json.dumps(data))
        if data.get("type") == "error" or data.get("error"):
            raise self.error_from(data.get("error"), "error in response")
        content = data.get("content")
        if not isinstance(content, list):
            raise self.http.bad_stream("response has no content", json.dumps(data))
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in content:
            kind = block.get("type")
            if kind == "text":
                text = block.get("text") or ""
                if text:
                    texts.append(text)
            elif kind == "tool_use":
                args, error = parse_tool_args(block.get("input"))
                calls.append(ToolCall(str(block.get("id") or f"toolu_{len(calls)}"),
                                      str(block.get("name") or ""), args, error))
            # thinking / redacted_thinking blocks are not part of the answer text.
        return ChatResult(
            message=AssistantMessage("\n".join(texts), tuple(calls)),
            usage=_usage(data.get("usage")),
            finish_reason=_finish(data.get("stop_reason"), bool(calls)),
            model=str(data.get("model") or self.model),
            provider_name=self.name,
            response_id=str(data.get("id") or ""),
        )

    def assembler(self, options: ChatOptions) -> StreamAssembler:
        """An assembler for one Messages API SSE stream."""
        return _AnthropicStream(self, options)


class _AnthropicStream(StreamAssembler):
    provider: AnthropicProvider

    def __init__(self, provider: AnthropicProvider, options: ChatOptions) -> None:
        super().__init__(provider, options)
        self.message: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, list[str]] = {}
        self.texted: set[int] = set()
        self.stop_reason: Any = None

    def _text(self, index: int, piece: str) -> None:
        if not piece:
            return
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        block["text"] = (block.get("text") or "") + piece
        if index not in self.texted:
            # Text blocks are joined with "\n" in the answer; stream the same.
            if self.texted:
                piece = "\n" + piece
            self.texted.add(index)
        self.text(piece)

    async def consume(self, lines: AsyncIterator[str]) -> None:
        # Closed here when the answer's last event comes before the body's end (it does:
        # the loop stops there), instead of by the event loop in a task of its own.
        async with aclosing(sse_events(self.provider, lines)) as events:
            await self._consume(events)

    async def _consume(self, events: AsyncIterator[SseEvent]) -> None:
        async for event in events:
            data = loads_event(self.provider, event.data)
            if not isinstance(data, dict):
                raise self.provider.http.bad_stream("stream event is not an object", event.data)
            kind = data.get("type") or event.event
            if kind == "message_start":
                self.message = dict(data.get("message") or {})
                self.usage.update(self.message.get("usage") or {})
            elif kind == "content_block_start":
                index = data.get("index", len(self.blocks))
                block = dict(data.get("content_block") or {})
                text = block.pop("text", None) if block.get("type") == "text" else None
                if block.get("type") == "text":
                    block["text"] = ""
                self.blocks[index] = block
                if text:
                    self._text(index, text)
            elif kind == "content_block_delta":
                index = data.get("index", 0)
                delta = data.get("delta") or {}
                if delta.get("type") == "text_delta":
                    self._text(index, delta.get("text") or "")
                elif delta.get("type") == "input_json_delta":
                    self.partial_json.setdefault(index, []).append(delta.get("partial_json") or "")
            elif kind == "message_delta":
                delta = data.get("delta") or {}
                self.stop_reason = delta.get("stop_reason") or self.stop_reason
                self.usage.update({k: v for k, v in (data.get("usage") or {}).items()
                                   if v is not None})
            elif kind == "message_stop":
                return
            elif kind == "error":
                raise self.provider.error_from(data.get("error"), "stream error")
            # ping, content_block_stop and event types added later need nothing.
        if self.stop_reason is None:
            # message_delta's stop_reason completes the answer (message_stop adds nothing).
            raise self.provider.http.broken_stream(
                "the stream ended before the answer's stop_reason (message_delta)")

    def response(self) -> Any:
        content = []
        for index, block in sorted(self.blocks.items()):
            block = dict(block)
            if block.get("type") == "tool_use" and index in self.partial_json:
                # The streamed arguments as sent; parse_response reports bad JSON.
                block["input"] = "".join(self.partial_json[index])
            content.append(block)
        return {
            **self.message,
            "content": content,
            "stop_reason": self.stop_reason,
            "usage": self.usage,
        }


def _tool_result(m: ToolMessage) -> dict[str, Any]:
    """A tool message as a ``tool_result`` block (consecutive ones share one user turn)."""
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": m.tool_call_id,
        "content": m.content,
    }
    if m.is_error:
        block["is_error"] = True
    return block


def _turn(m: Message) -> dict[str, Any] | None:
    """A user or assistant message as a turn (``None``: nothing to send)."""
    if isinstance(m, UserMessage):
        return {"role": "user", "content": m.content}
    if isinstance(m, AssistantMessage):
        blocks: list[dict[str, Any]] = []
        if m.content.strip():
            blocks.append({"type": "text", "text": m.content})
        blocks.extend(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.args}
            for c in m.tool_calls
        )
        # An empty assistant turn carries nothing and the API refuses
        # empty text blocks: leave it out.
        return {"role": "assistant", "content": blocks} if blocks else None
    return None


@hookimpl
def lich_register_providers(registry: ProviderRegistry) -> None:
    """Register the ``anthropic`` provider kind."""
    registry.register("anthropic", AnthropicProvider, defaults=DEFAULTS, identity="anthropic")
