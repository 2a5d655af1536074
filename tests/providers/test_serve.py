"""``python -m lich.testing serve`` as a user runs it: a separate process, on loopback,
answering each provider plugin, streaming or not, and stopping cleanly on a signal.

Every server here runs with pytest made unimportable (a ``pytest`` module on
``PYTHONPATH`` that raises), so the command is also proven to need no test extra.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lich.events import TextDelta
from lich.testing.cli import READY_PREFIX
from lich.types import ChatOptions, ProviderError, ToolDefinition, UserMessage

from .conftest import make_provider

BLOCKER = "raise ImportError('pytest is not installed here (blocked by the test)')\n"
LIST_DIR = ToolDefinition("list_dir", "List a directory.", {"type": "object"})


class ServeProcess:
    """A running ``serve``: its process, the URL from its stdout line, its stderr file."""

    def __init__(self, proc: subprocess.Popen[str], url: str, stderr: Path) -> None:
        self.proc = proc
        self.url = url
        self.stderr_path = stderr

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8")

    def base_url(self, kind: str) -> str:
        """Where a provider of ``kind`` is pointed (openai_compat's includes ``/v1``)."""
        return f"{self.url}/v1" if kind == "openai_compat" else self.url

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        """Signal the process by pid; its exit code and the rest of its stdout."""
        os.kill(self.proc.pid, sig)
        rest, _ = self.proc.communicate(timeout=30)
        return self.proc.returncode, rest


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    """Factory: ``serve(*args)`` starts ``python -m lich.testing serve --port 0 *args``."""
    blocked = tmp_path / "no-pytest"
    (blocked / "_pytest").mkdir(parents=True)
    (blocked / "pytest.py").write_text(BLOCKER, encoding="utf-8")
    (blocked / "_pytest" / "__init__.py").write_text(BLOCKER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(blocked), "PYTHONWARNINGS": "error"}
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> ServeProcess:
        stderr = tmp_path / f"serve-{len(started)}.err"
        with stderr.open("w", encoding="utf-8") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "lich.testing", "serve", "--port", "0", *args],
                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
                env=env, cwd=tmp_path,
            )
        started.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "" if it exits instead: no hang
        assert line.startswith(READY_PREFIX), (line, stderr.read_text(encoding="utf-8"))
        return ServeProcess(proc, line.removeprefix(READY_PREFIX).strip(), stderr)

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


async def _ask(kind: str, server: ServeProcess, stream: bool, text: str = "hi") -> Any:
    provider = make_provider(kind, base_url=server.base_url(kind))
    deltas: list[str] = []
    options = ChatOptions(
        stream=stream,
        on_event=lambda e: deltas.append(e.text) if isinstance(e, TextDelta) else None,
    )
    try:
        result = await provider.chat([UserMessage(text)], [LIST_DIR], options)
    finally:
        await provider.aclose()
    return result, "".join(deltas)


async def test_each_provider_gets_an_echo_streaming_and_not(
    kind: str, serve: Callable[..., ServeProcess]
) -> None:
    server = serve()
    assert server.url.startswith("http://127.0.0.1:")

    plain, no_deltas = await _ask(kind, server, stream=False, text="hello there")
    streamed, deltas = await _ask(kind, server, stream=True, text="and again")

    assert (plain.message.content, no_deltas) == ("You said: hello there", "")
    assert plain.message.tool_calls == ()
    assert plain.usage.total_tokens > 0
    assert streamed.message.content == deltas == "You said: and again"
    dialect = {"openai_compat": "openai"}.get(kind, kind)
    log = server.stderr()
    assert f'#1 {dialect} m-1 plain "hello there" -> "You said: hello there"' in log
    assert f'#2 {dialect} m-1 stream "and again" -> "You said: and again"' in log
    code, rest = server.stop()
    assert (code, rest) == (0, "")


async def test_a_script_file_answers_first_then_the_responder(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"text": "Let me look.", "tool_calls": [{"name": "list_dir", "args": {"path": "."}}]},
        "Two files.",
        {"fail": 429, "headers": {"retry-after": "7"}, "body": {"error": {"message": "slow"}}},
    ]), encoding="utf-8")
    server = serve("--script", str(script))

    first, _ = await _ask("openai_compat", server, stream=False)
    second, deltas = await _ask("anthropic", server, stream=True)
    assert first.message.content == "Let me look."
    (call,) = first.message.tool_calls
    assert (call.id, call.name, call.args) == ("call_1_1", "list_dir", {"path": "."})
    assert second.message.content == deltas == "Two files."
    with pytest.raises(ProviderError) as info:
        await _ask("ollama", server, stream=False)
    assert (info.value.kind, info.value.status) == ("rate_limit", 429)
    # The script is used up: the default responder echoes.
    after, _ = await _ask("ollama", server, stream=True, text="now what?")
    assert after.message.content == "You said: now what?"
    assert '-> "Let me look." + list_dir({"path": "."})' in server.stderr()
    assert "-> HTTP 429" in server.stderr()


def test_responder_none_says_the_script_is_exhausted(
    serve: Callable[..., ServeProcess],
) -> None:
    server = serve("--responder", "none", "--quiet")
    response = httpx.post(f"{server.url}/api/chat", timeout=10, json={
        "model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}]})
    assert response.json()["message"]["content"] == "(script exhausted)"
    assert "#1" not in server.stderr()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_it_cleanly(serve: Callable[..., ServeProcess], sig: int) -> None:
    server = serve()
    assert httpx.get(f"{server.url}/health", timeout=10).json() == {"status": "ok"}

    code, rest = server.stop(sig)

    assert code == 0
    assert rest == ""  # stdout carries the one URL line only
    log = server.stderr()
    assert "Traceback" not in log
    assert log.rstrip().endswith("stopped")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/health", timeout=10)
