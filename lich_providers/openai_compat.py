"""The ``openai_compat`` provider plugin: OpenAI chat completions and compatible servers.

``POST {base_url}/chat/completions`` with ``authorization: Bearer <key>``.
Messages map one to one (tool messages carry ``tool_call_id``; tool-call
arguments travel as JSON strings). Streaming is server-sent events: content
and tool-call argument deltas are assembled by index, usage arrives in a last
chunk requested with ``stream_options.include_usage``.

A key is required only for the well-known host ``api.openai.com``; a custom
``base_url`` (LM Studio, vLLM, llama.cpp, a gateway) may run without one.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from lich.hooks import hookimpl
from lich.providers import ProviderDefaults, host_of
from lich.types import (
    AssistantMessage,
    ChatOptions,
    ChatResult,
    FinishReason,
    Message,
    ProviderError,
    ProviderErrorKind,
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
    from lich.config import ProviderConfig
    from lich.providers import ProviderRegistry

__all__ = ["OpenAICompatProvider", "identity", "lich_register_providers"]

WELL_KNOWN_HOST = "api.openai.com"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
DEFAULTS = ProviderDefaults(base_url=f"https://{WELL_KNOWN_HOST}/v1", key_env=DEFAULT_KEY_ENV)


def _text(content: Any) -> str:
    # Some servers answer with content parts instead of a string.
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _usage(usage: Any) -> Usage:
    """The ``usage`` object of an answer (or of the last stream chunk).

    ``prompt_tokens_details.cached_tokens`` (part of ``prompt_tokens``) is the
    cache read, ``completion_tokens_details.reasoning_tokens`` (part of
    ``completion_tokens``) the thinking; servers that send neither get 0. The
    chat-completions API bills no separate cache write.
    """
    if not isinstance(usage, dict):
        return Usage()
    prompt, completion = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None
    reasoning = (completion_details.get("reasoning_tokens")
                 if isinstance(completion_details, dict) else None)
    return Usage(
        prompt,
        completion,
        _int(usage.get("total_tokens")) or prompt + completion,
        cache_read_tokens=_int(cached),
        reasoning_tokens=_int(reasoning),
    )


def _finish(reason: Any, has_tool_calls: bool) -> FinishReason:
    # Tool-call presence decides, not the server's label (see docs/providers.md).
    if has_tool_calls:
        return "tool_calls"
    if reason == "stop":
        return "stop"
    if reason == "length":
        return "length"
    return "unknown"


class OpenAICompatProvider(HttpProvider):
    """A chat-completions endpoint (OpenAI or any server speaking its dialect)."""

    kind = "openai_compat"
    path = "/chat/completions"
    overflow = re.compile(r"context|token|length", re.I)
    defaults = DEFAULTS

    def auth_headers(self) -> dict[str, str]:
        """``authorization: Bearer`` when a key resolves; ``auth`` when api.openai.com has none.

        Which variable is read was settled when the config was resolved: OPENAI_API_KEY
        only for api.openai.com, any other host only what ``api_key_env`` names.
        """
        var = self.config.api_key_env
        key = read_key(self.env, var)
        if key is not None:
            return {"authorization": f"Bearer {key}"}
        if self.at_key_host:
            raise self.missing_key(var or DEFAULT_KEY_ENV, f" ({WELL_KNOWN_HOST} needs a key)")
        return {}

    def build_body(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ChatOptions,
    ) -> dict[str, Any]:
        """The chat-completions request body."""
        wire = self.wire_list(messages, _wire_message)
        body: dict[str, Any] = {"model": self.model, "messages": wire}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in tools
            ]
        if options.temperature is not None:
            body["temperature"] = options.temperature
        max_tokens = options.max_tokens or self.config.max_tokens
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if options.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def parse_response(self, data: Any) -> ChatResult:
        """A chat-completions answer as a :class:`ChatResult`."""
        if not isinstance(data, dict):
            raise self.http.bad_stream("response is not a JSON object", _repr(data))
        if data.get("error"):
            # Some gateways answer 200 with an error object.
            raise self._error_object(data["error"], default="bad_request")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self.http.bad_stream("response has no choices", _repr(data))
        choice = choices[0]
        message = choice.get("message") or {}
        calls = []
        for i, tc in enumerate(message.get("tool_calls") or []):
            fn = tc.get("function") or {}
            args, error = parse_tool_args(fn.get("arguments"))
            calls.append(ToolCall(str(tc.get("id") or f"call_{i}"), str(fn.get("name") or ""),
                                  args, error))
        return ChatResult(
            message=AssistantMessage(_text(message.get("content")), tuple(calls)),
            usage=_usage(data.get("usage")),
            finish_reason=_finish(choice.get("finish_reason"), bool(calls)),
            model=str(data.get("model") or self.model),
            provider_name=self.name,
            response_id=str(data.get("id") or ""),
        )

    def _error_object(self, error: Any, default: ProviderErrorKind) -> ProviderError:
        if isinstance(error, dict):
            message = str(error.get("message") or error)
            code = error.get("code")
        else:
            message, code = str(error), None
        status = code if isinstance(code, int) and 400 <= code < 600 else None
        kind = kind_for_status(status, message, self.overflow) if status else default
        return self.http.error(kind, f"error in response: {cut(message)}", status=status)

    def assembler(self, options: ChatOptions) -> StreamAssembler:
        """An assembler for one chat-completions SSE stream."""
        return _OpenAIStream(self, options)


class _OpenAIStream(StreamAssembler):
    provider: OpenAICompatProvider

    def __init__(self, provider: OpenAICompatProvider, options: ChatOptions) -> None:
        super().__init__(provider, options)
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: Any = None
        self.usage: Any = None
        self.model: Any = None
        self.id: Any = None

    def _call_slot(self, tc: dict[str, Any]) -> dict[str, Any]:
        index = tc.get("index")
        if not isinstance(index, int):
            # Servers that omit the index: match by id, else continue the last call.
            call_id = tc.get("id")
            for slot in self.calls.values():
                if call_id and slot["id"] == call_id:
                    return slot
            index = len(self.calls) if call_id or not self.calls else max(self.calls)
        return self.calls.setdefault(index, {"id": "", "name": "", "arguments": []})

    async def consume(self, lines: AsyncIterator[str]) -> None:
        # Closed here when the answer's last event comes before the body's end (it does:
        # the loop stops there), instead of by the event loop in a task of its own.
        async with aclosing(sse_events(self.provider, lines)) as events:
            await self._consume(events)

    async def _consume(self, events: AsyncIterator[SseEvent]) -> None:
        async for event in events:
            if event.data.strip() == "[DONE]":
                return
            chunk = loads_event(self.provider, event.data)
            if not isinstance(chunk, dict):
                raise self.provider.http.bad_stream("stream chunk is not an object", event.data)
            if chunk.get("error"):
                # Mid-stream errors (gateways) say little; unless they carry a
                # status, treat them like a broken stream.
                raise self.provider._error_object(chunk["error"], default="network")
            self.model = chunk.get("model") or self.model
            self.id = self.id or chunk.get("id")
            if chunk.get("usage"):
                self.usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                piece = delta.get("content")
                if isinstance(piece, str) and piece:
                    self.content.append(piece)
                    self.text(piece)
                for tc in delta.get("tool_calls") or []:
                    slot = self._call_slot(tc)
                    slot["id"] = slot["id"] or tc.get("id") or ""
                    fn = tc.get("function") or {}
                    # The name comes whole in the first delta; some servers repeat it.
                    slot["name"] = slot["name"] or fn.get("name") or ""
                    if isinstance(fn.get("arguments"), str):
                        slot["arguments"].append(fn["arguments"])
                if choice.get("finish_reason"):
                    self.finish = choice["finish_reason"]
        if self.finish is None:
            raise self.provider.http.broken_stream("the stream ended before the answer was done")

    def response(self) -> Any:
        calls = [
            {
                "id": slot["id"] or f"call_{i}",
                "type": "function",
                "function": {"name": slot["name"], "arguments": "".join(slot["arguments"])},
            }
            for i, slot in sorted(self.calls.items())
        ]
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if calls:
            message["tool_calls"] = calls
        body: dict[str, Any] = {
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
            "model": self.model,
        }
        if self.id:
            body["id"] = self.id
        if self.usage:
            body["usage"] = self.usage
        return body


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _wire_message(m: Message) -> dict[str, Any] | None:
    """One message as chat completions expects it (``None`` for an unknown type)."""
    if isinstance(m, SystemMessage | UserMessage):
        return {"role": m.role, "content": m.content}
    if isinstance(m, AssistantMessage):
        item: dict[str, Any] = {"role": "assistant", "content": m.content}
        if m.tool_calls:
            item["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _dumps(c.args)},
                }
                for c in m.tool_calls
            ]
        return item
    if isinstance(m, ToolMessage):
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    return None


def _repr(data: Any) -> str:
    return json.dumps(data, default=str)


# Services that speak the chat-completions API, by host, under the names the OpenTelemetry
# GenAI conventions give them (gen_ai.provider.name's well-known values).
_IDENTITY_BY_HOST = {
    WELL_KNOWN_HOST: "openai",
    "api.groq.com": "groq",
    "api.deepseek.com": "deepseek",
    "api.mistral.ai": "mistral_ai",
    "api.x.ai": "x_ai",
    "api.perplexity.ai": "perplexity",
    "generativelanguage.googleapis.com": "gcp.gemini",
}


def identity(config: ProviderConfig) -> str:
    """Who an ``openai_compat`` provider talks to: the service its ``base_url``'s host
    is known to be (Azure OpenAI by its ``*.openai.azure.com`` hosts), else ``openai``
    — the API it speaks, which is what the conventions ask for an OpenAI-compatible
    server they have no name for (``server.address`` says which one it is)."""
    host = host_of(config.base_url)
    if host.endswith(".openai.azure.com"):
        return "azure.ai.openai"
    return _IDENTITY_BY_HOST.get(host, "openai")


@hookimpl
def lich_register_providers(registry: ProviderRegistry) -> None:
    """Register the ``openai_compat`` provider kind."""
    registry.register("openai_compat", OpenAICompatProvider, defaults=DEFAULTS,
                      identity=identity)
