"""The ``ollama`` provider plugin: Ollama's native ``/api/chat``.

``POST {base_url}/api/chat``. Quirks, each deliberate:

* tool-call arguments are JSON objects both ways (a string holding one is
  accepted in answers, as some proxies send that);
* tool results go back one to one with ``tool_name``: Ollama has no tool-call
  ids, correlation is positional, so ids are synthesised
  (``ollama_<base36 ms>_<counter>``) for the rest of lich;
* ``done_reason`` is ``"stop"`` even when the answer calls tools, so tool-call
  presence decides the finish reason;
* an HTTP 200 can carry ``{"error": ...}``: that is ``bad_request``, as is a
  200 without a ``message``;
* ``max_tokens`` and ``temperature`` live under ``options``
  (``num_predict``); ``think`` and ``keep_alive`` are forwarded.

``stream`` is always sent (Ollama streams by default); a streamed answer is
newline-delimited JSON. A key is never required: when ``api_key_env`` names a
set variable, it is sent as a Bearer token (for proxies and Ollama cloud).
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
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
)
from lich_providers._http import cut

if TYPE_CHECKING:
    import httpx

    from lich.config import ProviderConfig
    from lich.providers import ProviderRegistry

__all__ = ["OllamaProvider", "lich_register_providers", "synthesize_tool_call_id"]

# No default key: a key (a proxy, Ollama's cloud) is only ever one the config names.
DEFAULTS = ProviderDefaults(base_url="http://localhost:11434")
_counter = itertools.count(1)
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(n: int) -> str:
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = _DIGITS[r] + out
        if n == 0:
            return out


def synthesize_tool_call_id() -> str:
    """A process-unique tool-call id: ``ollama_<base36 milliseconds>_<counter>``."""
    return f"ollama_{_base36(int(time.time() * 1000))}_{next(_counter)}"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _finish(done_reason: Any, has_tool_calls: bool) -> FinishReason:
    # Load-bearing: Ollama says "stop" even when it calls tools.
    if has_tool_calls:
        return "tool_calls"
    if done_reason in ("stop", "end_turn"):
        return "stop"
    if done_reason in ("length", "max_tokens"):
        return "length"
    return "unknown"


class OllamaProvider(HttpProvider):
    """A model served by Ollama.

    :param id_factory: makes the ids of tool calls (Ollama sends none);
        tests pass a deterministic one.
    """

    kind = "ollama"
    path = "/api/chat"
    overflow = re.compile(r"context|token|maximum|too long", re.I)
    defaults = DEFAULTS

    def __init__(
        self,
        config: ProviderConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        env: Mapping[str, str] | None = None,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        super().__init__(config, transport=transport, env=env)
        self.id_factory = id_factory or synthesize_tool_call_id

    def auth_headers(self) -> dict[str, str]:
        """``authorization: Bearer`` when ``api_key_env`` names a set variable; never required."""
        key = read_key(self.env, self.config.api_key_env)
        return {"authorization": f"Bearer {key}"} if key else {}

    def build_body(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ChatOptions,
    ) -> dict[str, Any]:
        """The ``/api/chat`` request body."""
        wire = self.wire_list(messages, _wire_message)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": wire,
            "stream": bool(options.stream),
        }
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
        model_options: dict[str, Any] = {}
        if options.temperature is not None:
            model_options["temperature"] = options.temperature
        max_tokens = options.max_tokens or self.config.max_tokens
        if max_tokens is not None:
            model_options["num_predict"] = max_tokens
        if model_options:
            body["options"] = model_options
        think = (self.config.think, options.think)
        if True in think:
            body["think"] = True
        elif False in think:
            # An explicit "no" turns thinking off on models that think by default.
            body["think"] = False
        if self.config.keep_alive is not None:
            body["keep_alive"] = self.config.keep_alive
        return body

    def parse_response(self, data: Any) -> ChatResult:
        """An ``/api/chat`` answer as a :class:`ChatResult`."""
        if not isinstance(data, dict):
            raise self.http.bad_stream("response is not a JSON object", json.dumps(data))
        if data.get("error"):
            raise self._error(data["error"])
        message = data.get("message")
        if not isinstance(message, dict):
            raise self.http.bad_stream("response has no message", json.dumps(data))
        calls = []
        for tc in message.get("tool_calls") or []:
            fn = tc.get("function") or {}
            args, error = parse_tool_args(fn.get("arguments"))
            call_id = tc.get("id") or self.id_factory()
            calls.append(ToolCall(str(call_id), str(fn.get("name") or ""), args, error))
        prompt, completion = _int(data.get("prompt_eval_count")), _int(data.get("eval_count"))
        return ChatResult(
            message=AssistantMessage(str(message.get("content") or ""), tuple(calls)),
            usage=Usage(prompt, completion, prompt + completion),
            finish_reason=_finish(data.get("done_reason"), bool(calls)),
            model=str(data.get("model") or self.model),
            provider_name=self.name,
        )

    def _error(self, error: Any) -> ProviderError:
        text = error if isinstance(error, str) else json.dumps(error)
        return self.http.error("bad_request", f"ollama error: {cut(text)}", status=200)

    def assembler(self, options: ChatOptions) -> StreamAssembler:
        """An assembler for one NDJSON stream."""
        return _OllamaStream(self, options)


class _OllamaStream(StreamAssembler):
    provider: OllamaProvider

    def __init__(self, provider: OllamaProvider, options: ChatOptions) -> None:
        super().__init__(provider, options)
        self.content: list[str] = []
        self.tool_calls: list[Any] = []
        self.final: dict[str, Any] | None = None

    async def consume(self, lines: AsyncIterator[str]) -> None:
        async for line in lines:
            if not line.strip():
                continue
            chunk = loads_event(self.provider, line)
            if not isinstance(chunk, dict):
                raise self.provider.http.bad_stream("stream line is not an object", line)
            if chunk.get("error"):
                raise self.provider._error(chunk["error"])
            message = chunk.get("message") or {}
            piece = message.get("content")
            if isinstance(piece, str) and piece:
                self.content.append(piece)
                self.text(piece)
            self.tool_calls.extend(message.get("tool_calls") or [])
            if chunk.get("done"):
                self.final = chunk
                return
        raise self.provider.http.broken_stream("the stream ended before done")

    def response(self) -> Any:
        final = dict(self.final or {})
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        final["message"] = message
        return final


def _wire_message(m: Message) -> dict[str, Any] | None:
    """One message as ``/api/chat`` expects it (``None`` for an unknown type)."""
    if isinstance(m, SystemMessage | UserMessage):
        return {"role": m.role, "content": m.content}
    if isinstance(m, AssistantMessage):
        item: dict[str, Any] = {"role": "assistant", "content": m.content}
        if m.tool_calls:
            item["tool_calls"] = [
                {"function": {"name": c.name, "arguments": c.args}} for c in m.tool_calls
            ]
        return item
    if isinstance(m, ToolMessage):
        # No tool-call ids in this dialect: results correlate by position and name.
        return {"role": "tool", "tool_name": m.name, "content": m.content}
    return None


@hookimpl
def lich_register_providers(registry: ProviderRegistry) -> None:
    """Register the ``ollama`` provider kind."""
    registry.register("ollama", OllamaProvider, defaults=DEFAULTS, identity="ollama")
