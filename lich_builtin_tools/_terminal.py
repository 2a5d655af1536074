"""The ``terminal`` tool: ``bash -lc <command>`` in the work dir, in its own process group.

* The command runs in a new session (``start_new_session``); on timeout or
  cancellation its whole process group gets ``SIGKILL``, and so does every
  other process it started, found in ``/proc`` (:mod:`._procs`): one that
  called ``setsid`` and was adopted by init is killed too.
* When bash exits by itself, jobs it put in the background are left running
  (``server &`` then ``curl`` in the next call is a common agent pattern).
  One that still holds stdout/stderr makes the call wait ``_PIPE_GRACE_S``,
  then return; its pipes are drained into nothing until it closes them, so
  it does not die of SIGPIPE at its next write.
* stdout and stderr are read through our own pipes into capped buffers
  while the command runs: past the cap, data is drained and dropped, so a
  chatty command cannot grow memory. What arrives is also reported as it
  comes (``ctx.output``, when someone watches), both streams in arrival
  order; the result is the same as without.
* The environment is the process environment plus the tool env, scrubbed of
  secrets (provider key variables and the names
  :func:`lich.secrets.is_secret_name` calls secret) unless
  ``[tools.terminal] pass_env`` lists them. Before the first command, lich makes itself non-dumpable
  (``[tools.terminal] protect_process``), so a command cannot read lich's own
  environment or memory through ``/proc/$PPID`` either; only descriptors
  0-2 are inherited.
* ``[tools.terminal] max_processes`` / ``max_memory_mb`` become the command's
  ``RLIMIT_NPROC`` / ``RLIMIT_AS`` (0, the default: unlimited).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from lich.guards import ToolError, optional_number_arg, require_string_arg, truncate_text
from lich.processes import DIRECT, Launch, ProcessRunner, launched
from lich.tools import Tool, ToolContext
from lich.types import ToolResult
from lich_builtin_tools._common import (
    Deadline,
    call_deadline,
    kill_process,
    minimal_env,
    output_cap,
    protect_process,
    reap,
    schema,
    scrub_env,
)
from lich_builtin_tools._procs import POLL_S, CallProcesses, subreaper_preexec
from lich_builtin_tools._settings import TerminalSettings, tool_settings

__all__ = ["make_terminal_tool"]

DEFAULT_TIMEOUT_MS = 60_000
MAX_TIMEOUT_MS = 300_000
STREAM_CAP_CHARS = 50_000
OUTPUT_CAP_CHARS = 20_000
# The executor's limit: the tool's own maximum plus the time kept back for killing
# the command and returning what it printed (see call_deadline).
TOOL_TIMEOUT_S = MAX_TIMEOUT_MS / 1000 + 5
# How long to wait for the pipes to close once bash itself has exited. A
# backgrounded child that keeps them open (``server &``) is left running: its
# pipes stay open and are drained into nothing until it closes them (see
# ``_DETACHED``), so its further output is not collected.
_PIPE_GRACE_S = 0.5
# Readers of pipes still held by background jobs after their call returned.
# Closing our read end would kill such a job with SIGPIPE at its next write
# (a half-alive ``server &``), so the pipe is drained until the job closes it;
# the transport closes itself at EOF and the reader leaves this set.
_DETACHED: set[_CappedPipe] = set()


class _CappedPipe(asyncio.Protocol):
    """Collects at most ``cap_bytes`` from a pipe; counts (and drops) the rest."""

    def __init__(self, cap_bytes: int, on_text: Callable[[str], None] | None = None) -> None:
        self.cap = cap_bytes
        # What arrives, as text, for a person watching the call; decoded incrementally
        # so a character split across two reads is not mangled.
        self.on_text = on_text
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.chunks: list[bytes] = []
        self.kept = 0
        self.dropped = 0
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        room = self.cap - self.kept
        if room > 0:
            piece = data[:room]
            self.chunks.append(piece)
            self.kept += len(piece)
            # Only what is kept is reported: a flood past the cap costs no decoding.
            if self.on_text is not None:
                text = self._decoder.decode(piece)
                if text:
                    self.on_text(text)
        self.dropped += max(0, len(data) - max(room, 0))

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def detach(self) -> None:
        """Keep draining, but collect nothing more: the call has returned."""
        self.cap = self.kept
        self.on_text = None
        _DETACHED.add(self)
        self.closed.add_done_callback(lambda _: _DETACHED.discard(self))

    def text(self, label: str, cap_chars: int) -> str:
        """The collected bytes as text, capped at ``cap_chars``, with a note when cut."""
        text = b"".join(self.chunks).decode("utf-8", "replace")
        if len(text) > cap_chars or self.dropped:
            omitted = max(0, len(text) - cap_chars)
            extra = f", {self.dropped} more bytes dropped" if self.dropped else ""
            note = f"\n[... {label} truncated, {omitted} chars omitted{extra} ...]\n"
            text = text[:cap_chars] + note
        return text


def _factory(reader: _CappedPipe) -> Callable[[], _CappedPipe]:
    return lambda: reader


def make_terminal_tool() -> Tool:
    """The ``terminal`` tool: provider key variables (``ctx.secret_env_names``) and
    secret-looking names are scrubbed from the command's environment."""

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        command = require_string_arg(args, "command")
        requested_ms = optional_number_arg(args, "timeout_ms", DEFAULT_TIMEOUT_MS)
        timeout_ms = min(max(1, int(requested_ms)), MAX_TIMEOUT_MS)
        settings = tool_settings(ctx, "terminal", TerminalSettings)
        # The command stops at its timeout (or the configured limit, less the time
        # kept back for killing it) and the call returns before the executor's limit.
        deadline = call_deadline(settings, TOOL_TIMEOUT_S,
                                 min(timeout_ms, MAX_TIMEOUT_MS) / 1000)
        base = os.environ if settings.inherit_env else minimal_env(settings.pass_env)
        env = scrub_env({**base, **ctx.env}, ctx.secret_env_names, settings.pass_env)
        cap = output_cap(settings, OUTPUT_CAP_CHARS)
        if settings.protect_process:
            # Before the first command runs: from then on it cannot read lich's
            # environment (the provider keys) or memory through /proc.
            protect_process()
        return await run_command(
            command, str(ctx.work_dir), env, deadline, cap,
            max_processes=settings.max_processes, max_memory_mb=settings.max_memory_mb,
            runner=ctx.process_runner, on_output=ctx.output if ctx.watched else None,
        )

    return Tool(
        name="terminal",
        description=(
            "Run a shell command with bash -lc in the work directory. Returns stdout, stderr "
            "and '[exit N]'. Default timeout 60000 ms, maximum 300000 ms; on timeout or "
            "cancellation the command and everything it started are killed. A job put in the "
            "background with '&' keeps running after the call returns (it is not killed "
            "later); if it keeps stdout/stderr open the call returns 0.5 s after the command "
            "and the job's later output is discarded, so redirect it: 'server > log 2>&1 &'."
        ),
        parameters=schema(
            {
                "command": {"type": "string", "description": "The bash command line."},
                "timeout_ms": {
                    "type": "integer",
                    "description": "Timeout in milliseconds (default 60000, max 300000).",
                },
            },
            ["command"],
        ),
        execute=execute,
        # The executor's limit sits just above the tool's own maximum, so the
        # tool's deadline (with its partial output) normally fires first.
        timeout_s=TOOL_TIMEOUT_S,
        max_output_chars=OUTPUT_CAP_CHARS,
        requires_approval=True,
        primary_arg="command",
        primary_kind="shell",
    )


def _argv(command: str, max_processes: int, max_memory_mb: int) -> list[str]:
    """``bash -lc command``, behind ``ulimit`` when a limit is set.

    The limits are set by a first bash that then ``exec``-s the command's
    bash (same pid), so they hold from the command's first instruction: no
    ``preexec_fn`` (unsafe with threads), no window before a ``prlimit``.
    ``ulimit`` without ``-S``/``-H`` sets both: the command cannot raise them.
    """
    if not max_processes and not max_memory_mb:
        return ["bash", "-lc", command]
    limits: list[str] = []
    if max_processes:
        limits.append(f"ulimit -u {int(max_processes)}")
    if max_memory_mb:
        limits.append(f"ulimit -v {int(max_memory_mb) * 1024}")  # ulimit -v counts KiB
    script = " && ".join(limits) + ' && exec bash -lc "$1"'
    return ["bash", "-c", script, "bash", command]


async def _record(procs: CallProcesses) -> None:
    """Record the call's processes while it runs, so a detached one is still known."""
    while True:
        await asyncio.sleep(POLL_S)
        procs.scan(marked=False)


def _kill_call(procs: CallProcesses, proc: asyncio.subprocess.Process) -> None:
    """Kill everything the call started: its group, and every process found by
    :meth:`CallProcesses.kill_all` (``setsid`` children included)."""
    procs.kill_all()
    kill_process(proc, group=True)


def _in_thread(fn: Callable[[], object]) -> asyncio.Future[None]:
    """Run ``fn`` in a daemon thread; a future of the loop that is done when it is.

    The kill scans ``/proc`` a few times: seconds on a loaded machine, which on the
    event loop would block the deadline the call must answer by.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    def target() -> None:
        try:
            fn()
        finally:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle)

    threading.Thread(target=target, name="lich-terminal-kill", daemon=True).start()
    return done


async def _stop_call(
    procs: CallProcesses, proc: asyncio.subprocess.Process, readers: list[_CappedPipe],
    deadline: Deadline,
) -> int:
    """Kill the timed-out call and wait for its shell and pipes, every wait bounded
    by ``deadline.end``: what is not done by then goes on without us (the kill in
    its thread, the reaping by asyncio's child watcher), and the partial output is
    returned in time. The exit code, -1 when the shell was not reaped by then."""
    killing = _in_thread(lambda: _kill_call(procs, proc))
    await asyncio.wait([killing], timeout=deadline.grace())
    if killing.done():
        waiting = asyncio.ensure_future(proc.wait())
        await asyncio.wait([waiting], timeout=deadline.grace())
        if not waiting.done():
            waiting.cancel()
    if readers:
        await asyncio.wait([r.closed for r in readers],
                           timeout=min(_PIPE_GRACE_S, deadline.grace()))
    code = proc.returncode
    return -1 if code is None else code


def _spawn_failed(exc: BaseException) -> ToolError:
    return ToolError(f"spawn_failed: {exc}")


async def run_command(
    command: str, cwd: str, env: dict[str, str], deadline: Deadline | float, cap: int,
    *, max_processes: int = 0, max_memory_mb: int = 0, runner: ProcessRunner = DIRECT,
    on_output: Callable[[str], None] | None = None,
) -> ToolResult:
    """Run ``command`` through ``runner``; on timeout or cancellation kill every
    process it started.

    ``deadline`` (or a number of seconds from now, with the same time to clean
    up after) says when the command is stopped and by when the call returns, its
    partial output with it, however long killing takes. ``max_processes`` and
    ``max_memory_mb`` (0 = unlimited) become the command's ``RLIMIT_NPROC`` and
    ``RLIMIT_AS``. ``on_output`` receives stdout and stderr as text as they
    arrive (the tool's ``ctx.output``), until the call returns.
    """
    if not isinstance(deadline, Deadline):
        now = asyncio.get_running_loop().time()
        deadline = Deadline(stop=now + deadline, end=now + 2 * deadline)
    procs = CallProcesses()
    spec = Launch(argv=_argv(command, max_processes, max_memory_mb), env=procs.env(env),
                  cwd=cwd, kind="terminal", owner="terminal")
    stack = contextlib.AsyncExitStack()
    try:
        run = await stack.enter_async_context(launched(runner, spec))
    except ToolError:
        raise
    except Exception as exc:
        raise _spawn_failed(exc) from exc
    async with stack:
        return await _run(run, procs, deadline, cap, on_output)


async def _run(run: Launch, procs: CallProcesses, deadline: Deadline, cap: int,
               on_output: Callable[[str], None] | None) -> ToolResult:
    loop = asyncio.get_running_loop()
    recorder: asyncio.Task[None] | None = None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    unowned = {out_r, out_w, err_r, err_w}  # fds nobody else will close for us
    readers: list[_CappedPipe] = []
    transports: list[asyncio.ReadTransport] = []
    proc: asyncio.subprocess.Process | None = None
    timed_out = False
    killed = False  # a kill was started (it may still be running in its thread)
    finished = False  # bash exited by itself: pipes still open belong to background jobs
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                *run.argv,
                cwd=run.cwd, env=dict(run.env),
                # No descriptor of lich's reaches the command but 0-2 and what the
                # runner asked for (the default, said here because it is what keeps
                # lich's files from the command).
                close_fds=True, pass_fds=run.pass_fds,
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w,
                start_new_session=True,
                # The shell becomes a subreaper: what double-forks or setsid-s away is
                # re-parented to it, so the kill below still finds it (see _procs).
                preexec_fn=subreaper_preexec(),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise _spawn_failed(exc) from exc
        except ValueError as exc:
            # A NUL byte ("embedded null byte") or a lone surrogate (UnicodeEncodeError)
            # cannot be passed to a program: the model's command is at fault, say so.
            raise ToolError(f"invalid_arg: command: {exc}") from exc
        else:
            # Known as the call's root at once: a cancel that arrives while the pipes
            # are still being connected must find (and kill) what bash already started,
            # setsid children included — with no root, the kill scanned nothing.
            procs.root = proc.pid
        finally:
            # The child has its copies; ours must go or EOF never comes.
            for fd in (out_w, err_w):
                os.close(fd)
                unowned.discard(fd)
        for fd in (out_r, err_r):
            reader = _CappedPipe(STREAM_CAP_CHARS * 4, on_output)
            pipe_file = os.fdopen(fd, "rb", 0)
            unowned.discard(fd)
            try:
                transport, _ = await loop.connect_read_pipe(_factory(reader), pipe_file)
            except BaseException:
                pipe_file.close()
                raise
            readers.append(reader)
            transports.append(transport)
        if procs.available:
            recorder = asyncio.create_task(_record(procs))
        try:
            async with asyncio.timeout_at(deadline.stop):
                code = await proc.wait()
                await asyncio.wait([r.closed for r in readers], timeout=_PIPE_GRACE_S)
                finished = True
        except TimeoutError:
            timed_out = True
            if recorder is not None:
                recorder.cancel()  # the kill scans from its own thread now
            killed = True
            code = await _stop_call(procs, proc, readers, deadline)
    except asyncio.CancelledError:
        # The executor gave up on us (its own timeout) or the run was cancelled:
        # kill the group, reap bash (bounded), and let the cancellation go on.
        if proc is not None and not killed:
            killed = True
            _kill_call(procs, proc)
            await reap(proc, group=True)
        raise
    finally:
        if recorder is not None:
            recorder.cancel()
        if proc is not None and proc.returncode is None and not killed:
            _kill_call(procs, proc)  # any other way out must not leave it running
        for fd in unowned:
            with contextlib.suppress(OSError):
                os.close(fd)
        for reader, transport in zip(readers, transports, strict=True):
            if finished and not reader.closed.done():
                reader.detach()
            else:
                transport.close()
    exit_code = code if code >= 0 else -1
    body = readers[0].text("stdout", STREAM_CAP_CHARS) + readers[1].text("stderr", STREAM_CAP_CHARS)
    for reader in readers:
        reader.chunks.clear()  # a detached reader lives on; its output is in ``body`` now
    trailer = f"\n[exit {exit_code}]"
    if len(body) + len(trailer) > cap:
        # Keep the exit line visible whatever the cap: truncate the body, not the trailer.
        body = truncate_text(body, max(0, cap - len(trailer) - 60))
    output = body + trailer
    if timed_out:
        return ToolResult.failure("timeout", output)
    return ToolResult(ok=exit_code == 0, output=output)
