"""``python -m lich.testing serve``: the scripted model server on its own.

For manual testing and tutorials: one process serving all three wire
dialects on 127.0.0.1 until Ctrl-C or SIGTERM, so that ``lich``, a provider
plugin under development or ``curl`` can talk to a model with no network and
no key. Without a script it echoes the latest user message; ``--script FILE``
plays a JSON list of steps first (see :func:`parse_script`).

Its only line on stdout is ``lich scripted model server on <url>``, printed
(and flushed) once the port is bound, for scripts and tests to read; what a
person wants to see — the paths of each dialect, one line per request — goes
to stderr.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import click

from lich.testing.dialects import DIALECTS
from lich.testing.scripted import (
    Fail,
    Reply,
    Responder,
    ScriptedModel,
    ScriptRequest,
    Step,
    demo_responder,
    echo_responder,
)
from lich.testing.server import ScriptedServer
from lich.types import ToolCall

__all__ = ["DEFAULT_PORT", "READY_PREFIX", "ScriptError", "describe", "main", "parse_script"]

READY_PREFIX = "lich scripted model server on "
"""The start of the one line ``serve`` prints on stdout; the base URL follows it."""

DEFAULT_PORT = 8765
"""A fixed default, so a tutorial's config can name the URL; ``--port 0`` picks a free one."""

RESPONDERS: dict[str, Callable[[], Responder] | None] = {
    "echo": echo_responder,
    "demo": demo_responder,
    "none": None,  # the model's own answer once a script runs out: "(script exhausted)"
}

_REPLY_KEYS = {"text", "tool_calls", "finish_reason", "delay_s", "chunks"}
_FAIL_KEYS = {"fail", "body", "headers", "delay_s"}
_CALL_KEYS = {"id", "name", "args"}


class ScriptError(ValueError):
    """A script file that is not a list of steps; the message names the place (``$[1].text``)."""


def _expect(value: Any, kinds: type | tuple[type, ...], where: str, what: str) -> Any:
    # bool is an int to isinstance, and no field of a step takes a boolean.
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ScriptError(f"{where}: expected {what}, got {json.dumps(value)}")
    return value


def _check_keys(item: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise ScriptError(f"{where}.{unknown[0]}: unknown key (expected one of "
                          f"{', '.join(sorted(allowed))})")


def _tool_call(item: Any, where: str, default_id: str) -> ToolCall:
    _expect(item, dict, where, "an object with name and args")
    _check_keys(item, _CALL_KEYS, where)
    if "name" not in item:
        raise ScriptError(f"{where}.name: required")
    name = _expect(item["name"], str, f"{where}.name", "a string")
    args = _expect(item.get("args", {}), dict, f"{where}.args", "an object")
    call_id = _expect(item.get("id", default_id), str, f"{where}.id", "a string")
    return ToolCall(call_id, name, args)


def _delay(item: Mapping[str, Any], where: str) -> float:
    delay = _expect(item.get("delay_s", 0), (int, float), f"{where}.delay_s", "a number")
    if delay < 0:
        raise ScriptError(f"{where}.delay_s: must not be negative")
    return float(delay)


def _step(item: Any, where: str, index: int) -> Step:
    if isinstance(item, str):
        return Reply(item)
    _expect(item, dict, where, "a string or an object")
    if "fail" in item:
        _check_keys(item, _FAIL_KEYS, where)
        status = _expect(item["fail"], int, f"{where}.fail", "an HTTP status")
        if not 400 <= status <= 599:
            raise ScriptError(f"{where}.fail: expected an HTTP error status (400-599), "
                              f"got {status}")
        headers = _expect(item.get("headers", {}), dict, f"{where}.headers", "an object")
        for key, value in headers.items():
            _expect(value, str, f"{where}.headers.{key}", "a string")
        extra: dict[str, Any] = {"body": item["body"]} if "body" in item else {}
        return Fail(status, headers=headers, delay_s=_delay(item, where), **extra)
    _check_keys(item, _REPLY_KEYS, where)
    text = _expect(item.get("text", ""), str, f"{where}.text", "a string")
    calls = _expect(item.get("tool_calls", []), list, f"{where}.tool_calls", "a list")
    chunks = item.get("chunks")
    if chunks is not None:
        _expect(chunks, list, f"{where}.chunks", "a list of strings")
        for j, chunk in enumerate(chunks):
            _expect(chunk, str, f"{where}.chunks[{j}]", "a string")
    finish = item.get("finish_reason")
    if finish is not None:
        _expect(finish, str, f"{where}.finish_reason", "a string")
    return Reply(
        text,
        tuple(_tool_call(c, f"{where}.tool_calls[{j}]", f"call_{index + 1}_{j + 1}")
              for j, c in enumerate(calls)),
        finish_reason=finish,
        delay_s=_delay(item, where),
        chunks=tuple(chunks) if chunks is not None else None,
    )


def parse_script(data: Any) -> list[Step]:
    """The steps of a script file's JSON: a list, each item a step.

    * a string — a text reply;
    * ``{"text": ..., "tool_calls": [{"name", "args", "id"?}], "finish_reason"?,
      "delay_s"?, "chunks"?}`` — a reply (``id`` defaults to ``call_<step>_<n>``);
    * ``{"fail": 429, "body"?: ..., "headers"?: {...}, "delay_s"?}`` — an HTTP failure.

    Raises :class:`ScriptError` naming the first bad place (``$[2].tool_calls[0].name``).
    """
    _expect(data, list, "$", "a list of steps")
    return [_step(item, f"$[{i}]", i) for i, item in enumerate(data)]


def _load_script(ctx: click.Context, param: click.Parameter, path: Path | None) -> list[Step]:
    # A click callback: a bad file is a usage error (exit 2), reported before binding.
    if path is None:
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise click.BadParameter(f"{path} is not JSON: {exc}") from exc
    try:
        return parse_script(data)
    except ScriptError as exc:
        raise click.BadParameter(f"{path}: {exc}") from exc


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return json.dumps(text if len(text) <= limit else text[: limit - 1] + "…",
                      ensure_ascii=False)


def describe(step: Step) -> str:
    """One line saying what a step answers (for the request log)."""
    if isinstance(step, Fail):
        return f"HTTP {step.status}"
    parts = [_short(step.text)] if step.text else []
    parts += [f"{c.name}({json.dumps(c.args, ensure_ascii=False)})" for c in step.tool_calls]
    return " + ".join(parts)


class _LoggedModel(ScriptedModel):
    """A :class:`ScriptedModel` that writes one stderr line per request and its answer."""

    def __init__(self, steps: list[Step], responder: Responder | None, log: bool) -> None:
        super().__init__(steps, responder)
        self._log = log
        self._count = 0
        self._log_lock = threading.Lock()

    def next(self, request: ScriptRequest) -> Step:
        step = super().next(request)
        if self._log:
            with self._log_lock:
                self._count += 1
                mode = "stream" if request.stream else "plain"
                _err(f"#{self._count} {request.dialect} {request.model or '-'} {mode} "
                     f"{_short(request.last_user())} -> {describe(step)}")
        return step


def _err(line: str) -> None:
    # The request log is a courtesy: a closed stderr must not break an answer.
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class _Stop(Exception):
    """Raised in the main thread by the signal handler, to leave the wait."""


def _on_signal(signum: int, frame: object) -> NoReturn:
    raise _Stop


@click.group()
def main() -> None:
    """The lich testing kit's command line (``python -m lich.testing``)."""


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback exposes an unauthenticated server.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port to bind; 0 picks a free one (the URL line says which).")
@click.option("--script", "steps", type=click.Path(dir_okay=False, path_type=Path),
              callback=_load_script, metavar="FILE",
              help="A JSON list of steps to answer first, in order (see docs/testing.md).")
@click.option("--responder", type=click.Choice(list(RESPONDERS)), default="echo",
              show_default=True,
              help="What answers once the script is used up (or from the start without one): "
                   "echo the last user message, play the `lich demo` tool calls, or say "
                   "\"(script exhausted)\".")
@click.option("--quiet", is_flag=True, help="No request log on stderr.")
def serve(host: str, port: int, steps: list[Step], responder: str, quiet: bool) -> None:
    """Serve the scripted model (OpenAI, Anthropic and Ollama dialects) until Ctrl-C."""
    make = RESPONDERS[responder]
    model = _LoggedModel(steps, make() if make is not None else None, log=not quiet)
    try:
        server = ScriptedServer(model, host=host, port=port, dialects=tuple(DIALECTS))
    except OSError as exc:
        hint = " (--port 0 picks a free one)" if port else ""
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}{hint}") from exc
    server.start()
    # Ctrl-C and SIGTERM (`kill`, a service manager) both end the wait below; installed
    # explicitly so that SIGINT works even where the shell started us with it ignored.
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, _on_signal) for sig in stops}
    try:
        click.echo(READY_PREFIX + server.root_url)
        sys.stdout.flush()
        for dialect in server.dialects:
            first, *others = dialect.paths
            also = f" (also {', '.join(others)})" if others else ""
            _err(f"  {dialect.name:<10} POST {server.root_url}{first}{also}")
        answering = f"{len(steps)} scripted step(s), then " if steps else ""
        _err(f"answering: {answering}{responder}; Ctrl-C stops the server")
        while True:
            # The server thread answers. time.sleep, unlike a lock wait, is cut short by
            # a signal on every platform.
            time.sleep(3600)
    except _Stop:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop()
    _err("stopped")
