"""The raw loop as a process of its own: B1-cli's and B2-cold's baseline.

``python bench/_raw_cli.py SPEC.json sync|async stream|whole`` reads the base URL,
the system prompt and the tool schemas from ``SPEC.json`` (written by the benchmark,
so that this process imports nothing of lich), runs the bare httpx loop of
:mod:`bench.b1_loop` once to the final answer and prints ``{"calls": …, "text": …}``.

It is run as a script, not with ``-m bench…``: ``bench/__init__.py`` would be
imported first, and the baseline must import only what a bare loop needs (httpx
and json). The loop is written again from ``bench.b1_loop``'s raw loops (importing
that module would import lich); the stream reassembly, :class:`StreamedAnswer`, is
this module's and ``bench.b1_loop`` uses it.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _body(spec: dict[str, Any], messages: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": spec["model"], "messages": messages, "tools": spec["tools"]}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


class StreamedAnswer:
    """A streamed answer put back together from its ``data:`` lines (OpenAI's SSE): the
    raw loops' own, here and in :mod:`bench.b1_loop` (this module imports no lich)."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.done = False

    def line(self, line: str) -> None:
        if self.done or not line.startswith("data: "):
            return  # read to the end of the body: the connection is reused
        data = line[6:]
        if data == "[DONE]":
            self.done = True
            return
        for choice in json.loads(data).get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(tc["index"], {"id": "", "name": "", "args": []})
                slot["id"] = slot["id"] or tc.get("id") or ""
                fn = tc.get("function") or {}
                slot["name"] = slot["name"] or fn.get("name") or ""
                slot["args"].append(fn.get("arguments") or "")

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.calls:
            message["tool_calls"] = [
                {"id": s["id"], "type": "function",
                 "function": {"name": s["name"], "arguments": "".join(s["args"])}}
                for _, s in sorted(self.calls.items())]
        return message


def _take(messages: list[dict[str, Any]], message: dict[str, Any]) -> str | None:
    tool_calls = message.get("tool_calls") or []
    item: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if tool_calls:
        item["tool_calls"] = tool_calls
    messages.append(item)
    if not tool_calls:
        return str(item["content"])
    for call in tool_calls:
        args = json.loads(call["function"]["arguments"] or "{}")
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": args["text"]})
    return None


def run_sync(spec: dict[str, Any], stream: bool) -> tuple[int, str]:
    """The loop with ``httpx.Client``."""
    import httpx

    url = f"{spec['base_url']}/chat/completions"
    messages = [{"role": "system", "content": spec["system"]},
                {"role": "user", "content": spec["task"]}]
    calls = 0
    with httpx.Client(timeout=60) as client:
        while True:
            body = _body(spec, messages, stream)
            if stream:
                chunks = StreamedAnswer()
                with client.stream("POST", url, json=body) as response:
                    response.raise_for_status()
                    for line in response.iter_lines():
                        chunks.line(line)
                message = chunks.message()
            else:
                response = client.post(url, json=body)
                response.raise_for_status()
                message = response.json()["choices"][0]["message"]
            calls += 1
            final = _take(messages, message)
            if final is not None:
                return calls, final


async def run_async(spec: dict[str, Any], stream: bool) -> tuple[int, str]:
    """The loop with ``httpx.AsyncClient``."""
    import httpx

    url = f"{spec['base_url']}/chat/completions"
    messages = [{"role": "system", "content": spec["system"]},
                {"role": "user", "content": spec["task"]}]
    calls = 0
    async with httpx.AsyncClient(timeout=60) as client:
        while True:
            body = _body(spec, messages, stream)
            if stream:
                chunks = StreamedAnswer()
                async with client.stream("POST", url, json=body) as response:
                    response.raise_for_status()
                    async for line in response.aiter_lines():
                        chunks.line(line)
                message = chunks.message()
            else:
                response = await client.post(url, json=body)
                response.raise_for_status()
                message = response.json()["choices"][0]["message"]
            calls += 1
            final = _take(messages, message)
            if final is not None:
                return calls, final


def main(argv: list[str]) -> int:
    """Run the loop once; print its outcome as JSON."""
    if len(argv) != 3 or argv[1] not in ("sync", "async") or argv[2] not in ("stream", "whole"):
        print("usage: _raw_cli.py SPEC.json sync|async stream|whole", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    stream = argv[2] == "stream"
    if argv[1] == "sync":
        calls, text = run_sync(spec, stream)
    else:
        import asyncio

        calls, text = asyncio.run(run_async(spec, stream))
    print(json.dumps({"calls": calls, "text": text}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
