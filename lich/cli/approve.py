"""Who says yes on the command line: the terminal approver of ``lich TASK`` and
``lich chat``, and the approver of ``--yes``.

Both are in-process plugins implementing ``lich_request_approval``, registered on
the agent's plugin host by the command (:func:`install_terminal_approver`; ``--yes``
by :func:`lich.cli.common.assemble`, so every command that runs an agent honours it).

The terminal approver shows the request (:func:`lich.approvals.present.describe`:
the tool, its arguments, the diff a file write would make) on stderr — stdout is
the answer, or the ``--json`` lines — and asks ``[y]es / [n]o / [s]ession /
[a]lways / [e]dit``. It reads the terminal only: with stdin not a terminal it
answers ``None`` and the core denies the call (``approval_unavailable: …``).

Every wait is asynchronous and cancellable (prompt_toolkit's ``prompt_async`` on a
terminal, else the event loop watching stdin), never a thread blocked in
``input()``: when the core stops waiting (``approval_timeout_s``, or the run is
cancelled) the prompt goes away at once and the next line typed goes to whoever
reads next, not to a forgotten question.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from lich.approvals.present import CHOICE_WORDS, CHOICES, choice_prompt, describe
from lich.cli.common import echo_warning
from lich.hooks import Approval, ApprovalRequest, hookimpl
from lich.visible import visible

if TYPE_CHECKING:
    from rich.console import Console

    from lich.config import LoadedConfig
    from lich.plugins import PluginHost

__all__ = [
    "TERMINAL_APPROVER",
    "YES_APPROVER",
    "LineInput",
    "TerminalApprover",
    "YesApprover",
    "install_terminal_approver",
    "install_yes_approver",
    "interrupt_run",
]

TERMINAL_APPROVER = "terminal"
"""The ``approver`` the terminal's answers are recorded with (and its plugin name)."""

YES_APPROVER = "--yes"
"""The ``approver`` of the calls ``--yes`` approved (and its plugin name)."""

INTERRUPTED = "the user pressed Ctrl-C: the call was not run and the run was cancelled"
"""What the model is told about the call denied by Ctrl-C at the prompt."""


class YesApprover:
    """``--yes``: approves every call a before-hook asked about, once each.

    Only ``Ask`` reaches an approver: a deny rule or a plugin's ``Block`` refuses
    the call before, whatever this says. ``tryfirst``: the person asked for no
    questions on the command line, which wins over an approver a plugin brings.
    """

    @hookimpl(tryfirst=True)
    async def lich_request_approval(self, request: ApprovalRequest) -> Approval:
        """Approve ``request`` (recorded as approved by ``--yes``)."""
        return Approval(True, approver=YES_APPROVER)


def install_yes_approver(host: PluginHost) -> None:
    """Register the :class:`YesApprover` on ``host`` (once: a second call does nothing)."""
    if not host.pm.has_plugin(YES_APPROVER):
        host.register_object(YesApprover(), YES_APPROVER)


def interrupt_run() -> None:
    """What Ctrl-C at the approval prompt does beyond denying the call: what Ctrl-C
    anywhere else in a run does.

    On a terminal the prompt reads keys in raw mode, so Ctrl-C arrives as a key,
    not as SIGINT; raising SIGINT hands it to the run's own handler
    (:func:`lich.cli.run.run_agent`), which cancels the run (a second Ctrl-C stops
    it outright), tells the person, and gives the exit code of an interrupted run.
    """
    signal.raise_signal(signal.SIGINT)


# Event-loop iterations after raise_signal() until the loop's SIGINT handler has run:
# asyncio reads the signal off its wakeup pipe in one iteration and calls the handler
# in the next (one more for good measure).
_SIGNAL_ROUNDS = 3


async def _let_signal_handlers_run() -> None:
    """Yield to the event loop until a signal just raised has been handled by it.

    Without this the denial returned after Ctrl-C reaches the agent before the run's
    handler fires its cancel token, and the run sends its next model request first
    (how soon depends only on how few times the HTTP client yields on the way).
    """
    for _ in range(_SIGNAL_ROUNDS):
        await asyncio.sleep(0)


# ------------------------------------------------------------------ input


class LineInput(Protocol):
    """One line of terminal input at a time, asynchronously.

    ``line`` raises :class:`KeyboardInterrupt` for Ctrl-C (when the terminal
    delivers it as a key) and :class:`EOFError` at the end of the input; it is
    cancellable, and a cancelled read leaves the terminal as it found it.
    """

    async def line(self, prompt: str, default: str = "") -> str:
        """The line typed after ``prompt`` (``default``: text to start editing from)."""
        ...


class ToolkitInput:
    """prompt_toolkit on the terminal (stdin and stderr both terminals): line editing,
    and a prompt that is an asyncio task, gone the moment it is cancelled.

    Its own session (no history: an answer is not a chat line to recall), writing to
    stderr like the rest of the request."""

    def __init__(self) -> None:
        self._session: Any = None

    def _get_session(self) -> Any:
        if self._session is None:
            from prompt_toolkit import PromptSession
            from prompt_toolkit.input import create_input
            from prompt_toolkit.output import create_output

            self._session = PromptSession(input=create_input(sys.stdin),
                                          output=create_output(stdout=sys.stderr))
        return self._session

    async def line(self, prompt: str, default: str = "") -> str:
        """See :class:`LineInput`."""
        from prompt_toolkit.application.current import create_app_session

        session = self._get_session()
        # An app session of its own: prompt_toolkit keeps "the running application" in
        # an AppSession object that every task shares unless one makes its own. A
        # question abandoned at approval_timeout_s finishes after the run went on, and
        # on finishing puts back the application it found there — over the chat prompt
        # started meanwhile, whose Enter then ended nothing: the next line was lost.
        with create_app_session(input=session.input, output=session.output):
            # The run owns the loop: its SIGINT handler (which prompt_toolkit would
            # replace, and remove on leaving, leaving later Ctrl-Cs unanswered) and its
            # exception handler stay. In raw mode Ctrl-C is a key: KeyboardInterrupt here.
            return str(await session.prompt_async(
                prompt, default=default, handle_sigint=False, set_exception_handler=False))


class FdLineInput:
    """Plain lines from stdin (a terminal whose stderr is redirected, or no
    prompt_toolkit), read by the event loop when stdin is readable: no thread waits in
    ``input()``, so a cancelled question consumes nothing typed afterwards.

    The terminal is in its usual line mode here: Ctrl-C is SIGINT, which the run's
    handler turns into cancelling the run (and the core into denying the call)."""

    def __init__(self, fd: int | None = None, out: IO[str] | None = None) -> None:
        self._fd = fd
        self.out = out
        """Where the prompt is written (``None``: stderr)."""
        self._pending = bytearray()  # what a read brought beyond the line returned

    async def line(self, prompt: str, default: str = "") -> str:
        """See :class:`LineInput` (``default`` is shown, to be typed again if wanted)."""
        fd = sys.stdin.fileno() if self._fd is None else self._fd
        if default:
            prompt = f"{prompt}\n  {default}\n> "
        out = sys.stderr if self.out is None else self.out
        out.write(prompt)
        out.flush()
        loop = asyncio.get_running_loop()
        while b"\n" not in self._pending:
            await _readable(loop, fd)
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                continue
            if not chunk:
                if not self._pending:
                    raise EOFError
                break
            self._pending += chunk
        text, _, rest = bytes(self._pending).partition(b"\n")
        self._pending = bytearray(rest)
        return text.decode("utf-8", errors="replace").rstrip("\r")


async def _readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Until ``fd`` can be read; cancelling the wait stops watching it."""
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


def terminal_input() -> LineInput | None:
    """The input for questions on this terminal, or ``None`` when stdin is not one or
    there is no terminal to ask on.

    stdin and stderr terminals: prompt_toolkit (or plain lines) there. stdin a
    terminal but stderr not (``lich TASK 2>log``): the question goes to the
    controlling terminal, ``/dev/tty``, and the answer is read from it — on stderr
    it would be in the log, and lich would wait for an answer no one knows is
    wanted. No ``/dev/tty``: ``None`` (calls that ask are denied at once).
    """
    if not _isatty(sys.stdin):
        return None
    if _isatty(sys.stderr):
        import importlib.util

        # Looked up, not imported: a one-shot run pays for prompt_toolkit only once it asks.
        if importlib.util.find_spec("prompt_toolkit") is not None:
            return ToolkitInput()
        return FdLineInput()
    return controlling_terminal_input()


def controlling_terminal_input() -> FdLineInput | None:
    """Plain lines on ``/dev/tty`` (prompt written there, answers read there), or
    ``None`` when the process has no controlling terminal."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return None
    # Kept open for the process's life: the approver asks on it at any time.
    out = os.fdopen(os.dup(fd), "w", encoding="utf-8", errors="replace", buffering=1)
    return FdLineInput(fd, out)


def _isatty(stream: Any) -> bool:
    try:
        return stream is not None and bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


# --------------------------------------------------------------- approver


_ANSWERS: Mapping[str, str] = {
    **{key: key for key, _ in CHOICE_WORDS},
    **{word: key for key, word in CHOICE_WORDS},
}


class TerminalApprover:
    """Asks the person at the terminal about each call that needs approval.

    :param loaded: the configuration in use and where it came from: the files an
        ``always`` answer may write to (:func:`lich.approvals.store.approval_config_targets`).
    :param console: where the request is shown (a stderr console).
    :param input: how answers are read; by default the terminal's
        (:func:`terminal_input`), ``None`` when stdin is not a terminal.
    :param interrupt: what Ctrl-C at the prompt does besides denying the call
        (:func:`interrupt_run`: the run is cancelled).

    ``trylast``: an approver a plugin brings (a chat, a web page) is asked first and
    may leave the call to the terminal by answering ``None``.

    The answers: ``y`` runs the call; ``n`` asks for an optional message for the
    model, then denies; ``s`` approves the call and the same tool-and-pattern for the
    rest of the session (the request's rules); ``a`` shows the rules and the config
    files they may go to, writes them to the one chosen and approves like ``s``
    (if the file cannot be written, it says so and approves for the session only);
    ``e`` edits the arguments as JSON (in ``$VISUAL``/``$EDITOR`` when set, else at
    the prompt), re-asking until they are a JSON object the tool's schema accepts,
    then runs the call with them. Ctrl-C denies the call and cancels the run; the
    end of the input (Ctrl-D) denies the call.
    """

    def __init__(
        self,
        loaded: LoadedConfig,
        console: Console,
        *,
        input: LineInput | None = None,
        interrupt: Callable[[], None] = interrupt_run,
    ) -> None:
        self.loaded = loaded
        self.console = console
        self.input = input if input is not None else terminal_input()
        self.interrupt = interrupt
        tty = getattr(self.input, "out", None)
        if tty is not None:
            # The question is asked on /dev/tty: shown there too, not in stderr's file.
            from rich.console import Console as RichConsole

            self.console = RichConsole(file=tty, force_terminal=False, no_color=True,
                                       highlight=False, soft_wrap=True)

    @hookimpl(trylast=True)
    async def lich_request_approval(self, request: ApprovalRequest) -> Approval | None:
        """Show ``request`` and ask; ``None`` when there is no terminal to ask on."""
        if self.input is None:
            return None
        self._show(request)
        try:
            return await self._dialog(request)
        except KeyboardInterrupt:
            self._say("Ctrl-C: the call is denied and the run cancelled", "yellow")
            self.interrupt()
            await _let_signal_handlers_run()
            return Approval(False, message=INTERRUPTED, approver=TERMINAL_APPROVER)
        except EOFError:
            self._say("end of input: the call is denied", "yellow")
            return Approval(False, message="the user gave no answer (end of input)",
                            approver=TERMINAL_APPROVER)

    # ------------------------------------------------------------- showing

    def _say(self, text: str, style: str = "") -> None:
        from rich.text import Text

        # (Rules come from the model's arguments, errors may quote them: shown inert.)
        self.console.print(Text(visible(text), style=style if self.console.is_terminal else ""),
                           soft_wrap=True)

    def _show(self, request: ApprovalRequest) -> None:
        from rich.text import Text

        colour = self.console.is_terminal
        lines = describe(request)
        self.console.print()
        in_preview = False
        for index, line in enumerate(lines):
            style = ""
            if index == 0:
                style = "bold yellow"
            elif line == "preview:":
                in_preview = True
            elif in_preview and line.startswith("  "):
                body = line[2:]
                if body.startswith("+") and not body.startswith("+++"):
                    style = "green"
                elif body.startswith("-") and not body.startswith("---"):
                    style = "red"
                elif body.startswith("@@"):
                    style = "cyan"
            else:
                in_preview = False
            self.console.print(Text(visible(line), style=style if colour else ""), soft_wrap=True)

    # ------------------------------------------------------------- asking

    async def _ask(self, prompt: str, default: str = "") -> str:
        assert self.input is not None
        try:
            return await self.input.line(prompt, default)
        except asyncio.CancelledError:
            # The core stopped waiting (approval_timeout_s, or the run was cancelled):
            # end the abandoned prompt's line so what is printed next starts clean.
            out = getattr(self.input, "out", None) or sys.stderr
            with contextlib.suppress(OSError, ValueError):
                out.write("\n")
                out.flush()
            raise

    async def _dialog(self, request: ApprovalRequest) -> Approval:
        prompt = f"{choice_prompt()}? "
        while True:
            answer = _ANSWERS.get((await self._ask(prompt)).strip().lower())
            if answer == "y":
                return Approval(True, approver=TERMINAL_APPROVER)
            if answer == "n":
                message = (await self._ask(
                    "message for the model (optional, Enter to skip): ")).strip()
                return Approval(False, message=message or None, approver=TERMINAL_APPROVER)
            if answer == "s":
                return Approval(True, scope="session", approver=TERMINAL_APPROVER)
            if answer == "a":
                always = await self._always(request)
                if always is not None:
                    return always
                continue
            if answer == "e":
                args = await self._edit(request)
                if args is not None:
                    return Approval(True, args=args, approver=TERMINAL_APPROVER)
                continue
            for key, meaning in CHOICES:
                self._say(f"  {key}  {meaning}", "dim")

    # ------------------------------------------------------------- always

    async def _always(self, request: ApprovalRequest) -> Approval | None:
        """Write the request's rules to the config file the person picks; ``None``
        (back to the choices) when they pick none."""
        from lich.approvals.store import add_allow_rules, approval_config_targets

        if not request.rules:
            self._say("this call has no allow rule to write; answer y or s instead", "yellow")
            return None
        targets = approval_config_targets(self.loaded.config, self.loaded.location)
        self._say("always allow: " + ", ".join(request.rules), "bold")
        self._say("written to [approvals] allow of:")
        for number, (label, path) in enumerate(targets, 1):
            state = "" if path.exists() else " (new file)"
            self._say(f"  {number}) {label}: {path}{state}")
        while True:
            picked = (await self._ask(
                f"which file? [1-{len(targets)}, Enter: back to the choices] ")).strip()
            if not picked:
                return None
            if picked.isdigit() and 1 <= int(picked) <= len(targets):
                break
            self._say(f"answer a number from 1 to {len(targets)}, or Enter to go back")
        path = targets[int(picked) - 1][1]
        from lich.trust import config_digest, keep_trust

        before = config_digest(path)
        try:
            add_allow_rules(path, request.rules)
            keep_trust(path, before)  # the user's own edit of a trusted project's config
        except (OSError, ValueError) as exc:  # ConfigError is a ValueError
            problem = str(exc).strip() or type(exc).__name__
            self._say(f"could not write {path}: {problem}", "red")
            self._say("approved for this session only (the rules were not saved)", "yellow")
            return Approval(True, scope="session", approver=TERMINAL_APPROVER,
                            message=f"always: writing {path} failed: {problem}")
        self._say(f"added to {path}: " + ", ".join(request.rules), "green")
        return Approval(True, scope="always", approver=TERMINAL_APPROVER,
                        message=f"allow rules written to {path}")

    # --------------------------------------------------------------- edit

    async def _edit(self, request: ApprovalRequest) -> dict[str, Any] | None:
        """The arguments as the person edited them; ``None`` (back to the choices)
        when they left them empty or the editor failed."""
        from lich.tools import validate_args

        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
        args = dict(request.call.args)
        text = json.dumps(args, indent=2, ensure_ascii=False) if editor else json.dumps(
            args, ensure_ascii=False)
        while True:
            if editor:
                edited = await self._run_editor(editor, text)
                if edited is None:
                    return None
            else:
                edited = await self._ask("arguments as JSON (empty: back to the choices): ",
                                         text)
            if not edited.strip():
                self._say("not edited", "dim")
                return None
            text = edited
            try:
                value = json.loads(edited)
            except json.JSONDecodeError as exc:
                self._say(f"not valid JSON: {exc.msg} (line {exc.lineno}, column "
                          f"{exc.colno}); try again (empty: back to the choices)", "red")
                continue
            if not isinstance(value, dict):
                self._say("the arguments must be a JSON object ({...}); try again", "red")
                continue
            problem = (None if request.tool is None
                       else validate_args(value, request.tool.parameters))
            if problem is not None:
                # Checked here too (the core checks again) so that a slip is fixed, not
                # turned into a denial.
                self._say(f"the tool does not accept these arguments: {problem}; try again",
                          "red")
                continue
            return value

    async def _run_editor(self, editor: str, text: str) -> str | None:
        """``text`` edited in ``editor`` (a command line, ``code -w`` say) on a
        temporary file; ``None`` when the editor cannot start or fails."""
        try:
            argv = shlex.split(editor)
        except ValueError as exc:
            self._say(f"cannot run the editor {editor!r}: {exc}", "red")
            return None
        path = _temp_json(text)
        try:
            try:
                proc = await asyncio.create_subprocess_exec(*argv, str(path))
            except OSError as exc:
                self._say(f"cannot run the editor {editor!r}: {exc}", "red")
                return None
            try:
                code = await proc.wait()
            except asyncio.CancelledError:
                # The core stopped waiting: the editor must not outlive the question.
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                raise
            if code != 0:
                self._say(f"the editor exited with status {code}; not edited", "yellow")
                return None
            return _read_and_remove(path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)


# A small local file, written and read at once: no need to leave the event loop.
def _temp_json(text: str) -> Path:
    fd, name = tempfile.mkstemp(prefix="lich-args-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return Path(name)


def _read_and_remove(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def install_terminal_approver(host: PluginHost, loaded: LoadedConfig,
                              console: Console) -> TerminalApprover | None:
    """Register a :class:`TerminalApprover` on ``host`` when stdin is a terminal (and
    none is registered yet); the approver, or ``None`` (no terminal: calls that need
    approval are then denied, ``approval_unavailable``)."""
    if host.pm.has_plugin(TERMINAL_APPROVER):
        existing = host.pm.get_plugin(TERMINAL_APPROVER)
        return existing if isinstance(existing, TerminalApprover) else None
    approver = TerminalApprover(loaded, console)
    if approver.input is None:
        if _isatty(sys.stdin):
            # A terminal, but nowhere to ask on it: say so now, not after a silent wait.
            echo_warning("stderr is not a terminal and /dev/tty cannot be opened: a tool "
                         "call that needs approval will be denied (no one to ask)")
        return None
    if getattr(approver.input, "out", None) is not None:
        echo_warning("stderr is not a terminal: approval questions are asked on the "
                     "terminal (/dev/tty)")
    host.register_object(approver, TERMINAL_APPROVER)
    return approver
