"""A scripted chat model: canned replies, in process or over HTTP on 127.0.0.1.

The same :class:`ScriptedModel` backs the in-process :class:`ScriptedChat`
(a :data:`~lich.types.ChatFn`), the HTTP :class:`ScriptedServer` used by
end-to-end tests and benchmarks, and ``lich demo``. A script is a queue of
steps, or a *responder* — a function of the request — which lets one server
answer many concurrent conversations consistently.

Dialects spoken by the server are pluggable (:data:`DIALECTS`); the OpenAI
chat-completions dialect is built in here.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, TypeAlias

from attrs import field, frozen

from lich.events import TextDelta
from lich.types import (
    AssistantMessage,
    ChatOptions,
    ChatResult,
    Message,
    ProviderError,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    Usage,
    UserMessage,
    _tool_calls,
)

__all__ = [
    "DIALECTS",
    "Dialect",
    "Fail",
    "Reply",
    "ScriptRequest",
    "ScriptedChat",
    "ScriptedModel",
    "ScriptedServer",
    "Step",
    "demo_responder",
    "tool_loop_responder",
]


@frozen
class Reply:
    """A model answer: text and/or tool calls.

    ``chunks`` splits the text for streaming (default: word by word).
    ``delay_s`` waits before answering (to test cancellation and timeouts).
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = field(default=(), converter=_tool_calls)
    usage: Usage | None = None
    finish_reason: str | None = None
    delay_s: float = 0.0
    chunks: tuple[str, ...] | None = None

    def stream_pieces(self) -> list[str]:
        """The text as it is streamed."""
        if self.chunks is not None:
            return list(self.chunks)
        if not self.text:
            return []
        words = self.text.split(" ")
        return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


@frozen
class Fail:
    """An HTTP failure: ``status`` with ``body`` and ``headers`` (e.g. ``Retry-After``)."""

    status: int
    body: Any = field(factory=lambda: {"error": {"message": "scripted failure"}})
    headers: Mapping[str, str] = field(factory=dict)
    delay_s: float = 0.0


Step: TypeAlias = Reply | Fail


@frozen
class ScriptRequest:
    """A request as a responder sees it, whatever dialect it came in."""

    messages: tuple[Message, ...]
    tools: tuple[str, ...]
    model: str
    stream: bool
    dialect: str = "inprocess"
    raw: Any = field(default=None, eq=False, repr=False)

    def last_user(self) -> str:
        """The text of the latest user message."""
        for m in reversed(self.messages):
            if isinstance(m, UserMessage):
                return m.content
        return ""

    def tool_results_since_user(self) -> list[ToolMessage]:
        """Tool messages after the latest user message."""
        out: list[ToolMessage] = []
        for m in reversed(self.messages):
            if isinstance(m, UserMessage):
                break
            if isinstance(m, ToolMessage):
                out.append(m)
        return list(reversed(out))


Responder: TypeAlias = Callable[[ScriptRequest], Step]


class ScriptedModel:
    """The script: a queue of steps, then (optionally) a responder for everything after.

    Thread-safe; records every request in :attr:`requests`. When the queue is
    empty and there is no responder, it answers ``"(script exhausted)"``.
    """

    def __init__(self, steps: Iterable[Step | str] = (), responder: Responder | None = None):
        self._steps: deque[Step] = deque(Reply(s) if isinstance(s, str) else s for s in steps)
        self.responder = responder
        self.requests: list[ScriptRequest] = []
        self._lock = threading.Lock()

    def push(self, *steps: Step | str) -> None:
        """Queue more steps."""
        with self._lock:
            self._steps.extend(Reply(s) if isinstance(s, str) else s for s in steps)

    def next(self, request: ScriptRequest) -> Step:
        """The step answering ``request``."""
        with self._lock:
            self.requests.append(request)
            if self._steps:
                return self._steps.popleft()
        if self.responder is not None:
            return self.responder(request)
        return Reply("(script exhausted)")


def default_usage(request_chars: int, reply: Reply) -> Usage:
    """Deterministic token counts for a scripted reply."""
    if reply.usage is not None:
        return reply.usage
    prompt = max(1, math.ceil(request_chars / 4))
    completion = max(1, math.ceil((len(reply.text) + 20 * len(reply.tool_calls)) / 4))
    return Usage(prompt, completion, prompt + completion)


def _finish(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _seconds(value: str | None) -> float | None:
    # In process only numeric Retry-After is understood; an HTTP-date is ignored rather
    # than turning a scripted failure into a ValueError.
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _kind_for_status(status: int) -> Any:
    if status in (401, 403):
        return "auth"
    if status == 429 or status >= 500:
        return "rate_limit"
    return "bad_request"


class ScriptedChat:
    """An in-process :data:`~lich.types.ChatFn` over a :class:`ScriptedModel`.

    Streams ``text_delta`` events when the options ask for streaming; a
    :class:`Fail` step raises :class:`~lich.types.ProviderError`.
    """

    def __init__(
        self,
        steps: Iterable[Step | str] = (),
        responder: Responder | None = None,
        *,
        model: ScriptedModel | None = None,
        name: str = "scripted",
    ) -> None:
        self.model = model or ScriptedModel(steps, responder)
        self.name = name
        self.calls: list[tuple[list[Message], list[ToolDefinition], ChatOptions]] = []

    @property
    def requests(self) -> list[ScriptRequest]:
        """Every request seen so far."""
        return self.model.requests

    async def __call__(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ChatOptions,
    ) -> ChatResult:
        import asyncio

        self.calls.append((list(messages), list(tools), options))
        request = ScriptRequest(
            tuple(messages), tuple(t.name for t in tools), self.name, options.stream
        )
        step = self.model.next(request)
        if step.delay_s:
            await asyncio.sleep(step.delay_s)
        if isinstance(step, Fail):
            retry_after = step.headers.get("retry-after") or step.headers.get("Retry-After")
            raise ProviderError(
                _kind_for_status(step.status),
                self.name,
                json.dumps(step.body) if not isinstance(step.body, str) else step.body,
                status=step.status,
                retry_after=_seconds(retry_after),
            )
        if options.stream:
            for piece in step.stream_pieces():
                options.emit(TextDelta(piece, self.name))
        chars = sum(len(m.content) for m in messages)
        return ChatResult(
            message=AssistantMessage(step.text, step.tool_calls),
            usage=default_usage(chars, step),
            finish_reason=_finish(step),  # type: ignore[arg-type]
            model=self.name,
            provider_name=self.name,
        )


# ---------------------------------------------------------------------------
# HTTP server
# ---------------------------------------------------------------------------


class Dialect(Protocol):
    """How one wire format is parsed and answered by :class:`ScriptedServer`."""

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
        tools = tuple(
            t.get("function", {}).get("name", "")
            for t in body.get("tools") or []
            if isinstance(t, dict)
        )
        return ScriptRequest(
            tuple(messages), tools, str(body.get("model", "")), bool(body.get("stream")),
            self.name, body,
        )

    def _usage(self, request: ScriptRequest, reply: Reply) -> dict[str, int]:
        chars = sum(len(m.content) for m in request.messages)
        u = default_usage(chars, reply)
        return {
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens,
        }

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
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
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
        yield chunk({}, _finish(reply))
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


DIALECTS: dict[str, Dialect] = {"openai": OpenAIDialect()}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    # TCP_NODELAY: headers and body go out as separate writes, and with Nagle on, the
    # body waits for the client's delayed ACK (~40 ms per reply on Linux), which would
    # swamp every timing taken against this server (tests, benchmarks).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr
        pass

    def _send(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path in ("/health", "/"):
            self._send(200, {"content-type": "application/json"}, b'{"status":"ok"}')
        else:
            self._send(404, {"content-type": "application/json"}, b'{"error":"not found"}')

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        dialect = self.server.owner.dialect_for(path)
        if dialect is None:
            self._send(404, {"content-type": "application/json"}, b'{"error":"not found"}')
            return
        try:
            request = dialect.parse(json.loads(raw or b"null"))
        except (ValueError, AttributeError, TypeError) as exc:
            body = json.dumps({"error": {"message": f"bad request: {exc}"}}).encode()
            self._send(400, {"content-type": "application/json"}, body)
            return
        self.server.owner.headers_seen.append(dict(self.headers))
        step = self.server.owner.model.next(request)
        if step.delay_s:
            time.sleep(step.delay_s)
        if isinstance(step, Fail):
            headers = {"content-type": "application/json", **step.headers}
            self._send(step.status, headers, dialect.error_body(step))
            return
        if not request.stream:
            self._send(*dialect.respond(request, step))
            return
        self.send_response(200)
        self.send_header("content-type", getattr(dialect, "content_type", "text/event-stream"))
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        for piece in dialect.stream(request, step):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The default listen backlog of 5 drops connection bursts (many concurrent
    # conversations opening their pooled connections at once): a dropped SYN costs a
    # client a one-second retransmit.
    request_queue_size = 128
    owner: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up (a cancelled run, a pooled keep-alive connection closed) is
        # normal for this server; the default prints a traceback on stderr, which lands in
        # the middle of `lich demo`'s output.
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class ScriptedServer:
    """A scripted model served over HTTP on 127.0.0.1, in a background thread.

    >>> with ScriptedServer(ScriptedModel(["hello"])) as server:
    ...     server.base_url       # http://127.0.0.1:<port>/v1 for openai_compat
    """

    def __init__(
        self,
        model: ScriptedModel | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        dialects: Sequence[str] = ("openai",),
    ) -> None:
        self.model = model or ScriptedModel()
        self.headers_seen: list[dict[str, str]] = []
        self._dialects = [DIALECTS[d] for d in dialects]
        self._server = _Server((host, port), _Handler)
        self._server.owner = self
        self._thread: threading.Thread | None = None

    def dialect_for(self, path: str) -> Dialect | None:
        """The dialect serving ``path``."""
        for d in self._dialects:
            if path in d.paths:
                return d
        return None

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The ``base_url`` for an ``openai_compat`` provider (``…/v1``)."""
        return f"{self.root_url}/v1"

    def start(self) -> ScriptedServer:
        """Serve in a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                name="lich-scripted-server", daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------
# Ready-made responders
# ---------------------------------------------------------------------------


def tool_loop_responder(
    turns: int, tool: str = "echo", args: Mapping[str, Any] | None = None, final: str = "done"
) -> Responder:
    """Per conversation: ``turns`` tool calls (one per reply), then ``final``.

    Stateless — it counts the tool results since the latest user message — so
    one responder serves any number of concurrent conversations.
    """
    call_args = dict(args or {"text": "hi"})

    def respond(request: ScriptRequest) -> Step:
        done = len(request.tool_results_since_user())
        if done < turns:
            return Reply(tool_calls=(ToolCall(f"call_{done + 1}", tool, call_args),))
        return Reply(final)

    return respond


def demo_responder(file_name: str = "hello.txt") -> Responder:
    """The ``lich demo`` script: write a file, read it back, list the directory, answer."""
    content = "Hello from lich! This file was written by the write_file tool.\n"
    plan = [
        ("write_file", {"path": file_name, "content": content}),
        ("read_file", {"path": file_name}),
        ("list_dir", {"path": "."}),
    ]

    def respond(request: ScriptRequest) -> Step:
        results = request.tool_results_since_user()
        done = len(results)
        if done < len(plan):
            name, call_args = plan[done]
            note = ["I'll write a file first.", "Now I'll read it back.",
                    "Finally, let me list the directory."][done]
            return Reply(note, (ToolCall(f"demo_{done + 1}", name, call_args),))
        failed = [r for r in results if r.is_error]
        if failed:
            problems = "; ".join(f"{r.name}: {r.content}" for r in failed)
            return Reply(f"Some steps failed: {problems}")
        read_back = results[1].content.strip()
        listing = results[2].content.strip().replace("\n", ", ")
        return Reply(
            f"Done. I wrote {file_name}, read it back (\"{read_back}\"), and listed the "
            f"work directory: {listing}."
        )

    return respond


def _register_extra_dialects() -> None:
    # The Anthropic and Ollama dialects live in their own module, which imports
    # this one; importing it here (at the end, once every name exists) makes
    # ScriptedServer(..., dialects=("anthropic",)) work without further setup.
    from lich.testing.dialects import AnthropicDialect, OllamaDialect

    DIALECTS.update({"anthropic": AnthropicDialect(), "ollama": OllamaDialect()})


_register_extra_dialects()
