"""A scripted chat model: canned replies, in process (and, through
:mod:`lich.testing.server`, over HTTP on 127.0.0.1).

The same :class:`ScriptedModel` backs the in-process :class:`ScriptedChat`
(a :data:`~lich.types.ChatFn`), the HTTP :class:`~lich.testing.ScriptedServer`
used by end-to-end tests and benchmarks, ``lich demo`` and
``python -m lich.testing serve``. A script is a queue of steps, or a
*responder* — a function of the request — which lets one server answer many
concurrent conversations consistently.
"""

from __future__ import annotations

import json
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from attrs import field, frozen

from lich.events import TextDelta
from lich.types import (
    AssistantMessage,
    ChatOptions,
    ChatResult,
    Message,
    ProviderError,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    Usage,
    UserMessage,
    _tool_calls,
)

__all__ = [
    "Fail",
    "Reply",
    "Responder",
    "ScriptRequest",
    "ScriptedChat",
    "ScriptedModel",
    "Step",
    "default_usage",
    "demo_responder",
    "echo_responder",
    "finish_reason",
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


def finish_reason(reply: Reply) -> str:
    """The chat-completions finish reason of ``reply``: as given, else from its content."""
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
    if status == 429:
        return "rate_limit"
    if status >= 500:
        return "server_error"
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
            finish_reason=finish_reason(step),  # type: ignore[arg-type]
            model=self.name,
            provider_name=self.name,
        )


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


def calls_responder(*calls: tuple[str, Mapping[str, Any]], final: str = "final answer"
                    ) -> Responder:
    """Per conversation: the ``(tool, args)`` calls, one per reply, in order; then
    ``final``.

    Like :func:`tool_loop_responder`, stateless (it counts the tool results since the
    latest user message): each new user message starts the calls again.
    """
    script = [(name, dict(args)) for name, args in calls]

    def respond(request: ScriptRequest) -> Step:
        done = len(request.tool_results_since_user())
        if done < len(script):
            name, args = script[done]
            return Reply(tool_calls=(ToolCall(f"c{done + 1}", name, dict(args)),))
        return Reply(final)

    return respond


def echo_responder(prefix: str = "You said: ") -> Responder:
    """Answer every request with ``prefix`` and the latest user message.

    What ``python -m lich.testing serve`` answers when it is given no script:
    a model that is obviously alive, deterministic, and never calls a tool.
    """

    def respond(request: ScriptRequest) -> Step:
        return Reply(prefix + request.last_user())

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
