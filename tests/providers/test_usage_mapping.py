"""Each provider maps the token usage its API reports, cache and reasoning tokens included.

The bodies are shaped like recorded answers of the real APIs (field for field
as the services send them, ids shortened); the streams are the same answers as
server-sent events. A scripted server reporting cache and reasoning tokens
round-trips them through each dialect.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from lich.testing import Reply
from lich.types import ChatOptions, Usage, UserMessage

from .conftest import Wire, make_provider

# OpenAI chat completions (an o-series model with a cached prompt prefix).
OPENAI_BODY: dict[str, Any] = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "o3-mini-2025-01-31",
    "choices": [{
        "index": 0,
        "message": {"role": "assistant", "content": "Paris.", "refusal": None,
                    "annotations": []},
        "logprobs": None,
        "finish_reason": "stop",
    }],
    "usage": {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 256, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
    "system_fingerprint": "fp_42bfad963b",
}
OPENAI_USAGE = Usage(2006, 300, 2306, cache_read_tokens=1920, reasoning_tokens=256)


def _openai_stream() -> bytes:
    base = {"id": "chatcmpl-B9M", "object": "chat.completion.chunk", "created": 1741570283,
            "model": "o3-mini-2025-01-31", "system_fingerprint": "fp_42bfad963b"}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                              "finish_reason": None}], "usage": None},
        {**base, "choices": [{"index": 0, "delta": {"content": "Paris."},
                              "finish_reason": None}], "usage": None},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
         "usage": None},
        {**base, "choices": [], "usage": OPENAI_BODY["usage"]},
    ]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


# The Messages API with prompt caching: a cache write and a cache read in one answer.
ANTHROPIC_BODY: dict[str, Any] = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-20250514",
    "content": [{"type": "text", "text": "Paris."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 21,
        "cache_creation_input_tokens": 188086,
        "cache_read_input_tokens": 2000,
        "output_tokens": 393,
        "service_tier": "standard",
    },
}
ANTHROPIC_USAGE = Usage(21 + 188086 + 2000, 393, 21 + 188086 + 2000 + 393,
                        cache_read_tokens=2000, cache_write_tokens=188086)


def _anthropic_stream(delta_usage: dict[str, Any]) -> bytes:
    start = {**ANTHROPIC_BODY, "content": [], "stop_reason": None,
             "usage": {**ANTHROPIC_BODY["usage"], "output_tokens": 1}}
    events = [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Paris."}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": delta_usage}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n"
                   for name, data in events).encode()


OLLAMA_BODY: dict[str, Any] = {
    "model": "llama3.2",
    "created_at": "2025-01-10T12:00:00.000Z",
    "message": {"role": "assistant", "content": "Paris."},
    "done_reason": "stop",
    "done": True,
    "total_duration": 5191566416,
    "load_duration": 2154458,
    "prompt_eval_count": 26,
    "prompt_eval_duration": 383809000,
    "eval_count": 298,
    "eval_duration": 4799921000,
}


async def _usage(kind: str, response: httpx.Response, *, stream: bool) -> Usage:
    provider = make_provider(kind, Wire(kind, [response]))
    try:
        result = await provider.chat([UserMessage("capital of France?")], [],
                                     ChatOptions(stream=stream))
    finally:
        await provider.aclose()
    assert result.message.content == "Paris."
    return result.usage


async def test_openai_cached_and_reasoning_tokens() -> None:
    assert await _usage("openai_compat", httpx.Response(200, json=OPENAI_BODY),
                        stream=False) == OPENAI_USAGE


async def test_openai_stream_reports_the_same_usage_in_its_last_chunk() -> None:
    assert await _usage("openai_compat", httpx.Response(200, content=_openai_stream()),
                        stream=True) == OPENAI_USAGE


@pytest.mark.parametrize("details", [None, {}, {"cached_tokens": None}, "n/a"])
async def test_openai_servers_without_details_report_zero(details: Any) -> None:
    usage: dict[str, Any] = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    if details is not None:
        usage["prompt_tokens_details"] = details
        usage["completion_tokens_details"] = details
    body = {**OPENAI_BODY, "usage": usage}
    assert await _usage("openai_compat", httpx.Response(200, json=body),
                        stream=False) == Usage(10, 2, 12)


async def test_anthropic_cache_write_and_read_are_part_of_the_prompt() -> None:
    assert await _usage("anthropic", httpx.Response(200, json=ANTHROPIC_BODY),
                        stream=False) == ANTHROPIC_USAGE


async def test_anthropic_stream_cache_counts_from_message_start() -> None:
    # The usual stream: message_start carries the input side, message_delta the output.
    stream = _anthropic_stream({"output_tokens": 393})
    assert await _usage("anthropic", httpx.Response(200, content=stream),
                        stream=True) == ANTHROPIC_USAGE


async def test_anthropic_stream_message_delta_counts_win() -> None:
    # Newer streams repeat the cumulative counts in message_delta; those are the final ones.
    stream = _anthropic_stream({"input_tokens": 21, "cache_creation_input_tokens": 188086,
                                "cache_read_input_tokens": 2500, "output_tokens": 393})
    usage = await _usage("anthropic", httpx.Response(200, content=stream), stream=True)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (2500, 188086)
    assert usage.prompt_tokens == 21 + 188086 + 2500


async def test_ollama_reports_no_cache_or_reasoning() -> None:
    assert await _usage("ollama", httpx.Response(200, json=OLLAMA_BODY),
                        stream=False) == Usage(26, 298, 324)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("openai_compat", Usage(500, 80, 580, cache_read_tokens=300, reasoning_tokens=40)),
        # The Messages API has no reasoning count (thinking is billed as output).
        ("anthropic", Usage(500, 80, 580, cache_read_tokens=300, cache_write_tokens=100)),
        ("ollama", Usage(500, 80, 580)),
    ],
)
async def test_a_scripted_server_reports_cache_and_reasoning(
    kind: str, expected: Usage, stream: bool
) -> None:
    scripted = Usage(500, 80, 580, cache_read_tokens=300, cache_write_tokens=100,
                     reasoning_tokens=40)
    provider = make_provider(kind, Wire(kind, [Reply("Paris.", usage=scripted)]))
    try:
        result = await provider.chat([UserMessage("hi")], [], ChatOptions(stream=stream))
    finally:
        await provider.aclose()
    assert result.usage == expected


def test_usage_adds_every_count() -> None:
    a = Usage(10, 5, 15, cache_read_tokens=4, cache_write_tokens=2, reasoning_tokens=1)
    b = Usage(1, 2, 3, cache_read_tokens=1, cache_write_tokens=1, reasoning_tokens=2)
    assert a + b == Usage(11, 7, 18, cache_read_tokens=5, cache_write_tokens=3,
                          reasoning_tokens=3)
    assert Usage() + Usage() == Usage()
