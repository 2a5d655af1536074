"""What the three HTTP providers share: the call skeleton, keys, tool arguments.

A provider subclass says how to build its request body, how to read a complete
answer, and how to assemble a streamed answer into that same complete shape.
The last point is what makes a streamed :class:`~lich.types.ChatResult` equal
the non-streamed one: both go through the same ``parse_response``.
"""

from __future__ import annotations

import functools
import json
import operator
import os
import re
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import attrs

from lich.events import TextDelta
from lich.providers import ProviderDefaults
from lich.types import (
    ChatOptions,
    ChatResult,
    Message,
    ProviderError,
    ToolDefinition,
    json_type_name,
)
from lich_providers._http import HttpClient, SseEvent, SseParser, WholeAnswer, cut

if TYPE_CHECKING:
    import httpx

    from lich.config import ProviderConfig

_M = TypeVar("_M", bound=Message)
_T = TypeVar("_T")
_S = TypeVar("_S")

#: How many of a request's newest messages wire_fold() looks among for the end of the
#: conversation's previous request (an agent turn adds one answer and its tool results).
_SCAN = 64
#: How many conversations' folded states one provider keeps (the oldest goes first).
_FOLDS = 256

__all__ = [
    "HttpProvider",
    "StreamAssembler",
    "loads_event",
    "merge_fields",
    "parse_tool_args",
    "read_key",
    "sse_events",
]


def parse_tool_args(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Tool-call arguments as sent by a model: ``(args, None)`` or ``({}, reason)``.

    Accepts a JSON object or a string holding one; an empty string or ``null``
    means no arguments. Anything else is an error the model is told about
    (the call is never run with made-up arguments).
    """
    if isinstance(raw, dict):
        return raw, None
    if raw is None:
        return {}, None
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return {}, None
        try:
            value = json.loads(text)
        except ValueError as exc:
            return {}, f"arguments are not valid JSON ({exc}): {cut(text, 200)}"
        if isinstance(value, dict):
            return value, None
        return {}, f"arguments must be a JSON object, got {json_type_name(value)}: {cut(text, 200)}"
    return {}, f"arguments must be a JSON object, got {json_type_name(raw)}"


def merge_fields(extra: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with the config's extra request fields added, one level deep.

    What lich sets itself wins; a table in both (Ollama's ``options``) is
    merged key by key, so ``num_ctx`` from the config sits beside the
    ``num_predict`` lich computed.
    """
    out = dict(extra)
    for key, value in body.items():
        mine = out.get(key)
        if isinstance(value, Mapping) and isinstance(mine, Mapping):
            out[key] = {**mine, **value}
        else:
            out[key] = value
    return out


def read_key(env: Mapping[str, str], var: str | None) -> str | None:
    """The value of the environment variable ``var``; blank counts as unset."""
    if not var:
        return None
    value = env.get(var)
    if value is None or not value.strip():
        return None
    return value.strip()


class StreamAssembler:
    """Turns one streamed answer into the shape of the complete (non-streamed) answer.

    Subclasses implement :meth:`consume` (read the lines, emit text deltas,
    raise on an in-stream error) and :meth:`response` (the assembled body).
    """

    def __init__(self, provider: HttpProvider, options: ChatOptions) -> None:
        self.provider = provider
        self.options = options

    def text(self, piece: str) -> None:
        """Report a piece of answer text as a ``text_delta`` event."""
        if piece:
            self.options.emit(TextDelta(piece, self.provider.name))

    async def consume(self, lines: AsyncIterator[str]) -> None:
        """Read the whole stream."""
        raise NotImplementedError

    def response(self) -> Any:
        """The answer in the provider's non-streaming shape."""
        raise NotImplementedError


class HttpProvider:
    """Base of the HTTP providers: one :class:`HttpClient`, keys from the environment.

    :param config: the ``[[providers]]`` entry.
    :param transport: an ``httpx.AsyncBaseTransport`` to use instead of the network.
    :param env: where ``api_key_env`` is looked up (``os.environ`` by default,
        read at call time so a key set later is seen).
    """

    kind: ClassVar[str]
    path: ClassVar[str]
    overflow: ClassVar[re.Pattern[str]]
    #: The kind's defaults, registered with it; a provider built directly (tests,
    #: scripts) resolves its config with them just as the registry does.
    defaults: ClassVar[ProviderDefaults]

    def __init__(
        self,
        config: ProviderConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if config.kind is None:
            config = attrs.evolve(config, kind=self.kind)
        config = self.defaults.resolve(config)
        self.config = config
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.http = HttpClient(
            provider=config.name,
            base_url=config.base_url or "",
            overflow=self.overflow,
            timeout_s=config.timeout_s,
            transport=transport,
            headers=config.headers,
            path=self.path,
        )
        # id(message) -> (weak reference to it, its wire form); see wire_of().
        self._wire_cache: dict[int, tuple[weakref.ref[Any], Any]] = {}
        # wire_fold()'s states: id(last message of a request) -> (weak reference to that
        # message with a callback that drops the entry, weak references to the request's
        # messages in order, the state folded from them). One entry per conversation in
        # flight on this provider, at most _FOLDS; see wire_fold().
        self._folds: dict[int, tuple[weakref.ref[Any], tuple[weakref.ref[Any], ...], Any]] = {}

    def wire_of(self, message: _M, build: Callable[[_M], _T]) -> _T:
        """``build(message)``, computed once per message object and then reused.

        Messages are immutable and a conversation resends its whole history every
        turn, so each one is mapped to its wire form once (B1 in docs/performance.md),
        not once per turn. An entry goes when its message is garbage-collected, so the
        cache never outlives the conversations. The wire forms are shared between
        requests: callers must never mutate them. ``None`` (nothing to send) is not
        cached.
        """
        cache = self._wire_cache
        key = id(message)
        hit = cache.get(key)
        if hit is not None and hit[0]() is message:
            return hit[1]  # type: ignore[no-any-return]
        item = build(message)
        if item is None:
            return item
        try:
            ref = weakref.ref(message, functools.partial(_forget, cache, key))
        except TypeError:  # a message type without weakref support: just don't cache
            return item
        cache[key] = (ref, item)
        return item

    def wire_fold(
        self,
        messages: Sequence[_M],
        start: _S,
        extend: Callable[[_S, Sequence[_M]], _S],
    ) -> _S:
        """``extend(start, messages)``, continued from an earlier request's state when it can be.

        A conversation's next request is an earlier one plus a few messages (the same
        objects, in the same order), so the state folded from that request (its wire
        list, or whatever the dialect builds) is reused and only the new messages are
        folded in: the per-request cost does not grow with the history (B1 in
        docs/performance.md). The earlier request is found by its last message, among
        the newest :data:`_SCAN` of ``messages``, and is used only when *all* its
        messages are, by identity, a prefix of ``messages`` (checked in C, not message
        by message in Python). Anything else (a capped or compressed history, an earlier
        message replaced by an equal or an edited one) is folded afresh from ``start``.
        Each conversation on a shared provider (the gateway's) keeps its own entry.

        ``extend(state, new)`` must return a new state and never mutate ``state``: it
        may be reused by the next request, and the caller must not mutate what it is
        given back. One provider has one fold (its ``build_body``'s); the messages are
        not kept alive by it, and an entry goes when its last message is collected.
        """
        count = len(messages)
        if not count:
            return extend(start, messages)
        folds = self._folds
        done, state = 0, start
        refs: tuple[weakref.ref[Any], ...] = ()
        for i in range(count - 1, max(count - _SCAN, 0) - 1, -1):
            entry = folds.get(id(messages[i]))
            if entry is None:
                continue
            if (entry[0]() is messages[i] and len(entry[1]) == i + 1
                    and all(map(operator.is_, map(operator.call, entry[1]), messages))):
                done, refs, state = i + 1, entry[1], entry[2]
            break
        new = messages[done:]
        state = extend(state, new)
        if not new:
            return state
        try:
            refs = refs + tuple(map(weakref.ref, new))
        except TypeError:  # a message type without weakref support: never reused
            return state
        if done:
            # The conversation has moved on: its earlier entry would only hold memory.
            folds.pop(id(messages[done - 1]), None)
        key = id(messages[-1])
        folds[key] = (weakref.ref(messages[-1], functools.partial(_forget, folds, key)),
                      refs, state)
        if len(folds) > _FOLDS:
            # The entry written longest ago (pop: a weak-reference callback may have
            # dropped it in between).
            folds.pop(next(iter(folds)), None)
        return state

    def wire_list(self, messages: Sequence[_M], build: Callable[[_M], _T | None]) -> list[_T]:
        """``[wire_of(m, build) for m in messages]`` without the ``None`` items: a new list.

        Through :meth:`wire_fold`, so only the messages added since the conversation's
        previous request are looked up. The same wire forms either way: messages are
        immutable and :meth:`wire_of` caches by identity too.
        """
        wire_of = self.wire_of

        def extend(wire: list[_T], new: Sequence[_M]) -> list[_T]:
            return [*wire, *(w for m in new if (w := wire_of(m, build)) is not None)]

        start: list[_T] = []
        wire = self.wire_fold(messages, start, extend)
        return list(wire)  # the caller's to change

    @property
    def name(self) -> str:
        """The configured provider name."""
        return self.config.name

    @property
    def model(self) -> str:
        """The model id sent to the endpoint."""
        return self.config.model

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r})"

    # -- what subclasses provide ------------------------------------------------

    def auth_headers(self) -> dict[str, str]:
        """Headers carrying the key; raise ``auth`` when a required key is missing."""
        raise NotImplementedError

    def build_body(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ChatOptions,
    ) -> dict[str, Any]:
        """The JSON request body."""
        raise NotImplementedError

    def parse_response(self, data: Any) -> ChatResult:
        """A complete answer as a :class:`ChatResult`."""
        raise NotImplementedError

    def assembler(self, options: ChatOptions) -> StreamAssembler:
        """A fresh assembler for one streamed answer."""
        raise NotImplementedError

    # -- the call ------------------------------------------------------------------

    @property
    def at_key_host(self) -> bool:
        """Whether the endpoint is one of the kind's well-known hosts (where its key is due)."""
        return self.defaults.is_key_host(self.config.base_url)

    def missing_key(self, var: str, why: str = "") -> ProviderError:
        """The ``auth`` error for a required key that is not set."""
        return self.http.error(
            "auth",
            f"missing API key: set the environment variable {var}{why} "
            "(or name another variable in this provider's api_key_env)",
        )

    def config_problem(self) -> str | None:
        """Why a call cannot work as configured — a required key that is not set — or
        ``None``. The provider registry asks when it builds the provider, so a missing
        key is a configuration error before any request (the same check runs again at
        every call, for a key removed later)."""
        try:
            self.auth_headers()
        except ProviderError as exc:
            return exc.message
        return None

    def _body(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition], options: ChatOptions
    ) -> dict[str, Any]:
        return merge_fields(self.config.options, self.build_body(messages, tools, options))

    def _parse(self, data: Any) -> ChatResult:
        try:
            return self.parse_response(data)
        except ProviderError:
            raise
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise self.http.error(
                "bad_request",
                f"unexpected response shape ({type(exc).__name__}: {exc}): "
                f"{cut(json.dumps(data, default=str))}",
                status=200,
            ) from exc

    async def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ChatOptions,
    ) -> ChatResult:
        """Call the model; raises only :class:`ProviderError` (and task cancellation)."""
        headers = self.auth_headers()  # before any request: a missing key costs no round trip
        body = self._body(messages, tools, options)
        if not options.stream:
            return self._parse(await self.http.post_json(self.path, body, headers))
        assembler = self.assembler(options)
        try:
            async with aclosing(self.http.stream_lines(self.path, body, headers)) as lines:
                await assembler.consume(lines)
        except WholeAnswer as whole:
            # The server ignored `stream: true`: its answer is the non-streamed one, and
            # its text goes out as one delta, so a streaming UI still shows it.
            result = self._parse(whole.data)
            assembler.text(result.message.content)
            return result
        return self._parse(assembler.response())

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.http.aclose()


def _forget(cache: dict[int, Any], key: int, ref: Any) -> None:
    # Only this message's entry: its id may already belong to a newer message.
    entry = cache.get(key)
    if entry is not None and entry[0] is ref:
        del cache[key]


async def sse_events(
    provider: HttpProvider, lines: AsyncIterator[str]
) -> AsyncGenerator[SseEvent, None]:
    """The server-sent events of a streamed answer. A consumer that may stop before the
    end iterates it under :func:`contextlib.aclosing` (closed where it stops, not by the
    event loop in a task of its own).

    A body without a single event is no stream (whatever its content type said):
    one JSON document is the whole answer (:class:`WholeAnswer`), anything else is
    ``bad_request`` — not a broken stream, retried in vain.
    """
    stray: list[str] = []
    parser = SseParser(stray)
    seen = False
    # The lines are parsed here, not through iter_sse: one async generator less between
    # the socket and the provider, for every line of every streamed answer.
    async for line in lines:
        event = parser.line(line)
        if event is not None:
            seen = True
            yield event
    event = parser.end()
    if event is not None:
        seen = True
        yield event
    text = "\n".join(stray)
    if seen or not text.strip():
        return
    try:
        data = json.loads(text)
    except ValueError:
        raise provider.http.bad_stream("expected a server-sent event stream, got", text) from None
    raise WholeAnswer(data)


def loads_event(provider: HttpProvider, data: str) -> Any:
    """One streamed JSON payload; garbage is ``bad_request``."""
    try:
        return json.loads(data)
    except ValueError as exc:
        raise provider.http.bad_stream("unparseable stream data", data) from exc
