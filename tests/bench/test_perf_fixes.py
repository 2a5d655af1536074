"""The performance fixes made for the benchmarks keep behaviour: caches return what a
fresh computation would, and forget what they no longer need."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import re
import subprocess
import sys
import threading
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import httpx
import pytest

from lich.cancel import Cancelled
from lich.config import ProviderConfig
from lich.testing import async_wait_for
from lich.threads import run_in_daemon_thread
from lich.types import (
    AssistantMessage,
    ChatOptions,
    Message,
    ProviderError,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    UserMessage,
)
from lich_providers._http import MAX_CONNECTIONS, HttpClient
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


def test_openai_wire_list_reuse_gives_the_bodies_a_fresh_provider_gives() -> None:
    # The previous request's list is reused only when its messages are a prefix (by
    # identity) of the next request's: a grown history, another conversation on the
    # same provider, a replaced (compressed) history and an equal-but-new message in
    # the middle must all give exactly the body a provider without history gives.
    provider = _provider()
    history = _history()
    other = [SystemMessage("other"), UserMessage("hi")]
    replaced = [history[0], SystemMessage("summary"), *history[2:]]
    copied = [*history[:2], AssistantMessage("", (ToolCall("c1", "echo", {"text": "é"}),)),
              *history[3:]]
    grown = [*history, AssistantMessage("done")]
    for messages in (history, grown, other, grown, replaced, copied, history, history[:2],
                     grown):
        body = provider.build_body(messages, [], ChatOptions())
        assert body == _provider().build_body(messages, [], ChatOptions())
    first = provider.build_body(grown, [], ChatOptions())
    first["messages"].append("mutated by a caller")
    assert "mutated by a caller" not in provider.build_body(grown, [], ChatOptions())["messages"]


def test_openai_wire_cache_forgets_collected_messages() -> None:
    provider = _provider()
    history = _history()
    provider.build_body(history, [], ChatOptions())
    assert len(provider._wire_cache) == 4
    del history
    gc.collect()
    assert provider._wire_cache == {}


# --- provider HTTP client: bounded requests in flight, connections kept -------------------


def _http_client(transport: httpx.AsyncBaseTransport | None = None,
                 base_url: str = "http://127.0.0.1:9") -> HttpClient:
    return HttpClient(provider="p", base_url=base_url, overflow=re.compile("overflow"),
                      transport=transport, timeout_s=30)


async def test_requests_in_flight_are_capped_before_the_pool() -> None:
    gate = asyncio.Event()
    in_flight = 0
    most = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await gate.wait()
        in_flight -= 1
        return httpx.Response(200, json={"ok": True})

    client = _http_client(httpx.MockTransport(handler))
    calls = [asyncio.ensure_future(client.post_json("/x", {})) for _ in range(MAX_CONNECTIONS + 25)]
    await async_wait_for(lambda: in_flight == MAX_CONNECTIONS, what="a full pool of requests")
    await asyncio.sleep(0.05)  # give any excess caller the chance to get through
    assert in_flight == MAX_CONNECTIONS
    gate.set()
    assert await asyncio.gather(*calls) == [{"ok": True}] * (MAX_CONNECTIONS + 25)
    assert most == MAX_CONNECTIONS
    await client.aclose()


async def _drain(lines: AsyncGenerator[str, None]) -> list[str]:
    async with aclosing(lines):
        return [line async for line in lines]


async def test_stream_slots_are_given_back_whatever_happens() -> None:
    in_flight = 0
    everyone = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight
        if request.url.path == "/fail":
            return httpx.Response(500, text="boom")
        if request.url.path == "/all":
            # Answers only once every slot is taken at the same time.
            in_flight += 1
            if in_flight == MAX_CONNECTIONS:
                everyone.set()
            await everyone.wait()
            return httpx.Response(200, json={"ok": True})
        return httpx.Response(200, text="data: 1\n\ndata: 2\n\n",
                              headers={"content-type": "text/event-stream"})

    client = _http_client(httpx.MockTransport(handler))
    for _ in range(MAX_CONNECTIONS + 5):
        assert await _drain(client.stream_lines("/ok", {})) == ["data: 1", "", "data: 2", ""]
        with pytest.raises(ProviderError):
            await _drain(client.stream_lines("/fail", {}))
        async with aclosing(client.stream_lines("/ok", {})) as lines:
            await anext(lines)  # the consumer stops early
    # A slot that leaked would leave the last of these waiting for ever.
    results = await asyncio.wait_for(
        asyncio.gather(*(client.post_json("/all", {}) for _ in range(MAX_CONNECTIONS))), 10)
    assert results == [{"ok": True}] * MAX_CONNECTIONS
    await client.aclose()


async def test_idle_connections_are_kept_past_twenty_concurrent_requests() -> None:
    connections = 0
    handlers: list[asyncio.Task[Any]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                await asyncio.sleep(0.05)  # keep the concurrent requests overlapping
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: 11\r\n\r\n{\"ok\":true}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = _http_client(base_url=f"http://127.0.0.1:{port}")
    try:
        for _ in range(3):  # three waves of 30 concurrent requests
            await asyncio.gather(*(client.post_json("/x", {}) for _ in range(30)))
        # httpx's default (20 kept idle, counted against *open* connections) would have
        # closed and reopened connections in every wave.
        assert connections <= 30
        await client.aclose()  # closes every connection; the next request opens one
        assert await client.post_json("/x", {}) == {"ok": True}
        assert connections <= 31
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()
        # Nothing may outlive the test's loop (a pending handler would be finalised later,
        # in the middle of whatever runs then).
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


# --- plain functions of plugins: reused daemon threads ------------------------------------


_REUSE_CHECK = """
import asyncio, json, threading
from lich.threads import run_in_daemon_thread

def where():
    thread = threading.current_thread()
    return threading.get_ident(), thread.daemon, thread.name

async def main():
    return [await run_in_daemon_thread(where) for _ in range(20)]

print(json.dumps(asyncio.run(main())))
"""


def test_plugin_calls_reuse_idle_daemon_threads() -> None:
    # In a fresh interpreter, where no other worker can go idle meanwhile: each call
    # finds the previous call's worker idle (it is back on the list before the caller
    # gets the answer), so twenty calls in a row use one thread, however loaded the
    # machine is.
    proc = subprocess.run([sys.executable, "-c", _REUSE_CHECK], capture_output=True,
                          text=True, timeout=60, check=True)
    seen = json.loads(proc.stdout)
    assert all(daemon and name == "lich-where" for _, daemon, name in seen)
    assert len({ident for ident, _, _ in seen}) == 1


async def test_a_call_that_never_returns_keeps_its_thread_and_blocks_nothing() -> None:
    release = threading.Event()
    stuck = asyncio.ensure_future(run_in_daemon_thread(release.wait))
    await asyncio.sleep(0.05)
    answers = await asyncio.wait_for(
        asyncio.gather(*(run_in_daemon_thread(lambda: 42) for _ in range(5))), 10)
    assert answers == [42] * 5
    assert not stuck.done()
    release.set()
    assert await asyncio.wait_for(stuck, 10) is True


async def test_plugin_calls_see_the_callers_context_and_raise_in_the_caller() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")
    var.set("from the caller")
    assert await run_in_daemon_thread(var.get) == "from the caller"

    def boom() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        await run_in_daemon_thread(boom)
    assert await run_in_daemon_thread(lambda: "still working") == "still working"


_FORK_CHECK = """
import asyncio, os, sys
from lich.threads import run_in_daemon_thread
from lich.cancel import Cancelled

asyncio.run(run_in_daemon_thread(lambda: None))  # leaves an idle worker behind
pid = os.fork()
if pid == 0:  # the child: the parent's idle worker does not exist here
    try:
        ok = asyncio.run(asyncio.wait_for(run_in_daemon_thread(lambda: 7), 5)) == 7
    except BaseException:
        ok = False
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_starts_its_own_threads() -> None:
    # In a fresh interpreter: forking the test process itself would copy pytest's threads.
    proc = subprocess.run([sys.executable, "-c", _FORK_CHECK], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# --- streamed answers: the connection outlives an answer that ended before its body ------


async def _sse_server(hold_after_done: bool) -> tuple[asyncio.Server, list[int], list[Any]]:
    """A chunked SSE server that sends `data: [DONE]`, then (unless ``hold_after_done``)
    the end of the body; counts its connections."""
    connections = [0]
    handlers: list[Any] = []
    release = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        handlers.append(asyncio.current_task())
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                piece = b'data: {"x":1}\n\ndata: [DONE]\n\n'
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n"
                             + b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                if hold_after_done:
                    await release.wait()  # the body never ends
                await asyncio.sleep(0.01)  # the end of the body comes a little later
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, connections, handlers


async def _until_done(client: HttpClient) -> list[str]:
    seen = []
    async with aclosing(client.stream_lines("/x", {})) as lines:
        async for line in lines:
            seen.append(line)
            if line == "data: [DONE]":
                break  # as the providers do: the answer is complete
    return seen


@pytest.mark.parametrize("hold", [False, True], ids=["body ends", "body never ends"])
async def test_a_stream_read_to_its_last_event_keeps_its_connection(hold: bool) -> None:
    server, connections, handlers = await _sse_server(hold_after_done=hold)
    port = server.sockets[0].getsockname()[1]
    client = _http_client(base_url=f"http://127.0.0.1:{port}")
    try:
        for _ in range(3):
            # A body that never ends is given up on (the wait is short and bounded).
            lines = await asyncio.wait_for(_until_done(client), 10)
            assert lines == ['data: {"x":1}', "", "data: [DONE]"]
        # One connection for all three when each body ended; a new one each time when not.
        assert connections[0] == (3 if hold else 1)
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


async def test_the_stall_timer_counts_only_the_waits_and_lets_other_cancels_through() -> None:
    from lich_providers._http import _StallTimer

    stall = _StallTimer(0.5)
    for _ in range(2):  # waits far shorter than the limit, with longer pauses in between
        assert await stall.wait(asyncio.sleep(0, "ok")) == "ok"
        await asyncio.sleep(0.6)
    with pytest.raises(TimeoutError):
        await stall.wait(asyncio.sleep(5))
    stall.close()

    stall = _StallTimer(5)
    task = asyncio.ensure_future(stall.wait(asyncio.sleep(5)))
    await asyncio.sleep(0)
    task.cancel()  # a cancel from elsewhere stays a cancel
    with pytest.raises(asyncio.CancelledError):
        await task
    stall.close()


# --- start-up: no CA bundle for plain http, no httpx command line ------------------------


def test_a_plain_http_endpoint_loads_no_ca_bundle_unless_a_proxy_speaks_tls() -> None:
    from lich_providers._http import _needs_tls, _verify_for

    assert not _needs_tls("http://127.0.0.1:8080/v1")
    assert _verify_for("http://127.0.0.1:8080/v1").cert_store_stats()["x509_ca"] == 0
    assert _needs_tls("https://api.example.com/v1")
    assert _needs_tls("HTTPS://api.example.com/v1")
    assert _verify_for("https://api.example.com/v1").cert_store_stats()["x509_ca"] > 0
    # An https proxy from the environment for the plain URL needs the real context.
    with pytest.MonkeyPatch.context() as mp:
        for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy",
                    "NO_PROXY"):
            mp.delenv(var, raising=False)
        mp.setenv("http_proxy", "https://proxy.example:443")
        assert _needs_tls("http://10.0.0.1:8080/v1")
        mp.setenv("no_proxy", "10.0.0.1")
        assert not _needs_tls("http://10.0.0.1:8080/v1")
        mp.setenv("http_proxy", "http://proxy.example:3128")
        mp.delenv("no_proxy")
        assert not _needs_tls("http://10.0.0.1:8080/v1")
    # (The loopback tests above go through the plain context: real http requests.)


_NO_CLI_CHECK = """
import sys
from lich_providers._http import _import_httpx
httpx = _import_httpx()
assert httpx.Client is not None
assert "httpx._main" not in sys.modules, "httpx's command line was imported"
import httpx._main  # still importable on purpose
assert callable(httpx._main.main)
"""


def test_httpx_is_imported_without_its_command_line() -> None:
    # A fresh interpreter: this one has imported httpx (and its CLI) long ago.
    proc = subprocess.run([sys.executable, "-c", _NO_CLI_CHECK], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# --- CLI progress lines: written directly, byte for byte what rich writes -----------------


@pytest.mark.parametrize("text", [
    "turn 1", '  tool x(a="b"): ok (3 ms)  ', "é 中文 😀 :smile: [bold]x[/]", "tab\there",
    "cr\rx", "bell\x07x", "esc\x1b[31mred", "two\nlines", "x" * 300, "",
])
def test_a_plain_progress_line_is_what_rich_would_write(text: str) -> None:
    import io

    from rich.console import Console
    from rich.text import Text

    from lich.cli._render import HumanRenderer
    from lich.visible import visible

    # What rich writes for the line as lich shows it: controls spelled out first.
    expected = io.StringIO()
    Console(file=expected, force_terminal=False, width=40, highlight=False).print(
        Text(f"[lich] {visible(text)}"), soft_wrap=True)
    err = io.StringIO()
    HumanRenderer(Console(file=err, force_terminal=False, width=40, highlight=False),
                  io.StringIO()).note(text)
    assert err.getvalue() == expected.getvalue()
    quiet = io.StringIO()
    HumanRenderer(Console(file=quiet, force_terminal=False, quiet=True), io.StringIO()).note(text)
    assert quiet.getvalue() == ""


# --- tool calls under a run token: one task, not three, same outcomes ---------------------


def _executor(tmp_path: Any, *tools: Any) -> Any:
    from lich.executor import ToolExecutor
    from lich.tools import ToolRegistry

    registry = ToolRegistry()
    for t in tools:
        registry.register(t)
    return ToolExecutor(registry, work_dir=tmp_path)


async def test_a_call_task_cancelled_from_elsewhere_stays_cancelled(tmp_path: Any) -> None:
    from lich import tool
    from lich.cancel import CancelToken

    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Wait."""
        started.set()
        await asyncio.sleep(30)
        return "late"

    executor = _executor(tmp_path, slow)
    run_token = CancelToken()
    task = asyncio.ensure_future(executor.execute(ToolCall("c", "slow", {}), cancel=run_token))
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()  # not the run token: the caller's own cancellation goes through
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not run_token.cancelled


async def test_the_run_token_after_a_call_ended_cancels_nothing_later(tmp_path: Any) -> None:
    from lich import tool
    from lich.cancel import CancelToken

    @tool
    async def quick() -> str:
        """Answer."""
        return "ok"

    executor = _executor(tmp_path, quick)
    run_token = CancelToken()
    result = await executor.execute(ToolCall("c", "quick", {}), cancel=run_token)
    assert result.ok
    assert result.output == "ok"
    run_token.cancel()  # the call is over; the token firing now must not cancel this task
    await asyncio.sleep(0.01)
    assert await asyncio.sleep(0, "still running") == "still running"
    assert (await executor.execute(ToolCall("c", "quick", {}), cancel=run_token)).error \
        == "cancelled"


async def test_the_deadline_still_wins_under_a_run_token(tmp_path: Any) -> None:
    from lich import tool
    from lich.cancel import CancelToken

    @tool(timeout_s=0.05)
    async def stuck() -> str:
        """Hang."""
        await asyncio.sleep(30)
        return "late"

    executor = _executor(tmp_path, stuck)
    result = await asyncio.wait_for(
        executor.execute(ToolCall("c", "stuck", {}), cancel=CancelToken()), 10)
    assert result.error is not None
    assert result.error.startswith("timeout: tool:stuck")


async def test_a_tool_that_swallows_the_cancellation_is_still_cancelled(tmp_path: Any) -> None:
    from lich import tool
    from lich.cancel import CancelToken

    started = asyncio.Event()

    @tool
    async def stubborn() -> str:
        """Ignore cancellation."""
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "finished anyway"
        return "late"

    executor = _executor(tmp_path, stubborn)
    run_token = CancelToken()
    call = asyncio.ensure_future(executor.execute(ToolCall("c", "stubborn", {}),
                                                  cancel=run_token))
    await asyncio.wait_for(started.wait(), 10)
    run_token.cancel()
    result = await asyncio.wait_for(call, 10)
    assert result.error == "cancelled"  # as lich.cancel.race answered: the token won

    async def after() -> int:
        from lich.loop import unless_cancelled

        token = CancelToken()

        async def swallow() -> str:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                return "x"
            return "y"

        asyncio.get_running_loop().call_later(0.01, token.cancel)
        with pytest.raises(Cancelled):
            await unless_cancelled(swallow(), token)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()  # nothing left pending on the task

    assert await asyncio.ensure_future(after()) == 0


@pytest.mark.parametrize("kind", ["openai_compat", "anthropic"])
async def test_a_streamed_answer_leaves_no_generator_for_the_event_loop_to_close(
    kind: str,
) -> None:
    # The providers stop reading at the answer's last event ([DONE], message_stop),
    # before the body ends. A generator left unfinished there is closed by the event
    # loop's finaliser hook, in a task of its own, per generator and call; each one is
    # closed where the provider stops instead.
    from lich.testing import Reply, ScriptedModel, ScriptedServer
    from lich_providers.anthropic import AnthropicProvider

    finalised: list[str] = []
    hooks = sys.get_asyncgen_hooks()

    def finalizer(agen: Any) -> None:
        finalised.append(agen.__qualname__)
        assert hooks.finalizer is not None
        hooks.finalizer(agen)

    model = ScriptedModel([Reply("hello", tool_calls=[ToolCall("c1", "echo", {"text": "x"})]),
                           Reply("done")])
    with ScriptedServer(model, dialects=("openai", "anthropic")) as server:
        root = server.root_url
        provider = (
            OpenAICompatProvider(ProviderConfig(kind=kind, name="p", model="m",
                                                base_url=server.base_url))
            if kind == "openai_compat" else
            AnthropicProvider(ProviderConfig(kind=kind, name="p", model="m", base_url=root),
                              env={"ANTHROPIC_API_KEY": "sk-test"}))
        sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalizer)
        try:
            texts = []
            for _ in range(2):
                result = await provider.chat([UserMessage("go")], [], ChatOptions(stream=True))
                texts.append(result.message.content)
            gc.collect()
            await asyncio.sleep(0)
        finally:
            sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=hooks.finalizer)
            await provider.aclose()
    assert texts == ["hello", "done"]
    assert finalised == []
