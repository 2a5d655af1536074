"""The wire dialects of :class:`lich.testing.ScriptedServer`: OpenAI, Anthropic, Ollama.

* ``openai``: chat completions, ``POST /v1/chat/completions`` (and
  ``/chat/completions``); server-sent events when the request says
  ``"stream": true``; errors as the scripted body.
* ``anthropic``: the Messages API, ``POST /v1/messages``; server-sent events
  when the request says ``"stream": true``; errors as
  ``{"type": "error", "error": {"type", "message"}}``.
* ``ollama``: ``POST /api/chat``; newline-delimited JSON when ``stream`` is
  true *or absent* (Ollama streams by default); errors as ``{"error": "..."}``.
  Like the real server, it says ``done_reason: "stop"`` even when the answer
  calls tools.

The Anthropic and Ollama dialects parse strictly where the real APIs are
strict (an Anthropic text block must not be empty, a tool result must answer
a known ``tool_use``, Ollama tool arguments must be objects), so an
end-to-end run through them catches a provider that builds a request the
real service would refuse.

:data:`DIALECTS` is the registry by name; a dialect added there can be served
with ``ScriptedServer(..., dialects=("mine",))``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, ClassVar, Protocol

from lich.testing.scripted import Fail, Reply, ScriptRequest, default_usage, finish_reason
from lich.types import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)

__all__ = [
    "DIALECTS",
    "AnthropicDialect",
    "Dialect",
    "OllamaDialect",
    "OpenAIDialect",
    "fail_message",
]



def _function_tool_names(body: dict[str, Any]) -> tuple[str, ...]:
    """The tool names of a request in the ``{"type": "function", "function": {...}}``
    shape that the OpenAI and Ollama dialects share."""
    return tuple(
        t.get("function", {}).get("name", "")
        for t in body.get("tools") or []
        if isinstance(t, dict)
    )

class Dialect(Protocol):
    """How one wire format is parsed and answered by :class:`~lich.testing.ScriptedServer`."""

    name: str
    paths: tuple[str, ...]

    def parse(self, body: Any) -> ScriptRequest:
        """The request as lich messages."""
        ...

    def respond(self, request: ScriptRequest, reply: Reply) -> tuple[int, dict[str, str], bytes]:
        """A non-streaming answer: status, headers, body."""
        ...

    def stream(self, request: ScriptRequest, reply: Reply) -> Iterator[bytes]:
        """A streaming answer, as the body's pieces."""
        ...

    def error_body(self, fail: Fail) -> bytes:
        """The body of a scripted failure."""
        ...


class OpenAIDialect:
    """OpenAI chat completions: ``POST /v1/chat/completions`` (and ``/chat/completions``)."""

    name = "openai"
    paths: tuple[str, ...] = ("/v1/chat/completions", "/chat/completions")
    content_type = "text/event-stream"

    def parse(self, body: Any) -> ScriptRequest:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise ValueError("messages must be an array")
        names: dict[str, str] = {}
        messages: list[Message] = []
        for item in body["messages"]:
            role = item.get("role")
            content = item.get("content") or ""
            if isinstance(content, list):  # content parts
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if role == "system":
                messages.append(SystemMessage(content))
            elif role == "user":
                messages.append(UserMessage(content))
            elif role == "assistant":
                calls = []
                for tc in item.get("tool_calls") or []:
                    fn = tc.get("function", {})
                    try:
                        args = json.loads(fn.get("arguments") or "{}")
                    except ValueError:
                        args = {}
                    names[tc.get("id", "")] = fn.get("name", "")
                    calls.append(ToolCall(tc.get("id", ""), fn.get("name", ""), args))
                messages.append(AssistantMessage(content, tuple(calls)))
            elif role == "tool":
                call_id = item.get("tool_call_id", "")
                messages.append(ToolMessage(call_id, names.get(call_id, ""), content))
            else:
                raise ValueError(f"unknown role {role!r}")
        tools = _function_tool_names(body)
        return ScriptRequest(
            tuple(messages), tools, str(body.get("model", "")), bool(body.get("stream")),
            self.name, body,
        )

    def _usage(self, request: ScriptRequest, reply: Reply) -> dict[str, int]:
        chars = sum(len(m.content) for m in request.messages)
        u = default_usage(chars, reply)
        out: dict[str, Any] = {
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens,
        }
        # The breakdowns as OpenAI reports them, only when the script sets them (as
        # servers without a prompt cache or reasoning leave them out).
        if u.cache_read_tokens:
            out["prompt_tokens_details"] = {"cached_tokens": u.cache_read_tokens}
        if u.reasoning_tokens:
            out["completion_tokens_details"] = {"reasoning_tokens": u.reasoning_tokens}
        return out

    def respond(self, request: ScriptRequest, reply: Reply) -> tuple[int, dict[str, str], bytes]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.args)},
                }
                for c in reply.tool_calls
            ]
        body = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(reply)}],
            "usage": self._usage(request, reply),
        }
        return 200, {"content-type": "application/json"}, json.dumps(body).encode()

    def stream(self, request: ScriptRequest, reply: Reply) -> Iterator[bytes]:
        def event(payload: Any) -> bytes:
            return f"data: {json.dumps(payload)}\n\n".encode()

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return event(
                {
                    "id": "chatcmpl-scripted",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": request.model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
            )

        yield chunk({"role": "assistant", "content": ""})
        for piece in reply.stream_pieces():
            yield chunk({"content": piece})
        for i, c in enumerate(reply.tool_calls):
            args = json.dumps(c.args)
            half = len(args) // 2
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": args[:half]},
                        }
                    ]
                }
            )
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": args[half:]}}]})
        yield chunk({}, finish_reason(reply))
        raw = request.raw if isinstance(request.raw, dict) else {}
        if (raw.get("stream_options") or {}).get("include_usage"):
            yield event(
                {
                    "id": "chatcmpl-scripted",
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": self._usage(request, reply),
                }
            )
        yield b"data: [DONE]\n\n"

    def error_body(self, fail: Fail) -> bytes:
        return fail.body.encode() if isinstance(fail.body, str) else json.dumps(fail.body).encode()





def fail_message(fail: Fail) -> str:
    """The human message of a scripted failure, whatever shape its body was given in."""
    body = fail.body
    if isinstance(body, str):
        return body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return json.dumps(body)


def _chars(request: ScriptRequest) -> int:
    return sum(len(m.content) for m in request.messages)


def _anthropic_input(usage: Usage) -> dict[str, int]:
    """The input side of a Messages API ``usage``: ``input_tokens`` leaves out the
    cache, which the API reports in fields of its own (sent when the script sets them)."""
    out = {"input_tokens": max(0, usage.prompt_tokens - usage.cache_read_tokens
                               - usage.cache_write_tokens)}
    if usage.cache_read_tokens:
        out["cache_read_input_tokens"] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        out["cache_creation_input_tokens"] = usage.cache_write_tokens
    return out


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    raise ValueError(f"{where}: content must be a string or a list of blocks")


class AnthropicDialect:
    """The Anthropic Messages API: ``POST /v1/messages``."""

    name = "anthropic"
    paths: tuple[str, ...] = ("/v1/messages",)
    content_type = "text/event-stream"

    _ERROR_TYPES: ClassVar[dict[int, str]] = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }

    def parse(self, body: Any) -> ScriptRequest:
        """The request as lich messages; ``ValueError`` where the real API answers 400."""
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise ValueError("messages: Field required")
        if not isinstance(body.get("max_tokens"), int):
            raise ValueError("max_tokens: Field required")
        messages: list[Message] = []
        system = body.get("system")
        if system:
            messages.append(SystemMessage(_text_of(system, "system")))
        names: dict[str, str] = {}
        for i, item in enumerate(body["messages"]):
            where = f"messages.{i}"
            role = item.get("role")
            content = item.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list):
                raise ValueError(f"{where}.content: must be a string or a list of blocks")
            if role == "user":
                for j, block in enumerate(blocks):
                    kind = block.get("type")
                    if kind == "text":
                        if not isinstance(content, str) and not block.get("text"):
                            raise ValueError(f"{where}.content.{j}: text content blocks must be "
                                             "non-empty")
                        messages.append(UserMessage(block.get("text", "")))
                    elif kind == "tool_result":
                        call_id = block.get("tool_use_id", "")
                        if call_id not in names:
                            raise ValueError(f"{where}.content.{j}: unexpected tool_use_id "
                                             f"{call_id!r} in tool_result blocks")
                        messages.append(ToolMessage(
                            call_id, names[call_id],
                            _text_of(block.get("content", ""), f"{where}.content.{j}"),
                            bool(block.get("is_error")),
                        ))
                    else:
                        raise ValueError(f"{where}.content.{j}: unsupported block {kind!r}")
            elif role == "assistant":
                texts: list[str] = []
                calls: list[ToolCall] = []
                for j, block in enumerate(blocks):
                    kind = block.get("type")
                    if kind == "text":
                        if not str(block.get("text", "")).strip():
                            raise ValueError(f"{where}.content.{j}: text content blocks must "
                                             "contain non-whitespace text")
                        texts.append(block["text"])
                    elif kind == "tool_use":
                        if not isinstance(block.get("input"), dict):
                            raise ValueError(f"{where}.content.{j}.input: must be an object")
                        names[block.get("id", "")] = block.get("name", "")
                        calls.append(ToolCall(block.get("id", ""), block.get("name", ""),
                                              block["input"]))
                    else:
                        raise ValueError(f"{where}.content.{j}: unsupported block {kind!r}")
                messages.append(AssistantMessage("\n".join(texts), tuple(calls)))
            else:
                raise ValueError(f"{where}.role: Input should be 'user' or 'assistant'")
        tools = tuple(
            t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)
        )
        return ScriptRequest(
            tuple(messages), tools, str(body.get("model", "")), bool(body.get("stream")),
            self.name, body,
        )

    @staticmethod
    def _stop_reason(reply: Reply) -> str:
        reason = reply.finish_reason
        if reason is None:
            return "tool_use" if reply.tool_calls else "end_turn"
        return {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}.get(
            reason, reason
        )

    def _content(self, reply: Reply) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        content.extend(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.args}
            for c in reply.tool_calls
        )
        return content

    def respond(self, request: ScriptRequest, reply: Reply) -> tuple[int, dict[str, str], bytes]:
        """A complete Messages API answer."""
        usage = default_usage(_chars(request), reply)
        body = {
            "id": "msg_scripted",
            "type": "message",
            "role": "assistant",
            "model": request.model,
            "content": self._content(reply),
            "stop_reason": self._stop_reason(reply),
            "stop_sequence": None,
            "usage": {**_anthropic_input(usage), "output_tokens": usage.completion_tokens},
        }
        return 200, {"content-type": "application/json"}, json.dumps(body).encode()

    def stream(self, request: ScriptRequest, reply: Reply) -> Iterator[bytes]:
        """The same answer as Messages API server-sent events."""
        usage = default_usage(_chars(request), reply)

        def event(name: str, payload: dict[str, Any]) -> bytes:
            return f"event: {name}\ndata: {json.dumps({'type': name, **payload})}\n\n".encode()

        yield event("message_start", {"message": {
            "id": "msg_scripted", "type": "message", "role": "assistant",
            "model": request.model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {**_anthropic_input(usage), "output_tokens": 1},
        }})
        index = 0
        if reply.text:
            yield event("content_block_start",
                        {"index": 0, "content_block": {"type": "text", "text": ""}})
            yield event("ping", {})
            for piece in reply.stream_pieces():
                yield event("content_block_delta",
                            {"index": 0, "delta": {"type": "text_delta", "text": piece}})
            yield event("content_block_stop", {"index": 0})
            index = 1
        for call in reply.tool_calls:
            yield event("content_block_start", {"index": index, "content_block": {
                "type": "tool_use", "id": call.id, "name": call.name, "input": {}}})
            args = json.dumps(call.args)
            half = len(args) // 2
            for part in ("", args[:half], args[half:]):
                yield event("content_block_delta", {"index": index, "delta": {
                    "type": "input_json_delta", "partial_json": part}})
            yield event("content_block_stop", {"index": index})
            index += 1
        yield event("message_delta", {
            "delta": {"stop_reason": self._stop_reason(reply), "stop_sequence": None},
            "usage": {"output_tokens": usage.completion_tokens},
        })
        yield event("message_stop", {})

    def error_body(self, fail: Fail) -> bytes:
        """``fail`` in the Messages API error shape."""
        if isinstance(fail.body, dict) and fail.body.get("type") == "error":
            return json.dumps(fail.body).encode()
        kind = self._ERROR_TYPES.get(fail.status, "api_error")
        return json.dumps(
            {"type": "error", "error": {"type": kind, "message": fail_message(fail)}}
        ).encode()


class OllamaDialect:
    """Ollama's native chat API: ``POST /api/chat``."""

    name = "ollama"
    paths: tuple[str, ...] = ("/api/chat",)
    content_type = "application/x-ndjson"

    def parse(self, body: Any) -> ScriptRequest:
        """The request as lich messages; ``ValueError`` where Ollama answers 400."""
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise ValueError("messages must be an array")
        messages: list[Message] = []
        pending: list[ToolCall] = []  # tool results are matched to calls by position
        serial = 0
        for i, item in enumerate(body["messages"]):
            role = item.get("role")
            content = item.get("content") or ""
            if not isinstance(content, str):
                raise ValueError(f"messages[{i}].content: must be a string")
            if role == "system":
                messages.append(SystemMessage(content))
            elif role == "user":
                messages.append(UserMessage(content))
            elif role == "assistant":
                calls = []
                for tc in item.get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    if not isinstance(fn.get("arguments"), dict):
                        raise ValueError(
                            "json: cannot unmarshal string into Go struct field "
                            "ToolCallFunction.messages.tool_calls.function.arguments"
                        )
                    serial += 1
                    calls.append(ToolCall(f"call_{serial}", fn.get("name", ""), fn["arguments"]))
                pending = list(calls)
                messages.append(AssistantMessage(content, tuple(calls)))
            elif role == "tool":
                call = pending.pop(0) if pending else None
                name = item.get("tool_name") or (call.name if call else "")
                messages.append(ToolMessage(call.id if call else "", name, content))
            else:
                raise ValueError(f"messages[{i}].role: unknown role {role!r}")
        tools = _function_tool_names(body)
        return ScriptRequest(
            tuple(messages), tools, str(body.get("model", "")), body.get("stream", True) is True,
            self.name, body,
        )

    @staticmethod
    def _done_reason(reply: Reply) -> str:
        # Like the real server: "stop" even when the answer calls tools.
        return "length" if reply.finish_reason == "length" else "stop"

    @staticmethod
    def _now() -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def _final(self, request: ScriptRequest, reply: Reply, message: dict[str, Any]) -> bytes:
        usage = default_usage(_chars(request), reply)
        body = {
            "model": request.model,
            "created_at": self._now(),
            "message": message,
            "done_reason": self._done_reason(reply),
            "done": True,
            "total_duration": 1_000_000,
            "prompt_eval_count": usage.prompt_tokens,
            "eval_count": usage.completion_tokens,
        }
        return json.dumps(body).encode()

    @staticmethod
    def _calls(reply: Reply) -> list[dict[str, Any]]:
        return [{"function": {"name": c.name, "arguments": c.args}} for c in reply.tool_calls]

    def respond(self, request: ScriptRequest, reply: Reply) -> tuple[int, dict[str, str], bytes]:
        """A complete ``/api/chat`` answer."""
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = self._calls(reply)
        return 200, {"content-type": "application/json"}, self._final(request, reply, message)

    def stream(self, request: ScriptRequest, reply: Reply) -> Iterator[bytes]:
        """The same answer as newline-delimited JSON chunks."""
        def chunk(message: dict[str, Any]) -> bytes:
            return json.dumps({
                "model": request.model, "created_at": self._now(), "message": message,
                "done": False,
            }).encode() + b"\n"

        for piece in reply.stream_pieces():
            yield chunk({"role": "assistant", "content": piece})
        if reply.tool_calls:
            yield chunk({"role": "assistant", "content": "", "tool_calls": self._calls(reply)})
        yield self._final(request, reply, {"role": "assistant", "content": ""}) + b"\n"

    def error_body(self, fail: Fail) -> bytes:
        """``fail`` in Ollama's error shape."""
        if isinstance(fail.body, dict) and isinstance(fail.body.get("error"), str):
            return json.dumps(fail.body).encode()
        return json.dumps({"error": fail_message(fail)}).encode()


DIALECTS: dict[str, Dialect] = {
    "openai": OpenAIDialect(),
    "anthropic": AnthropicDialect(),
    "ollama": OllamaDialect(),
}
