"""Showing a run: the answer on stdout, progress on stderr, or JSON lines for scripts.

:class:`HumanRenderer` writes the model's text to stdout as ``text_delta``
events arrive (or whole replies when the provider does not stream) and
progress to stderr: a spinner while waiting when stderr is a terminal, plain
``[lich] …`` lines otherwise. :class:`JsonRenderer` writes every event
envelope as one JSON object per line (``docs/events.md``).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any, TextIO

from lich.guards import truncate_text
from lich.visible import visible

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

    from lich.events import Envelope
    from lich.types import ToolCall, ToolResult

# Characters rich changes in a plain line (control codes it drops, tabs it expands);
# a progress line without any is written as it is, exactly as rich would write it.
_RICH_REWRITES = re.compile("[\t\r\x07\x08\x0b\x0c]")

__all__ = ["HumanRenderer", "JsonRenderer", "args_preview", "error_preview", "make_err_console"]


def make_err_console() -> Console:
    """The stderr console: colours and a spinner on a terminal, plain text otherwise.

    Built on first use (:class:`_LazyConsole`): a run whose stderr is no terminal
    writes its progress lines without rich, and then does not import it at all.
    """
    return _LazyConsole()  # type: ignore[return-value]


# What rich reads to decide that a console is a terminal whatever isatty() says.
_RICH_TERMINAL_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE")


class _LazyConsole:
    """``Console(stderr=True, highlight=False)``, made when something needs more of it
    than :attr:`is_terminal`, :attr:`quiet` and :attr:`file`.

    Those three are answered without rich only when rich's own answer is certain:
    ``is_terminal`` when stderr says it is no terminal and none of ``FORCE_COLOR`` /
    ``TTY_COMPATIBLE`` is set (rich would then say False); ``quiet`` and ``file``
    while the console is not made (rich's console starts with ``quiet`` False and
    writes to ``sys.stderr`` as it is at the time, terminal or not; setting ``quiet``
    makes the console). Anything else — an attribute, a call, a setting — makes the
    real console and goes to it, so the behaviour is rich's.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_console", None)

    def _real(self) -> Console:
        console: Console | None = self.__dict__["_console"]
        if console is None:
            from rich.console import Console

            console = Console(stderr=True, highlight=False)
            object.__setattr__(self, "_console", console)
        return console

    def _plain(self) -> bool:
        if self.__dict__["_console"] is not None:
            return False
        if any(name in os.environ for name in _RICH_TERMINAL_ENV):
            return False
        isatty = getattr(sys.stderr, "isatty", None)
        try:
            return isatty is not None and not isatty()
        except ValueError:  # a closed stderr: rich says "no terminal" too, but ask it
            return False

    @property
    def is_terminal(self) -> bool:
        return False if self._plain() else self._real().is_terminal

    @property
    def quiet(self) -> bool:
        # rich's console starts with quiet False, terminal or not; only a setting (which
        # makes the console) changes it. Asked for every progress line, so no checks here.
        console: Console | None = self.__dict__["_console"]
        return False if console is None else console.quiet

    @property
    def file(self) -> IO[str]:
        # rich's stderr console writes to sys.stderr as it is at the time of writing (or
        # to the file a rich proxy on it stands for), terminal or not. A missing stderr
        # (rich writes to a null file then) is left to rich.
        console: Console | None = self.__dict__["_console"]
        if console is None:
            stderr = getattr(sys.stderr, "rich_proxied_file", sys.stderr)
            if stderr is not None:
                return stderr
        return self._real().file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._real(), name, value)


def _short(value: Any, limit: int) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)  # quotes strings, escapes newlines
    except (TypeError, ValueError):
        text = repr(value)
    return truncate_text(text, limit, style="ellipsis")


def args_preview(args: Mapping[str, Any], limit: int = 100, per_value: int = 40) -> str:
    """``key="value", n=3`` with long values cut, one line, at most ``limit`` characters."""
    parts = [f"{k}={_short(v, per_value)}" for k, v in args.items()]
    return truncate_text(", ".join(parts), limit, style="ellipsis")


def error_preview(result: ToolResult, limit: int = 160) -> str:
    """The first line of a failed result's error, cut to ``limit``."""
    text = (result.error or result.output or "error").strip()
    first = text.splitlines()[0] if text else "error"
    if "\n" in text:
        first += "…"  # more lines follow
    return truncate_text(first, limit, style="ellipsis")


def counted(n: int, noun: str) -> str:
    """``1 turn``, ``2 turns``, ``1,204 tokens``: a count with its noun, the one way
    every closing line and summary says one (digits grouped, the plural right)."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _wait_text(ms: float) -> str:
    """``0.8 s``, ``11.0 s``, ``2 min 5 s``: a person's answer time, roughly."""
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def call_preview(call: ToolCall) -> str:
    """``name(args…)``."""
    return f"{call.name}({args_preview(call.args)})"


class _Output:
    """Writes to stdout; when the reader goes away (``lich … | head``) it stops writing
    and calls ``on_closed`` once, instead of raising on every later event."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out
        self.closed = False
        self.on_closed: Callable[[], None] | None = None

    @property
    def out(self) -> TextIO:
        """Where the text goes (``sys.stdout`` at call time by default)."""
        return self._out or sys.stdout

    def send(self, text: str) -> bool:
        """Write and flush ``text``; False once the reader is gone."""
        if self.closed:
            return False
        try:
            self.out.write(text)
            self.out.flush()
        except (BrokenPipeError, ValueError):  # ValueError: the stream was closed
            self.closed = True
            if self.on_closed is not None:
                self.on_closed()
            return False
        return True


# json.dumps(..., separators=...) builds an encoder per call; one for every event line.
# ASCII escapes keep every line writable whatever the terminal's encoding.
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))

# The keys envelope_to_dict writes before the event's own fields.
_ENVELOPE_KEYS = frozenset({"v", "run_id", "session_id", "seq", "ts"})


def _compact_encoder() -> Callable[[Any], str]:
    """``_COMPACT_JSON.encode`` for a dict, without building its C encoder on every call
    (``JSONEncoder.encode`` makes one per call: a third of an event line's cost)."""
    from json import encoder as json_encoder

    # Not in typeshed: the C encoder JSONEncoder.iterencode uses when it can.
    make = getattr(json_encoder, "c_make_encoder", None)
    if make is None:  # a Python without the _json accelerator
        return _COMPACT_JSON.encode
    # The arguments JSONEncoder.iterencode passes for _COMPACT_JSON, but no circular-
    # reference bookkeeping: an event's data is the tree cattrs unstructured it into.
    encode = make(None, _COMPACT_JSON.default, json_encoder.encode_basestring_ascii, None,
                  ":", ",", False, False, True)
    return lambda obj: "".join(encode(obj, 0))


class _EnvelopeLines:
    """An envelope's ``--json`` line: ``_COMPACT_JSON.encode(envelope_to_dict(envelope))``
    and a newline, byte for byte, with less work per event.

    The envelope's first keys (``v``, ``run_id``, ``session_id``) are the same for every
    event of a run: encoded once per run instead of once per event; ``seq`` and ``ts``
    are written as the JSON encoder writes an int and a finite float (their ``repr``);
    the event's fields are encoded by a reused encoder. Anything else — an event with a
    field named like an envelope key (the dict would put its value in the key's place),
    a ``seq`` or ``ts`` of another type, a non-finite ``ts`` — takes the dict path.
    """

    def __init__(self) -> None:
        from lich.events import EVENT_SCHEMA_VERSION
        from lich.serialization import envelope_to_dict, unstructure

        self._unstructure = unstructure
        self._to_dict = envelope_to_dict
        self._version = EVENT_SCHEMA_VERSION
        self._encode = _compact_encoder()
        self._run: tuple[Any, Any] | None = None
        self._head = ""

    def __call__(self, envelope: Envelope) -> str:
        body = self._unstructure(envelope.event)
        seq, ts = envelope.seq, envelope.ts
        if (type(body) is not dict or not body or not _ENVELOPE_KEYS.isdisjoint(body)
                or type(seq) is not int or type(ts) is not float or not math.isfinite(ts)):
            return _COMPACT_JSON.encode(self._to_dict(envelope)) + "\n"
        run = (envelope.run_id, envelope.session_id)
        if run != self._run:
            head = _COMPACT_JSON.encode({"v": self._version, "run_id": run[0],
                                         "session_id": run[1]})
            self._head, self._run = head[:-1] + ',"seq":', run
        return f'{self._head}{seq!r},"ts":{ts!r},{self._encode(body)[1:]}\n'


class JsonRenderer(_Output):
    """Every event as one JSON line (schema ``lich/schemas/events.schema.json``).

    Each line is written and flushed on its own, when its event is emitted: a reader of
    the pipe gets every event as it happens (one ``write`` per event, nothing held
    back for a later one).
    """

    _lines: _EnvelopeLines | None = None

    def __call__(self, envelope: Envelope) -> None:
        lines = self._lines
        if lines is None:
            lines = self._lines = _EnvelopeLines()
        self.send(lines(envelope))


class HumanRenderer(_Output):
    """Answer text to stdout, progress to stderr.

    :param err: the stderr console (spinner and colours when it is a terminal).
    :param out: where answer text goes (``sys.stdout`` at call time by default).
    :param progress: show turn and tool lines (chat turns them off for plain stdin).
    """

    def __init__(self, err: Console, out: TextIO | None = None, *, progress: bool = True) -> None:
        super().__init__(out)
        self.err = err
        self.progress = progress
        self.live = err.is_terminal
        self._status: Status | None = None
        # The text shown for the model call in progress, in the pieces it came in (joined
        # only when a stream reset needs it: += on an attribute copies the whole answer).
        self._current: list[str] = []
        self._handlers: dict[str, Callable[[Any], None] | None] = {}
        self._line_open = False  # stdout's last character is not a newline

    # ------------------------------------------------------------ output

    def _write(self, text: str) -> None:
        if not text:
            return
        self._stop_spinner()
        text = visible(text)  # the model's text: escapes spelled out (lich.visible)
        if self.send(text):
            self._line_open = not text.endswith("\n")

    def end_line(self) -> None:
        """Finish the answer's current line, if one is open."""
        if self._line_open:
            self.send("\n")
            self._line_open = False

    def note(self, text: str, style: str = "dim", *, always: bool = False) -> None:
        """One progress line on stderr (``[lich] text`` when stderr is not a terminal)."""
        if not (self.progress or always):
            return
        self.end_line()
        text = visible(text)  # tool names, arguments and errors come from the model
        line = f"[lich] {text}"
        if not self.live and not self.err.quiet and not _RICH_REWRITES.search(line):
            # What rich would write for this line, without building and rendering a Text
            # for it (two progress lines per tool turn; B1-cli in docs/performance.md).
            err = self.err.file
            err.write(line + "\n")
            err.flush()
            return
        from rich.text import Text

        if self.live:
            self.err.print(Text(text, style=style), soft_wrap=True)
        else:
            self.err.print(Text(line), soft_wrap=True)

    def _spin(self, text: str) -> None:
        if not (self.live and self.progress):
            return
        if self._line_open:
            return  # the answer is being written on this terminal line; do not draw over it
        from rich.text import Text

        # One line, cut with an ellipsis: a wrapped status line would leave debris behind.
        room = max(10, self.err.width - 4)  # the spinner and its space take the rest
        status = Text(visible(text), style="dim")
        status.truncate(room, overflow="ellipsis")
        if self._status is None:
            self._status = self.err.status(status, spinner="dots")
            self._status.start()
        else:
            self._status.update(status)

    def _stop_spinner(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def close(self) -> None:
        """Stop the spinner and end the answer's line."""
        self._stop_spinner()
        self.end_line()

    # ------------------------------------------------------------ events

    def __call__(self, envelope: Envelope) -> None:
        event = envelope.event
        handlers = self._handlers
        try:
            handler = handlers[event.type]
        except KeyError:  # looked up once per event type
            handler = handlers[event.type] = getattr(self, f"_on_{event.type}", None)
        if handler is not None:
            handler(event)

    def _on_turn_start(self, event: Any) -> None:
        self.note(f"turn {event.turn}")

    def _on_llm_start(self, event: Any) -> None:
        self._current = []
        self._spin("thinking…")

    def _on_text_delta(self, event: Any) -> None:
        self._current.append(event.text)
        self._write(event.text)

    def _on_stream_reset(self, event: Any) -> None:
        partial, self._current = "".join(self._current), []
        erased = partial and self._erase(partial)
        if partial and not erased:
            self.end_line()
        what = "the partial answer was discarded" if erased else "the answer restarts below"
        self.note(f"stream from {event.provider} reset ({event.reason}); {what}", "yellow")
        self._spin("thinking…")

    def _erase(self, text: str) -> bool:
        """Take back ``text`` just written to a terminal; False when that is not possible."""
        out = self.out
        try:
            if not out.isatty():
                return False
        except (AttributeError, ValueError):
            return False
        from rich.cells import cell_len

        size = shutil.get_terminal_size()
        width = max(1, size.columns)
        rows = sum(max(1, math.ceil(cell_len(line) / width))
                   for line in visible(text).split("\n"))  # as _write showed it
        if rows >= size.lines:
            return False  # part of it scrolled away; it cannot be taken back
        # Up to the first row of the partial text, column 0, then clear to the end of screen.
        self.send((f"\x1b[{rows - 1}F" if rows > 1 else "\r") + "\x1b[J")
        self._line_open = False
        return True

    def _on_llm_end(self, event: Any) -> None:
        self._stop_spinner()
        content = event.result.message.content
        if not any(self._current) and content:
            self._write(content)  # not streamed: show the whole reply now
        self.end_line()

    def _on_tool_call_start(self, event: Any) -> None:
        if self.live:  # the preview is for the spinner only
            self._spin(f"running {call_preview(event.call)}")

    def _on_tool_call_end(self, event: Any) -> None:
        self._stop_spinner()
        result = event.result
        preview = call_preview(event.call)
        took = f" ({event.duration_ms:.0f} ms)" if event.duration_ms else ""
        waited = getattr(event, "approval_wait_ms", 0.0)
        if waited:
            # Apart from the run time: "ok (11045 ms)" for a 10 ms write misleads.
            took = (f" ({event.duration_ms:.0f} ms, after {_wait_text(waited)} waiting "
                    "for approval)")
        if event.blocked_by:
            status = f"blocked by {event.blocked_by}: {error_preview(result)}"
        elif result.ok:
            status = "ok"
        else:
            status = f"error: {error_preview(result)}"
        if event.rewritten_by:
            status += f" [args rewritten by {', '.join(event.rewritten_by)}]"
        if self.live:
            mark = "✓" if result.ok else "✗"
            style = "green" if result.ok else "red"
            self.note(f"  {mark} {preview} {status}{took}", style)
        else:
            self.note(f"tool {preview}: {status}{took}")

    def _on_approval_requested(self, event: Any) -> None:
        # The approver takes the terminal: no spinner drawing over its question.
        self.close()
        if not self.live:
            self.note(f"approval needed: {call_preview(event.call)} ({event.reason})",
                      always=True)

    def _on_approval_resolved(self, event: Any) -> None:
        # A denial is shown with the call's result (its error says why); an approval
        # says who gave it and for how long, since it is what lets the call run.
        if not event.approved:
            from lich.executor import APPROVAL_UNAVAILABLE  # loaded by the run already

            if event.message == APPROVAL_UNAVAILABLE:
                # Here (a run of the command line) --yes would have approved it.
                self.note("  no one to ask here (no terminal): `lich --yes` approves the "
                          "calls that ask", "yellow", always=True)
            return
        if event.approver == "session":  # no one was asked: an earlier answer covers it
            self.note("  allowed by an earlier approval in this session", "green", always=True)
            return
        scope = {"once": "", "session": " for this session",
                 "always": " from now on"}.get(event.scope, f" ({event.scope})")
        edited = ", with edited arguments" if event.args is not None else ""
        self.note(f"  approved by {event.approver or 'an approver'}{scope}{edited}",
                  "green", always=True)

    def _on_compress_start(self, event: Any) -> None:
        self.note(f"compressing the context (~{event.estimated_tokens} tokens)…")
        self._spin("compressing the context…")

    def _on_compress_end(self, event: Any) -> None:
        self._stop_spinner()
        if event.ok and event.summary_chars:
            self.note(f"context compressed: summary of {event.summary_chars} chars, "
                      f"~{event.estimated_tokens} tokens now")
        else:
            self.note("context compression did not help; continuing with the full context",
                      "yellow")

    def _on_compress_skipped(self, event: Any) -> None:
        self.note(f"context compression skipped by {event.skipped_by}: {event.reason}",
                  "yellow")

    def _on_instructions_cut(self, event: Any) -> None:
        # Never silent: a cut instruction is a rule the model will not see.
        self.note(f"instructions cut: {event.source} (~{event.tokens} tokens, priority "
                  f"{event.priority}; the system prompt's budget is {event.budget_tokens} "
                  "tokens)", "yellow", always=True)

    def _on_prompt_blocked(self, event: Any) -> None:
        self.note(f"message refused by {event.blocked_by}: {event.reason}", "red", always=True)

    def _on_run_continued(self, event: Any) -> None:
        self.note(f"{event.continued_by} asks for more: {event.prompt}", always=True)

    def _on_retry(self, event: Any) -> None:
        detail = f": {event.message}" if event.message else ""
        self.note(f"retrying {event.provider} in {event.delay_s:.1f}s "
                  f"(attempt {event.attempt}, {event.kind}{detail})", "yellow")

    def _on_failover(self, event: Any) -> None:
        detail = f": {event.message}" if event.message else ""
        self.note(f"failover {event.from_provider} → {event.to_provider} "
                  f"({event.kind}{detail})", "yellow")

    def _on_budget_exhausted(self, event: Any) -> None:
        turns = event.turns_used
        # The turn cap needs no more words than the count; another budget says what ran out.
        why = "" if event.budget == "max_turns" or not event.reason else f": {event.reason}"
        self.note(f"budget exhausted after {counted(turns, 'turn')}{why}",
                  "yellow", always=True)

    def _on_error(self, event: Any) -> None:
        # The caller reports the failure itself (with every attempt); just clear the spinner.
        self._stop_spinner()

    def _on_run_end(self, event: Any) -> None:
        self.close()
        if event.stopped_reason == "aborted":
            self.note("run aborted", "yellow", always=True)
