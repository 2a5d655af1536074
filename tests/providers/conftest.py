"""Shared helpers for the provider tests: a mock transport that speaks each dialect.

:class:`Wire` is an ``httpx.MockTransport`` handler. By default it answers
from a queue of scripted steps, rendered by the same dialect objects the
loopback :class:`~lich.testing.ScriptedServer` uses; a queue item may also be
a ready ``httpx.Response``, an exception to raise (connection errors), or a
function of the request. Every request is recorded.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lich.config import ProviderConfig
from lich.testing import DIALECTS, Fail, Reply
from lich_providers._base import HttpProvider
from lich_providers.anthropic import AnthropicProvider
from lich_providers.ollama import OllamaProvider
from lich_providers.openai_compat import OpenAICompatProvider

DATA = Path(__file__).parent / "data"
KINDS = ("openai_compat", "anthropic", "ollama")
DIALECT_OF = {"openai_compat": "openai", "anthropic": "anthropic", "ollama": "ollama"}
CLASS_OF: dict[str, type[HttpProvider]] = {
    "openai_compat": OpenAICompatProvider,
    "anthropic": AnthropicProvider,
    "ollama": OllamaProvider,
}
URL_OF = {
    "openai_compat": "https://api.openai.com/v1/chat/completions",
    "anthropic": "https://api.anthropic.com/v1/messages",
    "ollama": "http://localhost:11434/api/chat",
}
ENV = {"OPENAI_API_KEY": "sk-openai-test", "ANTHROPIC_API_KEY": "sk-ant-test"}


class Wire:
    """A recording mock transport answering in the dialect of ``kind``."""

    def __init__(self, kind: str, items: Iterable[Any] = ()) -> None:
        self.kind = kind
        self.dialect = DIALECTS[DIALECT_OF[kind]]
        self.queue: deque[Any] = deque(items)
        self.requests: list[httpx.Request] = []

    def push(self, *items: Any) -> None:
        self.queue.extend(items)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        await request.aread()
        item = self.queue.popleft() if self.queue else Reply("(exhausted)")
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, httpx.Response):
            return item
        if callable(item):
            result = item(request)
            if not isinstance(result, httpx.Response):
                result = await result
            return result
        return self.render(json.loads(request.content), item)

    def render(self, body: Any, step: Reply | Fail) -> httpx.Response:
        parsed = self.dialect.parse(body)
        if isinstance(step, Fail):
            return httpx.Response(
                step.status,
                headers={"content-type": "application/json", **step.headers},
                content=self.dialect.error_body(step),
            )
        if parsed.stream:
            return httpx.Response(
                200,
                headers={"content-type": getattr(self.dialect, "content_type", "")},
                content=b"".join(self.dialect.stream(parsed, step)),
            )
        status, headers, content = self.dialect.respond(parsed, step)
        return httpx.Response(status, headers=headers, content=content)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)

    @property
    def bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.requests]


def counting_ids() -> Callable[[], str]:
    """A deterministic Ollama tool-call id factory (fresh per provider)."""
    counter = itertools.count(1)
    return lambda: f"ollama_test_{next(counter)}"


def make_provider(
    kind: str,
    wire: Wire | None = None,
    *,
    env: dict[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    **config: Any,
) -> HttpProvider:
    """A provider of ``kind`` named after it, model ``m-1``, on ``wire``."""
    values: dict[str, Any] = {"kind": kind, "name": kind, "model": "m-1"}
    values.update(config)
    cfg = ProviderConfig(**values)
    transport = transport or (wire.transport if wire is not None else None)
    env = ENV if env is None else env
    if kind == "ollama":
        return OllamaProvider(cfg, transport=transport, env=env, id_factory=counting_ids())
    return CLASS_OF[kind](cfg, transport=transport, env=env)


def byte_stream(*pieces: bytes, then: BaseException | None = None,
                closed: list[bool] | None = None) -> AsyncIterator[bytes]:
    """A response body that yields ``pieces``, then raises ``then`` (a broken stream)."""

    async def gen() -> AsyncIterator[bytes]:
        try:
            for piece in pieces:
                yield piece
            if then is not None:
                raise then
        finally:
            if closed is not None:
                closed.append(True)

    return gen()


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """Each provider kind in turn."""
    return str(request.param)
