"""The performance fixes made for the benchmarks keep behaviour: caches return what a
fresh computation would, and forget what they no longer need."""

from __future__ import annotations

import gc
import json

from lich.config import ProviderConfig
from lich.types import (
    AssistantMessage,
    ChatOptions,
    Message,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    UserMessage,
)
from lich_providers.openai_compat import OpenAICompatProvider


def _provider() -> OpenAICompatProvider:
    return OpenAICompatProvider(
        ProviderConfig(kind="openai_compat", name="p", model="m", base_url="http://127.0.0.1:9/v1")
    )


def _history() -> list[Message]:
    return [
        SystemMessage("be brief"),
        UserMessage("go"),
        AssistantMessage("", (ToolCall("c1", "echo", {"text": "é"}),)),
        ToolMessage("c1", "echo", "é"),
    ]


def test_openai_wire_messages_are_mapped_once_and_reused() -> None:
    provider = _provider()
    history = _history()
    tools = [ToolDefinition("echo", "Echo.", {"type": "object"})]
    first = provider.build_body(history, tools, ChatOptions())
    history.append(AssistantMessage("done"))
    second = provider.build_body(history, tools, ChatOptions())
    # The earlier messages' wire dicts are the very same objects, not re-serialised.
    assert all(a is b for a, b in zip(first["messages"], second["messages"], strict=False))
    assert second["messages"][-1] == {"role": "assistant", "content": "done"}
    assert second["messages"][2]["tool_calls"][0]["function"] == {
        "name": "echo", "arguments": json.dumps({"text": "é"}, ensure_ascii=False)}


def test_openai_wire_cache_matches_a_fresh_provider_and_equal_messages() -> None:
    cached = _provider()
    history = _history()
    cached.build_body(history, [], ChatOptions())
    again = cached.build_body(history, [], ChatOptions())
    fresh = _provider().build_body(_history(), [], ChatOptions())
    assert again == fresh


def test_openai_wire_cache_forgets_collected_messages() -> None:
    provider = _provider()
    history = _history()
    provider.build_body(history, [], ChatOptions())
    assert len(provider._wire_cache) == 4
    del history
    gc.collect()
    assert provider._wire_cache == {}
