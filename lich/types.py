"""The data lich passes around: messages, tool calls and results, model replies.

Every type here is a frozen ``attrs`` class. Change one with :func:`attrs.evolve`;
turn one into JSON (and back) only through :mod:`lich.serialization`, the one
converter the project owns.

The wire dialects of the providers are *not* modelled here: each provider maps
these types onto its own JSON and back.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import attrs
from attrs import field, frozen

if TYPE_CHECKING:
    from lich.events import Event

__all__ = [
    "AssistantMessage",
    "ChatFn",
    "ChatOptions",
    "ChatResult",
    "FinishReason",
    "Message",
    "Provider",
    "ProviderError",
    "ProviderErrorKind",
    "Role",
    "SystemMessage",
    "ToolCall",
    "ToolDefinition",
    "ToolMessage",
    "ToolResult",
    "Usage",
    "UserMessage",
    "json_type_name",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
FinishReason: TypeAlias = Literal["stop", "tool_calls", "length", "error", "unknown"]
ProviderErrorKind: TypeAlias = Literal[
    "auth", "rate_limit", "server_error", "overflow", "bad_request", "network", "unknown"
]


def json_type_name(value: Any) -> str:
    """The JSON name of ``value``'s type, for error messages ("expected a string,
    got integer"): ``null``, ``boolean``, ``integer``, ``number``, ``string``,
    ``array`` (a list or tuple), ``object`` (a mapping); anything else is named
    by its Python class."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _tool_calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    # A typed converter (not bare ``tuple``) so type checkers know what __init__ takes.
    return tuple(value)


def _freeze_args(value: Mapping[str, Any] | None) -> dict[str, Any]:
    # Tool arguments are JSON objects; a copy keeps a caller's later mutation
    # from reaching a message that is already in the transcript.
    return dict(value) if value else {}


@frozen
class ToolCall:
    """A model's request to run one tool.

    ``args_error`` is set by a provider when the model sent arguments that do
    not parse as a JSON object. Such a call is never run: the loop answers it
    with ``invalid_tool_arguments: <reason>`` so the model can correct itself.
    """

    id: str
    name: str
    args: dict[str, Any] = field(factory=dict, converter=_freeze_args)
    args_error: str | None = None


@frozen
class SystemMessage:
    """Instructions for the model; kept through compression."""

    content: str
    role: Literal["system"] = "system"


@frozen
class UserMessage:
    """What the person (or the calling program) said."""

    content: str
    role: Literal["user"] = "user"


@frozen
class AssistantMessage:
    """A model reply: text, and possibly requests to run tools."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = field(default=(), converter=_tool_calls)
    role: Literal["assistant"] = "assistant"


@frozen
class ToolMessage:
    """The answer to one :class:`ToolCall`, fed back to the model."""

    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    role: Literal["tool"] = "tool"


Message: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolMessage


@frozen
class ToolDefinition:
    """What the model is told about a tool: its name, purpose and JSON Schema.

    ``alias_of`` names the registered tool a call of ``name`` runs when the two
    differ (a definition renamed by ``lich_prepare_tools``; see :meth:`renamed`);
    ``None``: the tool called ``name``.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    alias_of: str | None = field(default=None, kw_only=True)

    def renamed(self, name: str) -> ToolDefinition:
        """This definition offered as ``name``; a call of ``name`` still runs the
        registered tool (the first name, through any number of renames)."""
        return attrs.evolve(self, name=name, alias_of=self.alias_of or self.name)


@frozen
class ToolResult:
    """The outcome of a tool call. Failures are data: ``ok=False`` plus ``error``.

    ``error`` strings start with a code the model can act on
    (``missing_arg:``, ``path_escape:``, ``timeout:`` …).
    """

    ok: bool
    output: str = ""
    error: str | None = None

    @classmethod
    def success(cls, output: str) -> ToolResult:
        """A successful result carrying ``output``."""
        return cls(ok=True, output=output)

    @classmethod
    def failure(cls, error: str, output: str = "") -> ToolResult:
        """A failed result with an error code and optional partial output."""
        return cls(ok=False, output=output, error=error)

    def to_content(self) -> str:
        """The text the model sees: the raw output, or a JSON object when there is an error."""
        if not self.error:
            return self.output
        return json.dumps(
            {"ok": self.ok, "output": self.output, "error": self.error}, ensure_ascii=False
        )


@frozen
class Usage:
    """Token counts reported by a provider. Adds up with ``+``.

    ``cache_read_tokens`` and ``cache_write_tokens`` are the part of
    ``prompt_tokens`` read from / written to the provider's prompt cache;
    ``reasoning_tokens`` the part of ``completion_tokens`` spent thinking.
    They are breakdowns, never added on top: a provider that does not report
    them leaves them 0, and ``prompt_tokens + completion_tokens`` stays the
    whole call.

    ``estimated`` is true when the counts are lich's estimate (characters / 4,
    :func:`lich.context.estimate_usage`), not the provider's: an answer that
    reported no usage at all still counts against ``max_total_tokens`` and is
    priced. A sum is estimated when any part of it is.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False

    @property
    def reported(self) -> bool:
        """Whether these are counts at all: a provider that reported no usage leaves
        every count 0 (no real call has an empty prompt)."""
        return self.estimated or bool(self.prompt_tokens or self.completion_tokens
                                      or self.total_tokens)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.estimated or other.estimated,
        )


@frozen
class ChatResult:
    """One model call's answer, the same whether it was streamed or not.

    ``response_id`` is the id the provider gave the answer (``chatcmpl-…``,
    ``msg_…``), ``""`` when it gives none."""

    message: AssistantMessage
    usage: Usage = Usage()
    finish_reason: FinishReason = "unknown"
    model: str = ""
    provider_name: str = ""
    response_id: str = ""


@frozen
class ChatOptions:
    """Per-call options a :data:`ChatFn` receives.

    ``on_event`` receives the events a provider or router produces during the
    call (``text_delta`` while streaming, ``retry``, ``failover``,
    ``stream_reset``); the loop wraps them into envelopes. Cancellation is
    asyncio task cancellation: the loop cancels the task awaiting the call.
    """

    temperature: float | None = None
    max_tokens: int | None = None
    think: bool | None = None
    stream: bool = False
    on_event: Callable[[Event], None] | None = field(default=None, eq=False, repr=False)

    def emit(self, event: Event) -> None:
        """Pass ``event`` to ``on_event`` when one is set."""
        if self.on_event is not None:
            self.on_event(event)


ChatFn: TypeAlias = Callable[
    [Sequence[Message], Sequence[ToolDefinition], ChatOptions], Awaitable[ChatResult]
]
"""``(messages, tools, options) -> ChatResult``, raising only :class:`ProviderError`."""


class Provider(Protocol):
    """A chat model behind one configured endpoint.

    Provider plugins return objects of this shape from the factory they
    register with ``lich_register_providers``.
    """

    @property
    def name(self) -> str:
        """The configured provider name (``providers[].name``)."""
        ...

    @property
    def model(self) -> str:
        """The model id sent to the endpoint."""
        ...

    async def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ChatOptions,
    ) -> ChatResult:
        """Call the model; raise only :class:`ProviderError`."""
        ...

    async def aclose(self) -> None:
        """Release the HTTP client."""
        ...


@attrs.define(eq=False, repr=False)
class ProviderError(Exception):
    """The one exception a :data:`ChatFn` may raise.

    ``kind`` tells the router what to do: retry ``rate_limit`` (429),
    ``server_error`` (5xx) and ``network`` in place, fail over at once on the rest.
    ``retry_after`` is in seconds.
    ``attempts`` is filled by a router: one ``(provider, attempt, kind, message)``
    tuple per failed attempt. ``url`` is the endpoint the request went to and
    ``proxy`` the HTTP proxy it went through (``"<url> from <VARIABLE>"``, when the
    environment named one), both without credentials; an HTTP provider sets them so
    the message says where the call failed.
    """

    kind: ProviderErrorKind
    provider_name: str
    message: str
    status: int | None = None
    retry_after: float | None = None
    attempts: tuple[tuple[str, int, str, str], ...] = ()
    url: str | None = None
    proxy: str | None = None

    def __attrs_post_init__(self) -> None:
        Exception.__init__(self, self.message)

    def __str__(self) -> str:
        status = f" {self.status}" if self.status is not None else ""
        return f"{self.where}: {self.kind}{status}: {self.message}"

    @property
    def where(self) -> str:
        """Who failed: ``provider 'x' (<url>, through the proxy <p>)``, or just the name."""
        if self.url is None:
            return self.provider_name
        proxy = f", through the proxy {self.proxy}" if self.proxy else ""
        return f"provider {self.provider_name!r} ({self.url}{proxy})"

    def __repr__(self) -> str:
        return (
            f"ProviderError(kind={self.kind!r}, provider_name={self.provider_name!r}, "
            f"message={self.message!r}, status={self.status!r})"
        )
